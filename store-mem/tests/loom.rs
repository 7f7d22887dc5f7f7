//! Loom: every interleaving (up to `LOOM_MAX_PREEMPTIONS` preemptions) of three threads
//! locking, unlocking and purging on one [`MemStore`], through the store's real locking code
//! (its `sync` shim is loom's under `--cfg loom`).
//!
//! After every operation each thread snapshots the store and checks, with predicates written
//! here rather than the engine's (so a broken rule cannot vouch for itself):
//! **mutual_exclusion**, **shared_limit** and **fence_monotonic**. Time is a manual clock
//! that does not move while the threads run.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p lockwright-store-mem --all-features --test loom
//! ```
//!
//! `LOCKWRIGHT_MUTANT=<name>` runs the same checks against a broken rule (feature `mutants`).
#![cfg(loom)]
#![allow(clippy::unwrap_used)] // a test: a failed step must panic with its value

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use lockwright_engine::{
    Access, Error, LockId, LockOptions, LockRequest, LockStore, LockTable, SharedLimit, StoredLock,
    Timestamp,
};
use lockwright_store_mem::MemStore;

/// The instant the threads run at (the clock does not move while they do).
const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Shards of the store under test: two, so group operations lock more than one mutex.
const SHARDS: usize = 2;

/// Drives a future of the in-memory store to completion with a single poll: its `async fn`s
/// never suspend, so `Pending` would mean the store started waiting, which the model cannot
/// explore.
fn run<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a MemStore operation returned Pending"),
    }
}

/// The shard `MemStore` puts `name` in, computed the way it does (a default hasher modulo the
/// shard count). Only used to pick resource names that land in different shards; should the
/// store hash differently, the names may share a shard and the tests still hold.
fn shard_of(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish() % SHARDS as u64
}

/// Two resource names in different shards.
fn two_resources() -> (String, String) {
    let first = "res-0".to_string();
    let second = (1..100)
        .map(|i| format!("res-{i}"))
        .find(|n| shard_of(n) != shard_of(&first))
        .unwrap_or_else(|| "res-1".to_string());
    (first, second)
}

/// Live at [`NOW`], by this file's own predicate (not the engine's, which a mutant may bend).
fn live(lock: &StoredLock) -> bool {
    lock.expires_at.is_none_or(|e| e > NOW)
}

/// Checks the table-wide invariants on a snapshot: **mutual_exclusion** (a live exclusive
/// lock is alone), **shared_limit** (no more live shared locks than `limit`, the one limit
/// every shared grant of the scenario uses) and the fence bookkeeping (the fences on a
/// resource are distinct and none exceeds its counter).
fn check_table(table: &LockTable, limit: Option<u32>, context: &str) {
    for (name, state) in table.resources() {
        let live_exclusive = state.exclusive.iter().filter(|l| live(l)).count();
        let live_shared = state.shared.iter().filter(|l| live(l)).count();
        assert!(
            live_exclusive == 0 || live_shared == 0,
            "mutual_exclusion violated on {name} ({context}): a live exclusive lock and \
             {live_shared} live shared locks: {state:?}"
        );
        if let Some(m) = limit {
            assert!(
                live_shared <= m as usize,
                "shared_limit violated on {name} ({context}): {live_shared} live shared locks, \
                 limit {m}: {state:?}"
            );
        }
        let mut fences: Vec<u64> = state.locks().map(|(_, l)| l.fence).collect();
        assert!(
            fences.iter().all(|f| *f <= state.last_fence),
            "fence_monotonic violated on {name} ({context}): a lock's fence exceeds the \
             counter: {state:?}"
        );
        fences.sort_unstable();
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fence_monotonic violated on {name} ({context}): two locks share a fence: {state:?}"
        );
    }
}

/// A lock request without details, with an optional TTL.
fn request(resource: &str, lock_id: &str, ttl: Option<Duration>) -> LockRequest {
    let mut details = LockOptions::new();
    details.ttl = ttl;
    LockRequest::new(resource, lock_id, &details).unwrap()
}

/// One thread of a scenario: the shared store, the one shared limit of the scenario, and the
/// fences this thread was granted, per resource, in the order it got them.
struct Client {
    store: Arc<MemStore>,
    limit: Option<u32>,
    name: &'static str,
    fences: BTreeMap<String, Vec<u64>>,
}

