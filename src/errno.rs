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

#[cfg(test)]
mod tests {
    #[test]
    fn names_and_texts() {
        assert_eq!(super::name(libc::ENOSYS), "ENOSYS");
        assert_eq!(super::name(-1), "E?");
        assert_eq!(super::text(libc::ENOENT), "No such file or directory");
    }
}
