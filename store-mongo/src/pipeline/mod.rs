//! Every filter and update pipeline the store sends, built as data.
//!
//! Time reaches a pipeline as [`Readings`]: `now` is `"$$NOW"` (the server's wall clock, the
//! default) or a fixed date (the test-time override), and the fence floor is taken from
//! the replica set's cluster time (or, under the override, from the fixed date as the
//! engine takes it). The same builders serve both, so the pipelines under test are the ones
//! that ship. The rules mirror `lockwright-engine` (the conformance and differential tests
//! hold them to it): a lock is abandoned once `expiresAt + grace <= now`; a grant takes over
//! every abandoned lock on its resource; fences are `max(lastFence + 1, floor)`.
//!
//! User strings never reach an expression unquoted: inside pipelines they are wrapped in
//! `$literal`, so a lock id such as `"$foo"` is data, not a field path.

use mongodb::bson::{Bson, DateTime, Document, doc};

use lockwright_engine::Timestamp;
use lockwright_engine::table::{ClusterTime, FENCES_PER_SECOND};

use crate::schema::{CREATED_AT, EXCLUSIVE, EXPIRES_AT, FENCE, LOCK_ID, RENEWED_AT, SHARED};

/// Whether the pipeline mutant `$name` (see [`crate::mutants`]) is switched on: never,
/// outside builds with `--cfg lockwright_mutants`.
macro_rules! mutated {
    ($name:ident) => {{ crate::mutants::active(crate::mutants::Mutant::$name) }};
}

pub(crate) mod bind;
mod filter;
mod grant;
mod group;
mod queue;

pub(crate) use filter::status_prefilter;
pub(crate) use grant::{
    grant_filter, grant_pipeline, grant_projection, one_lock_filter, renew_one, set_comment,
    set_comment_filter, unlock_one, with_now_and_floor,
};
pub(crate) use group::{
    batch_filter, deletable, expired_groups, group_filter, purge_batch, renew, renew_pairs, unlock,
};
pub(crate) use queue::{dead_places_at, drop_dead, leave};

/// The server's clock inside a pipeline.
pub(crate) const SERVER_NOW: &str = "$$NOW";

/// The replica set's cluster time inside a pipeline: a BSON timestamp (seconds, increment)
/// that every member keeps monotonic, across failovers too.
pub(crate) const CLUSTER_TIME: &str = "$$CLUSTER_TIME";

/// The engine's fence floor rule ([`ClusterTime::fence_floor`]) on the cluster time `time`
/// (`"$$CLUSTER_TIME"`, or under a test clock the engine's reading of it as a literal):
/// `seconds * 2^22 + min(increment, 2^22 - 1)`. It never goes back (the cluster time does
/// not), it is above every floor of the earlier `now_ms * 1024` rule at the same instant
/// (`2^22 > 1000 * 1024`), and it stays below `i64::MAX` until the year 2^41 s after 1970,
/// about 69,000 years.
pub(crate) fn cluster_time_floor(time: &Bson) -> Bson {
    let per_second = i64::try_from(FENCES_PER_SECOND).unwrap_or(i64::MAX);
    let per_second = if mutated!(PipelineFenceFloorHalved) {
        per_second / 2
    } else {
        per_second
    };
    Bson::Document(doc! { "$add": [
        { "$multiply": [ { "$toLong": { "$tsSecond": time.clone() } }, per_second ] },
        { "$min": [ { "$toLong": { "$tsIncrement": time.clone() } }, per_second - 1 ] },
    ] })
}

/// The engine's reading of the cluster time at `now`, for a store on a test clock
/// ([`ClusterTime::at`]), as a literal BSON timestamp.
pub(crate) fn cluster_time_at(now: Timestamp) -> Bson {
    let ClusterTime { seconds, increment } = ClusterTime::at(now);
    Bson::Document(
        doc! { "$literal": Bson::Timestamp(mongodb::bson::Timestamp { time: seconds, increment }) },
    )
}

/// The fence of the next grant after a grant counter `counter` (an expression): the
/// engine's `ResourceState::next_fence`, `max(counter + 1, floor)`.
fn fence_after(counter: &Bson, readings: &Readings) -> Bson {
    Bson::Document(doc! { "$max": [
        { "$add": [ counter.clone(), i64::from(!mutated!(PipelineFenceNotIncremented)) ] },
        readings.floor.clone(),
    ] })
}

