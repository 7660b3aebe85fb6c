//! cli::values: the parsers of option values, one per [`Kind`] of the option table
//! (`treeguardian_spec::options`): durations, signals, choices, fds, paths, cgroup limits,
//! flags' variables and counts. The runtime parser (`parse.rs`) and, in the unit tests, the
//! clap definition built from the same table use these same functions. Each error is the
//! one-line message that names the problem and the fix.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use treeguardian_spec::options::{Kind, Opt};

use super::fields::Choice;
use crate::signals::StopSignal;

/// An option's parsed value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Duration(Duration),
    Signal(StopSignal),
    /// One of a choice's words, as its field's type.
    Choice(Choice),
    Fd(i32),
    Path(OsString),
    /// A cgroup limit, in the form its interface file takes.
    Text(String),
    Flag(bool),
    Count(u8),
}

/// Parses `value` as option `o` takes it, by its kind (a flag's or a count's value comes from its
/// variable). Only a path may be bytes that are not UTF-8.
pub fn parse_value(o: Opt, value: &OsStr) -> Result<Value, String> {
    let kind = o.kind();
    if kind == Kind::Path {
        if value.is_empty() {
            return Err("the path is empty: give a path (or auto where the option takes it)".into());
        }
        return Ok(Value::Path(value.to_os_string()));
    }
    let text = value.to_str().ok_or("it is not valid UTF-8")?;
    Ok(match kind {
        Kind::Duration => Value::Duration(parse_duration(text)?),
        Kind::Signal => Value::Signal(parse_signal(text)?),
        Kind::Choice(words) => match words.split(' ').find(|w| *w == text).and_then(|w| Choice::parse(o, w)) {
            Some(choice) => Value::Choice(choice),
            None => return Err(format!("use {}", words.replace(' ', " or "))),
        },
        Kind::Fd => {
            let n = text.parse::<i64>().ok().filter(|n| *n >= 0);
            let fd = n.map(i32::try_from).transpose().map_err(|_| {
                too_large("file descriptor number", text, "2147483647: use the number of an open file descriptor")
            })?;
            Value::Fd(fd.ok_or("use the number of an open file descriptor (0 to 2147483647)")?)
        }
        Kind::Size => Value::Text(parse_memory(text)?),
        Kind::Limit => Value::Text(parse_pids(text)?),
        Kind::Cpus => Value::Text(parse_cpu(text)?),
        Kind::Flag => Value::Flag(parse_bool(text)?),
        Kind::Count(max) => Value::Count(
            text.parse::<u8>().ok().filter(|n| *n <= max).ok_or_else(|| format!("use a count from 0 to {max}"))?,
        ),
        Kind::Path | Kind::Help | Kind::Version => return Err("this option takes no value".into()),
    })
}

/// A number the user wrote correctly but that cannot be held: too large, with the maximum.
fn too_large(what: &str, text: &str, max: &str) -> String {
    format!("{what} '{text}' is too large: the maximum is {max}")
}

/// Parses digits as a `u64`: `Ok(None)` when they are not digits, `Err` when too large.
fn digits(num: &str, too_big: impl FnOnce() -> String) -> Result<Option<u64>, String> {
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    num.parse().map(Some).map_err(|_| too_big())
}

/// clap's `BoolishValueParser`, for a flag's variable.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.to_lowercase().as_str() {
        "y" | "yes" | "t" | "true" | "on" | "1" => Ok(true),
        "n" | "no" | "f" | "false" | "off" | "0" => Ok(false),
        _ => Err("use true or false (also yes/no, on/off, 1/0)".into()),
    }
}

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
    // A number too long for u128 is too large too (the digits were checked above).
    let too_large = || {
        format!(
            "duration '{text}' is too large: the maximum is {}s (about 584 years; as nanoseconds it must fit in 64 bits)",
            u64::MAX / 1_000_000_000
        )
    };
    let int: u128 = int.parse().map_err(|_| too_large())?;
    let mut nanos = int.checked_mul(nanos_per).ok_or_else(too_large)?;
    let mut scale = nanos_per;
    for d in frac.bytes() {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(d - b'0') * scale).ok_or_else(too_large)?;
    }
    let nanos = u64::try_from(nanos).map_err(|_| too_large())?;
    Ok(Duration::from_nanos(nanos))
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
    let big =
        || too_large("memory size", text, "18446744073709551615 bytes (just under 16777216T); use max for no limit");
    let n = digits(num, big)?.ok_or_else(bad)?;
    n.checked_mul(mul).map(|v| v.to_string()).ok_or_else(big)
}

/// `--pids-max`: `max` or a positive count.
pub fn parse_pids(text: &str) -> Result<String, String> {
    let t = text.trim();
    let big = || too_large("process count", text, "18446744073709551615; use max for no limit");
    if t == "max" || digits(t, big)?.is_some_and(|n| n > 0) {
        Ok(t.into())
    } else {
        Err(format!("invalid process count '{text}': use a positive number or max"))
    }
}

