//! events: the vocabulary of guardian's `--events-fd` stream, the one definition of it. Every
//! event's name, its fields in wire order, each field's JSON type, whether it can be `null` or
//! absent, and what it means. The guardian binary's serializer (`src/events.rs`) is checked
//! against [`EVENTS`] field by field (`src/events/schema_test.rs`), the Rust client
//! (`crates/client`) parses by these names and is checked against the table too, and
//! `spec/events.json` (for the Node and Python drivers) is [`to_json`]'s output, checked in.
//!
//! Every line also carries `event` (the name) and `ts` (CLOCK_MONOTONIC seconds, a float with
//! microseconds), first, in that order ([`COMMON`]). Readers ignore fields they do not know:
//! new ones may be added.

/// A field's JSON type on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A signed integer (pids, statuses).
    Int,
    /// An unsigned integer (counts, sizes, milliseconds as integers).
    UInt,
    /// A number that may carry a fraction (milliseconds with microseconds).
    Float,
    /// `true` or `false`.
    Bool,
    /// A string.
    Str,
    /// An array of signed integers (pids).
    IntArray,
}

impl Type {
    /// The name used in `spec/events.json`.
    pub const fn json_name(self) -> &'static str {
        match self {
            Type::Int => "int",
            Type::UInt => "uint",
            Type::Float => "float",
            Type::Bool => "bool",
            Type::Str => "string",
            Type::IntArray => "int[]",
        }
    }
}

/// How a field appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Always present, never `null`.
    Always,
    /// Always present, `null` without a value.
    Nullable,
    /// Absent without a value (documented as "for ..." or "when ...").
    Optional,
}

impl Presence {
    /// The name used in `spec/events.json`.
    pub const fn json_name(self) -> &'static str {
        match self {
            Presence::Always => "always",
            Presence::Nullable => "nullable",
            Presence::Optional => "optional",
        }
    }
}

/// One field of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub ty: Type,
    pub presence: Presence,
    pub doc: &'static str,
}

/// One event: its `event` name, what it means, and its fields after `event` and `ts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub name: &'static str,
    pub doc: &'static str,
    /// The last line of the stream (`released`, `error`): the fd is closed after it.
    pub last: bool,
    pub fields: &'static [Field],
}

