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
//! (the thread schedule is the operating system's). `LOCKWRIGHT_MUTANT=<name>` runs against
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
use lockwright::engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStatus, LockStore, LockTable, ManualClock,
    Mode, Renewal, Resource, ResourceState, SharedLimit, Timestamp, Ttl,
};
#[cfg(feature = "mongo")]
use lockwright::store_mongo::test_support;
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
    lockwright::engine::mutants::activate_from_env();
}

// ---------------------------------------------------------------------------------------
// The sequential specification: the engine's lock table at a fixed instant.

/// One operation of a client.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    Xlock {
        resource: &'static str,
        lock_id: &'static str,
        ttl_ms: Option<u64>,
    },
    Slock {
        resource: &'static str,
        lock_id: &'static str,
        ttl_ms: Option<u64>,
        limit: Option<u32>,
    },
    Unlock {
        lock_id: &'static str,
    },
    Renew {
        lock_id: &'static str,
    },
    /// `renew_one` of the lock `lock_id` holds on `resource`.
    RenewOne {
        resource: &'static str,
        lock_id: &'static str,
    },
    /// `unlock_one` of the lock `lock_id` holds on `resource`.
    UnlockOne {
        resource: &'static str,
        lock_id: &'static str,
    },
    /// `renew_many` of the locks `(resource, lock_id, ttl_ms)`, in order, each the lock
    /// `lock_id` holds on `resource` (no lock twice: see [`renewal_batch`]).
    RenewMany {
        locks: Vec<(&'static str, &'static str, u64)>,
    },
    Status {
        resource: &'static str,
    },
    Purge,
}

/// A lock as reported, reduced to what identifies it and what the operations change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Lock {
    resource: String,
    lock_id: String,
    mode: Mode,
    fence: u64,
    expires_at: Option<Timestamp>,
    renewed_at: Option<Timestamp>,
}

impl From<&LockStatus> for Lock {
    fn from(s: &LockStatus) -> Self {
        Lock {
            resource: s.resource.as_str().to_owned(),
            lock_id: s.lock_id.as_str().to_owned(),
            mode: s.mode,
            fence: s.fence,
            expires_at: s.expires_at,
            renewed_at: s.renewed_at,
        }
    }
}

/// What an operation returned, in comparable form. Lists are sorted: the order of a list is
/// the differential tests' business, not a question of atomicity.
#[derive(Clone, Debug, PartialEq)]
enum Ret {
    /// A grant, with its fence.
    Granted(u64),
    /// The locks unlocked, renewed, reported or purged (a one-lock operation: the lock
    /// renewed or released, or none).
    Locks(Vec<Lock>),
    AlreadyLocked,
    LockNotFound,
    NotRenewable(Vec<Lock>),
    /// A batch's outcome for each of its locks, in the batch's order (each as [`one`]
    /// gives it).
    Each(Vec<Ret>),
    /// Any other error: never expected, from the engine or from a store.
    Failed(String),
}

/// Sorted reductions of `locks`.
fn reduce(locks: &[LockStatus]) -> Vec<Lock> {
    let mut out: Vec<Lock> = locks.iter().map(Lock::from).collect();
    out.sort();
    out
}

/// The comparable form of an error.
fn refusal(e: Error) -> Ret {
    match e {
        Error::AlreadyLocked { .. } => Ret::AlreadyLocked,
        Error::LockNotFound => Ret::LockNotFound,
        Error::NotRenewable { locks } => Ret::NotRenewable(reduce(&locks)),
        other => Ret::Failed(format!("{other:?}")),
    }
}

/// The comparable form of a grant's outcome.
fn grant(result: Result<LockStatus, Error>) -> Ret {
    result.map_or_else(refusal, |s| Ret::Granted(s.fence))
}

/// The comparable form of a group operation's outcome.
fn locks(result: Result<Vec<LockStatus>, Error>) -> Ret {
    result.map_or_else(refusal, |l| Ret::Locks(reduce(&l)))
}

/// The comparable form of a one-lock operation's outcome.
fn one(result: Result<Option<LockStatus>, Error>) -> Ret {
    result.map_or_else(refusal, |l| Ret::Locks(reduce(l.as_slice())))
}

