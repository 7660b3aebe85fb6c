//! Restricted `/proc` and descendants guardian may not signal (root tests: they mount a
//! procfs in a private mount namespace). guardian runs as uid 65534 with only CAP_SETUID and
//! CAP_SETGID (ambient, so its provider can hand a child to another uid, as a setuid program
//! would); it has no CAP_KILL and no CAP_SYS_PTRACE. With `hidepid=2`, that child is invisible
//! to guardian as well as unkillable.
//!
//! The policy under test (docs/threat-model.md): guardian releases only after ECHILD; a
//! descendant it cannot signal is named in the `error` event's `unkillable` when it is visible,
//! and after SIGKILL plus a bounded wait without progress, guardian exits 125 with `error`
//! instead of `released`. It never claims the tree is gone and never hangs.

use crate::harness::*;

/// guardian with `-vv --grace 300ms`, run by `unshare -m` + a fresh procfs (with `hidepid`, if
/// given) + setpriv to 65534 with ambient CAP_SETUID/CAP_SETGID.
fn restricted<'a>(ctx: &'a Ctx, hidepid: Option<&str>, provider: &str) -> Builder<'a> {
    let mount = match hidepid {
        Some(opt) => format!("mount -t proc -o hidepid={opt} proc /proc && "),
        None => String::new(),
    };
    let script = format!(
        "{mount}exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --inh-caps=+setuid,+setgid \
         --ambient-caps=+setuid,+setgid -- \"$@\""
    );
    ctx.guardian()
        .privileged()
        .wrapper(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", &script, "sh"])
        .args(["-vv", "--grace", "300ms"])
        .command(["sh", "-c", provider])
}

/// A child that moved to another uid, an ordinary setsid escapee and a TERM-ignoring child
/// (so SIGKILL is always sent); the provider is a sleep stopped by a forwarded SIGTERM.
fn script(ctx: &Ctx, other_uid: u32) -> String {
    format!(
        "setpriv --reuid={other_uid} --regid={other_uid} --clear-groups {s} & setsid env -i {s} & \
         (trap '' TERM; {s}) & exec {s}",
        s = ctx.sleep()
    )
}

fn other_uid() -> u32 {
    41_000 + std::process::id() % 20_000
}

/// Visible but unkillable: named in `unkillable`, exit 125, no `released`.
#[test]
fn unkillable_descendant_is_named_and_bounded() {
    need_root!("mount /proc");
    let ctx = Ctx::new("restricted");
    let uid = other_uid();
    let mut g = restricted(&ctx, None, &script(&ctx, uid)).spawn();
    g.wait_event_named("spawned");
    let sleeps = ctx.wait_sleeps(4);
    let foreign = sleeps.iter().find(|p| p.uid == uid).expect("the sleep of the other uid").pid;
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.code, Some(125), "{f:#?}");
    assert!(f.named("released").is_empty(), "never claims the tree is gone: {f:#?}");
    let err = f.one("error");
    assert_eq!(err["status"], 125);
    let named: Vec<i64> = err["unkillable"].as_array().expect("unkillable").iter().filter_map(|v| v.as_i64()).collect();
    assert_eq!(named, vec![foreign as i64], "{f:#?}");
    assert_eq!(f.events.last().map(|e| e["event"].clone()), Some("error".into()), "error is the last line");
    // Everything guardian could signal is gone; only the foreign sleep remains.
    let left: Vec<i32> = ctx.sleeps().iter().map(|p| p.pid).collect();
    assert_eq!(left, vec![foreign], "{f:#?}");
}

/// Invisible (hidepid=2) and unkillable: guardian cannot name it, but ECHILD does not come,
/// so it still refuses to release: exit 125, `error` says others may be hidden.
#[test]
fn hidden_descendant_is_never_declared_gone() {
    need_root!("mount /proc");
    let ctx = Ctx::new("restricted");
    let uid = other_uid() + 1;
    let mut g = restricted(&ctx, Some("2"), &script(&ctx, uid)).spawn();
    g.wait_event_named("spawned");
    let sleeps = ctx.wait_sleeps(4);
    let foreign = sleeps.iter().find(|p| p.uid == uid).expect("the sleep of the other uid").pid;
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.code, Some(125), "{f:#?}");
    assert!(f.named("released").is_empty(), "{f:#?}");
    let err = f.one("error");
    assert_eq!(err["unkillable"], serde_json::json!([]), "hidden, so not even seen: {f:#?}");
    assert!(err["message"].as_str().unwrap_or("").contains("hidden"), "{f:#?}");
    let left: Vec<i32> = ctx.sleeps().iter().map(|p| p.pid).collect();
    assert_eq!(left, vec![foreign], "{f:#?}");
}

/// Hidden, and it exits while guardian waits after SIGKILL: guardian reaps it (it is still
/// guardian's child) and releases normally, only then, with the provider's status.
#[test]
fn hidden_descendant_release_waits_for_echild() {
    need_root!("mount /proc");
    let ctx = Ctx::new("restricted");
    let uid = other_uid() + 2;
    let mut g = restricted(&ctx, Some("invisible"), &script(&ctx, uid)).spawn();
    let spawned = g.wait_event_named("spawned");
    let sleeps = ctx.wait_sleeps(4);
    let foreign = sleeps.iter().find(|p| p.uid == uid).expect("the sleep of the other uid").pid;
    g.signal(libc::SIGTERM);
    // SIGKILL went to everything guardian could see; the foreign sleep is still there and
    // guardian has not released.
    g.wait_event("a SIGKILL", |e| e["event"] == "signal" && e["signal"] == "SIGKILL");
    assert!(proc_info(foreign).is_some_and(|p| p.state != 'Z'), "the hidden child is alive");
    assert!(g.events().iter().all(|e| e["event"] != "released"), "released before ECHILD: {:?}", g.events());
    // Its end (here: the root test kills it) is what lets guardian release.
    assert!(signal_tagged(foreign, &ctx.nonce, libc::SIGKILL));
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["reaped"].as_u64().unwrap_or(0) >= 1, "{f:#?}");
    assert_eq!(f.one("exit")["pid"], spawned["pid"]);
    ctx.assert_nothing_left();
}
