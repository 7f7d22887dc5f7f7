//! Documents of the store's schema for the data sets the benches insert themselves, and the
//! stores they are inserted through.

use std::sync::Arc;

use lockwright_engine::table::fence_floor;
use lockwright_engine::{Filter, LockStore, ManualClock, Mode, Timestamp};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{empty_exclusive, fresh_store_on};
use mongodb::Client;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, DateTime, Document, doc};

/// `t` as a BSON date.
pub fn date(t: Timestamp) -> Bson {
    Bson::DateTime(DateTime::from_millis(i64::try_from(t.as_millis()).unwrap()))
}

fn opt_date(t: Option<Timestamp>) -> Bson {
    t.map_or(Bson::Null, date)
}

/// One lock as the store's schema keeps it.
pub fn lock_fields(
    lock_id: &str,
    owner: &str,
    created: Timestamp,
    expires: Option<Timestamp>,
) -> Document {
    doc! {
        "lockId": lock_id, "owner": owner, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": date(created), "renewedAt": Bson::Null, "expiresAt": opt_date(expires),
        "acquired": true, "fence": fence_at(created),
    }
}

/// The fence a grant at `t` gets on a fresh resource (the engine's floor, `t_ms * 1024`).
fn fence_at(t: Timestamp) -> i64 {
    i64::try_from(fence_floor(t)).unwrap()
}

/// A resource document holding one exclusive or one shared lock.
pub fn resource_doc(
    resource: &str,
    mode: Mode,
    lock_id: &str,
    owner: &str,
    created: Timestamp,
    expires: Option<Timestamp>,
) -> Document {
    let lock = lock_fields(lock_id, owner, created, expires);
    let (exclusive, shared) = match mode {
        Mode::Exclusive => (lock, doc! { "count": 0, "locks": [] }),
        Mode::Shared => (empty_exclusive(), doc! { "count": 1, "locks": [lock] }),
    };
    doc! {
        "resource": resource, "exclusive": exclusive, "shared": shared,
        "lastFence": fence_at(created), "lastGrant": ObjectId::new(),
    }
}

/// Empties the store's collection and inserts `docs` (untimed set-up).
pub async fn refill(store: &MongoStore, docs: Vec<Document>) {
    let coll = store.collection();
    coll.delete_many(doc! {}).await.unwrap();
    if !docs.is_empty() {
        coll.insert_many(docs).await.unwrap();
    }
}

/// A store on a fresh collection whose set-up check (hello, listIndexes) has run, so that
/// it is not counted in any benchmark.
pub async fn ready_store(client: &Client, clock: Option<Arc<ManualClock>>) -> MongoStore {
    let store = fresh_store_on(client, clock).await;
    store
        .status(&Filter::new().resource("warm-up"))
        .await
        .unwrap();
    store
}

/// The current time on this machine's clock.
pub fn server_now() -> Timestamp {
    Timestamp::from_system_time(std::time::SystemTime::now()).unwrap()
}
