//! A deterministic simulator for Lockwright's lock runtime.
//!
//! One seeded PRNG, virtual time, one thread. Every simulated client runs the engine's
//! [`LockerCore`](lockwright_engine::locker::LockerCore), the same state machine the
//! `lockwright` crate's `Locker` drives: its waiting acquire with backoff, renewal, loss at
//! the trust deadline, release of stale grants and of requests with unknown outcomes, and
//! release retries. The simulator has no acquire, renew or release logic of its own: it
//! only carries the core's requests over a faulty network to the in-memory store and the
//! replies back, wakes each core when it asks to be woken (on the client's own drifting
//! clock), and runs the client *application*: idle, then a job: acquire a random resource,
//! or half the time two to four distinct ones one after another (in increasing order, so
//! jobs never wait for each other in a cycle), each under its own guard, hold them together
//! for a while writing to a fenced downstream store to each resource whose guard is held,
//! release them all, and release a guard too when its lock is lost (as a dropped guard
//! would; the job goes on with the others). A client holding several locks has their
//! renewals fall due together, so its core sends them in batches (`RenewMany`), which the
//! store renews lock by lock and whose per-lock outcomes go back to the core.
//!
//! Waiters are woken by the store, as in the shipped Locker: each client process holds a
//! subscription to the store's hints while its core waits (and for `max_backoff` after),
//! which store-mem's own [`LockStore::hints`](lockwright_engine::LockStore::hints) stream
//! feeds (`Taken` after each grant, `Freed` after each release, `Missed` first); the
//! simulator carries each hint over the faulty network to its client and hands it to the
//! core (`LockerCore::handle_hint`) at the client's local time.
//!
//! Faults: network latency, requests lost before they reach the store, replies lost after
//! the store applied the request (in both cases the driver sees either silence or a
//! connection error, so the outcome is unknown), pauses longer than the TTL (the classic
//! garbage-collection pause, also between checking the lock and writing), crashes and
//! restarts (a new core per incarnation), per-client clock drift within a bound, and
//! failovers of the store to a member whose wall clock differs: the store's clock jumps
//! forward or back (its members' clocks are within `clock_jump_ms` of one another) while
//! the clients' clocks run on; the store's takeover grace (`grace_ms`) must absorb the
//! jump. The downstream store remembers the highest fence it accepted. Hints travel like
//! replies: after latency (so they overtake one another), lost as often as replies,
//! duplicated in some seeds, waiting in a paused process's socket, gone with a crashed
//! one; a subscription is lost as often as a request, and now and then the store drops a
//! stream instead of sending a hint: the client hears the end, its core `Missed`, and it
//! subscribes again `max_backoff` later, as the Locker task does.
//!
//! Checked continuously:
//! - `holder_safety`: no two clients believe they hold one resource at the same real
//!   instant (a client believes it holds each lease it was handed and that did not end,
//!   while its local clock is before that lease's trust deadline, as `LockGuard::is_held`
//!   does): judged by real time and the clients' own clocks, never by the store's, which
//!   a failover moves;
//! - `fence_monotonic`: grants carry increasing fences, also after a failover took the
//!   store's clock back, and `stale_write`: the downstream never accepts a lower fence than
//!   one it accepted;
//! - `past_trust_deadline`: no guard outlives its trust deadline. A grant is never handed
//!   out at or after its trust deadline, and after every event, for every client neither
//!   paused nor crashed (its core first woken if its timeout is due at this instant), no
//!   lease the application still holds (acquired or renewed, no `Ended`; every guard of a
//!   job, also while the job acquires its next resource) has reached its trust deadline on
//!   the client's clock: the core must have said `Ended` by then;
//! - `needless_loss`: in a seed without faults that can cost a lease (fast network, no
//!   lost requests or replies, no pauses, no crashes, no clock jump beyond the grace;
//!   drift and failovers within the grace are allowed), no lease ends refused or expired;
//! - `handover_liveness`: in a seed calm enough (a fast network that loses nothing, no
//!   pauses, no failovers, no dropped hint streams; crashes, drift and duplicated hints
//!   are allowed; `Options::calm` makes every seed so), a resource that clients wait for
//!   does not stay free: a release that frees it is followed by a grant within four
//!   network latencies (plus the delay the Locker's rule gives a waiter that lost races to
//!   other waiters), and so is the end of the takeover grace of a lock whose holder
//!   crashed (plus the drift of the waiter's clock). See `world/liveness.rs`.
//! - `fifo` (every seed): with fair clients (half of the seeds, `Options::fair_seeds_pct`),
//!   the store never grants a resource while a live place of its queue is ahead of the
//!   grantee's own, judged on the world's own copy of the queues (places taken, refreshed,
//!   granted, left and lapsed by the store's clock as SEMANTICS.md says);
//! - `bounded_waiting` (seeds checked for handovers): a fair waiter that keeps its place
//!   waits, while its resource is free at the store, no longer than the handovers and the
//!   crashed waiters' places ahead of it when it came allow. See `world/queue.rs`.
//!
//! Checked at the end, after the faults stop: the world heals (no more faults, clients stop
//! acquiring, cancel acquires under way and release what they hold) and runs until nothing
//! is left to do. Then `leaked`: every lock id the store granted was unlocked at the store,
//! except those of client incarnations that crashed (a crash forgets its locks; they
//! expire). Then `stuck`: once every lease has run out, a purge leaves no lock.
//!
//! The fault mix is derived from the seed (swarm testing): each seed enables its own subset
//! of faults at its own intensities, and the same seed always replays the same run.

