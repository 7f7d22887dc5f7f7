//! The client: validated lock operations on any backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::time::validate_margin;

use crate::metrics::Labels;
use lockwright_engine::{
    Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockStore, Resource, Summary, Ttl,
    Waiter,
};

/// The renew margin used unless [`Client::with_renew_margin`] sets another.
pub const DEFAULT_RENEW_MARGIN: Duration = Duration::from_secs(1);

/// A lock client on the backend `S`. Cloning is cheap and shares the backend.
///
/// Every method checks its arguments first: a bad one is [`Error::InvalidArgument`] naming
/// the field, and nothing reaches the backend.
///
#[cfg_attr(feature = "mem", doc = "```")]
#[cfg_attr(not(feature = "mem"), doc = "```ignore")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockwright::Error> {
/// use std::time::Duration;
/// use lockwright::{Client, LockOptions, MemStore, generate_lock_id};
///
/// let client = Client::new(MemStore::new());
/// let lock_id = generate_lock_id();
/// let report = LockOptions::exclusive(Duration::from_secs(30)).owner("nightly-report");
/// let lock = client.lock("reports/2026-11-22", &lock_id, &report).await?;
/// println!("holding with fence {}", lock.fence);
///
/// // Another group is refused while the lock is live.
/// let other = generate_lock_id();
/// assert!(client.lock("reports/2026-11-22", &other, &report).await.is_err());
///
/// // Renew and release the whole group at once.
/// client.renew(&lock_id, Duration::from_secs(30)).await?;
/// let released = client.unlock(&lock_id).await?;
/// assert_eq!(released.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Client<S> {
    inner: Arc<Inner<S>>,
    labels: Labels,
}

#[derive(Debug)]
struct Inner<S> {
    store: S,
    renew_margin: Duration,
}

impl<S> Clone for Client<S> {
    fn clone(&self) -> Self {
        Client {
            inner: Arc::clone(&self.inner),
            labels: self.labels,
        }
    }
}

impl<S: LockStore> Client<S> {
    /// A client on `store` with the default renew margin ([`DEFAULT_RENEW_MARGIN`]).
    pub fn new(store: S) -> Self {
        Client {
            inner: Arc::new(Inner {
                store,
                renew_margin: DEFAULT_RENEW_MARGIN,
            }),
            labels: Labels::default(),
        }
    }

    /// A client whose renewals refuse locks expiring within `margin` (zero allowed).
    ///
    /// # Errors
    /// `InvalidArgument` naming `renew_margin` when over 100 years.
    pub fn with_renew_margin(store: S, margin: Duration) -> Result<Self, Error> {
        let renew_margin = validate_margin(margin)?;
        Ok(Client {
            inner: Arc::new(Inner {
                store,
                renew_margin,
            }),
            labels: Labels::default(),
        })
    }

    /// The backend.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The renew margin in force.
    pub fn renew_margin(&self) -> Duration {
        self.inner.renew_margin
    }

    /// Labels what this client (and a `Locker` on it) records through the `metrics` facade
    /// with the resource's name too (`resource`), where an operation has one. Off by
    /// default: every resource name is a time series of each metric it labels, so turn it
    /// on only for a bounded set of names. Lock ids are never recorded.
    #[must_use]
    pub fn with_resource_labels(mut self, on: bool) -> Self {
        self.labels.resources = on;
        self
    }

    pub(crate) fn labels(&self) -> Labels {
        self.labels
    }

    /// Runs `op` (named `operation`, on `resource` if it has one) and records its outcome
    /// and round trip.
    async fn metered<T>(
        &self,
        operation: &'static str,
        resource: Option<&Resource>,
        op: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let started = tokio::time::Instant::now();
        let result = op.await;
        self.labels
            .operation(operation, resource, &result, started.elapsed());
        result
    }

