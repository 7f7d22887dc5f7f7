//! What the properties share: the step the step properties judge ([`Transition`]) and the
//! rules' predicates restated from their definitions (expiry, abandonment past the takeover
//! grace, a place's lease, the places ahead of a request, and the grant rule's two parts:
//! the locks' and the queue's). None of them calls the engine's own predicates, which a
//! mutant may break.

use std::collections::BTreeSet;

use lockwright_engine::{LockId, Mode, QueueEntry, SharedLimit, StoredLock};

use crate::action::{Action, Effect};
use crate::model::LockModel;
use crate::state::LockState;

/// One step, as the step properties judge it.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    /// The model (for its configuration).
    pub model: &'a LockModel,
    /// The state before the step.
    pub before: &'a LockState,
    /// The step.
    pub action: Action,
    /// The state after the step (its verdict not yet filled in).
    pub after: &'a LockState,
    /// What the engine answered.
    pub effect: &'a Effect,
}

/// The rules' one expiry predicate, from its definition: a lock is expired at `t` iff it
/// has an expiry and `expires_at <= t`.
#[must_use]
pub fn expired_at(lock: &StoredLock, t: u64) -> bool {
    lock.expires_at.is_some_and(|e| e.as_millis() <= t)
}

/// Live at `t`: not expired at `t`.
#[must_use]
pub fn live_at(lock: &StoredLock, t: u64) -> bool {
    !expired_at(lock, t)
}

/// The takeover rule's predicate, from its definition: a lock is abandoned at `t` with the
/// takeover grace `grace` (ms) iff it has an expiry and `expires_at + grace <= t`. Until
/// then it blocks other grants and purge, though it may have expired.
#[must_use]
pub fn abandoned_at(lock: &StoredLock, t: u64, grace: u64) -> bool {
    lock.expires_at
        .is_some_and(|e| e.as_millis().saturating_add(grace) <= t)
}

/// The configuration's takeover grace in ms.
pub(super) fn grace(model: &LockModel) -> u64 {
    model.config().grace_ms()
}

/// The lock ids with a lock abandoned at `t` in `state`'s store, by definition.
pub(super) fn abandoned_groups_at(state: &LockState, t: u64, grace: u64) -> BTreeSet<LockId> {
    state
        .locks()
        .filter(|(_, _, l)| abandoned_at(l, t, grace))
        .map(|(_, _, l)| l.lock_id.clone())
        .collect()
}

/// A place in a queue is live at `t` iff its lease has not run out: `t < expires_at`. A
/// place that is not live blocks nobody.
#[must_use]
pub fn place_live(place: &QueueEntry, t: u64) -> bool {
    t < place.expires_at.as_millis()
}

/// The live places ahead of a request in `queue` at `t`: walking the queue from its
/// front, the live places met before the request's own live place (named by `ticket`);
/// every live place when it has none (a request that is not fair, or a fair one before
/// its first refusal, or whose place lapsed).
#[must_use]
pub fn places_ahead<'a>(
    queue: &'a [QueueEntry],
    ticket: Option<&LockId>,
    t: u64,
) -> Vec<&'a QueueEntry> {
    let mut ahead = Vec::new();
    for place in queue.iter().filter(|p| place_live(p, t)) {
        if ticket == Some(&place.ticket) {
            break;
        }
        ahead.push(place);
    }
    ahead
}

/// The held locks (not abandoned at `t`) of resource `r`, with their modes.
pub(super) fn held_on(state: &LockState, r: usize, t: u64, grace: u64) -> Vec<(Mode, &StoredLock)> {
    state
        .locks()
        .filter(|(lr, _, l)| *lr == r && !abandoned_at(l, t, grace))
        .map(|(_, m, l)| (m, l))
        .collect()
}

/// The lock rule without the queue, from its definition: an exclusive request needs no
/// held lock on the resource; a shared one needs no held exclusive lock, no held lock of
/// its own lock id, and fewer held shared locks than its limit.
pub(super) fn locks_let_through(
    state: &LockState,
    r: usize,
    mode: Mode,
    lock_id: &LockId,
    limit: Option<SharedLimit>,
    t: u64,
    grace: u64,
) -> bool {
    let held = held_on(state, r, t, grace);
    match mode {
        Mode::Exclusive => held.is_empty(),
        Mode::Shared => {
            held.iter()
                .all(|(m, l)| *m == Mode::Shared && &l.lock_id != lock_id)
                && limit.is_none_or(|m| held.len() < m.get() as usize)
        }
    }
}

/// The queue's part of the grant rule, from its definition: with "ahead" the live places
/// before the request's own ([`places_ahead`]), an exclusive request needs none ahead; a
/// shared one needs no exclusive place ahead (writer preference) and, with a limit `m`,
/// fewer than `m` held shared locks and shared places ahead together (readers ahead keep
/// their slots).
pub(super) fn queue_lets_through(
    state: &LockState,
    r: usize,
    mode: Mode,
    ticket: Option<&LockId>,
    limit: Option<SharedLimit>,
    t: u64,
    grace: u64,
) -> bool {
    let ahead = places_ahead(state.queue(r), ticket, t);
    match mode {
        Mode::Exclusive => ahead.is_empty(),
        Mode::Shared => {
            let held_shared = held_on(state, r, t, grace)
                .iter()
                .filter(|(m, _)| *m == Mode::Shared)
                .count();
            ahead.iter().all(|p| p.mode == Mode::Shared)
                && limit.is_none_or(|m| held_shared + ahead.len() < m.get() as usize)
        }
    }
}

/// The limit a request in `mode` asks with.
pub(super) fn limit_of(model: &LockModel, mode: Mode) -> Option<SharedLimit> {
    match mode {
        Mode::Exclusive => None,
        Mode::Shared => model.config().shared_limit,
    }
}
