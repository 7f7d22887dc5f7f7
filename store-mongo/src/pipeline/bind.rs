//! The inputs of the one-lock commands (`xlock`, `slock`, `renew_one`, `set_comment`,
//! `unlock_one`): their pipelines depend on a request only through its *shape*
//! ([`Shape`]: which operation, and for a grant its mode, whether it has a limit and whether
//! it is fair), so each is built once and sent as it is; every input (the lock id, the
//! holder, the TTL, the ticket, the command's readings of time) is a variable the command
//! binds with `let`. A variable is data whatever it holds: every user string is bound as a
//! `$literal`, so a lock id such as `"$foo"` never becomes a field path.
//!
//! `$$NOW` and `$$CLUSTER_TIME` keep one value through a command, `let` included, so a
//! variable bound to them (or to an expression over them) reads as they do.

use mongodb::bson::{Bson, Document, doc};

use lockwright_engine::{Access, LockId, LockRequest, Mode};

use super::{Readings, literal, ms};

/// The server's clock reading of the command (`$$NOW`, or a test clock's literal date).
pub(crate) const NOW: &str = "$$now";
/// The fence floor of the command.
pub(crate) const FLOOR: &str = "$$floor";
/// The command's nonce (see [`Readings::nonce`]).
pub(crate) const NONCE: &str = "$$nonce";
/// The request's lock id.
pub(super) const LOCK_ID: &str = "$$lockId";
/// The request's owner, host and comment (`null` when not given).
pub(super) const OWNER: &str = "$$owner";
pub(super) const HOST: &str = "$$host";
pub(super) const COMMENT: &str = "$$comment";
/// When the lock a grant installs (or a renewal renews) expires: `now + ttl`, or `null`.
pub(super) const EXPIRES: &str = "$$expires";
/// The id a grant marks the document with (`lastGrant`).
pub(super) const GRANT_ID: &str = "$$grantId";
/// The tag of the store asking, which a fair refusal's place carries.
pub(super) const TAG: &str = "$$tag";
/// A fair request's ticket.
pub(super) const TICKET: &str = "$$ticket";
/// When a fair request's place lapses: `now + ` the ticket's lease.
pub(super) const PLACE_UNTIL: &str = "$$placeUntil";
/// Until when the place is fresh: `now + ` the claim lease, or the Unix epoch for a place
/// kept far back.
pub(super) const FRESH_UNTIL: &str = "$$freshUntil";
/// The claim lease in ms (the lease of a lock handed to the place).
pub(super) const LEASE: &str = "$$lease";
/// A shared request's limit, or `null`.
pub(super) const LIMIT: &str = "$$limit";
/// A lock whose `expiresAt` is at or before this is not renewable: `now + margin - grace`.
pub(super) const DEADLINE: &str = "$$deadline";
/// The id `leave_queue` marks the document with (`lastLeave`) when it removes a place.
pub(super) const LEAVE_ID: &str = "$$leaveId";

/// What a one-lock command's pipeline (and projection) is built from: everything else is
/// bound with `let`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shape {
    /// A grant: its mode, whether it is shared with a limit, whether it is fair.
    Grant {
        mode: Mode,
        limited: bool,
        fair: bool,
    },
    /// `renew_one`.
    RenewOne,
    /// `set_comment`.
    SetComment,
    /// `unlock_one`.
    UnlockOne,
    /// `leave_queue`.
    Leave,
}

impl Shape {
    /// The shape of a grant of `request`.
    pub(crate) fn grant(request: &LockRequest) -> Shape {
        Shape::Grant {
            mode: request.mode(),
            limited: matches!(request.access, Access::Shared(Some(_))),
            fair: request.fair.is_some(),
        }
    }
}

/// The readings every template is built with: the variables of the command's time.
pub(crate) fn template_readings(grace_ms: i64) -> Readings {
    Readings {
        now: Bson::String(NOW.to_owned()),
        floor: Bson::String(FLOOR.to_owned()),
        grace_ms,
        nonce: NONCE.to_owned(),
    }
}

/// The name of the variable `reference` (`"$$now"` is bound as `now`).
fn name(reference: &str) -> &str {
    reference.trim_start_matches("$$")
}

/// The bindings of the command's time: `now`, `floor` and `nonce` as `readings` has them.
fn time(readings: &Readings) -> Document {
    doc! {
        name(NOW): readings.now.clone(),
        name(FLOOR): readings.floor.clone(),
        name(NONCE): literal(readings.nonce.as_str()),
    }
}

