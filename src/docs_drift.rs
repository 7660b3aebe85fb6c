//! docs_drift: the structural claims of docs/design.md and of `main.rs`'s header, held to the
//! source tree by unit tests: the module map names every source file (and only files that
//! exist), the house and `main.rs`'s module list name every module, and the start-up steps
//! have one numbering, which `main.rs`'s `// N. Title` comments and every "start-up step N"
//! citation follow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// A section of a markdown file: from the heading line to the next heading of that level.
fn section<'t>(text: &'t str, heading: &str) -> &'t str {
    let start = text.find(heading).unwrap_or_else(|| panic!("no section {heading:?}"));
    let body = &text[start + heading.len()..];
    let level = heading.split(' ').next().unwrap_or("##");
    let end = body.find(&format!("\n{level} ")).unwrap_or(body.len());
    &body[..end]
}

/// Every `.rs` file below `dir`, as a path relative to the repository (`src/cli/mod.rs`).
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).expect("read src").flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root()).expect("below the root");
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// A test module (or a file of a `tests/` folder of test modules) belongs to the row of the
/// module it sits in.
fn is_test_module(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.ends_with("_test.rs") || path.contains("/tests/")
}

/// The code spans of the first column of design.md's module map.
fn mapped() -> Vec<String> {
    let design = read("docs/design.md");
    let mut out = Vec::new();
    for line in section(&design, "## Modules (where to look)").lines() {
        let Some(cell) = line.strip_prefix("| `").and_then(|l| l.split(" | ").next()) else { continue };
        let cell = format!("`{cell}");
        out.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    out
}

#[test]
fn the_module_map_names_every_source_file_and_nothing_else() {
    let map = mapped();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !is_test_module(f))
        .filter(|f| !map.iter().any(|m| m == *f || (m.ends_with('/') && f.starts_with(m.as_str()))))
        .collect();
    assert!(missing.is_empty(), "docs/design.md's module map does not name {missing:?}");
    let stale: Vec<&String> = map.iter().filter(|m| !root().join(m).exists()).collect();
    assert!(stale.is_empty(), "docs/design.md's module map names files that do not exist: {stale:?}");
}

/// The modules `main.rs` declares (test-only ones aside).
fn modules() -> BTreeSet<String> {
    let main = read("src/main.rs");
    let mut out = BTreeSet::new();
    let mut test_only = false;
    for line in main.lines() {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            if !test_only {
                out.insert(name.to_string());
            }
        }
        if !line.starts_with("//") && !line.starts_with("#[") {
            test_only = false;
        }
    }
    out
}

#[test]
fn the_house_and_mains_header_name_every_module() {
    let modules = modules();
    assert!(modules.len() >= 15 && modules.contains("sentinel"), "{modules:?}");

    let design = read("docs/design.md");
    let house = section(&design, "## The house (module imports)");
    let diagram = house.split("```").nth(1).expect("the house's diagram");
    let mut in_house = BTreeSet::new();
    for line in diagram.lines() {
        let rest = line.trim_start().trim_start_matches(|c: char| c.is_ascii_digit() || c == '═').trim();
        for chunk in rest.split("   ").flat_map(|c| c.split(" · ")).map(str::trim) {
            if !chunk.is_empty() && chunk.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                in_house.insert(chunk.to_string());
            }
        }
    }
    assert!(in_house.remove("main"), "the house's top floor is main");
    assert_eq!(in_house, modules, "docs/design.md's house (left) against main.rs's `mod` lines (right)");

    let main = read("src/main.rs");
    let header: String = main.lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    let list = header.split("//! Modules").nth(1).expect("main.rs's header lists the modules");
    let named: BTreeSet<String> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| modules.contains(*w) || w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .filter(|w| !["sweep", "unsafe", "docs_drift"].contains(w))
        .map(str::to_string)
        .collect();
    assert_eq!(named, modules, "main.rs's header list of modules (left) against its `mod` lines (right)");
}

/// The start-up steps of design.md: number → title.
fn design_steps() -> BTreeMap<String, String> {
    let design = read("docs/design.md");
    let mut steps = BTreeMap::new();
    for line in section(&design, "## Start-up order (and why)").lines() {
        let Some((num, rest)) = line.split_once(". **") else { continue };
        if num.is_empty()
            || !num.bytes().all(|b| b.is_ascii_alphanumeric())
            || !num.starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        let title = rest.split("**").next().unwrap_or_default().trim_end_matches('.');
        steps.insert(num.to_string(), title.to_string());
    }
    steps
}

/// "start-up step N" and "start-up steps N to M" in `text`: the numbers cited.
fn citations(text: &str) -> Vec<String> {
    let step = |t: &str| -> Option<String> {
        let n: String = t.chars().take_while(char::is_ascii_alphanumeric).collect();
        n.starts_with(|c: char| c.is_ascii_digit()).then_some(n)
    };
    let mut out = Vec::new();
    for part in text.to_lowercase().split("start-up step").skip(1) {
        let part = part.strip_prefix('s').unwrap_or(part).trim_start();
        let Some(n) = step(part) else { continue };
        if let Some(m) = part[n.len()..].strip_prefix(" to ").and_then(step) {
            out.push(n);
            out.push(m);
        } else {
            out.push(n);
        }
    }
    out
}

#[test]
fn the_start_up_steps_have_one_numbering() {
    let steps = design_steps();
    for n in ["0", "1", "1b", "2", "3", "3b", "4", "5", "6", "7", "7b", "8", "9", "10"] {
        assert!(steps.contains_key(n), "docs/design.md has no start-up step {n}: {steps:?}");
    }
    // main.rs's `// N. Title` comments: each is design.md's step N, under its title.
    let main = read("src/main.rs");
    let mut in_main = BTreeSet::new();
    for line in main.lines() {
        let Some((num, text)) = line.trim_start().strip_prefix("// ").and_then(|l| l.split_once(". ")) else {
            continue;
        };
        if num.is_empty()
            || !num.starts_with(|c: char| c.is_ascii_digit())
            || !num.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            continue;
        }
        let title = steps.get(num).unwrap_or_else(|| panic!("main.rs cites step {num}, which design.md lacks: {line}"));
        assert!(text.starts_with(title.as_str()), "main.rs's step {num} is \"{title}\" in design.md: {line}");
        in_main.insert(num.to_string());
    }
    // Every citation, in the code, the docs and the tests, names a step that exists; every step
    // is cited in the code (main.rs's comments, or "start-up step N" where it happens).
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    rust_files(&root().join("tests"), &mut files);
    for doc in ["README.md", "docs/contract.md", "docs/threat-model.md", "docs/benchmarks.md", "docs/design.md"] {
        files.push(doc.to_string());
    }
    let mut cited_in_code = in_main;
    for f in &files {
        let Ok(text) = std::fs::read_to_string(root().join(f)) else { continue };
        for n in citations(&text) {
            assert!(steps.contains_key(&n), "{f} cites start-up step {n}, which docs/design.md lacks");
            if f.starts_with("src/") {
                cited_in_code.insert(n);
            }
        }
    }
    let uncited: Vec<&String> = steps.keys().filter(|n| !cited_in_code.contains(*n)).collect();
    assert!(uncited.is_empty(), "start-up steps no code names: {uncited:?}");
}

#[test]
fn citations_are_read_as_written() {
    assert_eq!(citations("see start-up step 3b, then Start-up steps 4 to 9."), ["3b", "4", "9"]);
    assert_eq!(citations("(start-up step 5) says why"), ["5"]);
    assert!(citations("step 2 of a benchmark").is_empty());
}
