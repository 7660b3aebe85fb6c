//! The tokio API: spawn_async, next_event, kill_now, wait, and a drop outside any runtime.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{Sweep, gone_within, guardian, nonce, present_within};
use tokio::io::AsyncReadExt;
use treeguardian_client::{Command, Event};

const LIMIT: Duration = Duration::from_secs(20);

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).guardian(guardian());
    cmd
}

#[tokio::test]
async fn events_kill_now_and_wait() {
    let tag = nonce("async");
    let _sweep = Sweep(tag.clone());
    let script =
        format!("trap '' TERM; setsid sh -c \"trap '' TERM; sleep 300; : {tag}\" & echo up; sleep 300; : {tag}");
    let mut child = sh(&script)
        .stdout(std::process::Stdio::piped())
        .grace(Duration::from_secs(600))
        .spawn_async()
        .await
        .expect("spawn");
    let mut first = [0u8; 3];
    child.stdout.as_mut().unwrap().read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"up\n");
    assert!(matches!(child.next_event().await, Some(Event::Spawned { .. })));
    assert!(present_within(&tag, 2, LIMIT));
    child.kill_now().await.expect("kill_now");
    let mut provider_signal = None;
    while let Some(e) = child.next_event().await {
        if let Event::Exit { signal, .. } = e {
            provider_signal = signal;
        }
    }
    // It ignores SIGTERM and the grace is 600 s: only the kill-now SIGKILL ends it.
    assert_eq!(provider_signal.as_deref(), Some("SIGKILL"));
    child.wait().await.expect("released");
    gone_within(&tag, LIMIT).expect("nothing left");
}

/// An AsyncChild dropped after its runtime is gone: no runtime is needed to stop the tree.
#[test]
fn dropped_after_the_runtime() {
    let tag = nonce("async-drop");
    let _sweep = Sweep(tag.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let child = rt
        .block_on(sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}")).spawn_async())
        .expect("spawn");
    assert!(present_within(&tag, 2, LIMIT));
    drop(rt);
    drop(child);
    gone_within(&tag, LIMIT).expect("nothing left");
}

/// `stop()` right after `spawn_async` (guardian may not have set its signals up yet): a stop
/// request all the same, every time: `released`, nothing left.
#[tokio::test]
async fn stop_right_after_spawn_is_a_stop_request() {
    let tag = nonce("async-early-stop");
    let _sweep = Sweep(tag.clone());
    for round in 0..10 {
        let child = sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}"))
            .grace(Duration::from_secs(5))
            .spawn_async()
            .await
            .expect("spawn");
        child.stop().expect("stop");
        let released = child.wait().await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(released.exit_status.and_then(|s| s.signal()), Some(libc::SIGTERM), "round {round}");
        gone_within(&tag, LIMIT).expect("nothing left");
    }
}