/// `now + ms` as an expression over the reading `now`.
fn after(now: &Bson, ms: i64) -> Bson {
    Bson::Document(doc! { "$add": [ now.clone(), ms ] })
}

fn opt_literal(value: Option<&String>) -> Bson {
    value.map_or(Bson::Null, |v| literal(v.as_str()))
}

/// The bindings of a grant of `request`, marked `grant_id`, by the store tagged `tag`.
pub(crate) fn grant(
    request: &LockRequest,
    grant_id: &Bson,
    tag: &str,
    readings: &Readings,
) -> Document {
    let now = &readings.now;
    let mut vars = time(readings);
    vars.extend(doc! {
        name(LOCK_ID): literal(request.lock_id.as_str()),
        name(OWNER): opt_literal(request.holder.owner.as_ref()),
        name(HOST): opt_literal(request.holder.host.as_ref()),
        name(COMMENT): opt_literal(request.holder.comment.as_ref()),
        name(EXPIRES): request.ttl.map_or(Bson::Null, |t| after(now, ms(t.as_duration()))),
        name(GRANT_ID): grant_id.clone(),
        name(TAG): literal(tag),
        name(LIMIT): match request.access {
            Access::Shared(Some(m)) => Bson::Int64(i64::from(m.get())),
            _ => Bson::Null,
        },
    });
    if let Some(ticket) = &request.fair {
        let fresh_until = match ticket.claim {
            Some(_) => after(now, ms(ticket.handoff_lease().as_duration())),
            // Far back: stale however the clock moves (the engine's `Queue::join`).
            None => Bson::DateTime(mongodb::bson::DateTime::from_millis(0)),
        };
        vars.extend(doc! {
            name(TICKET): literal(ticket.id.as_str()),
            name(PLACE_UNTIL): after(now, ms(ticket.ttl.as_duration())),
            name(FRESH_UNTIL): fresh_until,
            name(LEASE): ms(ticket.handoff_lease().as_duration()),
        });
    }
    vars
}

/// The bindings of `renew_one` of the lock of `lock_id` to `ttl_ms`, with the margin
/// `margin_ms`.
pub(crate) fn renew_one(
    lock_id: &LockId,
    ttl_ms: u64,
    margin_ms: u64,
    readings: &Readings,
) -> Document {
    let margin_ms = if mutated!(PipelineRenewOneWithoutMargin) {
        0
    } else {
        margin_ms
    };
    let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut vars = time(readings);
    vars.extend(doc! {
        name(LOCK_ID): literal(lock_id.as_str()),
        name(EXPIRES): after(&readings.now, ms(ttl_ms)),
        name(DEADLINE): deadline(ms(margin_ms), readings),
    });
    vars
}

/// `now + margin - grace`. The grace is the store's (an hour at most) and the margin a
/// validated one, so the difference is well inside i64.
fn deadline(margin_ms: i64, readings: &Readings) -> Bson {
    after(&readings.now, margin_ms.saturating_sub(readings.grace_ms))
}

/// The bindings of `set_comment` of the lock of `lock_id` to `comment`.
pub(crate) fn set_comment(
    lock_id: &LockId,
    comment: Option<&str>,
    readings: &Readings,
) -> Document {
    let mut vars = time(readings);
    vars.extend(doc! {
        name(LOCK_ID): literal(lock_id.as_str()),
        name(COMMENT): comment.map_or(Bson::Null, literal),
        name(DEADLINE): deadline(0, readings),
    });
    vars
}

/// The bindings of `unlock_one` of the lock of `lock_id`.
pub(crate) fn unlock_one(lock_id: &LockId, readings: &Readings) -> Document {
    let mut vars = time(readings);
    vars.insert(name(LOCK_ID), literal(lock_id.as_str()));
    vars
}

/// The bindings of `leave_queue` of the place of `ticket`, marked `leave_id`.
pub(crate) fn leave(ticket: &LockId, leave_id: &Bson, readings: &Readings) -> Document {
    let mut vars = time(readings);
    vars.insert(name(TICKET), literal(ticket.as_str()));
    vars.insert(name(LEAVE_ID), leave_id.clone());
    vars
}

/// A variable's reference as an expression.
pub(super) fn var(reference: &str) -> Bson {
    Bson::String(reference.to_owned())
}
