//! The one-lock pipelines, each run by one `findAndModify`: the grants (`xlock`, `slock`)
//! and `renew_one`, `unlock_one`.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{LockId, Mode};

use super::bind::{self, Shape, var};
use super::queue;
use super::{FLOOR_FIELD, NOW_FIELD, Readings, in_any_lock, is_held, shared_locks, valid};
use crate::schema::{
    ACQUIRED, COMMENT, CREATED_AT, EXCLUSIVE, EXPIRES_AT, FENCE, HOST, LAST_FENCE, LAST_GRANT,
    LAST_LEAVE, LOCK_ID, OWNER, QUEUE, RENEWED_AT, RESOURCE, SHARED, WAKE, empty_exclusive,
};

fn held_exclusive(readings: &Readings) -> Bson {
    Bson::Document(doc! { "$and": [
        { "$eq": [ "$exclusive.acquired", true ] },
        is_held("$exclusive.expiresAt", readings),
    ] })
}

fn held_shared(readings: &Readings) -> Bson {
    Bson::Document(
        doc! { "$filter": { "input": shared_locks(), "cond": is_held("$$this.expiresAt", readings) } },
    )
}

fn next_fence(readings: &Readings) -> Bson {
    super::fence_after(
        &Bson::Document(doc! { "$ifNull": [ "$lastFence", 0_i64 ] }),
        readings,
    )
}

/// The lock a grant installs: the request's (bound variables), created `now`.
fn new_lock(now: &Bson) -> Document {
    doc! {
        LOCK_ID: bind::LOCK_ID,
        OWNER: bind::OWNER,
        HOST: bind::HOST,
        COMMENT: bind::COMMENT,
        CREATED_AT: now.clone(),
        RENEWED_AT: Bson::Null,
        EXPIRES_AT: bind::EXPIRES,
        ACQUIRED: true,
        FENCE: NEW_FENCE,
    }
}

/// The variable a grant pipeline's rule and install read the held shared locks from.
const LIVE: &str = "$$live";

/// The variable holding the fence of the grant being installed.
const NEW_FENCE: &str = "$$fence";

/// A grant in one `findAndModify`: the filter is the resource alone (with upsert, a fresh
/// resource is inserted, and the server retries insert races itself), and the pipeline is
/// one `$replaceWith` that decides and applies: with `$let` it tests that the document is
/// one the rules can decide on (`valid`), computes the held shared locks once (`live`: the
/// rule and the install both read them) and the live places of the queue (`places`) and
/// those ahead of the request's own (`ahead`), decides the rule with `now` and the grace,
/// and only where it allows computes the fence and merges the grant into the document: the
/// fence counter, the takeover of abandoned locks, the new lock, the queue without the
/// winner's place and the dead ones, and
/// the grant id (`$$grantId`) in `lastGrant` so the caller can tell its grant from a refusal. A refusal of a request that is not fair replaces the document
/// by itself, which MongoDB treats as no write at all; a fair request's refusal writes the
/// queue alone (its place taken or refreshed, the dead places dropped), unless the
/// document already carries this request's grant (an earlier attempt of it was applied:
/// its place is gone with the grant, and must not come back). No temporary field is
/// written, so no other stored field is touched by a refusal, whatever its name.
///
/// A resource whose fence counter is at the top of the 64-bit range is refused (the
/// caller reports it as malformed at `lastFence`) before its fence could overflow, and
/// takes no place in its queue.
fn grant(
    mode: Mode,
    fair: bool,
    rule: Bson,
    install: Document,
    readings: &Readings,
) -> Vec<Document> {
    let grant_id = var(bind::GRANT_ID);
    let mut changes = install;
    changes.insert(LAST_FENCE, NEW_FENCE);
    changes.insert(LAST_GRANT, grant_id.clone());
    let after = queue::after_grant(fair);
    changes.insert(QUEUE, queue::set_queue(after));
    let apply = doc! { "$let": {
        "vars": { "fence": next_fence(readings) },
        "in": { "$mergeObjects": [ "$$ROOT", changes ] },
    } };
    let room = doc! { "$lt": [ { "$ifNull": [ "$lastFence", 0_i64 ] }, i64::MAX ] };
    let refused = if fair {
        let enqueue = doc! { "$mergeObjects": [ "$$ROOT", {
            QUEUE: queue::enqueued(mode, readings),
        } ] };
        let takes_place = doc! { "$and": [
            room.clone(),
            { "$ne": [ format!("${LAST_GRANT}"), grant_id.clone() ] },
        ] };
        Bson::Document(doc! { "$cond": [ takes_place, enqueue, "$$ROOT" ] })
    } else {
        Bson::String("$$ROOT".to_owned())
    };
    // `$and` stops at the first false operand and `$cond` evaluates only the branch it
    // takes: no fence is computed for a refusal. The document is a valid one
    // ([`super::validated`]).
    let decided = doc! { "$and": [ room, rule ] };
    let mut outcome = doc! { "$cond": [ decided, apply, refused ] };
    let revive = mutated!(PipelineClaimRevivesLapsed);
    if fair {
        let (claimable, claimed) = claim(mode, revive, readings);
        outcome = doc! { "$cond": [ claimable, claimed, outcome ] };
    }
    let decide = Bson::Document(doc! { "$let": {
        "vars": {
            "live": held_shared(readings),
            "places": queue::live_places(readings),
        },
        "in": { "$let": {
            "vars": { "ahead": queue::ahead(fair, readings) },
            "in": outcome,
        } },
    } });
    // The store hands the lock over before the request is decided (the write finds the
    // holder gone); under the mutant the claim comes first.
    let hand_over = queue::hand_over_on_valid(readings);
    if revive && fair {
        super::validated(decide, hand_over, readings)
    } else {
        super::validated(hand_over, decide, readings)
    }
}

