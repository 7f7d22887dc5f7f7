//! The document schema, shared with square/mongo-lock, and its strict decoder.
//!
//! One document per resource:
//!
//! ```text
//! { resource: "r",
//!   exclusive: { lockId, owner, host, comment, createdAt, renewedAt, expiresAt, acquired, fence },
//!   shared:    { count, locks: [ { lockId, owner, host, comment, createdAt, renewedAt,
//!                                  expiresAt, acquired: true, fence } ] },
//!   lastFence: <int64>,     // the resource's fence counter
//!   lastGrant: <ObjectId>,  // the id of the request that made the last grant
//!   queue: [ { ticket: <string>, mode: "exclusive" | "shared",
//!              queuedAt: <date>, expiresAt: <date>,
//!              lockId, owner, host, comment,   // what a handoff grants the place
//!              limit: <int>, lease: <int ms>,  // a shared request's limit; the claim lease
//!              tag: <string> } ],  // fair waiters, first come first
//!   lastLeave: <ObjectId>,  // the id of the last `leave_queue` that removed a place
//!   wake: <string> }        // "<nonce> <tag> ...": the places the last hand-over woke
//! ```
//!
//! The Go library's fields keep their names and BSON types (dates are BSON dates, absent
//! values are null, `shared.count` equals the length of `shared.locks`, `exclusive.acquired`
//! tells whether the exclusive slot is held). Lockwright adds `comment`, a `fence` per lock
//! and the resource's fence counter `lastFence`; documents written by the Go library lack
//! them and read as fence 0. `lastGrant` lets a grant, which is one `findAndModify`, tell
//! from the document it gets back whether it was the one granted.
//!
//! `queue` holds the places of fair waiters (the engine's `queue` module): a missing or null
//! `queue` is an empty one; each place's ticket is a secret like a lock id (never shown in
//! an error: a malformed place is named by its index), and one ticket holds at most one
//! place. The Go library neither reads nor writes `queue` and `lastLeave` (its writes are
//! `$set`, `$inc`, `$push` and `$pull` of its own fields), so they survive its grants and
//! releases; its clients do not wait their turn in the queue, though. `lastLeave` is
//! written only by `leave_queue`, so that the document it returns tells whether it removed
//! the place (a retry of an applied attempt too).
//!
//! A place with a `lockId` records what the store grants it when it hands it the lock (the
//! engine's `Handoff`): the lock is written under that lock id with the place's details,
//! and expires `lease` ms after the handoff unless claimed. `lease` is then required (an
//! integer of 1 ms to the longest place lease) and `limit` is missing, null or an integer
//! of at least 1. A place without a `lockId` (an earlier version's) is never handed the
//! lock: its waiter's own request is granted, as before.
//!
//! `tag` and `wake` serve hints alone, and no rule reads them (the decoder ignores both):
//! a place carries the tag of the store that took it (random, one per store, not a
//! secret) and, after a dot, 64 bits of a hash of its ticket (`LockId::place_tag`), and each
//! write that hands the lock over sets `wake` to its command's nonce and the tags of the
//! places it handed the lock to, so that the writer, reading the document back, knows
//! whom to wake (see the `wakes` module). A place without a tag (an older version's) is
//! handed the lock all the same, and learns of it from its next request.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{
    Handoff, Holder, LockId, MAX_QUEUE_TTL, MalformedDocument, Mode, QueueEntry, Resource,
    ResourceState, SharedLimit, StoredLock, Timestamp, Ttl,
};

