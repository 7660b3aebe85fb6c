//! `guardian sweep`: the leaves of guardians that died without cleaning up are killed and
//! removed (also a process `cgroup.kill` misses), a live guardian's leaf is kept, and what is
//! not a guardian leaf is refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

use super::*;

#[test]
fn sweep_removes_a_dead_guardians_leaf_and_keeps_a_live_ones() {
    let (_mount, cg, (ca, cb)) = delegated_pair!("cg-a", "cg-b");
    let (na, nb) = (&ca.nonce, &cb.nonce);
    // A's provider ignores SIGTERM, so only a kill can end its orphaned sleep.
    let stubborn = format!("trap '' TERM; sleep 1000.{na} & wait");
    let mut a = start_without_sentinel(&ca, Some(&cg.path), &["--cgroup", "auto", "--", "sh", "-c", &stubborn]);
    let mut b =
        start_without_sentinel(&cb, Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{nb}")]);
    let (leaf_a, leaf_b) = (leaf(&a), leaf(&b));
    wait_for("both providers' sleeps run", || {
        (tagged_sleeps(na).len() == 1 && tagged_sleeps(nb).len() == 1).then_some(())
    });

    // guardian A dies without any chance to clean up.
    let _ = a.child.kill();
    let _ = a.child.wait();
    assert!(leaf_a.exists() && populated(&leaf_a), "A's leaf outlives its guardian, with its tree");
    assert_eq!(tagged_sleeps(na).len(), 1, "A's orphaned sleep still runs");

    let (code, text) = sweep_as_nobody(&["--cgroup".as_ref(), cg.path.as_os_str()]);
    assert_eq!(code, Some(0), "sweep: {text}");
    assert!(text.contains(&format!("removed {}", leaf_a.display())), "{text}");
    assert!(text.contains(&format!("kept {}", leaf_b.display())), "{text}");
    assert!(!leaf_a.exists(), "the dead guardian's leaf is gone");
    wait_for("A's orphan is dead", || tagged_sleeps(na).is_empty().then_some(()));
    assert!(leaf_b.exists(), "the live guardian's leaf is untouched");
    assert_eq!(tagged_sleeps(nb).len(), 1, "the live guardian's provider still runs");

    b.signal(libc::SIGTERM);
    assert_eq!(b.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", b.stderr());
    assert!(!leaf_b.exists());
}

#[test]
fn sweep_leaf_kills_a_process_cgroup_kill_misses() {
    let (_mount, cg, ctx, bin) = delegated_with_program!("cg-sweep-leaf", "zombie-leader", ZOMBIE_LEADER);
    let n = &ctx.nonce;
    let provider = format!("{}; exec sleep 1000.{n}", zombie_leader_waits(&bin, n));
    let mut g = start_without_sentinel(&ctx, Some(&cg.path), &["--cgroup", "auto", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    wait_for("the provider runs, the other process's main thread has exited", || {
        (tagged_sleeps(n).len() == 1 && tagged_pids(n).into_iter().any(leader_exited)).then_some(())
    });
    // guardian dies without any chance to clean up; its leaf holds the tree.
    let _ = g.child.kill();
    let _ = g.child.wait();
    assert!(populated(&leaf));

    // What the README used to tell drivers: writing cgroup.kill alone leaves the process.
    std::fs::write(leaf.join("cgroup.kill"), "1").expect("write cgroup.kill");
    wait_for("cgroup.kill took the sleep", || tagged_sleeps(n).is_empty().then_some(()));
    assert!(!wait_unpopulated(&leaf, Duration::from_millis(300)), "cgroup.kill alone leaves the leaf populated");
    let left = tagged_pids(n);
    assert!(
        left.len() == 1 && leader_exited(left[0]),
        "only the process with the exited main thread survived cgroup.kill: {:?}",
        describe(&left)
    );

    let (code, text) = sweep_as_nobody(&["--leaf".as_ref(), leaf.as_os_str()]);
    assert_eq!(code, Some(0), "sweep: {text}");
    assert!(text.contains(&format!("removed {}", leaf.display())), "{text}");
    ctx.assert_nothing_left();
    assert!(!leaf.exists());
    assert!(cg.path.exists(), "only the named leaf is touched");
}

#[test]
fn sweep_leaf_refuses_what_is_not_a_guardian_leaf_and_keeps_a_live_one() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let out = Command::new(guardian_bin()).args(["sweep", "--leaf"]).arg(&cg.path).output().expect("sweep");
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a guardian leaf"));
    assert!(cg.path.exists());

    let ctx = Ctx::new("cg-sweep-live");
    let n = &ctx.nonce;
    let mut g = start(&ctx, Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{n}")]);
    let leaf = leaf(&g);
    wait_for("the provider runs", || (tagged_sleeps(n).len() == 1).then_some(()));
    let out = Command::new(guardian_bin()).args(["sweep", "--leaf"]).arg(&leaf).output().expect("sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a live guardian's leaf is kept, and that is not success: {text}");
    assert!(text.contains(&format!("kept {}", leaf.display())), "{text}");
    assert_eq!(tagged_sleeps(n).len(), 1, "the live guardian's provider still runs");
    g.signal(libc::SIGTERM);
    assert_eq!(g.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
}

/// `guardian sweep --leaf guardian-P-S`, a bare name: the leaf in the current directory, else
/// in guardian's own cgroup; never the empty path (it failed with "sweep: : No such file").
#[test]
fn sweep_leaf_takes_a_bare_leaf_name() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    // A leaf whose guardian cannot be alive: no pid is that large.
    let name = format!("guardian-{}-1", i32::MAX - 1);
    for from_cwd in [true, false] {
        let leaf = cg.path.join(&name);
        std::fs::create_dir(&leaf).expect("mkdir a dead guardian's leaf");
        let mut cmd = if from_cwd {
            let mut c = Command::new(guardian_bin());
            c.current_dir(&cg.path);
            c
        } else {
            // From elsewhere, inside the cgroup as its owner: guardian's own cgroup.
            let mut w = in_cgroup_as_nobody(&cg.path);
            let mut c = Command::new(w.remove(0));
            c.args(w).arg(guardian_bin()).current_dir("/");
            c
        };
        let out = cmd.args(["sweep", "--leaf", &name]).stdin(Stdio::null()).output().expect("run sweep");
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "from_cwd={from_cwd}: {text} {err}");
        assert!(text.contains(&format!("removed {}", leaf.display())), "from_cwd={from_cwd}: {text}");
        assert!(!leaf.exists());
    }
}
