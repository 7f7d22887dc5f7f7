//! The conformance suite against MongoDB (a real server from `MONGODB_URI`), with the
//! server's `$$NOW` replaced by the suite's manual clock inside the shipped pipelines.
#![cfg(feature = "mongo")]

#[macro_use]
mod conformance;

use std::sync::Arc;

use lockwright::store_mongo::test_support::{fresh_store, teardown};
use lockwright::{ManualClock, MongoStore};

struct Mongo;

impl conformance::Backend for Mongo {
    type Store = MongoStore;

    async fn store(clock: Arc<ManualClock>) -> MongoStore {
        fresh_store(Some(clock)).await
    }

    async fn teardown(store: &MongoStore) {
        teardown(store).await;
    }
}

conformance_suite!(Mongo);
