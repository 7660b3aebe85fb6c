//! cgroup mode's teardown: what is in the leaf (guardian's children, their `setsid`
//! descendants, a fork storm, a process whose main thread exited, nests deeper than PATH_MAX)
//! is stopped, killed through `cgroup.kill` and removed with the leaf; what left the leaf is
//! killed as a descendant; guardians side by side do not touch each other's trees.

use std::path::Path;

use crate::harness::*;

use super::*;

#[test]
fn provider_and_setsid_descendant_start_in_the_leaf() {
    let (mount, cg, ctx) = delegated!("cg-leaf");
    let n = &ctx.nonce;
    let provider = format!("env -i setsid sleep 1000.{n}1 & exec sleep 1000.{n}2");
    let mut g = start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "1s", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    assert_eq!(leaf.parent(), Some(cg.path.as_path()), "the leaf is a child of the delegated cgroup");
    let name = leaf.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    assert!(name.starts_with(&format!("guardian-{}-", g.inner_pid())), "leaf name carries the guardian pid: {name}");
    assert_eq!(cgroup_of(g.pid()).as_deref(), Some(cg.rel().as_str()), "guardian stays outside its leaf");

    let leaf_rel = rel_of(&mount, &leaf);
    wait_for("both tagged sleeps run", || {
        (tagged_sleeps(&format!("{n}1")).len() == 1 && tagged_sleeps(&format!("{n}2")).len() == 1).then_some(())
    });
    let escaped = tagged_sleeps(&format!("{n}1"))[0];
    let provider_pid = tagged_sleeps(&format!("{n}2"))[0];
    assert_ne!(session_of(escaped), session_of(provider_pid), "the setsid descendant left the provider's session");
    assert_eq!(cgroup_of(escaped).as_deref(), Some(leaf_rel.as_str()), "env-clearing setsid descendant is in the leaf");
    assert_eq!(cgroup_of(provider_pid).as_deref(), Some(leaf_rel.as_str()), "provider is in the leaf");
    let environ = std::fs::read(format!("/proc/{escaped}/environ")).unwrap_or_default();
    assert!(environ.is_empty(), "env -i cleared the descendant's environment");

    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGTERM), "stderr: {}", f.stderr);
    assert_tree_gone(n, &leaf);
}

/// `released.killed` counts descendants that needed SIGKILL: a provider that is itself killed
/// at the deadline (it ignores the stop signal) is a member of the leaf, but not a descendant.
#[test]
fn killed_counts_descendants_not_the_provider() {
    let (_mount, cg, ctx) = delegated!("cg-killed");
    let n = &ctx.nonce;
    let provider = format!("trap '' TERM; sleep 1000.{n}1 & echo $$ > ready; while :; do wait; done");
    let mut g = start(&ctx, Some(&cg.path), &["--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &provider]);
    ctx.wait_pid_file("ready");
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGKILL), "the provider was SIGKILLed at the deadline; stderr: {}", f.stderr);
    let released = g.wait_event_named("released");
    assert_eq!(released["killed"], 1, "one descendant (the sleep) needed SIGKILL: {released}");
    assert!(tagged_sleeps(n).is_empty(), "the tree is gone");
}

#[test]
fn teardown_goes_through_cgroup_kill_and_removes_the_leaf() {
    let (_mount, cg, ctx) = delegated!("cg-kill");
    let n = &ctx.nonce;
    // The provider exits at once, leaving SIGTERM-ignoring processes, one of them in a new
    // session: only the kill after the grace period can stop them.
    let provider = format!(
        "trap '' TERM; sleep 1000.{n}1 & setsid sh -c 'sleep 1000.{n}2 & sleep 1000.{n}3' & \
         while [ ! -d /proc/$! ]; do :; done; exit 5"
    );
    let (f, leaf) =
        run_in_leaf(&ctx, &cg, &["-vv", "--cgroup", "auto", "--grace", "500ms", "--", "sh", "-c", &provider]);
    assert_eq!(f.code, Some(5), "stderr: {}", f.stderr);
    let kill = cgroup_kill(&f.events).unwrap_or_else(|| panic!("no cgroup SIGKILL event: {:?}", f.events));
    assert_eq!(kill["reason"], "kill");
    assert_eq!(kill["cgroup"], leaf.to_string_lossy().as_ref());
    assert!(f.stderr.contains("cgroup.kill"), "the -vv log names cgroup.kill: {}", f.stderr);
    let released = f.one("released");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
    assert_tree_gone(n, &leaf);
    assert!(cg.path.exists(), "guardian leaves the delegated parent alone");
}