mod svg;
mod world;

use std::fmt;

use rand::Rng;

/// The simulator's random generator: xoshiro256** from `rand_xoshiro`, deterministic on
/// every platform and cheap (`StdRng`, ChaCha12, took half of a sweep's time in test builds,
/// where dependencies are not optimized). Not for secrets: lock ids in a simulation need not
/// be.
type SimRng = rand_xoshiro::Xoshiro256StarStar;

pub use svg::timeline_svg;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Clients contending.
    pub clients: usize,
    /// Resources they lock (exclusively; a job locks one to four of them).
    pub resources: usize,
    /// The TTL of every lock, in ms.
    pub ttl_ms: u64,
    /// The holders' drift margin, in ms.
    pub drift_margin_ms: u64,
    /// The renew margin the Locker core renews with (the client's, in the shipped Locker), in
    /// ms: the store refuses to renew a lock that expires within it.
    pub renew_margin_ms: u64,
    /// The largest clock-rate drift a seed may give a client, in parts per million.
    pub max_drift_ppm: i64,
    /// Whether the downstream store rejects fences lower than the highest it accepted.
    pub fencing: bool,
    /// How long faults are injected, in ms of virtual time.
    pub duration_ms: u64,
    /// The store's takeover grace, in ms: an expired lock blocks other grants until it has
    /// been expired this long.
    pub grace_ms: u64,
    /// How far apart the store members' clocks are, in ms: a failover moves the store's
    /// clock to another member's, at most this far forward or back (0: no failovers).
    pub clock_jump_ms: u64,
    /// Calm seeds only: every seed keeps the crashes, clock drift and duplicated hints it
    /// draws but gets a fast network that loses nothing, no pauses, no failovers and no
    /// dropped hint streams, so that every seed is checked for `handover_liveness`.
    pub calm: bool,
    /// The share of seeds, in percent, whose clients acquire fairly (waiting in the
    /// resource's queue); drawn per seed from a stream of its own, so that the other seeds
    /// run as they would without fair clients.
    pub fair_seeds_pct: u32,
    /// In a seed with fair clients, the share of its clients, in percent, that acquire
    /// fairly (at least one does; the others' acquires are not fair, and obey the queue).
    pub fair_clients_pct: u32,
    /// The lease of a fair waiter's place in a queue (`LockerConfig::queue_ttl`), in ms.
    pub queue_ttl_ms: u64,
}

