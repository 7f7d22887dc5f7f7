//! `purge`: finds the lock groups holding an abandoned lock, removes them in batch transactions, then deletes
//! the documents left holding no lock and no live waiter, and drops the dead places of the
//! queues left.

use std::collections::BTreeSet;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use mongodb::bson::{Bson, RawDocumentBuf};

use lockwright_engine::table::{self, sort_purged};
use lockwright_engine::{Error, LockId, LockStatus, MalformedDocument, Resource, Timestamp};

use crate::read::{CURSOR_BATCH, Read, all_rows, lossy, read_all, unless_skipped};
use crate::{MongoStore, failure, pipeline, schema};

/// Purge batch transactions run concurrently (batches touching one document conflict, and
/// the driver retries the loser).
const PURGE_BATCHES_IN_FLIGHT: usize = 4;

impl MongoStore {
    /// Removes the groups `ids` (found abandoned at `t`) in one transaction; returns what it
    /// removed and the documents it left alone because it could not read them (the groups
    /// they name are left whole).
    async fn purge_batch(&self, ids: &[LockId], t: Timestamp) -> Result<Swept, Error> {
        let read = pipeline::read_with_floor(pipeline::batch_filter(ids), &self.floor_expr());
        let candidates: BTreeSet<LockId> = ids.iter().cloned().collect();
        let readings = self.readings();
        let context = (&self.coll, &read, &candidates, self.grace, &readings);
        self.transaction(
            "purge",
            context,
            |s, (coll, read, candidates, grace, readings)| {
                async move {
                    let docs = read_all(coll, (*read).clone(), s).await?;
                    let mut read = Read::from_docs(&docs, *grace);
                    // A document is deleted only below the fence floor the server read it at
                    // (its cluster time, as the stand-alone delete decides), and a place
                    // handed the lock takes its fence at that floor: the floor of `t`, the
                    // wall clock, is not the rule and may be ahead of it.
                    if let Some(floor) = read.floor {
                        read.table = std::mem::take(&mut read.table).with_fence_floor(floor);
                    }
                    // The groups were found abandoned before this transaction began; one may have
                    // lost its abandoned lock since (taken over, or purged by another purger) and
                    // gained a new one. Decide again on what this transaction reads, so only
                    // groups that still hold an expired lock lose their locks; and none that
                    // also holds a lock in a document that cannot be read.
                    let still: BTreeSet<LockId> = table::expired_groups(&[&read.table], t)
                        .intersection(candidates)
                        .filter(|id| !read.unreadable_groups.contains(id.as_str()))
                        .cloned()
                        .collect();
                    if still.is_empty() {
                        return Ok(Ok(Swept {
                            removed: Vec::new(),
                            skipped: read.skipped,
                        }));
                    }
                    let removed = table::purge_groups(&mut [&mut read.table], &still, t);
                    // Documents the batch leaves with no lock, and that may be forgotten, are
                    // deleted now rather than rewritten now and deleted later: one write each.
                    let emptied: Vec<Resource> = read
                        .table
                        .resources()
                        .iter()
                        .filter(|(_, state)| state.is_empty())
                        .map(|(r, _)| r.clone())
                        .collect();
                    table::delete_empty(&mut [&mut read.table], t);
                    let mut gone = Vec::new();
                    let mut kept = Vec::new();
                    for (resource, id) in read.ids {
                        if emptied.contains(&resource)
                            && !read.table.resources().contains_key(&resource)
                        {
                            gone.push(id);
                        } else {
                            kept.push(id);
                        }
                    }
                    let still: Vec<LockId> = still.into_iter().collect();
                    if !gone.is_empty() {
                        coll.delete_many(pipeline::ids_in(&gone))
                            .session(&mut *s)
                            .await?;
                    }
                    if !kept.is_empty() {
                        coll.update_many(
                            pipeline::ids_in(&kept),
                            pipeline::purge_batch(&still, t, readings),
                        )
                        .session(&mut *s)
                        .await?;
                    }
                    Ok(Ok(Swept {
                        removed,
                        skipped: read.skipped,
                    }))
                }
                .boxed()
            },
        )
        .await
    }
}

