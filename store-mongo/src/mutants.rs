//! Deliberately broken variants of this store's own copy of the rules: the server-side
//! pipelines and the fenced writes to the user's collections. Each [`Mutant`] breaks one of
//! them, to show that the MongoDB harnesses catch it (the kill matrix in
//! docs/verification.md). They are switched on by name through the engine's switch
//! (`LOCKWRIGHT_MUTANT`, [`activate_from_env`]), in builds with `--cfg lockwright_mutants`
//! only, where this module is public; in every other build [`active`] is a constant
//! `false` that compiles away. The engine's own mutants are in the engine's catalogue.

// Outside mutant builds only `active` is called (by the pipelines), and only with `false`.
#![cfg_attr(not(lockwright_mutants), allow(dead_code))]

/// The catalogue: each mutant with its name, as harnesses and the kill matrix spell it.
macro_rules! catalogue {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)+) => {
        /// One broken rule of this store's.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Mutant {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Mutant {
            /// Every mutant.
            pub const ALL: &[Mutant] = &[$(Mutant::$variant,)+];

            /// Every mutant's name, in the order of [`Mutant::ALL`].
            pub const NAMES: &[&str] = &[$($name,)+];

            /// The mutant's name in snake case.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(Mutant::$variant => $name,)+
                }
            }
        }
    };
}

catalogue! {
    /// The pipelines count a lock as expired only once `expiresAt < now`, not at
    /// `expiresAt == now`.
    PipelineExpiryStrict => "pipeline_expiry_strict",
    /// The shared grant pipeline ignores the limit.
    PipelineSharedIgnoresLimit => "pipeline_shared_ignores_limit",
    /// The exclusive grant pipeline ignores live shared locks.
    PipelineExclusiveIgnoresShared => "pipeline_exclusive_ignores_shared",
    /// The exclusive grant pipeline takes over a live exclusive lock.
    PipelineTakeoverLive => "pipeline_takeover_live",
    /// The grant pipelines take over expired locks at once, without the takeover grace.
    PipelineTakeoverIgnoresGrace => "pipeline_takeover_ignores_grace",
    /// The grant pipelines reuse the last fence instead of a greater one.
    PipelineFenceNotIncremented => "pipeline_fence_not_incremented",
    /// The fence floor counts 2^21 fences a second of cluster time, not the engine's 2^22:
    /// the shipped floor expression differs from the rule.
    PipelineFenceFloorHalved => "pipeline_fence_floor_halved",
    /// Purge deletes documents that still hold an exclusive lock.
    PipelinePurgeDeletesHeld => "pipeline_purge_deletes_held",
    /// The one-lock renewal ignores the renew margin.
    PipelineRenewOneWithoutMargin => "pipeline_renew_one_without_margin",
    /// The batch renewal renews every lock of a batch's documents, not only the locks the
    /// batch names and the engine found renewable.
    PipelineRenewManyWholeDocuments => "pipeline_renew_many_whole_documents",
    /// The grant pipelines ignore the queue of fair waiters: a request overtakes them.
    PipelineQueueIgnored => "pipeline_queue_ignored",
    /// The shared grant pipeline lets a reader overtake a waiting writer.
    PipelineSharedOvertakesWriter => "pipeline_shared_overtakes_writer",
    /// The grant pipelines count a place whose lease ran out as a waiter ahead.
    PipelineDeadEntryBlocks => "pipeline_dead_entry_blocks",
    /// The grant pipelines leave the winner's place in the queue.
    PipelineGrantLeavesEntry => "pipeline_grant_leaves_entry",
    /// The hand-over stage hands the lock to the first place, live or not.
    PipelineHandoffToDeadPlace => "pipeline_handoff_to_dead_place",
    /// The grant pipelines and the hand-over stage count a live place however long ago its
    /// waiter last asked to be next (`freshUntil` ignored).
    PipelineStalePlaceCounts => "pipeline_stale_place_counts",
    /// The hand-over stage goes on past a place it cannot hand the lock to, handing it to
    /// later places that conflict with that one.
    PipelineHandoffPastConflict => "pipeline_handoff_past_conflict",
    /// The hand-over stage starts the claim lease at the place's `queuedAt`.
    PipelineClaimLeaseFromQueuedAt => "pipeline_claim_lease_from_queued_at",
    /// A claim ignores whether the handed lock is still held, and runs before the
    /// hand-over stage: a lapsed handoff is revived.
    PipelineClaimRevivesLapsed => "pipeline_claim_revives_lapsed",
    /// The one-lock release's pipeline hands the freed lock to nobody (a leader's resign
    /// leaves its place empty): the next in line gets it only when it asks again.
    PipelineResignLeavesPlace => "pipeline_resign_leaves_place",
    /// The proclaim pipeline (`set_comment`) sets the comment of the document's exclusive
    /// lock whoever holds it: a deposed leader's proclaim changes its successor's value.
    PipelineProclaimChangesHolder => "pipeline_proclaim_changes_holder",
    /// The fenced writes to the user's collections drop the fence condition: a stale
    /// holder's write overwrites its successor's.
    FencedWriteUnconditional => "fenced_write_unconditional",
    /// A hand-over is no news: observers hear of a leader handed the leadership (a resign)
    /// only when they next read.
    NewsSkipsHandOver => "news_skips_hand_over",
    /// A claim of a lock handed over earlier is news again, as if it made a new leader.
    NewsOfClaims => "news_of_claims",
    /// A one-lock release is replayed at the fence floor of the reply's `now` (the wall
    /// clock), not at the floor the command ran at (its cluster time): the wakes and news of
    /// what it handed over can name a fence the store never gave.
    ReplayIgnoresFenceFloor => "replay_ignores_fence_floor",
}

