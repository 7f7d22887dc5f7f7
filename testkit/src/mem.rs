//! The in-memory backend.

use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{LockTable, ManualClock, Timestamp};
use lockwright_store_mem::{Clock, MemStore};
use tokio::time::Instant;

use crate::Backend;

/// The in-memory store, [`MemStore`].
#[derive(Debug)]
pub struct Mem;

impl Backend for Mem {
    type Store = MemStore;

    const TTL: Duration = Duration::from_secs(1);
    const COUNTS_TASKS: bool = true;
    const MANY: usize = 1_000;

    async fn store(clock: Arc<ManualClock>, shards: usize, grace: Duration) -> MemStore {
        MemStore::with_clock_and_shards(clock, shards)
            .with_takeover_grace(grace)
            .expect("a test's takeover grace is valid")
    }

    async fn real_time_store() -> MemStore {
        MemStore::with_clock(TokioClock(Instant::now()))
    }

    async fn snapshot(store: &MemStore) -> LockTable {
        store.snapshot()
    }

    async fn teardown(_store: &MemStore) {}
}

/// The store's clock as tokio sees time, so paused tests move both together: 2027-01-15
/// at the instant given, plus the tokio time elapsed since.
#[derive(Debug)]
pub struct TokioClock(pub Instant);

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(1_800_000_000_000).saturating_add(self.0.elapsed())
    }
}