impl Client {
    fn new(store: &Arc<MemStore>, limit: Option<u32>, name: &'static str) -> Self {
        Client {
            store: Arc::clone(store),
            limit,
            name,
            fences: BTreeMap::new(),
        }
    }

    /// Snapshots the store and checks every invariant, plus: the counter of each resource is
    /// at least every fence this thread was granted there.
    fn check(&self, after: &str) {
        let context = format!("{} after {after}", self.name);
        let table = self.store.snapshot();
        check_table(&table, self.limit, &context);
        for (resource, fences) in &self.fences {
            let counter = table
                .resources()
                .iter()
                .find(|(name, _)| name.as_str() == resource)
                .map_or(0, |(_, state)| state.last_fence);
            let last = fences.last().copied().unwrap_or(0);
            assert!(
                counter >= last,
                "fence_monotonic violated on {resource} ({context}): counter {counter} below \
                 granted fence {last}"
            );
        }
    }

    /// Records a grant's fence, checking it exceeds this thread's earlier fences there.
    fn granted(&mut self, resource: &str, fence: u64) {
        let fences = self.fences.entry(resource.to_string()).or_default();
        if let Some(last) = fences.last() {
            assert!(
                fence > *last,
                "fence_monotonic violated on {resource}: {} got fence {fence} after {last}",
                self.name
            );
        }
        fences.push(fence);
    }

    /// Asks for an exclusive lock; `true` when granted.
    fn xlock(&mut self, resource: &str, lock_id: &str) -> bool {
        let outcome = run(self.store.lock(&request(resource, lock_id, None)));
        let granted = self.outcome(resource, outcome);
        self.check(&format!("xlock({resource}, {lock_id}) -> {granted}"));
        granted
    }

    /// Asks for a shared lock with the scenario's limit; `true` when granted. A grant must
    /// leave at most `limit` live shared locks (**shared_limit**: the snapshot includes the
    /// new lock).
    fn slock(&mut self, resource: &str, lock_id: &str) -> bool {
        let limit = self.limit.map(|m| SharedLimit::new(m).unwrap());
        let shared = request(resource, lock_id, None).with_access(Access::Shared(limit));
        let outcome = run(self.store.lock(&shared));
        let granted = self.outcome(resource, outcome);
        self.check(&format!("slock({resource}, {lock_id}) -> {granted}"));
        granted
    }

    /// Releases a group.
    fn unlock(&mut self, lock_id: &str) {
        run(self.store.unlock(&LockId::new(lock_id).unwrap())).unwrap();
        self.check(&format!("unlock({lock_id})"));
    }

    /// Purges expired groups.
    fn purge(&mut self) {
        run(self.store.purge()).unwrap();
        self.check("purge");
    }

    fn outcome(
        &mut self,
        resource: &str,
        outcome: Result<lockwright_engine::LockStatus, Error>,
    ) -> bool {
        match outcome {
            Ok(status) => {
                self.granted(resource, status.fence);
                true
            }
            Err(Error::AlreadyLocked { .. }) => false,
            Err(e) => panic!("{}: unexpected error {e:?}", self.name),
        }
    }
}

/// The end of a scenario: every fence granted on a resource is distinct across threads, and
/// the resource's counter is the greatest of them (no grant was lost or reordered below it).
fn check_fences(store: &MemStore, clients: &[Client]) {
    let table = store.snapshot();
    check_table(&table, None, "the end");
    let mut all: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for client in clients {
        for (resource, fences) in &client.fences {
            all.entry(resource).or_default().extend(fences);
        }
    }
    for (resource, mut fences) in all {
        fences.sort_unstable();
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fence_monotonic violated on {resource}: a fence was granted twice: {fences:?}"
        );
        let counter = table
            .resources()
            .iter()
            .find(|(name, _)| name.as_str() == resource)
            .map(|(_, state)| state.last_fence);
        assert_eq!(
            counter,
            fences.last().copied(),
            "fence_monotonic: the counter of {resource} is not the last fence granted"
        );
    }
}

