//! How a [`Locker`](crate::Locker) takes a lock: the access, the lease, and who is asking.

use std::sync::OnceLock;
use std::time::Duration;

use lockwright_engine::locker::Access;
use lockwright_engine::{Holder, LockDetails};
use serde::{Deserialize, Serialize};

/// What [`Locker::acquire`](crate::Locker::acquire) asks for: exclusive or shared access
/// (with an optional limit), the lease's TTL, and who is asking. Owner, host and comment
/// are stored with the lock and shown by [`Client::status`](crate::Client::status), so an
/// operator can tell who holds what. The host defaults to this machine's hostname.
///
/// ```
/// use std::time::Duration;
/// use lockwright::{Access, LockOptions};
///
/// // At most 5 holders of one tenant, each saying who it is.
/// let options = LockOptions::shared(Some(5), Duration::from_secs(30))
///     .owner("billing-worker")
///     .comment("invoice run");
/// assert_eq!(options.access, Access::Shared(Some(5)));
/// assert_eq!(options.holder.owner.as_deref(), Some("billing-worker"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockOptions {
    /// Exclusive, or shared with an optional limit (`Shared(Some(5))`: at most 5 holders).
    pub access: Access,
    /// How long the lock lives unless renewed; the locker renews it until it is released.
    pub ttl: Duration,
    /// Who holds the lock, from where (this machine's hostname unless set otherwise), and
    /// why.
    #[serde(flatten)]
    pub holder: Holder,
    /// Wait in the resource's queue: a waiting acquire takes a place when refused, and the
    /// lock goes to waiters in turn (a writer is not overtaken by readers that came after
    /// it). See [`LockOptions::fair`].
    #[serde(default)]
    pub fair: bool,
}

impl LockOptions {
    /// An exclusive lock with `ttl`, no owner or comment, and this machine's hostname.
    #[must_use]
    pub fn exclusive(ttl: Duration) -> Self {
        Self::new(Access::Exclusive, ttl)
    }

    /// A shared lock with `ttl` and at most `limit` holders (`None`: no limit), no owner
    /// or comment, and this machine's hostname.
    #[must_use]
    pub fn shared(limit: Option<u32>, ttl: Duration) -> Self {
        Self::new(Access::Shared(limit), ttl)
    }

    /// `access` with `ttl`, no owner or comment, and this machine's hostname.
    #[must_use]
    pub fn new(access: Access, ttl: Duration) -> Self {
        let mut holder = Holder::default();
        holder.host = hostname().map(str::to_owned);
        LockOptions {
            access,
            ttl,
            holder,
            fair: false,
        }
    }

    /// Makes a waiting acquire fair: refused, it takes a place in the resource's queue (in
    /// the same write), keeps it by asking again within the Locker's `queue_ttl`, and is
    /// granted only when no conflicting waiter is ahead of it; its place goes with its
    /// grant, or when it stops waiting. Waiters that are not fair wait behind the queue
    /// too, but hold no place in it. A one-shot [`Locker::try_acquire`](crate::Locker::try_acquire)
    /// takes no place.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockwright::LockOptions;
    ///
    /// let options = LockOptions::exclusive(Duration::from_secs(30)).fair();
    /// assert!(options.fair);
    /// ```
    #[must_use]
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Sets the owner.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.holder.owner = Some(owner.into());
        self
    }

    /// Sets the host (`None`: record no host).
    #[must_use]
    pub fn host(mut self, host: Option<String>) -> Self {
        self.holder.host = host;
        self
    }

    /// Sets the comment.
    #[must_use]
    pub fn comment(mut self, comment: impl Into<String>) -> Self {
        self.holder.comment = Some(comment.into());
        self
    }
}

/// This machine's hostname, read once; `None` when it is empty or too long for a lock's
/// `host` field (a lock is then taken without one rather than refused).
fn hostname() -> Option<&'static str> {
    static HOSTNAME: OnceLock<Option<String>> = OnceLock::new();
    HOSTNAME
        .get_or_init(|| {
            let name = gethostname::gethostname().to_string_lossy().into_owned();
            LockDetails::new()
                .host(name.clone())
                .check()
                .ok()
                .map(|()| name)
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_defaults_to_the_hostname() {
        let options = LockOptions::exclusive(Duration::from_secs(1));
        let expected = gethostname::gethostname().to_string_lossy().into_owned();
        assert_eq!(options.holder.host.as_deref(), Some(expected.as_str()));
        assert_eq!(options.clone().host(None).holder.host, None);
        let options = options.owner("o").comment("c");
        assert_eq!(options.holder.owner.as_deref(), Some("o"));
        assert_eq!(options.holder.comment.as_deref(), Some("c"));
        assert_eq!(options.holder.host.as_deref(), Some(expected.as_str()));
        assert_eq!(options.ttl, Duration::from_secs(1));
    }
}