/// The filter of a grant: the resource's document.
pub(crate) fn grant_filter(resource: &str) -> Document {
    doc! { RESOURCE: resource }
}

/// A fair request's claim (the engine's `ResourceState::claim`): whether its lock id holds
/// a held lock here in the mode it asks for (`claimable`, over a valid document), and the
/// document with that lock renewed to the request's TTL from `now` (`renewedAt = now`, the
/// fence kept), the request's place gone with the dead ones, `lastGrant` set, so that the
/// caller reads its grant, as after any grant. Under the mutant, a lock that is no longer
/// held is claimed too.
fn claim(mode: Mode, revive: bool, readings: &Readings) -> (Bson, Bson) {
    let id = var(bind::LOCK_ID);
    let now = readings.now.clone();
    let own = |prefix: &str| {
        let mut all = vec![held_by(prefix, &id)];
        if !revive {
            all.push(is_held(&format!("{prefix}.{EXPIRES_AT}"), readings));
        }
        Bson::Document(doc! { "$and": all })
    };
    let fresh = doc! { EXPIRES_AT: bind::EXPIRES, RENEWED_AT: now };
    let mut changes = match mode {
        Mode::Exclusive => doc! {
            EXCLUSIVE: { "$mergeObjects": [ "$exclusive", fresh ] },
        },
        Mode::Shared => doc! {
            SHARED: { "$mergeObjects": [ "$shared", { "locks": { "$map": {
                "input": shared_locks(),
                "in": { "$cond": [ held_by("$$this", &id), { "$mergeObjects": [ "$$this", fresh ] }, "$$this" ] },
            } } } ] },
        },
    };
    changes.insert(LAST_GRANT, bind::GRANT_ID);
    let after = queue::without(queue::PLACES, &var(bind::TICKET));
    changes.insert(QUEUE, queue::set_queue(after));
    let claimable = match mode {
        Mode::Exclusive => own("$exclusive"),
        Mode::Shared => Bson::Document(doc! { "$anyElementTrue": [ { "$map": {
            "input": shared_locks(),
            "in": own("$$this"),
        } } ] }),
    };
    (
        claimable,
        Bson::Document(doc! { "$mergeObjects": [ "$$ROOT", changes ] }),
    )
}

/// The pipeline of a grant of `shape` (see [`bind::grant`] for its variables).
pub(crate) fn grant_pipeline(shape: Shape, readings: &Readings) -> Vec<Document> {
    match shape {
        Shape::Grant {
            mode: Mode::Exclusive,
            fair,
            ..
        } => xlock(fair, readings),
        Shape::Grant {
            mode: Mode::Shared,
            limited,
            fair,
        } => slock(limited, fair, readings),
        other => unreachable!("not a grant's shape: {other:?}"),
    }
}

