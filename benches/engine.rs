//! The engine's pure transitions (xlock, slock, unlock, renew, purge, status) on lock tables
//! of 1, 1,000 and 100,000 resources.
//!
//! Data set: resource `rNNNNNN` held exclusively by its own group `gNNNNNN`, granted at a
//! fixed instant with a 60 s TTL; in the purge table every other lock has a 1 ms TTL and so
//! has expired when purge runs (half the table is removed). Tables are built once per size,
//! outside the timing; a transition that changes the table runs on a fresh clone prepared by
//! `iter_batched_ref` (the clone is not timed). Renew is the exception: renewing the same
//! group at the same instant leaves the table as it found it, so it runs in place.
//!
//! Target (benches/README.md): well under 1 µs per transition. Purge and an unfiltered scan
//! are linear in the table, so their throughput is per lock in the table.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BatchSize, Bencher, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use lockwright_benches::results::load_average;
use lockwright_benches::{Meta, Record, RunMode};
use lockwright_engine::{
    Filter, LockDetails, LockId, LockRequest, LockTable, SharedLimit, Timestamp, Ttl,
};

const GROUP: &str = "engine";
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

fn request(resource: &str, lock_id: &str, ttl: Duration) -> LockRequest {
    LockRequest::new(resource, lock_id, &LockDetails::new().ttl(ttl)).unwrap()
}

/// `n` resources, each held by its own group; with `half_expired`, every other lock has
/// expired one second after `T0`.
fn table(n: usize, half_expired: bool) -> LockTable {
    let mut t = LockTable::new();
    for i in 0..n {
        let ttl = if half_expired && i % 2 == 0 {
            Duration::from_millis(1)
        } else {
            Duration::from_secs(60)
        };
        t.xlock(&request(&format!("r{i:06}"), &format!("g{i:06}"), ttl), T0)
            .unwrap();
    }
    t
}

fn run(
    group: &mut BenchmarkGroup<'_, WallTime>,
    mode: RunMode,
    function: &str,
    n: usize,
    elements: u64,
    mut f: impl FnMut(&mut Bencher<'_>),
) {
    let mut record = Record::new(GROUP, function, Some(n.to_string()), elements);
    record.size = Some(n as u64);
    group.throughput(Throughput::Elements(elements));
    let mut ran = false; // false when criterion's filter skips the benchmark
    group.bench_function(BenchmarkId::new(function, n), |b| {
        ran = true;
        f(b);
    });
    if ran {
        record.save(mode).unwrap();
    }
}

fn engine(c: &mut Criterion) {
    let mode = RunMode::current();
    Meta::save("load average when engine began", &load_average(), mode).unwrap();
    let sizes: &[usize] = mode.pick(&[1, 100], &[1, 1_000, 100_000], &[1, 1_000, 100_000]);
    let now = T0.saturating_add(Duration::from_secs(1));
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let fresh_x = request("fresh", "writer", Duration::from_secs(60));
    let fresh_s = request("fresh", "reader", Duration::from_secs(60));
    let limit = Some(SharedLimit::new(8).unwrap());

    let mut group = c.benchmark_group(GROUP);
    for &n in sizes {
        let full = table(n, false);
        let half_expired = table(n, true);
        let mid = n / 2;
        let mid_group = LockId::new(format!("g{mid:06}")).unwrap();
        let by_resource = Filter::new().resource(format!("r{mid:06}"));
        let by_group = Filter::new().lock_id(format!("g{mid:06}"));

        run(&mut group, mode, "xlock", n, 1, |b| {
            b.iter_batched_ref(
                || full.clone(),
                |t| t.xlock(&fresh_x, now).unwrap(),
                BatchSize::SmallInput,
            );
        });
        run(&mut group, mode, "slock", n, 1, |b| {
            b.iter_batched_ref(
                || full.clone(),
                |t| t.slock(&fresh_s, limit, now).unwrap(),
                BatchSize::SmallInput,
            );
        });
        run(&mut group, mode, "unlock", n, 1, |b| {
            b.iter_batched_ref(
                || full.clone(),
                |t| t.unlock(&mid_group, now),
                BatchSize::SmallInput,
            );
        });
        run(&mut group, mode, "renew", n, 1, |b| {
            let mut t = full.clone();
            b.iter(|| t.renew(&mid_group, ttl, Duration::ZERO, now).unwrap());
        });
        run(&mut group, mode, "xlock_unlock_in_place", n, 1, |b| {
            // Both transitions on the same table, kept warm in the cache: no clone.
            let mut t = full.clone();
            b.iter(|| {
                t.xlock(&fresh_x, now).unwrap();
                t.unlock(&fresh_x.lock_id, now)
            });
        });
        run(&mut group, mode, "status_resource", n, 1, |b| {
            b.iter(|| black_box(full.status(&by_resource, now)));
        });
        run(&mut group, mode, "status_lock_id", n, 1, |b| {
            b.iter(|| black_box(full.status(&by_group, now)));
        });
        run(&mut group, mode, "purge", n, n as u64, |b| {
            b.iter_batched_ref(
                || half_expired.clone(),
                |t| t.purge(now),
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    engine(&mut criterion);
    criterion.final_summary();
}
