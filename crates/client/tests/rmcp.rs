//! The rmcp client over `GuardianTransport`, against a real MCP server process: connect, a tool
//! call, `cancel()`, a dropped client, a server that ignores SIGTERM and stdin EOF with a
//! `setsid` helper that ignores SIGTERM too, a dropped runtime, and 20 reconnects. After each,
//! no process tagged with the test's nonce may be left (a /proc scan).
//!
//! Its own main (`harness = false`): started with `--server MODE TAG` this binary is the MCP
//! server (JSON-RPC lines on stdio, the three methods rmcp's client uses here), with
//! `--sleep TAG` the helper it starts in a new session. A hand-written server keeps the build
//! small (no rmcp server feature, no schemars) and needs no Node.

mod common;

use std::io::{BufRead, Write};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use common::{Sweep, gone_within, guardian, nonce, present_within, tagged};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use treeguardian_client::{Command, GuardianTransport};

const LIMIT: Duration = Duration::from_secs(20);

/// The MCP server: starts its helper (`setsid`), then answers until stdin closes; `hostile`
/// then keeps running (and both ignore SIGTERM: the `sh` wrapper set SIG_IGN before exec).
fn server(mode: &str, tag: &str) {
    let exe = std::env::current_exe().expect("current_exe");
    // Never waited for on purpose: the helper outlives the server; guardian reaps it.
    #[allow(clippy::zombie_processes)]
    let _helper = std::process::Command::new("setsid")
        .arg(&exe)
        .args(["--sleep", tag])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("setsid helper");
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        let Some(id) = msg.get("id").cloned() else { continue }; // a notification
        let result = match msg["method"].as_str().unwrap_or("") {
            "initialize" => serde_json::json!({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tgc-test-server", "version": "0.0.0"}
            }),
            "tools/call" => {
                serde_json::json!({"content": [{"type": "text", "text": format!("pong {}", std::process::id())}]})
            }
            "tools/list" => serde_json::json!({"tools": []}),
            "ping" => serde_json::json!({}),
            _ => {
                let err = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}});
                let _ = writeln!(stdout.lock(), "{err}");
                continue;
            }
        };
        let reply = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
        let mut out = stdout.lock();
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    if mode == "hostile" {
        std::thread::sleep(Duration::from_secs(300));
    }
}

