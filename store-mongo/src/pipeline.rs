//! Every filter and update pipeline the store sends, built as data.
//!
//! `now` is an expression: `"$$NOW"` (the server's clock, the default) or a fixed date (the
//! test-time override). The same builders serve both, so the pipelines under test are the
//! ones that ship. The rules mirror `lockwright-engine` (the conformance and differential
//! tests hold them to it): expired means `expiresAt <= now`; a grant takes over every expired
//! lock on its resource; fences are `max(lastFence + 1, now_ms * 1024)`.
//!
//! User strings never reach an expression unquoted: inside pipelines they are wrapped in
//! `$literal`, so a lock id such as `"$foo"` is data, not a field path.

use mongodb::bson::{Bson, DateTime, Document, doc};

use lockwright_engine::table::FENCES_PER_MS;
use lockwright_engine::{Filter, LockId, LockRequest, Mode, SharedLimit, Timestamp};

use crate::schema::{
    ACQUIRED, COMMENT, CREATED_AT, EXCLUSIVE, EXPIRES_AT, FENCE, HOST, LAST_FENCE, LAST_GRANT,
    LOCK_ID, OWNER, RENEWED_AT, RESOURCE, SHARED, empty_exclusive,
};

/// Whether the pipeline mutant `$name` (see the engine's `mutants` module) is switched on:
/// never, outside builds with `--cfg lockwright_mutants`.
macro_rules! mutated {
    ($name:ident) => {{
        #[cfg(lockwright_mutants)]
        let on = lockwright_engine::mutants::active(lockwright_engine::mutants::Mutant::$name);
        #[cfg(not(lockwright_mutants))]
        let on = false;
        on
    }};
}

/// The server's clock inside a pipeline.
pub(crate) const SERVER_NOW: &str = "$$NOW";

/// The field an aggregation adds to each document to report the `now` it ran at.
pub(crate) const NOW_FIELD: &str = "__lockwright_now";

pub(crate) fn date(t: Timestamp) -> Bson {
    // Timestamps come from the store's clock or a validated TTL sum: well inside i64 ms.
    Bson::DateTime(DateTime::from_millis(
        i64::try_from(t.as_millis()).unwrap_or(i64::MAX),
    ))
}

fn literal(value: impl Into<Bson>) -> Bson {
    Bson::Document(doc! { "$literal": value.into() })
}

fn opt_literal(value: Option<&String>) -> Bson {
    value.map_or(Bson::Null, |v| literal(v.as_str()))
}

fn shared_locks() -> Bson {
    Bson::Document(doc! { "$ifNull": ["$shared.locks", []] })
}

/// `path` holds a date that is `<= now`.
fn is_expired(path: &str, now: &Bson) -> Bson {
    let at_or_before = if mutated!(PipelineExpiryStrict) {
        "$lt"
    } else {
        "$lte"
    };
    Bson::Document(doc! { "$and": [
        { "$eq": [ { "$type": path }, "date" ] },
        { at_or_before: [ path, now.clone() ] },
    ] })
}

fn is_live(path: &str, now: &Bson) -> Bson {
    Bson::Document(doc! { "$not": [ is_expired(path, now) ] })
}

fn type_in(path: &str, types: &[&str]) -> Bson {
    Bson::Document(doc! { "$in": [ { "$type": path }, types ] })
}

/// A lock entry (`prefix` is `$exclusive` or `$$this`) the rules can decide on.
fn valid_lock(prefix: &str) -> Bson {
    let field = |f: &str| format!("{prefix}.{f}");
    let fence = field(FENCE);
    Bson::Document(doc! { "$and": [
        type_in(&field(LOCK_ID), &["string"]),
        type_in(&field(CREATED_AT), &["date"]),
        type_in(&field(EXPIRES_AT), &["missing", "null", "date"]),
        type_in(&field(RENEWED_AT), &["missing", "null", "date"]),
        { "$or": [
            type_in(&fence, &["missing", "null"]),
            { "$and": [ type_in(&fence, &["int", "long"]), { "$gte": [ fence.as_str(), 0 ] } ] },
        ] },
    ] })
}

