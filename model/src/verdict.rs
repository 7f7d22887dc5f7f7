//! What one step of the model is judged to have done: which step properties it broke and
//! which step witnesses it produced ([`Check`]), as small sets ([`PropSet`]) kept in the
//! state it leads to ([`Verdict`], where stateright's `always` and `sometimes` see them).
//! The judging itself is [`crate::props::judge`]; this module only names the checks, so
//! that the state can hold a verdict without depending on the properties.

use std::fmt;

/// The step properties and the step witnesses, as bits of a [`PropSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Check {
    /// [`shared_limit`](crate::props::shared_limit) was broken.
    SharedLimit,
    /// [`purge_safety`](crate::props::purge_safety) was broken.
    PurgeSafety,
    /// [`renew_after_purge`](crate::props::renew_after_purge) was broken.
    RenewAfterPurge,
    /// [`fence_monotonic`](crate::props::fence_monotonic) was broken.
    FenceMonotonic,
    /// [`idempotence`](crate::props::idempotence) was broken.
    Idempotence,
    /// [`no_lost_grant`](crate::props::no_lost_grant) was broken.
    NoLostGrant,
    /// A grant took over another group's expired lock.
    TakeoverAfterExpiry,
    /// A purge removed at least one lock.
    PurgeRemovedGroup,
    /// A purge removed a lock that was live at the purge instant, because its group had an
    /// expired lock (group semantics at work).
    PurgeRemovedLiveLock,
    /// A purge spared a lock of a purged group because it was created after the purge began.
    PurgeSparedNewerLock,
    /// A grant on a resource whose empty document a purge had deleted.
    FenceAfterDeletion,
    /// The downstream store rejected a stale fence.
    StaleWriteRejected,
    /// An unlock removed at least one lock.
    UnlockRemovedLocks,
    /// A grant took its fence from the fence clock while the store's clock read below it
    /// (after a failover took the store's clock back).
    GrantAfterClockBack,
    /// [`fifo`](crate::props::fifo) was broken.
    Fifo,
    /// [`no_starvation`](crate::props::no_starvation) was broken.
    NoStarvation,
    /// [`queue_places`](crate::props::queue_places) was broken.
    QueuePlaces,
    /// A request the locks alone would let through was refused for a live place ahead.
    QueueHeldBack,
    /// A shared request the locks and the shared places alone would let through was
    /// refused for a live exclusive place ahead (writer preference).
    ReaderWaitsForWriter,
    /// A grant went past a lapsed place of another waiter, which would have been in its way.
    GrantPastLapsedPlace,
    /// A fair request was granted from a live place of its own.
    WaiterGranted,
    /// A waiter left the queue, removing its place.
    LeftQueue,
    /// [`handoff`](crate::props::handoff) was broken.
    Handoff,
    /// A write handed the lock to the head of a queue.
    HandedOver,
    /// A waiter claimed a lock handed to it.
    ClaimedHandoff,
    /// [`observer_monotonic`](crate::props::observer_monotonic) was broken.
    ObserverMonotonic,
    /// A proclaim set its leader's value.
    Proclaimed,
    /// A proclaim by a candidate that does not hold the lock was refused while another
    /// one held it.
    LateProclaimRefused,
    /// An observer's read came back naming a leader older than one it reported.
    StaleReadSkipped,
    /// A waiter heard a wake and trusted the lock it carried.
    HeldOnWake,
    /// A waiter heard a wake that the rule did not let it trust (late, old, or too short).
    WakeOnlyWoke,
}

