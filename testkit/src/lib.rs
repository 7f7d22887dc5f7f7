//! The test kit of the Lockwright workspace (never published): what the store tests of
//! several crates share.
//!
//! - [`Backend`]: how a test gets a fresh store of a backend, reads its whole table and
//!   cleans up, with the backend's tuning for the Locker tests. The conformance suite, the
//!   differential tests and the Locker tests of `lockwright` all run through it.
//! - `Mem` (feature `mem`) and `Mongo` (feature `mongo`, on store-mongo's fixture,
//!   `mongo::fixture`: a fresh collection on `MONGODB_URI`): the backends. The features
//!   mirror `lockwright`'s, so a test built without a backend does not build it.
//! - [`NonAtomicStore`]: an engine-backed store whose `xlock` is deliberately not atomic,
//!   which a linearizability checker must catch.
//! - [`Forward`] and [`forward_lock_store!`]: a test store that wraps another and changes
//!   only the calls it overrides (breaks, delays or counts them); the rest go to the inner
//!   store.
//! - [`FencedStore`]: a downstream store that accepts a write only with a fence at least as
//!   high as any it accepted for that key.
//! - [`conformance`]: the conformance suite every [`LockStore`] must pass, 123 cases
//!   written against the port itself (the engine's [`LockStore`]), so this crate depends on
//!   the engine and the stores only; a test file runs it against a backend with
//!   `lockwright_testkit::conformance_suite!(TheBackend)`, one `#[test]` per case (this
//!   crate's `tests/conformance_mem.rs` and `tests/conformance_mongo.rs`).
//! - `replset` (feature `replset`): a throwaway MongoDB replica set on 127.0.0.1 (one or
//!   three mongods) that a test or example starts, fails over, kills, restarts, pauses and
//!   starts with shifted clocks; the `lockwright-mongod` binary runs a command beside one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{LockStore, LockTable, ManualClock};

pub mod conformance;
mod downstream;
mod forward;
#[cfg(feature = "mem")]
mod mem;
#[cfg(feature = "mongo")]
pub mod mongo;
mod non_atomic;
#[cfg(feature = "replset")]
pub mod replset;
pub mod seed;

pub use downstream::{FencedStore, Verdict};
#[doc(hidden)]
pub use forward::__forward;
pub use forward::Forward;
#[cfg(feature = "mem")]
pub use mem::{Mem, TokioClock};
#[cfg(feature = "mongo")]
pub use mongo::Mongo;
pub use non_atomic::NonAtomicStore;

/// Switches on the mutant `LOCKWRIGHT_MUTANT` names, of the engine's catalogue or (with the
/// feature `mongo`) the MongoDB store's, and returns its name: what every harness calls
/// first. Mutant builds only (`--cfg lockwright_mutants`).
///
/// # Panics
/// When the variable names no mutant of those catalogues.
#[cfg(lockwright_mutants)]
pub fn activate_mutant() -> Option<&'static str> {
    #[cfg(feature = "mongo")]
    {
        lockwright_store_mongo::mutants::activate_from_env()
    }
    #[cfg(not(feature = "mongo"))]
    {
        lockwright_engine::mutants::activate_from_env_with(&[])
    }
}

/// A backend under test: how a test gets a fresh, empty store of it, reads it back and
/// releases it, and how the Locker tests tune themselves to it.
pub trait Backend: 'static {
    /// The store type.
    type Store: LockStore;

    /// How long a TTL is in the Locker tests on this backend.
    const TTL: Duration;
    /// Whether the runtime's task count measures the locker alone. Not on MongoDB: the
    /// driver runs each in-flight operation as a task of its own.
    const COUNTS_TASKS: bool;
    /// How many locks the Locker's many-locks test holds: renewing 1,000 locks every 400 ms
    /// is more transactions than a small test server sustains, and lost leases would be
    /// correct.
    const MANY: usize;

    /// A fresh, empty store whose every time decision uses `clock`, split into `shards`
    /// shards where the backend has shards (the in-memory store; MongoDB has none), with
    /// takeover `grace`.
    fn store(
        clock: Arc<ManualClock>,
        shards: usize,
        grace: Duration,
    ) -> impl Future<Output = Self::Store> + Send;

    /// A fresh, empty store on real time, with the default takeover grace: the in-memory
    /// store's clock follows tokio's (so tests on paused tokio time move both together),
    /// MongoDB's is the server's.
    fn real_time_store() -> impl Future<Output = Self::Store> + Send;

    /// The whole lock table as stored, for comparison with the engine's.
    fn snapshot(store: &Self::Store) -> impl Future<Output = LockTable> + Send;

    /// Releases what `store` holds outside the process (a collection, say).
    fn teardown(store: &Self::Store) -> impl Future<Output = ()> + Send;
}
