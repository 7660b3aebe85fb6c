//! options::json: `spec/options.json`, the option table for the drivers (Node, Python, Rust),
//! which check the options they pass against it. One option per line, in the table's order;
//! written by hand (no serde), deterministic. xtask writes it (`make options`); guardian's unit
//! tests fail when the checked-in file differs.

use super::{Commands, Kind, Opt};

use crate::json_string as string;

fn optional(s: Option<&str>) -> String {
    s.map_or_else(|| "null".into(), string)
}

fn list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.map(string).collect::<Vec<_>>().join(", "))
}

/// The whole file.
pub fn to_json() -> String {
    let mut lines = Vec::new();
    for &o in Opt::ALL {
        let s = o.spec();
        let commands = [(Commands::MAIN, "guardian"), (Commands::SWEEP, "sweep"), (Commands::DOCTOR, "doctor")]
            .into_iter()
            .filter(|(c, _)| s.commands.has(*c))
            .map(|(_, name)| name);
        let choices = match s.kind {
            Kind::Choice(words) => list(words.split(' ')),
            _ => "null".into(),
        };
        let max = match s.kind {
            Kind::Count(max) => max.to_string(),
            _ => "null".into(),
        };
        let short = s.short.map(String::from);
        lines.push(format!(
            "    {{\"long\": {}, \"short\": {}, \"env\": {}, \"kind\": {}, \"value_name\": {}, \"default\": {}, \
             \"choices\": {choices}, \"max\": {max}, \"commands\": {}, \"conflicts\": {}, \"help\": {}}}",
            string(s.long),
            optional(short.as_deref()),
            optional(s.env),
            string(s.kind.name()),
            optional(s.value_name),
            optional(s.default),
            list(commands),
            optional(s.conflicts.map(Opt::long)),
            string(s.help),
        ));
    }
    format!(
        "{{\n  \"generated\": \"by xtask from crates/spec/src/options.rs (make options); do not edit\",\n  \
         \"kinds\": {{\n{}\n  }},\n  \"options\": [\n{}\n  ]\n}}\n",
        KINDS.iter().map(|(k, what)| format!("    {}: {}", string(k), string(what))).collect::<Vec<_>>().join(",\n"),
        lines.join(",\n")
    )
}

/// What each kind's values are, for the drivers.
const KINDS: &[(&str, &str)] = &[
    ("duration", "0, 500ms, 10s, 1.5s, 1m, 2h, 250us, 10ns; a bare number is seconds"),
    ("signal", "a signal name or number: TERM, SIGINT, 15, RTMIN+2"),
    ("choice", "one of `choices`"),
    ("fd", "a file descriptor number, 0 to 2147483647"),
    ("path", "a path, not empty (auto where value_name says auto|PATH)"),
    ("size", "bytes with an optional K, M, G or T suffix, or max"),
    ("limit", "a positive count, or max"),
    ("cpus", "a number of CPUs (0.5, 2), 'QUOTA PERIOD' in microseconds, or max"),
    ("flag", "no value; its variable is true or false (also yes/no, on/off, 1/0)"),
    ("count", "no value, repeated up to `max` times; its variable is the count, 0 to max"),
    ("help", "prints the help"),
    ("version", "prints the version"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_described() {
        for &o in Opt::ALL {
            let name = o.kind().name();
            assert!(super::KINDS.iter().any(|(k, _)| *k == name), "{name}");
        }
    }
}
