//! How many streams the clients of a lock collection keep open on the server.
//!
//! A waiting process hears that a lock was handed to it through one tailable cursor on its
//! shard of the collection's wakes ([`MongoStore::wake_collections`]), kept while it has a
//! waiter near the head of a line. The server wakes such a cursor only for inserts into its
//! shard, so these cursors cost little, whatever their number.
//!
//! Change streams on the lock collection are another matter: MongoDB wakes every open
//! change-stream cursor on every write, filtered or not, so each one makes every lock write
//! cost the server more. Lockwright's waiters no longer open any; one that is open belongs
//! to an older client, or to another program that watches the collection, and doctor warns
//! about it.
//!
//! Doctor counts both, reading only, from one `$currentOp` on the member it is connected to
//! (idle cursors and `getMore`s in flight alike), before it opens a cursor of its own.

use std::collections::BTreeSet;

use futures_util::TryStreamExt;
use lockwright::MongoStore;
use lockwright::store_mongo::MongoFailure;
use mongodb::bson::{Bson, Document, doc};

use super::report::{Report, Verdict};

/// The distinct cursors open on the member doctor talks to.
#[derive(Default)]
struct Counts {
    /// Tailable cursors on the collection's wake shards.
    wakes: BTreeSet<i64>,
    /// Change streams on the lock collection itself.
    streams: BTreeSet<i64>,
}

/// Reports how many wake cursors and change streams the store's collection has open.
pub async fn streams(report: &mut Report, store: &MongoStore) {
    let ns = store.collection().namespace();
    let counts = match count(store).await {
        Ok(counts) => counts,
        Err(e) => {
            report.line(
                &Verdict::Warn,
                &format!(
                    "could not count the wake cursors and change streams open on {ns} ({}): \
                     `$currentOp` needs the inprog privilege",
                    MongoFailure::new(&e)
                ),
            );
            return;
        }
    };
    match counts.wakes.len() {
        0 => report.line(
            &Verdict::Ok,
            &format!(
                "no cursor is open on the wakes of {ns}: no process has a waiter near the head \
                 of a line here"
            ),
        ),
        n => report.line(
            &Verdict::Ok,
            &format!(
                "{n} cursor{} open on the wakes of {ns} (one per process with a waiter near the \
                 head of a line)",
                if n == 1 { " is" } else { "s are" }
            ),
        ),
    }
    match counts.streams.len() {
        0 => report.line(&Verdict::Ok, &format!("no change stream is open on {ns}")),
        n => report.line(
            &Verdict::Warn,
            &format!(
                "{n} change stream{} open on {ns}: the server wakes every change stream on \
                 every write, so each one makes every lock write cost it more; Lockwright's \
                 waiters no longer use them, so they belong to older clients or to another \
                 program: upgrade or stop them",
                if n == 1 { " is" } else { "s are" }
            ),
        ),
    }
}

/// The tailable cursors open on the collection's wake shards and the change streams open
/// on the collection, on the member doctor talks to.
async fn count(store: &MongoStore) -> Result<Counts, mongodb::error::Error> {
    let ns = store.collection().namespace();
    let pipeline = [
        doc! { "$currentOp": { "allUsers": true, "idleCursors": true } },
        // A cursor whose `getMore` is in flight when it is killed shows until the `getMore`
        // returns (within a second, for a wakes cursor): it is not counted.
        doc! { "$match": { "killPending": { "$ne": true }, "$or": [
            {
                "cursor.originatingCommand.find": { "$in": store.wake_collections() },
                "cursor.originatingCommand.$db": &ns.db,
            },
            {
                "cursor.originatingCommand.pipeline.0.$changeStream": { "$exists": true },
                "cursor.originatingCommand.aggregate": &ns.coll,
                "cursor.originatingCommand.$db": &ns.db,
            },
        ] } },
        doc! { "$project": {
            "_id": 0, "id": "$cursor.cursorId", "find": "$cursor.originatingCommand.find",
        } },
    ];
    let ops: Vec<Document> = store
        .client()
        .database("admin")
        .aggregate(pipeline)
        .await?
        .try_collect()
        .await?;
    let mut counts = Counts::default();
    for op in &ops {
        let id = match op.get("id") {
            Some(Bson::Int64(id)) => *id,
            Some(Bson::Int32(id)) => i64::from(*id),
            _ => continue,
        };
        if op.contains_key("find") {
            counts.wakes.insert(id);
        } else {
            counts.streams.insert(id);
        }
    }
    Ok(counts)
}
