//! Waiting Lockers in memory (issue 25): the measurements of `benches/waiting` with every
//! Locker on a handle of one shared `MemStore` (each with its own hint subscription), on a
//! multi-threaded runtime of their own. The store sends no commands: the Lockers' store
//! calls stand for them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lockwright_benches::RunMode;
use lockwright_engine::{
    Filter, HintStream, LockId, LockRequest, LockStatus, LockStore, Renewal, Resource, Result,
    SharedLimit, Ttl,
};
use lockwright_store_mem::MemStore;

use crate::GROUP;
use crate::filter::Selected;
use crate::shared_waiting::{Counter, Fleet, Plan, run_all};

/// A handle on the fleet's one store.
pub struct SharedMem(Arc<MemStore>);

impl LockStore for SharedMem {
    async fn xlock(&self, request: &LockRequest) -> Result<LockStatus> {
        self.0.xlock(request).await
    }

    async fn slock(&self, request: &LockRequest, limit: Option<SharedLimit>) -> Result<LockStatus> {
        self.0.slock(request, limit).await
    }

    async fn unlock(&self, lock_id: &LockId) -> Result<Vec<LockStatus>> {
        self.0.unlock(lock_id).await
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.0.renew(lock_id, ttl, margin).await
    }

    async fn renew_one(&self, lock: &Renewal, margin: Duration) -> Result<LockStatus> {
        self.0.renew_one(lock, margin).await
    }

    async fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        self.0.renew_many(locks, margin).await
    }

    async fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> Result<Option<LockStatus>> {
        self.0.unlock_one(resource, lock_id).await
    }

    async fn leave_queue(&self, resource: &Resource, ticket: &LockId) -> Result<bool> {
        self.0.leave_queue(resource, ticket).await
    }

    async fn waiters(&self, resource: &Resource) -> Result<Vec<lockwright_engine::Waiter>> {
        self.0.waiters(resource).await
    }

    async fn summary(&self) -> Result<lockwright_engine::Summary> {
        self.0.summary().await
    }

    async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>> {
        self.0.status(filter).await
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        self.0.purge().await
    }

    async fn create_indexes(&self) -> Result<()> {
        self.0.create_indexes().await
    }

    fn hints(&self) -> Option<HintStream> {
        self.0.hints()
    }
}

/// One store on the system clock, with the takeover grace asked for.
struct MemFleet(Arc<MemStore>);

impl Fleet for MemFleet {
    type Store = SharedMem;
    const COMMANDS: bool = false;

    async fn store(&self, _commands: &Counter) -> SharedMem {
        SharedMem(Arc::clone(&self.0))
    }

    async fn server_counters(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    async fn finish(self) {}
}

/// The waiting measurements in memory that criterion's filter selects; windows half as
/// long as on MongoDB.
pub fn waiting(mode: RunMode) {
    let selected = Selected::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_all(
        GROUP,
        mode,
        &Plan::of(mode, 0.5),
        |id| selected.selects(id),
        async |grace| {
            let store = MemStore::new();
            let store = match grace {
                Some(grace) => store.with_takeover_grace(grace).unwrap(),
                None => store,
            };
            MemFleet(Arc::new(store))
        },
    ));
}
