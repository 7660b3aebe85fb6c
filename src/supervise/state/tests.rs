//! Unit tests of the state machine: every transition, no processes, no clock.

use super::*;
use crate::exit::Outcome;

const GRACE: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn state_with(timeout: Option<Duration>, wait_descendants: bool, terminal: Terminal) -> State {
    let cfg = Config { grace: GRACE, timeout, wait_descendants, ..config(GRACE) };
    State::new(cfg, terminal, false)
}

/// No timeout, descendants stopped at the provider's exit, job control on.
fn config(grace: Duration) -> Config {
    Config {
        forward_to: Target::Provider,
        stop_signal: libc::SIGTERM,
        kill_signal: None,
        me: ME,
        sentinel: None,
        provider_in_guardians_group: false,
        rounds_reach_descendants: true,
        stop_round_reaches_provider: false,
        grace,
        timeout: None,
        wait_descendants: false,
        started: ms(0),
        job_control: true,
        stdin_terminal: true,
    }
}

fn state() -> State {
    state_with(None, false, Terminal::None)
}

fn exited(code: i32) -> WaitStatus {
    WaitStatus(code << 8)
}

/// guardian's own pid, a sender's, the sentinel's (in the configs that have one).
const ME: u32 = 500;
const OWNER: u32 = 4242;
const SENTINEL: u32 = 499;

/// A signal as the loop reads it: sent by `pid` with `code`, no mark.
fn received(signo: i32, code: i32, pid: u32) -> Happened {
    Happened::Signal(Received { signo, code, pid, value: 0, foreground: false })
}

/// A signal the sentinel forwarded: `SI_QUEUE`, the original sender, its mark with the
/// original code.
fn forwarded(signo: i32, code: i32, pid: u32) -> Happened {
    let value = crate::signals::forward_value(code);
    Happened::Signal(Received { signo, code: libc::SI_QUEUE, pid, value, foreground: false })
}

/// SIGTERM from the owner (`kill`).
fn term() -> Happened {
    received(libc::SIGTERM, libc::SI_USER, OWNER)
}

/// Another signal from the owner.
fn sig(signo: i32) -> Happened {
    received(signo, libc::SI_USER, OWNER)
}

/// SIGCONT (from the shell's `fg`/`bg`); `foreground`: guardian's job now holds the terminal.
fn cont(foreground: bool) -> Happened {
    Happened::Signal(Received { signo: libc::SIGCONT, code: libc::SI_USER, pid: OWNER, value: 0, foreground })
}

fn reaped(provider: Option<WaitStatus>, echild: bool) -> Happened {
    Happened::Reaped { provider, descendants: 0, echild, leaf_empty: None }
}

#[test]
fn running_has_no_timer_and_forwards() {
    let mut s = state();
    assert_eq!(s.next_deadline(), None, "an idle guardian makes no context switch");
    assert_eq!(s.on(sig(libc::SIGUSR1), ms(5)), vec![Action::Forward(libc::SIGUSR1, Target::Provider)]);
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn provider_exit_with_empty_tree_releases_at_once() {
    let mut s = state();
    let out = s.on(reaped(Some(exited(3)), true), ms(10));
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Exited(3) }]);
    assert_eq!(s.phase(), Phase::Done { outcome: Outcome::Exited(3) });
    assert!(s.on(term(), ms(11)).is_empty(), "nothing happens after release");
}

#[test]
fn provider_exit_drains_then_escalates_at_the_deadline() {
    let mut s = state();
    let out = s.on(reaped(Some(WaitStatus(libc::SIGTERM)), false), ms(100));
    assert_eq!(out, vec![Action::Round { kill: false, outside_leaf: true }]);
    assert!(matches!(s.phase(), Phase::Draining { reason: StopReason::ProviderExit, .. }));
    assert_eq!(s.next_deadline(), Some(ms(110)), "first rescan");
    s.on(Happened::RoundDone { chase: false }, ms(100));
    // Rescans back off while they find nobody.
    let out = s.on(Happened::Tick, ms(120));
    assert_eq!(out, vec![Action::Round { kill: false, outside_leaf: true }]);
    s.on(Happened::RoundDone { chase: false }, ms(120));
    assert_eq!(s.next_deadline(), Some(ms(140)));
    let out = s.on(Happened::Tick, ms(1100));
    assert_eq!(out, vec![Action::KillProvider, Action::Round { kill: true, outside_leaf: true }]);
    assert!(matches!(s.phase(), Phase::Escalated { .. }));
    let out = s.on(reaped(None, true), ms(1150));
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Died(libc::SIGTERM) }]);
}

