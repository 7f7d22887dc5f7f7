//! The group operations `unlock`, `renew` and `renew_many`: a group in one readable
//! document takes the one-lock path, any other a transaction (read, decide with the engine,
//! one `updateMany`, commit).

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::{FutureExt, TryStreamExt};
use mongodb::bson::{Bson, RawDocumentBuf, doc};

use lockwright_engine::table;
use lockwright_engine::{Error, LockId, LockStatus, Renewal, Resource, Ttl};

use crate::read::{Read, read_all, unless_skipped};
use crate::{MongoStore, pipeline, schema, wakes};

impl MongoStore {
    /// Where the group `lock_id` is, from one read outside any transaction: a group in one
    /// readable document is one lock (a document holds at most one lock per lock id), which
    /// the one-lock operations handle in one more command; a bigger group, or one with a
    /// document the rules cannot read, takes the transaction. The read is only a shortcut:
    /// if it fails, the transaction (which retries) decides.
    async fn group_shape(&self, lock_id: &LockId) -> GroupShape {
        let read = async {
            self.coll
                .clone_with_type::<RawDocumentBuf>()
                .find(pipeline::group_filter(lock_id))
                .limit(2)
                .await?
                .try_collect::<Vec<RawDocumentBuf>>()
                .await
        };
        match read.await.as_deref() {
            Ok([]) => GroupShape::Empty,
            // Text that is not UTF-8 would make the one-lock reply unreadable to the driver:
            // the transaction reads such documents as they are.
            Ok([one]) => match one.to_document().map(|d| schema::decode(&d)) {
                Ok(Ok((resource, _))) => GroupShape::One(resource),
                _ => GroupShape::More,
            },
            Ok(_) | Err(_) => GroupShape::More,
        }
    }
}

/// Where a group's locks are, as far as a group operation cares.
enum GroupShape {
    /// No document holds a lock of it.
    Empty,
    /// One readable document, so one lock, on this resource.
    One(Resource),
    /// Several documents, or one the rules cannot read.
    More,
}

/// `unlock`: removes every lock of `lock_id`.
pub(crate) async fn unlock(store: &MongoStore, lock_id: &LockId) -> Result<Vec<LockStatus>, Error> {
    store.ready("unlock").await?;
    match store.group_shape(lock_id).await {
        GroupShape::Empty => return Ok(Vec::new()),
        GroupShape::One(resource) => {
            return Ok(crate::one_lock::unlock_one(store, &resource, lock_id)
                .await?
                .into_iter()
                .collect());
        }
        GroupShape::More => {}
    }
    let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &store.now_expr());
    let update = pipeline::unlock(lock_id, &store.readings());
    let context = (&store.coll, lock_id, &read, &update, store.grace);
    let (released, skipped, handed) = store
        .transaction(
            "unlock",
            context,
            |s, (coll, lock_id, read, update, grace)| {
                async move {
                    let docs = read_all(coll, (*read).clone(), s).await?;
                    // Unlock removes every lock of the group, held or not, whatever the grace;
                    // the grace is the pipeline's, for the engine's replay of its hand-over
                    // (whom to wake).
                    let mut read = Read::from_docs(&docs, *grace);
                    let Some(now) = read.now else {
                        return Ok(Ok((Vec::new(), Vec::new(), Vec::new())));
                    };
                    let released = table::unlock(&mut [&mut read.table], lock_id, now);
                    let handed = wakes::replayed(&mut read.table, &docs, false);
                    // Only the documents read and decided on are written; the others are
                    // reported and left as they are.
                    let ids: Vec<Bson> = read.ids.into_values().collect();
                    if !ids.is_empty() {
                        coll.update_many(pipeline::ids_in(&ids), (*update).clone())
                            .session(&mut *s)
                            .await?;
                    }
                    Ok(Ok((released, read.skipped, handed)))
                }
                .boxed()
            },
        )
        .await?;
    store.wake_all(handed).await;
    unless_skipped(released, skipped)
}

