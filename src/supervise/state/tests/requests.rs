//! Unit tests of what a signal means (`classify.rs`), the fold of one stop request's
//! deliveries, and the kill request: no processes, no clock.

use super::*;

// ---- one intent, one stop request: the fold (issue 29.1) ----

/// The stop request's opening actions (as `first_stop_request_signals_the_provider_once...`).
fn began(out: &[Action]) -> bool {
    out.first() == Some(&Action::EmitStopping { reason: "signal", grace_ms: 1000 })
}

/// systemd's default `KillMode=control-group`: SIGTERM from PID 1 to every process of the
/// unit, guardian proper directly and the sentinel, which forwards it naming PID 1, 5 ms later
/// (either order). One request: the grace holds.
#[test]
fn a_control_group_stop_reaching_both_processes_is_one_request() {
    for sentinel_first in [false, true] {
        let mut s = state();
        let (a, b) = (received(libc::SIGTERM, libc::SI_USER, 1), forwarded(libc::SIGTERM, libc::SI_USER, 1));
        let (first, second) = if sentinel_first { (b, a) } else { (a, b) };
        assert!(began(&s.on(first, ms(100))));
        assert_eq!(s.on(second, ms(105)), vec![Action::Folded { signal: libc::SIGTERM }]);
        assert_eq!(s.phase(), Phase::Stopping { reason: StopReason::Signal, deadline: ms(1100) }, "the grace holds");
    }
}

