//! The properties the model checks, one function each.
//!
//! Some are about a state (`mutual_exclusion`, `holder_safety`): the function takes the
//! state. The others are about a step (`shared_limit`, `purge_safety`, `renew_after_purge`,
//! `fence_monotonic`, `idempotence`, `no_lost_grant`, and the queue's `fifo`,
//! `no_starvation` and `queue_places`): the function takes the
//! [`Transition`] (state before, action, state after, what the engine answered). Every
//! transition is judged when it is taken, and the names of the step properties it broke are
//! kept in the next state ([`Verdict`]), where stateright's `always` sees them.
//! The `sometimes_*` properties show that the situations each safety property is about are
//! reached (a property nobody could break proves nothing).
//!
//! The properties restate the rules from their definitions and read the store's fields
//! directly (expired at `t` means `expires_at <= t`, see [`expired_at`]; abandoned, past the
//! takeover grace, `expires_at + grace <= t`, see [`abandoned_at`]); they never call the
//! engine's predicates, which a mutant may break (a place in a queue is live at `t` iff
//! `t < expires_at`, see [`place_live`]; the places ahead of a request are
//! [`places_ahead`]; the queue's part of the grant rule is restated, not taken from
//! `ResourceState::queue_allows`).
//!
//! **Liveness.** stateright's `Property::eventually` is checked only on paths that end (in
//! a state with no successor or at a boundary): a path that closes a cycle, or joins a path
//! already seen, is taken for one that goes on, so an `eventually` that fails on it is
//! missed (stateright 0.31's own documentation says so). This model's paths never end
//! (after the last tick, lock-unlock cycles remain), so "every waiter that keeps asking is
//! eventually granted" is checked in a bounded form, at every step: [`no_starvation`], with
//! [`fifo`] and [`queue_places`] (see [`no_starvation`] for the argument). The store's rules are judged at the
//! store's clock ([`LockState::store_now`]), which a failover may move; `holder_safety` at
//! real time, on the clients' own clocks.

use std::collections::BTreeSet;

use lockwright_engine::table::{fence_floor, purge};
use lockwright_engine::{LockId, Mode, QueueEntry, SharedLimit, StoredLock, Timestamp};
use stateright::Property;

use crate::action::{Action, Effect, status_key};
use crate::config::Config;
use crate::model::LockModel;
use crate::state::{LockKey, LockState, parse_lock_id};
use crate::verdict::Verdict;
pub use crate::verdict::{Check, PropSet};

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
fn grace(model: &LockModel) -> u64 {
    model.config().grace_ms()
}

/// **mutual_exclusion**: a resource with a held exclusive lock (live, or expired inside the
/// takeover grace) has no other held lock, at the store's clock.
#[must_use]
pub fn mutual_exclusion(model: &LockModel, state: &LockState) -> bool {
    let (now, grace) = (state.store_now(), grace(model));
    let held = |l: &StoredLock| !abandoned_at(l, now, grace);
    state
        .table
        .resources()
        .values()
        .all(|r| r.exclusive.as_ref().is_none_or(|x| !held(x)) || r.shared.iter().all(|l| !held(l)))
}

/// **holder_safety**: no two clients both believe, at this real instant, each by the
/// holding rule on its own clock (trust while `local < sent_local + ttl - drift_margin`),
/// that they hold conflicting locks on one resource (an exclusive one and any other).
#[must_use]
pub fn holder_safety(_: &LockModel, state: &LockState) -> bool {
    let n = state.clients.len();
    let resources = state.downstream.len();
    (0..resources).all(|r| {
        let believers: Vec<(usize, Mode)> = (0..n)
            .filter_map(|c| state.believed(c, r).map(|b| (c, b.mode)))
            .collect();
        believers.len() < 2 || believers.iter().all(|(_, m)| *m == Mode::Shared)
    })
}

