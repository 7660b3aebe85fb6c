//! sys::memory: one guardian stays resident per provider, so once start-up is done it hands
//! back the heap and stack pages that only start-up touched.

/// Gives back the memory that start-up used and the idle loop will not: free heap pages
/// (`malloc_trim`, glibc) and the main thread's stack below the current frame, which only
/// argument parsing and setup touched. One guardian stays resident per provider, so these
/// pages are most of what it costs.
pub fn release_startup_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free heap memory back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    let marker = 0u8;
    let sp = std::ptr::addr_of!(marker) as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    let Some((lo, hi)) = maps.lines().find(|l| l.ends_with("[stack]")).and_then(stack_range) else { return };
    // One page of margin below this frame (x86-64's red zone is 128 bytes).
    let end = sp.saturating_sub(4096) & !4095;
    if !(lo..hi).contains(&sp) || end <= lo {
        return;
    }
    // SAFETY: [lo, end) lies inside this thread's stack mapping, a page below the live frame:
    // it holds only dead frames (guardian installs no signal handlers that could run there),
    // and MADV_DONTNEED makes those pages read back as zeroes when a deeper call reuses them.
    unsafe {
        libc::madvise(lo as *mut libc::c_void, end - lo, libc::MADV_DONTNEED);
    }
}

fn stack_range(maps_line: &str) -> Option<(usize, usize)> {
    let (range, _) = maps_line.split_once(' ')?;
    let (lo, hi) = range.split_once('-')?;
    Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn stack_range_parses_a_maps_line() {
        let line = "7ffc1a2b3000-7ffc1a2d4000 rw-p 00000000 00:00 0                          [stack]";
        assert_eq!(super::stack_range(line), Some((0x7ffc_1a2b_3000, 0x7ffc_1a2d_4000)));
        assert_eq!(super::stack_range("garbage"), None);
    }
}
