//! The queue of fair waiters in the pipelines (the engine's `queue` module): its validity
//! test, its part of the grant rule, and its writes (a grant removes the winner's place, a
//! fair refusal takes or refreshes one, `leave_queue` removes one; each drops the places
//! whose lease ran out).
//!
//! The grant pipeline binds `$$places` to the live places of a valid document in order
//! (`expiresAt > now`: the engine's `QueueEntry::is_live`) and `$$ahead` to the fresh places
//! ahead of the request's own live place (all of them when it has none; fresh: its waiter
//! asked to be next within its claim lease, `now < freshUntil`, the engine's
//! `QueueEntry::is_fresh`). `now` is one value
//! for the whole command (`$$NOW` is constant per command), so every test below sees the
//! same instant; dates compare in milliseconds on both sides. Tickets only ever reach an
//! expression wrapped in `$literal`.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{MAX_QUEUE_TTL, Mode};

use super::bind::{self, var};
use super::{Readings, type_in};
use crate::schema::{
    ACQUIRED, COMMENT, CREATED_AT, EXCLUSIVE, EXCLUSIVE_MODE, EXPIRES_AT, FENCE, FRESH_UNTIL, HOST,
    LAST_FENCE, LEASE, LIMIT, LOCK_ID, MODE, OWNER, QUEUE, QUEUED_AT, RENEWED_AT, SHARED,
    SHARED_MODE, TAG, TICKET, WAKE, empty_exclusive,
};

/// The variable bound to the live places of the queue, in order.
pub(super) const PLACES: &str = "$$places";

/// The variable bound to the live places ahead of the request's own.
pub(super) const AHEAD: &str = "$$ahead";

/// The queue, an empty one when missing or null (only on a valid document).
fn stored() -> Bson {
    Bson::Document(doc! { "$ifNull": [ format!("${QUEUE}"), [] ] })
}

/// The mode as a place stores it.
fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => EXCLUSIVE_MODE,
        Mode::Shared => SHARED_MODE,
    }
}

/// The server's copy of the decoder's test of `queue`: missing or null, or an array of
/// places each with a string ticket, a known mode, two dates and an optional third
/// (`freshUntil`), no ticket twice. Every
/// operator that could fail on a wrong type comes after the `$type` test that rules it out.
pub(super) fn valid_queue() -> Document {
    let queue = format!("${QUEUE}");
    let place = |f: &str| format!("$$this.{f}");
    let valid_place = doc! { "$and": [
        type_in("$$this", &["object"]),
        type_in(&place(TICKET), &["string"]),
        type_in(&place(MODE), &["string"]),
        { "$in": [ place(MODE), [ EXCLUSIVE_MODE, SHARED_MODE ] ] },
        type_in(&place(QUEUED_AT), &["date"]),
        type_in(&place(EXPIRES_AT), &["date"]),
        type_in(&place(FRESH_UNTIL), &["missing", "null", "date"]),
        valid_handoff(),
    ] };
    doc! { "$or": [
        type_in(&queue, &["missing", "null"]),
        { "$and": [
            type_in(&queue, &["array"]),
            { "$allElementsTrue": [ { "$map": { "input": queue.as_str(), "in": valid_place } } ] },
            { "$eq": [
                { "$size": { "$setUnion": [ { "$map": { "input": queue.as_str(), "in": place(TICKET) } } ] } },
                { "$size": queue.as_str() },
            ] },
        ] },
    ] }
}

/// The decoder's test of what a place `$$this` records for its handoff: no `lockId`, or a
/// string one with a lease of 1 ms to the longest place lease and a missing, null or
/// positive 32-bit limit.
fn valid_handoff() -> Bson {
    let place = |f: &str| format!("$$this.{f}");
    let max_lease = i64::try_from(MAX_QUEUE_TTL.as_millis()).unwrap_or(i64::MAX);
    let int = |f: &str, lo: i64, hi: i64| {
        Bson::Document(doc! { "$and": [
            type_in(&place(f), &["int", "long"]),
            { "$gte": [ place(f), lo ] },
            { "$lte": [ place(f), hi ] },
        ] })
    };
    Bson::Document(doc! { "$or": [
        type_in(&place(LOCK_ID), &["missing", "null"]),
        { "$and": [
            type_in(&place(LOCK_ID), &["string"]),
            int(LEASE, 1, max_lease),
            { "$or": [
                type_in(&place(LIMIT), &["missing", "null"]),
                int(LIMIT, 1, i64::from(u32::MAX)),
            ] },
        ] },
    ] })
}