/// coreutils `timeout`: the signal to guardian's pid, then to its process group (guardian
/// hears both, directly or through the sentinel, from timeout's pid), one request; and an outer
/// guardian's provider stop and round over an inner guardian's two processes, the same.
#[test]
fn one_senders_deliveries_within_the_window_are_one_request() {
    let mut s = state();
    assert!(began(&s.on(received(libc::SIGTERM, libc::SI_USER, 77), ms(0))));
    assert_eq!(s.on(received(libc::SIGTERM, libc::SI_USER, 77), ms(3)), vec![Action::Folded { signal: libc::SIGTERM }]);
    assert_eq!(
        s.on(forwarded(libc::SIGTERM, libc::SI_USER, 77), FOLD_WINDOW),
        vec![Action::Folded { signal: libc::SIGTERM }]
    );
    assert!(matches!(s.phase(), Phase::Stopping { .. }));
    // The window runs from the request's first delivery, not the last folded one.
    let out = s.on(received(libc::SIGTERM, libc::SI_USER, 77), FOLD_WINDOW + ms(1));
    assert_eq!(out[0], Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
}

/// What is never folded: another sender, the other stop-request signal, a key the terminal
/// turned into a signal (no sender), a request that follows the provider's own exit.
#[test]
fn another_sender_or_signal_or_a_kernel_signal_is_a_second_request() {
    let kill_now =
        |out: Vec<Action>| out.first() == Some(&Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
    let mut s = state();
    s.on(term(), ms(0));
    assert!(kill_now(s.on(received(libc::SIGTERM, libc::SI_USER, OWNER + 1), ms(1))), "another sender");
    let cfg = Config { stop_signal: libc::SIGINT, ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::None, false);
    s.on(term(), ms(0));
    assert!(kill_now(s.on(sig(libc::SIGINT), ms(1))), "SIGINT after SIGTERM, both stop requests");
    let cfg = Config { stop_signal: libc::SIGINT, ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::None, false);
    s.on(forwarded(libc::SIGINT, libc::SI_KERNEL, 0), ms(0));
    assert!(kill_now(s.on(forwarded(libc::SIGINT, libc::SI_KERNEL, 0), ms(50))), "^C twice");
    // After a timeout began the stop there is no request to fold into.
    let mut s = state_with(Some(ms(10)), false, Terminal::None);
    s.on(Happened::Tick, ms(10));
    assert!(kill_now(s.on(term(), ms(11))));
}

// ---- what a signal means (classify) ----

#[test]
fn signals_guardian_raised_itself_are_never_forwarded() {
    let mut s = state();
    for (signo, code) in
        [(libc::SIGXFSZ, libc::SI_USER), (libc::SIGPIPE, libc::SI_USER), (libc::SIGUSR1, libc::SI_TKILL)]
    {
        assert_eq!(s.on(received(signo, code, ME), ms(0)), vec![Action::DiscardOwn(signo)], "{signo} from itself");
    }
    for signo in [libc::SIGXCPU, libc::SIGXFSZ] {
        assert_eq!(s.on(received(signo, libc::SI_KERNEL, 0), ms(0)), vec![Action::DiscardOwn(signo)], "rlimit {signo}");
    }
    // Even SIGTERM: guardian never asks itself to stop.
    assert_eq!(s.on(received(libc::SIGTERM, libc::SI_USER, ME), ms(0)), vec![Action::DiscardOwn(libc::SIGTERM)]);
    assert_eq!(s.phase(), Phase::Running);
    // The same signals from another process are forwarded.
    for signo in [libc::SIGXFSZ, libc::SIGPIPE, libc::SIGXCPU] {
        assert_eq!(s.on(sig(signo), ms(0)), vec![Action::Forward(signo, Target::Provider)]);
        assert_eq!(s.on(forwarded(signo, libc::SI_USER, OWNER), ms(0)), vec![Action::Forward(signo, Target::Provider)]);
    }
}

#[test]
fn the_sentinels_sigcont_without_its_mark_is_a_refused_suspend_and_with_it_a_continue() {
    let cfg = Config { sentinel: Some(SENTINEL), ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::Provider, false);
    s.on(Happened::ProviderStopped { signal: libc::SIGTSTP, foreground: Foreground::Provider }, ms(0));
    let out = s.on(received(libc::SIGCONT, libc::SI_QUEUE, SENTINEL), ms(1));
    assert_eq!(out, vec![Action::GiveTerminal, Action::ContinueProviderGroup], "refused: the provider goes on");
    assert_eq!(s.phase(), Phase::Running);
    // The shell's bg, forwarded by the sentinel: a continue, forwarded to the provider.
    let out = s.on(forwarded(libc::SIGCONT, libc::SI_USER, OWNER), ms(2));
    assert_eq!(out, vec![Action::Forward(libc::SIGCONT, Target::Provider)]);
}

#[test]
fn a_terminal_key_the_provider_heard_directly_is_not_forwarded_again() {
    let cfg = Config { provider_in_guardians_group: true, ..config(GRACE) };
    let mut s = State::new(cfg, Terminal::None, false);
    assert!(s.on(received(libc::SIGINT, libc::SI_KERNEL, 0), ms(0)).is_empty());
    assert_eq!(s.on(sig(libc::SIGINT), ms(0)), vec![Action::Forward(libc::SIGINT, Target::Provider)], "kill -INT");
    // Behind a sentinel the provider has a group of its own: the key is forwarded.
    let mut s = state();
    assert_eq!(
        s.on(forwarded(libc::SIGINT, libc::SI_KERNEL, 0), ms(0)),
        vec![Action::Forward(libc::SIGINT, Target::Provider)]
    );
    assert!(s.on(sig(libc::SIGCHLD), ms(0)).is_empty(), "SIGCHLD is the reaping's");
}

// ---- the kill request (--kill-signal) ----

fn with_kill_signal() -> State {
    State::new(Config { kill_signal: Some(64), ..config(Duration::from_secs(60)) }, Terminal::None, false)
}

#[test]
fn a_kill_request_kills_the_tree_at_once_without_the_stop_signal() {
    for how in [sig(64), forwarded(64, libc::SI_USER, OWNER)] {
        let mut s = with_kill_signal();
        let out = s.on(how, ms(0));
        assert_eq!(
            out,
            vec![
                Action::EmitStopping { reason: "kill-request", grace_ms: 0 },
                Action::KillProvider,
                Action::Round { kill: true, outside_leaf: true }
            ],
            "no StopProvider, no grace"
        );
        assert!(matches!(s.phase(), Phase::Escalated { reason: StopReason::KillRequest, .. }));
        let out = s.on(reaped(Some(WaitStatus(libc::SIGKILL)), true), ms(5));
        assert_eq!(out, vec![Action::Release { outcome: Outcome::Died(libc::SIGKILL) }]);
    }
}

#[test]
fn a_kill_request_during_a_stop_or_a_timeout_ends_with_the_providers_status() {
    let mut s = with_kill_signal();
    s.on(term(), ms(0));
    let out = s.on(sig(64), ms(1));
    assert_eq!(out[..2], [Action::EmitStopping { reason: "kill-request", grace_ms: 0 }, Action::KillProvider]);
    let cfg = Config { kill_signal: Some(64), timeout: Some(ms(10)), ..config(Duration::from_secs(60)) };
    let mut s = State::new(cfg, Terminal::None, false);
    s.on(Happened::Tick, ms(10));
    s.on(sig(64), ms(11));
    let out = s.on(reaped(Some(WaitStatus(libc::SIGKILL)), true), ms(12));
    assert_eq!(out, vec![Action::Release { outcome: Outcome::Died(libc::SIGKILL) }], "not 124: the kill decides");
    // Without --kill-signal, signal 64 is forwarded like any other.
    assert_eq!(state().on(sig(64), ms(0)), vec![Action::Forward(64, Target::Provider)]);
}

#[test]
fn done_after_abandon_is_named_abandoned_not_released() {
    assert_eq!(Phase::Done { outcome: Outcome::Abandoned }.name(), "abandoned");
    assert_eq!(Phase::Done { outcome: Outcome::Exited(0) }.name(), "released");
}