/// The readings of time a pipeline runs on: the server's own expressions (`$$NOW`, the
/// cluster time's floor), or the literal readings of the store's test [`Clock`] at the
/// instant the pipeline is built, and the takeover grace. Not a clock: what one was read as.
///
/// [`Clock`]: lockwright_engine::Clock
#[derive(Clone, Debug)]
pub(crate) struct Readings {
    /// `now`: `"$$NOW"` or a fixed date.
    pub(crate) now: Bson,
    /// The fence floor: [`cluster_time_floor`] or a fixed number.
    pub(crate) floor: Bson,
    /// The takeover grace in ms.
    pub(crate) grace_ms: i64,
    /// A random string, one per command, that starts the `wake` a hand-over writes (so
    /// the writer can tell its own hand-over from an earlier one).
    pub(crate) nonce: String,
}

impl Readings {
    /// The takeover grace the pipelines apply: none under the mutant that ignores it.
    fn grace_ms(&self) -> i64 {
        if mutated!(PipelineTakeoverIgnoresGrace) {
            0
        } else {
            self.grace_ms
        }
    }
}

/// A duration in ms as BSON's 64-bit integer (saturating).
pub(crate) fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The field an aggregation adds to each document to report the `now` it ran at.
pub(crate) const NOW_FIELD: &str = "__lockwright_now";
/// The field an aggregation adds to each document to report the fence floor it ran at (and
/// a one-lock operation's reply: [`with_now_and_floor`]).
pub(crate) const FLOOR_FIELD: &str = "__lockwright_floor";

pub(crate) fn date(t: Timestamp) -> Bson {
    // Timestamps come from the store's clock or a validated TTL sum: well inside i64 ms.
    Bson::DateTime(DateTime::from_millis(
        i64::try_from(t.as_millis()).unwrap_or(i64::MAX),
    ))
}

fn literal(value: impl Into<Bson>) -> Bson {
    Bson::Document(doc! { "$literal": value.into() })
}

fn shared_locks() -> Bson {
    Bson::Document(doc! { "$ifNull": ["$shared.locks", []] })
}

/// `path` holds a date `e` with `e + grace <= now`: the lock is abandoned (the engine's
/// `StoredLock::is_abandoned`).
fn is_abandoned(path: &str, now: &Bson, grace_ms: i64) -> Bson {
    let at_or_before = if mutated!(PipelineExpiryStrict) {
        "$lt"
    } else {
        "$lte"
    };
    let until = if grace_ms == 0 {
        Bson::String(path.to_owned())
    } else {
        Bson::Document(doc! { "$add": [ path, grace_ms ] })
    };
    Bson::Document(doc! { "$and": [
        { "$eq": [ { "$type": path }, "date" ] },
        { at_or_before: [ until, now.clone() ] },
    ] })
}

/// The lock at `path` is held: not [`is_abandoned`].
fn is_held(path: &str, readings: &Readings) -> Bson {
    Bson::Document(doc! { "$not": [ is_abandoned(path, &readings.now, readings.grace_ms()) ] })
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
        queue::valid_queue(),
    ] })
}

/// The stages of a write of two steps on one document, whose validity ([`valid`]) is
/// tested once: `first` and `second` are expressions over a valid `$$ROOT` (a change, and
/// the hand-over after it, or the other way round). The first stage applies `first` to a
/// valid document and wraps any other in `{_id, lw: <nonce>, d: <the document>}`; the
/// second unwraps a wrapper and applies `second` to anything else. So a document the rules
/// cannot decide on comes out exactly as it went in (no write), and the test the server
/// parses, serializes and frees on every command appears once, not twice. The wrapper names
/// the command's nonce (random per command), which no stored document can hold already; it
/// never outlives the command.
pub(crate) fn validated(first: Bson, second: Bson, readings: &Readings) -> Vec<Document> {
    let nonce = Bson::String(readings.nonce.clone());
    let wrapped = doc! { "_id": "$_id", "lw": nonce.clone(), "d": "$$ROOT" };
    let is_wrapped = doc! { "$eq": [ "$lw", nonce ] };
    vec![
        doc! { "$replaceWith": { "$cond": [ valid(), first, wrapped ] } },
        doc! { "$replaceWith": { "$cond": [ is_wrapped, "$d", second ] } },
    ]
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

/// The documents matching `filter`, each with the fence floor the server read them at.
pub(crate) fn read_with_floor(filter: Document, floor: &Bson) -> Vec<Document> {
    vec![
        doc! { "$match": filter },
        doc! { "$set": { FLOOR_FIELD: floor.clone() } },
    ]
}

/// The documents whose `_id` is one of `ids`: the documents a transaction read and
/// decided on. The transaction makes that decision hold: a concurrent write to one of them
/// is a write conflict, and the transaction is retried.
pub(crate) fn ids_in(ids: &[Bson]) -> Document {
    doc! { "_id": { "$in": ids } }
}
