//! Linearizability: concurrent clients against each store, their recorded invoke/return
//! history checked with stateright's `LinearizabilityTester`, the engine being the
//! sequential specification.
//!
//! A round: a fresh store is preloaded at `NOW - 10 s` (locks expired at `NOW`, locks
//! expiring within the renew margin, locks without TTL), its clock is set to `NOW` and stays
//! there, and its table becomes the initial state of the specification. Then [`CLIENTS`]
//! client threads start together at a barrier and each issues a few random operations
//! (xlock, slock with a limit, unlock, renew, renew_one and unlock_one of the lock a lock id
//! holds on a resource, renew_many of one to three such locks with their own TTLs, status of
//! a resource, purge) over two
//! resources, recording every invocation and return. The history must be explainable by
//! running the operations one at a time, in an order that respects real time, on the
//! engine's `LockTable` at `NOW`, with identical results. Granted fences are compared too:
//! a fence is a function of the order of grants, and the specification replays the
//! operations in the candidate order, so a linearizable store gives the fences that order
//! gives. Result lists are compared sorted.
//!
//! - **store-mem**: any client uses any of three lock ids ([`Workload::SharedIds`]).
//! - **store-mongo**: each client uses its own lock id, and expired preloaded locks belong to
//!   groups no client uses ([`Workload::OwnedIds`] says why);
//!   `LINEARIZABILITY_MONGO_WORKLOAD=shared-ids` runs the store-mem workload instead, which
//!   store-mongo fails.
//! - A deliberately non-atomic store (a read-modify-write xlock: the test kit's
//!   `NonAtomicStore`) must be caught.
//!
//! The operations of a round come from a seeded PRNG; a failing round prints its seed, its
//! initial locks and its history, and `LINEARIZABILITY_SEED=<seed>` reruns those operations
//! (the thread schedule is the operating system's). The rounds of a test have the seeds
//! from a fixed base up ([`MEM_BASE_SEED`], [`MONGO_BASE_SEED`], [`NON_ATOMIC_BASE_SEED`]),
//! so every run, and the kill matrix of `scripts/mutants`, runs the same operations;
//! `LOCKWRIGHT_RANDOM_SEED=1` draws a fresh base instead, and
//! `LINEARIZABILITY_BASE_SEED=<seed>` runs from the base given (the base in use is printed,
//! and shown with a failure). `LOCKWRIGHT_MUTANT=<name>` runs against
//! a broken rule (feature `mutants`): both the store and the specification use the engine,
//! so only a store that does not decide with the engine's code can disagree. The MongoDB
//! test needs a server:
//! `scripts/mongod.sh run -- cargo test -p lockwright --all-features --test linearizability`.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

#[cfg(feature = "mem")]
use lockwright::MemStore;
#[cfg(feature = "mongo")]
use lockwright::store_mongo::test_support;
use lockwright_engine::{
    Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockStore, LockTable, ManualClock,
    Mode, Renewal, Resource, ResourceState, SharedLimit, Timestamp, Ttl,
};
use lockwright_testkit::NonAtomicStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use tokio::runtime::{Handle, Runtime};

