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
//! Elections (`Options::election`, `--election`): every client is a candidate on one
//! resource (fair), leading while it holds the lock, proclaiming new values now and then
//! (over the faulty network, so a proclaim may arrive after its sender was deposed) and
//! resigning when its work is done; leaders are also cut off from the store for a while
//! (partitions: every message of theirs lost), besides the crashes, pauses and lost
//! messages of every seed. An observer reads who leads every mean latency, its reads
//! overlapping. Checked besides the above: `observer_went_back` (the engine's
//! `election::Observer` never reports a fence at or below one it reported) and
//! `leader_value` (a leader's value is one its own lock id proclaimed); and a release that
//! left its resource free while a fresh place waited is a `Handoff` violation in every
//! seed. Failover is bounded by `handover_liveness` and `bounded_waiting`, which calm
//! elections check in every seed. See `world/election.rs`.
//!
//! The fault mix is derived from the seed (swarm testing): each seed enables its own subset
//! of faults at its own intensities, and the same seed always replays the same run.
//!
//! The crate's rooms: `options.rs` (what to simulate), `faults.rs` (the fault mix a seed
//! draws, and the faults it injected), `report.rs` (what a seed reports: violations,
//! timeline, downstream writes, counts), `sweep.rs` (many seeds and their totals), `world/`
//! (the simulation itself: the clients, their applications, the network, the hints, the
//! checks) and `svg.rs` (a replayed seed's timeline as a picture).

mod faults;
mod options;
mod report;
mod svg;
mod sweep;
mod world;

/// The simulator's random generator: xoshiro256** from `rand_xoshiro`, deterministic on
/// every platform and cheap (`StdRng`, ChaCha12, took half of a sweep's time in test builds,
/// where dependencies are not optimized). Not for secrets: lock ids in a simulation need not
/// be.
type SimRng = rand_xoshiro::Xoshiro256StarStar;

pub use faults::{FaultMix, Faults};
pub use options::Options;
pub use report::{DownstreamWrite, SeedReport, Tally, TimelineEntry, Violation, ViolationKind};
pub use svg::timeline_svg;
pub use sweep::{SweepSummary, sweep};

/// Runs one seed; `record` keeps the timeline.
#[must_use]
pub fn run_seed(opts: &Options, seed: u64, record: bool) -> SeedReport {
    world::World::new(opts, seed, record).run()
}
