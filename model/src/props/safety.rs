//! The safety properties of the lock rules: `mutual_exclusion` and `holder_safety` (of a
//! state), and `shared_limit`, `purge_safety`, `renew_after_purge`, `fence_monotonic`,
//! `idempotence` and `no_lost_grant` (of a step).

use std::collections::BTreeSet;

use lockwright_engine::table::purge;
use lockwright_engine::{Mode, StoredLock, Timestamp};

use crate::action::{Effect, status_key};
use crate::model::LockModel;
use crate::props::rules::{Transition, abandoned_at, abandoned_groups_at, grace};
use crate::state::{LockKey, LockState};

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

/// **purge_safety**: a purge at `t` works on exactly the groups with a lock abandoned at `t`
/// (expired for at least the takeover grace; so no other group loses a lock), or, when it
/// checks them again as it finishes
/// ([`Config::purge_rechecks`](crate::Config::purge_rechecks)), on those of them that
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
            // The locks the purge handed to heads of queues are judged by `handoff`.
            let kept: BTreeSet<LockKey> = tr
                .after
                .lock_keys()
                .intersection(&before)
                .cloned()
                .collect();
            *groups == expected
                && removed == doomed
                && kept == survivors
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
/// before on the resource (across unlock, purge and deletion of the resource's document),
/// and a claim keeps the fence of the lock it claims (handed locks are judged by
/// `handoff`);
/// the fenced downstream store accepts a write only if its fence is at least the highest it
/// accepted, and its highest accepted fence never goes down.
#[must_use]
pub fn fence_monotonic(tr: &Transition<'_>) -> bool {
    match tr.effect {
        // A claim renews a lock granted (or handed over) before, keeping its fence.
        Effect::Granted {
            resource, status, ..
        } if super::queue::is_claim(tr) => tr.before.locks().any(|(r, m, l)| {
            r == *resource
                && m == status.mode
                && l.lock_id == status.lock_id
                && l.fence == status.fence
        }),
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
/// on its resource, or a handoff to the head of its resource's queue, takes it over once it
/// is abandoned (expired for at least the takeover grace).
#[must_use]
pub fn no_lost_grant(tr: &Transition<'_>) -> bool {
    if tr.after.table == tr.before.table {
        return true;
    }
    let after = tr.after.lock_keys();
    let t = super::queue::write_instant(tr);
    tr.before
        .locks()
        .filter(|(r, m, l)| !after.contains(&LockKey::of(*r, *m, l)))
        .all(|(r, _, l)| {
            let handed_over = !super::queue::new_locks(tr, r).is_empty();
            (handed_over && abandoned_at(l, t, grace(tr.model)))
                || match tr.effect {
                    Effect::Unlocked { lock_id, .. } => &l.lock_id == lock_id,
                    Effect::Purged { at, groups, .. } => {
                        groups.contains(&l.lock_id) && l.created_at.as_millis() <= *at
                    }
                    Effect::Granted { resource, .. } => {
                        *resource == r && abandoned_at(l, tr.before.store_now(), grace(tr.model))
                    }
                    _ => false,
                }
        })
}
