//! The group pipelines: the filters and updates of `unlock`, `renew` and `renew_many`
//! transactions, and the three phases of `purge`.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{LockId, Timestamp};

use super::{Readings, date, in_any_lock, is_abandoned, literal, shared_locks, valid};
use crate::schema::{
    EXCLUSIVE, EXPIRES_AT, LAST_FENCE, LOCK_ID, QUEUE, RENEWED_AT, SHARED, empty_exclusive,
};

fn recount() -> Document {
    doc! { "$set": { "shared.count": { "$size": "$shared.locks" } } }
}

/// The documents holding a lock of `lock_id` (uses the lock-id indexes of both modes).
pub(crate) fn group_filter(lock_id: &LockId) -> Document {
    in_any_lock(LOCK_ID, lock_id.as_str().into())
}

/// Removes the locks for which `doomed` (an expression over `$$this` for shared locks, and
/// the same over the exclusive slot) holds.
fn remove_where(doomed_exclusive: Bson, doomed_shared: Bson) -> Vec<Document> {
    vec![
        doc! { "$set": {
            EXCLUSIVE: { "$cond": [ doomed_exclusive, empty_exclusive(), "$exclusive" ] },
            "shared.locks": { "$filter": { "input": shared_locks(), "cond": { "$not": [ doomed_shared ] } } },
        } },
        recount(),
    ]
}

/// Removes every lock of `lock_id` and its places, and hands each lock over
/// (`queue::hand_over`).
pub(crate) fn unlock(lock_id: &LockId, readings: &Readings) -> Vec<Document> {
    let id = literal(lock_id.as_str());
    let mut stages = remove_where(
        Bson::Document(doc! { "$eq": [ "$exclusive.lockId", id.clone() ] }),
        Bson::Document(doc! { "$eq": [ "$$this.lockId", id ] }),
    );
    stages.push(doc! { "$set": {
        QUEUE: super::queue::without_lock_id(&super::literal(lock_id.as_str())),
    } });
    stages.push(super::queue::hand_over(readings));
    stages
}

/// Sets `expiresAt` and `renewedAt` on every lock of `lock_id` (decided renewable by the
/// engine on the documents read in the same transaction).
pub(crate) fn renew(lock_id: &LockId, expires_at: Timestamp, now: Timestamp) -> Vec<Document> {
    let id = literal(lock_id.as_str());
    let fresh = doc! { EXPIRES_AT: date(expires_at), RENEWED_AT: date(now) };
    vec![
        doc! { "$set": {
            EXCLUSIVE: { "$cond": [
                { "$eq": [ "$exclusive.lockId", id.clone() ] },
                { "$mergeObjects": [ "$exclusive", fresh.clone() ] },
                "$exclusive",
            ] },
            "shared.locks": { "$map": { "input": shared_locks(), "in": { "$cond": [
                { "$eq": [ "$$this.lockId", id ] },
                { "$mergeObjects": [ "$$this", fresh ] },
                "$$this",
            ] } } },
        } },
        recount(),
    ]
}

/// Renews, on the documents it runs over, exactly the locks named in `renewed` (documents
/// `{r: resource, l: lock id, e: new expiry}`, each decided renewable by the engine at `now`
/// on the documents read in the same transaction): their `expiresAt` becomes `e` and their
/// `renewedAt` `now`. Every other lock, and every other field, is left as it is. A lock
/// named more than once takes its last renewal, as renewing one after another would.
pub(crate) fn renew_pairs(renewed: Vec<Document>, now: Timestamp) -> Vec<Document> {
    let now = date(now);
    let renew = |prefix: &str, also: Bson| {
        let same_lock = if mutated!(PipelineRenewManyWholeDocuments) {
            Bson::Boolean(true)
        } else {
            Bson::Document(doc! { "$eq": [ "$$p.l", format!("{prefix}.{LOCK_ID}") ] })
        };
        let hit = doc! { "$filter": { "input": "$$pairs", "as": "p", "cond": { "$and": [
            { "$eq": [ "$$p.r", "$resource" ] },
            same_lock,
        ] } } };
        Bson::Document(doc! { "$let": {
            "vars": { "m": hit },
            "in": { "$cond": [
                { "$and": [ also, { "$gt": [ { "$size": "$$m" }, 0 ] } ] },
                { "$mergeObjects": [ prefix, {
                    EXPIRES_AT: { "$arrayElemAt": [ "$$m.e", -1 ] },
                    RENEWED_AT: now.clone(),
                } ] },
                prefix,
            ] },
        } })
    };
    let shared = doc! { "$cond": [
        { "$eq": [ { "$type": "$shared" }, "object" ] },
        { "$mergeObjects": [ "$shared", {
            "locks": { "$map": { "input": shared_locks(), "in": renew("$$this", Bson::Boolean(true)) } },
        } ] },
        "$shared",
    ] };
    let exclusive = renew(
        "$exclusive",
        Bson::Document(doc! { "$eq": [ "$exclusive.acquired", true ] }),
    );
    vec![doc! { "$replaceWith": { "$let": {
        "vars": { "pairs": { "$literal": renewed } },
        "in": { "$mergeObjects": [ "$$ROOT", { EXCLUSIVE: exclusive, SHARED: shared } ] },
    } } }]
}

