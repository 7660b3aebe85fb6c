//! `tokio-host READY_FILE GUARDIAN ARGS...`: spawns `GUARDIAN ARGS...` with `kill_on_drop(true)`
//! and `process_group(0)` on a current-thread runtime, waits until READY_FILE exists (the
//! provider wrote it), then drops the runtime with the child still owned by it: tokio SIGKILLs
//! the child at once. Prints the child's pid on stdout first.

use std::path::Path;
use std::time::Duration;

fn main() {
    let mut args = std::env::args_os().skip(1);
    let ready = args.next().expect("READY_FILE");
    let program = args.next().expect("GUARDIAN");
    let rest: Vec<_> = args.collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let child = rt.block_on(async {
        let child = tokio::process::Command::new(program)
            .args(rest)
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .expect("spawn guardian");
        println!("{}", child.id().expect("pid"));
        child
    });
    // A task owns the child, as a client's transport does.
    rt.spawn(async move {
        let _child = child;
        std::future::pending::<()>().await
    });
    for _ in 0..3000 {
        if Path::new(&ready).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The runtime is dropped while the task still owns the child (a host that exits with a
    // client open): the task is dropped, and with it the child (kill_on_drop: SIGKILL).
    drop(rt);
}