/// The server's copy of `schema::decode`'s test: the document is one every rule can decide
/// on. Written with `$type` tests ahead of every operator that would fail on a wrong type
/// (`$and` and `$or` stop at the first decisive operand), so it never raises a server
/// error, whatever the document holds.
pub(crate) fn valid() -> Bson {
    let locks = shared_locks();
    let n = Bson::Document(doc! { "$size": locks.clone() });
    let exclusive = doc! { "$or": [
        type_in("$exclusive", &["missing", "null"]),
        { "$and": [
            type_in("$exclusive", &["object"]),
            type_in("$exclusive.acquired", &["missing", "null", "bool"]),
            { "$or": [ { "$ne": [ "$exclusive.acquired", true ] }, valid_lock("$exclusive") ] },
        ] },
    ] };
    let shared = doc! { "$or": [
        type_in("$shared", &["missing", "null"]),
        { "$and": [
            type_in("$shared", &["object"]),
            type_in("$shared.locks", &["missing", "null", "array"]),
            { "$allElementsTrue": [ { "$map": { "input": locks.clone(), "in": valid_lock("$$this") } } ] },
            { "$or": [
                { "$and": [ { "$eq": [ n.clone(), 0 ] }, type_in("$shared.count", &["missing", "null"]) ] },
                { "$and": [ type_in("$shared.count", &["int", "long"]), { "$eq": [ "$shared.count", n.clone() ] } ] },
            ] },
            { "$eq": [ { "$size": { "$setUnion": [ { "$map": { "input": locks, "in": "$$this.lockId" } } ] } }, n.clone() ] },
        ] },
    ] };
    let fence = doc! { "$or": [
        type_in("$lastFence", &["missing", "null"]),
        { "$and": [
            type_in("$lastFence", &["int", "long"]),
            { "$gte": [ "$lastFence", 0 ] },
        ] },
    ] };
    Bson::Document(doc! { "$and": [
        type_in("$resource", &["string"]),
        exclusive,
        shared,
        { "$not": [ { "$and": [ { "$eq": [ "$exclusive.acquired", true ] }, { "$gt": [ n, 0 ] } ] } ] },
        fence,
    ] })
}

fn live_exclusive(now: &Bson) -> Bson {
    Bson::Document(doc! { "$and": [
        { "$eq": [ "$exclusive.acquired", true ] },
        is_live("$exclusive.expiresAt", now),
    ] })
}

fn live_shared(now: &Bson) -> Bson {
    Bson::Document(
        doc! { "$filter": { "input": shared_locks(), "cond": is_live("$$this.expiresAt", now) } },
    )
}

fn next_fence(now: &Bson) -> Bson {
    Bson::Document(doc! { "$max": [
        { "$add": [
            { "$ifNull": [ "$lastFence", 0_i64 ] },
            i64::from(!mutated!(PipelineFenceNotIncremented)),
        ] },
        { "$multiply": [ { "$toLong": now.clone() }, FENCES_PER_MS as i64 ] },
    ] })
}

fn new_lock(request: &LockRequest, now: &Bson) -> Document {
    let expires = request.ttl.map_or(Bson::Null, |t| {
        Bson::Document(
            doc! { "$add": [ now.clone(), i64::try_from(t.as_millis()).unwrap_or(i64::MAX) ] },
        )
    });
    doc! {
        LOCK_ID: literal(request.lock_id.as_str()),
        OWNER: opt_literal(request.owner.as_ref()),
        HOST: opt_literal(request.host.as_ref()),
        COMMENT: opt_literal(request.comment.as_ref()),
        CREATED_AT: now.clone(),
        RENEWED_AT: Bson::Null,
        EXPIRES_AT: expires,
        ACQUIRED: true,
        FENCE: NEW_FENCE,
    }
}

fn recount() -> Document {
    doc! { "$set": { "shared.count": { "$size": "$shared.locks" } } }
}

/// The variable a grant pipeline's rule and install read the live shared locks from.
const LIVE: &str = "$$live";

/// The variable holding the fence of the grant being installed.
const NEW_FENCE: &str = "$$fence";