#[test]
fn first_stop_request_signals_the_provider_once_and_arms_the_grace() {
    let mut s = state();
    let out = s.on(term(), ms(50));
    assert_eq!(
        out,
        vec![
            Action::EmitStopping { reason: "signal", grace_ms: 1000 },
            Action::StopProvider { reason: StopReason::Signal, to: Target::Provider }
        ]
    );
    assert_eq!(s.phase(), Phase::Stopping { reason: StopReason::Signal, deadline: ms(1050) });
    assert_eq!(s.next_deadline(), Some(ms(1050)));
    // The provider exits within the grace: its descendants hear the stop signal now.
    let out = s.on(reaped(Some(exited(0)), false), ms(300));
    assert_eq!(out, vec![Action::Round { kill: false, outside_leaf: true }]);
    assert_eq!(s.phase(), Phase::Draining { reason: StopReason::Signal, deadline: ms(1050) });
    let out = s.on(reaped(None, true), ms(400));
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Exited(0) }]);
}

#[test]
fn a_further_stop_request_after_the_fold_window_kills_now() {
    let mut s = state();
    s.on(term(), ms(0));
    let later = FOLD_WINDOW + ms(1);
    let out = s.on(term(), later);
    assert_eq!(
        out,
        vec![
            Action::EmitStopping { reason: "kill-request", grace_ms: 0 },
            Action::KillProvider,
            Action::Round { kill: true, outside_leaf: true }
        ]
    );
    assert!(matches!(s.phase(), Phase::Escalated { reason: StopReason::Signal, .. }));
    // Once escalated, another request still answers (and kills again).
    let out = s.on(term(), later * 3);
    assert_eq!(out[0], Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
    assert!(out.contains(&Action::Round { kill: true, outside_leaf: true }));
}

#[test]
fn stop_request_while_draining_after_exit_kills_now() {
    let mut s = state();
    s.on(reaped(Some(exited(0)), false), ms(0));
    let out = s.on(term(), ms(5));
    assert_eq!(out[0], Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
    assert!(matches!(s.phase(), Phase::Escalated { .. }));
}

#[test]
fn wait_descendants_only_reaps_until_a_stop() {
    let mut s = state_with(None, true, Terminal::None);
    assert!(s.on(reaped(Some(exited(2)), false), ms(0)).is_empty());
    assert_eq!(s.phase(), Phase::Reaping);
    assert_eq!(s.next_deadline(), None);
    // A first stop request starts a normal (graceful) teardown, not a kill.
    let out = s.on(term(), ms(10));
    assert_eq!(
        out,
        vec![
            Action::EmitStopping { reason: "signal", grace_ms: 1000 },
            Action::Round { kill: false, outside_leaf: true }
        ]
    );
    assert!(matches!(s.phase(), Phase::Draining { reason: StopReason::Signal, .. }));
}

#[test]
fn timeout_and_parent_death_reach_the_whole_tree_at_once() {
    let mut s = state_with(Some(ms(500)), false, Terminal::None);
    assert_eq!(s.next_deadline(), Some(ms(500)));
    assert!(s.on(Happened::Tick, ms(499)).is_empty());
    let out = s.on(Happened::Tick, ms(500));
    assert_eq!(
        out,
        vec![
            Action::EmitStopping { reason: "timeout", grace_ms: 1000 },
            Action::StopProvider { reason: StopReason::Timeout, to: Target::Provider },
            Action::Round { kill: false, outside_leaf: true }
        ]
    );
    // Parent death during a stop changes nothing.
    assert!(s.on(Happened::ParentDied, ms(600)).is_empty());
    let out = s.on(reaped(Some(exited(0)), true), ms(700));
    assert_eq!(
        out,
        vec![Action::Release { outcome: Outcome::TimedOut }],
        "a timeout is 124 whatever the provider said"
    );

    let mut s = state();
    let out = s.on(Happened::ParentDied, ms(0));
    assert_eq!(out[1], Action::StopProvider { reason: StopReason::ParentDied, to: Target::Provider });
}

#[test]
fn zero_grace_goes_straight_to_sigkill() {
    let cfg = config(Duration::ZERO);
    let mut s = State::new(cfg, Terminal::None, false);
    let out = s.on(reaped(Some(exited(0)), false), ms(10));
    assert_eq!(out, vec![Action::KillProvider, Action::Round { kill: true, outside_leaf: true }]);
}

#[test]
fn abandon_waits_from_the_last_progress() {
    let mut s = state();
    s.on(term(), ms(0));
    s.on(Happened::Tick, ms(1000));
    let Phase::Escalated { abandon_at, .. } = s.phase() else { panic!("{:?}", s.phase()) };
    assert_eq!(abandon_at, ms(6000));
    s.on(Happened::Reaped { provider: None, descendants: 1, echild: false, leaf_empty: None }, ms(4000));
    assert!(!s.on(Happened::Tick, ms(6000)).contains(&Action::Abandon), "progress moved the deadline");
    assert!(s.on(Happened::Tick, ms(9000)).contains(&Action::Abandon));
    assert_eq!(s.phase(), Phase::Done { outcome: Outcome::Abandoned });
}

#[test]
fn leaf_needs_populated_0_as_well_as_echild() {
    let cfg = config(GRACE);
    let mut s = State::new(cfg, Terminal::None, true);
    let out = s.on(reaped(Some(exited(0)), true), ms(0));
    assert_eq!(out, vec![Action::Round { kill: false, outside_leaf: false }], "leaf still populated");
    let out = s.on(Happened::Reaped { provider: None, descendants: 0, echild: true, leaf_empty: Some(true) }, ms(5));
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Exited(0) }]);
}

