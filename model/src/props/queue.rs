//! The properties of the queue of fair requests, all of a step: `fifo` (no grant past a
//! live conflicting place ahead), `no_starvation` (the bounded form of "every waiter that
//! keeps asking is eventually granted") and `queue_places` (every queue is what the rules
//! make of it).

use lockwright_engine::{Mode, QueueEntry, Timestamp};

use crate::action::Effect;
use crate::props::rules::{
    Transition, grace, limit_of, locks_let_through, place_live, places_ahead, queue_lets_through,
};

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
