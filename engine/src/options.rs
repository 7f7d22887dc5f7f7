//! How to lock: the one options type every call that takes a lock accepts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{Access, SharedLimit};
use crate::error::Error;
use crate::status::Holder;
use crate::time::Ttl;

/// How to take a lock: exclusive or shared ([`Access`]), its lease, who takes it, and
/// whether a waiting acquire waits in the queue (the default) or races. `Client::lock` takes it for one attempt, a
/// `Locker`'s `acquire` for a wait (the Locker needs a TTL: it renews the lock). Owner, host
/// and comment are stored with the lock and shown by `status`, so an operator can tell who
/// holds what. Checked when a lock is requested ([`LockOptions::check`]).
///
/// ```
/// use std::time::Duration;
/// use lockwright_engine::{Access, LockOptions, SharedLimit};
///
/// // At most 5 holders of one tenant, each saying who it is.
/// let options = LockOptions::shared(SharedLimit::new(5)?, Duration::from_secs(30))
///     .owner("billing-worker")
///     .comment("invoice run");
/// assert_eq!(options.access, Access::shared(Some(5))?);
/// assert_eq!(options.holder.owner.as_deref(), Some("billing-worker"));
/// assert_eq!(options.ttl, Some(Duration::from_secs(30)));
///
/// // Exclusive until unlocked: no TTL. A wait for it queues fairly unless it races.
/// let forever = LockOptions::new();
/// assert_eq!((forever.access, forever.ttl), (Access::Exclusive, None));
/// assert!(forever.fair && !forever.racing().fair);
/// # Ok::<(), lockwright_engine::InvalidArgument>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockOptions {
    /// Exclusive, or shared with an optional limit.
    #[serde(default)]
    pub access: Access,
    /// How long the lock lives unless renewed; `None`: until unlocked (a `Locker` refuses
    /// `None`: it renews every lock it holds).
    pub ttl: Option<Duration>,
    /// Who takes the lock, from where, and why.
    #[serde(flatten)]
    pub holder: Holder,
    /// Wait in the resource's queue (the default): a waiting acquire takes a place when
    /// refused, keeps it by asking again within the Locker's `queue_ttl`, and is granted
    /// only when no conflicting waiter is ahead of it (a writer is not overtaken by readers
    /// that came after it); the store hands it the lock when its turn comes. `false`
    /// ([`LockOptions::racing`]): the wait polls on its backoff and on when the store said
    /// the locks in its way end, behind the queue, is never woken by the store, and may be
    /// overtaken by anybody who asks at the right moment. Only a wait takes a place: a
    /// one-shot attempt (`Client::lock`, `Locker::try_acquire`) asks as any request does,
    /// behind the queue, and takes none. At the level of the store port a place is named by
    /// a ticket ([`LockRequest::fair`](crate::LockRequest::fair)).
    #[serde(default = "fair_by_default")]
    pub fair: bool,
}

/// A wait queues unless it asks to race.
fn fair_by_default() -> bool {
    true
}

impl Default for LockOptions {
    /// Exclusive, no TTL, nobody named, fair.
    fn default() -> Self {
        LockOptions {
            access: Access::default(),
            ttl: None,
            holder: Holder::default(),
            fair: fair_by_default(),
        }
    }
}

impl LockOptions {
    /// An exclusive lock without a TTL, owner, host or comment.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An exclusive lock with `ttl`.
    #[must_use]
    pub fn exclusive(ttl: Duration) -> Self {
        Self::new().ttl(ttl)
    }

    /// A shared lock with `ttl` and at most `limit` holders (`None`: no limit).
    #[must_use]
    pub fn shared(limit: impl Into<Option<SharedLimit>>, ttl: Duration) -> Self {
        Self::new().access(Access::Shared(limit.into())).ttl(ttl)
    }

    /// Sets the access.
    #[must_use]
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// Sets the TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the owner.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.holder.owner = Some(owner.into());
        self
    }

    /// Sets the host.
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.holder.host = Some(host.into());
        self
    }

    /// Sets the comment.
    #[must_use]
    pub fn comment(mut self, comment: impl Into<String>) -> Self {
        self.holder.comment = Some(comment.into());
        self
    }

    /// Makes a waiting acquire fair ([`LockOptions::fair`](LockOptions#structfield.fair)),
    /// as it is by default.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockwright_engine::LockOptions;
    ///
    /// let options = LockOptions::exclusive(Duration::from_secs(30)).fair();
    /// assert!(options.fair);
    /// ```
    #[must_use]
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Makes a waiting acquire race instead of queueing
    /// ([`LockOptions::fair`](LockOptions#structfield.fair) `false`): it polls, and is
    /// never woken by the store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockwright_engine::LockOptions;
    ///
    /// let options = LockOptions::exclusive(Duration::from_secs(30)).racing();
    /// assert!(!options.fair);
    /// ```
    #[must_use]
    pub fn racing(mut self) -> Self {
        self.fair = false;
        self
    }

    /// Checks every field, as a lock request does.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad field: `owner`, `host`, `comment` (empty or
    /// over [`MAX_DETAIL_LEN`](crate::names::MAX_DETAIL_LEN) bytes) or `ttl` (zero, under
    /// 1 ms, or over 100 years).
    pub fn check(&self) -> Result<(), Error> {
        self.holder.check()?;
        self.ttl.map(Ttl::new).transpose()?;
        Ok(())
    }
}
