//! How many change streams are open on the lock collection: MongoDB wakes every open
//! change-stream cursor on every write, filtered or not, so each stream a process keeps
//! open (a waiting `Locker`'s, one per store) costs the server work on every lock write.
//! Doctor counts them, reading only, from `$currentOp` on the member it is connected to
//! (idle cursors and `getMore`s in flight alike), before it opens a stream of its own.

use std::collections::BTreeSet;

use futures_util::TryStreamExt;
use lockwright::MongoStore;
use lockwright::store_mongo::MongoFailure;
use mongodb::bson::{Bson, Document, doc};

use super::report::{Report, Verdict};

/// More streams than this on one collection are worth a warning: the server's work per
/// write has grown several times over what it is with none.
const MANY: usize = 32;

/// Reports how many change streams are open on the store's collection.
pub async fn streams(report: &mut Report, store: &MongoStore) {
    let ns = store.collection().namespace();
    match count(store).await {
        Ok(0) => report.line(
            &Verdict::Ok,
            &format!("no change stream is open on {ns}: no process is waiting for a lock here"),
        ),
        Ok(n) if n > MANY => report.line(
            &Verdict::Warn,
            &format!(
                "{n} change streams are open on {ns}: the server wakes each on every write, so \
                 each lock write costs it more with every one; only waiting processes should \
                 keep one"
            ),
        ),
        Ok(n) => report.line(
            &Verdict::Ok,
            &format!(
                "{n} change stream{} open on {ns} (one per waiting process)",
                if n == 1 { " is" } else { "s are" }
            ),
        ),
        Err(e) => report.line(
            &Verdict::Warn,
            &format!(
                "could not count the change streams open on {ns} ({}): `$currentOp` needs \
                 the inprog privilege",
                MongoFailure::new(&e)
            ),
        ),
    }
}

/// The change-stream cursors open on the collection, on the member doctor talks to.
async fn count(store: &MongoStore) -> Result<usize, mongodb::error::Error> {
    let ns = store.collection().namespace();
    let pipeline = [
        doc! { "$currentOp": { "allUsers": true, "idleCursors": true } },
        doc! { "$match": {
            "cursor.originatingCommand.pipeline.0.$changeStream": { "$exists": true },
            "cursor.originatingCommand.aggregate": &ns.coll,
            "cursor.originatingCommand.$db": &ns.db,
        } },
        doc! { "$project": { "_id": 0, "id": "$cursor.cursorId" } },
    ];
    let ops: Vec<Document> = store
        .client()
        .database("admin")
        .aggregate(pipeline)
        .await?
        .try_collect()
        .await?;
    let cursors: BTreeSet<i64> = ops
        .iter()
        .filter_map(|op| match op.get("id") {
            Some(Bson::Int64(id)) => Some(*id),
            Some(Bson::Int32(id)) => Some(i64::from(*id)),
            _ => None,
        })
        .collect();
    Ok(cursors.len())
}