/// A grant in one `findAndModify`: the filter is the resource alone (with upsert, a fresh
/// resource is inserted, and the server retries insert races itself), and the pipeline is
/// one `$replaceWith` that decides and applies: with `$let` it tests that the document is
/// one the rules can decide on (`valid`), computes the live shared locks once (`live`: the
/// rule and the install both read them), decides the rule with `now`, and only where it
/// allows computes the fence and merges the grant into the document: the fence counter,
/// the takeover of expired locks, the new lock, and `grant_id` in `lastGrant` so the
/// caller can tell its grant from a refusal. A refusal replaces the document by itself,
/// which MongoDB treats as no write at all. No temporary field is written, so no stored
/// field is touched by a refusal, whatever its name.
///
/// A resource whose fence counter is at the top of the 64-bit range is refused (the
/// caller reports it as malformed at `lastFence`) before its fence could overflow.
fn grant(
    request: &LockRequest,
    rule: Bson,
    install: Document,
    grant_id: &Bson,
    now: &Bson,
) -> (Document, Vec<Document>) {
    let mut changes = install;
    changes.insert(LAST_FENCE, NEW_FENCE);
    changes.insert(LAST_GRANT, grant_id.clone());
    let apply = doc! { "$let": {
        "vars": { "fence": next_fence(now) },
        "in": { "$mergeObjects": [ "$$ROOT", changes ] },
    } };
    let room = doc! { "$lt": [ { "$ifNull": [ "$lastFence", 0_i64 ] }, i64::MAX ] };
    // `$and` stops at the first false operand and `$cond` evaluates only the branch it
    // takes: nothing that could fail on a wrong type is computed on a document that is not
    // valid, and no fence is computed for a refusal.
    let decided = doc! { "$and": [ "$$valid", room, rule ] };
    let body = doc! { "$let": {
        "vars": { "valid": valid() },
        "in": { "$let": {
            "vars": { "live": { "$cond": [ "$$valid", live_shared(now), [] ] } },
            "in": { "$cond": [ decided, apply, "$$ROOT" ] },
        } },
    } };
    (
        doc! { RESOURCE: request.resource.as_str() },
        vec![doc! { "$replaceWith": body }],
    )
}

/// The exclusive grant: no live exclusive lock and no live shared lock.
pub(crate) fn xlock(
    request: &LockRequest,
    grant_id: &Bson,
    now: &Bson,
) -> (Document, Vec<Document>) {
    let mut rule = Vec::new();
    if !mutated!(PipelineTakeoverLive) {
        rule.push(Bson::Document(doc! { "$not": [ live_exclusive(now) ] }));
    }
    if !mutated!(PipelineExclusiveIgnoresShared) {
        rule.push(Bson::Document(doc! { "$eq": [ { "$size": LIVE }, 0 ] }));
    }
    let rule = Bson::Document(doc! { "$and": rule });
    let install = doc! {
        EXCLUSIVE: new_lock(request, now),
        SHARED: { "$literal": { "count": 0, "locks": [] } },
    };
    grant(request, rule, install, grant_id, now)
}

/// The shared grant: no live exclusive lock, no live lock of this lock id, and (with a
/// limit) fewer live shared locks than the limit.
pub(crate) fn slock(
    request: &LockRequest,
    limit: Option<SharedLimit>,
    grant_id: &Bson,
    now: &Bson,
) -> (Document, Vec<Document>) {
    let live = LIVE;
    let mut conditions = vec![
        Bson::Document(doc! { "$not": [ live_exclusive(now) ] }),
        Bson::Document(doc! { "$not": [ { "$in": [
            literal(request.lock_id.as_str()),
            format!("{live}.{LOCK_ID}"),
        ] } ] }),
    ];
    if let Some(m) = limit.filter(|_| !mutated!(PipelineSharedIgnoresLimit)) {
        conditions.push(Bson::Document(
            doc! { "$lt": [ { "$size": live }, i64::from(m.get()) ] },
        ));
    }
    let install = doc! {
        EXCLUSIVE: { "$literal": empty_exclusive() },
        SHARED: {
            "locks": { "$concatArrays": [ live, [ new_lock(request, now) ] ] },
            "count": { "$add": [ { "$size": live }, 1 ] },
        },
    };
    grant(
        request,
        Bson::Document(doc! { "$and": conditions }),
        install,
        grant_id,
        now,
    )
}

/// The documents holding a lock of `lock_id` (uses the lock-id indexes of both modes).
pub(crate) fn group_filter(lock_id: &LockId) -> Document {
    in_any_lock(LOCK_ID, lock_id.as_str().into())
}

/// Documents where the exclusive lock or some shared lock has `field` matching `cond`.
fn in_any_lock(field: &str, cond: Bson) -> Document {
    doc! { "$or": [
        { format!("{EXCLUSIVE}.{field}"): cond.clone() },
        { format!("{SHARED}.locks.{field}"): cond },
    ] }
}

