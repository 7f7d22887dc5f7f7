//! What a seed reports: the invariants it broke, its timeline, the writes that reached the
//! downstream store, and what it counted.

use crate::faults::{FaultMix, Faults};

/// A broken invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// Two clients believed they held one resource at the same instant.
    HolderSafety,
    /// A grant's fence was not above the resource's previous one.
    FenceMonotonic,
    /// The downstream accepted a fence lower than one it had accepted.
    StaleWrite,
    /// A grant was handed out at or after its trust deadline, or a client still held a
    /// lease (no `Ended`) when its local clock reached the lease's trust deadline.
    PastTrustDeadline,
    /// A lease ended refused or expired in a seed without faults that can cost a lease.
    NeedlessLoss,
    /// In a seed checked for handovers, a resource a client waited for was left free for
    /// longer than the bound: released at the store (or its crashed holder's lock
    /// abandoned) and no grant followed in time.
    HandoverLiveness,
    /// The store granted a resource while a live place of a fair waiter was in its queue
    /// ahead of the grantee's own place (or at all, for a request without a place): a
    /// waiter that took its place earlier was overtaken (`fifo`, in every seed).
    QueueOrder,
    /// The store handed a lock to a place that was not the first live place of its queue
    /// (a place that lapsed, or one behind a live place), or with a claim lease that does
    /// not run the place's lease from the handoff (every seed).
    Handoff,
    /// In a seed checked for handovers, a fair waiter that kept its place waited, while
    /// its resource was free at the store, longer than what was ahead of it when it took
    /// its place allows (`bounded_waiting`).
    BoundedWaiting,
    /// After healing, a lock id the store granted to a client that did not crash was never
    /// unlocked at the store (or the world did not settle).
    Leaked,
    /// A lock was left after every client stopped and every lease ran out.
    Stuck,
    /// An election's observer reported a leader whose fence was at or below one it had
    /// reported.
    ObserverWentBack,
    /// An election's leader, as a read of the store found it, had a value its own lock id
    /// never proclaimed (another candidate's proclaim changed it).
    LeaderValue,
}

/// One violation, at a virtual instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Virtual real time, in ms.
    pub at: u64,
    /// What broke.
    pub kind: ViolationKind,
    /// Who and what.
    pub detail: String,
}

/// One line of a replayed run's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// Virtual real time, in ms.
    pub at: u64,
    /// The client concerned, if any.
    pub client: Option<usize>,
    /// What happened.
    pub what: String,
}

/// The outcome of one seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The faults it enabled.
    pub mix: FaultMix,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// What it counted.
    pub tally: Tally,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// Everything that happened (only when recorded).
    pub timeline: Vec<TimelineEntry>,
    /// Every write that reached the downstream store, in the order it arrived: the
    /// schedule a test replays against a real fenced store.
    pub writes: Vec<DownstreamWrite>,
}

/// A write that reached the downstream store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DownstreamWrite {
    /// Virtual real time of its arrival, in ms.
    pub at: u64,
    /// The client that sent it.
    pub client: usize,
    /// The resource it was written under (its lock's resource; the downstream keeps one
    /// record per resource).
    pub resource: usize,
    /// The fence it carried.
    pub fence: u64,
    /// Whether the downstream accepted it (with fencing on: its fence was at least every
    /// fence accepted before for the resource).
    pub accepted: bool,
}

