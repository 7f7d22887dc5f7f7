//! An engine-backed store whose `xlock` is deliberately not atomic.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockwright_engine::{
    Access, LockId, LockRequest, LockStatus, LockStore, LockTable, ManualClock, Notices, Query,
    Reading, Release, Released, Renewal, Resource, Result, Ttl,
};

/// A store whose `xlock` is a read-modify-write split in two: it decides on a copy of the
/// table, pauses, then writes the resource's state as it decided, over whatever other
/// clients did meanwhile (check-then-act). Every other operation is atomic.
#[derive(Debug)]
pub struct NonAtomicStore {
    table: Mutex<LockTable>,
    clock: Arc<ManualClock>,
}

impl NonAtomicStore {
    /// An empty store on `clock`.
    #[must_use]
    pub fn new(clock: Arc<ManualClock>) -> Self {
        NonAtomicStore {
            table: Mutex::new(LockTable::new()),
            clock,
        }
    }

    /// A copy of the whole table.
    #[must_use]
    pub fn snapshot(&self) -> LockTable {
        self.table().clone()
    }

    /// The table, locked.
    fn table(&self) -> MutexGuard<'_, LockTable> {
        self.table
            .lock()
            .expect("no engine transition panics while holding the table")
    }
}

impl LockStore for NonAtomicStore {
    async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
        let now = self.clock.now();
        if request.access != Access::Exclusive {
            return self.table().lock(request, now);
        }
        let mut copy = self.table().clone();
        let outcome = copy.lock(request, now);
        tokio::time::sleep(Duration::from_millis(1)).await;
        if outcome.is_ok() {
            let decided = copy
                .resource(&request.resource)
                .cloned()
                .unwrap_or_default();
            let mut table = self.table();
            let mut resources = table.resources().clone();
            resources.insert(request.resource.clone(), decided);
            *table = LockTable::from_resources(resources);
        }
        outcome
    }

    async fn release(&self, what: Release<'_>) -> Result<Released> {
        let now = self.clock.now();
        let mut table = self.table();
        Ok(match what {
            Release::Group(lock_id) => Released::locks(table.unlock(lock_id, now)),
            Release::Lock { resource, lock_id } => Released::locks(
                table
                    .unlock_one(resource, lock_id, now)
                    .into_iter()
                    .collect(),
            ),
            Release::Place { resource, ticket } => {
                Released::place(table.leave_queue(resource, ticket, now))
            }
        })
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        let now = self.clock.now();
        self.table().renew(lock_id, ttl, margin, now)
    }

    async fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        let now = self.clock.now();
        let mut table = self.table();
        Ok(locks
            .iter()
            .map(|r| table.renew_one(&r.resource, &r.lock_id, r.ttl, margin, now))
            .collect())
    }

    async fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        let now = self.clock.now();
        self.table()
            .set_comment(resource, lock_id, comment.map(str::to_owned), now)
    }

    async fn read(&self, query: Query<'_>) -> Result<Reading> {
        let now = self.clock.now();
        let table = self.table();
        Ok(match query {
            Query::Locks(filter) => Reading::Locks(table.status(filter, now)),
            Query::Waiters(resource) => Reading::Waiters(
                table
                    .resource(resource)
                    .map(|s| {
                        s.waiters(now)
                            .map(lockwright_engine::Waiter::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Query::Summary => {
                Reading::Summary(lockwright_engine::Summary::of(&[table], now, Vec::new()))
            }
        })
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        let now = self.clock.now();
        Ok(self.table().purge(now))
    }

    /// None: its waiters poll.
    fn notices(&self) -> Option<&dyn Notices> {
        None
    }
}
