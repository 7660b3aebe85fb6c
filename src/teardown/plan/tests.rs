//! Unit tests of the rounds' decisions, per discovery mode: no processes, the kernel's answers
//! from a table.

use std::collections::HashMap;

use super::*;

const ME: i32 = 1000;

/// The kernel's answers: who exited, and each pid's `stat`.
#[derive(Default)]
struct Table {
    exited: HashSet<i32>,
    stats: HashMap<i32, Stat>,
    asked: Vec<i32>,
}

impl Facts for Table {
    fn exited(&mut self, pid: i32) -> bool {
        self.asked.push(pid);
        self.exited.contains(&pid)
    }

    fn stat(&mut self, pid: i32) -> Option<Stat> {
        self.stats.get(&pid).copied()
    }
}

fn st(pid: i32, ppid: i32, starttime: u64) -> Stat {
    Stat { pid, state: b'S', ppid, pgrp: pid, session: 0, threads: 1, starttime }
}

fn ask(phase: Phase, now_ms: u64) -> Ask {
    Ask { phase, provider: Some(1001), group: None, now: Duration::from_millis(now_ms) }
}

fn walk(chase: bool, reread_children: bool) -> Mode {
    Mode::Scan { finder: Finder::Walk(Walk { chase, reread_children }) }
}

// ---- blind ----

#[test]
fn blind_mode_never_chases_and_never_rereads() {
    let blind = Mode::Blind;
    assert!(!blind.chase(5, false), "no round reaches anyone: nothing to chase");
    assert!(!blind.reread_children());
    assert!(Mode::Blind.finder().is_none(), "blind mode has no /proc to find descendants in");
}

// ---- broadcast (PID 1) ----

#[test]
fn broadcast_sends_the_stop_signal_once_and_sigkill_every_round() {
    assert!(broadcasts(Phase::Stop, false, false), "the first stop round is kill(-1)");
    assert!(!broadcasts(Phase::Stop, true, false), "a second kill(-1) would repeat the stop signal");
    assert!(!broadcasts(Phase::Stop, false, true), "never after processes had it one by one");
    assert!(broadcasts(Phase::Kill, true, true), "SIGKILL costs nothing to repeat and reaches newcomers");
}

#[test]
fn broadcast_chases_only_when_it_walks_the_namespaces_own_proc() {
    let without_proc = Mode::Broadcast { finder: None, namespace_stopped: false };
    assert!(!without_proc.chase(3, false), "a kill(-1) reaches newcomers without chasing");
    let listing = Mode::Broadcast { finder: Some(Finder::Listing(Listing::default())), namespace_stopped: false };
    assert!(!listing.chase(3, false));
    let walking = Mode::Broadcast {
        finder: Some(Finder::Walk(Walk { chase: true, reread_children: false })),
        namespace_stopped: false,
    };
    assert!(walking.chase(0, false));
}

#[test]
fn as_pid_1_the_scan_reports_the_namespace_but_a_group_stop_only_the_group() {
    assert_eq!(target(false, true, false), "namespace");
    assert_eq!(target(false, true, true), "descendants");
    assert_eq!(target(true, true, false), "cgroup");
    assert_eq!(target(false, false, false), "descendants");
}

// ---- scan: the walk of the children files ----

#[test]
fn a_walk_signals_a_new_child_by_pid_without_reading_proc() {
    let mut done = Delivered::default();
    let mut t = Table::default();
    let step = child(2000, &ask(Phase::Stop, 0), &mut done, &LeafKilled::default(), false, &mut t);
    assert_eq!(step, ChildStep::Signal);
    assert_eq!(t.asked, vec![2000], "one waitid(WNOWAIT), no stat");
}

#[test]
fn a_walk_leaves_the_provider_to_its_handle_but_reads_its_children() {
    let mut t = Table::default();
    let step = child(1001, &ask(Phase::Kill, 0), &mut Delivered::default(), &LeafKilled::default(), false, &mut t);
    assert_eq!(step, ChildStep::Read(None));
}