impl Default for Options {
    /// Three clients, four resources (a job holds up to four, half of them just one), 1 s
    /// TTL, 5% drift at most and a 100 ms drift margin (more than the `ttl * drift / (1 -
    /// drift)` = 53 ms the holding rule needs), a 100 ms renew margin (a tenth of the TTL, as
    /// the shipped 1 s default is of a 10 s lease), fencing on, 30 s of faults, a takeover
    /// grace of 200 ms (a fifth of the TTL, as the shipped 2 s default is of a 10 s lease),
    /// store members' clocks up to 200 ms apart (as far as the grace covers), fair clients
    /// in half of the seeds (three in four of their clients, at least one), and places in a
    /// queue leased for one TTL (1 s; the shipped 3 s default is less than a 10 s lease's
    /// third, but a place of 300 ms would be kept by an attempt every 150 ms).
    fn default() -> Self {
        Options {
            clients: 3,
            resources: 4,
            ttl_ms: 1_000,
            drift_margin_ms: 100,
            renew_margin_ms: 100,
            max_drift_ppm: 50_000,
            fencing: true,
            duration_ms: 30_000,
            grace_ms: 200,
            clock_jump_ms: 200,
            calm: false,
            fair_seeds_pct: 50,
            fair_clients_pct: 75,
            queue_ttl_ms: 1_000,
        }
    }
}

impl Options {
    /// The command-line flags that reproduce these options.
    #[must_use]
    pub fn flags(&self) -> String {
        let d = Options::default();
        let mut out = String::new();
        let mut add = |name: &str, v: String, dv: String| {
            if v != dv {
                out.push_str(&format!(" --{name} {v}"));
            }
        };
        add("clients", self.clients.to_string(), d.clients.to_string());
        add(
            "resources",
            self.resources.to_string(),
            d.resources.to_string(),
        );
        add("ttl", self.ttl_ms.to_string(), d.ttl_ms.to_string());
        add(
            "margin",
            self.drift_margin_ms.to_string(),
            d.drift_margin_ms.to_string(),
        );
        add(
            "renew-margin",
            self.renew_margin_ms.to_string(),
            d.renew_margin_ms.to_string(),
        );
        add(
            "drift-ppm",
            self.max_drift_ppm.to_string(),
            d.max_drift_ppm.to_string(),
        );
        add(
            "duration",
            self.duration_ms.to_string(),
            d.duration_ms.to_string(),
        );
        add(
            "grace-ms",
            self.grace_ms.to_string(),
            d.grace_ms.to_string(),
        );
        add(
            "clock-jump-ms",
            self.clock_jump_ms.to_string(),
            d.clock_jump_ms.to_string(),
        );
        add(
            "fair-seeds",
            self.fair_seeds_pct.to_string(),
            d.fair_seeds_pct.to_string(),
        );
        add(
            "fair-clients",
            self.fair_clients_pct.to_string(),
            d.fair_clients_pct.to_string(),
        );
        add(
            "queue-ttl",
            self.queue_ttl_ms.to_string(),
            d.queue_ttl_ms.to_string(),
        );
        if !self.fencing {
            out.push_str(" --no-fencing");
        }
        if self.calm {
            out.push_str(" --calm");
        }
        out
    }
}

/// The faults one seed injects, derived from the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultMix {
    /// One-way network latency range, in ms.
    pub latency_ms: (u64, u64),
    /// Percentage of replies lost after the store applied the request (and of hints lost
    /// on their way to a client).
    pub lost_reply_pct: u32,
    /// Percentage of requests lost before they reach the store (and of subscriptions to
    /// hints that never reach it).
    pub lost_request_pct: u32,
    /// Chance per client step, in 1/1000, of a pause longer than the TTL.
    pub pause_permille: u16,
    /// Chance per client step, in 1/1000, of a crash.
    pub crash_permille: u16,
    /// The drift bound of this seed's clients, in ppm (0: perfect clocks).
    pub drift_ppm: i64,
    /// How far a failover may move the store's clock in this seed, in ms (0: no failovers).
    pub clock_jump_ms: u64,
    /// Whether that is beyond the store's takeover grace.
    pub jumps_beyond_grace: bool,
    /// Percentage of hints delivered twice (each copy with its own latency).
    pub hint_dup_pct: u32,
    /// Chance per hint the store sends, in 1/1000, that the subscription's stream ends
    /// instead (the hint is lost with it; the client hears the end, then subscribes again).
    pub stream_drop_permille: u16,
    /// The clients that acquire fairly, one bit each (not a fault: drawn with the mix, from
    /// a stream of its own).
    pub fair_clients: u32,
}