/// The comparable form of a batch's outcome.
fn each(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Ret {
    result.map_or_else(refusal, |each| {
        Ret::Each(each.into_iter().map(|r| one(r.map(Some))).collect())
    })
}

/// The renewals of a `RenewMany`.
fn renewals(locks: &[(&'static str, &'static str, u64)]) -> Vec<Renewal> {
    locks
        .iter()
        .map(|&(resource, lock_id, ttl_ms)| Renewal {
            resource: res(resource),
            lock_id: id(lock_id),
            ttl: Ttl::new(Duration::from_millis(ttl_ms)).unwrap(),
        })
        .collect()
}

/// A validated resource name.
fn res(resource: &str) -> Resource {
    Resource::new(resource).unwrap()
}

/// A lock request without details.
fn request(resource: &str, lock_id: &str, ttl_ms: Option<u64>) -> LockRequest {
    let mut details = LockDetails::new();
    details.ttl = ttl_ms.map(Duration::from_millis);
    LockRequest::new(resource, lock_id, &details).unwrap()
}

/// A validated shared limit.
fn limit(m: Option<u32>) -> Option<SharedLimit> {
    m.map(|m| SharedLimit::new(m).unwrap())
}

/// A validated lock id.
fn id(lock_id: &str) -> LockId {
    LockId::new(lock_id).unwrap()
}

/// [`RENEW_TTL`], validated.
fn renew_ttl() -> Ttl {
    Ttl::new(RENEW_TTL).unwrap()
}

/// The specification: the engine's table, every operation applied at [`NOW`].
#[derive(Clone, Debug)]
struct Spec(LockTable);

impl SequentialSpec for Spec {
    type Op = Op;
    type Ret = Ret;

    fn invoke(&mut self, op: &Op) -> Ret {
        let table = &mut self.0;
        match *op {
            Op::RenewMany { ref locks } => Ret::Each(
                renewals(locks)
                    .iter()
                    .map(|r| {
                        one(table
                            .renew_one(&r.resource, &r.lock_id, r.ttl, MARGIN, NOW)
                            .map(Some))
                    })
                    .collect(),
            ),
            Op::Xlock {
                resource,
                lock_id,
                ttl_ms,
            } => grant(table.xlock(&request(resource, lock_id, ttl_ms), NOW)),
            Op::Slock {
                resource,
                lock_id,
                ttl_ms,
                limit: m,
            } => grant(table.slock(&request(resource, lock_id, ttl_ms), limit(m), NOW)),
            Op::Unlock { lock_id } => locks(Ok(table.unlock(&id(lock_id), NOW))),
            Op::Renew { lock_id } => locks(table.renew(&id(lock_id), renew_ttl(), MARGIN, NOW)),
            Op::RenewOne { resource, lock_id } => one(table
                .renew_one(&res(resource), &id(lock_id), renew_ttl(), MARGIN, NOW)
                .map(Some)),
            Op::UnlockOne { resource, lock_id } => {
                one(Ok(table.unlock_one(&res(resource), &id(lock_id), NOW)))
            }
            Op::Status { resource } => {
                locks(Ok(table.status(&Filter::new().resource(resource), NOW)))
            }
            Op::Purge => locks(Ok(table.purge(NOW))),
        }
    }
}

/// Applies `op` to `store` (whose clock reads [`NOW`]).
async fn apply<S: LockStore>(store: &S, op: &Op) -> Ret {
    match *op {
        Op::RenewMany { ref locks } => each(store.renew_many(&renewals(locks), MARGIN).await),
        Op::Xlock {
            resource,
            lock_id,
            ttl_ms,
        } => grant(store.xlock(&request(resource, lock_id, ttl_ms)).await),
        Op::Slock {
            resource,
            lock_id,
            ttl_ms,
            limit: m,
        } => grant(
            store
                .slock(&request(resource, lock_id, ttl_ms), limit(m))
                .await,
        ),
        Op::Unlock { lock_id } => locks(store.unlock(&id(lock_id)).await),
        Op::Renew { lock_id } => locks(store.renew(&id(lock_id), renew_ttl(), MARGIN).await),
        Op::RenewOne { resource, lock_id } => one(store
            .renew_one(
                &Renewal {
                    resource: res(resource),
                    lock_id: id(lock_id),
                    ttl: renew_ttl(),
                },
                MARGIN,
            )
            .await
            .map(Some)),
        Op::UnlockOne { resource, lock_id } => {
            one(store.unlock_one(&res(resource), &id(lock_id)).await)
        }
        Op::Status { resource } => locks(store.status(&Filter::new().resource(resource)).await),
        Op::Purge => locks(store.purge().await),
    }
}

// ---------------------------------------------------------------------------------------
// Rounds.

/// Which lock ids the clients use, and which locks a round starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// Any client uses any of [`IDS`]; the preloaded locks have any of them and any TTL.
    SharedIds,
    /// Client `i` alone uses lock id [`OWNED`]`[i]`, as a holder of a secret lock id does.
    /// Preloaded locks of those ids are live at [`NOW`]; expired preloaded locks belong to
    /// [`GHOSTS`], groups no client uses, all of whose locks are expired.
    ///
    /// This is what store-mongo is linearizable for: its group operations are not
    /// linearizable when they race grants of the same lock id (unlock and renew read the
    /// group in a snapshot-isolation transaction, which does not conflict with a concurrent
    /// grant on another document), nor is purge when the expired locks that put a group in
    /// its list vanish (taken over, purged) before its batch removes the group's other locks.
    #[cfg_attr(not(feature = "mongo"), allow(dead_code))] // only the MongoDB test uses it
    OwnedIds,
}