    /// Takes a lock on `resource` for the group `lock_id`, exclusive or shared as
    /// `options.access` says, with the lease and holder of `options`. One attempt: it takes
    /// no place in the resource's queue, whatever `options.fair` says (waiting is the
    /// [`Locker`](crate::Locker)'s).
    ///
    /// Exclusive: granted iff the resource has no live lock (expired locks are taken over
    /// once their takeover grace has passed) and no live fair waiter is queued. Shared:
    /// granted iff there is no live exclusive lock, `lock_id` holds no live lock on the
    /// resource, fewer than the limit of live shared locks exist (none: no limit), and no
    /// queued fair waiter it conflicts with. Not re-entrant: the same lock id asking again
    /// is refused too. The returned status carries the fence to hand to downstream systems.
    /// Examples: the [crate documentation](crate) and [`Client`]'s.    ///
    /// # Errors
    /// `AlreadyLocked`, `InvalidArgument` (`resource`, `lock_id`, `owner`, `host`,
    /// `comment`, `ttl`), or a backend error.
    pub async fn lock(
        &self,
        resource: &str,
        lock_id: impl AsRef<str>,
        options: &LockOptions,
    ) -> Result<LockStatus, Error> {
        let request = LockRequest::new(resource, lock_id.as_ref(), options)?;
        let store = &self.inner.store;
        let operation = request.access.operation();
        self.metered(operation, Some(&request.resource), store.lock(&request))
            .await
    }

    /// Releases every lock of the group, live or expired, and returns each as it was, newest
    /// first. An unknown lock id returns an empty list. Idempotent.
    ///
    /// # Errors
    /// `InvalidArgument` (`lock_id`) or a backend error (never an empty list on failure).
    pub async fn unlock(&self, lock_id: impl AsRef<str>) -> Result<Vec<LockStatus>, Error> {
        let lock_id = LockId::new(lock_id.as_ref())?;
        self.metered("unlock", None, self.inner.store.unlock(&lock_id))
            .await
    }

    /// Sets every lock of the group to expire `ttl` from now (locks without a TTL included)
    /// and returns them, oldest first. All or nothing: if any lock expires within the renew
    /// margin, nothing is renewed.
    ///
    /// # Errors
    /// `LockNotFound`, `NotRenewable { locks }`, `InvalidArgument` (`lock_id`, `ttl`), or a
    /// backend error.
    pub async fn renew(
        &self,
        lock_id: impl AsRef<str>,
        ttl: Duration,
    ) -> Result<Vec<LockStatus>, Error> {
        let lock_id = LockId::new(lock_id.as_ref())?;
        let ttl = Ttl::new(ttl)?;
        let renewed = self
            .inner
            .store
            .renew(&lock_id, ttl, self.inner.renew_margin);
        self.metered("renew", None, renewed).await
    }

    /// Renews exactly `lock` (a grant's resource and lock id), not the rest of its group:
    /// sets its expiry to `ttl` from now and returns it. One round trip on MongoDB. For a
    /// group of one lock (each grant under its own lock id) the same as [`Client::renew`].
    ///
    /// # Errors
    /// `LockNotFound` (released, purged or taken over), `NotRenewable { locks }` when it
    /// expires within the renew margin, `InvalidArgument` (`ttl`), or a backend error.
    pub async fn renew_one(&self, lock: &LockStatus, ttl: Duration) -> Result<LockStatus, Error> {
        let renewal = lock.renewal(Ttl::new(ttl)?);
        let renewed = self
            .inner
            .store
            .renew_one(&renewal, self.inner.renew_margin);
        self.metered("renew_one", Some(&lock.resource), renewed)
            .await
    }

    /// Releases exactly `lock` (a grant's resource and lock id), not the rest of its group,
    /// and returns it as it was, or `None` when it is already gone (released, purged or
    /// taken over). One round trip on MongoDB.
    ///
    /// # Errors
    /// A backend error, or `Malformed` when the resource's document cannot be read (it is
    /// left as it is).
    pub async fn unlock_one(&self, lock: &LockStatus) -> Result<Option<LockStatus>, Error> {
        let released = self.inner.store.unlock_one(&lock.resource, &lock.lock_id);
        self.metered("unlock_one", Some(&lock.resource), released)
            .await
    }

