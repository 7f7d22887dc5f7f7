//! The queries behind `status` filters on resource, lock id and expiry, and purge's search
//! for expired locks, use indexes: the server's `explain` of each shows an index scan
//! (IXSCAN) in the winning plan and no collection scan (COLLSCAN).
//!
//! Each query checked is the one the store itself sent, taken from the driver's command
//! monitoring while the store ran the operation on a populated collection, so the check
//! follows the store's pipelines as they change. Needs `MONGODB_URI` (see `test_support`).

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright_engine::Access;
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{Filter, LockOptions, LockRequest, LockStore, ManualClock, Timestamp};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    fresh_store_on, monitored_client, teardown, winning_stages,
};
use mongodb::bson::{Document, doc};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// 200 exclusive locks in groups of 10, expiring 1 s to 200 s after `T0`, and 50 shared
/// locks on 10 resources expiring 1 s to 50 s after `T0`, granted through the store.
async fn populate(store: &MongoStore) {
    let with_ttl = |secs: u64| LockOptions::new().ttl(Duration::from_secs(secs));
    for i in 0..200_u64 {
        let req = LockRequest::new(&format!("r{i}"), &format!("g{}", i / 10), &with_ttl(i + 1));
        store.lock(&req.unwrap()).await.unwrap();
    }
    for i in 0..50_u64 {
        let req = LockRequest::new(&format!("s{}", i % 10), &format!("gs{i}"), &with_ttl(i + 1));
        store
            .lock(&req.unwrap().with_access(Access::Shared(None)))
            .await
            .unwrap();
    }
}

/// Explains a `find` or `aggregate` the store sent, as sent (minus session and cursor
/// options), and returns the winning plan's stages.
async fn explain(store: &MongoStore, name: &str, command: &Document) -> Vec<String> {
    let coll = command.get_str(name).unwrap();
    let inner = match name {
        "find" => doc! { "find": coll, "filter": command.get_document("filter").unwrap().clone() },
        "aggregate" => doc! {
            "aggregate": coll,
            "pipeline": command.get_array("pipeline").unwrap().clone(),
            "cursor": {},
        },
        other => panic!("not a read command: {other}"),
    };
    let db = store.client().database(&store.collection().namespace().db);
    let explained = db
        .run_command(doc! { "explain": inner, "verbosity": "queryPlanner" })
        .await
        .unwrap();
    let stages = winning_stages(&explained);
    assert!(!stages.is_empty(), "no winning plan in {explained}");
    stages
}

fn assert_indexed(what: &str, stages: &[String], command: &Document) {
    assert!(
        stages.iter().any(|s| s.starts_with("IXSCAN")) && !stages.iter().any(|s| s == "COLLSCAN"),
        "{what}: the winning plan is {stages:?}, not an index scan, for {command}"
    );
}

/// The read commands (find, aggregate) among `sent`.
fn reads(sent: &[(String, Document)]) -> Vec<&(String, Document)> {
    sent.iter()
        .filter(|(name, _)| name == "find" || name == "aggregate")
        .collect()
}

#[tokio::test]
async fn status_filters_on_resource_lock_id_and_expiry_use_indexes() {
    let (client, sent) = monitored_client().await;
    let store = fresh_store_on(&client, Some(Arc::new(ManualClock::new(T0)))).await;
    populate(&store).await;
    let secs = Duration::from_secs;
    let filters = [
        ("resource", Filter::new().resource("r5")),
        ("lock id", Filter::new().lock_id("g3")),
        ("lock id of shared locks", Filter::new().lock_id("gs7")),
        ("ttl below", Filter::new().ttl_lt(secs(20))),
        ("ttl at least", Filter::new().ttl_gte(secs(150))),
        (
            "any ttl (ttl at least 0)",
            Filter::new().ttl_gte(Duration::ZERO),
        ),
        (
            "ttl range",
            Filter::new().ttl_gte(secs(10)).ttl_lt(secs(20)),
        ),
    ];
    sent.take();
    for (what, filter) in &filters {
        let found = store.status(filter).await.unwrap();
        assert!(
            !found.is_empty(),
            "{what}: the filter should match some locks"
        );
        let sent = sent.take_commands();
        let reads = reads(&sent);
        assert_eq!(
            reads.len(),
            1,
            "{what}: status reads with one query, sent {sent:?}"
        );
        let (name, command) = reads[0];
        let stages = explain(&store, name, command).await;
        assert_indexed(&format!("status by {what}"), &stages, command);
    }
    teardown(&store).await;
}

#[tokio::test]
async fn purge_finds_expired_locks_and_their_groups_through_indexes() {
    let (client, sent) = monitored_client().await;
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store_on(&client, Some(Arc::clone(&clock)))
        .await
        .with_purge_batch(5)
        .unwrap();
    populate(&store).await;
    clock.advance(Duration::from_secs(30)); // 30 exclusive and 30 shared locks expire
    sent.take();
    let removed = store.purge().await.unwrap();
    assert!(!removed.is_empty());
    let sent = sent.take_commands();
    let reads = reads(&sent);
    assert!(
        reads.len() >= 2,
        "purge reads the expired groups, then each batch: {sent:?}"
    );
    let (name, command) = reads[0];
    let stages = explain(&store, name, command).await;
    assert_indexed("purge's search for expired locks", &stages, command);
    for (name, command) in &reads[1..] {
        let stages = explain(&store, name, command).await;
        assert_indexed("purge's read of a batch of groups", &stages, command);
    }
    teardown(&store).await;
}