impl EventSpec {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

const fn f(name: &'static str, ty: Type, presence: Presence, doc: &'static str) -> Field {
    Field { name, ty, presence, doc }
}

use Presence::{Always, Nullable, Optional};
use Type::{Bool, Float, Int, IntArray, Str, UInt};

/// The two fields every line starts with, in this order.
pub const COMMON: &[Field] = &[
    f("event", Str, Always, "the event's name"),
    f("ts", Float, Always, "CLOCK_MONOTONIC, seconds, with microseconds"),
];

/// Every event guardian writes, in the order docs/contract.md lists them.
pub const EVENTS: &[EventSpec] = &[
    EventSpec {
        name: "fallback",
        doc: "An interface was refused and guardian does without it.",
        last: false,
        fields: &[
            f(
                "what",
                Str,
                Always,
                "the interface that was refused: pidfd_open, clone3, cgroup, cgroup.kill, ...; parent-watch, proc",
            ),
            f("errno", Str, Always, "the error's name: ENOSYS, EPERM, ESRCH, ..."),
            f("detail", Str, Always, "what guardian does instead"),
        ],
    },
    EventSpec {
        name: "spawned",
        doc: "The provider started.",
        last: false,
        fields: &[
            f("pid", Int, Always, "the provider's pid"),
            f(
                "pgid",
                Int,
                Always,
                "the provider's own process group; 0 when guardian's group is outside its PID namespace",
            ),
            f("guardian_pid", Int, Always, "guardian's pid"),
            f("mode", Str, Always, "subreaper, pid1 or cgroup"),
            f("cgroup", Str, Nullable, "the leaf cgroup's path, or null"),
            f(
                "version",
                Str,
                Always,
                "guardian's version (0.2.0); drivers refuse one below spec/driver.json's min_guardian_version",
            ),
        ],
    },
    EventSpec {
        name: "stopping",
        doc: "A teardown started, or a further stop request ended its grace (kill-request).",
        last: false,
        fields: &[
            f("reason", Str, Always, "signal, timeout, parent-died or kill-request"),
            f("grace_ms", UInt, Always, "the grace before SIGKILL; 0 for kill-request"),
        ],
    },
    EventSpec {
        name: "signal",
        doc: "A signal was delivered (only delivered signals are reported).",
        last: false,
        fields: &[
            f("signal", Str, Always, "the signal's name, e.g. SIGTERM"),
            f("target", Str, Always, "provider, group, descendants, namespace or cgroup"),
            f("pid", Int, Optional, "the provider's pid, for targets provider and group"),
            f("cgroup", Str, Optional, "the leaf, for target cgroup"),
            f(
                "pids",
                IntArray,
                Optional,
                "the pids signalled, for targets descendants, cgroup and a counted namespace",
            ),
            f("reason", Str, Always, "forwarded, stop, kill, parent-died or timeout"),
        ],
    },
    EventSpec {
        name: "stopped",
        doc: "The provider stopped (job control).",
        last: false,
        fields: &[
            f("pid", Int, Always, "the provider's pid"),
            f("signal", Str, Always, "SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU"),
        ],
    },
    EventSpec {
        name: "continued",
        doc: "The provider was continued.",
        last: false,
        fields: &[f("pid", Int, Always, "the provider's pid")],
    },
    EventSpec {
        name: "exit",
        doc: "The provider was reaped; always before released.",
        last: false,
        fields: &[
            f("pid", Int, Always, "the provider's pid"),
            f("code", Int, Nullable, "its exit code, or null when a signal ended it"),
            f("signal", Str, Nullable, "the name of the signal that ended it, or null"),
            f("core_dumped", Bool, Always, "whether it dumped core"),
        ],
    },
    EventSpec {
        name: "released",
        doc: "The tree is gone: every descendant was reaped. The last line.",
        last: true,
        fields: &[
            f("status", Int, Always, "guardian's exit status"),
            f("signalled", UInt, Nullable, "descendants sent the stop signal; null where guardian cannot count them"),
            f("killed", UInt, Always, "descendants that needed SIGKILL"),
            f("reaped", UInt, Always, "descendants guardian reaped"),
            f("teardown_ms", Float, Always, "provider exit to release, milliseconds"),
            f("cgroup", Str, Nullable, "the removed leaf, or null (no leaf, or it could not be removed)"),
            f("oom_kill", UInt, Nullable, "the leaf's oom_kill count when --memory-max is set, else null"),
            f("provider_user_ms", Float, Always, "the provider's user CPU time (wait4), with its reaped children"),
            f("provider_system_ms", Float, Always, "the provider's system CPU time (wait4), with its reaped children"),
            f("provider_max_rss_kb", UInt, Always, "the largest peak RSS of the provider and its reaped children, kB"),
            f("tree_user_ms", Float, Always, "the whole tree's user CPU time (RUSAGE_CHILDREN)"),
            f("tree_system_ms", Float, Always, "the whole tree's system CPU time (RUSAGE_CHILDREN)"),
            f("tree_max_rss_kb", UInt, Always, "the largest peak RSS in the whole tree, kB"),
        ],
    },
    EventSpec {
        name: "error",
        doc: "guardian failed (status 125, 126 or 127), or abandoned a teardown. The last line.",
        last: true,
        fields: &[
            f("status", Int, Always, "guardian's exit status: 125, 126 or 127"),
            f("message", Str, Always, "the one-line error"),
            f(
                "unkillable",
                IntArray,
                Optional,
                "when a teardown is abandoned: pids guardian was not permitted to signal",
            ),
            f("remaining", IntArray, Optional, "when a teardown is abandoned: the tree's processes still in /proc"),
        ],
    },
];

/// The event called `name`.
pub fn event(name: &str) -> Option<&'static EventSpec> {
    EVENTS.iter().find(|e| e.name == name)
}