/// **shared_limit**: when a shared grant with limit `m` succeeds, the held shared locks
/// (live, or expired inside the takeover grace) on the resource, the new one included,
/// number at most `m`.
#[must_use]
pub fn shared_limit(tr: &Transition<'_>) -> bool {
    let Effect::Granted {
        resource, status, ..
    } = tr.effect
    else {
        return true;
    };
    if status.mode != Mode::Shared {
        return true;
    }
    let Some(limit) = tr.model.config().shared_limit else {
        return true;
    };
    let (now, grace) = (tr.after.store_now(), grace(tr.model));
    let held = tr
        .after
        .locks()
        .filter(|(r, m, l)| r == resource && *m == Mode::Shared && !abandoned_at(l, now, grace))
        .count();
    held <= limit.get() as usize
}

/// The lock ids with a lock abandoned at `t` in `state`'s store, by definition.
fn abandoned_groups_at(state: &LockState, t: u64, grace: u64) -> BTreeSet<LockId> {
    state
        .locks()
        .filter(|(_, _, l)| abandoned_at(l, t, grace))
        .map(|(_, _, l)| l.lock_id.clone())
        .collect()
}

/// **purge_safety**: a purge at `t` works on exactly the groups with a lock abandoned at `t`
/// (expired for at least the takeover grace; so no other group loses a lock), or, when it
/// checks them again as it finishes ([`Config::purge_rechecks`]), on those of them that
/// still hold such a lock; it removes exactly the locks of those groups created before `t`
/// (none created after the purge began, even in its millisecond, and none of those groups'
/// older locks survive), nothing else disappears, and afterwards no lock abandoned at `t`
/// remains.
#[must_use]
pub fn purge_safety(tr: &Transition<'_>) -> bool {
    let grace = grace(tr.model);
    match tr.effect {
        Effect::PurgeBegun { at, groups } => *groups == abandoned_groups_at(tr.before, *at, grace),
        Effect::Purged {
            at,
            groups,
            removed,
        } => {
            let begun = tr
                .before
                .purge
                .as_ref()
                .map(|p| p.groups.clone())
                .unwrap_or_default();
            let expected = if tr.model.config().purge_rechecks {
                let still = abandoned_groups_at(tr.before, *at, grace);
                begun.intersection(&still).cloned().collect()
            } else {
                begun
            };
            let before = tr.before.lock_keys();
            let doomed: BTreeSet<LockKey> = before
                .iter()
                .filter(|k| groups.contains(&k.lock_id) && k.created_at < *at)
                .cloned()
                .collect();
            let removed: BTreeSet<LockKey> = removed.iter().map(status_key).collect();
            let survivors: BTreeSet<LockKey> = before.difference(&doomed).cloned().collect();
            *groups == expected
                && removed == doomed
                && tr.after.lock_keys() == survivors
                && tr
                    .after
                    .locks()
                    .all(|(_, _, l)| !abandoned_at(l, *at, grace))
        }
        _ => true,
    }
}

/// **renew_after_purge**: renew never succeeds for a group holding a lock that another
/// grant might take before the renew margin has passed (`expires_at + grace <= now +
/// renew_margin`: abandoned, or within the margin of it; with no grace, expired or within
/// the margin of expiry), and a lock a purge in progress saw abandoned is not renewed before
/// the purge removes it.
#[must_use]
pub fn renew_after_purge(tr: &Transition<'_>) -> bool {
    let Effect::Renewed { lock_id, .. } = tr.effect else {
        return true;
    };
    let grace = grace(tr.model);
    let margin = u64::try_from(tr.model.config().renew_margin.as_millis()).unwrap_or(u64::MAX);
    let deadline = tr.before.store_now().saturating_add(margin);
    let group = || {
        tr.before
            .locks()
            .filter(move |(_, _, l)| &l.lock_id == lock_id)
    };
    let all_renewable = group().all(|(_, _, l)| !abandoned_at(l, deadline, grace));
    let none_seen_expired = tr.before.purge.as_ref().is_none_or(|p| {
        !p.groups.contains(lock_id) || group().all(|(_, _, l)| !abandoned_at(l, p.at, grace))
    });
    all_renewable && none_seen_expired
}

