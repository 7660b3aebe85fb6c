#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

mod child;
mod command;
pub mod driver;
mod error;
mod events;
mod find;
mod resolve;
mod state;
#[allow(unsafe_code)] // the `pre_exec` and the kill request's signal number, each with its SAFETY note
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;
#[cfg(feature = "rmcp")]
mod transport;
#[cfg(feature = "process-wrap")]
pub mod wrap;

pub use child::Child;
pub use command::Command;
pub use error::Error;
pub use events::{Event, Mode, Released, SignalReason, SignalTarget, StopReason};
pub use state::ReleasedHandle;
#[cfg(feature = "tokio")]
pub use tokio::AsyncChild;
#[cfg(feature = "rmcp")]
pub use transport::GuardianTransport;

#[doc(hidden)]
/// The guardian flags this crate writes, for checks against `spec/options.json`.
pub fn option_flags() -> Vec<String> {
    command::OPTIONS.iter().copied().chain([command::EVENTS_FD, command::EVENTS_FILE]).map(command::flag).collect()
}