#[test]
fn an_exited_child_is_neither_signalled_nor_read() {
    let mut t = Table { exited: HashSet::from([2000]), ..Table::default() };
    let step = child(2000, &ask(Phase::Stop, 0), &mut Delivered::default(), &LeafKilled::default(), false, &mut t);
    assert_eq!(step, ChildStep::Skip);
}

#[test]
fn a_stopped_child_is_read_again_only_every_reread_interval_unless_a_deeper_signal_asks() {
    let mut done = Delivered::default();
    done.remember_child(Phase::Stop, 2000, Duration::ZERO);
    let leaf = LeafKilled::default();
    let mut t = Table::default();
    assert_eq!(child(2000, &ask(Phase::Stop, 50), &mut done, &leaf, false, &mut t), ChildStep::Skip);
    assert_eq!(child(2000, &ask(Phase::Stop, 50), &mut done, &leaf, true, &mut t), ChildStep::Read(None));
    assert_eq!(done.stopped_children[&2000], Duration::from_millis(50), "read now");
    assert_eq!(child(2000, &ask(Phase::Stop, 149), &mut done, &leaf, false, &mut t), ChildStep::Skip);
    assert_eq!(child(2000, &ask(Phase::Stop, 150), &mut done, &leaf, false, &mut t), ChildStep::Read(None));
    // It is never signalled twice: SIGKILL is another phase.
    assert_eq!(child(2000, &ask(Phase::Kill, 151), &mut done, &leaf, false, &mut t), ChildStep::Signal);
}

#[test]
fn a_child_signalled_deeper_down_before_its_reparenting_is_not_signalled_again() {
    let mut done = Delivered::default();
    done.stopped.insert(2000, 77);
    let mut t = Table { stats: HashMap::from([(2000, st(2000, ME, 77))]), ..Table::default() };
    let leaf = LeafKilled::default();
    assert_eq!(
        child(2000, &ask(Phase::Stop, 0), &mut done, &leaf, false, &mut t),
        ChildStep::Read(Some(st(2000, ME, 77)))
    );
    assert!(done.stopped_children.contains_key(&2000), "remembered as guardian's child from now on");
    // A newcomer under the recycled pid (another start time) is signalled.
    let mut done = Delivered::default();
    done.stopped.insert(2000, 76);
    assert_eq!(child(2000, &ask(Phase::Stop, 0), &mut done, &leaf, false, &mut t), ChildStep::Signal);
}

#[test]
fn a_kill_round_skips_leaf_members_cgroup_kill_just_reached() {
    let leaf = LeafKilled { now: HashSet::from([2000, 2001]), first: HashSet::from([2000]) };
    let mut t = Table::default();
    let mut done = Delivered::default();
    assert_eq!(
        child(2000, &ask(Phase::Kill, 0), &mut done, &leaf, false, &mut t),
        ChildStep::Skip,
        "dies with the leaf"
    );
    assert_eq!(
        child(2001, &ask(Phase::Kill, 0), &mut done, &leaf, false, &mut t),
        ChildStep::Read(None),
        "reached before and still alive: its children are read"
    );
    assert!(!signals(&st(2001, 2000, 5), &ask(Phase::Kill, 0), &mut done, &leaf));
}

#[test]
fn a_walk_is_chased_when_it_signalled_deeper_or_left_children_to_guardian() {
    let quiet = after_walk(true, 3, 3, false);
    assert!(!quiet.chase && !quiet.reread_children, "only guardian's children, all read complete");
    let deeper = after_walk(true, 3, 4, false);
    assert!(deeper.chase && deeper.reread_children, "a deeper descendant's children were read before its signal");
    let orphans = after_walk(true, 3, 3, true);
    assert!(orphans.chase && !orphans.reread_children, "an exited child's children moved to guardian");
    assert!(after_walk(false, 0, 0, false).chase, "a group's stop request reads stat first: always chased");
    assert!(walk(true, false).chase(0, true), "with a leaf too: descendants outside it");
    assert!(walk(false, true).reread_children());
}

