//! The tokio API: spawn, next_event, kill, wait in a select! with stop, and a drop outside any runtime.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{Sweep, gone_within, guardian, nonce, present_within};
use tokio::io::AsyncReadExt;
use treeguardian_client::Event;
use treeguardian_client::tokio::Command;

const LIMIT: Duration = Duration::from_secs(20);

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).guardian(guardian());
    cmd
}

#[tokio::test]
async fn events_kill_and_wait() {
    let tag = nonce("async");
    let _sweep = Sweep(tag.clone());
    let script =
        format!("trap '' TERM; setsid sh -c \"trap '' TERM; sleep 300; : {tag}\" & echo up; sleep 300; : {tag}");
    let mut child =
        sh(&script).stdout(std::process::Stdio::piped()).grace(Duration::from_secs(20)).spawn().expect("spawn");
    let mut first = [0u8; 3];
    child.stdout.as_mut().unwrap().read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"up\n");
    assert!(matches!(child.next_event().await, Some(Event::Spawned { .. })));
    assert!(present_within(&tag, 2, LIMIT));
    child.start_kill().expect("start_kill");
    let mut provider_signal = None;
    while let Some(e) = child.next_event().await {
        if let Event::Exit { signal, .. } = e {
            provider_signal = signal;
        }
    }
    // It ignores SIGTERM and the grace is 20 s: only the kill request's SIGKILL ends it.
    assert_eq!(provider_signal.as_deref(), Some("SIGKILL"));
    let status = child.wait().await.expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    gone_within(&tag, LIMIT).expect("nothing left");
}

/// An AsyncChild dropped after its runtime is gone: no runtime is needed to stop the tree.
#[test]
fn dropped_after_the_runtime() {
    let tag = nonce("async-drop");
    let _sweep = Sweep(tag.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let child = rt
        .block_on(async { sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}")).spawn() })
        .expect("spawn");
    assert!(present_within(&tag, 2, LIMIT));
    drop(rt);
    drop(child);
    gone_within(&tag, LIMIT).expect("nothing left");
}

/// `stop()` right after `spawn` (guardian may not have set its signals up yet): a stop
/// request all the same, every time: `released`, nothing left.
#[tokio::test]
async fn stop_right_after_spawn_is_a_stop_request() {
    let tag = nonce("async-early-stop");
    let _sweep = Sweep(tag.clone());
    for round in 0..10 {
        let mut child = sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}"))
            .grace(Duration::from_secs(5))
            .spawn()
            .expect("spawn");
        child.stop().expect("stop");
        let released = child.wait_released().await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(released.exit_status.and_then(|s| s.signal()), Some(libc::SIGTERM), "round {round}");
        gone_within(&tag, LIMIT).expect("nothing left");
    }
}

/// `wait(&mut self)` in one `tokio::select!` branch and `stop()` in another (the shape a host
/// writes with `tokio::process::Child`): compiles, and the stop ends the wait; a cancelled
/// wait loses nothing (the next one returns the status), and `released` is reachable after.
#[tokio::test]
async fn wait_in_select_with_stop() {
    let tag = nonce("select");
    let _sweep = Sweep(tag.clone());
    let mut child = sh(&format!("sleep 300; : {tag}")).spawn().expect("spawn");
    let handle = child.released_handle();
    tokio::select! {
        _ = child.wait() => panic!("the provider sleeps"),
        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
    }
    assert!(child.id().is_some(), "not reaped yet");
    let stop = async {
        assert!(present_within(&tag, 1, LIMIT));
        child.stop()
    };
    stop.await.expect("stop");
    let status = tokio::select! {
        status = child.wait() => status.expect("wait"),
        _ = tokio::time::sleep(LIMIT) => panic!("the stop did not end the wait"),
    };
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    assert_eq!(child.id(), None, "reaped");
    assert_eq!(child.released().map(|r| r.status), Some(128 + libc::SIGTERM));
    assert!(handle.get().is_some_and(|r| r.exit_status == Some(status)));
    gone_within(&tag, LIMIT).expect("nothing left");
}