/// Purge, phase one: for each document holding a lock abandoned at `t` (expired for at
/// least the takeover grace), the lock ids of its abandoned locks (`ids`), or, for a
/// document the rules cannot decide on, the whole document (`bad`) so that the caller can
/// say what is wrong with it.
pub(crate) fn expired_groups(t: Timestamp, grace: std::time::Duration) -> Vec<Document> {
    let grace_ms = if mutated!(PipelineTakeoverIgnoresGrace) {
        0
    } else {
        super::ms(grace)
    };
    // The index can narrow the search to locks expired by `t - grace`; the pipeline then
    // decides with the same test as every grant.
    let before = date(Timestamp::from_millis(
        t.as_millis()
            .saturating_sub(u64::try_from(grace_ms).unwrap_or(u64::MAX)),
    ));
    let t = date(t);
    let ids = doc! { "$concatArrays": [
        { "$cond": [
            { "$and": [ { "$eq": [ "$exclusive.acquired", true ] }, is_abandoned("$exclusive.expiresAt", &t, grace_ms) ] },
            [ "$exclusive.lockId" ],
            [],
        ] },
        { "$map": {
            "input": { "$filter": { "input": shared_locks(), "cond": is_abandoned("$$this.expiresAt", &t, grace_ms) } },
            "in": "$$this.lockId",
        } },
    ] };
    vec![
        doc! { "$match": { "$or": [
            { "exclusive.expiresAt": { "$lte": before.clone() } },
            { "shared.locks.expiresAt": { "$lte": before } },
        ] } },
        doc! { "$replaceWith": { "$let": {
            "vars": { "valid": valid() },
            "in": { "$cond": [
                "$$valid",
                { "resource": "$resource", "ids": ids },
                { "bad": "$$ROOT" },
            ] },
        } } },
    ]
}

/// Purge, phase two, for one batch of groups: the documents involved.
pub(crate) fn batch_filter(ids: &[LockId]) -> Document {
    let ids: Vec<Bson> = ids
        .iter()
        .map(|i| Bson::String(i.as_str().to_owned()))
        .collect();
    in_any_lock(LOCK_ID, Bson::Document(doc! { "$in": ids }))
}

/// Purge, phase two: removes the locks of `ids` created before `t`, and hands each lock
/// over (`queue::hand_over`).
pub(crate) fn purge_batch(ids: &[LockId], t: Timestamp, readings: &Readings) -> Vec<Document> {
    let ids: Vec<Bson> = ids
        .iter()
        .map(|i| Bson::String(i.as_str().to_owned()))
        .collect();
    let ids = literal(ids);
    let t = date(t);
    let doomed = |lock: &str| {
        Bson::Document(doc! { "$and": [
            { "$in": [ format!("{lock}.lockId"), ids.clone() ] },
            { "$eq": [ { "$type": format!("{lock}.createdAt") }, "date" ] },
            { "$lt": [ format!("{lock}.createdAt"), t.clone() ] },
        ] })
    };
    let mut doomed_exclusive = doomed("$exclusive");
    if let Bson::Document(d) = &mut doomed_exclusive
        && let Ok(all) = d.get_array_mut("$and")
    {
        all.push(Bson::Document(
            doc! { "$eq": [ "$exclusive.acquired", true ] },
        ));
    }
    let mut stages = remove_where(doomed_exclusive, doomed("$$this"));
    stages.push(super::queue::hand_over(readings));
    stages
}

/// Purge, phase three: documents with no lock and no live place in their queue at `now`,
/// whose fence counter is below the fence floor (both expressions: the server's clock and
/// the cluster time's floor, or fixed ones) when the server deletes them.
pub(crate) fn deletable(floor: &Bson, now: &Bson) -> Document {
    let below = doc! { "$or": [
        { "$eq": [ { "$ifNull": [ format!("${LAST_FENCE}"), Bson::Null ] }, Bson::Null ] },
        { "$lt": [ format!("${LAST_FENCE}"), floor.clone() ] },
    ] };
    let mut deletable = doc! {
        "exclusive.acquired": { "$ne": true },
        "shared.locks.0": { "$exists": false },
        // Nothing malformed is deleted: a document the rules cannot read is left as it is;
        // `valid` comes first, so the comparison only meets a number.
        "$expr": { "$and": [ valid(), below, { "$not": [ super::queue::has_live_place(now) ] } ] },
    };
    if mutated!(PipelinePurgeDeletesHeld) {
        deletable.remove("exclusive.acquired");
    }
    deletable
}
