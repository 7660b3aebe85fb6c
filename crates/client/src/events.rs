//! events: guardian's `--events-fd` lines as typed values. The names, fields and JSON types are
//! `treeguardian_spec::events::EVENTS` (the table the guardian binary's serializer is tested
//! against); this module reads each field by the spec's name and type, and its tests check, for
//! every field of the table, that a wrong type or a missing required field is refused.

use serde_json::{Map, Value};
pub use treeguardian_spec::events::{Mode, SignalReason, SignalTarget, StopReason};

/// One line of guardian's event stream. Fields are those of docs/contract.md's events table;
/// `ts` is CLOCK_MONOTONIC seconds.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// An interface was refused and guardian does without it.
    Fallback { ts: f64, what: String, errno: String, detail: String },
    /// The provider started.
    Spawned {
        ts: f64,
        pid: i32,
        pgid: i32,
        guardian_pid: i32,
        mode: Mode,
        cgroup: Option<String>,
        /// guardian's version; `None` from a guardian older than 0.2.0 (which the crate refuses).
        version: Option<String>,
    },
    /// A teardown started (`reason` `signal`, `timeout`, `parent-died`), or a further stop
    /// request ended its grace (`kill-request`).
    Stopping { ts: f64, reason: StopReason, grace_ms: u64 },
    /// A signal was delivered.
    Signal {
        ts: f64,
        signal: String,
        target: SignalTarget,
        pid: Option<i32>,
        cgroup: Option<String>,
        pids: Option<Vec<i32>>,
        reason: SignalReason,
    },
    /// The provider stopped (job control).
    Stopped { ts: f64, pid: i32, signal: String },
    /// The provider was continued.
    Continued { ts: f64, pid: i32 },
    /// The provider was reaped.
    Exit { ts: f64, pid: i32, code: Option<i32>, signal: Option<String>, core_dumped: bool },
    /// The tree is gone; the last line.
    Released(Released),
    /// guardian failed (125/126/127) or abandoned a teardown; the last line.
    Error { ts: f64, status: i32, message: String, unkillable: Option<Vec<i32>>, remaining: Option<Vec<i32>> },
    /// A line this version does not know (a newer guardian's event) or cannot read.
    Other { line: String },
}

/// The `released` event: every descendant is gone. Its one declaration is the spec crate's
/// (`treeguardian_spec::events::Released`), the wire form of guardian's event; the handles fill
/// `exit_status` once they reaped guardian.
pub use treeguardian_spec::events::Released;

/// Reads the fields of one event object.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    event: &'a str,
}

type Res<T> = Result<T, String>;

impl Fields<'_> {
    fn get(&self, name: &str) -> Res<&Value> {
        debug_assert!(
            treeguardian_spec::events::COMMON.iter().any(|f| f.name == name)
                || treeguardian_spec::events::event(self.event).is_some_and(|e| e.field(name).is_some()),
            "{}.{name} is not in the spec",
            self.event
        );
        self.obj.get(name).ok_or_else(|| format!("{}: `{name}` missing", self.event))
    }
    fn bad(&self, name: &str, what: &str) -> String {
        format!("{}: `{name}` is not {what}", self.event)
    }
    fn nullable<T>(&self, name: &str, read: impl Fn(&Value) -> Option<T>, what: &str) -> Res<Option<T>> {
        match self.get(name)? {
            Value::Null => Ok(None),
            v => read(v).map(Some).ok_or_else(|| self.bad(name, what)),
        }
    }
    fn optional<T>(&self, name: &str, read: impl Fn(&Value) -> Option<T>, what: &str) -> Res<Option<T>> {
        match self.obj.get(name) {
            None => Ok(None),
            Some(_) => self.nullable(name, read, what),
        }
    }
    fn always<T>(&self, name: &str, read: impl Fn(&Value) -> Option<T>, what: &str) -> Res<T> {
        read(self.get(name)?).ok_or_else(|| self.bad(name, what))
    }
    fn int(&self, name: &str) -> Res<i32> {
        self.always(name, int, "an int")
    }
    fn uint(&self, name: &str) -> Res<u64> {
        self.always(name, Value::as_u64, "an unsigned int")
    }
    fn float(&self, name: &str) -> Res<f64> {
        self.always(name, Value::as_f64, "a number")
    }
    fn string(&self, name: &str) -> Res<String> {
        self.always(name, string, "a string")
    }
    /// A string of a value set (`treeguardian_spec::events`' enums); one this version does not
    /// know makes the line unreadable here (it is then [`Event::Other`]).
    fn value<T>(&self, name: &str, parse: fn(&str) -> Option<T>) -> Res<T> {
        let text = self.string(name)?;
        parse(&text).ok_or_else(|| format!("{}: `{name}` has a value this version does not know: {text}", self.event))
    }
}