pub(crate) const RESOURCE: &str = "resource";
pub(crate) const EXCLUSIVE: &str = "exclusive";
pub(crate) const SHARED: &str = "shared";
pub(crate) const LOCKS: &str = "locks";
pub(crate) const COUNT: &str = "count";
pub(crate) const LOCK_ID: &str = "lockId";
pub(crate) const OWNER: &str = "owner";
pub(crate) const HOST: &str = "host";
pub(crate) const COMMENT: &str = "comment";
pub(crate) const CREATED_AT: &str = "createdAt";
pub(crate) const RENEWED_AT: &str = "renewedAt";
pub(crate) const EXPIRES_AT: &str = "expiresAt";
pub(crate) const ACQUIRED: &str = "acquired";
pub(crate) const FENCE: &str = "fence";
pub(crate) const LAST_FENCE: &str = "lastFence";
pub(crate) const LAST_GRANT: &str = "lastGrant";
pub(crate) const QUEUE: &str = "queue";
pub(crate) const TICKET: &str = "ticket";
pub(crate) const MODE: &str = "mode";
pub(crate) const QUEUED_AT: &str = "queuedAt";
pub(crate) const FRESH_UNTIL: &str = "freshUntil";
pub(crate) const LAST_LEAVE: &str = "lastLeave";
pub(crate) const TAG: &str = "tag";
pub(crate) const LIMIT: &str = "limit";
pub(crate) const LEASE: &str = "lease";
pub(crate) const WAKE: &str = "wake";
/// The stored names of the two modes, in a queue's places.
pub(crate) const EXCLUSIVE_MODE: &str = "exclusive";
pub(crate) const SHARED_MODE: &str = "shared";

/// The exclusive slot when nobody holds it, as the Go library writes it.
pub(crate) fn empty_exclusive() -> Document {
    doc! {
        LOCK_ID: Bson::Null, OWNER: Bson::Null, HOST: Bson::Null, COMMENT: Bson::Null,
        CREATED_AT: Bson::Null, RENEWED_AT: Bson::Null, EXPIRES_AT: Bson::Null,
        ACQUIRED: false, FENCE: Bson::Null,
    }
}

