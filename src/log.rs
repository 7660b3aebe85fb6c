//! log: leveled diagnostics on stderr, every line prefixed `guardian:`. Logging never stops a
//! teardown: write errors (closed or broken stderr) are ignored, and once guardian supervises
//! ([`never_block`]) stderr is written so that it never blocks (`RWF_NOWAIT` on a pipe, else
//! guardian's own non-blocking description; the caller's description keeps its flags, see
//! `writer.rs`), so a stderr pipe nobody reads cannot block guardian.
//! Lines that do not fit are dropped, counted, and reported once at exit ([`finish`]).

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::writer::Writer;

static LEVEL: AtomicU8 = AtomicU8::new(1);

/// guardian's non-blocking stderr, once [`never_block`] ran, and the lines it dropped.
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

struct Sink {
    out: Writer,
    dropped: u64,
    /// A write failed for good (past `RLIMIT_FSIZE`, a closed pipe, an I/O error): nothing more
    /// is written, as the events stop after a failed write. Each further attempt would fail
    /// again and raise guardian's own SIGXFSZ or SIGPIPE once more.
    failed: bool,
}

pub const FATAL: u8 = 0;
pub const WARN: u8 = 1;
pub const INFO: u8 = 2;
pub const DEBUG: u8 = 3;

pub fn set_level(level: u8) {
    LEVEL.store(level, Ordering::Relaxed);
}

pub fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed)
}

/// From now on, stderr is written without ever blocking: a pipe with `RWF_NOWAIT` (else
/// reopened through `/proc/self/fd/2` as guardian's own `O_NONBLOCK` description, else after
/// poll() at most `PIPE_BUF` bytes), a terminal reopened so, a socket with `MSG_DONTWAIT`.
/// Called after the events fd is taken over (the new fd must not take a number the caller
/// named). Regular files stay plain writes.
pub fn never_block() {
    let Some((out, note)) = crate::writer::writer_for(2) else { return };
    *SINK.lock().unwrap_or_else(|p| p.into_inner()) = Some(Sink { out, dropped: 0, failed: false });
    if let Some(note) = note {
        crate::log::debug!("stderr {note}");
    }
}

pub fn write(level: u8, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = format!("guardian: {args}\n");
    let mut sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
    let refused = match sink.as_mut() {
        Some(sink) => {
            match write_line(&mut sink.out, line.as_bytes(), sink.failed) {
                Written::All => {}
                Written::Dropped => sink.dropped += 1,
                Written::Failed => {
                    sink.dropped += 1;
                    sink.failed = true;
                }
            }
            sink.out.take_fallbacks()
        }
        None => {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            Vec::new()
        }
    };
    drop(sink);
    // Logged once the lock is free (these lines go through the same writer, with nothing left
    // to report).
    for f in refused {
        fallback(f.what, &f.err, &format!("{} (stderr)", f.instead));
    }
}

/// The log line of a refused interface and what guardian does instead (`-v`); the events
/// add a `fallback` event (`Events::fallback`).
pub fn fallback(what: &str, err: &std::io::Error, instead: &str) {
    let errno = crate::errno::name(err.raw_os_error().unwrap_or(0));
    info!("{what} refused ({errno}: {err}); falling back to {instead}");
}

/// What became of a line.
enum Written {
    All,
    /// Not (completely) written now: stderr is full.
    Dropped,
    /// The write failed for good (see [`Sink::failed`]).
    Failed,
}

/// Writes what fits now (nothing once a write `failed` for good).
fn write_line(out: &mut Writer, mut line: &[u8], failed: bool) -> Written {
    if failed {
        return Written::Dropped;
    }
    let mut changed = false;
    while !line.is_empty() {
        match out.write(line) {
            // The writer changed how it writes (reported by the caller): write again, once.
            Ok(0) if !changed && out.has_fallbacks() => changed = true,
            Ok(0) => return Written::Dropped,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Written::Dropped,
            Err(_) => return Written::Failed,
            Ok(n) => line = &line[n..],
        }
    }
    Written::All
}

/// Reports, once, how many lines stderr could not take (best effort: it may still be full).
pub fn finish() {
    let mut sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sink) = sink.as_mut()
        && sink.dropped > 0
    {
        let line = format!("guardian: {} log line(s) dropped: stderr was not being read\n", sink.dropped);
        sink.dropped = 0;
        let _ = write_line(&mut sink.out, line.as_bytes(), sink.failed);
    }
}

// Called as `crate::log::warn!` (or imported from here), not `#[macro_export]`ed: every
// arrow to the log points at this module, not at the crate root. `warn` is defined as
// `warning` and renamed on export: a `macro_rules!` named `warn` cannot be re-exported (its
// name is ambiguous with the built-in `#[warn]` attribute).
macro_rules! fatal { ($($t:tt)*) => { $crate::log::write($crate::log::FATAL, format_args!($($t)*)) } }
macro_rules! warning { ($($t:tt)*) => { $crate::log::write($crate::log::WARN, format_args!($($t)*)) } }
macro_rules! info { ($($t:tt)*) => { $crate::log::write($crate::log::INFO, format_args!($($t)*)) } }
macro_rules! debug { ($($t:tt)*) => { $crate::log::write($crate::log::DEBUG, format_args!($($t)*)) } }
pub(crate) use {debug, fatal, info, warning as warn};

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use super::*;

    /// A full stderr pipe: lines are dropped without blocking, counted, and the count is
    /// reported once when there is room again.
    #[test]
    fn full_stderr_drops_lines_and_reports_them_once() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let (mut out, _) = crate::writer::writer_for(w.as_raw_fd()).expect("writer");
        let mut filled = 0;
        while let Ok(n) = out.write(&[b'x'; 4096]) {
            filled += n;
        }
        *SINK.lock().unwrap_or_else(|p| p.into_inner()) = Some(Sink { out, dropped: 0, failed: false });
        write(FATAL, format_args!("first dropped line"));
        write(FATAL, format_args!("second dropped line"));
        let mut reader = std::fs::File::from(r);
        let mut drained = vec![0u8; filled];
        reader.read_exact(&mut drained).expect("drain");
        finish();
        finish();
        *SINK.lock().unwrap_or_else(|p| p.into_inner()) = None;
        drop(w);
        let mut rest = String::new();
        reader.read_to_string(&mut rest).expect("read the report");
        assert_eq!(rest, "guardian: 2 log line(s) dropped: stderr was not being read\n");
    }
}