fn int(v: &Value) -> Option<i32> {
    v.as_i64().and_then(|n| i32::try_from(n).ok())
}
fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}
fn ints(v: &Value) -> Option<Vec<i32>> {
    v.as_array()?.iter().map(int).collect()
}

impl Event {
    /// Parses one line (with or without its newline). An unknown event name gives
    /// [`Event::Other`]; a known event with a missing or mistyped field is an error.
    pub fn parse(line: &str) -> Result<Event, String> {
        let value: Value = serde_json::from_str(line.trim_end()).map_err(|e| format!("not JSON: {e}"))?;
        let obj = value.as_object().ok_or("not a JSON object")?;
        let name = obj.get("event").and_then(Value::as_str).ok_or("no `event` name")?;
        let f = Fields { obj, event: name };
        let ts = f.float("ts")?;
        Ok(match name {
            "fallback" => {
                Event::Fallback { ts, what: f.string("what")?, errno: f.string("errno")?, detail: f.string("detail")? }
            }
            "spawned" => Event::Spawned {
                ts,
                pid: f.int("pid")?,
                pgid: f.int("pgid")?,
                guardian_pid: f.int("guardian_pid")?,
                mode: f.value("mode", Mode::parse)?,
                cgroup: f.nullable("cgroup", string, "a string")?,
                // Read as optional although guardian 0.2.0 always writes it: an older guardian
                // leaves it out, and that is the version check's refusal, not an unreadable line.
                version: f.optional("version", string, "a string")?,
            },
            "stopping" => {
                Event::Stopping { ts, reason: f.value("reason", StopReason::parse)?, grace_ms: f.uint("grace_ms")? }
            }
            "signal" => Event::Signal {
                ts,
                signal: f.string("signal")?,
                target: f.value("target", SignalTarget::parse)?,
                pid: f.optional("pid", int, "an int")?,
                cgroup: f.optional("cgroup", string, "a string")?,
                pids: f.optional("pids", ints, "an array of ints")?,
                reason: f.value("reason", SignalReason::parse)?,
            },
            "stopped" => Event::Stopped { ts, pid: f.int("pid")?, signal: f.string("signal")? },
            "continued" => Event::Continued { ts, pid: f.int("pid")? },
            "exit" => Event::Exit {
                ts,
                pid: f.int("pid")?,
                code: f.nullable("code", int, "an int")?,
                signal: f.nullable("signal", string, "a string")?,
                core_dumped: f.always("core_dumped", Value::as_bool, "a bool")?,
            },
            "released" => Event::Released(Released {
                ts,
                status: f.int("status")?,
                signalled: f.nullable("signalled", Value::as_u64, "an unsigned int")?,
                killed: f.uint("killed")?,
                reaped: f.uint("reaped")?,
                teardown_ms: f.float("teardown_ms")?,
                cgroup: f.nullable("cgroup", string, "a string")?,
                oom_kill: f.nullable("oom_kill", Value::as_u64, "an unsigned int")?,
                provider_user_ms: f.float("provider_user_ms")?,
                provider_system_ms: f.float("provider_system_ms")?,
                provider_max_rss_kb: f.uint("provider_max_rss_kb")?,
                tree_user_ms: f.float("tree_user_ms")?,
                tree_system_ms: f.float("tree_system_ms")?,
                tree_max_rss_kb: f.uint("tree_max_rss_kb")?,
                exit_status: None,
            }),
            "error" => Event::Error {
                ts,
                status: f.int("status")?,
                message: f.string("message")?,
                unkillable: f.optional("unkillable", ints, "an array of ints")?,
                remaining: f.optional("remaining", ints, "an array of ints")?,
            },
            _ => Event::Other { line: line.trim_end().to_string() },
        })
    }

