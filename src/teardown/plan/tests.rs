//! Unit tests of the rounds' decisions, per discovery mode: no processes, the kernel's answers
//! from a table.

use std::collections::HashMap;

use super::*;

const ME: i32 = 1000;

/// The kernel's answers (who exited, each pid's `stat` and `children`, the leaf's members), and
/// a record of what the planner asked and had done, in order.
#[derive(Default)]
struct Table {
    exited: HashSet<i32>,
    stats: HashMap<i32, Stat>,
    children: HashMap<i32, Vec<i32>>,
    /// The kernel has the `children` files.
    walks: bool,
    leaf: Option<Vec<i32>>,
    /// Processes that changed their user id (EPERM).
    refused: HashSet<i32>,
    /// pidfds are refused (only guardian's children can be signalled).
    no_pidfds: bool,
    asked: Vec<i32>,
    /// Each `children` read with the thread count the planner passed (`None`: ask the kernel).
    threads: Vec<(i32, Option<u32>)>,
    did: Vec<Did>,
}

/// One thing the planner asked or had done.
#[derive(Debug, PartialEq, Eq)]
enum Did {
    /// Read the `children` of.
    Read(i32),
    /// Sent to guardian's child by pid.
    Child(i32),
    /// Sent through a verified handle.
    Verified(i32),
    LeafMember(i32),
    KillLeaf,
    Namespace,
    Report(Report),
}

impl Facts for Table {
    fn exited(&mut self, pid: i32) -> bool {
        self.asked.push(pid);
        self.exited.contains(&pid)
    }

    fn stat(&mut self, pid: i32) -> Option<Stat> {
        self.stats.get(&pid).copied()
    }

    fn children(&mut self, pid: i32, threads: Option<u32>, out: &mut Vec<i32>) -> Option<()> {
        self.did.push(Did::Read(pid));
        self.threads.push((pid, threads));
        out.extend(self.children.get(&pid)?);
        Some(())
    }

    fn list(&mut self) -> Option<Vec<i32>> {
        let mut pids: Vec<i32> = self.stats.keys().copied().chain([ME]).collect();
        pids.sort_unstable();
        Some(pids)
    }

    fn stats(&mut self, pids: &[i32]) -> Vec<Stat> {
        pids.iter().filter_map(|p| self.stats.get(p).copied()).collect()
    }

    fn children_files(&mut self) -> bool {
        self.walks
    }

    fn leaf_members(&mut self) -> Option<Vec<i32>> {
        self.leaf.clone()
    }

    fn one_by_one(&self) -> bool {
        !self.no_pidfds
    }
}

impl Hands for Table {
    fn to_child(&mut self, pid: i32, _how: Sending) -> Sent {
        if self.refused.contains(&pid) {
            return Sent::NotPermitted;
        }
        self.did.push(Did::Child(pid));
        Sent::Delivered
    }

    fn to_verified(&mut self, seen: &Stat, members: &HashSet<i32>, _how: Sending) -> bool {
        let ok =
            (seen.ppid == ME || !self.no_pidfds) && members.contains(&seen.ppid) && !self.refused.contains(&seen.pid);
        if ok {
            self.did.push(Did::Verified(seen.pid));
        }
        ok
    }

    fn to_leaf_member(&mut self, seen: &Stat, _how: Sending) -> bool {
        self.did.push(Did::LeafMember(seen.pid));
        !self.no_pidfds
    }

    fn kill_leaf(&mut self, _first: bool) -> Option<Vec<i32>> {
        self.did.push(Did::KillLeaf);
        self.leaf.clone()
    }

    fn to_namespace(&mut self, _how: Sending) -> bool {
        self.did.push(Did::Namespace);
        true
    }

    fn scanned(&mut self, _found: &[Stat]) {}

