//! Differential property tests: the engine is the reference, the stores are the systems
//! under test.
//!
//! Random sequences of operations over three resources and four lock ids, with time moving
//! through expiry boundaries, run against the engine's `LockTable` and against a store on a
//! manual clock (store-mem, and store-mongo on a real server with `$$NOW` replaced by the
//! clock). After every step the store's outcome must equal the engine's, and the store's
//! whole lock table must equal the engine's table. The operations are the group ones, the
//! one-lock `renew_one` and `unlock_one`, and `renew_many` batches of one to four distinct
//! locks, each with its own TTL (the reference renews them one by one with `renew_one`).
//! The store's results are also checked against the properties themselves
//! (mutual_exclusion, shared_limit, purge_safety, renew_after_purge, fence_monotonic,
//! no_lost_grant, that a renewal or a batch changes exactly the named renewable locks and a
//! refusal nothing, and that status reports only matching locks), with predicates written
//! out here rather than taken from the engine, so the checks still bite when the store and
//! the engine share a bug.
//!
//! A failure is shrunk to a minimal sequence and its seed saved in
//! `lockwright/proptest-regressions/differential.txt`, which is committed and replayed first
//! on every run. To replay or dig in:
//! `scripts/mongod.sh run -- cargo test -p lockwright --all-features --test differential`,
//! with `PROPTEST_CASES=N` for more cases.
//!
//! Seeds: each test runs the sequences of a fixed seed ([`MEM_SEED`], [`MONGO_SEED`]), so a
//! run, and the kill matrix of `scripts/mutants`, is the same every time.
//! `LOCKWRIGHT_RANDOM_SEED=1` draws a fresh seed instead, and `PROPTEST_RNG_SEED=<u64>`
//! (proptest's own variable) runs the seed given; the seed in use is printed (shown with a
//! failure), so `PROPTEST_RNG_SEED` reruns a random run.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockwright_engine::{
    Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockStore, LockTable, ManualClock,
    Mode, Renewal, Resource, SharedLimit, Timestamp, Ttl,
};
#[cfg(feature = "mem")]
use lockwright_testkit::Mem;
#[cfg(feature = "mongo")]
use lockwright_testkit::Mongo;
use lockwright_testkit::{Backend, seed};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// Renew margin of every renew: TTLs here are a few milliseconds.
const MARGIN: Duration = Duration::from_millis(1);
/// The stores' takeover grace: TTLs here are a few milliseconds, and so is the grace.
const GRACE: Duration = Duration::from_millis(2);
const RESOURCES: [&str; 3] = ["a", "b", "c"];
const IDS: [&str; 4] = ["k0", "k1", "k2", "k3"];
/// Shards of an in-memory store.
const SHARDS: usize = 2;

mod properties;
mod reference;
mod system;

use properties::*;
use reference::*;

/// The seed of the sequences on store-mem.
#[cfg(feature = "mem")]
const MEM_SEED: u64 = 38;
/// The seed of the sequences on MongoDB.
#[cfg(feature = "mongo")]
const MONGO_SEED: u64 = 38;

/// The seed of a run: `PROPTEST_RNG_SEED` when set, a fresh one (one per process) with
/// `LOCKWRIGHT_RANDOM_SEED=1`, else `fixed`; printed once per test. proptest-state-machine
/// evaluates the configuration again for every case, hence the memory of both.
fn seed(fixed: u64) -> u64 {
    thread_local! {
        static PRINTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let seed = seed::chosen("PROPTEST_RNG_SEED", fixed, seed::decimal);
    if !PRINTED.replace(true) {
        eprintln!("differential: proptest seed {seed} (rerun with PROPTEST_RNG_SEED={seed})");
    }
    seed
}

/// `cases` sequences (unless `PROPTEST_CASES` says how many) from the seed [`seed`] gives.
fn config(cases: u32, fixed_seed: u64) -> Config {
    // The default reads proptest's environment variables (`PROPTEST_CASES` among them).
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config.rng_seed = RngSeed::Fixed(seed(fixed_seed));
    // Runs under a mutant are expected to fail; their counterexamples are not regressions.
    if std::env::var_os("LOCKWRIGHT_MUTANT").is_some_and(|v| !v.is_empty()) {
        config.failure_persistence = None;
    } else {
        config.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/differential.txt"
        ))));
    }
    config
}

#[cfg(feature = "mem")]
prop_state_machine! {
    #![proptest_config(config(256, MEM_SEED))]
    #[test]
    fn store_mem_matches_engine(sequential 1..40 => Differential<Mem>);
}

#[cfg(feature = "mongo")]
prop_state_machine! {
    #![proptest_config(config(40, MONGO_SEED))]
    #[test]
    fn store_mongo_matches_engine(sequential 1..30 => Differential<Mongo>);
}
