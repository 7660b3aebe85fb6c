//! cgroup::provider: the leaf guardian starts its provider in, from `--cgroup auto|PATH` and
//! the limits: its name (guardian as the mounted `/proc` sees it, and its start time), its
//! creation, and the one policy decision about it: `auto` without a usable delegation falls
//! back to plain subreaper mode (debug log + `fallback` event), while an explicit PATH that
//! cannot be used, or limits that cannot be applied, fail (125). `main` only calls it.

use std::ffi::OsStr;

use super::{Leaf, Limits, Request, Unusable};
use crate::errno;
use crate::events::{Event, Events};
use crate::exit::Failure;
use crate::proctree::Proc;

/// The provider's leaf for `--cgroup` `arg` with `limits` (`None`: no `--cgroup`, or `auto`
/// fell back); `me` is guardian's pid in its own namespace.
pub fn leaf_for_provider(
    arg: Option<&OsStr>,
    limits: &Limits,
    me: i32,
    events: &mut Events,
) -> Result<Option<Leaf>, Failure> {
    let Some(arg) = arg else {
        if !limits.is_empty() {
            return Err(Failure::guardian(
                "--memory-max, --pids-max and --cpu-max need --cgroup auto|PATH (limits are written to the provider's leaf cgroup)",
            ));
        }
        return Ok(None);
    };
    let req = Request::from_arg(arg);
    let result = leaf_name(me).and_then(|(seen, start)| Leaf::create(&req, limits, seen, start));
    match result {
        Ok(leaf) => {
            crate::log::debug!("created leaf cgroup {}", leaf.path.display());
            Ok(Some(leaf))
        }
        // Running out of a resource (EMFILE) says nothing about the delegation: not a fallback.
        Err(u) if req == Request::Auto && limits.is_empty() && !errno::is_resource(u.errno) => {
            crate::log::debug!("--cgroup auto: no usable cgroup ({}); running as a plain subreaper", u.message);
            events.emit(Event::Fallback {
                what: "cgroup".into(),
                errno: errno::name(u.errno).into(),
                detail: format!("{}; running as a plain subreaper", u.message),
            });
            Ok(None)
        }
        Err(u) => Err(Failure::guardian(format!("--cgroup {}: {}", arg.to_string_lossy(), u.message))),
    }
}

/// What the leaf is named after: guardian's pid as the mounted /proc sees it (`/proc/self`),
/// because that is where `guardian sweep` will judge whether its guardian still lives (in blind
/// mode, a /proc of an ancestor namespace, guardian's own pid would name an unrelated
/// process), and that process's start time.
fn leaf_name(me: i32) -> Result<(i32, u64), Unusable> {
    let seen = std::fs::read_link("/proc/self").ok().and_then(|l| l.to_str()?.parse::<i32>().ok()).unwrap_or(me);
    match Proc::open().and_then(|mut p| p.try_stat(seen)) {
        Ok(st) => Ok((seen, st.starttime)),
        Err(e) => Err(Unusable {
            errno: e.raw_os_error().unwrap_or(libc::ENOENT),
            message: format!(
                "cannot read guardian's start time from /proc/{seen}/stat (needed to name the leaf): {}",
                errno::explain(&e)
            ),
        }),
    }
}