    /// Removes the place `ticket` holds in `resource`'s queue (a fair waiter that stopped
    /// waiting; see [`LockRequest::fair`]), and the places there whose lease ran out.
    /// Returns whether it had one.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad resource or ticket; a backend error.
    pub async fn leave_queue(
        &self,
        resource: &str,
        ticket: impl AsRef<str>,
    ) -> Result<bool, Error> {
        let resource = Resource::new(resource)?;
        let ticket = LockId::new(ticket.as_ref()).map_err(|e| e.about("ticket"))?;
        let left = self.inner.store.leave_queue(&resource, &ticket);
        self.metered("leave_queue", Some(&resource), left).await
    }

    /// The fair waiters queued on `resource`, first come first (live places only, without
    /// their tickets).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad resource; a backend error.
    pub async fn waiters(&self, resource: &str) -> Result<Vec<Waiter>, Error> {
        let resource = Resource::new(resource)?;
        self.metered(
            "waiters",
            Some(&resource),
            self.inner.store.waiters(&resource),
        )
        .await
    }

    /// The locks matching every set field of `filter`, oldest first.
    ///
    /// # Errors
    /// `InvalidArgument` (`filter.resource`, `filter.lock_id`, `filter.owner`) or a backend
    /// error.
    pub async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
        filter.validate()?;
        self.metered("status", None, self.inner.store.status(filter))
            .await
    }

    /// Every resource's contention at the store's `now`, most contended first: held and
    /// abandoned locks, live fair waiters and the longest wait per resource. One read on
    /// MongoDB. Documents that cannot be decoded are listed in [`Summary::skipped`] (the
    /// others are summarised): report them.
    ///
    #[cfg_attr(feature = "mem", doc = "```")]
    #[cfg_attr(not(feature = "mem"), doc = "```ignore")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockwright::Error> {
    /// use lockwright::{Client, LockOptions, MemStore};
    ///
    /// let client = Client::new(MemStore::new());
    /// client.lock("reports", "worker-1", &LockOptions::new()).await?;
    /// let summary = client.summary().await?;
    /// assert_eq!(summary.resources[0].resource.as_str(), "reports");
    /// assert_eq!(summary.resources[0].held_exclusive, 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// A backend error.
    pub async fn summary(&self) -> Result<Summary, Error> {
        self.metered("summary", None, self.inner.store.summary())
            .await
    }

    /// Removes the groups that hold an expired lock (locks created after the purge began are
    /// spared) and returns what was removed, grouped by lock id, newest first in a group.
    ///
    /// # Errors
    /// A backend error; `PurgeIncomplete` lists what was removed before a failure.
    pub async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.metered("purge", None, self.inner.store.purge()).await
    }
}

/// Administration of a MongoDB store, which is not part of the store port.
#[cfg(feature = "mongo")]
impl Client<lockwright_store_mongo::MongoStore> {
    /// Creates the indexes the collection needs
    /// ([`MongoStore::create_indexes`](lockwright_store_mongo::MongoStore::create_indexes)).
    /// Idempotent; a new collection gets its unique index on first use anyway.
    ///
    /// # Errors
    /// `Misconfigured` when an index on `resource` that cannot be trusted is in the way; a
    /// backend error otherwise.
    pub async fn create_indexes(&self) -> Result<(), Error> {
        self.metered("create_indexes", None, self.inner.store.create_indexes())
            .await
    }
}

/// A fresh lock id: 128 bits read straight from the operating system's secure generator
/// (`getrandom`: the `getrandom(2)` system call on Linux), written as 32 hex digits.
///
/// # Panics
/// When the operating system's generator fails, which a working host never does: a lock id
/// from anything weaker would not be a secret.
#[must_use]
pub fn generate_lock_id() -> LockId {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).expect("the operating system's random generator failed");
    LockId::from_random(u128::from_le_bytes(bits))
}