impl Mutant {
    /// What the mutant breaks, as the kill matrix sorts it: `pipeline_queue` (the queue's
    /// rules, which only the harnesses that make fair requests run), `pipeline`,
    /// `fenced_write` (which only the fenced-write harness runs), `news` (the news of
    /// leaders, which only the harnesses that read it run), or `replay` (the replay of a
    /// release, whose fences the wakes and news name).
    #[must_use]
    pub fn kind(self) -> &'static str {
        match self {
            Mutant::PipelineQueueIgnored
            | Mutant::PipelineSharedOvertakesWriter
            | Mutant::PipelineDeadEntryBlocks
            | Mutant::PipelineGrantLeavesEntry
            | Mutant::PipelineHandoffToDeadPlace
            | Mutant::PipelineStalePlaceCounts
            | Mutant::PipelineHandoffPastConflict
            | Mutant::PipelineClaimLeaseFromQueuedAt
            | Mutant::PipelineClaimRevivesLapsed
            | Mutant::PipelineResignLeavesPlace => "pipeline_queue",
            Mutant::FencedWriteUnconditional => "fenced_write",
            Mutant::NewsSkipsHandOver | Mutant::NewsOfClaims => "news",
            Mutant::ReplayIgnoresFenceFloor => "replay",
            _ => "pipeline",
        }
    }
}

/// Whether `mutant` is switched on. Always `false` outside mutant builds.
#[inline]
#[must_use]
pub fn active(mutant: Mutant) -> bool {
    #[cfg(lockwright_mutants)]
    {
        lockwright_engine::mutants::named_active(mutant.name())
    }
    #[cfg(not(lockwright_mutants))]
    {
        let _ = mutant;
        false
    }
}

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT`, of this catalogue or the engine's
/// (none when unset), and returns its name: what every harness that runs this store calls
/// first.
///
/// # Panics
/// When the variable names no mutant of either catalogue.
#[cfg(lockwright_mutants)]
pub fn activate_from_env() -> Option<&'static str> {
    lockwright_engine::mutants::activate_from_env_with(Mutant::NAMES)
}
