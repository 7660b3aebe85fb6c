//! The event schema against its one definition, `treeguardian_spec::events::EVENTS` (names,
//! wire order, JSON types, presence), against the Rust client's parser
//! (`treeguardian_client::Event`, which must read every line the serializer writes into its
//! typed variant), and against its three descriptions: docs/contract.md's events table, the man
//! page's EVENTS section (man/guardian.1, generated from xtask/src/man.rs) and the Node
//! driver's packaging/npm/index.d.ts. Each must name every event and every field [`Event`]
//! emits and nothing else, say "null" for a field that can be null, and say when a field that
//! can be absent is there ("for ...", "when ..."; `?` in TypeScript). packaging/npm's
//! contract.test.js checks index.d.ts against the contract's values too.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;

/// Records the schema instead of values.
#[derive(Default)]
struct Schema(Vec<(&'static str, Presence)>);

impl Sink for Schema {
    fn field(&mut self, name: &'static str, presence: Presence, _value: Option<Value>) {
        self.0.push((name, presence));
    }
}

/// Position of each variant in [`every_event`]. A new variant fails to compile here: give it a
/// sample there too, with every optional field set.
fn index(e: &Event) -> usize {
    match e {
        Event::Fallback { .. } => 0,
        Event::Spawned { .. } => 1,
        Event::Stopping { .. } => 2,
        Event::Signal(_) => 3,
        Event::Stopped { .. } => 4,
        Event::Continued { .. } => 5,
        Event::Exit { .. } => 6,
        Event::Released(_) => 7,
        Event::Error { .. } => 8,
    }
}
const VARIANTS: usize = 9;

/// One of each variant, every `Option` set (so every field appears).
fn every_event() -> Vec<Event> {
    let usage = Usage { user: Duration::from_micros(1500), system: Duration::from_micros(250), max_rss_kb: 2048 };
    vec![
        Event::Fallback { what: "clone3".into(), errno: "ENOSYS".into(), detail: "fork".into() },
        Event::Spawned { pid: 10, pgid: 10, guardian_pid: 9, mode: "cgroup", cgroup: Some("/leaf".into()) },
        Event::Stopping { reason: "signal", grace_ms: 1000 },
        Event::Signal(Signal {
            signal: "SIGTERM".into(),
            target: "cgroup",
            pid: Some(10),
            cgroup: Some("/leaf".into()),
            pids: Some(vec![11]),
            reason: "stop".into(),
        }),
        Event::Stopped { pid: 10, signal: "SIGTSTP".into() },
        Event::Continued { pid: 10 },
        Event::Exit { pid: 10, code: Some(0), signal: Some("SIGTERM".into()), core_dumped: false },
        Event::Released(Released {
            status: 0,
            signalled: Some(1),
            killed: 0,
            reaped: 1,
            teardown_ms: 2.5,
            cgroup: Some("/leaf".into()),
            oom_kill: Some(0),
            provider: usage,
            tree: usage,
        }),
        Event::Error {
            status: 125,
            message: "m".into(),
            abandoned: Some(Abandoned { unkillable: vec![10], remaining: vec![11] }),
        },
    ]
}

/// Event name → its fields in wire order, from [`Event::fields`].
fn emitted() -> BTreeMap<&'static str, Vec<(&'static str, Presence)>> {
    let all = every_event();
    let mut seen: Vec<usize> = all.iter().map(index).collect();
    seen.sort();
    assert_eq!(seen, (0..VARIANTS).collect::<Vec<_>>(), "every_event() needs exactly one sample per variant");
    all.iter()
        .map(|e| {
            let mut schema = Schema::default();
            e.fields(&mut schema);
            (e.name(), schema.0)
        })
        .collect()
}

/// What a description says about one field: the text that describes it.
type Described = BTreeMap<String, Vec<(String, String)>>;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Splits `text` at the commas outside parentheses.
fn top_level_pieces(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut pieces) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                pieces.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(&text[start..]);
    pieces
}