/// `--cpu-max`: cgroup syntax `QUOTA [PERIOD]` in microseconds (`max` for no quota), or a
/// number of CPUs such as `0.5` or `2` (period 100ms). The kernel takes a quota of at least
/// 1000 µs and a period of 1000 to 1000000 µs: a value below is refused naming that minimum,
/// never raised to it (0.001 CPU would be 100 µs per 100 ms; the least is 0.01).
pub fn parse_cpu(text: &str) -> Result<String, String> {
    const MIN_US: u64 = 1000;
    let bad = || {
        format!(
            "invalid CPU limit '{text}': use a number of CPUs (0.5, 2) or 'QUOTA PERIOD' in microseconds (50000 100000)"
        )
    };
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        [q, p] => {
            let big = || too_large("CPU period", text, "1000000 microseconds");
            let period = digits(p, big)?.ok_or_else(bad)?;
            if period > 1_000_000 {
                return Err(big());
            }
            if period < MIN_US {
                return Err(format!(
                    "CPU period in '{text}' is too small: the kernel's minimum is {MIN_US} microseconds (1000 to 1000000)"
                ));
            }
            if *q != "max" {
                let big = || too_large("CPU quota", text, "18446744073709551615 microseconds; use max for no limit");
                let quota = digits(q, big)?.ok_or_else(bad)?;
                if quota < MIN_US {
                    return Err(format!(
                        "CPU quota in '{text}' is too small: the kernel's minimum is {MIN_US} microseconds; use at least '{MIN_US} {period}'"
                    ));
                }
            }
            Ok(format!("{q} {period}"))
        }
        ["max"] => Ok("max 100000".into()),
        [cpus] => {
            let v: f64 = cpus.parse().map_err(|_| bad())?;
            if v > 4096.0 {
                return Err(too_large("CPU limit", text, "4096 CPUs; use max for no limit"));
            }
            if !(v.is_finite() && v > 0.0) {
                return Err(bad());
            }
            let quota = (v * 100_000.0).round() as u64;
            if quota < MIN_US {
                return Err(format!(
                    "CPU limit '{text}' is too small: {v} CPU is a quota of {quota} microseconds per 100000, below the kernel's minimum of {MIN_US} microseconds; use at least 0.01 (or '{MIN_US} PERIOD' with a shorter period)"
                ));
            }
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
        for bad in ["", "s", "-1s", "1x", "1.s", ".5s", "1..2s", "1 s", "1e3"] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains("use a number with a unit"), "{bad:?}: {e}");
        }
        // The largest duration that fits, and the smallest that does not.
        assert_eq!(parse_duration("18446744073.709551615s"), Ok(Duration::from_nanos(u64::MAX)));
        for big in ["18446744073.709551616s", "18446744074", "100000000000s", "99999999999999999999h", &"9".repeat(60)]
        {
            let e = parse_duration(big).expect_err(big);
            assert!(e.contains("too large") && e.contains("maximum is 18446744073s"), "{big}: {e}");
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
        // Below the kernel's 1000 µs: refused naming the minimum, never raised to it.
        for bad in ["0.001", "0.005", "999 100000", "1000 999"] {
            let err = parse_cpu(bad).expect_err(bad);
            assert!(err.contains("minimum") && err.contains("1000 microseconds"), "{bad}: {err}");
        }
        assert_eq!(parse_cpu("0.01").as_deref(), Ok("1000 100000"));
        assert_eq!(parse_cpu("1000 100000").as_deref(), Ok("1000 100000"));
        assert_eq!(parse_cpu("max 50000").as_deref(), Ok("max 50000"));
        assert!(parse_cpu("fast").is_err() && parse_cpu("0").is_err() && parse_cpu("5 100000").is_err());
    }

    /// A number written correctly but too large to hold is called too large, with the maximum
    /// (issue 22.3's class), not malformed.
    #[test]
    fn too_large_is_not_malformed() {
        type Parser = fn(&str) -> Result<String, String>;
        let cases: [(&str, Parser, &str); 7] = [
            ("memory", parse_memory, "18446744073709551616"),
            ("memory", parse_memory, "16777216T"),
            ("pids", parse_pids, "18446744073709551616"),
            ("cpu", parse_cpu, "4097"),
            ("cpu", parse_cpu, "1e400"),
            ("cpu", parse_cpu, "99999999999999999999 100000"),
            ("cpu", parse_cpu, "50000 1000001"),
        ];
        for (what, parse, text) in cases {
            let e = parse(text).expect_err(text);
            assert!(e.contains("too large") && e.contains("the maximum is"), "{what} {text}: {e}");
        }
        let e = parse_value(Opt::EventsFd, OsStr::new("2147483648")).expect_err("fd");
        assert!(e.contains("too large") && e.contains("2147483647"), "{e}");
        // Malformed stays malformed.
        for (parse, text) in [(parse_memory as Parser, "12X"), (parse_pids, "-1"), (parse_cpu, "fast")] {
            let e = parse(text).expect_err(text);
            assert!(!e.contains("too large"), "{text}: {e}");
        }
        assert_eq!(parse_memory("16777215T").as_deref(), Ok("18446742974197923840"));
    }
}