/// The lock ids of [`Workload::SharedIds`].
const IDS: [&str; 3] = ["k0", "k1", "k2"];
/// The lock id of each client in [`Workload::OwnedIds`].
const OWNED: [&str; CLIENTS] = ["k0", "k1", "k2", "k3"];
/// Groups of expired preloaded locks no client uses, in [`Workload::OwnedIds`].
const GHOSTS: [&str; 2] = ["g0", "g1"];

/// The operations of one round: the preload (grants at `NOW - 10 s`, refusals ignored) and
/// each client's operations.
struct Plan {
    seed: u64,
    workload: Workload,
    preload: Vec<Op>,
    clients: Vec<Vec<Op>>,
}

/// One of `choices`, uniformly.
fn pick<T: Copy>(rng: &mut StdRng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())]
}

/// A grant of `lock_id` on a random resource, exclusive or shared (limit: any of `limits`).
fn random_grant(
    rng: &mut StdRng,
    lock_id: &'static str,
    ttl_ms: Option<u64>,
    limits: &[Option<u32>],
) -> Op {
    let resource = pick(rng, &RESOURCES);
    if rng.random_bool(0.5) {
        Op::Xlock {
            resource,
            lock_id,
            ttl_ms,
        }
    } else {
        Op::Slock {
            resource,
            lock_id,
            ttl_ms,
            limit: pick(rng, limits),
        }
    }
}

/// One to three renewals of locks `lock_id()` gives on random resources, each for 20 or
/// 30 s, no (resource, lock id) twice: a batch naming a lock twice is legal, but
/// store-mongo stores the first TTL given for the lock while reporting the last (see the
/// conformance case `renew_many_names_one_lock_twice`), and that is not an atomicity
/// question.
fn renewal_batch(
    rng: &mut StdRng,
    mut lock_id: impl FnMut(&mut StdRng) -> &'static str,
) -> Vec<(&'static str, &'static str, u64)> {
    let mut locks: Vec<(&'static str, &'static str, u64)> = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let (resource, lock_id) = (pick(rng, &RESOURCES), lock_id(rng));
        let ttl_ms = pick(rng, &[20_000, 30_000]);
        if !locks.iter().any(|l| (l.0, l.1) == (resource, lock_id)) {
            locks.push((resource, lock_id, ttl_ms));
        }
    }
    locks
}

/// A random operation of a client using `lock_id`; its batches name locks of
/// `batch_id()`.
fn random_op(
    rng: &mut StdRng,
    lock_id: &'static str,
    batch_id: impl FnMut(&mut StdRng) -> &'static str,
) -> Op {
    // Within the renew margin, long, or none: nothing granted at NOW is expired at NOW.
    let ttl_ms = pick(rng, &[Some(500), Some(60_000), None]);
    match rng.random_range(0..26) {
        0..10 => random_grant(rng, lock_id, ttl_ms, &[Some(1), Some(2), None]),
        10..13 => Op::Unlock { lock_id },
        13..15 => Op::Renew { lock_id },
        15..17 => Op::RenewOne {
            resource: pick(rng, &RESOURCES),
            lock_id,
        },
        17..19 => Op::UnlockOne {
            resource: pick(rng, &RESOURCES),
            lock_id,
        },
        19..22 => Op::Status {
            resource: pick(rng, &RESOURCES),
        },
        22..24 => Op::RenewMany {
            locks: renewal_batch(rng, batch_id),
        },
        _ => Op::Purge,
    }
}