/// **fence_monotonic**: every grant's fence is strictly greater than every fence granted
/// before on the resource (across unlock, purge and deletion of the resource's document);
/// the fenced downstream store accepts a write only if its fence is at least the highest it
/// accepted, and its highest accepted fence never goes down.
#[must_use]
pub fn fence_monotonic(tr: &Transition<'_>) -> bool {
    match tr.effect {
        Effect::Granted {
            resource, status, ..
        } => tr.before.fence_history[*resource].is_none_or(|h| status.fence > h),
        Effect::Delivered {
            resource,
            fence,
            highest_before,
            accepted,
            ..
        } => {
            (!accepted || highest_before.is_none_or(|h| *fence >= h))
                && tr.after.downstream[*resource] >= tr.before.downstream[*resource]
        }
        _ => tr.after.downstream == tr.before.downstream,
    }
}

/// **idempotence**: unlocking a group a second time (at the same instant) removes nothing
/// and changes nothing; a second purge at the same instant as a finished one removes nothing
/// and changes nothing. Checked by applying the engine operation again to a copy.
#[must_use]
pub fn idempotence(tr: &Transition<'_>) -> bool {
    match tr.effect {
        Effect::Unlocked { lock_id, .. } => {
            let mut again = tr.after.table.clone();
            let removed = again.unlock(lock_id, Timestamp::from_millis(tr.after.store_now()));
            removed.is_empty() && again == tr.after.table
        }
        Effect::Purged { at, .. } => {
            let mut again = tr.after.table.clone();
            let removed = purge(&mut [&mut again], Timestamp::from_millis(*at));
            removed.is_empty() && again == tr.after.table
        }
        _ => true,
    }
}