/// Reads one resource document.
///
/// Strict about every field a rule decides on (containers, `acquired`, lock ids being
/// strings, dates, fences, counts, one lock per lock id, the queue's places: a ticket
/// string, a mode, two dates, one place per ticket); lenient about what the rules only
/// report: another client's lock ids and resource names of any length (the Go library
/// accepts empty and over-long ones), and details (`owner`, `host`, `comment`) of any type,
/// shown as their text. `pipeline::valid` is the same test on the server; the two are held
/// together by the hostile-document tests.
///
/// # Errors
/// The first field found off-schema, naming the resource (or the document's `_id` when the
/// resource itself is unreadable).
pub(crate) fn decode(doc: &Document) -> Result<(Resource, ResourceState), MalformedDocument> {
    let name = match doc.get(RESOURCE) {
        Some(Bson::String(s)) => s.clone(),
        other => {
            let got = other.map_or("missing".to_string(), |b| {
                format!("expected a string, got {}", kind(b))
            });
            return Err(malformed(&label(doc), RESOURCE, got));
        }
    };
    let resource = Resource::stored(&name);
    let d = Decoder {
        resource: name.as_str(),
    };

    let exclusive = match doc.get(EXCLUSIVE) {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(x)) => {
            let acquired = match x.get(ACQUIRED) {
                None | Some(Bson::Null) => false,
                Some(Bson::Boolean(b)) => *b,
                Some(other) => return Err(d.wrong("exclusive.acquired", "a boolean", other)),
            };
            if acquired {
                Some(d.lock(x, "exclusive")?)
            } else {
                None
            }
        }
        Some(other) => return Err(d.wrong(EXCLUSIVE, "a document", other)),
    };

    let shared = match doc.get(SHARED) {
        None | Some(Bson::Null) => Vec::new(),
        Some(Bson::Document(s)) => {
            let locks = match s.get(LOCKS) {
                None | Some(Bson::Null) => Vec::new(),
                Some(Bson::Array(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        Bson::Document(l) => d.lock(l, &format!("shared.locks.{i}")),
                        other => Err(d.wrong(&format!("shared.locks.{i}"), "a document", other)),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Some(other) => return Err(d.wrong("shared.locks", "an array", other)),
            };
            let count = match s.get(COUNT) {
                None | Some(Bson::Null) if locks.is_empty() => 0,
                None | Some(Bson::Null) => {
                    return Err(malformed(
                        &name,
                        "shared.count",
                        "missing while shared.locks is not empty",
                    ));
                }
                Some(b) => d.int("shared.count", b)?,
            };
            if usize::try_from(count).ok() != Some(locks.len()) {
                return Err(malformed(
                    &name,
                    "shared.count",
                    format!("is {count} but shared.locks holds {} lock(s)", locks.len()),
                ));
            }
            let mut seen = std::collections::HashSet::new();
            if let Some(i) = locks.iter().position(|l| !seen.insert(l.lock_id.as_str())) {
                return Err(malformed(
                    &name,
                    &format!("shared.locks.{i}.{LOCK_ID}"),
                    "the same lock id holds an earlier shared lock here",
                ));
            }
            locks
        }
        Some(other) => return Err(d.wrong(SHARED, "a document", other)),
    };

    if exclusive.is_some() && !shared.is_empty() {
        return Err(malformed(&name, EXCLUSIVE, "held while shared locks exist"));
    }
    let fence = match doc.get(LAST_FENCE) {
        None | Some(Bson::Null) => 0,
        Some(b) => d.int(LAST_FENCE, b)?,
    };
    let queue = d.queue(doc)?;
    Ok((
        resource,
        ResourceState::from_parts(fence, exclusive, shared).with_queue(queue),
    ))
}

/// The lock `lock_id` holds in `mode` in the document, decoded from its own entry alone
/// (whatever the rest of the document holds); `None` when it holds none there.
pub(crate) fn decode_own(
    doc: &Document,
    mode: Mode,
    lock_id: &LockId,
) -> Option<Result<StoredLock, MalformedDocument>> {
    let d = Decoder {
        resource: &label(doc),
    };
    let mine = |l: &Document| l.get_str(LOCK_ID).is_ok_and(|id| id == lock_id.as_str());
    match mode {
        Mode::Exclusive => {
            let x = doc.get_document(EXCLUSIVE).ok().filter(|x| mine(x))?;
            Some(d.lock(x, EXCLUSIVE))
        }
        Mode::Shared => {
            let locks = doc.get_document(SHARED).ok()?.get_array(LOCKS).ok()?;
            locks.iter().enumerate().find_map(|(i, l)| {
                let l = l.as_document().filter(|l| mine(l))?;
                Some(d.lock(l, &format!("shared.locks.{i}")))
            })
        }
    }
}

/// The fence counter at which a resource has used every fence: no grant is possible there.
pub(crate) const FENCES_EXHAUSTED: u64 = i64::MAX as u64;

/// How to name a document whose resource cannot be read: by its `_id`.
pub(crate) fn label(doc: &Document) -> String {
    match doc.get(RESOURCE) {
        Some(Bson::String(s)) => s.clone(),
        _ => match doc.get("_id") {
            Some(id) => format!("(unreadable resource; _id {id})"),
            None => "(unreadable resource; no _id)".to_string(),
        },
    }
}

/// The lock ids (strings only) a document names in its exclusive slot or its shared locks,
/// read without trusting anything else about it: the groups a malformed document touches.
pub(crate) fn raw_lock_ids(doc: &Document) -> Vec<String> {
    let mut ids = Vec::new();
    if let Ok(x) = doc.get_document(EXCLUSIVE)
        && let Ok(id) = x.get_str(LOCK_ID)
    {
        ids.push(id.to_string());
    }
    if let Ok(locks) = doc.get_document(SHARED).and_then(|s| s.get_array(LOCKS)) {
        ids.extend(
            locks
                .iter()
                .filter_map(|l| l.as_document()?.get_str(LOCK_ID).ok())
                .map(str::to_string),
        );
    }
    ids
}

struct Decoder<'a> {
    resource: &'a str,
}

