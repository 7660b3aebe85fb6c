//! A classic-BPF seccomp filter that makes chosen syscalls fail with an errno, installed in
//! guardian's process before exec (`Builder::deny`).

/// A seccomp rule: syscall number and the errno it fails with.
pub type Deny = (libc::c_long, i32);

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// Kill on a foreign architecture, fail each denied syscall with its errno, allow the rest.
pub fn seccomp_program(denies: &[Deny]) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u32 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
    const JEQ_K: u32 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
    const RET_K: u32 = 0x06; // BPF_RET | BPF_K
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let mut p = vec![
        bpf(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        bpf(JEQ_K, 1, 0, AUDIT_ARCH),
        bpf(RET_K, 0, 0, RET_KILL_PROCESS),
        bpf(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    for &(nr, errno) in denies {
        p.push(bpf(JEQ_K, 0, 1, nr as u32));
        p.push(bpf(RET_K, 0, 0, RET_ERRNO | (errno as u32 & 0xffff)));
    }
    p.push(bpf(RET_K, 0, 0, RET_ALLOW));
    p
}

/// Installs `program` in the calling process (after `fork`, before `exec`): only
/// async-signal-safe calls on memory prepared before the fork.
pub fn install_seccomp(program: &[libc::sock_filter]) -> std::io::Result<()> {
    // SAFETY: prctl with plain integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut _ };
    // SAFETY: `prog` points at `program`, which outlives the call.
    if unsafe {
        libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &prog as *const _, 0, 0)
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