/// The `released` event as a reader holds it: its wire fields (the table's, in order), the
/// common `ts`, and guardian's process status once the reader reaped it (`None` in the event
/// itself). The Rust client's type; the binary writes the same fields from its teardown
/// figures (`src/events.rs`, checked against [`EVENTS`] by its schema test).
#[derive(Clone, Debug, PartialEq)]
pub struct Released {
    pub ts: f64,
    /// guardian's exit status as it reported it (the provider's, or 124 after `--timeout`).
    pub status: i32,
    /// Descendants sent the stop signal; `None` where guardian cannot count them.
    pub signalled: Option<u64>,
    pub killed: u64,
    pub reaped: u64,
    pub teardown_ms: f64,
    pub cgroup: Option<String>,
    pub oom_kill: Option<u64>,
    pub provider_user_ms: f64,
    pub provider_system_ms: f64,
    pub provider_max_rss_kb: u64,
    pub tree_user_ms: f64,
    pub tree_system_ms: f64,
    pub tree_max_rss_kb: u64,
    /// guardian's process status, once the reader reaped it (`None` in the event).
    pub exit_status: Option<std::process::ExitStatus>,
}

/// A string field's value set as a Rust enum: `as_str` (the wire text), `parse`, `ALL`.
macro_rules! value_set {
    ($(#[$meta:meta])* $name:ident for $event:literal . $field:literal { $($(#[$vmeta:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),* }

        impl $name {
            /// Every value, in the order the contract lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The event and field this set belongs to.
            pub const FIELD: (&'static str, &'static str) = ($event, $field);
            /// The text on the wire.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
            /// The value of a wire text; `None` for one this version does not know.
            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

value_set! {
    /// `spawned.mode`: how guardian holds the tree.
    Mode for "spawned"."mode" { Subreaper = "subreaper", Pid1 = "pid1", Cgroup = "cgroup" }
}
value_set! {
    /// `stopping.reason`: why a teardown started.
    StopReason for "stopping"."reason" {
        /// The stop signal (a stop request).
        Signal = "signal",
        /// `--timeout` ran out.
        Timeout = "timeout",
        /// guardian's parent died.
        ParentDied = "parent-died",
        /// The kill request (or a further stop request ending the grace): SIGKILL now.
        KillRequest = "kill-request",
    }
}
value_set! {
    /// `signal.target`: whom a signal went to.
    SignalTarget for "signal"."target" {
        Provider = "provider",
        Group = "group",
        Descendants = "descendants",
        Namespace = "namespace",
        Cgroup = "cgroup",
    }
}
value_set! {
    /// `signal.reason`: why a signal was sent.
    SignalReason for "signal"."reason" {
        Forwarded = "forwarded",
        Stop = "stop",
        Kill = "kill",
        ParentDied = "parent-died",
        Timeout = "timeout",
    }
}

/// The value sets of string fields that have one, by (event, field): in `spec/events.json` as
/// each field's `values`, for the Node and Python drivers' unions.
pub fn values(event: &str, field: &str) -> Option<Vec<&'static str>> {
    fn all<T: Copy>(set: &[T], text: fn(T) -> &'static str) -> Vec<&'static str> {
        set.iter().map(|v| text(*v)).collect()
    }
    Some(match (event, field) {
        _ if Mode::FIELD == (event, field) => all(Mode::ALL, Mode::as_str),
        _ if StopReason::FIELD == (event, field) => all(StopReason::ALL, StopReason::as_str),
        _ if SignalTarget::FIELD == (event, field) => all(SignalTarget::ALL, SignalTarget::as_str),
        _ if SignalReason::FIELD == (event, field) => all(SignalReason::ALL, SignalReason::as_str),
        _ => return None,
    })
}

/// `spec/events.json`: the table as JSON, for the Node and Python drivers' checks. Written by
/// hand (the crate has no dependencies); `tests/generated.rs` checks the file is current and
/// rewrites it with `GUARDIAN_BLESS=1`.
pub fn to_json() -> String {
    fn field(out: &mut String, event: &str, fl: &Field, indent: &str) {
        let values = match values(event, fl.name) {
            Some(set) => {
                format!(", \"values\": [{}]", set.iter().map(|v| crate::json_string(v)).collect::<Vec<_>>().join(", "))
            }
            None => String::new(),
        };
        out.push_str(&format!(
            "{indent}{{\"name\": {}, \"type\": {}, \"presence\": {}{values}, \"doc\": {}}}",
            crate::json_string(fl.name),
            crate::json_string(fl.ty.json_name()),
            crate::json_string(fl.presence.json_name()),
            crate::json_string(fl.doc)
        ));
    }
    let mut out = String::from("{\n");
    out.push_str("  \"generated_from\": \"crates/spec/src/events.rs\",\n");
    out.push_str("  \"common\": [\n");
    for (i, fl) in COMMON.iter().enumerate() {
        field(&mut out, "", fl, "    ");
        out.push_str(if i + 1 < COMMON.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ],\n  \"events\": [\n");
    for (i, ev) in EVENTS.iter().enumerate() {
        out.push_str(&format!(
            "    {{\n      \"name\": {},\n      \"doc\": {},\n      \"last\": {},\n      \"fields\": [\n",
            crate::json_string(ev.name),
            crate::json_string(ev.doc),
            ev.last
        ));
        for (j, fl) in ev.fields.iter().enumerate() {
            field(&mut out, ev.name, fl, "        ");
            out.push_str(if j + 1 < ev.fields.len() { ",\n" } else { "\n" });
        }
        out.push_str("      ]\n    }");
        out.push_str(if i + 1 < EVENTS.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_wire_shaped() {
        for (i, ev) in EVENTS.iter().enumerate() {
            assert!(EVENTS[..i].iter().all(|e| e.name != ev.name), "{} twice", ev.name);
            for (j, fl) in ev.fields.iter().enumerate() {
                assert!(ev.fields[..j].iter().all(|g| g.name != fl.name), "{}.{} twice", ev.name, fl.name);
                assert!(COMMON.iter().all(|c| c.name != fl.name), "{}.{} shadows a common field", ev.name, fl.name);
                assert!(fl.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}.{}", ev.name, fl.name);
                assert!(!fl.doc.is_empty(), "{}.{} has no doc", ev.name, fl.name);
            }
        }
        let last: Vec<&str> = EVENTS.iter().filter(|e| e.last).map(|e| e.name).collect();
        assert_eq!(last, ["released", "error"]);
    }

    /// Each value set belongs to a string field of the table, whose doc lists every value.
    #[test]
    fn value_sets_are_fields_of_the_table_and_documented() {
        for (event_name, field_name) in [Mode::FIELD, StopReason::FIELD, SignalTarget::FIELD, SignalReason::FIELD] {
            let fl = event(event_name).and_then(|e| e.field(field_name)).expect("a field of the table");
            assert_eq!(fl.ty, Type::Str, "{event_name}.{field_name}");
            for v in values(event_name, field_name).expect("a set") {
                assert!(fl.doc.contains(v), "{event_name}.{field_name}'s doc does not name {v}");
            }
        }
        assert_eq!(StopReason::parse("kill-request"), Some(StopReason::KillRequest));
        assert_eq!(StopReason::parse("soon"), None);
    }

    #[test]
    fn json_quotes_what_it_must() {
        assert_eq!(crate::json_string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }
}