/// The rounds look only at the leaf while it is populated; when it empties with children left
/// (descendants that moved out of the leaf, reparented to guardian as their ancestors in the
/// leaf died), a round outside the leaf runs at once. The rescans after `cgroup.kill` start at
/// RESCAN_MAX, and a leaf still populated then (a member that does not die) makes every kill
/// rescan look outside it too.
#[test]
fn a_leaf_that_empties_or_does_not_die_brings_rounds_outside_it() {
    let cfg = config(Duration::ZERO);
    let leaf = |empty| Happened::Reaped { provider: None, descendants: 1, echild: false, leaf_empty: Some(empty) };
    let mut s = State::new(cfg, Terminal::None, true);
    let out = s.on(
        Happened::Reaped { provider: Some(exited(0)), descendants: 0, echild: false, leaf_empty: Some(false) },
        ms(0),
    );
    assert_eq!(out, vec![Action::KillProvider, Action::Round { kill: true, outside_leaf: true }]);
    s.on(Happened::RoundDone { chase: false }, ms(0));
    assert!(s.on(leaf(false), ms(5)).is_empty(), "still populated: nothing to do outside it");
    assert_eq!(s.next_deadline(), Some(RESCAN_MAX), "no early rescan: nobody in a killed leaf can fork");
    assert!(s.on(Happened::Tick, ms(10)).is_empty());
    let out = s.on(Happened::Tick, RESCAN_MAX + ms(1));
    assert_eq!(out, vec![Action::Round { kill: true, outside_leaf: true }], "a leaf that does not die");
    let out = s.on(leaf(true), RESCAN_MAX + ms(2));
    assert_eq!(out, vec![Action::Round { kill: true, outside_leaf: true }], "emptied with children left");
    assert!(s.on(leaf(true), RESCAN_MAX + ms(3)).is_empty(), "only when it empties");
    let out = s.on(
        Happened::Reaped { provider: None, descendants: 1, echild: true, leaf_empty: Some(true) },
        RESCAN_MAX + ms(4),
    );
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Exited(0) }]);
}