/// The stream the failovers are drawn from: apart from the world's, so that a seed
/// without failovers runs exactly as it would with none configured.
fn failover_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6661_696c_6f76_6572)
}

/// The stream the fair clients are drawn from: apart from the world's, so that a seed
/// without fair clients runs exactly as it would with none configured.
fn fair_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6661_6972_5f71_7565)
}

/// The stream the hint faults are drawn from: apart from the world's, so that each seed
/// keeps the other faults it drew before hints existed.
fn hint_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6869_6e74_7374_726d)
}

impl FaultMix {
    fn from_rng(
        rng: &mut SimRng,
        failovers: &mut SimRng,
        hints: &mut SimRng,
        opts: &Options,
    ) -> Self {
        let on = |rng: &mut SimRng| rng.random_bool(0.5);
        let slow = on(rng);
        let mut mix = FaultMix {
            latency_ms: if slow {
                (1, rng.random_range(2..opts.ttl_ms / 5))
            } else {
                FAST_NETWORK_MS
            },
            lost_reply_pct: if on(rng) { rng.random_range(1..30) } else { 0 },
            lost_request_pct: if on(rng) { rng.random_range(1..30) } else { 0 },
            pause_permille: if on(rng) { rng.random_range(1..20) } else { 0 },
            crash_permille: if on(rng) { rng.random_range(1..10) } else { 0 },
            drift_ppm: if on(rng) { opts.max_drift_ppm } else { 0 },
            clock_jump_ms: if on(failovers) { opts.clock_jump_ms } else { 0 },
            jumps_beyond_grace: false,
            hint_dup_pct: if on(hints) {
                hints.random_range(1..30)
            } else {
                0
            },
            stream_drop_permille: if on(hints) {
                hints.random_range(1..20)
            } else {
                0
            },
            fair_clients: 0,
        };
        if opts.calm {
            // Drawn first and overridden, so the rest of the seed's stream is unchanged.
            mix.latency_ms = FAST_NETWORK_MS;
            mix.lost_reply_pct = 0;
            mix.lost_request_pct = 0;
            mix.pause_permille = 0;
            mix.clock_jump_ms = 0;
            mix.stream_drop_permille = 0;
        }
        mix.with_grace(opts.grace_ms)
    }

    /// Draws which clients of the seed acquire fairly: in `fair_seeds_pct` of the seeds,
    /// each client with `fair_clients_pct` chance, at least one.
    fn with_fair_clients(mut self, fair: &mut SimRng, opts: &Options) -> Self {
        let pct = |p: u32| f64::from(p.min(100)) / 100.0;
        if !fair.random_bool(pct(opts.fair_seeds_pct)) {
            return self;
        }
        let n = opts.clients.min(32);
        for c in 0..n {
            if fair.random_bool(pct(opts.fair_clients_pct)) {
                self.fair_clients |= 1 << c;
            }
        }
        if self.fair_clients == 0 && n > 0 {
            self.fair_clients = 1 << fair.random_range(0..n);
        }
        self
    }

    /// Whether client `c` acquires fairly.
    #[must_use]
    pub fn is_fair(&self, c: usize) -> bool {
        c < 32 && self.fair_clients & (1 << c) != 0
    }

    fn with_grace(mut self, grace_ms: u64) -> Self {
        self.jumps_beyond_grace = self.clock_jump_ms > grace_ms;
        self
    }
}

/// The latency range of a fast network, in ms.
const FAST_NETWORK_MS: (u64, u64) = (1, 3);

impl FaultMix {
    /// Whether this mix has a fault that can legitimately cost a held lease: a slow
    /// network, lost requests or replies, pauses, crashes, or failovers whose clock jumps
    /// exceed the takeover grace. Clock drift within the bound the drift margin covers
    /// cannot, nor can failovers within the grace, nor anything done to hints (they only
    /// wake waiters).
    #[must_use]
    pub fn can_cost_a_lease(&self) -> bool {
        self.latency_ms != FAST_NETWORK_MS
            || self.lost_reply_pct > 0
            || self.lost_request_pct > 0
            || self.pause_permille > 0
            || self.crash_permille > 0
            || self.jumps_beyond_grace
    }

