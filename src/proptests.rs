//! Property tests (proptest, 2 000 cases each, run by `cargo test`) for the parsers that take
//! untrusted text: `/proc/PID/stat` (a process chooses its own comm), `--grace`/`--timeout`
//! durations and `--stop-signal` names. Arbitrary input never panics; round trips hold.

use std::time::Duration;

use proptest::prelude::*;

use crate::cli::parse_duration;
use crate::proctree::{Stat, parse_stat};
use crate::signals;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() }
}

/// A `/proc/PID/stat` line as the kernel writes it, with 52 fields.
fn stat_line(s: &Stat, comm: &[u8], tail: &[u64]) -> Vec<u8> {
    let mut v = format!("{} (", s.pid).into_bytes();
    v.extend_from_slice(comm);
    v.extend_from_slice(format!(") {} {} {} {}", s.state as char, s.ppid, s.pgrp, s.session).as_bytes());
    // Fields 7..=19 (tty_nr .. nice), num_threads (20), itrealvalue (21), starttime (22), the rest.
    for x in &tail[..13] {
        v.extend_from_slice(format!(" {x}").as_bytes());
    }
    v.extend_from_slice(format!(" {} {}", s.threads, tail[13]).as_bytes());
    v.extend_from_slice(format!(" {}", s.starttime).as_bytes());
    for x in &tail[15..] {
        v.extend_from_slice(format!(" {x}").as_bytes());
    }
    v.push(b'\n');
    v
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn stat_arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_stat(&buf);
    }

    #[test]
    fn stat_mutated_lines_never_panic(
        comm in proptest::collection::vec(any::<u8>(), 0..16),
        cut in 0usize..300,
        junk in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let s = Stat { pid: 42, state: b'S', ppid: 1, pgrp: 42, session: 42, threads: 1, starttime: 99 };
        let mut line = stat_line(&s, &comm, &[0; 30]);
        line.truncate(cut.min(line.len()));
        line.extend_from_slice(&junk);
        let _ = parse_stat(&line);
    }

    /// Any comm (the kernel allows every byte but NUL, up to 15 of them: spaces, parentheses,
    /// newlines, invalid UTF-8) round-trips with the fields guardian uses.
    #[test]
    fn stat_round_trip(
        pid in 1i32..=4_194_304,
        ppid in 0i32..=4_194_304,
        pgrp in 0i32..=4_194_304,
        session in 0i32..=4_194_304,
        state in prop::sample::select(b"RSDZTtXxKWPI".to_vec()),
        threads in 1u32..=100_000,
        starttime in any::<u64>(),
        comm in proptest::collection::vec(1u8..=255, 0..16),
        tail in proptest::collection::vec(any::<u64>(), 30),
    ) {
        let s = Stat { pid, state, ppid, pgrp, session, threads, starttime };
        prop_assert_eq!(parse_stat(&stat_line(&s, &comm, &tail)), Some(s));
    }

    #[test]
    fn duration_arbitrary_text_never_panics(text in "\\PC{0,24}") {
        let _ = parse_duration(&text);
    }

    #[test]
    fn duration_digit_soup_never_panics(text in "[0-9.]{0,45}(ns|us|ms|s|m|h|)") {
        let _ = parse_duration(&text);
    }

    #[test]
    fn duration_round_trip(n in 0u64..=u64::MAX / 1_000_000_000) {
        prop_assert_eq!(parse_duration(&format!("{n}s")), Ok(Duration::from_secs(n)));
        prop_assert_eq!(parse_duration(&format!("{n}")), Ok(Duration::from_secs(n)));
        prop_assert_eq!(parse_duration(&format!("{n}ns")), Ok(Duration::from_nanos(n)));
        prop_assert_eq!(parse_duration(&format!("{n}us")), Ok(Duration::from_micros(n)));
        prop_assert_eq!(parse_duration(&format!("{n}ms")), Ok(Duration::from_millis(n)));
    }

    #[test]
    fn duration_fraction_round_trip(secs in 0u64..1_000_000, nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(parse_duration(&format!("{secs}.{nanos:09}s")), Ok(d));
        prop_assert_eq!(parse_duration(&format!("{}ms", d.as_millis())), Ok(Duration::from_millis(d.as_millis() as u64)));
    }

    #[test]
    fn signal_arbitrary_text_never_panics(text in "\\PC{0,16}") {
        let _ = signals::parse(&text);
    }

    #[test]
    fn signal_name_like_text_never_panics(
        prefix in prop::sample::select(vec!["", "SIG", "sig", " "]),
        base in prop::sample::select(vec!["RTMIN", "RTMAX", "rtmin", "TERM", "KILL", ""]),
        rest in "\\PC{0,6}",
    ) {
        let _ = signals::parse(&format!("{prefix}{base}{rest}"));
    }

    #[test]
    fn signal_round_trip(sig in 1i32..=64) {
        let (min, max) = crate::signals::sigrt_range();
        prop_assume!(sig <= max && (sig <= 31 || sig >= min));
        prop_assert_eq!(signals::parse(&signals::name(sig)), Ok(sig));
        prop_assert_eq!(signals::parse(&signals::name(sig).to_ascii_lowercase()), Ok(sig));
        prop_assert_eq!(signals::parse(&signals::name(sig)["SIG".len()..]), Ok(sig));
        prop_assert_eq!(signals::parse(&sig.to_string()), Ok(sig));
    }
}

/// Cases found by hand around the edges the generators only rarely reach.
#[test]
fn edge_cases_never_panic() {
    let huge = u128::MAX / 1_000_000_000;
    for text in [format!("{huge}.999999999s"), format!("{}.9ns", u128::MAX), format!("{huge}s"), "RTMIN€".into()] {
        let _ = parse_duration(&text);
        let _ = signals::parse(&text);
    }
    for text in ["RTMIN+€", "RTMAX€", "SIGRTMIN-", "RTMIN+", "RTMIN+-1", "RTMAX+1", "RTMIN+2147483647"] {
        let _ = signals::parse(text);
    }
}