/// docs/contract.md's `## Events` table: a field is a backticked name outside parentheses; its
/// description runs to the next field.
fn contract() -> Described {
    let md = read("docs/contract.md");
    let start = md.find("\n## Events").expect("docs/contract.md has a `## Events` section");
    let section = &md[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    let mut out = Described::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').splitn(2, '|').map(str::trim).collect();
        let name = cells[0].trim_matches('`').to_string();
        let cell = cells.get(1).copied().unwrap_or("");
        // Byte offsets of the backticked names at depth 0.
        let (mut depth, mut starts) = (0i32, Vec::new());
        let mut iter = cell.char_indices().peekable();
        while let Some((i, c)) = iter.next() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                '`' => {
                    let rest = &cell[i + 1..];
                    let end = rest.find('`').unwrap_or(rest.len());
                    let word = &rest[..end];
                    if depth == 0 && !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                        starts.push((i, word.to_string()));
                    }
                    // Skip the quoted text and its closing backtick.
                    while iter.peek().is_some_and(|&(j, _)| j <= i + 1 + end) {
                        iter.next();
                    }
                }
                _ => {}
            }
        }
        let fields = starts
            .iter()
            .enumerate()
            .map(|(k, (at, word))| {
                let end = starts.get(k + 1).map_or(cell.len(), |n| n.0);
                (word.clone(), cell[*at..end].to_string())
            })
            .collect();
        out.insert(name, fields);
    }
    out
}

/// man/guardian.1's EVENTS section: `.TP`, `\fBname\fR`, then the fields, comma-separated,
/// each a name with an optional `(description)` or `: remark`.
fn man_page() -> Described {
    let page = read("man/guardian.1");
    let start = page.find("\n.SH EVENTS\n").expect("man/guardian.1 has an EVENTS section");
    let section = &page[start + 1..];
    let section = &section[..section[1..].find("\n.SH ").map_or(section.len(), |i| i + 1)];
    let lines: Vec<&str> = section.lines().collect();
    let mut out = Described::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line.strip_prefix("\\fB").and_then(|l| l.strip_suffix("\\fR")) else { continue };
        if i == 0 || lines[i - 1] != ".TP" {
            continue;
        }
        let text = lines.get(i + 1).copied().unwrap_or("").replace("\\-", "-").replace("\\*(Aq", "'");
        let mut fields = Vec::new();
        for piece in top_level_pieces(&text) {
            let piece = piece.trim();
            let word: String = piece.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            let rest = &piece[word.len()..];
            assert!(
                !word.is_empty() && (rest.is_empty() || rest.starts_with(" (") || rest.starts_with(':')),
                "man page, event {name}: cannot read the field in {piece:?} (write `field (description)`)"
            );
            fields.push((word, piece.to_string()));
        }
        out.insert(name.replace("\\-", "-"), fields);
    }
    out
}

/// packaging/npm/index.d.ts: the interface with `event: 'name';`, its members but `event`;
/// the description is the declaration (`?` and the type).
fn typescript() -> Described {
    let dts = read("packaging/npm/index.d.ts");
    let mut out = Described::new();
    for block in dts.split("export interface ").skip(1) {
        let body = &block[..block.find("\n}").unwrap_or(block.len())];
        // The member line `event: 'name';` (not a method's `on(event: 'event', ...)`).
        let member = body.lines().map(str::trim).find_map(|l| l.strip_prefix("event: '"));
        let Some(name) = member.and_then(|r| r.split('\'').next()) else { continue };
        if name == "malformed" {
            continue; // the driver's own, not guardian's
        }
        let fields = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("/*") && !l.starts_with('*') && !l.starts_with("//"))
            .filter_map(|l| {
                let (member, _) = l.split_once(':')?;
                let field = member.trim_end_matches('?');
                let ok = !field.is_empty() && field.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                (ok && field != "event").then(|| (field.to_string(), l.to_string()))
            })
            .collect();
        out.insert(name.to_string(), fields);
    }
    out
}