impl Check {
    /// Every check, in bit order.
    pub const ALL: [Check; 31] = [
        Check::SharedLimit,
        Check::PurgeSafety,
        Check::RenewAfterPurge,
        Check::FenceMonotonic,
        Check::Idempotence,
        Check::NoLostGrant,
        Check::TakeoverAfterExpiry,
        Check::PurgeRemovedGroup,
        Check::PurgeRemovedLiveLock,
        Check::PurgeSparedNewerLock,
        Check::FenceAfterDeletion,
        Check::StaleWriteRejected,
        Check::UnlockRemovedLocks,
        Check::GrantAfterClockBack,
        Check::Fifo,
        Check::NoStarvation,
        Check::QueuePlaces,
        Check::QueueHeldBack,
        Check::ReaderWaitsForWriter,
        Check::GrantPastLapsedPlace,
        Check::WaiterGranted,
        Check::LeftQueue,
        Check::Handoff,
        Check::HandedOver,
        Check::ClaimedHandoff,
        Check::ObserverMonotonic,
        Check::Proclaimed,
        Check::LateProclaimRefused,
        Check::StaleReadSkipped,
        Check::HeldOnWake,
        Check::WakeOnlyWoke,
    ];

    /// The property name this check stands for.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Check::SharedLimit => "shared_limit",
            Check::PurgeSafety => "purge_safety",
            Check::RenewAfterPurge => "renew_after_purge",
            Check::FenceMonotonic => "fence_monotonic",
            Check::Idempotence => "idempotence",
            Check::NoLostGrant => "no_lost_grant",
            Check::TakeoverAfterExpiry => "sometimes_takeover_after_expiry",
            Check::PurgeRemovedGroup => "sometimes_purge_removed_group",
            Check::PurgeRemovedLiveLock => "sometimes_purge_removed_live_lock",
            Check::PurgeSparedNewerLock => "sometimes_purge_spared_newer_lock",
            Check::FenceAfterDeletion => "sometimes_fence_after_deletion",
            Check::StaleWriteRejected => "sometimes_stale_write_rejected",
            Check::UnlockRemovedLocks => "sometimes_unlock_removed_locks",
            Check::GrantAfterClockBack => "sometimes_grant_after_clock_back",
            Check::Fifo => "fifo",
            Check::NoStarvation => "no_starvation",
            Check::QueuePlaces => "queue_places",
            Check::QueueHeldBack => "sometimes_queue_held_back",
            Check::ReaderWaitsForWriter => "sometimes_reader_waits_for_writer",
            Check::GrantPastLapsedPlace => "sometimes_grant_past_lapsed_place",
            Check::WaiterGranted => "sometimes_waiter_granted",
            Check::LeftQueue => "sometimes_left_queue",
            Check::Handoff => "handoff",
            Check::HandedOver => "sometimes_handed_over",
            Check::ClaimedHandoff => "sometimes_claimed_handoff",
            Check::ObserverMonotonic => "observer_monotonic",
            Check::Proclaimed => "sometimes_proclaimed",
            Check::LateProclaimRefused => "sometimes_late_proclaim_refused",
            Check::StaleReadSkipped => "sometimes_stale_read_skipped",
            Check::HeldOnWake => "sometimes_held_on_wake",
            Check::WakeOnlyWoke => "sometimes_wake_only_woke",
        }
    }
}

/// A set of [`Check`]s.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PropSet(u32);

impl PropSet {
    /// Adds `check`.
    pub fn insert(&mut self, check: Check) {
        self.0 |= 1 << check as u8;
    }

    /// Whether `check` is in the set.
    #[must_use]
    pub fn contains(self, check: Check) -> bool {
        self.0 & (1 << check as u8) != 0
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The checks in the set.
    pub fn iter(self) -> impl Iterator<Item = Check> {
        Check::ALL.into_iter().filter(move |c| self.contains(*c))
    }
}

impl fmt::Debug for PropSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Check::name)).finish()
    }
}

impl fmt::Display for PropSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Check::name).collect();
        f.write_str(&names.join(", "))
    }
}

/// The judgement of the transition that led to a state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Verdict {
    /// The transition-judged `always` properties it broke.
    pub broken: PropSet,
    /// The transition-judged `sometimes` properties it witnessed.
    pub witnessed: PropSet,
}
