//! The properties of the queue of fair requests, all of a step: `fifo` (no grant past a
//! live conflicting place ahead), `no_starvation` (the bounded form of "every waiter that
//! keeps asking is eventually granted"), `queue_places` (every queue is what the rules
//! make of it) and `handoff` (the store hands a freed lock to the head of the line, and
//! only to it).

use std::collections::BTreeSet;

use lockwright_engine::{Handoff, Holder, LockId, Mode, QueueEntry, StoredLock, Timestamp};

use crate::action::Effect;
use crate::props::rules::{
    Transition, abandoned_at, grace, limit_of, locks_let_through, place_live, places_ahead,
    queue_lets_through,
};
use crate::state::LockState;

/// Whether the grant `tr` answered is a claim: the request's lock id held a lock of the
/// mode it asked for on the resource before the step, not abandoned at the store's clock
/// (a lock handed to its place, or granted to an earlier attempt). A claim renews that
/// lock; it is not a new grant, so the queue has nothing to say about it.
pub(super) fn is_claim(tr: &Transition<'_>) -> bool {
    let Effect::Granted {
        resource, status, ..
    } = tr.effect
    else {
        return false;
    };
    let (t, grace) = (tr.before.store_now(), grace(tr.model));
    tr.before.locks().any(|(r, m, l)| {
        r == *resource
            && m == status.mode
            && l.lock_id == status.lock_id
            && !abandoned_at(l, t, grace)
    })
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
    // A claim renews a lock that was granted (or handed over) by the rules already.
    is_claim(tr)
        || queue_lets_through(
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
/// ([`Config::ticks`](crate::Config::ticks)) and stateright's `eventually` sees only
/// paths that end (it takes a cycle or a join of paths for a continuation), so the
/// unbounded statement is not checked as such: this property and the two others are, at
/// every step.
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
    // A write that handed the lock to the head of the line first is judged by `handoff`;
    // what the request then met was the handed lock.
    if !handed_places(tr, *resource).is_empty() {
        return true;
    }
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
/// drops the lapsed places and then refreshes its own (same position, new lease, mode and freshness,
/// and the lock a handoff would grant it) or joins at the back; a grant drops the lapsed
/// places and the winner's; a leave drops the lapsed places and the leaver's; a purge
/// drops the places lapsed at its instant; and a handoff in the same write drops the
/// lapsed places and the handed ones. Nothing else touches a queue.
fn expected_queue(tr: &Transition<'_>, r: usize) -> Vec<QueueEntry> {
    let handed = handed_places(tr, r);
    let mut q = written_queue(tr, r);
    if !handed.is_empty() {
        // A handoff also drops the places that lapsed.
        let t = write_instant(tr);
        q.retain(|p| place_live(p, t) && !handed.contains(&p.ticket));
    }
    q
}

/// The queue of resource `r` after the step's own write, before any handoff.
fn written_queue(tr: &Transition<'_>, r: usize) -> Vec<QueueEntry> {
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
            let config = tr.model.config();
            let lapses = Timestamp::from_millis(now + config.queue_ttl_ms());
            // The place records the request's lock for a handoff (a candidate's with its
            // value).
            let handoff = tr.action.client().map(|c| {
                let mut holder = Holder::default();
                if config.election {
                    let value = crate::state::value_word(tr.before.clients[c].value);
                    holder.comment = Some(value.to_owned());
                }
                Handoff::new(
                    tr.before.lock_id_of(c).clone(),
                    holder,
                    limit_of(tr.model, *mode),
                    config.queue_ttl,
                )
            });
            match q.iter_mut().find(|p| &p.ticket == ticket) {
                Some(p) => {
                    *p = QueueEntry::new(ticket.clone(), *mode, p.queued_at, lapses)
                        .with_fresh_until(Some(lapses))
                        .with_handoff(handoff);
                }
                None => q.push(
                    QueueEntry::new(ticket.clone(), *mode, Timestamp::from_millis(now), lapses)
                        .with_fresh_until(Some(lapses))
                        .with_handoff(handoff),
                ),
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
        // A release also gives up the lock id's places where it held a lock.
        Effect::Unlocked { lock_id, removed } => {
            let released_here = removed
                .iter()
                .any(|l| l.resource == *crate::state::resource(r));
            let mut q = before.to_vec();
            if released_here {
                q.retain(|p| p.handoff.as_ref().is_none_or(|h| &h.lock_id != lock_id));
            }
            q
        }
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

/// The instant a step's writes happen at: the purge's own for a purge, the store's clock
/// for every other write.
pub(super) fn write_instant(tr: &Transition<'_>) -> u64 {
    match tr.effect {
        Effect::Purged { at, .. } => *at,
        _ => tr.before.store_now(),
    }
}

/// The locks of resource `r` in `state`, with their modes.
fn locks_on(state: &LockState, r: usize) -> Vec<(Mode, &StoredLock)> {
    state
        .locks()
        .filter(|(lr, _, _)| *lr == r)
        .map(|(_, m, l)| (m, l))
        .collect()
}

/// The locks of `r` that the step created other than its own grant: the handed ones.
pub(super) fn new_locks<'a>(tr: &'a Transition<'a>, r: usize) -> Vec<(Mode, &'a StoredLock)> {
    let before = locks_on(tr.before, r);
    let own = match tr.effect {
        Effect::Granted {
            resource, status, ..
        } if *resource == r => Some(&status.lock_id),
        _ => None,
    };
    locks_on(tr.after, r)
        .into_iter()
        .filter(|(m, l)| {
            Some(&l.lock_id) != own
                && !before
                    .iter()
                    .any(|(bm, bl)| bm == m && bl.lock_id == l.lock_id && bl.fence == l.fence)
        })
        .collect()
}

/// Whether the step handed a lock to a place of any queue.
pub(super) fn handed_over(tr: &Transition<'_>) -> bool {
    (0..tr.model.config().resources).any(|r| !handed_places(tr, r).is_empty())
}

/// The tickets of the places of `r` the step handed the lock to: the places of the queue
/// before the step whose recorded lock id holds a new lock after it.
fn handed_places(tr: &Transition<'_>, r: usize) -> BTreeSet<LockId> {
    let new: Vec<&LockId> = new_locks(tr, r)
        .into_iter()
        .map(|(_, l)| &l.lock_id)
        .collect();
    tr.before
        .queue(r)
        .iter()
        .filter(|p| {
            p.handoff
                .as_ref()
                .is_some_and(|h| new.contains(&&h.lock_id))
        })
        .map(|p| p.ticket.clone())
        .collect()
}

/// The resources the step wrote, where the store must hand the lock over if it can: the
/// resource of a lock request, of a leave, of every lock an unlock or purge removed, and
/// of every queue a purge dropped a dead place from.
fn written(tr: &Transition<'_>) -> BTreeSet<usize> {
    let index = |name: &lockwright_engine::Resource| {
        (0..tr.model.config().resources).find(|&r| crate::state::resource(r) == name)
    };
    match tr.effect {
        Effect::Granted { resource, .. } | Effect::Refused { resource, .. } => {
            BTreeSet::from([*resource])
        }
        Effect::Left { resource, .. } => BTreeSet::from([*resource]),
        Effect::Unlocked { removed, .. } => {
            removed.iter().filter_map(|l| index(&l.resource)).collect()
        }
        Effect::Purged { at, removed, .. } => {
            let dead = (0..tr.model.config().resources)
                .filter(|&r| tr.before.queue(r).iter().any(|p| !place_live(p, *at)));
            removed
                .iter()
                .filter_map(|l| index(&l.resource))
                .chain(dead)
                .collect()
        }
        _ => BTreeSet::new(),
    }
}

/// **handoff**: the store hands a freed lock to the head of the line, in the write that
/// frees it, and to nobody else. Judged at the write's instant `t`, on every resource:
/// - every lock the step created other than its own grant was handed to a place of the
///   queue that the step's own write left (a leave takes the leaver's place out first) that
///   recorded its lock id and mode, was live at `t`, and had no live place ahead of it that
///   was not handed the lock in the same step; the lock was
///   created at `t` and expires its place's lease after `t` (the claim lease starts at the
///   handoff), with a fence above every lock's before the step;
/// - on every resource the step wrote, the first live place left (if it records a handoff)
///   is not one the locks would let through: the store handed over all it could.
#[must_use]
pub fn handoff(tr: &Transition<'_>) -> bool {
    let t = write_instant(tr);
    let g = grace(tr.model);
    let resources = tr.model.config().resources;
    let sound = (0..resources).all(|r| {
        let handed = handed_places(tr, r);
        let queue = &written_queue(tr, r);
        let top = locks_on(tr.before, r).iter().map(|(_, l)| l.fence).max();
        let top = top.max(tr.before.fence_history[r]);
        new_locks(tr, r).into_iter().all(|(mode, lock)| {
            let Some(i) = queue.iter().position(|p| {
                p.mode == mode
                    && p.handoff
                        .as_ref()
                        .is_some_and(|h| h.lock_id == lock.lock_id)
            }) else {
                return false;
            };
            let place = &queue[i];
            let lease = place.handoff.as_ref().map_or(0, |h| h.lease.as_millis());
            place_live(place, t)
                && queue[..i]
                    .iter()
                    .all(|p| !place_live(p, t) || handed.contains(&p.ticket))
                && lock.created_at.as_millis() == t
                && lock.expires_at.map(|e| e.as_millis()) == Some(t + lease)
                && top.is_none_or(|f| lock.fence > f)
        })
    });
    let complete = written(tr).into_iter().all(|r| {
        let Some(head) = tr.after.queue(r).iter().find(|p| place_live(p, t)) else {
            return true;
        };
        let Some(h) = &head.handoff else {
            return true;
        };
        !locks_let_through(tr.after, r, head.mode, &h.lock_id, h.limit, t, g)
    });
    sound && complete
}
