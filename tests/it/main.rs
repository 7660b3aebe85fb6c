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