    fn report(&mut self, _how: Sending, report: Report) {
        self.did.push(Did::Report(report));
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
    assert_eq!(scan_target(true, false), Target::Namespace);
    assert_eq!(scan_target(true, true), Target::Descendants);
    assert_eq!(scan_target(false, false), Target::Descendants);
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

// ---- whole rounds, one call each, per mode ----

fn rounds(mode: Mode) -> Rounds {
    Rounds::new(ME, libc::SIGTERM, mode)
}

/// A process tree in the table: (pid, parent, process group), each started at tick 1.
fn family(t: &mut Table, procs: &[(i32, i32, i32)]) {
    for &(pid, ppid, pgrp) in procs {
        t.stats.insert(pid, Stat { pgrp, ..st(pid, ppid, 1) });
        t.children.entry(ppid).or_default().push(pid);
    }
}

/// What the planner sent, in order.
fn sends(t: &Table) -> Vec<&Did> {
    t.did.iter().filter(|d| matches!(d, Did::Child(_) | Did::Verified(_) | Did::LeafMember(_))).collect()
}

fn reports(t: &Table) -> Vec<&Report> {
    t.did
        .iter()
        .filter_map(|d| match d {
            Did::Report(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn sent(target: Target, pids: &[i32], tally: Option<Tally>) -> Report {
    Report { target, pids: Some(pids.to_vec()), counted: pids.len() as u64, emit: !pids.is_empty(), tally }
}

#[test]
fn a_blind_round_sends_nothing_and_reports_nothing() {
    let mut s = rounds(Mode::Blind);
    let mut t = Table::default();
    family(&mut t, &[(2000, ME, 2000)]);
    for phase in [Phase::Stop, Phase::Kill] {
        assert_eq!(round(&mut s, &ask(phase, 0), false, true, &mut t).sent, 0);
    }
    assert!(t.did.is_empty(), "{:?}", t.did);
}

#[test]
fn a_broadcast_without_proc_stops_the_namespace_once_and_kills_it_every_round() {
    let mut s = rounds(Mode::Broadcast { finder: None, namespace_stopped: false });
    let mut t = Table { no_pidfds: true, ..Table::default() };
    let namespace = Report { target: Target::Namespace, pids: None, counted: 0, emit: true, tally: None };
    assert_eq!(round(&mut s, &ask(Phase::Stop, 0), false, true, &mut t).sent, 1);
    assert_eq!(round(&mut s, &ask(Phase::Stop, 10), false, true, &mut t).sent, 0, "never a second kill(-1, stop)");
    assert_eq!(round(&mut s, &ask(Phase::Kill, 20), false, true, &mut t).sent, 1);
    assert_eq!(round(&mut s, &ask(Phase::Kill, 30), false, true, &mut t).sent, 1, "SIGKILL reaches newcomers");
    let once = [Did::Namespace, Did::Report(namespace)];
    assert_eq!(t.did.len(), 6);
    assert_eq!(t.did[..2], once);
}

#[test]
fn a_broadcast_with_its_own_proc_stops_each_process_then_kills_all_and_counts_them() {
    let mut s = rounds(Mode::Broadcast { finder: Some(Finder::Undecided), namespace_stopped: false });
    let mut t = Table { walks: true, ..Table::default() };
    family(&mut t, &[(2000, ME, 2000), (3000, 2000, 3000)]);
    assert_eq!(round(&mut s, &ask(Phase::Stop, 0), false, false, &mut t).sent, 0, "no scan asked: nothing");
    assert_eq!(round(&mut s, &ask(Phase::Stop, 0), false, true, &mut t).sent, 2);
    let tally = Tally::Walk { read: 3, children: 1, deeper: 1 };
    assert_eq!(reports(&t), [&sent(Target::Namespace, &[2000, 3000], Some(tally))]);
    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Kill, 10), false, true, &mut t).sent, 1);
    let all = Report { target: Target::Namespace, pids: None, counted: 2, emit: true, tally: None };
    assert_eq!(t.did, [Did::Namespace, Did::Report(all)], "one kill(-1), both descendants counted");
}

#[test]
fn a_walk_signals_guardians_children_before_reading_what_they_forked_and_skips_the_provider() {
    let mut s = rounds(Mode::Scan { finder: Finder::Undecided });
    let mut t = Table { walks: true, ..Table::default() };
    family(&mut t, &[(1001, ME, 1001), (2000, ME, 2000), (1500, 1001, 1001), (3000, 2000, 2000)]);
    let done = round(&mut s, &ask(Phase::Stop, 0), false, true, &mut t);
    assert_eq!(done, Done { sent: 3, chase: true }, "deeper descendants' children were read before their signal");
    assert_eq!(
        t.did[..3],
        [Did::Read(ME), Did::Child(2000), Did::Read(1001)],
        "2000 signalled by pid before any children file below guardian's is read"
    );
    assert_eq!(sends(&t), [&Did::Child(2000), &Did::Verified(1500), &Did::Verified(3000)]);
    assert_eq!(t.threads[..2], [(ME, Some(1)), (1001, None)], "guardian has one thread; its children's are asked");
    assert!(t.threads.contains(&(3000, Some(1))), "a deeper descendant's stat gave its thread count");
    let tally = Tally::Walk { read: 5, children: 2, deeper: 2 };
    assert_eq!(reports(&t), [&sent(Target::Descendants, &[2000, 1500, 3000], Some(tally))]);
    assert_eq!(s.children_hint, 2);

    t.did.clear();
    let done = round(&mut s, &ask(Phase::Stop, 50), false, true, &mut t);
    assert_eq!(done, Done { sent: 0, chase: false }, "each hears the stop signal once; nothing to chase");
    assert!(sends(&t).is_empty() && !reports(&t)[0].emit);

    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Kill, 200), false, true, &mut t).sent, 3);
    assert_eq!(sends(&t), [&Did::Child(2000), &Did::Verified(1500), &Did::Verified(3000)]);
}

