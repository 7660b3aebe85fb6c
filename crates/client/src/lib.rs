#![doc = include_str!("../README.md")]

mod child;
mod command;
mod events;
mod find;
mod sys;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "rmcp")]
mod transport;

pub use child::{Child, Error};
pub use command::Command;
pub use events::{Event, Released};
#[cfg(feature = "tokio")]
pub use tokio::AsyncChild;
#[cfg(feature = "rmcp")]
pub use transport::GuardianTransport;

#[doc(hidden)]
/// The guardian flags this crate writes, for checks against `spec/options.json`.
pub fn option_flags() -> Vec<String> {
    command::OPTIONS.iter().copied().chain([command::EVENTS_FD, command::EVENTS_FILE]).map(command::flag).collect()
}