    /// The `event` name (`None` for [`Event::Other`]).
    pub fn name(&self) -> Option<&'static str> {
        Some(match self {
            Event::Fallback { .. } => "fallback",
            Event::Spawned { .. } => "spawned",
            Event::Stopping { .. } => "stopping",
            Event::Signal { .. } => "signal",
            Event::Stopped { .. } => "stopped",
            Event::Continued { .. } => "continued",
            Event::Exit { .. } => "exit",
            Event::Released(_) => "released",
            Event::Error { .. } => "error",
            Event::Other { .. } => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use treeguardian_spec::events::{EVENTS, EventSpec, Presence, Type};

    fn sample(ty: Type) -> Value {
        match ty {
            Type::Int => Value::from(7),
            Type::UInt => Value::from(8u64),
            Type::Float => Value::from(1.25),
            Type::Bool => Value::from(true),
            Type::Str => Value::from("s"),
            Type::IntArray => Value::from(vec![1, 2]),
        }
    }
    fn wrong(ty: Type) -> Value {
        match ty {
            Type::Str => Value::from(1),
            Type::IntArray => Value::from(vec!["x"]),
            Type::UInt => Value::from(-1),
            _ => Value::from("x"),
        }
    }
    fn line(spec: &EventSpec, edit: impl Fn(&mut Map<String, Value>)) -> String {
        let mut obj = Map::new();
        obj.insert("event".into(), spec.name.into());
        obj.insert("ts".into(), 12.5.into());
        for f in spec.fields {
            let value = match treeguardian_spec::events::values(spec.name, f.name) {
                Some(set) => Value::from(set[0]),
                None => sample(f.ty),
            };
            obj.insert(f.name.into(), value);
        }
        edit(&mut obj);
        Value::Object(obj).to_string()
    }

    /// Driven by the spec table: the client reads every field it lists, with its type and
    /// presence. A field the client did not read would let a wrong type through.
    #[test]
    fn every_spec_field_is_read_with_its_type_and_presence() {
        for spec in EVENTS {
            let full = Event::parse(&line(spec, |_| {})).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            assert_eq!(full.name(), Some(spec.name));
            for field in spec.fields {
                let mistyped = line(spec, |o| {
                    o.insert(field.name.into(), wrong(field.ty));
                });
                assert!(Event::parse(&mistyped).is_err(), "{}.{} accepted {mistyped}", spec.name, field.name);
                let nulled = Event::parse(&line(spec, |o| {
                    o.insert(field.name.into(), Value::Null);
                }));
                let absent = Event::parse(&line(spec, |o| {
                    o.remove(field.name);
                }));
                match field.presence {
                    // (see `Event::parse`: a missing version is the version check's case)
                    Presence::Always if spec.name == "spawned" && field.name == "version" => {
                        assert!(absent.is_ok(), "spawned.version may be absent (an older guardian)")
                    }
                    Presence::Always => {
                        assert!(nulled.is_err() && absent.is_err(), "{}.{} is required", spec.name, field.name)
                    }
                    Presence::Nullable => {
                        assert!(nulled.is_ok() && absent.is_err(), "{}.{} is nullable", spec.name, field.name)
                    }
                    Presence::Optional => assert!(absent.is_ok(), "{}.{} may be absent", spec.name, field.name),
                }
            }
        }
    }

    /// Every value of every set reads as its enum; a value outside the set does not.
    #[test]
    fn value_sets_read_as_the_spec_enums() {
        for spec in EVENTS {
            for f in spec.fields {
                let Some(set) = treeguardian_spec::events::values(spec.name, f.name) else { continue };
                for v in &set {
                    let ok = Event::parse(&line(spec, |o| {
                        o.insert(f.name.into(), Value::from(*v));
                    }));
                    assert!(ok.is_ok(), "{}.{} = {v}: {ok:?}", spec.name, f.name);
                }
                let unknown = Event::parse(&line(spec, |o| {
                    o.insert(f.name.into(), Value::from("no-such-value"));
                }));
                assert!(unknown.is_err(), "{}.{} took an unknown value", spec.name, f.name);
            }
        }
    }

    #[test]
    fn unknown_events_and_fields_are_tolerated() {
        assert!(matches!(Event::parse(r#"{"event":"new-thing","ts":1.0}"#), Ok(Event::Other { .. })));
        let e = Event::parse(r#"{"event":"continued","ts":1.0,"pid":5,"later":true}"#).unwrap();
        assert_eq!(e, Event::Continued { ts: 1.0, pid: 5 });
        assert!(Event::parse("not json").is_err());
    }
}