#[test]
fn a_listing_signals_every_descendant_then_newcomers_first_newest_chain_first() {
    let mut s = rounds(Mode::Scan { finder: Finder::Undecided });
    let mut t = Table::default();
    family(&mut t, &[(2000, ME, 2000), (3000, 2000, 2000), (900, 1, 900)]);
    assert_eq!(round(&mut s, &ask(Phase::Stop, 0), false, true, &mut t).sent, 2);
    assert_eq!(sends(&t), [&Did::Verified(2000), &Did::Verified(3000)], "breadth-first; 900 is a stranger");
    let tally = Tally::Listing { read: 3, descendants: 2 };
    assert_eq!(reports(&t), [&sent(Target::Descendants, &[2000, 3000], Some(tally))]);
    assert!(s.mode.chase(2, false), "it may have missed a child born after it read its parent");

    family(&mut t, &[(4000, 3000, 2000), (5000, 4000, 2000)]);
    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Stop, 10), false, true, &mut t).sent, 2);
    assert_eq!(sends(&t), [&Did::Verified(5000), &Did::Verified(4000)], "the live end of the chain first");
}

#[test]
fn a_kill_round_writes_cgroup_kill_first_and_scans_only_what_left_the_leaf() {
    let mut s = rounds(Mode::Scan { finder: Finder::Undecided });
    let mut t = Table { walks: true, leaf: Some(vec![1001, 2000, 2100]), ..Table::default() };
    family(&mut t, &[(2000, ME, 2000), (2100, 2000, 2000), (2500, ME, 2500)]);
    assert_eq!(round(&mut s, &ask(Phase::Kill, 0), true, true, &mut t).sent, 4);
    assert_eq!(t.did[0], Did::KillLeaf, "no per-member work before cgroup.kill");
    let leaf =
        Report { target: Target::Cgroup, pids: Some(vec![1001, 2000, 2100]), counted: 2, emit: true, tally: None };
    assert_eq!(reports(&t)[0], &leaf, "the unreaped provider is not counted as a descendant");
    assert_eq!(sends(&t), [&Did::Child(2500)], "leaf members die with the leaf");
    assert!(!s.mode.chase(4, true));

    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Kill, 10), true, true, &mut t).sent, 0);
    assert!(!reports(&t)[0].emit, "cgroup.kill again, nobody new: no event");
    assert!(sends(&t).is_empty());
    assert!(t.did.contains(&Did::Read(2000)), "a member reached before and still alive has its children read");
}

#[test]
fn a_stop_round_signals_each_leaf_member_at_most_every_reread_interval() {
    let mut s = rounds(Mode::Scan { finder: Finder::Undecided });
    let mut t = Table { walks: true, leaf: Some(vec![1001, 2000, 2100]), ..Table::default() };
    family(&mut t, &[(1001, ME, 1001), (2000, ME, 2000), (2100, 2000, 2000)]);
    assert_eq!(round(&mut s, &ask(Phase::Stop, 0), true, false, &mut t).sent, 2);
    assert_eq!(sends(&t), [&Did::Child(2000), &Did::LeafMember(2100)], "guardian's child by pid, the rest verified");
    assert_eq!(reports(&t), [&sent(Target::Cgroup, &[2000, 2100], None)]);
    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Stop, 50), true, false, &mut t).sent, 0);
    assert!(t.did.is_empty(), "not due yet: the leaf is not read");
}

#[test]
fn a_group_stop_reaches_only_the_group_and_leaves_the_provider_to_its_handle() {
    let mut s = rounds(Mode::Scan { finder: Finder::Undecided });
    let mut t = Table { walks: true, ..Table::default() };
    family(&mut t, &[(1001, ME, 42), (2000, ME, 42), (2001, ME, 7), (3000, 2000, 42), (3001, 2001, 7)]);
    let group = Ask { group: Some(42), ..ask(Phase::Stop, 0) };
    assert_eq!(round(&mut s, &group, false, true, &mut t).sent, 2);
    assert_eq!(sends(&t), [&Did::Verified(2000), &Did::Verified(3000)]);
    assert_eq!(reports(&t)[0].target, Target::Descendants);
    t.did.clear();
    assert_eq!(round(&mut s, &ask(Phase::Stop, 10), false, true, &mut t).sent, 2, "the teardown stops only the rest");
    assert_eq!(sends(&t), [&Did::Child(2001), &Did::Verified(3001)]);
}
