//! A stateright model of Lockwright: clients with drifting clocks, beliefs, pauses and
//! crashes, a purger whose phases interleave with everything else, and a fenced downstream
//! store, all acting on the engine's own [`LockTable`](lockwright_engine::LockTable).
//!
//! The transitions ([`model`]) call the engine for every lock rule: grants (plain and
//! fair), leaving a queue, unlock, renew, the three phases of purge and the holding rule. The model itself only keeps real time
//! (one tick per millisecond), the store's clock (real time plus the offset of the member
//! that is primary), each client's clock (`floor(real * rate)`), what each client believes
//! it holds and until when, and what the downstream store accepted. The properties ([`props`]) are written from the rules' definitions, not from the
//! engine's code, so a broken rule (an engine mutant) shows up as a counterexample.
//!
//! - [`Config`]: clients and their clock rates, resources, the time bound, TTL, shared limit,
//!   renew margin, drift margin, takeover grace, the skew between the store members' clocks
//!   and the number of failovers, faults, fair requests and their places' lease, symmetry
//!   reduction; [`Config::ci`], [`Config::ci_faults`], [`Config::ci_skew`],
//!   [`Config::ci_fair`], [`Config::ci_handoff`], [`Config::ci_wakes`],
//!   [`Config::ci_election`] and [`Config::ci_observe`] are what CI checks exhaustively.
//! - [`LockState`], [`Action`]: what the checker explores.
//! - [`props`]: `mutual_exclusion`, `shared_limit`, `purge_safety`, `renew_after_purge`,
//!   `holder_safety`, `fence_monotonic`, `idempotence`, `no_lost_grant`, the queue's `fifo`,
//!   `no_starvation` (bounded: see [`props::no_starvation`]) and `queue_places`, and the
//!   `sometimes_*` properties showing that each is not vacuous.
//! - [`step`]: one step as the checker takes it (apply, then judge), and the
//!   `stateright::Model` implementation.
//! - [`symmetry`]: reduction over clients with equal clock rates.
//! - [`verdict`]: what a step broke or witnessed, kept in the state it leads to.
//! - [`trace`]: counterexamples as numbered, readable traces.
//!
//! # Modelling choices
//!
//! - **Atomic requests.** A lock request is answered in the step that sends it, so the local
//!   send time the holding rule measures from is the grant's local time.
//! - **Groups.** A client uses one lock id (per incarnation) for all its locks, so a group
//!   can span resources and purge's group rule is exercised. Because a purge removes a whole
//!   group as soon as one of its locks has expired, a client trusts its locks until the
//!   earliest trust instant among them (a renewal, which moves the whole group, resets it),
//!   and adds to its group only while it trusts it or once the group holds nothing (else it
//!   unlocks first, or crashes and restarts with a new lock id). `Locker` never meets this:
//!   it takes a fresh lock id for every guard.
//! - **Bounds.** Real time runs to [`Config::ticks`]; at most [`Config::grants_per_ms`]
//!   grants per resource and millisecond (else lock-unlock loops within one millisecond
//!   would count fences through the engine's per-millisecond reserve).
//! - **Pauses** stop a client from acting while its clock runs and its beliefs stay. Every
//!   action is optional anyway, so a pause adds no behaviour; it is there to be seen in
//!   traces. The pause in the middle of a write is the delay between [`Action::Write`] and
//!   [`Action::Deliver`].
//! - **Crashes** lose the client's beliefs and move it to a new lock id: the smallest one
//!   that holds nothing and takes no part in an in-flight purge, which is as good as a
//!   fresh random id and keeps equal situations equal states.
//! - **Stale writes** (fence below the highest the downstream accepted) are rejected as soon
//!   as they are stale: their answer can no longer change.
//! - **Failovers** ([`Action::Failover`], with [`Config::skew`] above zero, at most
//!   [`Config::failovers`] times): the store's members judge expiry by their own wall clocks,
//!   which are up to `skew` ms apart; the store's clock reads real time plus 0 or `skew`,
//!   and a failover switches between the two, so it jumps forward or back while the
//!   clients' clocks and their trust run on. A lease written under one clock and judged by
//!   one `skew` ahead expires early by `skew`; the takeover grace ([`Config::grace`]) must
//!   cover it, and the checks show that it does when `grace >= skew` and that
//!   `holder_safety` fails when it does not.
//! - **The fence clock** (`LockTable::fence_clock`, the highest fence floor any grant or
//!   purge saw) keeps fences from going back with the store's clock. The table's equality
//!   and hash leave it out, so each state keeps what of it can still change an outcome
//!   ([`LockState::fence_clock`], [`LockModel::fence_clock_key`]): all of it while a grant
//!   may still take its fence from it, otherwise only which emptied resources a begun
//!   purge will delete. A test checks that keeping all of it reaches the same states.
//! - **A purge that checks again** ([`Config::purge_rechecks`], on in the failover
//!   configuration): as MongoDB's purge does in each batch's transaction, the finishing
//!   phase purges only those of its groups that still hold an abandoned lock. The plain
//!   phases are safe only while the store's clock never goes back (a lock created after the
//!   purge began then has `created_at >= t`); across a failover back they are not, and the
//!   checker shows it.
//! - **Purge in its own millisecond**: a client whose group a begun purge is about to
//!   remove may take a new lock in the purge's own millisecond, so that lock has
//!   `created_at == t` although it was granted after the purge began. The engine spares it
//!   (purge removes locks created before `t`); with `<=` instead, `holder_safety` fails.
//! - **Fair requests** ([`Config::fair`], on in [`Config::ci_fair`]): a client may ask
//!   fairly ([`Action::FairXLock`], [`Action::FairSLock`]) with a ticket `q<client>.<n>`;
//!   refused, it waits ([`state::Wait`]): it asks only for that again, with the same ticket,
//!   and its refusals take or refresh its place (lease [`Config::queue_ttl`], 2 ms: the
//!   model's time steps are TTL-sized, not the engine's 100 ms floor). It may leave the
//!   queue ([`Action::Leave`], `LockTable::leave_queue`) or die while waiting
//!   ([`Action::StopWaiting`]: it stops asking, and its place lapses as time runs); a client
//!   starts a new wait only once it has no live place (so dead places of one client do not
//!   pile up within a lease), with the smallest ticket number that names no live place,
//!   which is as good as a fresh ticket. Places are judged at the store's clock, like locks.
//!   A waiting client asks again only where [`Config::grants_per_ms`] lets the resource
//!   grant, like any request. The queue is in [`Config::ci_fair`] only: two clients, one
//!   resource, 0..=5 ms (its unique states are pinned by `tests/model_check.rs`; `skew` and
//!   `ci` with queues are checked by command only, `--fair`).
//! - **Wakes** ([`Config::wakes`], on in [`Config::ci_wakes`]): every lock a step hands to a
//!   place becomes a wake in flight to the waiter whose place it names
//!   ([`state::WakeMsg`]); the waiter hears it at any later step, once or twice
//!   ([`Action::Hear`]), and trusts the lock it carries by the Locker's own rule
//!   (`trust::trust_wake`), measured from when it sent the request whose refusal last
//!   kept its place, or only wakes up. Requests are atomic, so none is in flight when a
//!   wake arrives; a waiter's lock id is its acquire's alone (releasing it gives the wait
//!   up), and a wait that ends drops its wakes.
//!
//! ```
//! use lockwright_model::{Config, LockModel};
//! use stateright::{Checker, Model};
//!
//! let config = Config::new(1, 1, 2)?;
//! let checker = LockModel::new(config).checker().spawn_bfs().join();
//! for name in lockwright_model::props::ALWAYS {
//!     assert!(checker.discovery(name).is_none(), "{name}");
//! }
//! # Ok::<(), lockwright_model::ConfigError>(())
//! ```
#![forbid(unsafe_code)]

pub mod action;
pub mod config;
pub mod effect;
pub mod election;
pub mod enabled;
pub mod model;
pub mod props;
mod show;
pub mod state;
pub mod step;
pub mod symmetry;
pub mod trace;
pub mod verdict;
pub mod wake;

pub use action::{Action, Effect};
pub use config::{Config, ConfigError, Rate};
pub use model::LockModel;
pub use state::WakeMsg;
pub use state::{Belief, ClientState, FenceClockKey, LockState, Wait};