#[test]
fn sigstop_from_outside_is_reported_not_copied() {
    let mut s = state_with(None, false, Terminal::Provider);
    let fg = Foreground::Provider;
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGSTOP, foreground: fg }, ms(0));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGSTOP }]);
    assert_eq!(s.phase(), Phase::ProviderStopped { signal: libc::SIGSTOP });
    assert_eq!(s.on(Happened::ProviderContinued, ms(5)), vec![Action::EmitContinued]);
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn job_stop_without_a_terminal_does_not_suspend_guardian() {
    let mut s = state_with(None, false, Terminal::None);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Other }, ms(0));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTSTP }]);
    assert_eq!(s.phase(), Phase::ProviderStopped { signal: libc::SIGTSTP });
    // PID 1 (container): the kernel would discard guardian's own stop, and no shell
    // above would see it: ^Z means nothing, the provider is continued.
    let cfg = Config { job_control: false, stdin_terminal: true, ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::Provider, false);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTSTP }, Action::ContinueProviderGroup]);
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn ctrl_z_suspends_guardian_and_fg_hands_the_terminal_back() {
    let mut s = state_with(None, false, Terminal::Provider);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    assert_eq!(
        out,
        vec![Action::EmitStopped { signal: libc::SIGTSTP }, Action::TakeTerminal, Action::SuspendSelf(libc::SIGTSTP)]
    );
    assert_eq!(s.phase(), Phase::GuardianSuspended { signal: libc::SIGTSTP, took_terminal: true });
    // fg: the shell gave guardian's group the terminal, then SIGCONT.
    let out = s.on(cont(true), ms(10));
    assert_eq!(out, vec![Action::GiveTerminal, Action::ContinueProviderGroup]);
    s.on(Happened::ProviderContinued, ms(11));
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn bg_continues_the_provider_without_the_terminal() {
    let mut s = state_with(None, false, Terminal::Provider);
    s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    let out = s.on(cont(false), ms(10));
    assert_eq!(out, vec![Action::ContinueProviderGroup]);
    // A background read from the terminal stops it again: the job stops again.
    s.on(Happened::ProviderContinued, ms(11));
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTTIN, foreground: Foreground::Other }, ms(20));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTTIN }, Action::SuspendSelf(libc::SIGTTIN)]);
    // `guardian -- cmd &` that reads the terminal: the job stops (tty input).
    let mut s = state_with(None, false, Terminal::Guardian);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTTIN, foreground: Foreground::Other }, ms(20));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTTIN }, Action::SuspendSelf(libc::SIGTTIN)]);
}

#[test]
fn bg_then_a_read_folded_into_one_report_stops_the_job_again() {
    // The kernel may fold the provider's continue and its next stop into one waitid report:
    // no ProviderContinued between them. guardian's own SIGCONT already ended its suspension.
    let mut s = state_with(None, false, Terminal::Provider);
    s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    s.on(cont(false), ms(10));
    assert_eq!(s.phase(), Phase::Running);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTTIN, foreground: Foreground::Other }, ms(20));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTTIN }, Action::SuspendSelf(libc::SIGTTIN)]);
    assert_eq!(s.phase(), Phase::GuardianSuspended { signal: libc::SIGTTIN, took_terminal: false });
}

#[test]
fn terminal_read_while_guardian_holds_the_foreground_hands_it_over() {
    // `guardian -- cmd &`, then `fg` before cmd touched the terminal: bash gives guardian's
    // group the foreground and sends no SIGCONT; cmd's first read stops it with SIGTTIN.
    for signal in [libc::SIGTTIN, libc::SIGTTOU] {
        let mut s = state_with(None, false, Terminal::Guardian);
        let out = s.on(Happened::ProviderStopped { signal, foreground: Foreground::Guardian }, ms(0));
        assert_eq!(out, vec![Action::EmitStopped { signal }, Action::GiveTerminal, Action::ContinueProviderGroup]);
        assert_eq!(s.phase(), Phase::Running);
    }
    // ^Z reaches guardian's group there, is forwarded, and stops the job as usual.
    let mut s = state_with(None, false, Terminal::Guardian);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Guardian }, ms(0));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTSTP }, Action::SuspendSelf(libc::SIGTSTP)]);
}

