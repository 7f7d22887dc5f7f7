//! The properties the model checks, one function each.
//!
//! Some are about a state (`mutual_exclusion`, `holder_safety`): the function takes the
//! state. The others are about a step (`shared_limit`, `purge_safety`, `renew_after_purge`,
//! `fence_monotonic`, `idempotence`, `no_lost_grant`, and the queue's `fifo`,
//! `no_starvation`, `queue_places` and `handoff`): the function takes the
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
//!
//! Laid out by concern: the safety properties of the lock rules in `safety.rs`, the
//! queue's properties (with the bounded liveness one) in `queue.rs`, the `sometimes_*`
//! properties in `sometimes.rs`, and the step and the restated predicates they share in
//! `rules.rs`; this module judges a step ([`judge`]) and lists the properties
//! ([`properties`]). Each property is a public function here, under its name.

mod election;
mod queue;
mod rules;
mod safety;
mod sometimes;

use stateright::Property;

use crate::config::Config;
use crate::model::LockModel;
use crate::state::LockState;
use crate::verdict::Verdict;

pub use crate::verdict::{Check, PropSet};
pub use election::{observer_monotonic, proclaim_keeps_holder};
pub use queue::{fifo, handoff, no_starvation, queue_places};
pub use rules::{Transition, abandoned_at, expired_at, live_at, place_live, places_ahead};
pub use safety::{
    fence_monotonic, holder_safety, idempotence, mutual_exclusion, no_lost_grant, purge_safety,
    renew_after_purge, shared_limit,
};
pub use sometimes::{
    at_shared_limit, exclusive_contended, grace_blocks_takeover, lock_outlived_belief,
    renew_failed_on_margin, renewed, trusted_until_last_ms, two_waiters,
};

/// A property of one step.
type StepProperty = fn(&Transition<'_>) -> bool;

/// Judges one step: which step properties it broke and which witnesses it produced.
#[must_use]
pub fn judge(tr: &Transition<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    let checks: [(Check, StepProperty); 11] = [
        (Check::SharedLimit, shared_limit),
        (Check::PurgeSafety, purge_safety),
        (Check::RenewAfterPurge, renew_after_purge),
        (Check::FenceMonotonic, fence_monotonic),
        (Check::Idempotence, idempotence),
        (Check::NoLostGrant, no_lost_grant),
        (Check::Fifo, fifo),
        (Check::NoStarvation, no_starvation),
        (Check::QueuePlaces, queue_places),
        (Check::Handoff, handoff),
        (Check::ObserverMonotonic, observer_monotonic),
    ];
    for (check, holds) in checks {
        if !holds(tr) {
            verdict.broken.insert(check);
        }
    }
    sometimes::witnesses(tr, &mut verdict.witnessed);
    election::witnesses(tr, &mut verdict.witnessed);
    verdict
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
        always_kept!("handoff", Handoff),
        Property::always("proclaim_keeps_holder", proclaim_keeps_holder),
        always_kept!("observer_monotonic", ObserverMonotonic),
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
    // holds no abandoned lock, and leaves it alone whatever its locks' creation. (And it
    // takes 4 ms: a lock granted at 0 that expires at 3, a purge, the newer lock.)
    if !config.purge_rechecks && config.ticks >= 4 {
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
            sometimes_saw!("sometimes_handed_over", HandedOver),
            sometimes_saw!("sometimes_claimed_handoff", ClaimedHandoff),
        ]);
        // Two live places need a holder that waits for nothing: with two clients, the
        // lock of a crashed one (a release hands the lock to the first place at once).
        if config.crashes || config.clients() > 2 {
            props.push(Property::sometimes("sometimes_two_waiters", two_waiters));
        }
    }
    if config.wakes {
        props.extend([
            sometimes_saw!("sometimes_held_on_wake", HeldOnWake),
            sometimes_saw!("sometimes_wake_only_woke", WakeOnlyWoke),
        ]);
    }
    if config.election {
        // Candidates take no shared locks.
        props.retain(|p| {
            !matches!(
                p.name,
                "sometimes_at_shared_limit" | "sometimes_reader_waits_for_writer"
            )
        });
        if config.proclaims {
            props.extend([
                sometimes_saw!("sometimes_proclaimed", Proclaimed),
                sometimes_saw!("sometimes_late_proclaim_refused", LateProclaimRefused),
            ]);
        }
        if config.observer_reads >= 2 {
            props.push(sometimes_saw!(
                "sometimes_stale_read_skipped",
                StaleReadSkipped
            ));
        }
    }
    props
}

/// The names of the `always` properties.
pub const ALWAYS: [&str; 14] = [
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
    "handoff",
    "proclaim_keeps_holder",
    "observer_monotonic",
];