/// The exclusive grant: no held exclusive lock and no held shared lock.
fn xlock(fair: bool, readings: &Readings) -> Vec<Document> {
    let mut rule = Vec::new();
    if !mutated!(PipelineTakeoverLive) {
        rule.push(Bson::Document(
            doc! { "$not": [ held_exclusive(readings) ] },
        ));
    }
    if !mutated!(PipelineExclusiveIgnoresShared) {
        rule.push(Bson::Document(doc! { "$eq": [ { "$size": LIVE }, 0 ] }));
    }
    rule.push(queue::exclusive_allows());
    let rule = Bson::Document(doc! { "$and": rule });
    let install = doc! {
        EXCLUSIVE: new_lock(&readings.now),
        SHARED: { "$literal": { "count": 0, "locks": [] } },
    };
    grant(Mode::Exclusive, fair, rule, install, readings)
}

/// The shared grant: no held exclusive lock, no held lock of this lock id, and (with a
/// limit, `$$limit`) fewer held shared locks than the limit.
fn slock(limited: bool, fair: bool, readings: &Readings) -> Vec<Document> {
    let live = LIVE;
    let mut conditions = vec![
        Bson::Document(doc! { "$not": [ held_exclusive(readings) ] }),
        Bson::Document(doc! { "$not": [ { "$in": [
            bind::LOCK_ID,
            format!("{live}.{LOCK_ID}"),
        ] } ] }),
    ];
    let limited = limited && !mutated!(PipelineSharedIgnoresLimit);
    if limited {
        conditions.push(Bson::Document(
            doc! { "$lt": [ { "$size": live }, bind::LIMIT ] },
        ));
    }
    conditions.push(queue::shared_allows(limited, live));
    let install = doc! {
        EXCLUSIVE: { "$literal": empty_exclusive() },
        SHARED: {
            "locks": { "$concatArrays": [ live, [ new_lock(&readings.now) ] ] },
            "count": { "$add": [ { "$size": live }, 1 ] },
        },
    };
    grant(
        Mode::Shared,
        fair,
        Bson::Document(doc! { "$and": conditions }),
        install,
        readings,
    )
}

/// Whether the lock entry at `prefix` (`$exclusive` or `$$this`) is held by `id` (a
/// variable); an exclusive slot also has to be `acquired`.
fn held_by(prefix: &str, id: &Bson) -> Bson {
    let own = Bson::Document(doc! { "$eq": [ format!("{prefix}.{LOCK_ID}"), id.clone() ] });
    if prefix == "$exclusive" {
        Bson::Document(doc! { "$and": [ { "$eq": [ "$exclusive.acquired", true ] }, own ] })
    } else {
        own
    }
}

/// Applies `change` to the lock of `id` in the exclusive slot and in the shared list (at
/// most one of them holds it on a valid document), when `decided` holds: an expression
/// over a valid document.
fn one_lock(id: &Bson, decided: Bson, exclusive: Bson, shared: Bson, also: Document) -> Bson {
    let mut fields = doc! {
        EXCLUSIVE: { "$cond": [ held_by("$exclusive", id), exclusive, "$exclusive" ] },
        SHARED: { "$mergeObjects": [ "$shared", shared ] },
    };
    fields.extend(also);
    let changed = doc! { "$mergeObjects": [ "$$ROOT", fields ] };
    Bson::Document(doc! { "$cond": [ decided, changed, "$$ROOT" ] })
}

/// The one stage of a write of one step: `change` on a valid document; any other document
/// is left exactly as it is.
fn on_valid(change: Bson) -> Vec<Document> {
    vec![doc! { "$replaceWith": { "$cond": [ valid(), change, "$$ROOT" ] } }]
}

/// Renews the one lock of `$$lockId` on the document (the filter names the resource): sets
/// its `expiresAt = $$expires` (`now + ttl`) and `renewedAt = now` if `expiresAt + grace >
/// now + margin` (or it never expires), as the engine's `renew_one`; otherwise changes
/// nothing. See [`bind::renew_one`] for its variables.
pub(crate) fn renew_one(readings: &Readings) -> Vec<Document> {
    let fresh = doc! { EXPIRES_AT: bind::EXPIRES, RENEWED_AT: readings.now.clone() };
    renewable_one(fresh)
}