#[test]
fn refused_suspend_resumes_the_provider() {
    let mut s = state_with(None, false, Terminal::Provider);
    s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    let out = s.on(Happened::SuspendRefused, ms(1));
    assert_eq!(out, vec![Action::GiveTerminal, Action::ContinueProviderGroup]);
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn refused_suspend_of_a_background_guardian_never_takes_the_terminal() {
    // `(guardian -- cmd </dev/tty &)` in an interactive shell: guardian's group is orphaned
    // and in the background; cmd's read stops it (SIGTTIN) while the shell holds the terminal.
    for terminal in [Terminal::Guardian, Terminal::Provider] {
        let mut s = state_with(None, false, terminal);
        let out = s.on(Happened::ProviderStopped { signal: libc::SIGTTIN, foreground: Foreground::Other }, ms(0));
        assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTTIN }, Action::SuspendSelf(libc::SIGTTIN)]);
        assert_eq!(s.phase(), Phase::GuardianSuspended { signal: libc::SIGTTIN, took_terminal: false });
        let out = s.on(Happened::SuspendRefused, ms(1));
        assert!(out.is_empty(), "no terminal hand-off and no SIGCONT: the shell keeps its input: {out:?}");
        assert_eq!(s.phase(), Phase::ProviderStopped { signal: libc::SIGTTIN });
        // The stopped provider is still stopped and killed on request.
        let out = s.on(term(), ms(2));
        assert_eq!(
            out[1..],
            [Action::StopProvider { reason: StopReason::Signal, to: Target::Provider }, Action::ContinueProviderGroup]
        );
    }
    // A ^Z-like stop while another group holds the terminal: the same.
    let mut s = state_with(None, false, Terminal::Guardian);
    s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Other }, ms(0));
    assert!(s.on(Happened::SuspendRefused, ms(1)).is_empty());
    assert_eq!(s.phase(), Phase::ProviderStopped { signal: libc::SIGTSTP });
}

#[test]
fn terminal_use_without_a_hand_off_at_start_gets_the_terminal() {
    // `echo | guardian -- cmd`: fd 0 is a pipe, so guardian handed nothing over at start, but
    // its group is the foreground; cmd reads /dev/tty (SIGTTIN) or sets it (SIGTTOU).
    for job_control in [true, false] {
        for signal in [libc::SIGTTIN, libc::SIGTTOU] {
            let cfg = Config { job_control, stdin_terminal: false, ..config(GRACE) };
            let mut s = State::new(cfg, Terminal::Guardian, false);
            let out = s.on(Happened::ProviderStopped { signal, foreground: Foreground::Guardian }, ms(0));
            assert_eq!(
                out,
                vec![Action::EmitStopped { signal }, Action::GiveTerminal, Action::ContinueProviderGroup],
                "job control {job_control}: PID 1 hands it over too, or the provider stops again at once"
            );
            assert_eq!(s.phase(), Phase::Running);
            // Its exit gives the terminal back to guardian's group.
            let out = s.on(reaped(Some(exited(0)), true), ms(5));
            assert_eq!(out, vec![Action::TakeTerminal, Action::Release { outcome: Outcome::Exited(0) }]);
        }
    }
}

#[test]
fn without_the_terminal_on_fd_0_the_provider_gets_it_only_when_it_uses_it() {
    // `echo | guardian -- cmd`, or a driver (a TUI) whose group guardian shares, stdin a pipe:
    // the driver is what reads the terminal. ^Z of that group and `fg` must leave it there.
    let cfg = Config { stdin_terminal: false, ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::Guardian, false);
    assert_eq!(s.on(cont(true), ms(0)), vec![Action::Forward(libc::SIGCONT, Target::Provider)]);
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Guardian }, ms(1));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTSTP }, Action::SuspendSelf(libc::SIGTSTP)]);
    let out = s.on(cont(true), ms(2));
    assert_eq!(out, vec![Action::ContinueProviderGroup], "fg continues the provider, the terminal stays");
    // A read from the terminal: now it is the provider's (and after fg of a SIGTTIN stop).
    let out = s.on(Happened::ProviderStopped { signal: libc::SIGTTIN, foreground: Foreground::Other }, ms(3));
    assert_eq!(out, vec![Action::EmitStopped { signal: libc::SIGTTIN }, Action::SuspendSelf(libc::SIGTTIN)]);
    let out = s.on(cont(true), ms(4));
    assert_eq!(out, vec![Action::GiveTerminal, Action::ContinueProviderGroup]);
}

#[test]
fn fg_of_a_background_guardian_gives_the_provider_the_terminal() {
    let mut s = state_with(None, false, Terminal::Guardian);
    let out = s.on(cont(true), ms(0));
    assert_eq!(out, vec![Action::GiveTerminal, Action::Forward(libc::SIGCONT, Target::Provider)]);
    let mut s = state_with(None, false, Terminal::None);
    assert_eq!(s.on(cont(true), ms(0)), vec![Action::Forward(libc::SIGCONT, Target::Provider)]);
}