/// Everything `described` gets wrong about the schema, one line each.
fn problems(source: &str, described: &Described, typescript: bool) -> Vec<String> {
    let emitted = emitted();
    let mut out = Vec::new();
    for (event, fields) in &emitted {
        let Some(doc) = described.get(*event) else {
            out.push(format!("{source}: event `{event}` is missing"));
            continue;
        };
        for (field, presence) in fields {
            let Some((_, text)) = doc.iter().find(|(f, _)| f == field) else {
                out.push(format!("{source}: {event}.{field} is missing"));
                continue;
            };
            let says_null = text.contains("null");
            let says_when = if typescript {
                text.starts_with(&format!("{field}?:"))
            } else {
                text.contains("for ") || text.contains("when ")
            };
            match presence {
                Presence::Nullable if !says_null => out.push(format!("{source}: {event}.{field} can be null; say so")),
                Presence::Always if typescript && says_null => {
                    out.push(format!("{source}: {event}.{field} is never null"))
                }
                Presence::Optional if !says_when => {
                    out.push(format!("{source}: {event}.{field} can be absent; say when it is there"))
                }
                _ => {}
            }
        }
        for (field, _) in doc {
            if !fields.iter().any(|(f, _)| f == field) {
                out.push(format!("{source}: {event}.{field} is documented but never emitted"));
            }
        }
    }
    for event in described.keys() {
        if !emitted.contains_key(event.as_str()) {
            out.push(format!("{source}: event `{event}` is documented but never emitted"));
        }
    }
    out
}

#[test]
fn contract_lists_every_event_and_field() {
    assert_eq!(problems("docs/contract.md", &contract(), false), Vec::<String>::new());
}

#[test]
fn man_page_lists_every_event_and_field() {
    assert_eq!(problems("man/guardian.1", &man_page(), false), Vec::<String>::new());
}

/// The help texts' "Events (--events-fd N): ..." paragraph (crates/spec/src/clap.rs, rendered
/// into man/help/ and printed by `guardian --help`) names every event, and nothing else.
#[test]
fn help_text_lists_every_event() {
    for file in ["man/help/guardian.txt", "man/help/guardian.long.txt"] {
        let text = read(file);
        let start = text.find("Events (--events-fd N):").unwrap_or_else(|| panic!("{file}: no Events paragraph"));
        let para = text[start..].split("\n\n").next().unwrap_or_default();
        let list = para.split_once("`ts`:").map_or("", |(_, l)| l);
        // Each comma-separated piece starts with an event's name ("released (always last; ...)").
        let named: Vec<&str> = list
            .split(',')
            .filter_map(|piece| piece.split_whitespace().next())
            .map(|w| w.trim_end_matches('.'))
            .collect();
        let mut named_sorted = named.clone();
        named_sorted.sort_unstable();
        let expected: Vec<&str> = emitted().keys().copied().collect();
        assert_eq!(named_sorted, expected, "{file}: the Events paragraph lists {named:?}");
    }
}

#[test]
fn typescript_declares_every_event_and_field() {
    assert_eq!(problems("packaging/npm/index.d.ts", &typescript(), true), Vec::<String>::new());
}

/// The parsers find what they should: a check that reads nothing would pass.
#[test]
fn the_descriptions_are_read() {
    for (source, described) in [("contract", contract()), ("man", man_page()), ("typescript", typescript())] {
        assert!(described.len() >= 9, "{source}: only {} events read", described.len());
        assert!(
            described.get("exit").is_some_and(|f| f.len() == 4),
            "{source}: exit read as {:?}",
            described.get("exit")
        );
    }
    let broken = Described::from([("exit".to_string(), vec![("pid".to_string(), "pid".to_string())])]);
    let found = problems("x", &broken, false);
    assert!(found.contains(&"x: exit.code is missing".to_string()), "{found:?}");
    assert!(found.contains(&"x: event `released` is missing".to_string()), "{found:?}");
}