/// The live places of a valid document's queue at `now`, in order (every place under the
/// mutant that lets dead places block).
pub(super) fn live_places(readings: &Readings) -> Bson {
    let live = if mutated!(PipelineDeadEntryBlocks) {
        Bson::Boolean(true)
    } else {
        Bson::Document(doc! { "$gt": [ format!("$$this.{EXPIRES_AT}"), readings.now.clone() ] })
    };
    Bson::Document(doc! { "$filter": { "input": stored(), "cond": live } })
}

/// Whether the live place `$$this` is fresh at `now`: it records no `freshUntil` (an
/// earlier writer's), or `now < freshUntil`. Every place under the mutant that lets stale
/// places count.
fn fresh(readings: &Readings) -> Bson {
    // A place that never lapses (the other mutant) counts for ever, as it did when live.
    if mutated!(PipelineStalePlaceCounts) || mutated!(PipelineDeadEntryBlocks) {
        return Bson::Boolean(true);
    }
    let p = |f: &str| format!("$$this.{f}");
    Bson::Document(doc! { "$or": [
        type_in(&p(FRESH_UNTIL), &["missing", "null"]),
        { "$lt": [ readings.now.clone(), p(FRESH_UNTIL) ] },
    ] })
}

/// The fresh places of `places` (an expression over live places), in order.
fn fresh_of(places: Bson, readings: &Readings) -> Bson {
    Bson::Document(doc! { "$filter": { "input": places, "cond": fresh(readings) } })
}

/// The fresh places ahead of the ticket's (`$$ticket`) own live place in `$$places`, or
/// all of them when it has none (or the request is not `fair`).
pub(super) fn ahead(fair: bool, readings: &Readings) -> Bson {
    if !fair {
        return fresh_of(Bson::String(PLACES.to_owned()), readings);
    }
    let own = doc! { "$indexOfArray": [ format!("{PLACES}.{TICKET}"), bind::TICKET ] };
    let before = doc! { "$let": {
        "vars": { "own": own },
        "in": { "$cond": [
            { "$lt": [ "$$own", 1 ] },
            // -1: no place of its own, everybody is ahead; 0: first, nobody is.
            { "$cond": [ { "$eq": [ "$$own", 0 ] }, [], PLACES ] },
            { "$slice": [ PLACES, "$$own" ] },
        ] },
    } };
    fresh_of(Bson::Document(before), readings)
}

/// The queue's part of the exclusive grant rule: no live place ahead.
pub(super) fn exclusive_allows() -> Bson {
    if mutated!(PipelineQueueIgnored) {
        return Bson::Boolean(true);
    }
    Bson::Document(doc! { "$eq": [ { "$size": AHEAD }, 0 ] })
}

/// The queue's part of the shared grant rule: no live exclusive place ahead, and when
/// `limited`, the held shared locks (`live`) plus the live shared places ahead fewer than
/// the limit (`$$limit`).
pub(super) fn shared_allows(limited: bool, live: &str) -> Bson {
    if mutated!(PipelineQueueIgnored) {
        return Bson::Boolean(true);
    }
    let mut all = Vec::new();
    if !mutated!(PipelineSharedOvertakesWriter) {
        all.push(Bson::Document(doc! { "$not": [ { "$in": [
            EXCLUSIVE_MODE,
            format!("{AHEAD}.{MODE}"),
        ] } ] }));
    }
    if limited {
        let shared_ahead = doc! { "$filter": {
            "input": AHEAD,
            "cond": { "$eq": [ format!("$$this.{MODE}"), SHARED_MODE ] },
        } };
        all.push(Bson::Document(doc! { "$lt": [
            { "$add": [ { "$size": live }, { "$size": shared_ahead } ] },
            bind::LIMIT,
        ] }));
    }
    Bson::Document(doc! { "$and": all })
}

/// The queue after a grant: the live places, less the winner's (a `fair` request's,
/// `$$ticket`).
pub(super) fn after_grant(fair: bool) -> Bson {
    if fair && !mutated!(PipelineGrantLeavesEntry) {
        without(PLACES, &var(bind::TICKET))
    } else {
        Bson::String(PLACES.to_owned())
    }
}

/// The places of `places` (an expression) less the place of `ticket` (an expression).
pub(super) fn without(places: &str, ticket: &Bson) -> Bson {
    Bson::Document(doc! { "$filter": {
        "input": places,
        "cond": { "$ne": [ format!("$$this.{TICKET}"), ticket.clone() ] },
    } })
}

