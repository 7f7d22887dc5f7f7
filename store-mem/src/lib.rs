//! The embedded backend of Lockwright: locks in this process's memory.
//!
//! [`MemStore`] applies the rules of `lockwright-engine` to a table split into shards by
//! resource name, so operations on different resources proceed in parallel. Group
//! operations (unlock, renew, status, purge) lock every shard in a fixed order and so see
//! one consistent table; renew is all-or-nothing. Time comes from an injected [`Clock`]:
//! the system clock by default, any [`Clock`] of the caller's (in tests, a hand-driven one:
//! feature `test-util`).
//!
//! Locks live as long as the store: this backend coordinates tasks and threads of one
//! process, and is the reference the MongoDB backend is tested against.
//!
//! ```
//! use lockwright_engine::{LockOptions, LockRequest, LockStore};
//! use lockwright_store_mem::MemStore;
//!
//! # tokio_test();
//! # fn tokio_test() { tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemStore::new();
//! let request = LockRequest::new("invoices", "lock-id-1", &LockOptions::new())?;
//! let granted = store.lock(&request).await?;
//! assert_eq!(granted.resource.as_str(), "invoices");
//! # Ok::<(), lockwright_engine::Error>(()) }).unwrap() }
//! ```

mod clock;
mod hints;
mod sync;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{
    Filter, LockId, LockRequest, LockStatus, LockStore, LockTable, Notices, Query, Reading,
    Release, Released, Renewal, Resource, Result, Summary, Ttl, Waiter, table,
};

pub use clock::SystemClock;
pub use lockwright_engine::Clock;
use sync::{Mutex, MutexGuard};

/// Shards used by [`MemStore::new`].
pub const DEFAULT_SHARDS: usize = 16;

/// The in-memory lock store. Cheap to share behind an `Arc` (the client does that).
pub struct MemStore {
    shards: Box<[Mutex<LockTable>]>,
    clock: Arc<dyn Clock>,
    notifier: hints::Notifier,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// A store on the system clock with [`DEFAULT_SHARDS`] shards.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(SystemClock::new())
    }

    /// A store on `clock`.
    #[must_use]
    pub fn with_clock(clock: impl Clock) -> Self {
        Self::with_clock_and_shards(clock, DEFAULT_SHARDS)
    }

    /// A store on `clock` with `shards` shards (at least one), and
    /// [`DEFAULT_TAKEOVER_GRACE`](lockwright_engine::DEFAULT_TAKEOVER_GRACE).
    #[must_use]
    pub fn with_clock_and_shards(clock: impl Clock, shards: usize) -> Self {
        let table = LockTable::new().with_takeover_grace(lockwright_engine::DEFAULT_TAKEOVER_GRACE);
        MemStore {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(table.clone()))
                .collect(),
            clock: Arc::new(clock),
            notifier: hints::Notifier::default(),
        }
    }

    /// The same store with takeover `grace` instead of
    /// [`DEFAULT_TAKEOVER_GRACE`](lockwright_engine::DEFAULT_TAKEOVER_GRACE): how long past
    /// its expiry a lock that was not released still blocks other grants and purge. This
    /// store has one clock, so no grace is needed for safety here; zero gives the plain
    /// rule (an expired lock may be taken at once).
    ///
    /// # Errors
    /// `InvalidArgument` naming `takeover_grace` when it is above
    /// [`MAX_TAKEOVER_GRACE`](lockwright_engine::MAX_TAKEOVER_GRACE).
    pub fn with_takeover_grace(self, grace: Duration) -> Result<Self> {
        let grace = lockwright_engine::check_takeover_grace(grace)?;
        for shard in &self.shards {
            let mut table = lock(shard);
            *table = std::mem::take(&mut *table).with_takeover_grace(grace);
        }
        Ok(self)
    }

    /// The takeover grace.
    #[must_use]
    pub fn takeover_grace(&self) -> Duration {
        lock(&self.shards[0]).takeover_grace()
    }

    fn shard_of(&self, resource: &str) -> &Mutex<LockTable> {
        &self.shards[self.shard_index(resource)]
    }

    fn shard_index(&self, resource: &str) -> usize {
        let mut h = DefaultHasher::new();
        resource.hash(&mut h);
        // The modulus is below the shard count, which fits in usize.
        (h.finish() % self.shards.len() as u64) as usize
    }

    fn lock_all(&self) -> Vec<MutexGuard<'_, LockTable>> {
        self.shards.iter().map(lock).collect()
    }

    /// A copy of the whole table, merged from all shards at one instant (for tests that
    /// compare the store with the engine; feature `test-util`).
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn snapshot(&self) -> LockTable {
        let guards = self.lock_all();
        LockTable::from_resources(
            guards
                .iter()
                .flat_map(|t| t.resources().iter().map(|(k, v)| (k.clone(), v.clone()))),
        )
    }

    /// The store's current instant.
    #[must_use]
    pub fn now(&self) -> lockwright_engine::Timestamp {
        self.clock.now()
    }
}

