//! Spawn-to-first-byte, side by side in one run: a stdio server started by a plain
//! `tokio::process::Command`, by `tokio::process::Command` with `guardian --` prefixed (guardian's
//! own start-up), the same with `--events-fd 2` (guardian writing its events), and by this crate
//! (`treeguardian_client::tokio::Command::spawn`, which also resolves the program as execvp
//! would, makes the events pipe and passes it). Rounds interleave
//! the four in a shuffled order; medians and p90 in milliseconds.
//!
//! `GUARDIAN_BIN=target/dist/guardian cargo run --release -p treeguardian-client --example bench -- [ROUNDS] [SERVER ARGS...]`
//! The server defaults to `sh -c 'echo ready; exec cat'` (a stdio server: first byte, then it
//! reads its stdin until EOF).

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

fn guardian() -> std::path::PathBuf {
    match std::env::var_os("GUARDIAN_BIN") {
        Some(p) => p.into(),
        None => std::path::PathBuf::from("guardian"),
    }
}

async fn first_byte(mut stdout: impl tokio::io::AsyncRead + Unpin) {
    let mut b = [0u8; 1];
    stdout.read_exact(&mut b).await.expect("first byte");
}

/// `prefix`: 0 plain, 1 `guardian --`, 2 `guardian --events-fd 2 --` (events on a stderr pipe:
/// guardian's start-up with its events, without this crate).
async fn plain(server: &[String], prefix: u8) -> Duration {
    let start = Instant::now();
    let mut cmd = if prefix > 0 {
        let mut c = tokio::process::Command::new(guardian());
        if prefix == 2 {
            c.args(["--events-fd", "2"]).stderr(Stdio::piped());
        }
        c.arg("--").args(server);
        c
    } else {
        let mut c = tokio::process::Command::new(&server[0]);
        c.args(&server[1..]);
        c
    };
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
    first_byte(child.stdout.take().expect("stdout")).await;
    let took = start.elapsed();
    drop(child.stdin.take());
    child.wait().await.expect("wait");
    took
}

async fn crate_spawn(server: &[String]) -> Duration {
    let start = Instant::now();
    let mut cmd = treeguardian_client::tokio::Command::new(&server[0]);
    cmd.args(&server[1..]).guardian(guardian()).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn under guardian");
    first_byte(child.stdout.take().expect("stdout")).await;
    let took = start.elapsed();
    child.wait().await.expect("released");
    took
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let mut server: Vec<String> = args.collect();
    if server.is_empty() {
        server = vec!["sh".into(), "-c".into(), "echo ready; exec cat".into()];
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..5 {
            plain(&server, 0).await;
            plain(&server, 1).await;
            plain(&server, 2).await;
            crate_spawn(&server).await;
        }
        // A fresh order each round (a fixed-seed xorshift): a way that always follows another
        // inherits its after-effects (the previous guardian's exit, cache state).
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut order = [0usize, 1, 2, 3];
        for _ in 0..rounds {
            for i in (1..order.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                order.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            for way in order {
                match way {
                    0 => a.push(plain(&server, 0).await),
                    1 => b.push(plain(&server, 1).await),
                    2 => d.push(plain(&server, 2).await),
                    _ => c.push(crate_spawn(&server).await),
                }
            }
        }
    });
    let (pa, pa90) = stats(a);
    let (pb, pb90) = stats(b);
    let (pc, pc90) = stats(c);
    let (pd, pd90) = stats(d);
    println!("server: {server:?}; guardian: {}; {rounds} rounds", guardian().display());
    println!("{:<44} {:>10} {:>10}", "spawn to first byte", "median ms", "p90 ms");
    println!("{:<44} {pa:>10.3} {pa90:>10.3}", "tokio::process::Command (plain)");
    println!("{:<44} {pb:>10.3} {pb90:>10.3}", "tokio::process::Command, `guardian --` prefix");
    println!("{:<44} {pd:>10.3} {pd90:>10.3}", "the same, `guardian --events-fd 2 --`");
    println!("{:<44} {pc:>10.3} {pc90:>10.3}", "treeguardian_client::tokio::Command::spawn");
    let own = pb - pa;
    let ours = pc - pa;
    println!(
        "guardian's own start-up {own:.3} ms; through the crate {ours:.3} ms ({:.0} % of guardian's; goal <= 110 %)",
        if own > 0.0 { ours / own * 100.0 } else { f64::NAN }
    );
    let with_events = pd - pa;
    println!(
        "guardian's start-up with its events on a pipe {with_events:.3} ms; through the crate {:.0} % of that",
        if with_events > 0.0 { ours / with_events * 100.0 } else { f64::NAN }
    );
}