    /// Whether this seed is checked for `handover_liveness`: a fast network that loses
    /// nothing, no pauses, no failovers (they move the store's clock, and with it the
    /// instant a crashed holder's lock is abandoned) and no dropped hint streams. Crashes
    /// are allowed (their locks are the takeover case), as are clock drift and duplicated or
    /// reordered hints.
    #[must_use]
    pub fn checks_handovers(&self) -> bool {
        self.latency_ms == FAST_NETWORK_MS
            && self.lost_reply_pct == 0
            && self.lost_request_pct == 0
            && self.pause_permille == 0
            && self.clock_jump_ms == 0
            && self.stream_drop_permille == 0
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "latency {}-{} ms, lost replies {}%, lost requests {}%, pauses {}‰, crashes {}‰, drift ±{} ppm",
            self.latency_ms.0,
            self.latency_ms.1,
            self.lost_reply_pct,
            self.lost_request_pct,
            self.pause_permille,
            self.crash_permille,
            self.drift_ppm
        )?;
        if self.clock_jump_ms > 0 {
            write!(f, ", failovers (store clock ±{} ms)", self.clock_jump_ms)?;
        }
        write!(
            f,
            ", hints duplicated {}%, hint streams dropped {}‰",
            self.hint_dup_pct, self.stream_drop_permille
        )?;
        if self.fair_clients != 0 {
            let fair: Vec<usize> = (0..32).filter(|&c| self.is_fair(c)).collect();
            write!(f, "; fair clients {fair:?}")?;
        }
        if self.checks_handovers() {
            write!(f, " (handovers checked)")?;
        }
        Ok(())
    }
}

/// Faults injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Replies lost after the store applied the request.
    pub lost_replies: u64,
    /// Requests lost before they reached the store.
    pub lost_requests: u64,
    /// Client pauses longer than the TTL.
    pub pauses: u64,
    /// Client crashes.
    pub crashes: u64,
    /// Failovers of the store to a member with another clock.
    pub failovers: u64,
    /// Of those, the ones that moved the store's clock forward.
    pub clock_jumps_forward: u64,
    /// ... and back.
    pub clock_jumps_back: u64,
    /// Hints lost on their way to a client.
    pub lost_hints: u64,
    /// Hints delivered twice.
    pub duplicated_hints: u64,
    /// Subscriptions to hints that ended under a client (the store dropped the stream, or
    /// the subscription never reached it).
    pub dropped_streams: u64,
}

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
    /// In a seed checked for handovers, a fair waiter that kept its place waited, while
    /// its resource was free at the store, longer than what was ahead of it when it took
    /// its place allows (`bounded_waiting`).
    BoundedWaiting,
    /// After healing, a lock id the store granted to a client that did not crash was never
    /// unlocked at the store (or the world did not settle).
    Leaked,
    /// A lock was left after every client stopped and every lease ran out.
    Stuck,
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
    /// Hints the store sent to subscribers (before the network's faults).
    pub hints_sent: u64,
    /// Hints handed to a client's core (duplicates included; `Missed` after a stream ended
    /// included).
    pub hints_heard: u64,
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
    /// Fair waits checked for `bounded_waiting`: from the place taken to the grant.
    pub fair_waits_checked: u64,
    /// Of those, the ones with waiters ahead when the place was taken.
    pub fair_waits_behind: u64,
    /// The longest of those waits, in ms (held time included).
    pub longest_fair_wait_ms: u64,
    /// The most time a checked fair waiter waited while its resource was free, in ms.
    pub most_free_wait_ms: u64,
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
        self.hints_sent += other.hints_sent;
        self.hints_heard += other.hints_heard;
        self.handovers_checked += other.handovers_checked;
        self.takeovers_checked += other.takeovers_checked;
        self.slowest_handover_ms = self.slowest_handover_ms.max(other.slowest_handover_ms);
        self.slowest_takeover_ms = self.slowest_takeover_ms.max(other.slowest_takeover_ms);
        self.fair_grants += other.fair_grants;
        self.grants_past_queue += other.grants_past_queue;
        self.places_taken += other.places_taken;
        self.places_lapsed += other.places_lapsed;
        self.places_left += other.places_left;
        self.fair_waits_checked += other.fair_waits_checked;
        self.fair_waits_behind += other.fair_waits_behind;
        self.longest_fair_wait_ms = self.longest_fair_wait_ms.max(other.longest_fair_wait_ms);
        self.most_free_wait_ms = self.most_free_wait_ms.max(other.most_free_wait_ms);
    }
}