/// The locks every shard handed to heads of queues since it was last asked.
fn take_handed(shards: &mut [MutexGuard<'_, LockTable>]) -> Vec<table::Handed> {
    shards.iter_mut().flat_map(|t| t.take_handed()).collect()
}

fn lock(m: &Mutex<LockTable>) -> MutexGuard<'_, LockTable> {
    // Poisoned only if an engine transition panicked, which is a broken invariant: the
    // table may be half-changed, so refuse to go on rather than serve it.
    m.lock()
        .expect("a lock-table shard was poisoned by a panic inside a lock transition")
}

/// The store's operations, which [`LockStore`]'s required methods dispatch to.
impl MemStore {
    async fn op_lock(&self, request: &LockRequest) -> Result<LockStatus> {
        let op = request.access.operation();
        let _span = tracing::debug_span!("mem.lock", op, resource = %request.resource).entered();
        let (granted, handed) = {
            let mut shard = lock(self.shard_of(request.resource.as_str()));
            let granted = shard.lock(request, self.clock.now());
            (granted, shard.take_handed())
        };
        self.notifier.handed(&handed);
        if let Ok(g) = &granted {
            self.notifier.taken(g);
        }
        granted
    }

    async fn op_unlock(&self, lock_id: &LockId) -> Result<Vec<LockStatus>> {
        let _span = tracing::debug_span!("mem.unlock").entered();
        let (removed, handed) = {
            let mut shards = self.lock_all();
            let removed = table::unlock(&mut shards, lock_id, self.clock.now());
            (removed, take_handed(&mut shards))
        };
        self.notifier.handed(&handed);
        self.notifier.freed(removed.iter().map(|s| &s.resource));
        Ok(removed)
    }

    async fn op_renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<Vec<LockStatus>> {
        let _span = tracing::debug_span!("mem.renew", ttl_ms = ttl.as_millis()).entered();
        let mut shards = self.lock_all();
        table::renew(&mut shards, lock_id, ttl, margin, self.clock.now())
    }

    async fn op_renew_one(&self, r: &Renewal, margin: Duration) -> Result<LockStatus> {
        let _span =
            tracing::debug_span!("mem.renew_one", resource = %r.resource, ttl_ms = r.ttl.as_millis())
                .entered();
        let mut shard = lock(self.shard_of(r.resource.as_str()));
        shard.renew_one(&r.resource, &r.lock_id, r.ttl, margin, self.clock.now())
    }