/// Sets the comment of the one lock of `$$lockId` on the document (the filter names the
/// resource) to `$$comment` (none: `null`) if it is held, `expiresAt + grace > now` (or it
/// never expires), as the engine's `set_comment`; otherwise changes nothing. See
/// [`bind::set_comment`] for its variables.
pub(crate) fn set_comment() -> Vec<Document> {
    if mutated!(PipelineProclaimChangesHolder) {
        let held = doc! { "$eq": [ "$exclusive.acquired", true ] };
        let set = doc! { "$mergeObjects": [ "$exclusive", { COMMENT: bind::COMMENT } ] };
        return vec![doc! { "$set": { EXCLUSIVE: { "$cond": [ held, set, "$exclusive" ] } } }];
    }
    renewable_one(doc! { COMMENT: bind::COMMENT })
}

/// The filter of a proclaim (`set_comment`): [`one_lock_filter`].
pub(crate) fn set_comment_filter(resource: &str, lock_id: &LockId) -> Document {
    if mutated!(PipelineProclaimChangesHolder) {
        return doc! { RESOURCE: resource };
    }
    one_lock_filter(resource, lock_id)
}

/// Merges `fields` into the one lock of `$$lockId` on the document if it is renewable with
/// the margin the variables say: `expiresAt + grace > now + margin`, that is `expiresAt >
/// $$deadline` (or it never expires); otherwise changes nothing. The one renewal predicate
/// of the engine (`StoredLock::is_renewable`), for `renew_one` and `set_comment`.
fn renewable_one(fields: Document) -> Vec<Document> {
    let id = var(bind::LOCK_ID);
    let deadline = var(bind::DEADLINE);
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
    let shared = doc! { "locks": { "$map": { "input": shared_locks(), "in": { "$cond": [
        held_by("$$this", &id),
        { "$mergeObjects": [ "$$this", fields.clone() ] },
        "$$this",
    ] } } } };
    on_valid(one_lock(
        &id,
        decided,
        Bson::Document(doc! { "$mergeObjects": [ "$exclusive", fields ] }),
        Bson::Document(shared),
        Document::new(),
    ))
}

/// Removes the one lock of `$$lockId`, live or expired, and the places recording it, from
/// the document (the filter names the resource and the lock id), as the engine's
/// `unlock_one`; a document the rules cannot decide on is left as it is. It hands the lock
/// over (`queue::hand_over`).
pub(crate) fn unlock_one(readings: &Readings) -> Vec<Document> {
    let id = var(bind::LOCK_ID);
    let keep = doc! { "$filter": { "input": shared_locks(), "cond": { "$not": [ held_by("$$this", &id) ] } } };
    let shared = doc! { "locks": keep.clone(), "count": { "$size": keep } };
    let release = one_lock(
        &id,
        Bson::Boolean(true),
        Bson::Document(doc! { "$literal": empty_exclusive() }),
        Bson::Document(shared),
        doc! { QUEUE: queue::without_lock_id(&id) },
    );
    if mutated!(PipelineResignLeavesPlace) {
        return on_valid(release);
    }
    super::validated(release, queue::hand_over_on_valid(readings), readings)
}

/// The filter of a one-lock operation: the resource's document, if it holds a lock of
/// `lock_id`.
pub(crate) fn one_lock_filter(resource: &str, lock_id: &LockId) -> Document {
    let mut filter = in_any_lock(LOCK_ID, lock_id.as_str().into());
    filter.insert(RESOURCE, resource);
    filter
}

/// The projection of a grant: the whole document as the rules read it (its grant id
/// included), and the `now` it ran at.
pub(crate) fn grant_projection(now: &Bson) -> Document {
    let mut projection = with_now(now);
    projection.insert(LAST_GRANT, 1);
    projection
}

/// The projection of a one-lock operation: the whole document (with the `wake` a hand-over
/// wrote), and the `now` it ran at.
pub(crate) fn with_now(now: &Bson) -> Document {
    doc! {
        NOW_FIELD: now.clone(), RESOURCE: 1, EXCLUSIVE: 1, SHARED: 1, LAST_FENCE: 1, QUEUE: 1,
        LAST_LEAVE: 1, WAKE: 1,
    }
}

/// [`with_now`], and the fence floor the command ran at (`$$NOW` and `$$CLUSTER_TIME` keep
/// one value through a command, its projection included): a write replayed on the document
/// as it was before (a release) then takes the very fences the pipeline took.
pub(crate) fn with_now_and_floor(now: &Bson, floor: &Bson) -> Document {
    let mut projection = with_now(now);
    projection.insert(FLOOR_FIELD, floor.clone());
    projection
}
