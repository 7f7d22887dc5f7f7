//! Deliberately broken variants of the rules, to show that the checks catch bugs.
//!
//! Each [`Mutant`] breaks one rule of the engine. A store with a copy of the rules of its own
//! (MongoDB's server-side pipelines) keeps a catalogue of its own mutants, switched on by
//! name through the same switch ([`activate_named`], [`named_active`]), so the engine names
//! no store. They exist only to be switched on by the verification
//! harnesses (model checker, differential, loom, linearizability and conformance tests),
//! which must each kill some mutants, and together kill all of them: see the kill matrix in
//! docs/verification.md. They exist only in builds with `--cfg lockwright_mutants` (as
//! loom's checks need `--cfg loom`): this module is public only there, and that cfg refuses
//! to compile without debug assertions, so no release build can carry a mutant. In every other build
//! the module is private and [`active`] is a constant `false` that compiles away.

// Outside mutant builds only `active` is called (by the rules), and only with `false`.
#![cfg_attr(not(lockwright_mutants), allow(dead_code))]

#[cfg(all(lockwright_mutants, not(debug_assertions)))]
compile_error!(
    "`--cfg lockwright_mutants` is for test builds only: it must not be set in a build without \
     debug assertions (a release build)"
);

/// One broken rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Mutant {
    /// Purge removes only the expired locks, not their whole group.
    PurgeIgnoresGroups,
    /// Purge also removes locks created after it began.
    PurgeIgnoresCreatedBefore,
    /// Renew ignores the margin: a lock about to expire is renewed.
    RenewWithoutMargin,
    /// A shared grant ignores the limit.
    SharedIgnoresLimit,
    /// An exclusive grant ignores live shared locks.
    ExclusiveIgnoresShared,
    /// Locks count as abandoned one millisecond early, so a held lock is taken over.
    TakeoverUnexpired,
    /// Expired locks are taken over (and purged) at once, without the takeover grace.
    TakeoverIgnoresGrace,
    /// A grant reuses the resource's last fence instead of a greater one.
    FenceNotIncremented,
    /// A status filter's `ttl_lt` overwrites its `ttl_gte` (square/mongo-lock's bug).
    StatusTtlBoundOverwritten,
    /// A holder trusts its lock until `sent + ttl`, without the drift margin.
    HolderWithoutMargin,
    /// The Locker hands out a grant whose reply arrived after its trust deadline.
    LockerHandsOutStaleGrant,
    /// The Locker does not signal a lost lock: its holder keeps working.
    LockerLossNotSignalled,
    /// The Locker schedules each renewal at the TTL, after the trust deadline.
    LockerRenewAfterDeadline,
    /// The Locker does not release a lock id whose lock request had an unknown outcome.
    LockerNoReleaseAfterUnknown,
    /// The Locker gives a release up after its first failed attempt.
    LockerReleaseNotRetried,
    /// A release is answered as done without reaching the store (`Request::send_to`).
    LockerReleaseNotSent,
    /// A waiting acquire ignores the store's hints: it learns of a release only by polling.
    LockerIgnoresHints,
    /// A waiting acquire ignores when the store said the locks in its way end: it asks
    /// again only on its backoff.
    LockerIgnoresRetryIn,
    /// A fair waiter that knows its line's pace stops listening even at the head of the
    /// line: a handoff reaches it only with the write that keeps its place.
    LockerHeadStopsListening,
    /// A waiter that hears that the store handed its place the lock trusts the grant from
    /// when the hint arrived, not from when its last refusal was sent (the handoff may be
    /// older than the hint by the hint's delay).
    LockerTrustsWakeOnArrival,
    /// A waiter trusts a wake that says its place was handed the lock while a request of
    /// its own is in flight (whose reply, which may predate the handoff, should decide).
    LockerTrustsWakeInFlight,
    /// A waiter trusts a wake's grant whatever its fence: a late wake of a handoff it never
    /// claimed, from before its last refusal, is taken for a new one.
    LockerTrustsWakeOfOldFence,
    /// A waiter trusts a wake's grant for its acquire's TTL, not the claim lease the store
    /// handed it for.
    LockerTrustsWakeForTtl,
    /// Grants ignore the queue: a request overtakes the waiters ahead of it.
    QueueIgnored,
    /// A shared request overtakes a waiting writer (no writer preference).
    SharedOvertakesWriter,
    /// A waiter's place never lapses: a dead waiter blocks the queue forever.
    QueueDeadEntryBlocks,
    /// A grant leaves the winner's place in the queue.
    GrantLeavesEntry,
    /// The store hands the lock to the first place, live or not: a dead waiter is handed
    /// the lock, and the live ones wait out its claim lease.
    HandoffToDeadPlace,
    /// A live place counts and is handed the lock however long ago its waiter last asked:
    /// a waiter far back that died is handed the lock once the line reaches it, and the
    /// live ones wait out its claim lease, one such place after another.
    StalePlaceCounts,
    /// The store hands the lock to the first place it would grant, past a live place
    /// ahead that conflicts with the lock in the way.
    HandoffPastConflict,
    /// A handed lock's claim lease starts when its waiter took its place, not at the
    /// handoff: a waiter that waited long is handed a lock already expired.
    ClaimLeaseFromQueuedAt,
    /// A claim revives a handed lock whose claim lease and grace are over, before the store
    /// hands it to the next live waiter.
    ClaimRevivesLapsed,
    /// A release (a leader's resign) hands the lock to nobody: its place is left empty, and
    /// the next live waiter in line gets it only when it asks again.
    ResignLeavesPlace,
    /// A proclaim sets the comment of the resource's lock whoever holds it: a deposed
    /// leader's late proclaim changes the value of the leader that replaced it.
    ProclaimChangesHolder,
    /// An observer reports every leader whose fence differs from the last one reported: a
    /// read that lags reports a stale leader after its successor.
    ObserveReportsStaleLeader,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 35] = [
        Mutant::PurgeIgnoresGroups,
        Mutant::PurgeIgnoresCreatedBefore,
        Mutant::RenewWithoutMargin,
        Mutant::SharedIgnoresLimit,
        Mutant::ExclusiveIgnoresShared,
        Mutant::TakeoverUnexpired,
        Mutant::TakeoverIgnoresGrace,
        Mutant::FenceNotIncremented,
        Mutant::StatusTtlBoundOverwritten,
        Mutant::HolderWithoutMargin,
        Mutant::LockerHandsOutStaleGrant,
        Mutant::LockerLossNotSignalled,
        Mutant::LockerRenewAfterDeadline,
        Mutant::LockerNoReleaseAfterUnknown,
        Mutant::LockerReleaseNotRetried,
        Mutant::LockerReleaseNotSent,
        Mutant::LockerIgnoresHints,
        Mutant::LockerIgnoresRetryIn,
        Mutant::LockerHeadStopsListening,
        Mutant::LockerTrustsWakeOnArrival,
        Mutant::LockerTrustsWakeInFlight,
        Mutant::LockerTrustsWakeOfOldFence,
        Mutant::LockerTrustsWakeForTtl,
        Mutant::QueueIgnored,
        Mutant::SharedOvertakesWriter,
        Mutant::QueueDeadEntryBlocks,
        Mutant::GrantLeavesEntry,
        Mutant::HandoffToDeadPlace,
        Mutant::StalePlaceCounts,
        Mutant::HandoffPastConflict,
        Mutant::ClaimLeaseFromQueuedAt,
        Mutant::ClaimRevivesLapsed,
        Mutant::ResignLeavesPlace,
        Mutant::ProclaimChangesHolder,
        Mutant::ObserveReportsStaleLeader,
    ];

    /// The mutant's name in snake case, as harnesses and the kill matrix spell it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mutant::PurgeIgnoresGroups => "purge_ignores_groups",
            Mutant::PurgeIgnoresCreatedBefore => "purge_ignores_created_before",
            Mutant::RenewWithoutMargin => "renew_without_margin",
            Mutant::SharedIgnoresLimit => "shared_ignores_limit",
            Mutant::ExclusiveIgnoresShared => "exclusive_ignores_shared",
            Mutant::TakeoverUnexpired => "takeover_unexpired",
            Mutant::TakeoverIgnoresGrace => "takeover_ignores_grace",
            Mutant::FenceNotIncremented => "fence_not_incremented",
            Mutant::StatusTtlBoundOverwritten => "status_ttl_bound_overwritten",
            Mutant::HolderWithoutMargin => "holder_without_margin",
            Mutant::LockerHandsOutStaleGrant => "locker_hands_out_stale_grant",
            Mutant::LockerLossNotSignalled => "locker_loss_not_signalled",
            Mutant::LockerRenewAfterDeadline => "locker_renew_after_deadline",
            Mutant::LockerNoReleaseAfterUnknown => "locker_no_release_after_unknown",
            Mutant::LockerReleaseNotRetried => "locker_release_not_retried",
            Mutant::LockerReleaseNotSent => "locker_release_not_sent",
            Mutant::LockerIgnoresHints => "locker_ignores_hints",
            Mutant::LockerIgnoresRetryIn => "locker_ignores_retry_in",
            Mutant::LockerHeadStopsListening => "locker_head_stops_listening",
            Mutant::LockerTrustsWakeOnArrival => "locker_trusts_wake_on_arrival",
            Mutant::LockerTrustsWakeInFlight => "locker_trusts_wake_in_flight",
            Mutant::LockerTrustsWakeOfOldFence => "locker_trusts_wake_of_old_fence",
            Mutant::LockerTrustsWakeForTtl => "locker_trusts_wake_for_ttl",
            Mutant::QueueIgnored => "queue_ignored",
            Mutant::SharedOvertakesWriter => "shared_overtakes_writer",
            Mutant::QueueDeadEntryBlocks => "queue_dead_entry_blocks",
            Mutant::GrantLeavesEntry => "grant_leaves_entry",
            Mutant::HandoffToDeadPlace => "handoff_to_dead_place",
            Mutant::StalePlaceCounts => "stale_place_counts",
            Mutant::HandoffPastConflict => "handoff_past_conflict",
            Mutant::ClaimLeaseFromQueuedAt => "claim_lease_from_queued_at",
            Mutant::ClaimRevivesLapsed => "claim_revives_lapsed",
            Mutant::ResignLeavesPlace => "resign_leaves_place",
            Mutant::ProclaimChangesHolder => "proclaim_changes_holder",
            Mutant::ObserveReportsStaleLeader => "observe_reports_stale_leader",
        }
    }

    /// The mutant called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the mutant breaks the Locker's state machine ([`crate::locker`]), which
    /// the simulator drives.
    #[must_use]
    pub fn is_locker(self) -> bool {
        matches!(
            self,
            Mutant::LockerHandsOutStaleGrant
                | Mutant::LockerLossNotSignalled
                | Mutant::LockerRenewAfterDeadline
                | Mutant::LockerNoReleaseAfterUnknown
                | Mutant::LockerReleaseNotRetried
                | Mutant::LockerReleaseNotSent
                | Mutant::LockerIgnoresHints
                | Mutant::LockerIgnoresRetryIn
                | Mutant::LockerHeadStopsListening
                | Mutant::LockerTrustsWakeOnArrival
                | Mutant::LockerTrustsWakeInFlight
                | Mutant::LockerTrustsWakeOfOldFence
                | Mutant::LockerTrustsWakeForTtl
        )
    }

    /// Whether the mutant breaks the rule by which a waiter trusts a lock a wake handed it
    /// ([`crate::trust::trust_wake`]), which the Locker runs (in the simulator and on a
    /// real server) and the model's waiters too.
    #[must_use]
    pub fn is_wake(self) -> bool {
        matches!(
            self,
            Mutant::LockerTrustsWakeOnArrival
                | Mutant::LockerTrustsWakeInFlight
                | Mutant::LockerTrustsWakeOfOldFence
                | Mutant::LockerTrustsWakeForTtl
        )
    }

    /// Whether the mutant breaks the rules of fair requests' queue ([`crate::queue`]): only
    /// the harnesses that make fair requests run that code.
    #[must_use]
    pub fn is_queue(self) -> bool {
        matches!(
            self,
            Mutant::QueueIgnored
                | Mutant::SharedOvertakesWriter
                | Mutant::QueueDeadEntryBlocks
                | Mutant::GrantLeavesEntry
                | Mutant::HandoffToDeadPlace
                | Mutant::StalePlaceCounts
                | Mutant::HandoffPastConflict
                | Mutant::ClaimLeaseFromQueuedAt
                | Mutant::ClaimRevivesLapsed
                | Mutant::ResignLeavesPlace
        )
    }

    /// Whether the mutant breaks a rule of leader election that only elections run: a
    /// proclaim ([`crate::LockTable::set_comment`]) or an observer
    /// ([`crate::election::Observer`]).
    #[must_use]
    pub fn is_election(self) -> bool {
        matches!(
            self,
            Mutant::ProclaimChangesHolder | Mutant::ObserveReportsStaleLeader
        )
    }

    /// Whether the mutant breaks the status filter's TTL bounds ([`crate::filter`]), which
    /// only the harnesses that read status with TTL bounds run (conformance, differential).
    #[must_use]
    pub fn is_status(self) -> bool {
        matches!(self, Mutant::StatusTtlBoundOverwritten)
    }

    /// Whether the mutant breaks the holding rule ([`crate::trust`]), which only a client
    /// that holds locks runs (the Locker, and the model's clients), never a store.
    #[must_use]
    pub fn is_holding(self) -> bool {
        matches!(self, Mutant::HolderWithoutMargin)
    }

    /// Whether the model checker models the rule this mutant breaks (the status filter is
    /// not modelled, the model runs the engine's lock rules and the wake rule, not the rest
    /// of the Locker, and its waiters never change their request).
    #[must_use]
    pub fn is_modelled(self) -> bool {
        // A grant from a place of the request's own happens only to a waiter that changed
        // its request between attempts (the store hands the lock to a waiter at the head
        // that asks as it did): the model's waiters never do.
        // Its places are kept with their claim lease as their lease, so a live place is
        // always fresh: a stale place is not modelled.
        // Its waiters' requests are answered in the step that sends them: none is ever in
        // flight when a wake arrives.
        if self.is_wake() {
            return self != Mutant::LockerTrustsWakeInFlight;
        }
        !matches!(
            self,
            Mutant::StatusTtlBoundOverwritten | Mutant::GrantLeavesEntry | Mutant::StalePlaceCounts
        ) && !self.is_locker()
    }

    fn code(self) -> u8 {
        // The position in ALL, plus one (zero means "none"); ALL has fewer than 255 entries.
        Mutant::ALL
            .iter()
            .position(|m| *m == self)
            .map_or(0, |i| i as u8 + 1)
    }
}