/// **no_lost_grant**: a granted lock stays in the store (same resource, group, mode,
/// creation and fence) until its group is unlocked, or a purge removes it after its group
/// had an abandoned lock (and it was created before the purge instant), or a new grant
/// on its resource takes it over once it is abandoned (expired for at least the takeover
/// grace).
#[must_use]
pub fn no_lost_grant(tr: &Transition<'_>) -> bool {
    if tr.after.table == tr.before.table {
        return true;
    }
    let after = tr.after.lock_keys();
    tr.before
        .locks()
        .filter(|(r, m, l)| !after.contains(&LockKey::of(*r, *m, l)))
        .all(|(r, _, l)| match tr.effect {
            Effect::Unlocked { lock_id, .. } => &l.lock_id == lock_id,
            Effect::Purged { at, groups, .. } => {
                groups.contains(&l.lock_id) && l.created_at.as_millis() <= *at
            }
            Effect::Granted { resource, .. } => {
                *resource == r && abandoned_at(l, tr.before.store_now(), grace(tr.model))
            }
            _ => false,
        })
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
fn held_on(state: &LockState, r: usize, t: u64, grace: u64) -> Vec<(Mode, &StoredLock)> {
    state
        .locks()
        .filter(|(lr, _, l)| *lr == r && !abandoned_at(l, t, grace))
        .map(|(_, m, l)| (m, l))
        .collect()
}

/// The lock rule without the queue, from its definition: an exclusive request needs no
/// held lock on the resource; a shared one needs no held exclusive lock, no held lock of
/// its own lock id, and fewer held shared locks than its limit.
fn locks_let_through(
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
fn queue_lets_through(
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
fn limit_of(model: &LockModel, mode: Mode) -> Option<SharedLimit> {
    match mode {
        Mode::Exclusive => None,
        Mode::Shared => model.config().shared_limit,
    }
}

/// **fifo**: no grant while a live place that conflicts with the request is ahead of the
/// request's own place in the resource's queue (ahead of every live place, for a request
/// that has none): an exclusive grant has no live place ahead; a shared grant has no live
/// exclusive place ahead (writer preference) and, under a limit `m`, the held shared locks
/// and the live shared places ahead of it number fewer than `m` (readers ahead keep their
/// slots). Judged at the grant, on the queue as it was, at the store's clock.
#[must_use]
pub fn fifo(tr: &Transition<'_>) -> bool {
    let Effect::Granted {
        resource,
        status,
        ticket,
        ..
    } = tr.effect
    else {
        return true;
    };
    queue_lets_through(
        tr.before,
        *resource,
        status.mode,
        ticket.as_ref(),
        limit_of(tr.model, status.mode),
        tr.before.store_now(),
        grace(tr.model),
    )
}

/// **no_starvation**, a bounded liveness property (k = 0): a request with nothing in its
/// way is granted at once. Whenever a lock request (fair or not) is refused, either a
/// held lock refuses it (by the lock rule alone) or a live place that conflicts with it
/// is ahead of its own place ([`fifo`]'s predicate). So a waiter at the head of the queue
/// (no live conflicting place ahead) whose resource is free is granted at its next
/// attempt.
///
/// Why this is the step of "every live waiter that keeps asking is eventually granted,
/// while holders keep releasing": by [`queue_places`], new places join at the back, a
/// refresh keeps its place, and places leave only by their own grant, their own leave or
/// by lapsing; so the places ahead of a waiter that asks again within its lease only ever
/// go, each within its lease once its waiter stops asking. By [`fifo`], nobody behind it
/// that conflicts with it is granted first. Once none is left ahead and the holders have
/// released, its next attempt is granted by this property. The model's time is bounded
/// ([`Config::ticks`]) and stateright's `eventually` sees only paths that end (it takes a
/// cycle or a join of paths for a continuation), so the unbounded statement is not
/// checked as such: this property and the two others are, at every step.
#[must_use]
pub fn no_starvation(tr: &Transition<'_>) -> bool {
    let Effect::Refused {
        resource,
        mode,
        ticket,
        ..
    } = tr.effect
    else {
        return true;
    };
    let Some(client) = tr.action.client() else {
        return true;
    };
    let (t, grace) = (tr.before.store_now(), grace(tr.model));
    let limit = limit_of(tr.model, *mode);
    let lock_id = tr.before.lock_id_of(client);
    !(locks_let_through(tr.before, *resource, *mode, lock_id, limit, t, grace)
        && queue_lets_through(
            tr.before,
            *resource,
            *mode,
            ticket.as_ref(),
            limit,
            t,
            grace,
        ))
}

/// The queue of resource `r` the rules leave after the step `tr`: a refused fair request
/// drops the lapsed places and then refreshes its own (same position, new lease and mode)
/// or joins at the back; a grant drops the lapsed places and the winner's; a leave drops
/// the lapsed places and the leaver's; a purge drops the places lapsed at its instant;
/// nothing else touches a queue.
fn expected_queue(tr: &Transition<'_>, r: usize) -> Vec<QueueEntry> {
    let now = tr.before.store_now();
    let before = tr.before.queue(r);
    let live_at = |t: u64| -> Vec<QueueEntry> {
        before
            .iter()
            .filter(|p| place_live(p, t))
            .cloned()
            .collect()
    };
    match tr.effect {
        Effect::Granted {
            resource, ticket, ..
        } if *resource == r => {
            let mut q = live_at(now);
            q.retain(|p| Some(&p.ticket) != ticket.as_ref());
            q
        }
        Effect::Refused {
            resource,
            mode,
            ticket: Some(ticket),
            ..
        } if *resource == r => {
            let mut q = live_at(now);
            let lapses = Timestamp::from_millis(now + tr.model.config().queue_ttl_ms());
            match q.iter_mut().find(|p| &p.ticket == ticket) {
                Some(p) => *p = QueueEntry::new(ticket.clone(), *mode, p.queued_at, lapses),
                None => q.push(QueueEntry::new(
                    ticket.clone(),
                    *mode,
                    Timestamp::from_millis(now),
                    lapses,
                )),
            }
            q
        }
        Effect::Left {
            resource, ticket, ..
        } if *resource == r => {
            let mut q = live_at(now);
            q.retain(|p| &p.ticket != ticket);
            q
        }
        Effect::Purged { at, .. } => live_at(*at),
        _ => before.to_vec(),
    }
}

/// **queue_places**: every queue is what the rules make of it: a refused fair request takes
/// its place at the back or refreshes the one it has in place, a grant removes the winner's
/// place, a leave the leaver's, every one of these writes and a purge drop the lapsed places
/// (so a resource with a live place is never deleted), and nothing else changes a queue. A fair refusal reports as its place the number of live
/// conflicting places ahead of its own (all of them for an exclusive or limited shared
/// request, the exclusive ones for an unlimited shared one), and a leave whether it had a
/// place.
#[must_use]
pub fn queue_places(tr: &Transition<'_>) -> bool {
    let now = tr.before.store_now();
    let reported = match tr.effect {
        Effect::Refused {
            resource,
            mode,
            ticket: Some(ticket),
            queued,
        } => {
            let ahead = places_ahead(tr.after.queue(*resource), Some(ticket), now);
            let unlimited_shared = *mode == Mode::Shared && limit_of(tr.model, *mode).is_none();
            let n = ahead
                .iter()
                .filter(|p| !unlimited_shared || p.mode == Mode::Exclusive)
                .count();
            *queued == Some(u32::try_from(n).unwrap_or(u32::MAX))
        }
        Effect::Refused { queued, .. } => queued.is_none(),
        Effect::Left {
            resource,
            ticket,
            had,
        } => {
            *had == tr
                .before
                .queue(*resource)
                .iter()
                .any(|p| &p.ticket == ticket)
        }
        _ => true,
    };
    reported && (0..tr.model.config().resources).all(|r| tr.after.queue(r) == expected_queue(tr, r))
}

/// The witnesses a step produces (see [`Check`]).
fn witnesses(tr: &Transition<'_>, out: &mut PropSet) {
    match tr.effect {
        Effect::Granted {
            resource,
            status,
            took_over,
            ticket,
            ..
        } => {
            if took_over.iter().any(|k| k.lock_id != status.lock_id) {
                out.insert(Check::TakeoverAfterExpiry);
            }
            let name = crate::state::resource(*resource);
            if tr.before.table.resource(name).is_none()
                && tr.before.fence_history[*resource].is_some()
            {
                out.insert(Check::FenceAfterDeletion);
            }
            if tr.before.table.fence_clock()
                > fence_floor(Timestamp::from_millis(tr.before.store_now()))
            {
                out.insert(Check::GrantAfterClockBack);
            }
            let now = tr.before.store_now();
            let queue = tr.before.queue(*resource);
            if let Some(t) = ticket
                && queue.iter().any(|p| &p.ticket == t && place_live(p, now))
            {
                out.insert(Check::WaiterGranted);
            }
            let conflicts = |p: &QueueEntry| {
                status.mode == Mode::Exclusive
                    || p.mode == Mode::Exclusive
                    || tr.model.config().shared_limit.is_some()
            };
            let own = queue
                .iter()
                .position(|p| Some(&p.ticket) == ticket.as_ref() && place_live(p, now))
                .unwrap_or(queue.len());
            if queue[..own]
                .iter()
                .any(|p| !place_live(p, now) && conflicts(p))
            {
                out.insert(Check::GrantPastLapsedPlace);
            }
        }
        Effect::Refused {
            resource,
            mode,
            ticket,
            ..
        } => {
            if let Some(client) = tr.action.client() {
                let (t, grace) = (tr.before.store_now(), grace(tr.model));
                let limit = limit_of(tr.model, *mode);
                let lock_id = tr.before.lock_id_of(client);
                if locks_let_through(tr.before, *resource, *mode, lock_id, limit, t, grace) {
                    out.insert(Check::QueueHeldBack);
                    let ahead = places_ahead(tr.before.queue(*resource), ticket.as_ref(), t);
                    let shared_ahead = ahead.iter().filter(|p| p.mode == Mode::Shared).count();
                    let held_shared = held_on(tr.before, *resource, t, grace).len();
                    if *mode == Mode::Shared
                        && ahead.iter().any(|p| p.mode == Mode::Exclusive)
                        && limit.is_none_or(|m| held_shared + shared_ahead < m.get() as usize)
                    {
                        out.insert(Check::ReaderWaitsForWriter);
                    }
                }
            }
        }
        Effect::Left { had: true, .. } => out.insert(Check::LeftQueue),
        Effect::Purged {
            at,
            groups,
            removed,
        } => {
            if !removed.is_empty() {
                out.insert(Check::PurgeRemovedGroup);
            }
            if removed
                .iter()
                .any(|l| l.expires_at.is_none_or(|e| e.as_millis() > *at))
            {
                out.insert(Check::PurgeRemovedLiveLock);
            }
            if tr
                .after
                .locks()
                .any(|(_, _, l)| groups.contains(&l.lock_id) && l.created_at.as_millis() > *at)
            {
                out.insert(Check::PurgeSparedNewerLock);
            }
        }
        Effect::Delivered {
            accepted, doomed, ..
        } if !accepted || !doomed.is_empty() => out.insert(Check::StaleWriteRejected),
        Effect::Unlocked { removed, .. } if !removed.is_empty() => {
            out.insert(Check::UnlockRemovedLocks);
        }
        _ => {}
    }
}

/// A property of one step.
type StepProperty = fn(&Transition<'_>) -> bool;

/// Judges one step: which step properties it broke and which witnesses it produced.
#[must_use]
pub fn judge(tr: &Transition<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    let checks: [(Check, StepProperty); 9] = [
        (Check::SharedLimit, shared_limit),
        (Check::PurgeSafety, purge_safety),
        (Check::RenewAfterPurge, renew_after_purge),
        (Check::FenceMonotonic, fence_monotonic),
        (Check::Idempotence, idempotence),
        (Check::NoLostGrant, no_lost_grant),
        (Check::Fifo, fifo),
        (Check::NoStarvation, no_starvation),
        (Check::QueuePlaces, queue_places),
    ];
    for (check, holds) in checks {
        if !holds(tr) {
            verdict.broken.insert(check);
        }
    }
    witnesses(tr, &mut verdict.witnessed);
    verdict
}

/// **sometimes_at_shared_limit**: a resource holds as many live shared locks as the limit
/// allows (two, without a limit).
#[must_use]
pub fn at_shared_limit(model: &LockModel, state: &LockState) -> bool {
    let limit = model.config().shared_limit.map_or(2, |l| l.get() as usize);
    let now = state.store_now();
    state
        .table
        .resources()
        .values()
        .any(|r| r.shared.iter().filter(|l| live_at(l, now)).count() >= limit)
}

/// **sometimes_exclusive_contended**: a live exclusive lock on a resource while another
/// client, free to act, holds nothing there (its `xlock` is enabled and must be refused).
/// A state property rather than a refused step, so that refusals, which change nothing,
/// do not split states.
#[must_use]
pub fn exclusive_contended(_: &LockModel, state: &LockState) -> bool {
    state.locks().any(|(r, mode, l)| {
        mode == Mode::Exclusive
            && live_at(l, state.store_now())
            && state.clients.iter().enumerate().any(|(c, cs)| {
                !cs.paused && cs.beliefs[r].is_none() && *state.lock_id_of(c) != l.lock_id
            })
    })
}

/// **sometimes_renewed**: the store holds a lock that was renewed.
#[must_use]
pub fn renewed(_: &LockModel, state: &LockState) -> bool {
    state.locks().any(|(_, _, l)| l.renewed_at.is_some())
}

/// **sometimes_renew_failed_on_margin**: a client that trusts its group and is free to act
/// (so its `renew` is enabled) has a lock that is not abandoned but within the renew margin
/// of it, so the renew is refused on the margin alone. A state property, like
/// [`exclusive_contended`], because a refused renew changes nothing.
#[must_use]
pub fn renew_failed_on_margin(model: &LockModel, state: &LockState) -> bool {
    let grace = grace(model);
    let margin = u64::try_from(model.config().renew_margin.as_millis()).unwrap_or(u64::MAX);
    let now = state.store_now();
    let deadline = now.saturating_add(margin);
    state.clients.iter().enumerate().any(|(c, cs)| {
        !cs.paused
            && cs.believes_anything()
            && state.locks().any(|(_, _, l)| {
                l.lock_id == *state.lock_id_of(c)
                    && !abandoned_at(l, now, grace)
                    && abandoned_at(l, deadline, grace)
            })
    })
}

/// **sometimes_grace_blocks_takeover**: a lock has expired at the store's clock but is still
/// inside the takeover grace, while another client, free to act, holds nothing on its
/// resource (its `xlock` is enabled and refused for the grace alone). A state property,
/// because a refused grant changes nothing.
#[must_use]
pub fn grace_blocks_takeover(model: &LockModel, state: &LockState) -> bool {
    let grace = grace(model);
    let now = state.store_now();
    state.locks().any(|(r, _, l)| {
        expired_at(l, now)
            && !abandoned_at(l, now, grace)
            && state.clients.iter().enumerate().any(|(c, cs)| {
                !cs.paused && cs.beliefs[r].is_none() && *state.lock_id_of(c) != l.lock_id
            })
    })
}

/// **sometimes_trusted_until_last_ms**: a client trusts its lock in the last millisecond
/// before the lock expires, so the drift margin is not so large that it hides the boundary.
#[must_use]
pub fn trusted_until_last_ms(_: &LockModel, state: &LockState) -> bool {
    state.locks().any(|(r, _, l)| {
        parse_lock_id(&l.lock_id).is_some_and(|(c, g)| {
            state.clients[c].incarnation == g
                && state.believed(c, r).is_some()
                && l.expires_at
                    .is_some_and(|e| e.as_millis() == state.store_now() + 1)
        })
    })
}

/// **sometimes_lock_outlived_belief**: a live lock stays in the store while its owner no
/// longer believes it holds it (its trust ran out, or it crashed).
#[must_use]
pub fn lock_outlived_belief(_: &LockModel, state: &LockState) -> bool {
    state.locks().any(|(r, _, l)| {
        live_at(l, state.store_now())
            && parse_lock_id(&l.lock_id).is_some_and(|(c, g)| {
                state.clients[c].incarnation != g || state.believed(c, r).is_none()
            })
    })
}

/// **sometimes_two_waiters**: a queue holds two live places.
#[must_use]
pub fn two_waiters(_: &LockModel, state: &LockState) -> bool {
    let now = state.store_now();
    state
        .table
        .resources()
        .values()
        .any(|r| r.queue.iter().filter(|p| place_live(p, now)).count() >= 2)
}

/// Whether the last step kept the step property `check`.
fn kept(state: &LockState, check: Check) -> bool {
    !state.last.broken.contains(check)
}

/// Whether the last step witnessed `check`.
fn saw(state: &LockState, check: Check) -> bool {
    state.last.witnessed.contains(check)
}

type M = LockModel;
type S = LockState;

/// `Property::always(name, ...)` that the last step kept the step property `Check::$check`
/// (stateright takes plain functions, so each check gets its own closure).
macro_rules! always_kept {
    ($name:literal, $check:ident) => {
        Property::always($name, |_: &M, s: &S| kept(s, Check::$check))
    };
}

/// `Property::sometimes(name, ...)` that some step witnessed `Check::$check`.
macro_rules! sometimes_saw {
    ($name:literal, $check:ident) => {
        Property::sometimes($name, |_: &M, s: &S| saw(s, Check::$check))
    };
}

/// Every property for `config`, `always` ones first. The `sometimes` ones about downstream
/// writes, groups spanning resources, the takeover grace, a store clock that goes back or
/// a purge's creation rule are left out when the configuration has no writes, a single
/// resource, no grace, no failovers or a purge that checks its groups again.
#[must_use]
pub fn properties(config: &Config) -> Vec<Property<LockModel>> {
    let mut props = vec![
        Property::always("mutual_exclusion", mutual_exclusion),
        always_kept!("shared_limit", SharedLimit),
        always_kept!("purge_safety", PurgeSafety),
        always_kept!("renew_after_purge", RenewAfterPurge),
        Property::always("holder_safety", holder_safety),
        always_kept!("fence_monotonic", FenceMonotonic),
        always_kept!("idempotence", Idempotence),
        always_kept!("no_lost_grant", NoLostGrant),
        always_kept!("fifo", Fifo),
        always_kept!("no_starvation", NoStarvation),
        always_kept!("queue_places", QueuePlaces),
        Property::sometimes("sometimes_at_shared_limit", at_shared_limit),
        Property::sometimes("sometimes_exclusive_contended", exclusive_contended),
        sometimes_saw!("sometimes_takeover_after_expiry", TakeoverAfterExpiry),
        sometimes_saw!("sometimes_purge_removed_group", PurgeRemovedGroup),
        Property::sometimes("sometimes_renewed", renewed),
        Property::sometimes("sometimes_renew_failed_on_margin", renew_failed_on_margin),
        Property::sometimes("sometimes_trusted_until_last_ms", trusted_until_last_ms),
        sometimes_saw!("sometimes_fence_after_deletion", FenceAfterDeletion),
        sometimes_saw!("sometimes_unlock_removed_locks", UnlockRemovedLocks),
        Property::sometimes("sometimes_lock_outlived_belief", lock_outlived_belief),
    ];
    // A lock of a purged group created after the purge began: its client took it after
    // unlocking the group's abandoned lock (clients add to a group they do not trust only
    // once it holds nothing). A purge that checks its groups again then finds the group
    // holds no abandoned lock, and leaves it alone whatever its locks' creation.
    if !config.purge_rechecks {
        props.push(sometimes_saw!(
            "sometimes_purge_spared_newer_lock",
            PurgeSparedNewerLock
        ));
    }
    if config.resources > 1 {
        props.push(sometimes_saw!(
            "sometimes_purge_removed_live_lock",
            PurgeRemovedLiveLock
        ));
    }
    if config.writes {
        props.push(sometimes_saw!(
            "sometimes_stale_write_rejected",
            StaleWriteRejected
        ));
    }
    if config.grace_ms() > 0 {
        props.push(Property::sometimes(
            "sometimes_grace_blocks_takeover",
            grace_blocks_takeover,
        ));
    }
    if config.has_failovers() {
        props.push(sometimes_saw!(
            "sometimes_grant_after_clock_back",
            GrantAfterClockBack
        ));
    }
    if config.fair {
        props.extend([
            sometimes_saw!("sometimes_queue_held_back", QueueHeldBack),
            sometimes_saw!("sometimes_reader_waits_for_writer", ReaderWaitsForWriter),
            sometimes_saw!("sometimes_grant_past_lapsed_place", GrantPastLapsedPlace),
            sometimes_saw!("sometimes_waiter_granted", WaiterGranted),
            sometimes_saw!("sometimes_left_queue", LeftQueue),
            Property::sometimes("sometimes_two_waiters", two_waiters),
        ]);
    }
    props
}

/// The names of the `always` properties.
pub const ALWAYS: [&str; 11] = [
    "mutual_exclusion",
    "shared_limit",
    "purge_safety",
    "renew_after_purge",
    "holder_safety",
    "fence_monotonic",
    "idempotence",
    "no_lost_grant",
    "fifo",
    "no_starvation",
    "queue_places",
];