/// The queue after a fair request's refusal: the live places, with the ticket's
/// (`$$ticket`) refreshed in place (its `expiresAt` at `$$placeUntil`, `now + ttl`;
/// `freshUntil` at `$$freshUntil`, `now + claim`, or the Unix epoch for a place kept far
/// back; its `mode`; its `tag`: see `hints::place_tag`; and the handoff: the request's lock,
/// with the ticket's claim lease), or a new place at the back (`queuedAt = now`). See
/// [`bind::grant`] for the variables.
pub(super) fn enqueued(mode: Mode, readings: &Readings) -> Bson {
    let id = var(bind::TICKET);
    let mode = mode_name(mode);
    // What a handoff grants the place: the request's lock.
    let handoff = doc! {
        LOCK_ID: bind::LOCK_ID,
        OWNER: bind::OWNER,
        HOST: bind::HOST,
        COMMENT: bind::COMMENT,
        LIMIT: bind::LIMIT,
        LEASE: bind::LEASE,
    };
    let mut fresh = doc! {
        EXPIRES_AT: bind::PLACE_UNTIL, FRESH_UNTIL: bind::FRESH_UNTIL, MODE: mode, TAG: bind::TAG,
    };
    fresh.extend(handoff.clone());
    let refreshed = doc! { "$map": { "input": PLACES, "in": { "$cond": [
        { "$eq": [ format!("$$this.{TICKET}"), id.clone() ] },
        { "$mergeObjects": [ "$$this", fresh ] },
        "$$this",
    ] } } };
    let mut place = doc! {
        TICKET: id.clone(), MODE: mode, QUEUED_AT: readings.now.clone(),
        EXPIRES_AT: bind::PLACE_UNTIL, FRESH_UNTIL: bind::FRESH_UNTIL, TAG: bind::TAG,
    };
    place.extend(handoff);
    let appended = doc! { "$concatArrays": [ PLACES, [ place ] ] };
    Bson::Document(doc! { "$cond": [
        { "$in": [ id, format!("{PLACES}.{TICKET}") ] },
        refreshed,
        appended,
    ] })
}

/// `wake` after a write that handed the lock to `handed` (an expression: the places, in
/// order, each with the fence of its grant as `f`): the command's nonce, then a space, the
/// tag of each handed place (`-` for one without a tag), a `/` and its fence. The nonce
/// tells the writer, which reads the document back, that its own write set the field; the
/// fence, which lock of the document the place was handed (see the `wakes` module).
fn wake(handed: Bson, readings: &Readings) -> Bson {
    Bson::Document(doc! { "$concat": [ readings.nonce.as_str(), { "$reduce": {
        "input": handed,
        "initialValue": "",
        "in": { "$concat": [ "$$value", " ", { "$cond": [
            { "$eq": [ { "$type": format!("$$this.{TAG}") }, "string" ] },
            format!("$$this.{TAG}"),
            "-",
        ] }, "/", { "$toString": "$$this.f" } ] },
    } } ] })
}

/// The queue less the places that record the lock id `lock_id` (an expression) for a
/// handoff (a release of a lock id gives up its waiting on the resource: the engine's
/// `ResourceState::drop_places_of`), on a document of any shape: a `queue` that is not an
/// array is left as it is.
pub(crate) fn without_lock_id(lock_id: &Bson) -> Bson {
    let queue = format!("${QUEUE}");
    Bson::Document(doc! { "$cond": [
        { "$isArray": queue.as_str() },
        { "$filter": {
            "input": queue.as_str(),
            "cond": { "$ne": [ format!("$$this.{LOCK_ID}"), lock_id.clone() ] },
        } },
        queue.as_str(),
    ] })
}

/// `queue: value` for a `$mergeObjects` over the document, or nothing when the document has
/// no `queue` field and `value` would be empty: a grant on a document without a queue (the
/// Go library's) does not add one.
pub(super) fn set_queue(value: Bson) -> Bson {
    Bson::Document(doc! { "$cond": [
        { "$and": [
            { "$eq": [ { "$type": format!("${QUEUE}") }, "missing" ] },
            { "$eq": [ { "$size": value.clone() }, 0 ] },
        ] },
        "$$REMOVE",
        value,
    ] })
}