/// What a seed counted, or a sweep summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Leases a client stopped trusting before releasing them.
    pub losses: u64,
    /// Downstream writes accepted.
    pub writes_accepted: u64,
    /// Downstream writes rejected for a stale fence.
    pub writes_rejected: u64,
    /// Grants whose reply was lost whose lock id the client later unlocked at the store
    /// (releases after an unknown outcome).
    pub unknown_grants_released: u64,
    /// Lock ids whose unlock request was lost and that a later attempt unlocked (release
    /// retries).
    pub releases_retried: u64,
    /// Grant replies handed to a client's core at or after their trust deadline (stale
    /// grants, which must be released rather than handed out).
    pub late_grants: u64,
    /// Batches of renewals the cores sent (`RenewMany` requests, each of two locks or
    /// more), retries included.
    pub renew_batches: u64,
    /// Renewals sent in those batches.
    pub batched_renewals: u64,
    /// The most renewals in one batch.
    pub largest_batch: u64,
    /// Renewals of a batch that reached the store and that it refused (the lock within
    /// the margin, expired, or gone) while it decided the others on their own.
    pub batched_refusals: u64,
    /// Grants whose fence came from the store's fence clock at least a millisecond ahead of
    /// its clock: granted after a failover took the store's clock back.
    pub grants_behind_fence_clock: u64,
    /// Subscriptions to hints the clients opened (each starts with `Missed`).
    pub subscriptions: u64,
    /// Subscriptions dropped while the process still waited: its waiters were all far back
    /// in their lines (`LockerCore::wants_hints`).
    pub far_back_unsubscribed: u64,
    /// Hints the store sent to subscribers (before the network's faults).
    pub hints_sent: u64,
    /// Hints handed to a client's core (duplicates included; `Missed` after a stream ended
    /// included).
    pub hints_heard: u64,
    /// Locks held at once on a hint that said what the store handed (the holder claims it
    /// with its first renewal, or releases it first).
    pub held_on_hint: u64,
    /// Releases at the store that left a resource free while clients waited for it, whose
    /// handover was checked (`handover_liveness`).
    pub handovers_checked: u64,
    /// Locks of crashed holders abandoned while clients waited for their resource, whose
    /// takeover was checked (`handover_liveness`).
    pub takeovers_checked: u64,
    /// The longest time from a checked release to the next grant of its resource, in ms.
    pub slowest_handover_ms: u64,
    /// The longest time from a checked abandonment to the grant that took the lock over.
    pub slowest_takeover_ms: u64,
    /// Grants to fair requests.
    pub fair_grants: u64,
    /// Grants made while the resource's queue had a live place (each checked for `fifo`).
    pub grants_past_queue: u64,
    /// Places taken in a queue (refused fair requests without a live place).
    pub places_taken: u64,
    /// Places that lapsed (their waiter crashed, paused or stopped asking).
    pub places_lapsed: u64,
    /// Places given up by `LeaveQueue` requests that reached the store.
    pub places_left: u64,
    /// Places the store handed the lock to (each checked: the first live place, its
    /// claim lease from the handoff).
    pub places_handed: u64,
    /// Refusals that kept a place far back (stale, for a longer lease).
    pub far_keeps: u64,
    /// Fair waits checked for `bounded_waiting`: from the place taken to the grant.
    pub fair_waits_checked: u64,
    /// Of those, the ones with waiters ahead when the place was taken.
    pub fair_waits_behind: u64,
    /// The longest of those waits, in ms (held time included).
    pub longest_fair_wait_ms: u64,
    /// The most time a checked fair waiter waited while its resource was free, in ms.
    pub most_free_wait_ms: u64,
    /// Proclaims election leaders sent.
    pub proclaims_sent: u64,
    /// Proclaims the store refused (their sender no longer led when they arrived).
    pub proclaims_refused: u64,
    /// Reads the election's observer made at the store.
    pub observer_reads: u64,
    /// Leaders the observer reported.
    pub leaders_observed: u64,
    /// Answers that reached the observer naming a leader older than one it had reported
    /// (reads overtaken by later ones), which it must not report.
    pub stale_reads_skipped: u64,
}

impl Tally {
    /// Adds `other` (the largest batch, the slowest handover and takeover and the longest
    /// fair waits are the larger of the two).
    pub fn add(&mut self, other: &Tally) {
        self.losses += other.losses;
        self.writes_accepted += other.writes_accepted;
        self.writes_rejected += other.writes_rejected;
        self.unknown_grants_released += other.unknown_grants_released;
        self.releases_retried += other.releases_retried;
        self.late_grants += other.late_grants;
        self.renew_batches += other.renew_batches;
        self.batched_renewals += other.batched_renewals;
        self.largest_batch = self.largest_batch.max(other.largest_batch);
        self.batched_refusals += other.batched_refusals;
        self.grants_behind_fence_clock += other.grants_behind_fence_clock;
        self.subscriptions += other.subscriptions;
        self.far_back_unsubscribed += other.far_back_unsubscribed;
        self.hints_sent += other.hints_sent;
        self.hints_heard += other.hints_heard;
        self.held_on_hint += other.held_on_hint;
        self.handovers_checked += other.handovers_checked;
        self.takeovers_checked += other.takeovers_checked;
        self.slowest_handover_ms = self.slowest_handover_ms.max(other.slowest_handover_ms);
        self.slowest_takeover_ms = self.slowest_takeover_ms.max(other.slowest_takeover_ms);
        self.fair_grants += other.fair_grants;
        self.grants_past_queue += other.grants_past_queue;
        self.places_taken += other.places_taken;
        self.places_lapsed += other.places_lapsed;
        self.places_left += other.places_left;
        self.places_handed += other.places_handed;
        self.far_keeps += other.far_keeps;
        self.fair_waits_checked += other.fair_waits_checked;
        self.fair_waits_behind += other.fair_waits_behind;
        self.longest_fair_wait_ms = self.longest_fair_wait_ms.max(other.longest_fair_wait_ms);
        self.most_free_wait_ms = self.most_free_wait_ms.max(other.most_free_wait_ms);
        self.proclaims_sent += other.proclaims_sent;
        self.proclaims_refused += other.proclaims_refused;
        self.observer_reads += other.observer_reads;
        self.leaders_observed += other.leaders_observed;
        self.stale_reads_skipped += other.stale_reads_skipped;
    }
}
