//! The one source of guardian's vocabulary: its command-line options (`options`) and the events
//! it writes (`events`). The guardian binary, the Rust client crate and the generated JSON that
//! the Node and Python drivers are checked against all come from here. No dependencies: the
//! binary's size and start-up are its product. (The `clap` feature adds the clap definition
//! built from the option table, for guardian's tests and xtask only.)

#[cfg(feature = "clap")]
pub mod clap;
pub mod events;
pub mod options;

/// A JSON string literal, for the generated `spec/*.json` (written by hand, without serde).
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
