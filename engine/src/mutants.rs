//! Deliberately broken variants of the rules, to show that the checks catch bugs.
//!
//! Each [`Mutant`] breaks one rule, in the engine or (the `Pipeline…` ones) in the MongoDB
//! store's server-side pipelines, which read [`active`] when they build a pipeline. They exist only to be switched on by the verification
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
    /// MongoDB's pipelines: a lock counts as expired only once `expiresAt < now`, not at
    /// `expiresAt == now`.
    PipelineExpiryStrict,
    /// MongoDB's slock pipeline ignores the limit.
    PipelineSharedIgnoresLimit,
    /// MongoDB's xlock pipeline ignores live shared locks.
    PipelineExclusiveIgnoresShared,
    /// MongoDB's xlock pipeline takes over a live exclusive lock.
    PipelineTakeoverLive,
    /// MongoDB's grant pipelines take over expired locks at once, without the takeover
    /// grace.
    PipelineTakeoverIgnoresGrace,
    /// MongoDB's grant pipelines reuse the last fence instead of a greater one.
    PipelineFenceNotIncremented,
    /// MongoDB's fence floor counts 2^21 fences a second of cluster time, not the engine's
    /// 2^22: the shipped floor expression differs from the rule.
    PipelineFenceFloorHalved,
    /// MongoDB's purge deletes documents that still hold an exclusive lock.
    PipelinePurgeDeletesHeld,
    /// MongoDB's one-lock renewal ignores the renew margin.
    PipelineRenewOneWithoutMargin,
    /// MongoDB's batch renewal renews every lock of a batch's documents, not only the
    /// locks the batch names and the engine found renewable.
    PipelineRenewManyWholeDocuments,
    /// The grant pipelines ignore the queue of fair waiters: a request overtakes them.
    PipelineQueueIgnored,
    /// The shared grant pipeline lets a reader overtake a waiting writer.
    PipelineSharedOvertakesWriter,
    /// The grant pipelines count a place whose lease ran out as a waiter ahead.
    PipelineDeadEntryBlocks,
    /// The grant pipelines leave the winner's place in the queue.
    PipelineGrantLeavesEntry,
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
    /// Grants ignore the queue: a request overtakes the waiters ahead of it.
    QueueIgnored,
    /// A shared request overtakes a waiting writer (no writer preference).
    SharedOvertakesWriter,
    /// A waiter's place never lapses: a dead waiter blocks the queue forever.
    QueueDeadEntryBlocks,
    /// A grant leaves the winner's place in the queue.
    GrantLeavesEntry,
    /// MongoDB's fenced writes to the user's collections drop the fence condition: a stale
    /// holder's write overwrites its successor's.
    FencedWriteUnconditional,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 37] = [
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
        Mutant::PipelineExpiryStrict,
        Mutant::PipelineSharedIgnoresLimit,
        Mutant::PipelineExclusiveIgnoresShared,
        Mutant::PipelineTakeoverLive,
        Mutant::PipelineTakeoverIgnoresGrace,
        Mutant::PipelineFenceNotIncremented,
        Mutant::PipelineFenceFloorHalved,
        Mutant::PipelinePurgeDeletesHeld,
        Mutant::PipelineRenewOneWithoutMargin,
        Mutant::PipelineRenewManyWholeDocuments,
        Mutant::PipelineQueueIgnored,
        Mutant::PipelineSharedOvertakesWriter,
        Mutant::PipelineDeadEntryBlocks,
        Mutant::PipelineGrantLeavesEntry,
        Mutant::LockerHandsOutStaleGrant,
        Mutant::LockerLossNotSignalled,
        Mutant::LockerRenewAfterDeadline,
        Mutant::LockerNoReleaseAfterUnknown,
        Mutant::LockerReleaseNotRetried,
        Mutant::LockerReleaseNotSent,
        Mutant::LockerIgnoresHints,
        Mutant::LockerIgnoresRetryIn,
        Mutant::QueueIgnored,
        Mutant::SharedOvertakesWriter,
        Mutant::QueueDeadEntryBlocks,
        Mutant::GrantLeavesEntry,
        Mutant::FencedWriteUnconditional,
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
            Mutant::PipelineExpiryStrict => "pipeline_expiry_strict",
            Mutant::PipelineSharedIgnoresLimit => "pipeline_shared_ignores_limit",
            Mutant::PipelineExclusiveIgnoresShared => "pipeline_exclusive_ignores_shared",
            Mutant::PipelineTakeoverLive => "pipeline_takeover_live",
            Mutant::PipelineTakeoverIgnoresGrace => "pipeline_takeover_ignores_grace",
            Mutant::PipelineFenceNotIncremented => "pipeline_fence_not_incremented",
            Mutant::PipelineFenceFloorHalved => "pipeline_fence_floor_halved",
            Mutant::PipelinePurgeDeletesHeld => "pipeline_purge_deletes_held",
            Mutant::PipelineRenewOneWithoutMargin => "pipeline_renew_one_without_margin",
            Mutant::PipelineRenewManyWholeDocuments => "pipeline_renew_many_whole_documents",
            Mutant::PipelineQueueIgnored => "pipeline_queue_ignored",
            Mutant::PipelineSharedOvertakesWriter => "pipeline_shared_overtakes_writer",
            Mutant::PipelineDeadEntryBlocks => "pipeline_dead_entry_blocks",
            Mutant::PipelineGrantLeavesEntry => "pipeline_grant_leaves_entry",
            Mutant::LockerHandsOutStaleGrant => "locker_hands_out_stale_grant",
            Mutant::LockerLossNotSignalled => "locker_loss_not_signalled",
            Mutant::LockerRenewAfterDeadline => "locker_renew_after_deadline",
            Mutant::LockerNoReleaseAfterUnknown => "locker_no_release_after_unknown",
            Mutant::LockerReleaseNotRetried => "locker_release_not_retried",
            Mutant::LockerReleaseNotSent => "locker_release_not_sent",
            Mutant::LockerIgnoresHints => "locker_ignores_hints",
            Mutant::LockerIgnoresRetryIn => "locker_ignores_retry_in",
            Mutant::QueueIgnored => "queue_ignored",
            Mutant::SharedOvertakesWriter => "shared_overtakes_writer",
            Mutant::QueueDeadEntryBlocks => "queue_dead_entry_blocks",
            Mutant::GrantLeavesEntry => "grant_leaves_entry",
            Mutant::FencedWriteUnconditional => "fenced_write_unconditional",
        }
    }

    /// The mutant called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the mutant breaks MongoDB's server-side pipelines, the store's own copy of
    /// the rules, rather than the engine.
    #[must_use]
    pub fn is_pipeline(self) -> bool {
        matches!(
            self,
            Mutant::PipelineExpiryStrict
                | Mutant::PipelineSharedIgnoresLimit
                | Mutant::PipelineExclusiveIgnoresShared
                | Mutant::PipelineTakeoverLive
                | Mutant::PipelineTakeoverIgnoresGrace
                | Mutant::PipelineFenceNotIncremented
                | Mutant::PipelineFenceFloorHalved
                | Mutant::PipelinePurgeDeletesHeld
                | Mutant::PipelineRenewOneWithoutMargin
                | Mutant::PipelineRenewManyWholeDocuments
                | Mutant::PipelineQueueIgnored
                | Mutant::PipelineSharedOvertakesWriter
                | Mutant::PipelineDeadEntryBlocks
                | Mutant::PipelineGrantLeavesEntry
        )
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
        )
    }

    /// Whether the mutant breaks the rules of fair requests' queue ([`crate::queue`]), in
    /// the engine or in MongoDB's pipelines: only the harnesses that make fair requests run
    /// that code.
    #[must_use]
    pub fn is_queue(self) -> bool {
        matches!(
            self,
            Mutant::QueueIgnored
                | Mutant::SharedOvertakesWriter
                | Mutant::QueueDeadEntryBlocks
                | Mutant::GrantLeavesEntry
                | Mutant::PipelineQueueIgnored
                | Mutant::PipelineSharedOvertakesWriter
                | Mutant::PipelineDeadEntryBlocks
                | Mutant::PipelineGrantLeavesEntry
        )
    }

    /// Whether the mutant breaks MongoDB's fenced writes to the user's own collections,
    /// which only the fenced-write harness runs.
    #[must_use]
    pub fn is_fenced_write(self) -> bool {
        matches!(self, Mutant::FencedWriteUnconditional)
    }

    /// Whether the model checker models the rule this mutant breaks (the status filter is
    /// not modelled, and the model runs the engine's lock rules, not MongoDB's pipelines
    /// or the Locker).
    #[must_use]
    pub fn is_modelled(self) -> bool {
        !matches!(self, Mutant::StatusTtlBoundOverwritten)
            && !self.is_pipeline()
            && !self.is_locker()
            && !self.is_fenced_write()
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

/// Switches `mutant` on for the whole process (`None`: the real rules).
#[cfg(lockwright_mutants)]
pub fn activate(mutant: Option<Mutant>) {
    ACTIVE.store(
        mutant.map_or(0, Mutant::code),
        std::sync::atomic::Ordering::SeqCst,
    );
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

/// The environment variable the harnesses read to pick a mutant.
pub const ENV_VAR: &str = "LOCKWRIGHT_MUTANT";

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT` (none when unset). Every harness
/// calls this first; the kill-matrix script sets the variable. This is the one place the
/// engine reads its environment, and it exists only in mutant builds.
///
/// # Panics
/// When the variable names no mutant: a typo must not silently test the real rules.
#[cfg(lockwright_mutants)]
pub fn activate_from_env() -> Option<Mutant> {
    let mutant = std::env::var(ENV_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|name| {
            Mutant::from_name(&name).unwrap_or_else(|| {
                let known: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
                panic!(
                    "{ENV_VAR}={name} names no mutant; known: {}",
                    known.join(", ")
                )
            })
        });
    activate(mutant);
    mutant
}