/// `leave_queue`'s update of the document of a resource: on a valid document, the live
/// places less the ticket's (`$$ticket`), `lastLeave = $$leaveId` when the ticket had a
/// place (live or not), and the lock handed over to the new head if it is free for it; any
/// other document is left exactly as it is. See [`bind::leave`] for its variables.
pub(crate) fn leave(readings: &Readings) -> Vec<Document> {
    let id = var(bind::TICKET);
    let had = doc! { "$in": [ id.clone(), { "$map": { "input": stored(), "in": format!("$$this.{TICKET}") } } ] };
    let changed = doc! { "$let": {
        "vars": { "places": live_places(readings) },
        "in": { "$mergeObjects": [ "$$ROOT", {
            QUEUE: set_queue(without(PLACES, &id)),
            crate::schema::LAST_LEAVE: { "$cond": [ had, bind::LEAVE_ID, "$$REMOVE" ] },
        } ] },
    } };
    super::validated(
        Bson::Document(changed),
        hand_over_on_valid(readings),
        readings,
    )
}

/// Purge's update of the documents holding a dead place: their live places alone, on a
/// valid document, and the lock handed over to the new head if it is free for it; any
/// other document as it is.
pub(crate) fn drop_dead(readings: &Readings) -> Vec<Document> {
    let changed = doc! { "$mergeObjects": [ "$$ROOT", { QUEUE: live_places(readings) } ] };
    super::validated(
        Bson::Document(changed),
        hand_over_on_valid(readings),
        readings,
    )
}

/// The documents with a live place at `now` (an expression): purge never deletes them.
pub(crate) fn has_live_place(now: &Bson) -> Bson {
    Bson::Document(doc! { "$anyElementTrue": [ { "$map": {
        "input": stored(),
        "in": { "$gt": [ format!("$$this.{EXPIRES_AT}"), now.clone() ] },
    } } ] })
}

/// The documents holding a place whose lease ran out by `t` (or a `queue` of places that
/// are not documents: the update leaves those as they are).
pub(crate) fn dead_places_at(t: lockwright_engine::Timestamp) -> Document {
    doc! { format!("{QUEUE}.{EXPIRES_AT}"): { "$lte": super::date(t) } }
}

/// The hand-over stage, run after every write that may free a resource (a release, a
/// waiter leaving, purge) and before a grant decides: the engine's
/// `ResourceState::hand_over`. On a valid document, the live places are taken in order
/// while each is one the rules would grant (an exclusive place: no held lock and none
/// handed before it; a shared place: no held exclusive lock, no held lock of its lock id,
/// and fewer held shared locks, those handed before it included, than its limit), and
/// each such place is granted the lock it records (its `lockId` and details, the next
/// fence, `expiresAt` its lease after `now`), and leaves the queue. The first place that
/// cannot be handed the lock (or records no handoff) stops it. When any place was handed
/// the lock, the abandoned locks are taken over, the dead places dropped, and `wake` names
/// the handed places (see [`wake`]); otherwise the document is left exactly as it is (no
/// write).
pub(crate) fn hand_over(readings: &Readings) -> Document {
    let (has_places, handed) = hand_over_parts(readings);
    doc! { "$replaceWith": { "$cond": [
        { "$and": [ has_places, super::valid() ] },
        handed,
        "$$ROOT",
    ] } }
}

/// [`hand_over`] as an expression over a valid document (see [`super::validated`]).
pub(crate) fn hand_over_on_valid(readings: &Readings) -> Bson {
    let (has_places, handed) = hand_over_parts(readings);
    Bson::Document(doc! { "$cond": [ has_places, handed, "$$ROOT" ] })
}