/// The serializer writes each field where the schema says, in order, and `null` or nothing
/// for a missing value as its presence says.
#[test]
fn lines_follow_the_schema() {
    for event in every_event() {
        let line = event.to_line(Duration::from_micros(1_500_000));
        let value: Value = serde_json::from_str(&line).expect("a JSON line");
        let keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
        let mut schema = Schema::default();
        event.fields(&mut schema);
        let mut want = vec!["event", "ts"];
        want.extend(schema.0.iter().map(|(f, _)| *f));
        assert_eq!(keys, want, "{line}");
        assert!(line.ends_with("}\n"));
    }
}

/// Today's wire format, byte for byte, for the shapes drivers parse.
#[test]
fn wire_format_is_unchanged() {
    let ts = Duration::from_micros(81_235_101_020);
    let signal = |target: &'static str, pid, cgroup: Option<&str>, pids: Option<Vec<i32>>, reason: &str| {
        Event::Signal(Signal {
            signal: "SIGTERM".into(),
            target,
            pid,
            cgroup: cgroup.map(Into::into),
            pids,
            reason: reason.into(),
        })
        .to_line(ts)
    };
    let head = r#"{"event":"signal","ts":81235.10102,"signal":"SIGTERM","#;
    assert_eq!(
        signal("descendants", None, None, Some(vec![4250]), "stop"),
        format!("{head}\"target\":\"descendants\",\"pids\":[4250],\"reason\":\"stop\"}}\n")
    );
    assert_eq!(
        signal("provider", Some(4242), None, None, "forwarded"),
        format!("{head}\"target\":\"provider\",\"pid\":4242,\"reason\":\"forwarded\"}}\n")
    );
    assert_eq!(
        signal("cgroup", None, Some("/l"), Some(vec![]), "kill"),
        format!("{head}\"target\":\"cgroup\",\"cgroup\":\"/l\",\"pids\":[],\"reason\":\"kill\"}}\n")
    );
    assert_eq!(
        signal("namespace", None, None, None, "stop"),
        format!("{head}\"target\":\"namespace\",\"reason\":\"stop\"}}\n")
    );
    let exit = Event::Exit { pid: 4242, code: None, signal: Some("SIGKILL".into()), core_dumped: false };
    assert_eq!(
        exit.to_line(ts),
        "{\"event\":\"exit\",\"ts\":81235.10102,\"pid\":4242,\"code\":null,\"signal\":\"SIGKILL\",\"core_dumped\":false}\n"
    );
    let released = Event::Released(Released { status: 3, teardown_ms: 2.506, ..Released::default() });
    assert_eq!(
        released.to_line(ts),
        "{\"event\":\"released\",\"ts\":81235.10102,\"status\":3,\"signalled\":null,\"killed\":0,\"reaped\":0,\
         \"teardown_ms\":2.506,\"cgroup\":null,\"oom_kill\":null,\"provider_user_ms\":0.0,\"provider_system_ms\":0.0,\
         \"provider_max_rss_kb\":0,\"tree_user_ms\":0.0,\"tree_system_ms\":0.0,\"tree_max_rss_kb\":0}\n"
    );
    let error = Event::Error { status: 127, message: "m".into(), abandoned: None };
    assert_eq!(error.to_line(ts), "{\"event\":\"error\",\"ts\":81235.10102,\"status\":127,\"message\":\"m\"}\n");
}

/// The JSON type the spec names, checked on a value the serializer wrote.
fn has_type(value: &Value, ty: treeguardian_spec::events::Type) -> bool {
    use treeguardian_spec::events::Type;
    match ty {
        Type::Int => value.as_i64().is_some(),
        Type::UInt => value.as_u64().is_some(),
        Type::Float => value.is_number(),
        Type::Bool => value.is_boolean(),
        Type::Str => value.is_string(),
        Type::IntArray => value.as_array().is_some_and(|a| a.iter().all(|v| v.as_i64().is_some())),
    }
}

