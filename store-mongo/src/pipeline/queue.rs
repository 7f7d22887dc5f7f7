//! The queue of fair waiters in the pipelines (the engine's `queue` module): its validity
//! test, its part of the grant rule, and its writes (a grant removes the winner's place, a
//! fair refusal takes or refreshes one, `leave_queue` removes one; each drops the places
//! whose lease ran out).
//!
//! The grant pipeline binds `$$places` to the live places of a valid document in order
//! (`expiresAt > now`: the engine's `QueueEntry::is_live`) and `$$ahead` to the live places
//! ahead of the request's own live place (all of them when it has none). `now` is one value
//! for the whole command (`$$NOW` is constant per command), so every test below sees the
//! same instant; dates compare in milliseconds on both sides. Tickets only ever reach an
//! expression wrapped in `$literal`.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{LockId, Mode, SharedLimit};

use super::{Readings, literal, type_in};
use crate::schema::{
    EXCLUSIVE_MODE, EXPIRES_AT, MODE, QUEUE, QUEUED_AT, SHARED_MODE, TAG, TICKET, WAKE,
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
/// places each with a string ticket, a known mode and two dates, no ticket twice. Every
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

/// The live places ahead of `ticket`'s own live place in `$$places`, or all of them when it
/// has none (or the request has no ticket).
pub(super) fn ahead(ticket: Option<&LockId>) -> Bson {
    let Some(ticket) = ticket else {
        return Bson::String(PLACES.to_owned());
    };
    let own = doc! { "$indexOfArray": [ format!("{PLACES}.{TICKET}"), literal(ticket.as_str()) ] };
    Bson::Document(doc! { "$let": {
        "vars": { "own": own },
        "in": { "$cond": [
            { "$lt": [ "$$own", 1 ] },
            // -1: no place of its own, everybody is ahead; 0: first, nobody is.
            { "$cond": [ { "$eq": [ "$$own", 0 ] }, [], PLACES ] },
            { "$slice": [ PLACES, "$$own" ] },
        ] },
    } })
}

/// The queue's part of the exclusive grant rule: no live place ahead.
pub(super) fn exclusive_allows() -> Bson {
    if mutated!(PipelineQueueIgnored) {
        return Bson::Boolean(true);
    }
    Bson::Document(doc! { "$eq": [ { "$size": AHEAD }, 0 ] })
}

/// The queue's part of the shared grant rule: no live exclusive place ahead, and with a
/// limit `m`, the held shared locks (`live`) plus the live shared places ahead fewer than
/// `m`.
pub(super) fn shared_allows(limit: Option<SharedLimit>, live: &str) -> Bson {
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
    if let Some(m) = limit {
        let shared_ahead = doc! { "$filter": {
            "input": AHEAD,
            "cond": { "$eq": [ format!("$$this.{MODE}"), SHARED_MODE ] },
        } };
        all.push(Bson::Document(doc! { "$lt": [
            { "$add": [ { "$size": live }, { "$size": shared_ahead } ] },
            i64::from(m.get()),
        ] }));
    }
    Bson::Document(doc! { "$and": all })
}

/// The queue after a grant: the live places, less the winner's.
pub(super) fn after_grant(ticket: Option<&LockId>) -> Bson {
    match ticket.filter(|_| !mutated!(PipelineGrantLeavesEntry)) {
        None => Bson::String(PLACES.to_owned()),
        Some(t) => without(PLACES, t),
    }
}

/// The places of `places` (an expression) less `ticket`'s.
fn without(places: &str, ticket: &LockId) -> Bson {
    Bson::Document(doc! { "$filter": {
        "input": places,
        "cond": { "$ne": [ format!("$$this.{TICKET}"), literal(ticket.as_str()) ] },
    } })
}

/// The queue after a fair request's refusal: the live places, with `ticket`'s refreshed in
/// place (its `expiresAt` at `now + ttl`, its `mode`, its `tag`: see `hints::place_tag`),
/// or a new place at the back (`queuedAt = now`).
pub(super) fn enqueued(
    ticket: &LockId,
    ttl_ms: i64,
    mode: Mode,
    tag: &str,
    readings: &Readings,
) -> Bson {
    let id = literal(ticket.as_str());
    let mode = mode_name(mode);
    let tag = literal(tag);
    let refreshed = doc! { "$map": { "input": PLACES, "in": { "$cond": [
        { "$eq": [ format!("$$this.{TICKET}"), id.clone() ] },
        { "$mergeObjects": [ "$$this", { EXPIRES_AT: "$$fresh", MODE: mode, TAG: tag.clone() } ] },
        "$$this",
    ] } } };
    let appended = doc! { "$concatArrays": [ PLACES, [ {
        TICKET: id.clone(), MODE: mode, QUEUED_AT: readings.now.clone(), EXPIRES_AT: "$$fresh",
        TAG: tag,
    } ] ] };
    Bson::Document(doc! { "$let": {
        "vars": { "fresh": { "$add": [ readings.now.clone(), ttl_ms ] } },
        "in": { "$cond": [
            { "$in": [ id, format!("{PLACES}.{TICKET}") ] },
            refreshed,
            appended,
        ] },
    } })
}

/// `wake` after a write that leaves `places` (an expression: the live places, in order)
/// in the queue: the first place's tag and a fresh random number (so that the field changes
/// at each such write, and the change stream reports it), or `$$REMOVE` (the field is left
/// as it was) when the first place has no tag or there is none. Safe on any value: a
/// first element that is not a document has no tag.
pub(super) fn wake(places: Bson) -> Bson {
    let tag = format!("$$first.{TAG}");
    Bson::Document(doc! { "$let": {
        "vars": { "first": { "$arrayElemAt": [ places, 0 ] } },
        "in": { "$cond": [
            { "$eq": [ { "$type": tag.as_str() }, "string" ] },
            { "$concat": [ tag.as_str(), ":", { "$toString": { "$rand": {} } } ] },
            "$$REMOVE",
        ] },
    } })
}

/// `wake` after a release on a document of any shape, at `now`: as [`wake`] over the
/// places whose `expiresAt` is after `now` (nothing fails on a `queue` that is not an
/// array, or on places that are not documents).
pub(super) fn wake_after_release(now: &Bson) -> Bson {
    let queue = format!("${QUEUE}");
    wake(Bson::Document(doc! { "$filter": {
        "input": { "$cond": [ { "$isArray": queue.as_str() }, queue.as_str(), [] ] },
        "cond": { "$gt": [ format!("$$this.{EXPIRES_AT}"), now.clone() ] },
    } }))
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
/// places less `ticket`'s, `lastLeave = leave_id` when `ticket` had a place (live or
/// not), and `wake` for the next place when `ticket`'s was the first live one; any other
/// document is left exactly as it is.
pub(crate) fn leave(ticket: &LockId, leave_id: &Bson, readings: &Readings) -> Vec<Document> {
    let id = literal(ticket.as_str());
    let had = doc! { "$in": [ id.clone(), { "$map": { "input": stored(), "in": format!("$$this.{TICKET}") } } ] };
    let was_first =
        doc! { "$eq": [ { "$indexOfArray": [ format!("{PLACES}.{TICKET}"), id ] }, 0 ] };
    let changed = doc! { "$let": {
        "vars": { "places": live_places(readings) },
        "in": { "$mergeObjects": [ "$$ROOT", {
            QUEUE: set_queue(without(PLACES, ticket)),
            crate::schema::LAST_LEAVE: { "$cond": [ had, leave_id.clone(), "$$REMOVE" ] },
            WAKE: { "$cond": [ was_first, wake(without(PLACES, ticket)), "$$REMOVE" ] },
        } ] },
    } };
    vec![doc! { "$replaceWith": { "$cond": [ super::valid(), changed, "$$ROOT" ] } }]
}

/// Purge's update of the documents holding a dead place: their live places alone, on a
/// valid document; any other document as it is.
pub(crate) fn drop_dead(readings: &Readings) -> Vec<Document> {
    let changed = doc! { "$mergeObjects": [ "$$ROOT", { QUEUE: live_places(readings) } ] };
    vec![doc! { "$replaceWith": { "$cond": [ super::valid(), changed, "$$ROOT" ] } }]
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