/// What one purge batch did.
struct Swept {
    removed: Vec<LockStatus>,
    skipped: Vec<MalformedDocument>,
}

/// `purge`: removes every lock group holding an expired lock.
pub(crate) async fn purge(store: &MongoStore) -> Result<Vec<LockStatus>, Error> {
    store.ready("purge").await?;
    let t = store.now_value("purge").await?;
    let expired = store
        .coll
        .aggregate(pipeline::expired_groups(t, store.grace))
        .with_type::<RawDocumentBuf>()
        .batch_size(CURSOR_BATCH);
    let rows = all_rows("purge", expired).await?;
    let mut skipped: Vec<MalformedDocument> = Vec::new();
    let mut groups = BTreeSet::new();
    for raw in &rows {
        let row = lossy("purge", raw)?;
        if let Ok(bad) = row.get_document("bad") {
            skipped.push(
                schema::decode(bad)
                    .err()
                    .unwrap_or_else(|| MalformedDocument {
                        resource: schema::label(bad),
                        field: "(document)".into(),
                        reason: "the server's validity test refused it".into(),
                    }),
            );
        }
        if let Ok(ids) = row.get_array("ids") {
            for id in ids.iter().filter_map(Bson::as_str) {
                // A lock id read with U+FFFD in place of bytes that are not UTF-8 names
                // no stored lock: its group cannot be addressed, so it is named instead.
                if id.contains(char::REPLACEMENT_CHARACTER) && raw.to_document().is_err() {
                    let m = MalformedDocument {
                        resource: row.get_str(schema::RESOURCE).unwrap_or("").to_string(),
                        field: "lockId".into(),
                        reason: "an expired lock's lock id is not valid UTF-8, so its group \
                                 cannot be addressed: remove it by hand"
                            .into(),
                    };
                    if !skipped.contains(&m) {
                        skipped.push(m);
                    }
                } else {
                    groups.insert(LockId::stored(id));
                }
            }
        }
    }
    let ids: Vec<LockId> = groups.into_iter().collect();
    let mut removed = Vec::new();
    let incomplete = |mut removed: Vec<LockStatus>, e: Error| {
        if removed.is_empty() {
            return e;
        }
        sort_purged(&mut removed);
        Error::PurgeIncomplete {
            removed,
            source: Box::new(e),
        }
    };
    // Up to PURGE_BATCHES_IN_FLIGHT batch transactions at once. After a failure no new
    // batch starts, but those in flight finish: a batch that committed is reported.
    let mut batches = ids.chunks(store.purge_batch);
    let mut in_flight = FuturesUnordered::new();
    in_flight.extend(
        batches
            .by_ref()
            .take(PURGE_BATCHES_IN_FLIGHT)
            .map(|b| store.purge_batch(b, t)),
    );
    let mut failure = None;
    while let Some(outcome) = in_flight.next().await {
        match outcome {
            Ok(mut swept) => {
                removed.append(&mut swept.removed);
                for m in swept.skipped {
                    if !skipped.contains(&m) {
                        skipped.push(m);
                    }
                }
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        if failure.is_none() {
            in_flight.extend(batches.next().map(|b| store.purge_batch(b, t)));
        }
    }
    if let Some(e) = failure {
        return Err(incomplete(removed, e));
    }
    if let Err(e) = store
        .coll
        .delete_many(pipeline::deletable(&store.floor_expr(), &store.now_expr()))
        .await
    {
        return Err(incomplete(removed, failure::backend("purge", &e)));
    }
    // The places whose lease ran out by `t` are dropped from the documents left (a dead
    // place blocks nobody, so this is housekeeping: no waiter needs a hint for it).
    if let Err(e) = store
        .coll
        .update_many(
            pipeline::dead_places_at(t),
            pipeline::drop_dead(&store.readings()),
        )
        .await
    {
        return Err(incomplete(removed, failure::backend("purge", &e)));
    }
    sort_purged(&mut removed);
    tracing::debug!(
        removed = removed.len(),
        groups = ids.len(),
        skipped = skipped.len(),
        "purged"
    );
    unless_skipped(removed, skipped)
}
