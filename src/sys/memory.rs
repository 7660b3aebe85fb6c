//! sys::memory: one guardian stays resident per provider, so once start-up is done it hands
//! back the heap and stack pages that only start-up touched.

/// Gives back the memory that start-up used and the idle loop will not: free heap pages
/// (`malloc_trim`, glibc) and the main thread's stack below the current frame, which only
/// argument parsing and setup touched. One guardian stays resident per provider, so these
/// pages are most of what it costs.
///
/// The stack's extent comes from the kernel's exec rules, not from `/proc/self/maps` (an
/// open, seven reads and a heap buffer on every start): the file name in `AT_EXECFN` is
/// copied to the top of the stack mapping, and exec grows that mapping to at least
/// min(RLIMIT_STACK, 128 KiB) below its end (`setup_arg_pages`). So the range from there to
/// a page below this frame lies inside the stack mapping.
#[inline(never)]
pub fn release_startup_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free heap memory back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    let sp = stack_pointer();
    let range = match super::sentinel::guardian_stack() {
        // guardian behind a sentinel runs on the stack sys::sentinel mapped for it.
        Some((lo, top)) if (lo..top).contains(&sp) => {
            let end = sp.saturating_sub(MARGIN) & !(4096 - 1);
            (end > lo).then_some((lo, end))
        }
        _ => {
            let main = main_stack();
            startup_stack_range(main.execfn, main.limit, sp)
        }
    };
    let Some((lo, end)) = range else { return };
    // SAFETY: [lo, end) lies inside this thread's stack mapping (see above), at least MARGIN
    // below the stack pointer: it holds only dead frames (guardian installs no signal handlers that could
    // run there), and MADV_DONTNEED makes those pages read back as zeroes when a deeper call
    // reuses them.
    unsafe {
        libc::madvise(lo as *mut libc::c_void, end - lo, libc::MADV_DONTNEED);
    }
}

/// Where the main thread's stack is, read before the sentinel shares guardian's memory
/// (`getauxval` and `getrlimit` are C-library calls).
#[derive(Clone, Copy)]
pub struct MainStack {
    execfn: usize,
    limit: Option<u64>,
}

pub fn main_stack() -> MainStack {
    // SAFETY: getauxval reads the auxiliary vector the kernel passed at exec.
    let execfn = unsafe { libc::getauxval(libc::AT_EXECFN) } as usize;
    MainStack { execfn, limit: stack_limit() }
}

/// The sentinel's [`release_startup_memory`]: its own stack below the current frame (what
/// start-up used before the clone; guardian's frames are on a stack of their own), handed
/// back with a raw `madvise` (no C library, see `sys::sentinel`). No heap trim: the heap is
/// guardian's.
#[inline(never)]
pub fn release_dead_stack(main: MainStack) {
    let sp = stack_pointer();
    let Some((lo, end)) = startup_stack_range(main.execfn, main.limit, sp) else { return };
    // SAFETY: as in release_startup_memory: [lo, end) is inside the main thread's stack
    // mapping, MARGIN below the sentinel's stack pointer, and holds only dead frames (of
    // start-up, before the clone; guardian reads nothing there, it runs on its own stack).
    unsafe { super::sentinel::Raw::discard(lo, end - lo) }
}

/// The stack pointer itself (the address of a local would lie somewhere above it, in this
/// frame), so that the range handed back can end just below what is live.
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads the stack pointer register into a general register; no memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    sp
}

/// What stays below the stack pointer: the frames of the `madvise` call itself (the C
/// library's wrapper, a few words) and x86-64's red zone (128 bytes), with room to spare. It
/// was a whole page, which kept one more stack page resident in every idle guardian whenever
/// the page below the live frame was not needed again.
const MARGIN: usize = 1024;

/// RLIMIT_STACK's soft limit (`None`: unlimited or unknown).
fn stack_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a live, writable rlimit the kernel fills in.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The part of the main thread's stack that start-up left behind: from the lowest address
/// exec guaranteed mapped (min(RLIMIT_STACK, 128 KiB) below the page end of `execfn`, a
/// string at the stack's top) up to the page boundary at least [`MARGIN`] below `sp`, the
/// stack pointer. `None` when that range is empty or `sp` is outside it.
fn startup_stack_range(execfn: usize, limit: Option<u64>, sp: usize) -> Option<(usize, usize)> {
    const PAGE: usize = 4096;
    const EXPAND: usize = 128 * 1024;
    if execfn == 0 {
        return None;
    }
    let top = execfn.checked_add(PAGE - 1)? & !(PAGE - 1);
    let grown = limit.map_or(EXPAND, |l| usize::try_from(l).unwrap_or(usize::MAX).min(EXPAND)) & !(PAGE - 1);
    let lo = top.checked_sub(grown)?;
    let end = sp.checked_sub(MARGIN)? & !(PAGE - 1);
    ((lo..top).contains(&sp) && end > lo).then_some((lo, end))
}

#[cfg(test)]
mod tests {
    use super::startup_stack_range;

    #[test]
    fn startup_stack_range_stays_inside_what_exec_mapped() {
        let top = 0x7fff_0000_0000usize;
        let execfn = top - 40; // the file name sits just below the stack's end
        let sp = top - 20 * 4096 - 123;
        // 128 KiB below the top, up to the page boundary at least MARGIN below sp.
        assert_eq!(startup_stack_range(execfn, Some(8 << 20), sp), Some((top - (128 << 10), top - 21 * 4096)));
        assert_eq!(startup_stack_range(execfn, None, sp), Some((top - (128 << 10), top - 21 * 4096)));
        // sp less than MARGIN above a page boundary: that page stays too.
        let low = top - 20 * 4096 + 1000;
        assert_eq!(startup_stack_range(execfn, None, low), Some((top - (128 << 10), top - 21 * 4096)));
        // A small RLIMIT_STACK: exec grew the mapping only that far.
        assert_eq!(startup_stack_range(execfn, Some(100 << 10), sp), Some((top - (100 << 10), top - 21 * 4096)));
        // sp outside the guaranteed range, or nothing below the margin: nothing to give back.
        assert_eq!(startup_stack_range(execfn, Some(64 << 10), sp - (64 << 10)), None);
        assert_eq!(startup_stack_range(execfn, Some(8 << 20), top - (128 << 10) + 100), None);
        assert_eq!(startup_stack_range(0, None, sp), None);
    }
}