/// A store on a manual clock at [`NOW`], holding one exclusive lock of group `old` on
/// `resource` that expired before [`NOW`] (so grants take it over and purge removes it).
fn store_with_expired_lock(resource: &str) -> Arc<MemStore> {
    let clock = std::sync::Arc::new(lockwright_engine::ManualClock::new(Timestamp::from_millis(
        NOW.as_millis() - 10_000,
    )));
    let store = Arc::new(MemStore::with_clock_and_shards(
        std::sync::Arc::clone(&clock),
        SHARDS,
    ));
    run(store.lock(&request(resource, "old", Some(Duration::from_secs(5))))).unwrap();
    clock.set(NOW);
    store
}

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT`, if any.
fn activate_mutant() {
    #[cfg(lockwright_mutants)]
    lockwright_engine::mutants::activate_from_env();
}

/// **mutual_exclusion**: exclusive and shared grants on one resource race each other, a
/// purge and a takeover of an expired lock; no snapshot ever shows a live exclusive lock
/// beside another live lock.
#[test]
fn mutual_exclusion() {
    activate_mutant();
    loom::model(|| {
        let (ra, rb) = two_resources();
        let store = store_with_expired_lock(&rb);
        let limit = Some(2);

        let t1 = {
            let (store, ra) = (Arc::clone(&store), ra.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, limit, "t1");
                if c.xlock(&ra, "a") {
                    c.unlock("a");
                }
                c
            })
        };
        let t2 = {
            let (store, ra, rb) = (Arc::clone(&store), ra.clone(), rb.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, limit, "t2");
                c.slock(&ra, "b");
                c.xlock(&rb, "b");
                c
            })
        };
        let mut main = Client::new(&store, limit, "main");
        main.purge();
        main.xlock(&ra, "c");

        let clients = [t1.join().unwrap(), t2.join().unwrap(), main];
        check_fences(&store, &clients);
    });
}

/// **shared_limit**: three shared grants with limit 2 race on one resource while one holder
/// releases; no snapshot ever shows more than two live shared locks.
#[test]
fn shared_limit() {
    activate_mutant();
    loom::model(|| {
        let (ra, _) = two_resources();
        let clock = std::sync::Arc::new(lockwright_engine::ManualClock::new(NOW));
        let store = Arc::new(MemStore::with_clock_and_shards(clock, SHARDS));
        let limit = Some(2);

        let t1 = {
            let (store, ra) = (Arc::clone(&store), ra.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, limit, "t1");
                if c.slock(&ra, "a") {
                    c.unlock("a");
                }
                c
            })
        };
        let t2 = {
            let (store, ra) = (Arc::clone(&store), ra.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, limit, "t2");
                c.slock(&ra, "b");
                c
            })
        };
        let mut main = Client::new(&store, limit, "main");
        main.slock(&ra, "c");

        let clients = [t1.join().unwrap(), t2.join().unwrap(), main];
        let live_shared = store
            .snapshot()
            .resources()
            .values()
            .map(|s| s.shared.iter().filter(|l| live(l)).count())
            .sum::<usize>();
        assert!(
            live_shared <= 2,
            "shared_limit violated at the end: {live_shared}"
        );
        check_fences(&store, &clients);
    });
}

/// **fence_monotonic**: grants, releases and re-grants on two resources (one of them over
/// an expired lock) race a purge; every thread's fences on a resource strictly increase, no
/// fence is granted twice, and each counter ends at the last fence granted.
#[test]
fn fence_monotonic() {
    activate_mutant();
    loom::model(|| {
        let (ra, rb) = two_resources();
        let store = store_with_expired_lock(&rb);

        let t1 = {
            let (store, ra) = (Arc::clone(&store), ra.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, None, "t1");
                c.xlock(&ra, "a");
                c.unlock("a");
                c.xlock(&ra, "a");
                c
            })
        };
        let t2 = {
            let (store, ra, rb) = (Arc::clone(&store), ra.clone(), rb.clone());
            thread::spawn(move || {
                let mut c = Client::new(&store, None, "t2");
                c.slock(&ra, "b");
                c.slock(&rb, "b");
                c
            })
        };
        let mut main = Client::new(&store, None, "main");
        main.purge();
        main.xlock(&rb, "c");

        let clients = [t1.join().unwrap(), t2.join().unwrap(), main];
        check_fences(&store, &clients);
    });
}