impl Plan {
    /// The plan of seed `seed`: `ops` operations for each of [`CLIENTS`] clients.
    fn new(seed: u64, workload: Workload, ops: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        // TTLs seen from NOW: expired 5 s ago, expiring within the margin, or never.
        let (expired, within_margin) = (Some(5_000), Some(10_500));
        let preload = (0..rng.random_range(0..=4))
            .map(|_| match workload {
                Workload::SharedIds => {
                    let (lock_id, ttl) = (
                        pick(&mut rng, &IDS),
                        pick(&mut rng, &[expired, within_margin, None]),
                    );
                    random_grant(&mut rng, lock_id, ttl, &[None])
                }
                Workload::OwnedIds if rng.random_bool(0.5) => {
                    let lock_id = pick(&mut rng, &GHOSTS);
                    random_grant(&mut rng, lock_id, expired, &[None])
                }
                Workload::OwnedIds => {
                    let (lock_id, ttl) = (
                        pick(&mut rng, &OWNED),
                        pick(&mut rng, &[within_margin, None]),
                    );
                    random_grant(&mut rng, lock_id, ttl, &[None])
                }
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|client| {
                (0..ops)
                    .map(|_| {
                        let lock_id = match workload {
                            Workload::SharedIds => pick(&mut rng, &IDS),
                            Workload::OwnedIds => OWNED[client],
                        };
                        // A batch names any ids in the shared workload, its own otherwise.
                        random_op(&mut rng, lock_id, |rng| match workload {
                            Workload::SharedIds => pick(rng, &IDS),
                            Workload::OwnedIds => OWNED[client],
                        })
                    })
                    .collect()
            })
            .collect();
        Plan {
            seed,
            workload,
            preload,
            clients,
        }
    }

    /// Applies the preload to `store` at `NOW - 10 s`, then sets `clock` to [`NOW`].
    async fn preload<S: LockStore>(&self, store: &S, clock: &ManualClock) {
        clock.set(Timestamp::from_millis(
            NOW.as_millis() - PRELOAD_AGO.as_millis() as u64,
        ));
        for op in &self.preload {
            if let Ret::Failed(e) = apply(store, op).await {
                panic!("preloading {op:?} failed: {e}");
            }
        }
        clock.set(NOW);
    }
}

/// The seeds of the rounds of a test: from `LINEARIZABILITY_SEED` (that seed only) or random.
fn seeds(rounds: usize) -> Vec<u64> {
    match std::env::var("LINEARIZABILITY_SEED") {
        Ok(s) if !s.is_empty() => {
            let s = s.trim_start_matches("0x");
            vec![u64::from_str_radix(s, 16).expect("LINEARIZABILITY_SEED is a hex u64")]
        }
        _ => (0..rounds).map(|_| rand::random()).collect(),
    }
}

/// The history of a round: the tester, and every event in the order recorded, for messages.
struct History {
    tester: LinearizabilityTester<usize, Spec>,
    events: Vec<String>,
}

impl History {
    /// `Ok` when linearizable; otherwise a readable account of the round.
    fn verdict(&self, plan: &Plan, init: &LockTable) -> Result<(), String> {
        if self.tester.serialized_history().is_some() {
            return Ok(());
        }
        let mut msg = format!(
            "round with seed {seed:#x}, workload {workload:?}, is NOT linearizable (rerun its \
             operations with LINEARIZABILITY_SEED={seed:#x})\ninitial locks at NOW:\n",
            seed = plan.seed,
            workload = plan.workload,
        );
        for (name, state) in init.resources() {
            let _ = writeln!(msg, "  {name}: {}", describe(state));
        }
        msg.push_str("history (client: invoke / return, in real-time order):\n");
        for (i, e) in self.events.iter().enumerate() {
            let _ = writeln!(msg, "  {:>3}. {e}", i + 1);
        }
        Err(msg)
    }
}

/// A resource's locks in a line.
fn describe(state: &ResourceState) -> String {
    let locks: Vec<String> = state
        .locks()
        .map(|(mode, l)| {
            format!(
                "{mode} {} fence {} expires {:?}",
                l.lock_id,
                l.fence,
                l.expires_at
                    .map(|e| e.as_millis() as i64 - NOW.as_millis() as i64)
            )
        })
        .collect();
    format!("counter {} [{}]", state.last_fence, locks.join("; "))
}

/// Runs the clients of `plan` concurrently against `store`, whose table is `init` and whose
/// clock reads [`NOW`], and returns their history. Each client is an OS thread that drives
/// its calls on `rt` (so the store's IO and timers run on the runtime) and starts at a
/// barrier with the others. Invocations and returns are recorded under one mutex, just
/// before a call starts and just after it ends, so the recorded real-time order is implied
/// by the real one.
fn run_round<S: LockStore>(rt: &Handle, store: &S, init: LockTable, plan: &Plan) -> History {
    let history = Mutex::new(History {
        tester: LinearizabilityTester::new(Spec(init)),
        events: Vec::new(),
    });
    let start = Barrier::new(plan.clients.len());
    std::thread::scope(|scope| {
        for (client, ops) in plan.clients.iter().enumerate() {
            let (history, start) = (&history, &start);
            scope.spawn(move || {
                start.wait();
                for op in ops {
                    {
                        let mut h = history.lock().unwrap();
                        h.events.push(format!("c{client}: {op:?}"));
                        h.tester.on_invoke(client, op.clone()).unwrap();
                    }
                    let ret = rt.block_on(apply(store, op));
                    if let Ret::Failed(e) = &ret {
                        panic!("client {client}: {op:?} failed: {e}");
                    }
                    {
                        let mut h = history.lock().unwrap();
                        h.events.push(format!("c{client}:   -> {ret:?}"));
                        h.tester.on_return(client, ret).unwrap();
                    }
                }
            });
        }
    });
    history.into_inner().unwrap()
}

/// Runs `rounds` rounds of `ops` operations per client; `round` runs one plan on a fresh,
/// preloaded store and returns the verdict. Returns the first non-linearizable round's
/// account, if any, and how many rounds ran.
fn rounds(
    rounds: usize,
    workload: Workload,
    ops: usize,
    mut round: impl FnMut(Plan) -> Result<(), String>,
) -> (Option<String>, usize) {
    let seeds = seeds(rounds);
    for (i, seed) in seeds.iter().enumerate() {
        if let Err(account) = round(Plan::new(*seed, workload, ops)) {
            return (Some(account), i + 1);
        }
    }
    (None, seeds.len())
}

/// The runtime the stores' futures run on (its workers drive IO and timers).
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// The tests.

/// Rounds against the in-memory store.
#[cfg(feature = "mem")]
const MEM_ROUNDS: usize = 200;
/// Rounds against MongoDB.
#[cfg(feature = "mongo")]
const MONGO_ROUNDS: usize = 30;
/// Rounds within which the non-atomic store must be caught.
const NON_ATOMIC_ROUNDS: usize = 200;

/// store-mem, under [`Workload::SharedIds`].
#[cfg(feature = "mem")]
#[test]
fn store_mem_is_linearizable() {
    activate_mutant();
    let rt = runtime();
    let (failure, ran) = rounds(MEM_ROUNDS, Workload::SharedIds, 4, |plan| {
        let clock = Arc::new(ManualClock::new(NOW));
        let store = MemStore::with_clock_and_shards(Arc::clone(&clock), 2);
        rt.block_on(plan.preload(&store, &clock));
        let init = store.snapshot();
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
    let (failure, ran) = rounds(MONGO_ROUNDS, mongo_workload(), 3, |plan| {
        let init = rt.block_on(async {
            store
                .collection()
                .delete_many(Default::default())
                .await
                .unwrap();
            plan.preload(&store, &clock).await;
            test_support::snapshot(&store).await
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
    let (failure, ran) = rounds(NON_ATOMIC_ROUNDS, Workload::SharedIds, 3, |plan| {
        let clock = Arc::new(ManualClock::new(NOW));
        let store = NonAtomicStore::new(Arc::clone(&clock));
        rt.block_on(plan.preload(&store, &clock));
        let init = store.snapshot();
        run_round(rt.handle(), &store, init.clone(), &plan).verdict(&plan, &init)
    });
    let account = failure.unwrap_or_else(|| {
        panic!("the non-atomic store passed {ran} rounds: the checker does not bite")
    });
    eprintln!("caught the non-atomic store in round {ran}:\n{account}");
}