impl Decoder<'_> {
    fn wrong(&self, field: &str, expected: &str, got: &Bson) -> MalformedDocument {
        malformed(
            self.resource,
            field,
            format!("expected {expected}, got {}", kind(got)),
        )
    }

    fn int(&self, field: &str, b: &Bson) -> Result<u64, MalformedDocument> {
        let v = match b {
            Bson::Int32(v) => i64::from(*v),
            Bson::Int64(v) => *v,
            other => return Err(self.wrong(field, "an integer", other)),
        };
        u64::try_from(v).map_err(|_| malformed(self.resource, field, format!("is negative ({v})")))
    }

    /// A date; one before the Unix epoch reads as the epoch (every rule decides the same:
    /// both are before any `now` a store reports).
    fn date(&self, field: &str, b: &Bson) -> Result<Timestamp, MalformedDocument> {
        match b {
            Bson::DateTime(dt) => Ok(Timestamp::from_millis(
                u64::try_from(dt.timestamp_millis()).unwrap_or(0),
            )),
            other => Err(self.wrong(field, "a date", other)),
        }
    }

    fn opt_date(
        &self,
        l: &Document,
        at: &str,
        key: &str,
    ) -> Result<Option<Timestamp>, MalformedDocument> {
        match l.get(key) {
            None | Some(Bson::Null) => Ok(None),
            Some(b) => self.date(&format!("{at}.{key}"), b).map(Some),
        }
    }

    /// The queue of fair waiters: missing or null is empty; every place a document with a
    /// ticket string, a known mode, two dates and an optional third (`freshUntil`); no ticket
    /// twice. Errors name the place
    /// by its index, never by its ticket (a secret).
    fn queue(&self, doc: &Document) -> Result<Vec<QueueEntry>, MalformedDocument> {
        let items = match doc.get(QUEUE) {
            None | Some(Bson::Null) => return Ok(Vec::new()),
            Some(Bson::Array(items)) => items,
            Some(other) => return Err(self.wrong(QUEUE, "an array", other)),
        };
        let mut seen = std::collections::HashSet::new();
        let mut queue = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let at = format!("{QUEUE}.{i}");
            let Bson::Document(e) = item else {
                return Err(self.wrong(&at, "a document", item));
            };
            let required = |key: &str| {
                e.get(key)
                    .ok_or_else(|| malformed(self.resource, &format!("{at}.{key}"), "missing"))
            };
            let ticket = match required(TICKET)? {
                Bson::String(s) => s,
                other => return Err(self.wrong(&format!("{at}.{TICKET}"), "a string", other)),
            };
            let mode = match required(MODE)? {
                Bson::String(m) if m == EXCLUSIVE_MODE => Mode::Exclusive,
                Bson::String(m) if m == SHARED_MODE => Mode::Shared,
                Bson::String(_) => {
                    return Err(malformed(
                        self.resource,
                        &format!("{at}.{MODE}"),
                        "expected \"exclusive\" or \"shared\", got another string",
                    ));
                }
                other => return Err(self.wrong(&format!("{at}.{MODE}"), "a string", other)),
            };
            let queued_at = self.date(&format!("{at}.{QUEUED_AT}"), required(QUEUED_AT)?)?;
            let expires_at = self.date(&format!("{at}.{EXPIRES_AT}"), required(EXPIRES_AT)?)?;
            if !seen.insert(ticket.as_str()) {
                return Err(malformed(
                    self.resource,
                    &format!("{at}.{TICKET}"),
                    "the same ticket holds an earlier place in the queue",
                ));
            }
            let fresh_until = self.opt_date(e, &at, FRESH_UNTIL)?;
            let handoff = self.handoff(e, &at)?;
            queue.push(
                QueueEntry::new(LockId::stored(ticket), mode, queued_at, expires_at)
                    .with_fresh_until(fresh_until)
                    .with_handoff(handoff),
            );
        }
        Ok(queue)
    }

    /// What a place records for its handoff: nothing without a `lockId`; with one, a lease
    /// and an optional limit, both strict (the server computes with them), and the details
    /// as text.
    fn handoff(&self, e: &Document, at: &str) -> Result<Option<Handoff>, MalformedDocument> {
        let lock_id = match e.get(LOCK_ID) {
            None | Some(Bson::Null) => return Ok(None),
            Some(Bson::String(s)) => LockId::stored(s),
            Some(other) => return Err(self.wrong(&format!("{at}.{LOCK_ID}"), "a string", other)),
        };
        let field = format!("{at}.{LEASE}");
        let lease = match e.get(LEASE) {
            Some(b) => self.int(&field, b)?,
            None => return Err(malformed(self.resource, &field, "missing")),
        };
        let max = u64::try_from(MAX_QUEUE_TTL.as_millis()).unwrap_or(u64::MAX);
        if !(1..=max).contains(&lease) {
            return Err(malformed(
                self.resource,
                &field,
                format!("expected 1 to {max} ms, got {lease}"),
            ));
        }
        let lease = Ttl::new(std::time::Duration::from_millis(lease))
            .map_err(|e| malformed(self.resource, &field, e.to_string()))?;
        let field = format!("{at}.{LIMIT}");
        let limit = match e.get(LIMIT) {
            None | Some(Bson::Null) => None,
            Some(b) => {
                let m = self.int(&field, b)?;
                let m = u32::try_from(m)
                    .ok()
                    .and_then(|m| SharedLimit::new(m).ok())
                    .ok_or_else(|| {
                        malformed(
                            self.resource,
                            &field,
                            format!("expected 1 to 2^32 - 1, got {m}"),
                        )
                    })?;
                Some(m)
            }
        };
        let mut holder = Holder::default();
        holder.owner = detail(e, OWNER);
        holder.host = detail(e, HOST);
        holder.comment = detail(e, COMMENT);
        Ok(Some(Handoff::new(lock_id, holder, limit, lease)))
    }

    fn lock(&self, l: &Document, at: &str) -> Result<StoredLock, MalformedDocument> {
        let required = |key: &str| {
            l.get(key)
                .ok_or_else(|| malformed(self.resource, &format!("{at}.{key}"), "missing"))
        };
        let lock_id = match required(LOCK_ID)? {
            Bson::String(s) => LockId::stored(s),
            other => return Err(self.wrong(&format!("{at}.{LOCK_ID}"), "a string", other)),
        };
        let created_at = self.date(&format!("{at}.{CREATED_AT}"), required(CREATED_AT)?)?;
        let fence = match l.get(FENCE) {
            None | Some(Bson::Null) => 0,
            Some(b) => self.int(&format!("{at}.{FENCE}"), b)?,
        };
        let mut lock = StoredLock::new(lock_id, created_at, fence);
        lock.holder.owner = detail(l, OWNER);
        lock.holder.host = detail(l, HOST);
        lock.holder.comment = detail(l, COMMENT);
        lock.renewed_at = self.opt_date(l, at, RENEWED_AT)?;
        lock.expires_at = self.opt_date(l, at, EXPIRES_AT)?;
        Ok(lock)
    }
}