    async fn op_set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        let _span = tracing::debug_span!("mem.set_comment", resource = %resource).entered();
        let mut shard = lock(self.shard_of(resource.as_str()));
        shard.set_comment(
            resource,
            lock_id,
            comment.map(str::to_owned),
            self.clock.now(),
        )
    }

    async fn op_renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        let _span = tracing::debug_span!("mem.renew_many", locks = locks.len()).entered();
        // One batch at one instant, all shards held: as atomic as MongoDB's transaction.
        let mut shards = self.lock_all();
        let now = self.clock.now();
        Ok(locks
            .iter()
            .map(|r| {
                shards[self.shard_index(r.resource.as_str())].renew_one(
                    &r.resource,
                    &r.lock_id,
                    r.ttl,
                    margin,
                    now,
                )
            })
            .collect())
    }

    async fn op_unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> Result<Option<LockStatus>> {
        let _span = tracing::debug_span!("mem.unlock_one", resource = %resource).entered();
        let (removed, handed) = {
            let mut shard = lock(self.shard_of(resource.as_str()));
            let removed = shard.unlock_one(resource, lock_id, self.clock.now());
            (removed, shard.take_handed())
        };
        self.notifier.handed(&handed);
        if removed.is_some() {
            self.notifier.freed([resource]);
        }
        Ok(removed)
    }

    async fn op_leave_queue(&self, resource: &Resource, ticket: &LockId) -> Result<bool> {
        let _span = tracing::debug_span!("mem.leave_queue", resource = %resource).entered();
        let (left, handed) = {
            let mut shard = lock(self.shard_of(resource.as_str()));
            let left = shard.leave_queue(resource, ticket, self.clock.now());
            (left, shard.take_handed())
        };
        self.notifier.handed(&handed);
        if left {
            // The waiter behind may go now.
            self.notifier.freed([resource]);
        }
        Ok(left)
    }

    async fn op_waiters(&self, resource: &Resource) -> Result<Vec<Waiter>> {
        let _span = tracing::debug_span!("mem.waiters", resource = %resource).entered();
        let now = self.clock.now();
        let shard = lock(self.shard_of(resource.as_str()));
        Ok(shard
            .resource(resource)
            .map(|state| state.waiters(now).map(Waiter::from).collect())
            .unwrap_or_default())
    }

    async fn op_status(&self, filter: &Filter) -> Result<Vec<LockStatus>> {
        let _span = tracing::debug_span!("mem.status").entered();
        filter.validate()?;
        let shards = self.lock_all();
        Ok(table::status(&shards, filter, self.clock.now()))
    }

    async fn op_summary(&self) -> Result<Summary> {
        let _span = tracing::debug_span!("mem.summary").entered();
        let shards = self.lock_all();
        Ok(Summary::of(&shards, self.clock.now(), Vec::new()))
    }

    async fn op_purge(&self) -> Result<Vec<LockStatus>> {
        let _span = tracing::debug_span!("mem.purge").entered();
        let (removed, handed) = {
            let mut shards = self.lock_all();
            let removed = table::purge(&mut shards, self.clock.now());
            (removed, take_handed(&mut shards))
        };
        tracing::debug!(removed = removed.len(), "purged");
        self.notifier.handed(&handed);
        self.notifier.freed(removed.iter().map(|s| &s.resource));
        Ok(removed)
    }
}

impl LockStore for MemStore {
    async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
        self.op_lock(request).await
    }

    async fn release(&self, what: Release<'_>) -> Result<Released> {
        match what {
            Release::Group(lock_id) => self.op_unlock(lock_id).await.map(Released::locks),
            Release::Lock { resource, lock_id } => self
                .op_unlock_one(resource, lock_id)
                .await
                .map(|l| Released::locks(l.into_iter().collect())),
            Release::Place { resource, ticket } => self
                .op_leave_queue(resource, ticket)
                .await
                .map(Released::place),
        }
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.op_renew(lock_id, ttl, margin).await
    }

    async fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        match locks {
            [one] => Ok(vec![self.op_renew_one(one, margin).await]),
            _ => self.op_renew_many(locks, margin).await,
        }
    }

    async fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        self.op_set_comment(resource, lock_id, comment).await
    }

    async fn read(&self, query: Query<'_>) -> Result<Reading> {
        match query {
            Query::Locks(filter) => self.op_status(filter).await.map(Reading::Locks),
            Query::Waiters(resource) => self.op_waiters(resource).await.map(Reading::Waiters),
            Query::Summary => self.op_summary().await.map(Reading::Summary),
        }
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        self.op_purge().await
    }

    /// Hints from an in-process notifier: `Taken` after each grant, `Freed` after each
    /// release and for each resource a purge emptied. Never lost; a lock that merely
    /// expires sends none (its waiters learnt its end from the refusal). News from the same
    /// notifier: `Leads` after each grant and each hand-over of an announced election's
    /// exclusive lock (not after a claim of what was handed over). Never lost.
    fn notices(&self) -> Option<&dyn Notices> {
        Some(&self.notifier)
    }
}