#[cfg(lockwright_mutants)]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Switches `mutant` of the engine's catalogue on for the whole process, and any other
/// catalogue's off (`None`: the real rules).
#[cfg(lockwright_mutants)]
pub fn activate(mutant: Option<Mutant>) {
    ACTIVE.store(
        mutant.map_or(0, Mutant::code),
        std::sync::atomic::Ordering::SeqCst,
    );
    *NAMED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// The mutant switched on, if any.
#[must_use]
pub fn current() -> Option<Mutant> {
    #[cfg(lockwright_mutants)]
    {
        let code = ACTIVE.load(std::sync::atomic::Ordering::Relaxed);
        Mutant::ALL.into_iter().find(|m| m.code() == code)
    }
    #[cfg(not(lockwright_mutants))]
    {
        None
    }
}

/// Whether `mutant` is switched on. Always `false` outside mutant builds.
#[inline]
#[must_use]
pub fn active(mutant: Mutant) -> bool {
    #[cfg(lockwright_mutants)]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == mutant.code()
    }
    #[cfg(not(lockwright_mutants))]
    {
        let _ = mutant;
        false
    }
}

/// The mutant of another crate's catalogue (a store's) switched on, by name.
#[cfg(lockwright_mutants)]
static NAMED: std::sync::RwLock<Option<&'static str>> = std::sync::RwLock::new(None);

