//! Transitional: a test file written against the old `tests/common` harness (`mod common;` +
//! `use common::*;`) still compiles as a binary of its own, on the one harness in
//! `tests/it/harness`. Port such a file into `tests/it/` (see `tests/it/README.md`) and
//! delete this shim once no file uses it.
#![allow(dead_code, unused_macros, unused_imports)]

#[path = "../it/harness/mod.rs"]
#[macro_use]
mod harness;

pub use harness::*;