#[test]
fn each_descendant_hears_each_signal_once_and_only_in_its_group() {
    let mut done = Delivered::default();
    let leaf = LeafKilled::default();
    let d = st(3000, 2000, 9);
    assert!(signals(&d, &ask(Phase::Stop, 0), &mut done, &leaf));
    done.stopped.insert(3000, 9);
    assert!(!signals(&d, &ask(Phase::Stop, 0), &mut done, &leaf), "had it");
    assert!(signals(&st(3000, 2000, 10), &ask(Phase::Stop, 0), &mut done, &leaf), "a newcomer under the pid");
    assert!(signals(&d, &ask(Phase::Kill, 0), &mut done, &leaf));
    let group = Ask { group: Some(42), ..ask(Phase::Stop, 0) };
    assert!(!signals(&st(3001, 2000, 1), &group, &mut done, &leaf), "another process group");
    let dead = Stat { state: b'Z', ..st(3002, 2000, 1) };
    assert!(!signals(&dead, &ask(Phase::Kill, 0), &mut done, &leaf), "exited entirely");
    assert!(!signals(&st(1001, ME, 1), &ask(Phase::Kill, 0), &mut done, &leaf), "the provider has its own handle");
}

// ---- scan: the listing of all of /proc ----

#[test]
fn a_listing_is_chased_when_it_signalled_anyone_without_a_leaf() {
    let listing = Mode::Scan { finder: Finder::Listing(Listing::default()) };
    assert!(listing.chase(1, false), "it may have missed a child born after it read its parent");
    assert!(!listing.chase(0, false));
    assert!(!listing.chase(1, true), "cgroup.procs names the tree");
}

#[test]
fn newcomers_are_found_newest_first_through_new_parents_down_from_guardian() {
    // 2000 was a descendant before; 2100 (new) is its child, 2200 (new) 2100's; 2300 (new) is
    // guardian's own; 2400 (new) is a stranger's child.
    let listing = Listing { listed: HashSet::from([1, ME, 2000]), known: HashMap::from([(2000, 5)]) };
    let mut t = Table::default();
    for s in [st(2000, ME, 5), st(2100, 2000, 6), st(2200, 2100, 7), st(2300, ME, 8), st(2400, 1, 9)] {
        t.stats.insert(s.pid, s);
    }
    let pids = [1, ME, 2000, 2100, 2200, 2300, 2400];
    let mut found = Newcomers::new(ME, &pids, &listing);
    let first = found.next_chain(&mut t).expect("a chain");
    assert_eq!(first.iter().map(|s| s.pid).collect::<Vec<_>>(), vec![2300], "newest descending pid first");
    let second = found.next_chain(&mut t).expect("a chain");
    assert_eq!(second.iter().map(|s| s.pid).collect::<Vec<_>>(), vec![2200, 2100], "up to a known descendant");
    assert!(found.next_chain(&mut t).is_none(), "2400 is a stranger's");
    assert!(found.members.contains(&2000) && found.members.contains(&2100) && !found.members.contains(&2400));
}

#[test]
fn a_known_descendant_under_a_recycled_pid_does_not_make_its_children_descendants() {
    let listing = Listing { listed: HashSet::from([ME, 2000]), known: HashMap::from([(2000, 5)]) };
    let mut t = Table::default();
    t.stats.insert(2000, st(2000, 1, 99));
    t.stats.insert(2100, st(2100, 2000, 100));
    let mut found = Newcomers::new(ME, &[ME, 2000, 2100], &listing);
    assert!(found.next_chain(&mut t).is_none());
}

// ---- cgroup leaf ----

#[test]
fn the_leafs_stop_part_runs_at_most_every_reread_interval() {
    assert!(leaf_stop_due(None, Duration::ZERO));
    assert!(!leaf_stop_due(Some(Duration::ZERO), Duration::from_millis(99)));
    assert!(leaf_stop_due(Some(Duration::ZERO), STOPPED_REREAD));
}

#[test]
fn a_reaped_child_is_forgotten_so_its_pid_can_name_a_newcomer() {
    let mut done = Delivered::default();
    done.remember_child(Phase::Stop, 2000, Duration::ZERO);
    done.remember_child(Phase::Kill, 2000, Duration::ZERO);
    done.reaped(2000);
    assert!(done.stopped_children.is_empty() && done.killed_children.is_empty());
}
