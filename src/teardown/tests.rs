//! Unit tests of the executor's side: a round is one call of the planner.

use super::*;

/// A pid no process has (above any `pid_max`): a tree whose `/proc` reads find nothing of it,
/// so no round can reach a real process.
const NOBODY: i32 = 1 << 30;

fn tree(discovery: Discovery, proc: bool) -> Tree {
    let stop = StopSignal::parse("TERM").expect("TERM");
    let proc = proc.then(|| Proc::open().expect("/proc"));
    let mut t = Tree::new(discovery, proc, stop, true);
    t.rounds.me = NOBODY;
    t
}

fn calls() -> usize {
    plan::CALLS.with(|c| c.get())
}

#[test]
fn every_round_and_every_group_stop_is_one_planner_call() {
    let mut events = Events::disabled();
    // Broadcast rounds send kill(-1): never in a unit test. Blind and both scan finders are
    // safe with a `me` nobody descends from.
    let cases: [(&str, Discovery, bool); 3] = [
        ("blind", Discovery::Blind, false),
        ("scan", Discovery::Scan, true),
        ("scan without /proc", Discovery::Scan, false),
    ];
    for (name, discovery, proc) in cases {
        let mut t = tree(discovery, proc);
        for phase in [Phase::Stop, Phase::Kill, Phase::Stop] {
            for scan in [true, false] {
                let before = calls();
                assert_eq!(t.round(phase, Some(NOBODY + 1), "stop", scan, None, &mut events).sent, 0, "{name}");
                assert_eq!(calls() - before, 1, "{name}: one planner call per {phase:?} round");
            }
        }
        let before = calls();
        t.stop_group(NOBODY + 2, NOBODY + 1, None, &mut events);
        assert_eq!(calls() - before, usize::from(t.can_stop_group()), "{name}: a group stop is one call");
    }
}

/// The `signal` event is built in one module, the executor's (`Exec::report` for the rounds,
/// `provider_signal` for the supervisor's signals to the provider): no other source builds
/// one (the events module matches it, its schema test builds samples).
#[test]
fn only_the_executor_builds_the_signal_event() {
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 20, "src/ was not found");
    let allowed = ["teardown/exec.rs", "events/schema_test.rs", "teardown/tests.rs"];
    let builders: Vec<_> = files
        .iter()
        .filter(|f| !allowed.iter().any(|a| f.ends_with(a)))
        .filter(|f| std::fs::read_to_string(f).unwrap_or_default().contains("Event::Signal(Signal"))
        .collect();
    assert_eq!(builders, Vec::<&std::path::PathBuf>::new(), "the signal event is built outside teardown::exec");
}
