//! The engine's pure transitions (xlock, slock, unlock, renew, purge, status) on lock tables
//! of 1, 1,000 and 100,000 resources.
//!
//! Data set: resource `rNNNNNN` held exclusively by its own group `gNNNNNN`, granted at a
//! fixed instant with a 60 s TTL; in the purge table every other lock has a 1 ms TTL and so
//! has expired when purge runs (half the table is removed). Tables are built once per size,
//! outside the timing.
//!
//! xlock, slock and unlock run on the table in place, as a store's table is used: in rounds
//! of up to 1,024 operations on resources the table does not hold (`fNNNNNN`, group
//! `wNNNNNN`), each round undone outside the timing. Renew and status run in place too
//! (renewing the same group at the same instant leaves the table as it was). Purge runs on a
//! fresh clone prepared by `iter_batched_ref` (not timed). `xlock_cold` is the grant on such
//! a clone, for comparison: criterion prepares clones in batches, so the table it meets is
//! out of the cache.
//!
//! Target (docs/performance.md): well under 1 µs per transition. Purge and an unfiltered scan
//! are linear in the table, so their throughput is per lock in the table.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright_engine::Access;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BatchSize, Bencher, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use lockwright_benches::RunMode;
use lockwright_engine::{
    Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockTable, SharedLimit, Timestamp,
    Ttl, table,
};

const GROUP: &str = "engine";
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// When the transitions run: one second after the tables were built.
const NOW: Timestamp = Timestamp::from_millis(1_800_000_001_000);

fn request(resource: &str, lock_id: &str, ttl: Duration) -> LockRequest {
    LockRequest::new(resource, lock_id, &LockOptions::new().ttl(ttl)).unwrap()
}

/// `n` resources, each held by its own group; with `half_expired`, every other lock has
/// expired one second after `T0`.
fn held(n: usize, half_expired: bool) -> LockTable {
    let mut t = LockTable::new();
    for i in 0..n {
        let ttl = if half_expired && i % 2 == 0 {
            Duration::from_millis(1)
        } else {
            Duration::from_secs(60)
        };
        t.lock(&request(&format!("r{i:06}"), &format!("g{i:06}"), ttl), T0)
            .unwrap();
    }
    t
}

/// A grant on a table (xlock or slock, its other arguments fixed).
type Grant<'a> = &'a dyn Fn(&mut LockTable, &LockRequest) -> Result<LockStatus, Error>;

/// Requests timed per round of [`in_place`].
const CHUNK: usize = 1024;

/// Times `op` `iters` times on `table` in place, kept warm in the cache: in rounds of up to
/// [`CHUNK`] requests for resources the table does not hold, each round first `prepare`d
/// (untimed; a no-op for grants), then timed, then undone (untimed: the groups are unlocked
/// and the emptied resources deleted), so every round starts from the same table.
fn in_place(
    table: &mut LockTable,
    fresh: &[LockRequest],
    iters: u64,
    prepare: impl Fn(&mut LockTable, &LockRequest),
    mut op: impl FnMut(&mut LockTable, &LockRequest),
) -> Duration {
    let mut elapsed = Duration::ZERO;
    let mut left = iters;
    let resources = table.resources().len();
    while left > 0 {
        let round = &fresh[..usize::try_from(left).unwrap_or(CHUNK).min(CHUNK)];
        round.iter().for_each(|r| prepare(table, r));
        let start = Instant::now();
        for r in round {
            op(table, r);
        }
        elapsed += start.elapsed();
        for r in round {
            table.unlock(&r.lock_id, NOW);
        }
        // The next second of the table's fence clock (which an earlier operation at a later
        // instant may have moved past `NOW`): its floor is above every counter of this
        // round, so the emptied resources may go.
        let later = Timestamp::from_millis(
            (table.fence_clock() / table::FENCES_PER_SECOND + 1)
                .saturating_mul(1000)
                .max(NOW.as_millis() + 1),
        );
        table::delete_empty(&mut [&mut *table], later);
        assert_eq!(table.resources().len(), resources, "a round was not undone");
        left -= round.len() as u64;
    }
    elapsed
}

fn run(
    group: &mut BenchmarkGroup<'_, WallTime>,
    function: &str,
    n: usize,
    elements: u64,
    f: impl FnMut(&mut Bencher<'_>),
) {
    group.throughput(Throughput::Elements(elements));
    group.bench_function(BenchmarkId::new(function, n), f);
}

fn engine(c: &mut Criterion) {
    let mode = RunMode::current();
    let sizes: &[usize] = mode.pick(&[1, 100], &[1, 1_000, 100_000], &[1, 1_000, 100_000]);
    let now = NOW;
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let fresh: Vec<LockRequest> = (0..CHUNK)
        .map(|i| {
            request(
                &format!("f{i:06}"),
                &format!("w{i:06}"),
                Duration::from_secs(60),
            )
        })
        .collect();
    let limit = Some(SharedLimit::new(8).unwrap());

    let mut group = c.benchmark_group(GROUP);
    for &n in sizes {
        let full = held(n, false);
        let half_expired = held(n, true);
        let mid = n / 2;
        let mid_group = LockId::new(format!("g{mid:06}")).unwrap();
        let by_resource = Filter::new().resource(format!("r{mid:06}"));
        let by_group = Filter::new().lock_id(format!("g{mid:06}"));

        let mut warm = full.clone();
        let grants: [(&str, Grant); 2] = [
            ("xlock", &|t, r| t.lock(r, now)),
            ("slock", &|t, r| {
                t.lock(&r.clone().with_access(Access::Shared(limit)), now)
            }),
        ];
        for (name, grant) in grants {
            run(&mut group, name, n, 1, |b| {
                b.iter_custom(|iters| {
                    in_place(
                        &mut warm,
                        &fresh,
                        iters,
                        |_, _| (),
                        |t, r| {
                            grant(t, r).unwrap();
                        },
                    )
                });
            });
        }
        run(&mut group, "unlock", n, 1, |b| {
            b.iter_custom(|iters| {
                let take = |t: &mut LockTable, r: &LockRequest| {
                    t.lock(r, now).unwrap();
                };
                in_place(&mut warm, &fresh, iters, take, |t, r| {
                    black_box(t.unlock(&r.lock_id, now));
                })
            });
        });
        run(&mut group, "xlock_cold", n, 1, |b| {
            // Informational: the same grant on a fresh clone (made outside the timing), whose
            // memory criterion's batches have pushed out of the cache.
            b.iter_batched_ref(
                || full.clone(),
                |t| t.lock(&fresh[0], now).unwrap(),
                BatchSize::SmallInput,
            );
        });
        run(&mut group, "renew", n, 1, |b| {
            let mut t = full.clone();
            b.iter(|| t.renew(&mid_group, ttl, Duration::ZERO, now).unwrap());
        });
        run(&mut group, "xlock_unlock_in_place", n, 1, |b| {
            // Both transitions on the same table, kept warm in the cache: no clone.
            let mut t = full.clone();
            b.iter(|| {
                t.lock(&fresh[0], now).unwrap();
                t.unlock(&fresh[0].lock_id, now)
            });
        });
        run(&mut group, "status_resource", n, 1, |b| {
            b.iter(|| black_box(full.status(&by_resource, now)));
        });
        run(&mut group, "status_lock_id", n, 1, |b| {
            b.iter(|| black_box(full.status(&by_group, now)));
        });
        run(&mut group, "purge", n, n as u64, |b| {
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
