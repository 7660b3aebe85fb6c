//! errno: names and texts of the kernel's error numbers, for `fallback` and `error` events,
//! `guardian doctor`'s report and one-line messages.

use std::io;

/// Symbolic errno name for events ("ENOSYS").
pub fn name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EACCES => "EACCES",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOSYS => "ENOSYS",
        libc::EBUSY => "EBUSY",
        libc::E2BIG => "E2BIG",
        libc::EROFS => "EROFS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "E?",
    }
}

/// Human text of an errno, e.g. "No such file or directory".
pub fn text(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Whether `errno` says guardian ran out of a resource (fds, memory), which says nothing about
/// what the kernel or the host can do: never a reason to judge a capability missing.
pub fn is_resource(errno: i32) -> bool {
    matches!(errno, libc::EMFILE | libc::ENFILE | libc::ENOMEM)
}

/// `e` for a one-line message, naming the cause and the fix when it is a resource limit:
/// EMFILE names guardian's open-files limit (RLIMIT_NOFILE) and its value.
pub fn explain(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
            let limit = limit.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
            format!(
                "too many open files (EMFILE): guardian's open-files limit (RLIMIT_NOFILE) is {limit}; raise it (ulimit -n)"
            )
        }
        Some(libc::ENFILE) => "the system's open-file table is full (ENFILE, fs.file-max)".to_string(),
        Some(errno) => format!("{} ({})", text(errno), name(errno)),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_and_texts() {
        assert_eq!(super::name(libc::ENOSYS), "ENOSYS");
        assert_eq!(super::name(-1), "E?");
        assert_eq!(super::text(libc::ENOENT), "No such file or directory");
        let emfile = super::explain(&std::io::Error::from_raw_os_error(libc::EMFILE));
        assert!(emfile.contains("RLIMIT_NOFILE") && emfile.contains("ulimit -n"), "{emfile}");
        assert!(super::is_resource(libc::EMFILE) && !super::is_resource(libc::ENOENT));
    }
}
