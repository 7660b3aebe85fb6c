//! The one source of guardian's vocabulary: its command-line options (`options`) and the events
//! it writes (`events`). The guardian binary, the Rust client crate and the generated JSON that
//! the Node and Python drivers are checked against all come from here. No dependencies: the
//! binary's size and start-up are its product. (The `clap` feature adds the clap definition
//! built from the option table, for guardian's tests and xtask only.)

#[cfg(feature = "clap")]
pub mod clap;
pub mod events;
pub mod options;
