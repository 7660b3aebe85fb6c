//! status: a child's wait status as `waitpid` returns it, and its reading (exit code, signal,
//! core dump). A value, no syscall: on the ground floor beside `sys` (which returns it) and
//! `errno`, so the pure state machine and the exit vocabulary need not import `sys` for it.

/// Raw wait status as returned by `waitpid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitStatus(pub i32);

impl WaitStatus {
    pub fn exit_code(self) -> Option<i32> {
        libc::WIFEXITED(self.0).then(|| libc::WEXITSTATUS(self.0))
    }
    pub fn signal(self) -> Option<i32> {
        libc::WIFSIGNALED(self.0).then(|| libc::WTERMSIG(self.0))
    }
    pub fn core_dumped(self) -> bool {
        libc::WIFSIGNALED(self.0) && libc::WCOREDUMP(self.0)
    }
}