/// The server under guardian; `hostile` ignores SIGTERM (set before exec, inherited by its
/// helper) and stdin EOF.
fn server_command(mode: &str, tag: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new("sh");
    let trap = if mode == "hostile" { "trap '' TERM; " } else { "" };
    cmd.arg("-c")
        .arg(format!("{trap}exec \"$0\" --server {mode} {tag}"))
        .arg(exe)
        .guardian(guardian())
        .grace(Duration::from_millis(500));
    cmd
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn connect(mode: &str, tag: &str) -> Client {
    let transport = GuardianTransport::spawn(&mut server_command(mode, tag)).await.expect("spawn under guardian");
    ().serve(transport).await.expect("MCP initialize")
}

async fn call(client: &Client) -> String {
    let result = client.call_tool(CallToolRequestParams::new("ping")).await.expect("tools/call");
    serde_json::to_value(&result.content).expect("content")[0]["text"].as_str().unwrap_or("").to_string()
}

fn connect_call_cancel() {
    let tag = nonce("cancel");
    let _sweep = Sweep(tag.clone());
    runtime().block_on(async {
        let transport = GuardianTransport::spawn(&mut server_command("coop", &tag)).await.expect("spawn");
        let released = transport.released_handle();
        let client = ().serve(transport).await.expect("MCP initialize");
        assert!(call(&client).await.starts_with("pong "));
        assert!(present_within(&tag, 2, LIMIT), "server and helper run");
        client.cancel().await.expect("cancel");
        // close() returned after guardian released the tree: nothing may be left now.
        assert_eq!(tagged(&tag), Vec::<i32>::new(), "left after cancel()");
        // The figures after cancel() (issue 30.4): the helper was reaped by guardian.
        let released = released.get().expect("released after cancel()");
        assert!(released.reaped >= 1 && released.exit_status.is_some(), "{released:?}");
    });
}

/// rmcp's own `TokioChildProcess`, given the driver's `tokio::Command` (the one-line change
/// for a host that used it): connect, call, cancel (rmcp's graceful shutdown: stdin closed,
/// then the stop request, then the kill request), and nothing left; `released` reachable.
fn tokio_child_process_with_the_driver() {
    use rmcp::transport::TokioChildProcess;
    let tag = nonce("pwrap");
    let _sweep = Sweep(tag.clone());
    runtime().block_on(async {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = treeguardian_client::tokio::Command::new(&exe);
        cmd.args(["--server", "coop", &tag]).guardian(guardian()).grace(Duration::from_millis(500));
        let transport = TokioChildProcess::new(cmd).expect("TokioChildProcess");
        let client = ().serve(transport).await.expect("MCP initialize");
        assert!(call(&client).await.starts_with("pong "));
        assert!(present_within(&tag, 2, LIMIT), "server and helper run");
        client.cancel().await.expect("cancel");
        gone_within(&tag, LIMIT).expect("left after cancel()");

        // The same through process-wrap's wrapper on a plain tokio command, dropped.
        let mut plain = tokio::process::Command::new(&exe);
        plain.args(["--server", "hostile", &tag]);
        let mut wrap = process_wrap::tokio::CommandWrap::from(plain);
        let mut options = treeguardian_client::tokio::Command::new("unused");
        options.guardian(guardian()).grace(Duration::from_millis(500));
        let guardian_wrap = treeguardian_client::wrap::Guardian::with(options);
        let released = guardian_wrap.released_handle();
        wrap.wrap(guardian_wrap);
        let transport = TokioChildProcess::new(wrap).expect("TokioChildProcess");
        let client = ().serve(transport).await.expect("MCP initialize");
        assert!(call(&client).await.starts_with("pong "));
        assert!(present_within(&tag, 2, LIMIT));
        drop(client);
        gone_within(&tag, LIMIT).expect("left after drop");
        let end = Instant::now() + LIMIT;
        while !released.is_finished() && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(released.get().is_some(), "released after a drop");
    });
}

/// A dropped client with a server that would outlive stdin EOF: only guardian's stop request,
/// sent by the transport's drop, ends it.
fn dropped_client() {
    let tag = nonce("drop");
    let _sweep = Sweep(tag.clone());
    runtime().block_on(async {
        let client = connect("hostile", &tag).await;
        assert!(call(&client).await.starts_with("pong "));
        assert!(present_within(&tag, 2, LIMIT));
        drop(client);
    });
    gone_within(&tag, LIMIT).expect("left after drop");
}

fn term_ignoring_server_with_setsid_child() {
    let tag = nonce("hostile");
    let _sweep = Sweep(tag.clone());
    let took = runtime().block_on(async {
        let client = connect("hostile", &tag).await;
        assert!(call(&client).await.starts_with("pong "));
        assert!(present_within(&tag, 2, LIMIT));
        let start = Instant::now();
        client.cancel().await.expect("cancel");
        assert_eq!(tagged(&tag), Vec::<i32>::new(), "left after cancel()");
        start.elapsed()
    });
    println!("    (hostile server closed in {took:?}: 1 s for stdin EOF, 0.5 s grace, then SIGKILL)");
}

fn runtime_drop() {
    let tag = nonce("rtdrop");
    let _sweep = Sweep(tag.clone());
    let rt = runtime();
    let client = rt.block_on(async {
        let client = connect("hostile", &tag).await;
        assert!(call(&client).await.starts_with("pong "));
        client
    });
    assert!(present_within(&tag, 2, LIMIT));
    // The service task still owns the transport: dropping the runtime drops it without any
    // async cleanup (rmcp's own transport would SIGKILL guardian here, or do nothing).
    drop(rt);
    drop(client);
    gone_within(&tag, LIMIT).expect("left after the runtime was dropped");
}

fn twenty_reconnects() {
    let tag = nonce("reconnect");
    let _sweep = Sweep(tag.clone());
    runtime().block_on(async {
        // Even rounds: a cooperative server, closed with cancel(); odd: a hostile one, dropped.
        for i in 0..20 {
            let client = connect(if i % 2 == 0 { "coop" } else { "hostile" }, &tag).await;
            assert!(call(&client).await.starts_with("pong "), "round {i}");
            if i % 2 == 0 {
                client.cancel().await.expect("cancel");
            } else {
                drop(client);
            }
        }
    });
    gone_within(&tag, LIMIT).expect("left after 20 reconnects");
}

const TESTS: &[(&str, fn())] = &[
    ("connect_call_cancel", connect_call_cancel),
    ("tokio_child_process_with_the_driver", tokio_child_process_with_the_driver),
    ("dropped_client", dropped_client),
    ("term_ignoring_server_with_setsid_child", term_ignoring_server_with_setsid_child),
    ("runtime_drop", runtime_drop),
    ("twenty_reconnects", twenty_reconnects),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--server") => return server(&args[1], &args[2]),
        Some("--sleep") => return std::thread::sleep(Duration::from_secs(300)),
        _ => {}
    }
    // libtest-style: positional arguments filter by name; flags are ignored.
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> =
        TESTS.iter().filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| n.contains(f.as_str()))).collect();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, test) in chosen {
        let start = Instant::now();
        let ok = std::panic::catch_unwind(AssertUnwindSafe(test)).is_ok();
        println!("test {name} ... {} ({:.1?})", if ok { "ok" } else { "FAILED" }, start.elapsed());
        if !ok {
            failed.push(*name);
        }
    }
    if failed.is_empty() {
        println!("\ntest result: ok. {} passed", TESTS.len());
    } else {
        println!("\ntest result: FAILED: {failed:?}");
        std::process::exit(101);
    }
}