/// An aggregation returning the documents matching `filter`, each with the `now` it ran at.
pub(crate) fn read_with_now(filter: Document, now: &Bson) -> Vec<Document> {
    vec![
        doc! { "$match": filter },
        doc! { "$set": { NOW_FIELD: now.clone() } },
    ]
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

/// Removes every lock of `lock_id`.
pub(crate) fn unlock(lock_id: &LockId) -> Vec<Document> {
    let id = literal(lock_id.as_str());
    remove_where(
        Bson::Document(doc! { "$eq": [ "$exclusive.lockId", id.clone() ] }),
        Bson::Document(doc! { "$eq": [ "$$this.lockId", id ] }),
    )
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

/// Whether the lock entry at `prefix` (`$exclusive` or `$$this`) is held by `id` (a
/// `$literal`); an exclusive slot also has to be `acquired`.
fn held_by(prefix: &str, id: &Bson) -> Bson {
    let own = Bson::Document(doc! { "$eq": [ format!("{prefix}.{LOCK_ID}"), id.clone() ] });
    if prefix == "$exclusive" {
        Bson::Document(doc! { "$and": [ { "$eq": [ "$exclusive.acquired", true ] }, own ] })
    } else {
        own
    }
}

/// Applies `change` to the lock of `id` in the exclusive slot and in the shared list (at
/// most one of them holds it on a valid document), on a valid document for which `decided`
/// holds; any other document is left exactly as it is.
fn one_lock(id: &Bson, decided: Bson, exclusive: Bson, shared: Bson) -> Vec<Document> {
    let changed = doc! { "$mergeObjects": [ "$$ROOT", {
        EXCLUSIVE: { "$cond": [ held_by("$exclusive", id), exclusive, "$exclusive" ] },
        SHARED: { "$mergeObjects": [ "$shared", shared ] },
    } ] };
    let body = doc! { "$let": {
        "vars": { "valid": valid() },
        "in": { "$cond": [ { "$and": [ "$$valid", decided ] }, changed, "$$ROOT" ] },
    } };
    vec![doc! { "$replaceWith": body }]
}

/// Renews the one lock of `lock_id` on the document (the filter names the resource): sets
/// its `expiresAt = now + ttl` and `renewedAt = now` if it expires after `now + margin` (or
/// never), as the engine's `renew_one`; otherwise changes nothing.
pub(crate) fn renew_one(
    lock_id: &LockId,
    ttl_ms: u64,
    margin_ms: u64,
    now: &Bson,
) -> Vec<Document> {
    let id = literal(lock_id.as_str());
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let margin_ms = if mutated!(PipelineRenewOneWithoutMargin) {
        0
    } else {
        margin_ms
    };
    let deadline = Bson::Document(doc! { "$add": [ now.clone(), ms(margin_ms) ] });
    let renewable = |prefix: &str| {
        let expires = format!("{prefix}.{EXPIRES_AT}");
        Bson::Document(doc! { "$and": [
            held_by(prefix, &id),
            { "$not": [ { "$and": [
                { "$eq": [ { "$type": expires.as_str() }, "date" ] },
                { "$lte": [ expires.as_str(), deadline.clone() ] },
            ] } ] },
        ] })
    };
    let decided = Bson::Document(doc! { "$or": [
        renewable("$exclusive"),
        { "$anyElementTrue": [ { "$map": { "input": shared_locks(), "in": renewable("$$this") } } ] },
    ] });
    let fresh = doc! {
        EXPIRES_AT: { "$add": [ now.clone(), ms(ttl_ms) ] },
        RENEWED_AT: now.clone(),
    };
    let shared = doc! { "locks": { "$map": { "input": shared_locks(), "in": { "$cond": [
        held_by("$$this", &id),
        { "$mergeObjects": [ "$$this", fresh.clone() ] },
        "$$this",
    ] } } } };
    one_lock(
        &id,
        decided,
        Bson::Document(doc! { "$mergeObjects": [ "$exclusive", fresh ] }),
        Bson::Document(shared),
    )
}

/// Removes the one lock of `lock_id`, live or expired, from the document (the filter names
/// the resource and the lock id), as the engine's `unlock_one`; a document the rules cannot
/// decide on is left as it is.
pub(crate) fn unlock_one(lock_id: &LockId) -> Vec<Document> {
    let id = literal(lock_id.as_str());
    let keep = doc! { "$filter": { "input": shared_locks(), "cond": { "$not": [ held_by("$$this", &id) ] } } };
    let shared = doc! { "locks": keep.clone(), "count": { "$size": keep } };
    one_lock(
        &id,
        Bson::Boolean(true),
        Bson::Document(doc! { "$literal": empty_exclusive() }),
        Bson::Document(shared),
    )
}

/// The filter of a one-lock operation: the resource's document, if it holds a lock of
/// `lock_id`.
pub(crate) fn one_lock_filter(resource: &str, lock_id: &LockId) -> Document {
    let mut filter = in_any_lock(LOCK_ID, lock_id.as_str().into());
    filter.insert(RESOURCE, resource);
    filter
}

/// The projection of a one-lock operation: the whole document, and the `now` it ran at.
pub(crate) fn with_now(now: &Bson) -> Document {
    doc! { NOW_FIELD: now.clone(), RESOURCE: 1, EXCLUSIVE: 1, SHARED: 1, LAST_FENCE: 1 }
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

/// Purge, phase one: for each document holding a lock expired at `t`, the lock ids of its
/// expired locks (`ids`), or, for a document the rules cannot decide on, the whole document
/// (`bad`) so that the caller can say what is wrong with it.
pub(crate) fn expired_groups(t: Timestamp) -> Vec<Document> {
    let t = date(t);
    let ids = doc! { "$concatArrays": [
        { "$cond": [
            { "$and": [ { "$eq": [ "$exclusive.acquired", true ] }, is_expired("$exclusive.expiresAt", &t) ] },
            [ "$exclusive.lockId" ],
            [],
        ] },
        { "$map": {
            "input": { "$filter": { "input": shared_locks(), "cond": is_expired("$$this.expiresAt", &t) } },
            "in": "$$this.lockId",
        } },
    ] };
    vec![
        doc! { "$match": { "$or": [
            { "exclusive.expiresAt": { "$lte": t.clone() } },
            { "shared.locks.expiresAt": { "$lte": t.clone() } },
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

/// Purge, phase two: removes the locks of `ids` created before `t`.
pub(crate) fn purge_batch(ids: &[LockId], t: Timestamp) -> Vec<Document> {
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
    remove_where(doomed_exclusive, doomed("$$this"))
}

/// The documents whose `_id` is one of `ids`: the documents a transaction read and
/// decided on. The transaction makes that decision hold: a concurrent write to one of them
/// is a write conflict, and the transaction is retried.
pub(crate) fn ids_in(ids: &[Bson]) -> Document {
    doc! { "_id": { "$in": ids } }
}

/// Purge, phase three: documents with no lock whose fence counter is below the floor at `t`.
pub(crate) fn deletable(t: Timestamp) -> Document {
    let floor = i64::try_from(lockwright_engine::table::fence_floor(t)).unwrap_or(i64::MAX);
    let mut deletable = doc! {
        "exclusive.acquired": { "$ne": true },
        "shared.locks.0": { "$exists": false },
        "$or": [ { LAST_FENCE: { "$lt": floor } }, { LAST_FENCE: Bson::Null } ],
        // Nothing malformed is deleted: a document the rules cannot read is left as it is.
        "$expr": valid(),
    };
    if mutated!(PipelinePurgeDeletesHeld) {
        deletable.remove("exclusive.acquired");
    }
    deletable
}

/// A query selecting a superset of the documents holding a lock that matches `filter` at
/// `now`, using the indexes where the filter allows; the engine then matches each lock
/// exactly. `now` is needed only for the TTL bounds: without it they are left out (a
/// superset still).
pub(crate) fn status_prefilter(filter: &Filter, now: Option<Timestamp>) -> Document {
    let mut all: Vec<Bson> = Vec::new();
    let mut push = |d: Document| all.push(Bson::Document(d));
    if let Some(r) = &filter.resource {
        push(doc! { RESOURCE: r.as_str() });
    }
    if let Some(l) = &filter.lock_id {
        push(in_any_lock(LOCK_ID, l.as_str().into()));
    }
    if let Some(o) = &filter.owner {
        push(in_any_lock(OWNER, o.as_str().into()));
    }
    match filter.mode {
        Some(Mode::Exclusive) => push(doc! { "exclusive.acquired": true }),
        Some(Mode::Shared) => push(doc! { "shared.locks.0": { "$exists": true } }),
        None => {}
    }
    if let Some(t) = filter.created_before {
        push(in_any_lock(
            CREATED_AT,
            Bson::Document(doc! { "$lt": date(t) }),
        ));
    }
    if let Some(t) = filter.created_after {
        push(in_any_lock(
            CREATED_AT,
            Bson::Document(doc! { "$gt": date(t) }),
        ));
    }
    if let (Some(d), Some(now)) = (filter.ttl_lt, now) {
        push(in_any_lock(
            EXPIRES_AT,
            Bson::Document(doc! { "$lt": date(now.saturating_add(d)) }),
        ));
    }
    if let (Some(d), Some(now)) = (filter.ttl_gte, now) {
        // A remaining TTL of at least zero is any TTL at all, expired ones included.
        let cond = if d.is_zero() {
            doc! { "$type": "date" }
        } else {
            doc! { "$gte": date(now.saturating_add(d)) }
        };
        push(in_any_lock(EXPIRES_AT, Bson::Document(cond)));
    }
    if all.is_empty() {
        Document::new()
    } else {
        doc! { "$and": all }
    }
}
