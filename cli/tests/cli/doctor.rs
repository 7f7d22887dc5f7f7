//! `doctor` without `--fix` or `--wakeups` only reads: the collection, its indexes and its
//! documents are as they were, whether the collection is missing, exists but was never
//! used, or holds locks.

use std::future::IntoFuture as _;
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use lockwright::{LockOptions, generate_lock_id};
use mongodb::bson::{Document, doc};

use crate::support::{Coll, code, text};

/// What doctor could change: whether the collection exists, its indexes and its documents.
#[derive(Debug, PartialEq)]
struct ServerState {
    exists: bool,
    indexes: Vec<Document>,
    documents: Vec<Document>,
}

fn server_state(c: &Coll) -> ServerState {
    let coll = c.client.store().collection();
    let ns = coll.namespace();
    let db = c.client.store().client().database(&ns.db);
    c.block_on(async {
        let exists = !db
            .list_collection_names()
            .filter(doc! {"name": &ns.coll})
            .await
            .expect("list collections")
            .is_empty();
        let mut indexes = Vec::new();
        let mut documents = Vec::new();
        if exists {
            let list = db
                .run_command(doc! {"listIndexes": &ns.coll})
                .await
                .expect("listIndexes");
            indexes = list
                .get_document("cursor")
                .and_then(|c| c.get_array("firstBatch"))
                .expect("a first batch")
                .iter()
                .filter_map(|i| i.as_document().cloned())
                .collect();
            documents = coll
                .find(doc! {})
                .sort(doc! {"_id": 1})
                .await
                .expect("find")
                .try_collect()
                .await
                .expect("documents");
        }
        ServerState {
            exists,
            indexes,
            documents,
        }
    })
}

/// Runs `doctor` and asserts it passes and leaves the server as it found it.
fn doctor_reads_only(c: &Coll) -> String {
    let before = server_state(c);
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}{}", text(&out.stderr));
    assert_eq!(
        server_state(c),
        before,
        "doctor changed the server:\n{report}"
    );
    report
}

#[test]
fn doctor_without_fix_creates_no_missing_collection() {
    let c = Coll::missing();
    let report = doctor_reads_only(&c);
    assert!(report.contains("does not exist yet"), "{report}");
    assert!(
        report.contains("no change stream is open on"),
        "streams counted before doctor opens its own: {report}"
    );
}

#[test]
fn doctor_without_fix_leaves_a_never_used_collection_without_its_index() {
    let c = Coll::missing();
    let ns = c.client.store().collection().namespace();
    let db = c.client.store().client().database(&ns.db);
    c.block_on(db.create_collection(&ns.coll).into_future())
        .expect("create the collection");
    let report = doctor_reads_only(&c);
    assert!(report.contains("never used"), "{report}");
}

/// Against a collection in use, no write at all, not even one undone before doctor exits:
/// a change stream opened before doctor sees nothing before the marker written after it.
#[test]
fn doctor_without_fix_writes_nothing_to_a_collection_in_use() {
    let c = Coll::new();
    c.block_on(
        c.client
            .lock("held", generate_lock_id(), &LockOptions::new()),
    )
    .expect("lock");
    let coll = c.client.store().collection();
    let mut events = c.block_on(coll.watch().into_future()).expect("watch");
    let report = doctor_reads_only(&c);
    assert!(
        report.contains("has a unique index on `resource`"),
        "{report}"
    );
    // The test's own stream is the one open on the collection.
    assert!(report.contains("1 change stream is open on"), "{report}");
    c.block_on(coll.insert_one(doc! {"marker": true}).into_future())
        .expect("insert the marker");
    let first = c
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), events.next()).await })
        .expect("an event within 20 s")
        .expect("an event")
        .expect("a change");
    assert!(
        first
            .full_document
            .as_ref()
            .is_some_and(|d| d.get_bool("marker") == Ok(true)),
        "doctor wrote to the collection: {first:?}\n{report}"
    );
}