#[test]
fn stop_request_while_suspended_or_stopped_stops_and_continues_the_provider() {
    for stop in [libc::SIGSTOP, libc::SIGTSTP] {
        let mut s = state_with(Some(ms(100)), false, Terminal::Provider);
        s.on(Happened::ProviderStopped { signal: stop, foreground: Foreground::Provider }, ms(0));
        let out = s.on(term(), ms(5));
        assert_eq!(
            out[1..],
            [Action::StopProvider { reason: StopReason::Signal, to: Target::Provider }, Action::ContinueProviderGroup],
            "the stop signal, then SIGCONT to the whole stopped group"
        );
        assert!(matches!(s.phase(), Phase::Stopping { .. }));
    }
    // --timeout counts wall time while the provider is stopped.
    let mut s = state_with(Some(ms(100)), false, Terminal::None);
    s.on(Happened::ProviderStopped { signal: libc::SIGSTOP, foreground: Foreground::Other }, ms(0));
    assert_eq!(s.next_deadline(), Some(ms(100)));
    assert!(
        s.on(Happened::Tick, ms(100))
            .contains(&Action::StopProvider { reason: StopReason::Timeout, to: Target::Provider })
    );
    // Provider exit while stopped (killed from outside) drains as usual, the terminal back.
    let mut s = state_with(None, false, Terminal::Provider);
    s.on(Happened::ProviderStopped { signal: libc::SIGSTOP, foreground: Foreground::Provider }, ms(0));
    let out = s.on(reaped(Some(WaitStatus(libc::SIGKILL)), true), ms(5));
    assert_eq!(out, vec![Action::TakeTerminal, Action::Release { outcome: Outcome::Died(libc::SIGKILL) }]);
}

/// Config for guardian's own stop of the provider: `--forward-to`, whether rounds reach the
/// descendants (not blind mode), whether the first stop round is a `kill(-1)` (PID 1).
fn stop_config(forward_to: Target, rounds: bool, broadcast: bool) -> Config {
    Config { forward_to, rounds_reach_descendants: rounds, stop_round_reaches_provider: broadcast, ..config(GRACE) }
}

#[test]
fn the_owners_stop_with_forward_to_group_reaches_the_provider_then_its_groups_other_members() {
    let mut s = State::new(stop_config(Target::Group, true, false), Terminal::None, false);
    let out = s.on(term(), ms(0));
    assert_eq!(
        out[1..],
        [Action::StopProvider { reason: StopReason::Signal, to: Target::Provider }, Action::StopGroupMembers],
        "the provider alone, then each other member once: a copy through the group would be a second one"
    );
    let mut s = State::new(stop_config(Target::Provider, true, false), Terminal::None, false);
    assert!(!s.on(term(), ms(0)).contains(&Action::StopGroupMembers));
}

#[test]
fn in_blind_mode_the_stop_signal_goes_to_the_group_since_no_round_reaches_it() {
    let mut s = State::new(stop_config(Target::Group, false, false), Terminal::None, false);
    let out = s.on(term(), ms(0));
    assert!(out.contains(&Action::StopProvider { reason: StopReason::Signal, to: Target::Group }), "{out:?}");
    let out = s.on(reaped(Some(exited(0)), false), ms(5));
    assert!(!out.iter().any(|a| matches!(a, Action::StopProvider { .. })));
    let mut s = State::new(stop_config(Target::Group, false, false), Terminal::None, false);
    assert_eq!(s.on(sig(libc::SIGUSR1), ms(0)), vec![Action::Forward(libc::SIGUSR1, Target::Group)]);
}

#[test]
fn as_pid_1_a_timeout_leaves_the_provider_to_the_kill_all_round_but_the_owners_stop_reaches_it() {
    let timeout = Some(ms(50));
    let mut s = State::new(Config { timeout, ..stop_config(Target::Provider, true, true) }, Terminal::None, false);
    let out = s.on(Happened::Tick, ms(50));
    assert!(!out.iter().any(|a| matches!(a, Action::StopProvider { .. })), "kill(-1) reaches it, once: {out:?}");
    assert!(out.contains(&Action::Round { kill: false, outside_leaf: true }));
    let mut s = State::new(stop_config(Target::Provider, true, true), Terminal::None, false);
    let out = s.on(term(), ms(0));
    assert!(out.contains(&Action::StopProvider { reason: StopReason::Signal, to: Target::Provider }), "{out:?}");
}

/// Stop requests and the kill request, and what a signal means (`classify.rs`).
mod requests;
