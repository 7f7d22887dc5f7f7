//! The conformance suite against the in-memory backend.
#![cfg(feature = "mem")]

#[macro_use]
mod conformance;

use std::sync::Arc;

use lockwright::{ManualClock, MemStore};

struct Mem;

impl conformance::Backend for Mem {
    type Store = MemStore;

    async fn store(clock: Arc<ManualClock>) -> MemStore {
        // Four shards so that group operations span several shards even in small cases.
        MemStore::with_clock_and_shards(clock, 4)
    }

    async fn teardown(_store: &MemStore) {}
}

conformance_suite!(Mem);