/// Whether the mutant called `name` in another crate's catalogue is switched on. Always
/// `false` outside mutant builds.
#[must_use]
pub fn named_active(name: &str) -> bool {
    #[cfg(lockwright_mutants)]
    {
        NAMED
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|on| on == name)
    }
    #[cfg(not(lockwright_mutants))]
    {
        let _ = name;
        false
    }
}

/// Switches on the mutant called `name`, of the engine's catalogue or of `others` (another
/// crate's), for the whole process; `None`: the real rules. Returns its name.
///
/// # Panics
/// When `name` is in neither catalogue: a typo must not silently test the real rules.
#[cfg(lockwright_mutants)]
pub fn activate_named(name: Option<&str>, others: &[&'static str]) -> Option<&'static str> {
    let engine = name.and_then(Mutant::from_name);
    let other = name.and_then(|n| others.iter().copied().find(|o| *o == n));
    if let Some(name) = name
        && engine.is_none()
        && other.is_none()
    {
        let known: Vec<&str> = Mutant::ALL
            .iter()
            .map(|m| m.name())
            .chain(others.iter().copied())
            .collect();
        panic!(
            "{ENV_VAR}={name} names no mutant; known: {}",
            known.join(", ")
        );
    }
    activate(engine);
    if other.is_some() {
        *NAMED
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = other;
    }
    engine.map(Mutant::name).or(other)
}

/// The environment variable the harnesses read to pick a mutant.
pub const ENV_VAR: &str = "LOCKWRIGHT_MUTANT";

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT` (none when unset), of the engine's
/// catalogue or of `others`. Every harness calls this first (a harness that runs a store
/// with a catalogue of its own, through that store's function, which passes it); the
/// kill-matrix script sets the variable. This is the one place the engine reads its
/// environment, and it exists only in mutant builds.
///
/// # Panics
/// When the variable names no mutant: a typo must not silently test the real rules.
#[cfg(lockwright_mutants)]
pub fn activate_from_env_with(others: &[&'static str]) -> Option<&'static str> {
    let name = std::env::var(ENV_VAR).ok().filter(|v| !v.is_empty());
    activate_named(name.as_deref(), others)
}

/// [`activate_from_env_with`] the engine's catalogue alone.
///
/// # Panics
/// When the variable names no mutant of the engine.
#[cfg(lockwright_mutants)]
pub fn activate_from_env() -> Option<Mutant> {
    activate_from_env_with(&[]).and_then(Mutant::from_name)
}
