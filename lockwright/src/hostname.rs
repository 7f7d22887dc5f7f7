//! The host a [`Locker`](crate::Locker) records with its locks when the options name none.

use std::sync::OnceLock;

use lockwright_engine::LockOptions;

/// This machine's hostname, read once; `None` when it is empty or too long for a lock's
/// `host` field (a lock is then taken without one rather than refused).
pub(crate) fn hostname() -> Option<&'static str> {
    static HOSTNAME: OnceLock<Option<String>> = OnceLock::new();
    HOSTNAME
        .get_or_init(|| {
            let name = gethostname::gethostname().to_string_lossy().into_owned();
            LockOptions::new()
                .host(name.clone())
                .check()
                .ok()
                .map(|()| name)
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_is_this_machines_hostname() {
        let expected = gethostname::gethostname().to_string_lossy().into_owned();
        assert_eq!(super::hostname(), Some(expected.as_str()));
    }
}