/// A detail as text: no rule reads it, so any type is shown as it is.
fn detail(l: &Document, key: &str) -> Option<String> {
    match l.get(key) {
        None | Some(Bson::Null) => None,
        Some(Bson::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

fn malformed(resource: &str, field: &str, reason: impl Into<String>) -> MalformedDocument {
    MalformedDocument {
        resource: resource.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

fn kind(b: &Bson) -> &'static str {
    match b {
        Bson::Null => "null",
        Bson::String(_) => "a string",
        Bson::Boolean(_) => "a boolean",
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => "a number",
        Bson::DateTime(_) => "a date",
        Bson::Document(_) => "a document",
        Bson::Array(_) => "an array",
        _ => "another BSON type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::DateTime;

    fn go_doc() -> Document {
        doc! {
            "resource": "r1",
            "exclusive": empty_exclusive(),
            "shared": { "count": 1, "locks": [ {
                "lockId": "abcd", "owner": "john", "host": "host.name",
                "createdAt": DateTime::from_millis(1_516_845_527_243),
                "renewedAt": Bson::Null, "expiresAt": Bson::Null, "acquired": true,
            } ] },
        }
    }

    #[test]
    fn reads_the_go_librarys_documents() {
        let (r, state) = decode(&go_doc()).unwrap();
        assert_eq!(r.as_str(), "r1");
        assert_eq!(state.last_fence, 0);
        assert!(state.exclusive.is_none());
        assert_eq!(state.shared[0].holder.owner.as_deref(), Some("john"));
        assert_eq!(
            state.shared[0].created_at,
            Timestamp::from_millis(1_516_845_527_243)
        );
    }

    #[test]
    fn names_resource_and_field_of_bad_documents() {
        let mut d = go_doc();
        d.get_document_mut("shared").unwrap().insert("count", 2);
        let e = decode(&d).unwrap_err().to_string();
        assert!(e.contains("r1") && e.contains("shared.count"), "{e}");

        let mut d = go_doc();
        let locks = d
            .get_document_mut("shared")
            .unwrap()
            .get_array_mut("locks")
            .unwrap();
        locks[0]
            .as_document_mut()
            .unwrap()
            .insert("createdAt", "yesterday");
        let e = decode(&d).unwrap_err().to_string();
        assert!(
            e.contains("shared.locks.0.createdAt") && e.contains("a string"),
            "{e}"
        );

        let e = decode(&doc! { "resource": 5 }).unwrap_err().to_string();
        assert!(e.contains("resource"), "{e}");
        let e = decode(&doc! { "resource": "x", "exclusive": { "acquired": true } })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("exclusive.lockId") && e.contains("missing"),
            "{e}"
        );
        let e = decode(&doc! { "resource": "x", "lastFence": -3_i64 })
            .unwrap_err()
            .to_string();
        assert!(e.contains("lastFence"), "{e}");
    }

    #[test]
    fn reads_the_queue_strictly_naming_places_by_index() {
        let place = |ticket: &str, mode: &str| {
            doc! { "ticket": ticket, "mode": mode,
            "queuedAt": DateTime::from_millis(1_000), "expiresAt": DateTime::from_millis(2_000) }
        };
        let with_queue = |q: Bson| {
            let mut d = go_doc();
            d.insert("queue", q);
            d
        };
        let (_, state) = decode(&with_queue(Bson::Array(vec![
            place("secret-1", "exclusive").into(),
            place("secret-2", "shared").into(),
        ])))
        .unwrap();
        assert_eq!(state.queue.len(), 2);
        assert_eq!(state.queue[1].mode, Mode::Shared);
        assert!(decode(&with_queue(Bson::Null)).unwrap().1.queue.is_empty());
        for (q, field) in [
            (Bson::String("x".into()), "queue"),
            (Bson::Array(vec![Bson::Int32(1)]), "queue.0"),
            (
                Bson::Array(vec![place("secret-1", "both").into()]),
                "queue.0.mode",
            ),
            (
                Bson::Array(vec![
                    place("secret-1", "shared").into(),
                    place("secret-1", "exclusive").into(),
                ]),
                "queue.1.ticket",
            ),
        ] {
            let e = decode(&with_queue(q)).unwrap_err();
            assert_eq!(e.field, field);
            assert!(
                !e.to_string().contains("secret"),
                "a ticket is a secret: {e}"
            );
        }
        let mut bad = place("secret-1", "shared");
        bad.insert("expiresAt", Bson::Null);
        let e = decode(&with_queue(Bson::Array(vec![
            place("secret-0", "shared").into(),
            bad.into(),
        ])))
        .unwrap_err();
        assert_eq!(e.field, "queue.1.expiresAt");
    }
}
