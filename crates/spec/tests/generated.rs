//! `spec/events.json` (checked in, read by the Node and Python drivers' checks) is what
//! `treeguardian_spec::events::to_json()` writes now. A change to `src/events.rs` that is not
//! regenerated fails here; `GUARDIAN_BLESS=1 cargo test -p treeguardian-spec` (or
//! `make spec-events`) rewrites the file.

use std::path::Path;

#[test]
fn events_json_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/events.json");
    let want = treeguardian_spec::events::to_json();
    let parsed: serde_json::Value = serde_json::from_str(&want).expect("to_json() writes JSON");
    assert_eq!(
        parsed["events"].as_array().map(Vec::len),
        Some(treeguardian_spec::events::EVENTS.len()),
        "every event is in the JSON"
    );
    if std::env::var_os("GUARDIAN_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write spec/events.json");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "spec/events.json is stale or missing: run `make spec-events` (GUARDIAN_BLESS=1 cargo test -p treeguardian-spec --test generated) and commit it"
    );
}