/// A descendant moved out of the leaf below a member that ignores the stop signal, where
/// `cgroup.kill` cannot reach it: SIGKILLed once that member has died and it has come to
/// guardian (the round that follows the leaf's emptying). The round at the deadline does not
/// read the `children` of the members `cgroup.kill` has just killed.
#[test]
fn a_descendant_moved_out_of_the_leaf_below_a_member_is_killed() {
    let (_mount, cg, ctx) = delegated!("cg-outside");
    let n = &ctx.nonce;
    let outside = cg.path.join("outside");
    // The member (an inner sh, ignoring SIGTERM as its child does) keeps waiting for its
    // sleep, which the provider moves to a sibling cgroup of the leaf before exiting.
    let provider = format!(
        "trap '' TERM; mkdir {o} || exit 9; sh -c 'sleep 1000.{n}1 & echo $! > out.pid; while :; do wait; done' & \
         while [ ! -s out.pid ]; do :; done; cat out.pid > {o}/cgroup.procs || exit 8",
        o = outside.display()
    );
    let (f, leaf) =
        run_in_leaf(&ctx, &cg, &["-vv", "--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &provider]);
    let moved = ctx.wait_pid_file("out.pid");
    assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some(), "the leaf was killed: {:?}", f.events);
    let killed_outside = f.events.iter().any(|v| {
        v["event"] == "signal"
            && v["signal"] == "SIGKILL"
            && v["target"] == "descendants"
            && v["pids"].as_array().is_some_and(|p| p.iter().any(|x| x.as_i64() == Some(i64::from(moved))))
    });
    assert!(killed_outside, "the sleep outside the leaf ({moved}) was SIGKILLed as a descendant: {:?}", f.events);
    assert_tree_gone(n, &leaf);
}

/// Each member of the leaf hears the stop signal once: guardian's own child (signalled by
/// pid) and its child (through a verified pidfd), whatever the rescans during the grace.
#[test]
fn each_member_of_the_leaf_hears_the_stop_signal_once() {
    let (_mount, cg, ctx) = delegated!("cg-stop-once");
    let n = &ctx.nonce;
    // Once its sleep is gone the inner sh stops itself (no busy loop) until the SIGKILL. It
    // is ready only once its child has exec'd sleep: a SIGTERM that reached the child between
    // fork and exec would meet the sh's inherited trap and be lost at the exec, and the sleep
    // would then be killed at the deadline (the test's race, not guardian's).
    let inner = format!(
        "trap 'echo T >> count.log' TERM; sleep 1000.{n}1 & until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done; \
         echo $$ > ready; while :; do wait; kill -STOP $$; done\n"
    );
    std::fs::write(ctx.path("inner.sh"), inner).expect("write inner.sh");
    let provider = "sh inner.sh & while [ ! -s ready ]; do :; done; exit 4";
    let (f, leaf) = run_in_leaf(&ctx, &cg, &["--cgroup", "auto", "--grace", "1s", "--", "sh", "-c", provider]);
    assert_eq!(f.code, Some(4), "stderr: {}", f.stderr);
    let heard = std::fs::read_to_string(ctx.path("count.log")).unwrap_or_default();
    assert_eq!(heard.lines().count(), 1, "the inner sh's SIGTERMs: {heard:?}; events {:?}", f.events);
    let released = f.one("released");
    assert_eq!(released["signalled"], 2, "the inner sh and its sleep: {released}");
    assert_eq!(released["killed"], 1, "the inner sh survived SIGTERM: {released}");
    assert_tree_gone(n, &leaf);
}

#[test]
fn concurrent_guardians_do_not_kill_each_other() {
    let (_mount, cg, (ca, cb)) = delegated_pair!("cg-a", "cg-b");
    let (na, nb) = (&ca.nonce, &cb.nonce);
    let mut b = start(
        &cb,
        Some(&cg.path),
        &["--cgroup", "auto", "--", "sh", "-c", &format!("sleep 1000.{nb}1 & sleep 1000.{nb}2")],
    );
    let leaf_b = leaf(&b);
    wait_for("B's tree runs", || (tagged_sleeps(nb).len() == 2).then_some(()));
    let mut a = start(
        &ca,
        Some(&cg.path),
        &["--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & exit 0")],
    );
    let leaf_a = leaf(&a);
    assert_ne!(leaf_a, leaf_b, "each guardian has its own leaf");
    let f = a.finish();
    assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some());
    assert!(tagged_sleeps(na).is_empty(), "A's tree is gone");
    assert!(!leaf_a.exists());
    assert_eq!(tagged_sleeps(nb).len(), 2, "B's tree is untouched by A's cgroup.kill");
    assert!(leaf_b.exists() && populated(&leaf_b));
    b.signal(libc::SIGTERM);
    assert_eq!(b.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", b.stderr());
    assert!(tagged_sleeps(nb).is_empty() && !leaf_b.exists());
}

