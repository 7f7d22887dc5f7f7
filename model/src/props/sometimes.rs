//! The `sometimes_*` properties, which show that the situations each safety property is
//! about are reached: the witnesses a step produces ([`witnesses`], kept in the next
//! state's verdict) and the ones read off a state.

use lockwright_engine::table::fence_floor;
use lockwright_engine::{Mode, QueueEntry, Timestamp};

use crate::action::Effect;
use crate::model::LockModel;
use crate::props::rules::{
    Transition, abandoned_at, expired_at, grace, held_on, limit_of, live_at, locks_let_through,
    place_live, places_ahead,
};
use crate::state::{LockState, parse_lock_id};
use crate::verdict::{Check, PropSet};

/// The witnesses a step produces (see [`Check`]).
pub(super) fn witnesses(tr: &Transition<'_>, out: &mut PropSet) {
    if super::queue::handed_over(tr) {
        out.insert(Check::HandedOver);
    }
    if super::queue::is_claim(tr)
        && tr
            .before
            .locks()
            .any(|(_, _, l)| matches!(tr.effect, Effect::Granted { status, .. } if status.lock_id == l.lock_id && l.renewed_at.is_none()))
    {
        out.insert(Check::ClaimedHandoff);
    }
    if let Effect::HeardWake { trust_until, .. } = tr.effect {
        out.insert(if trust_until.is_some() {
            Check::HeldOnWake
        } else {
            Check::WakeOnlyWoke
        });
    }
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