/// Runs one seed; `record` keeps the timeline.
#[must_use]
pub fn run_seed(opts: &Options, seed: u64, record: bool) -> SeedReport {
    world::World::new(opts, seed, record).run()
}

/// Totals over a sweep.
#[derive(Clone, Debug, Default)]
pub struct SweepSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// Seeds that enabled each fault kind: lost replies, pauses, crashes, drift, lost
    /// requests, failovers, duplicated hints, dropped hint streams.
    pub seeds_with: [u64; 8],
    /// What the seeds counted, summed (`largest_batch`: the largest of any seed).
    pub tally: Tally,
    /// Seeds without faults that can cost a lease (checked for needless losses).
    pub seeds_without_lease_faults: u64,
    /// Seeds checked for handover liveness.
    pub seeds_checking_handovers: u64,
    /// Seeds with fair clients.
    pub seeds_with_fair_clients: u64,
    /// Of those, the ones checked for handover liveness and bounded waiting.
    pub fair_seeds_checking_waits: u64,
    /// Violations by kind.
    pub violations: std::collections::BTreeMap<ViolationKind, u64>,
    /// The first few failing seeds.
    pub failing_seeds: Vec<u64>,
    /// How many seeds failed.
    pub seeds_failing: u64,
}

impl SweepSummary {
    /// Adds one seed's report.
    pub fn add(&mut self, r: &SeedReport) {
        self.seeds += 1;
        self.events += r.events;
        self.faults.lost_replies += r.faults.lost_replies;
        self.faults.lost_requests += r.faults.lost_requests;
        self.faults.pauses += r.faults.pauses;
        self.faults.crashes += r.faults.crashes;
        self.faults.failovers += r.faults.failovers;
        self.faults.clock_jumps_forward += r.faults.clock_jumps_forward;
        self.faults.clock_jumps_back += r.faults.clock_jumps_back;
        self.faults.lost_hints += r.faults.lost_hints;
        self.faults.duplicated_hints += r.faults.duplicated_hints;
        self.faults.dropped_streams += r.faults.dropped_streams;
        for (i, on) in [
            r.mix.lost_reply_pct > 0,
            r.mix.pause_permille > 0,
            r.mix.crash_permille > 0,
            r.mix.drift_ppm > 0,
            r.mix.lost_request_pct > 0,
            r.mix.clock_jump_ms > 0,
            r.mix.hint_dup_pct > 0,
            r.mix.stream_drop_permille > 0,
        ]
        .into_iter()
        .enumerate()
        {
            self.seeds_with[i] += u64::from(on);
        }
        self.tally.add(&r.tally);
        self.seeds_without_lease_faults += u64::from(!r.mix.can_cost_a_lease());
        self.seeds_checking_handovers += u64::from(r.mix.checks_handovers());
        let fair = r.mix.fair_clients != 0;
        self.seeds_with_fair_clients += u64::from(fair);
        self.fair_seeds_checking_waits += u64::from(fair && r.mix.checks_handovers());
        for v in &r.violations {
            *self.violations.entry(v.kind).or_default() += 1;
        }
        if !r.violations.is_empty() {
            self.seeds_failing += 1;
            if self.failing_seeds.len() < 10 {
                self.failing_seeds.push(r.seed);
            }
        }
    }

    /// Total violations.
    #[must_use]
    pub fn violation_count(&self) -> u64 {
        self.violations.values().sum()
    }
}

/// Runs seeds `start..start + count`, calling `progress` after each.
pub fn sweep(
    opts: &Options,
    start: u64,
    count: u64,
    mut progress: impl FnMut(&SeedReport),
) -> SweepSummary {
    let mut summary = SweepSummary::default();
    for seed in start..start + count {
        let report = run_seed(opts, seed, false);
        summary.add(&report);
        progress(&report);
    }
    summary
}