#[test]
fn a_fork_storm_is_stopped() {
    let (_mount, cg, ctx) = delegated!("cg-storm");
    let n = &ctx.nonce;
    // Four SIGTERM-ignoring loops, each spawning up to 400 SIGTERM-ignoring sleepers as fast
    // as it can (bounded so a broken guardian cannot exhaust the shared machine).
    let storm = format!(
        "trap '' TERM; for j in 1 2 3 4; do (i=0; while [ $i -lt 400 ]; do sleep 1000.{n} & i=$((i+1)); done; wait) & done; wait"
    );
    let mut g = start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &storm]);
    let leaf = leaf(&g);
    wait_for("the storm is under way", || (tagged_sleeps(n).len() >= 50).then_some(()));
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGKILL), "the provider ignored SIGTERM; stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some());
    assert_tree_gone(n, &leaf);
}

#[test]
fn a_process_whose_main_thread_exited_is_killed_in_the_leaf() {
    let (_mount, cg, ctx, bin) = delegated_with_program!("cg-zombie-leader", "zombie-leader", ZOMBIE_LEADER);
    let n = &ctx.nonce;
    let provider = format!("{}; exit 3", zombie_leader_waits(&bin, n));
    let (f, leaf) =
        run_in_leaf(&ctx, &cg, &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider]);
    assert_eq!(f.code, Some(3), "the provider's status, not 125; stderr: {}", f.stderr);
    ctx.assert_nothing_left();
    assert!(!leaf.exists(), "the leaf was removed");
    assert!(f.events.iter().any(|v| v["event"] == "released"), "{:?}", f.events);
}

#[test]
fn a_provider_that_removes_its_own_emptied_leaf_gets_its_status() {
    let (mount, cg, ctx) = delegated!("cg-rmdir-leaf");
    let n = &ctx.nonce;
    // The provider moves itself to the delegated parent (allowed: it may write there),
    // removes the now empty leaf and exits 4.
    let provider = format!(
        ": 1000.{n}; c=$(sed -n 's/^0:://p' /proc/self/cgroup); \
         echo $$ > \"$1$(dirname \"$c\")/cgroup.procs\" && rmdir \"$1$c\" && exit 4; exit 99"
    );
    let mount_arg = mount.to_string_lossy().into_owned();
    let mut g = start(
        &ctx,
        Some(&cg.path),
        &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider, "sh", &mount_arg],
    );
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(4), "the provider's status; stderr: {}", f.stderr);
    assert!(!leaf.exists());
    assert!(f.fallbacks("cgroup.kill").is_empty(), "no false cgroup.kill fallback: {:?}", f.events);
    let released = f.one("released");
    assert_eq!(released["status"], 4, "{released}");
}

/// Removes a directory tree of any depth through directory fds (test cleanup when guardian
/// failed to).
fn remove_deep(parent: &std::os::fd::OwnedFd, name: &std::ffi::OsStr) {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::openat(parent, name, flags, Mode::empty()) {
        let subs: Vec<std::ffi::OsString> = rustix::fs::Dir::read_from(&fd)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_type() == rustix::fs::FileType::Directory)
                    .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
                    .filter(|n| n != "." && n != "..")
                    .collect()
            })
            .unwrap_or_default();
        for s in subs {
            remove_deep(&fd, &s);
        }
    }
    let _ = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR);
}

#[test]
fn cgroups_nested_deeper_than_path_max_are_removed() {
    let (mount, cg, ctx, bin) = delegated_with_program!("cg-deep-nest", "deep-nest", DEEP_NEST);
    let n = &ctx.nonce;
    // 30 levels of 200-character names: 6 000 bytes below the leaf, beyond PATH_MAX (4 096).
    let provider = format!("cd \"$1$(sed -n 's/^0:://p' /proc/self/cgroup)\" && {} 1000.{n} 30", bin.display());
    let mount_arg = mount.to_string_lossy().into_owned();
    let (f, leaf) = run_in_leaf(&ctx, &cg, &["-vv", "--cgroup", "auto", "--", "sh", "-c", &provider, "sh", &mount_arg]);
    let gone = !leaf.exists();
    if !gone {
        let parent = rustix::fs::open(
            &cg.path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .expect("open test cgroup");
        remove_deep(&parent, leaf.file_name().expect("leaf name"));
    }
    assert_eq!(f.code, Some(0), "the nest was built; stderr: {}", f.stderr);
    let released = f.one("released");
    assert!(gone, "the leaf and the nest below it were removed, as released.cgroup says: {released}");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
}
