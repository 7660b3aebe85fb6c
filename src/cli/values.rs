//! cli::values: the parsers of option values (durations, signals, cgroup limits), shared by
//! the runtime parser (`parse.rs`) and the clap definition (`spec.rs`, which xtask turns into
//! the man page, completions and help texts). Each returns the one-line message that names
//! the problem and the fix.

use std::time::Duration;

use crate::signals::StopSignal;

/// Parses `0`, `500ms`, `10s`, `1.5s`, `1m`, `2h`, `250us`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration '{text}': use a number with a unit such as 500ms, 10s or 1m (a bare number is seconds)"
        )
    };
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let nanos_per: u128 = match unit {
        "" | "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let int: u128 = int.parse().map_err(|_| bad())?;
    let mut nanos = int.checked_mul(nanos_per).ok_or_else(bad)?;
    let mut scale = nanos_per;
    for d in frac.bytes() {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(d - b'0') * scale).ok_or_else(bad)?;
    }
    if nanos > u128::from(u64::MAX) {
        return Err(bad());
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// `--memory-max`: `max` or bytes with an optional K/M/G/T suffix (powers of 1024).
pub fn parse_memory(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t == "max" {
        return Ok(t.into());
    }
    let bad = || format!("invalid memory size '{text}': use bytes or a K, M, G or T suffix (e.g. 512M), or max");
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], mul)
        }
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mul).map(|v| v.to_string()).ok_or_else(bad)
}

/// `--pids-max`: `max` or a positive count.
pub fn parse_pids(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t == "max" || t.parse::<u64>().is_ok_and(|n| n > 0) {
        Ok(t.into())
    } else {
        Err(format!("invalid process count '{text}': use a positive number or max"))
    }
}

/// `--cpu-max`: cgroup syntax `QUOTA [PERIOD]` in microseconds (`max` for no quota), or a
/// number of CPUs such as `0.5` or `2` (period 100ms).
pub fn parse_cpu(text: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "invalid CPU limit '{text}': use a number of CPUs (0.5, 2) or 'QUOTA PERIOD' in microseconds (50000 100000)"
        )
    };
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        [q, p] => {
            let period: u64 = p.parse().map_err(|_| bad())?;
            if !(1000..=1_000_000).contains(&period) || !(*q == "max" || q.parse::<u64>().is_ok_and(|v| v >= 1000)) {
                return Err(bad());
            }
            Ok(format!("{q} {period}"))
        }
        ["max"] => Ok("max 100000".into()),
        [cpus] => {
            let v: f64 = cpus.parse().map_err(|_| bad())?;
            if !(v.is_finite() && v > 0.0 && v <= 4096.0) {
                return Err(bad());
            }
            let quota = ((v * 100_000.0).round() as u64).max(1000);
            Ok(format!("{quota} 100000"))
        }
        _ => Err(bad()),
    }
}

/// `--stop-signal`: the rules are [`StopSignal::parse`]'s, the one place a stop signal is made.
pub fn parse_signal(text: &str) -> Result<StopSignal, String> {
    StopSignal::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_that_cannot_end_a_process_are_refused() {
        for bad in ["KILL", "STOP", "TSTP", "TTIN", "TTOU", "CONT", "CHLD", "9", "SIGCHLD"] {
            let err = parse_signal(bad).expect_err(bad);
            assert!(err.contains("cannot be the stop signal"), "{bad}: {err}");
        }
        for good in ["TERM", "INT", "QUIT", "HUP", "USR1", "RTMIN+2", "15"] {
            assert!(parse_signal(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0.25m"), Ok(Duration::from_secs(15)));
        for bad in ["", "s", "-1s", "1x", "1.s", ".5s", "1..2s", "1 s", "99999999999999999999h", "1e3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(parse_memory("512M").as_deref(), Ok("536870912"));
        assert_eq!(parse_memory("max").as_deref(), Ok("max"));
        assert_eq!(parse_memory("1000").as_deref(), Ok("1000"));
        assert!(parse_memory("12X").is_err() && parse_memory("").is_err() && parse_memory("-1").is_err());
        assert_eq!(parse_pids("64").as_deref(), Ok("64"));
        assert!(parse_pids("0").is_err());
        assert_eq!(parse_cpu("0.5").as_deref(), Ok("50000 100000"));
        assert_eq!(parse_cpu("50000 100000").as_deref(), Ok("50000 100000"));
        assert_eq!(parse_cpu("max").as_deref(), Ok("max 100000"));
        assert!(parse_cpu("fast").is_err() && parse_cpu("0").is_err() && parse_cpu("5 100000").is_err());
    }
}
