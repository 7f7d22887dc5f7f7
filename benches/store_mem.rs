//! The in-memory store: uncontended lock+unlock, a contended exclusive lock, renew of a group
//! of K locks, and purge of N expired locks among N live ones.
//!
//! `MemStore` answers every call without waiting, so its futures are polled once with a
//! no-op waker instead of going through an async runtime: what is timed is the store.
//!
//! Data sets: `lock_unlock` takes and releases one resource on the system clock; `contended`
//! has two threads try to take the same resource (a winner releases it at once);
//! `renew/K` renews a group holding K resources with a 10 minute TTL; `purge/N` runs on a
//! fresh store (built outside the timing, on a manual clock) holding N groups of one lock
//! that have expired and N that have not.
//!
//! Target (docs/performance.md): over one million uncontended lock+unlock pairs per second
//! on one core. Waiting Lockers in memory are in the `waiting` bench.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BatchSize, Bencher, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use futures_util::FutureExt;
use lockwright_benches::RunMode;
use lockwright_engine::{
    Error, LockId, LockOptions, LockRequest, LockStore, ManualClock, Timestamp, Ttl,
};
use lockwright_store_mem::MemStore;

const GROUP: &str = "store_mem";
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// The value of a store-mem call, which never waits (it takes a mutex and returns).
fn at_once<T>(f: impl Future<Output = T>) -> T {
    f.now_or_never().expect("a store-mem operation suspended")
}

fn request(resource: &str, lock_id: &str, ttl: Option<Duration>) -> LockRequest {
    let mut details = LockOptions::new();
    details.ttl = ttl;
    LockRequest::new(resource, lock_id, &details).unwrap()
}

fn run(
    group: &mut BenchmarkGroup<'_, WallTime>,
    elements: u64,
    id: BenchmarkId,
    f: impl FnMut(&mut Bencher<'_>),
) {
    group.throughput(Throughput::Elements(elements));
    group.bench_function(id, f);
}

/// A store on a manual clock holding `n` expired groups and `n` live ones, at the instant
/// the expired ones have expired.
fn purge_fixture(n: usize) -> MemStore {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemStore::with_clock(Arc::clone(&clock));
    for i in 0..n {
        let expiring = request(
            &format!("e{i}"),
            &format!("ge{i}"),
            Some(Duration::from_secs(1)),
        );
        at_once(store.lock(&expiring)).unwrap();
        at_once(store.lock(&request(&format!("l{i}"), &format!("gl{i}"), None))).unwrap();
    }
    // Past the TTL and the store's takeover grace: the expiring locks are abandoned.
    clock.advance(Duration::from_secs(1) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);
    store
}

fn store_mem(c: &mut Criterion) {
    let mode = RunMode::current();
    let ks: &[usize] = mode.pick(&[1, 10], &[1, 10, 100, 1_000], &[1, 10, 100, 1_000]);
    let ns: &[usize] = mode.pick(&[10, 100], &[100, 1_000, 10_000], &[100, 1_000, 10_000]);
    let mut group = c.benchmark_group(GROUP);

    let store = MemStore::new();
    let hot = request("hot", "solo", None);
    // One xlock + one unlock of the group, one thread.
    run(
        &mut group,
        1,
        BenchmarkId::from_parameter("lock_unlock"),
        |b| {
            b.iter(|| {
                at_once(store.lock(&hot)).unwrap();
                at_once(store.unlock(&hot.lock_id)).unwrap()
            });
        },
    );

    // Two threads each try once per iteration; the winner releases at once.
    let contenders = [request("hot", "t0", None), request("hot", "t1", None)];
    let granted = AtomicU64::new(0);
    let attempts = AtomicU64::new(0);
    group.throughput(Throughput::Elements(2));
    group.bench_function(BenchmarkId::new("contended_xlock", "2_threads"), |b| {
        b.iter_custom(|iters| {
            let start = Barrier::new(2);
            std::thread::scope(|s| {
                let workers: Vec<_> = contenders
                    .iter()
                    .map(|req| {
                        let (store, start, granted) = (&store, &start, &granted);
                        s.spawn(move || {
                            start.wait();
                            let t = Instant::now();
                            for _ in 0..iters {
                                match at_once(store.lock(req)) {
                                    Ok(_) => {
                                        at_once(store.unlock(&req.lock_id)).unwrap();
                                        granted.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(Error::AlreadyLocked { .. }) => {}
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                            t.elapsed()
                        })
                    })
                    .collect();
                attempts.fetch_add(2 * iters, Ordering::Relaxed);
                workers
                    .into_iter()
                    .map(|w| w.join().unwrap())
                    .max()
                    .unwrap_or_default()
            })
        });
    });
    let (g, a) = (
        granted.load(Ordering::Relaxed),
        attempts.load(Ordering::Relaxed),
    );
    if a > 0 {
        mode.report(
            "store_mem/contended_xlock/2_threads",
            &format!("{:.0}% of attempts granted", 100.0 * g as f64 / a as f64),
        );
    }

    let ttl = Ttl::new(Duration::from_secs(600)).unwrap();
    for &k in ks {
        let store = MemStore::new();
        let group_id = LockId::new(format!("renew-{k}")).unwrap();
        for i in 0..k {
            let req = request(
                &format!("renew-{k}/r{i}"),
                group_id.as_str(),
                Some(ttl.as_duration()),
            );
            at_once(store.lock(&req)).unwrap();
        }
        run(&mut group, k as u64, BenchmarkId::new("renew", k), |b| {
            b.iter(|| {
                let renewed = at_once(store.renew(&group_id, ttl, Duration::ZERO)).unwrap();
                debug_assert_eq!(renewed.len(), k);
                renewed
            });
        });
    }

    for &n in ns {
        // n expired groups among n live.
        run(&mut group, n as u64, BenchmarkId::new("purge", n), |b| {
            b.iter_batched(
                || purge_fixture(n),
                |store| {
                    let removed = at_once(store.purge()).unwrap();
                    assert_eq!(removed.len(), n);
                    (store, removed)
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    store_mem(&mut criterion);
    criterion.final_summary();
}
