//! The MongoDB backend, on a real server from `MONGODB_URI`.

use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{LockTable, ManualClock};
use lockwright_store_mongo::MongoStore;
/// The MongoDB fixture: a fresh, uniquely named collection on `MONGODB_URI` with its
/// indexes, its snapshot and teardown, and helpers for tests of the store itself. It lives
/// in store-mongo (feature `test-util`) because it reads the store's own decoder and
/// pipelines.
pub use lockwright_store_mongo::test_support as fixture;

use crate::Backend;

/// MongoDB, each store on a fresh collection of [`fixture::test_database`].
#[derive(Debug)]
pub struct Mongo;

impl Backend for Mongo {
    type Store = MongoStore;

    const TTL: Duration = Duration::from_secs(2);
    const COUNTS_TASKS: bool = false;
    const MANY: usize = 20;

    /// A fresh collection with the server's `$$NOW` replaced by `clock` inside the shipped
    /// pipelines (`shards` does not apply).
    async fn store(clock: Arc<ManualClock>, _shards: usize, grace: Duration) -> MongoStore {
        fixture::fresh_store(Some(clock))
            .await
            .with_takeover_grace(grace)
            .expect("a test's takeover grace is valid")
    }

    async fn real_time_store() -> MongoStore {
        fixture::fresh_store(None).await
    }

    async fn snapshot(store: &MongoStore) -> LockTable {
        fixture::snapshot(store).await
    }

    async fn teardown(store: &MongoStore) {
        fixture::teardown(store).await;
    }
}
