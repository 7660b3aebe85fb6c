//! events::file: `--events-file PATH`, the events stream for callers that cannot pass a file
//! descriptor (the MCP Python SDK's `stdio_client`, any host that only takes a command line).
//! Independent of the parser: it takes a path and gives [`Events`], with the same buffer,
//! ordering and closing as `--events-fd` (`released` or `error` is the last line, written
//! before guardian exits).
//!
//! How the path is opened (once, before guardian opens any fd of its own or starts anything):
//! * `O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK`, mode 0600 (less the
//!   umask): a missing file is created readable by its owner only, an existing file is appended
//!   to and never truncated (a log shared by runs keeps every run; a driver that wants one run
//!   gives a fresh path). Close-on-exec: the provider never inherits it.
//! * A FIFO is supported: it must already have a reader (the driver opens it for reading
//!   first), else exit 125 naming the fix, since waiting for a reader could block for ever.
//!   It is written non-blocking, like a reopened `--events-fd` pipe, in whole lines of at
//!   most `PIPE_BUF` bytes per write, so guardians sharing one FIFO never tear each other's
//!   lines. A terminal or other
//!   character device (`/dev/null`, `/dev/tty`) is written non-blocking too.
//! * A regular file is written with plain writes (as a regular file on `--events-fd`).
//! * A directory, a socket, a path in a missing directory or one guardian may not write: exit
//!   125 with one line naming the path, the reason and the fix.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use super::Events;
use crate::writer::Writer;

/// Opens `path` for events (see the module's rules); the error is one line for exit 125.
pub fn open_file(path: &Path) -> Result<Events, String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err(
            "--events-file: the path is empty; name a file to append events to (e.g. --events-file events.jsonl)"
                .into(),
        );
    }
    // rustix's `open` is the system call itself (musl's follows O_CLOEXEC with an fcntl).
    use rustix::fs::OFlags;
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = rustix::fs::open(path, flags, rustix::fs::Mode::from_raw_mode(0o600))
        .map_err(|e| open_error(&shown.to_string(), &io::Error::from(e)))?;
    let file_type = rustix::fs::fstat(fd.as_fd()).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
    let nonblocking = match file_type {
        Ok(rustix::fs::FileType::RegularFile) => false,
        Ok(rustix::fs::FileType::Fifo | rustix::fs::FileType::CharacterDevice) => true,
        Ok(other) => {
            return Err(format!(
                "--events-file {shown}: not a regular file, FIFO or character device ({other:?}); name a file to append events to"
            ));
        }
        Err(e) => return Err(format!("--events-file {shown}: cannot be inspected (fstat: {e})")),
    };
    // A FIFO gets whole lines in atomic pieces: several guardians may share one.
    let fifo = file_type == Ok(rustix::fs::FileType::Fifo);
    Ok(Events::over(Writer::opened(fd, nonblocking, fifo)))
}

fn open_error(shown: &str, e: &io::Error) -> String {
    let why = crate::errno::text(e.raw_os_error().unwrap_or(0));
    match e.raw_os_error() {
        Some(libc::ENXIO) => format!(
            "--events-file {shown}: no process has this FIFO (or socket) open for reading ({why}); open the FIFO for reading before starting guardian, or use a regular file"
        ),
        Some(libc::ENOENT) => {
            format!("--events-file {shown}: its directory does not exist ({why}); create the directory first")
        }
        Some(libc::EISDIR) => format!("--events-file {shown}: is a directory; name a file inside it"),
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => {
            format!("--events-file {shown}: cannot be opened for writing ({why}); name a file this user may write")
        }
        _ => format!("--events-file {shown}: cannot be opened for writing ({why})"),
    }
}