/// The instant every round runs at.
const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// How long before [`NOW`] the preloaded locks are granted.
const PRELOAD_AGO: Duration = Duration::from_secs(10);
/// The renew margin of every renew.
const MARGIN: Duration = Duration::from_secs(1);
/// The TTL every renew asks for.
const RENEW_TTL: Duration = Duration::from_secs(30);
/// The resources every round locks.
const RESOURCES: [&str; 2] = ["r0", "r1"];
/// Concurrent clients per round.
const CLIENTS: usize = 4;

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT`, if any.
fn activate_mutant() {
    #[cfg(lockwright_mutants)]
    lockwright_testkit::activate_mutant();
}

mod rounds;
mod spec;

use rounds::*;
use spec::*;

// ---------------------------------------------------------------------------------------
// The tests.

/// Rounds against the in-memory store.
#[cfg(feature = "mem")]
const MEM_ROUNDS: usize = 200;
/// Rounds against MongoDB.
#[cfg(feature = "mongo")]
const MONGO_ROUNDS: usize = 150;
/// Rounds within which the non-atomic store must be caught.
const NON_ATOMIC_ROUNDS: usize = 200;
/// The seed of the first round against the in-memory store.
#[cfg(feature = "mem")]
const MEM_BASE_SEED: u64 = 0x1000;
/// The seed of the first round against MongoDB.
#[cfg(feature = "mongo")]
const MONGO_BASE_SEED: u64 = 0x2000;
/// The seed of the first round against the non-atomic store.
const NON_ATOMIC_BASE_SEED: u64 = 0x3000;

/// store-mem, under [`Workload::SharedIds`].
#[cfg(feature = "mem")]
#[test]
fn store_mem_is_linearizable() {
    activate_mutant();
    let rt = runtime();
    let (failure, ran) = rounds(MEM_ROUNDS, MEM_BASE_SEED, Workload::SharedIds, 4, |plan| {
        let clock = Arc::new(ManualClock::new(NOW));
        let store = MemStore::with_clock_and_shards(Arc::clone(&clock), 2);
        rt.block_on(plan.preload(&store, &clock));
        // The specification decides with the store's takeover grace.
        let init = store.snapshot().with_takeover_grace(store.takeover_grace());
        run_round(rt.handle(), &store, init.clone(), &plan).verdict(&plan, &init)
    });
    if let Some(account) = failure {
        panic!("store-mem, round {ran}: {account}");
    }
}

/// The workload of the MongoDB test: [`Workload::OwnedIds`], or [`Workload::SharedIds`]
/// with `LINEARIZABILITY_MONGO_WORKLOAD=shared-ids` (which store-mongo fails; see
/// [`Workload::OwnedIds`]).
#[cfg(feature = "mongo")]
fn mongo_workload() -> Workload {
    match std::env::var("LINEARIZABILITY_MONGO_WORKLOAD").as_deref() {
        Ok("shared-ids") => Workload::SharedIds,
        Ok("owned-ids") | Err(_) => Workload::OwnedIds,
        Ok(other) => panic!("LINEARIZABILITY_MONGO_WORKLOAD={other}: use owned-ids or shared-ids"),
    }
}

/// store-mongo on a real server, `$$NOW` replaced by the manual clock, under
/// [`mongo_workload`].
#[cfg(feature = "mongo")]
#[test]
fn store_mongo_is_linearizable() {
    activate_mutant();
    let rt = runtime();
    let clock = Arc::new(ManualClock::new(NOW));
    let store = rt.block_on(test_support::fresh_store(Some(Arc::clone(&clock))));
    let (failure, ran) = rounds(MONGO_ROUNDS, MONGO_BASE_SEED, mongo_workload(), 3, |plan| {
        let init = rt.block_on(async {
            store
                .collection()
                .delete_many(Default::default())
                .await
                .unwrap();
            plan.preload(&store, &clock).await;
            test_support::snapshot(&store)
                .await
                .with_takeover_grace(store.takeover_grace())
        });
        run_round(rt.handle(), &store, init.clone(), &plan).verdict(&plan, &init)
    });
    rt.block_on(test_support::teardown(&store));
    if let Some(account) = failure {
        panic!("store-mongo, round {ran}: {account}");
    }
}

/// The checker bites: [`NonAtomicStore`] is caught within [`NON_ATOMIC_ROUNDS`] rounds.
#[test]
fn non_atomic_store_is_not_linearizable() {
    activate_mutant();
    let rt = runtime();
    let (failure, ran) = rounds(
        NON_ATOMIC_ROUNDS,
        NON_ATOMIC_BASE_SEED,
        Workload::SharedIds,
        3,
        |plan| {
            let clock = Arc::new(ManualClock::new(NOW));
            let store = NonAtomicStore::new(Arc::clone(&clock));
            rt.block_on(plan.preload(&store, &clock));
            let init = store.snapshot();
            run_round(rt.handle(), &store, init.clone(), &plan).verdict(&plan, &init)
        },
    );
    let account = failure.unwrap_or_else(|| {
        panic!("the non-atomic store passed {ran} rounds: the checker does not bite")
    });
    eprintln!("caught the non-atomic store in round {ran}:\n{account}");
}