/// The hand-over's test that the document has places (most have none, and are left at
/// this first, cheap test), and the hand-over of a valid document that has some.
fn hand_over_parts(readings: &Readings) -> (Document, Document) {
    let now = readings.now.clone();
    let p = |f: &str| format!("$$this.{f}");
    let v = |f: &str| format!("$$value.{f}");
    // The places that may be handed the lock: the fresh ones (every place, dead or not,
    // under the mutant).
    let (places, candidates) = if mutated!(PipelineHandoffToDeadPlace) {
        (stored(), Bson::String("$$places".to_owned()))
    } else {
        let live = Bson::String("$$places".to_owned());
        (live_places(readings), fresh_of(live, readings))
    };
    let start = if mutated!(PipelineClaimLeaseFromQueuedAt) {
        Bson::String(p(QUEUED_AT))
    } else {
        now.clone()
    };
    let lock = doc! {
        LOCK_ID: p(LOCK_ID),
        OWNER: { "$ifNull": [ p(OWNER), Bson::Null ] },
        HOST: { "$ifNull": [ p(HOST), Bson::Null ] },
        COMMENT: { "$ifNull": [ p(COMMENT), Bson::Null ] },
        CREATED_AT: now.clone(),
        RENEWED_AT: Bson::Null,
        EXPIRES_AT: { "$add": [ start, p(LEASE) ] },
        ACQUIRED: true,
        FENCE: "$$f",
    };
    let mut free = vec![
        Bson::Document(doc! { "$eq": [ { "$type": p(LOCK_ID) }, "string" ] }),
        Bson::Document(doc! { "$not": [ v("x") ] }),
    ];
    if !mutated!(PipelineHandoffPastConflict) {
        free.push(Bson::Document(doc! { "$not": [ v("stop") ] }));
    }
    // The rule for the place's mode, over what is held and handed before it.
    free.push(Bson::Document(doc! { "$cond": [
        { "$eq": [ p(MODE), EXCLUSIVE_MODE ] },
        { "$eq": [ { "$size": v(SHARED) }, 0 ] },
        { "$and": [
            { "$eq": [ p(MODE), SHARED_MODE ] },
            { "$not": [ { "$in": [ p(LOCK_ID), format!("$$value.{SHARED}.{LOCK_ID}") ] } ] },
            { "$or": [
                { "$eq": [ { "$ifNull": [ p(LIMIT), Bson::Null ] }, Bson::Null ] },
                { "$lt": [ { "$size": v(SHARED) }, p(LIMIT) ] },
            ] },
        ] },
    ] }));
    // The fence and the lock are computed once, for whichever mode the place asks.
    let handed = doc! { "$let": {
        "vars": { "f": super::fence_after(&Bson::String(v("fence")), readings) },
        "in": { "$let": {
            "vars": { "l": lock, "ex": { "$eq": [ p(MODE), EXCLUSIVE_MODE ] } },
            "in": {
                "x": "$$ex",
                "lock": { "$cond": [ "$$ex", "$$l", v("lock") ] },
                SHARED: { "$cond": [ "$$ex", v(SHARED), { "$concatArrays": [ v(SHARED), [ "$$l" ] ] } ] },
                "fence": "$$f",
                "stop": v("stop"),
                "handed": { "$concatArrays": [
                    v("handed"), [ { "$mergeObjects": [ "$$this", { "f": "$$f" } ] } ],
                ] },
            },
        } },
    } };
    let step = doc! { "$cond": [
        { "$and": free },
        handed,
        { "$mergeObjects": [ "$$value", { "stop": true } ] },
    ] };
    let held_exclusive = doc! { "$and": [
        { "$eq": [ "$exclusive.acquired", true ] },
        super::is_held("$exclusive.expiresAt", readings),
    ] };
    let held_shared = doc! { "$filter": {
        "input": super::shared_locks(),
        "cond": super::is_held("$$this.expiresAt", readings),
    } };
    // Each step copies only what is handed (a short run), never the places left behind:
    // those are the places less the handed ones, taken once at the end.
    let run = doc! { "$reduce": {
        "input": candidates,
        "initialValue": {
            "x": held_exclusive, "lock": Bson::Null, SHARED: held_shared,
            "fence": { "$ifNull": [ format!("${LAST_FENCE}"), 0_i64 ] },
            "stop": false, "handed": [],
        },
        "in": step,
    } };
    let r = |f: &str| format!("$$run.{f}");
    let rest = doc! { "$let": {
        "vars": { "handed": format!("$$run.handed.{TICKET}") },
        "in": { "$filter": {
            "input": "$$places",
            "cond": { "$not": [ { "$in": [ format!("$$this.{TICKET}"), "$$handed" ] } ] },
        } },
    } };
    let changed = doc! { "$mergeObjects": [ "$$ROOT", {
        EXCLUSIVE: { "$ifNull": [ r("lock"), { "$literal": empty_exclusive() } ] },
        SHARED: { "count": { "$size": r(SHARED) }, "locks": r(SHARED) },
        LAST_FENCE: r("fence"),
        QUEUE: set_queue(Bson::Document(rest)),
        WAKE: wake(Bson::String(r("handed")), readings),
    } ] };
    let has_places = doc! { "$gt": [
        { "$size": { "$cond": [ { "$isArray": format!("${QUEUE}") }, format!("${QUEUE}"), [] ] } },
        0,
    ] };
    let handed = doc! { "$let": {
        "vars": { "places": places },
        "in": { "$let": {
            "vars": { "run": run },
            "in": { "$cond": [
                { "$gt": [ { "$size": r("handed") }, 0 ] },
                changed,
                "$$ROOT",
            ] },
        } },
    } };
    (has_places, handed)
}
