//! The election's properties: a proclaim changes only its own leader's value
//! ([`proclaim_keeps_holder`]), and an observer never reports a fence at or below one it
//! reported ([`observer_monotonic`]). That at most one candidate trusts it leads is
//! `holder_safety`, that fences increase `fence_monotonic`, and that a live candidate is
//! eventually leader while leaders keep resigning `no_starvation` with `fifo`,
//! `queue_places` and `handoff`: a candidate is a client with fair exclusive requests.

use crate::action::Effect;
use crate::model::LockModel;
use crate::props::Transition;
use crate::state::value_word;
use crate::state::{LockState, parse_lock_id};
use crate::verdict::{Check, PropSet};

/// **proclaim_keeps_holder**: every lock of a candidate's current lock id carries that
/// candidate's own value: the one it campaigned with, or the last one a proclaim of its
/// set. A proclaim by whoever does not hold the lock (a deposed leader's, arriving late)
/// changes nobody's value. Locks without a comment (outside elections) are not judged.
#[must_use]
pub fn proclaim_keeps_holder(_: &LockModel, state: &LockState) -> bool {
    state.locks().all(|(_, _, lock)| {
        let Some(comment) = &lock.holder.comment else {
            return true;
        };
        match parse_lock_id(&lock.lock_id) {
            Some((c, g)) if state.clients[c].incarnation == g => {
                comment == value_word(state.clients[c].value)
            }
            _ => true,
        }
    })
}

/// **observer_monotonic**: a leader the observer reports has a fence above every fence it
/// reported before, however its reads come back.
#[must_use]
pub fn observer_monotonic(tr: &Transition<'_>) -> bool {
    match tr.effect {
        Effect::Observed {
            reported: Some(leader),
            highest_before,
            ..
        } => highest_before.is_none_or(|h| leader.fence > h),
        _ => true,
    }
}

/// The election's witnesses: a proclaim the store took, a late one it refused while
/// another candidate led, and a read that came back after a newer one (which the observer
/// must not report).
pub(super) fn witnesses(tr: &Transition<'_>, out: &mut PropSet) {
    match tr.effect {
        Effect::Proclaimed { outcome: Ok(_), .. } => out.insert(Check::Proclaimed),
        Effect::Proclaimed {
            outcome: Err(_), ..
        } if tr.before.locks().any(|(r, _, l)| {
            r == 0
                && tr
                    .action
                    .client()
                    .is_some_and(|c| tr.before.lock_id_of(c) != &l.lock_id)
        }) =>
        {
            out.insert(Check::LateProclaimRefused);
        }
        Effect::Observed {
            read: Some(leader),
            highest_before: Some(h),
            ..
        } if leader.fence < *h => out.insert(Check::StaleReadSkipped),
        _ => {}
    }
}
