//! The query `status` runs, from a [`Filter`].

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{Filter, Mode, Timestamp};

use super::{date, in_any_lock};
use crate::schema::{CREATED_AT, EXPIRES_AT, LOCK_ID, OWNER, RESOURCE};

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