/// `renew`: renews every lock of `lock_id`, all or none.
pub(crate) async fn renew(
    store: &MongoStore,
    lock_id: &LockId,
    ttl: Ttl,
    margin: Duration,
) -> Result<Vec<LockStatus>, Error> {
    store.ready("renew").await?;
    match store.group_shape(lock_id).await {
        GroupShape::Empty => return Err(Error::LockNotFound),
        GroupShape::One(resource) => {
            let lock = Renewal {
                resource,
                lock_id: lock_id.clone(),
                ttl,
            };
            return Ok(vec![
                crate::one_lock::renew_one(store, &lock, margin).await?,
            ]);
        }
        GroupShape::More => {}
    }
    let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &store.now_expr());
    let context = (&store.coll, lock_id, &read, store.grace);
    store
        .transaction("renew", context, |s, (coll, lock_id, read, grace)| {
            async move {
                let docs = read_all(coll, (*read).clone(), s).await?;
                let mut read = Read::from_docs(&docs, *grace);
                // All or nothing: a group with a lock in a document that cannot be read is
                // not renewed at all.
                if let Some(m) = read.skipped.into_iter().next() {
                    return Ok(Err(m.into()));
                }
                let Some(now) = read.now else {
                    return Ok(Err(Error::LockNotFound));
                };
                let renewed = match table::renew(&mut [&mut read.table], lock_id, ttl, margin, now)
                {
                    Ok(r) => r,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                let expires_at = now.saturating_add(ttl.as_duration());
                let ids: Vec<Bson> = read.ids.into_values().collect();
                coll.update_many(
                    pipeline::ids_in(&ids),
                    pipeline::renew(lock_id, expires_at, now),
                )
                .session(&mut *s)
                .await?;
                Ok(Ok(renewed))
            }
            .boxed()
        })
        .await
}

/// `renew_many`: renews each of `locks` on its own, in one transaction.
pub(crate) async fn renew_many(
    store: &MongoStore,
    locks: &[Renewal],
    margin: Duration,
) -> Result<Vec<Result<LockStatus, Error>>, Error> {
    if locks.is_empty() {
        return Ok(Vec::new());
    }
    store.ready("renew").await?;
    // One transaction for the batch: read the documents with the server's `now`, decide
    // each lock with the engine, write the renewed ones with that same `now`.
    let resources: BTreeSet<&str> = locks.iter().map(|r| r.resource.as_str()).collect();
    let filter = doc! { schema::RESOURCE: { "$in": resources.into_iter().collect::<Vec<_>>() } };
    let read = pipeline::read_with_now(filter, &store.now_expr());
    let context = (&store.coll, locks, margin, &read, store.grace);
    store
        .transaction("renew", context, |s, (coll, locks, margin, read, grace)| {
            async move {
                let docs = read_all(coll, (*read).clone(), s).await?;
                let mut read = Read::from_docs(&docs, *grace);
                let Some(now) = read.now else {
                    return Ok(Ok(locks.iter().map(|_| Err(Error::LockNotFound)).collect()));
                };
                let mut outcomes = Vec::with_capacity(locks.len());
                let mut renewed = Vec::new();
                let mut touched = BTreeSet::new();
                for r in locks.iter() {
                    if let Some(m) = read
                        .skipped
                        .iter()
                        .find(|m| m.resource == r.resource.as_str())
                    {
                        outcomes.push(Err(m.clone().into()));
                        continue;
                    }
                    let outcome =
                        read.table
                            .renew_one(&r.resource, &r.lock_id, r.ttl, *margin, now);
                    if outcome.is_ok() {
                        touched.insert(r.resource.clone());
                        renewed.push(doc! {
                            "r": r.resource.as_str(),
                            "l": r.lock_id.as_str(),
                            "e": pipeline::date(now.saturating_add(r.ttl.as_duration())),
                        });
                    }
                    outcomes.push(outcome);
                }
                if !renewed.is_empty() {
                    let ids: Vec<Bson> = touched
                        .iter()
                        .filter_map(|r| read.ids.get(r).cloned())
                        .collect();
                    coll.update_many(pipeline::ids_in(&ids), pipeline::renew_pairs(renewed, now))
                        .session(&mut *s)
                        .await?;
                }
                Ok(Ok(outcomes))
            }
            .boxed()
        })
        .await
}
