//! guardian's integration tests: one test binary (ripgrep's layout), one module per area and
//! one harness (`harness/`). Run them with `make test` (see `README.md` in this directory).

#[macro_use]
mod harness;

mod behaviour;
mod cgroup;
mod cli;
mod core;
mod denial;
mod doctor;
mod events_file;
mod exhaustion;
mod job_control;
mod namespaces;
mod restricted;
mod security;
mod sentinel;
mod signals_all;
mod startup_hostile;
mod supervise_stop;
mod teardown_hostile;
mod terminal;

/// The README's list of areas is the list above: an area added here and not there fails.
#[test]
fn the_readme_names_every_area() {
    let areas: Vec<&str> = include_str!("main.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .filter(|m| *m != "harness")
        .collect();
    let readme = include_str!("README.md");
    let missing: Vec<&&str> = areas.iter().filter(|a| !readme.contains(&format!("`{a}`"))).collect();
    assert!(areas.len() >= 16, "{areas:?}");
    assert!(missing.is_empty(), "tests/it/README.md does not name the areas {missing:?}");
}
