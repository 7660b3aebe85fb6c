//! error: what can go wrong starting or waiting for guardian ([`Error`]), and how it becomes
//! the `io::Error` std's and tokio's process APIs return: the same `ErrorKind` std would give
//! (`NotFound`, `PermissionDenied`, `InvalidInput`), with the [`Error`] inside
//! (`io::Error::get_ref()` and `downcast_ref::<Error>()`).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// What can go wrong starting or waiting for guardian.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No guardian binary: the message names the explicit path, `$GUARDIAN_BIN` and `$PATH`,
    /// and how to install guardian.
    NotFound(String),
    /// guardian could not be started.
    Spawn {
        guardian: PathBuf,
        source: io::Error,
    },
    /// guardian's `error` event: it could not start the provider (status 125, 126, 127) or
    /// abandoned a teardown.
    Guardian {
        status: i32,
        message: String,
    },
    /// guardian ended without its last event (it was killed).
    Ended(ExitStatus),
    /// guardian is older than this crate drives (its `spawned` event has no `version`, or a
    /// lower one than spec/driver.json's `min_guardian_version`): the tree was stopped.
    Version {
        guardian: PathBuf,
        found: Option<String>,
        min: &'static str,
    },
    /// A value guardian would refuse (guardian's own message for it).
    Invalid(String),
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound(m) | Error::Invalid(m) => f.write_str(m),
            Error::Spawn { guardian, source } => write!(f, "cannot start {}: {source}", guardian.display()),
            Error::Guardian { status, message } => write!(f, "guardian (status {status}): {message}"),
            Error::Ended(status) => write!(f, "guardian ended without releasing the tree ({status})"),
            Error::Version { guardian, found, min } => write!(
                f,
                "{} is guardian {}, older than {min}, the oldest treeguardian-client {} drives (the tree was \
                 stopped); install guardian {min} or newer (`cargo install treeguardian`, the release's .deb, or \
                 `npm install treeguardian`) and pass its path with `Command::guardian(path)` or GUARDIAN_BIN",
                guardian.display(),
                found.as_deref().unwrap_or("before 0.2.0 (its `spawned` event has no version)"),
                env!("CARGO_PKG_VERSION"),
            ),
            Error::Io(e) => write!(f, "guardian events: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn { source, .. } | Error::Io(source) => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

impl From<Error> for io::Error {
    /// std's kind for the same failure; the [`Error`] stays inside.
    fn from(e: Error) -> io::Error {
        if let Error::Io(inner) = e {
            return inner;
        }
        let kind = match &e {
            Error::NotFound(_) => io::ErrorKind::NotFound,
            Error::Spawn { source, .. } => source.kind(),
            Error::Guardian { status: 127, .. } => io::ErrorKind::NotFound,
            Error::Guardian { status: 126, .. } => io::ErrorKind::PermissionDenied,
            Error::Invalid(_) => io::ErrorKind::InvalidInput,
            Error::Version { .. } => io::ErrorKind::Unsupported,
            Error::Guardian { .. } | Error::Ended(_) | Error::Io(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