/// The serializer writes exactly the spec's events and fields, in the spec's order, with the
/// spec's presence and JSON types (every `Option` set in [`every_event`], so every field is
/// written with a value).
#[test]
fn serializer_follows_the_spec_table() {
    use treeguardian_spec::events::{COMMON, EVENTS};
    let emitted = emitted();
    let spec_names: Vec<&str> = EVENTS.iter().map(|e| e.name).collect();
    let mut ours: Vec<&str> = emitted.keys().copied().collect();
    ours.sort();
    let mut theirs = spec_names.clone();
    theirs.sort();
    assert_eq!(ours, theirs, "the binary's events and crates/spec/src/events.rs differ");
    for event in &every_event() {
        let spec = treeguardian_spec::events::event(event.name()).expect("checked above");
        let want: Vec<(&str, Presence)> = spec.fields.iter().map(|f| (f.name, f.presence)).collect();
        assert_eq!(emitted[event.name()], want, "{}: fields, order or presence differ from the spec", spec.name);
        let line = event.to_line(Duration::from_micros(1_500_000));
        let value: Value = serde_json::from_str(&line).expect("a JSON line");
        for field in COMMON.iter().chain(spec.fields) {
            let got = &value[field.name];
            assert!(has_type(got, field.ty), "{}.{} = {got} is not a {:?}", spec.name, field.name, field.ty);
        }
    }
}

/// The Rust client reads every line the serializer writes into its typed variant, with the
/// values written (every `Option` set, and each of them unset).
#[test]
fn the_client_reads_every_line() {
    use treeguardian_client::Event as Client;
    for event in &every_event() {
        let line = event.to_line(Duration::from_micros(1_500_000));
        let parsed = Client::parse(&line).unwrap_or_else(|e| panic!("client refused {line}: {e}"));
        assert_eq!(parsed.name(), Some(event.name()), "{line}");
    }
    let exit = Event::Exit { pid: 4242, code: None, signal: Some("SIGKILL".into()), core_dumped: true };
    assert_eq!(
        Client::parse(&exit.to_line(Duration::from_secs(2))).unwrap(),
        Client::Exit { ts: 2.0, pid: 4242, code: None, signal: Some("SIGKILL".into()), core_dumped: true }
    );
    let signal = Event::Signal(Signal {
        signal: "SIGTERM".into(),
        target: "descendants",
        pid: None,
        cgroup: None,
        pids: Some(vec![7, 8]),
        reason: "stop".into(),
    });
    assert_eq!(
        Client::parse(&signal.to_line(Duration::from_secs(2))).unwrap(),
        Client::Signal {
            ts: 2.0,
            signal: "SIGTERM".into(),
            target: treeguardian_spec::events::SignalTarget::Descendants,
            pid: None,
            cgroup: None,
            pids: Some(vec![7, 8]),
            reason: treeguardian_spec::events::SignalReason::Stop
        }
    );
    let usage = Usage { user: Duration::from_micros(1500), system: Duration::from_micros(250), max_rss_kb: 2048 };
    let released = Event::Released(Released {
        status: 3,
        signalled: None,
        killed: 1,
        reaped: 2,
        teardown_ms: 2.5,
        cgroup: None,
        oom_kill: Some(0),
        provider: usage,
        tree: usage,
    });
    match Client::parse(&released.to_line(Duration::from_secs(2))).unwrap() {
        Client::Released(r) => {
            assert_eq!((r.status, r.signalled, r.killed, r.reaped, r.oom_kill), (3, None, 1, 2, Some(0)));
            assert_eq!(
                (r.teardown_ms, r.provider_user_ms, r.tree_system_ms, r.tree_max_rss_kb),
                (2.5, 1.5, 0.25, 2048)
            );
        }
        other => panic!("{other:?}"),
    }
    let error = Event::Error { status: 125, message: "m".into(), abandoned: None };
    assert_eq!(
        Client::parse(&error.to_line(Duration::from_secs(2))).unwrap(),
        Client::Error { ts: 2.0, status: 125, message: "m".into(), unkillable: None, remaining: None }
    );
}
