//! The one source of guardian's vocabulary: its command-line options (`options`) and the events
//! it writes (`events`). The guardian binary, the Rust client crate and the generated JSON that
//! the Node and Python drivers are checked against all come from here. No dependencies: the
//! binary's size and start-up are its product.

pub mod events;
