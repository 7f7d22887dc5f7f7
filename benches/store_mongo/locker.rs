//! `locker_renewals/N`: a Locker holding N guards on MongoDB, its store commands per renewal
//! cycle and how late each renewal round reaches the store. Not a criterion benchmark: one
//! measurement per N over a few renewal cycles, printed as one line.

use std::time::{Duration, Instant};

use lockwright::{Client as LockClient, LockOptions, Locker, LockerConfig};
use lockwright_benches::{Selected, quantile};
use lockwright_store_mongo::MongoStore;
use mongodb::Client;
use tokio::task::JoinSet;

use crate::documents::ready_store;
use crate::harness::{Bench, Row};
use crate::watched::{Round, Watched};

/// The Locker's renewal schedule in the measurement: renew at half the TTL, and let every
/// renewal due within 0.3 of its TTL join one that is due, so that guards taken within that
/// window are renewed as one batch.
pub const RENEW_FRACTION: f64 = 0.5;
/// See [`RENEW_FRACTION`].
const BATCH_FRACTION: f64 = 0.3;
/// Acquires in flight at once while the guards are taken.
const ACQUIRES_IN_FLIGHT: usize = 100;

/// How long the guards are held: their TTL, the renewal cycles measured, and whether the
/// measurement waits first for a round that renews every guard together.
struct Hold {
    ttl: Duration,
    cycles: u64,
    settle: bool,
}

/// `locker_renewals/N` for each N of the run's mode that criterion's filter selects, each on
/// a store of its own.
pub fn locker_renewals(bench: &Bench<'_>, client: &Client) {
    let (rt, mode) = (bench.rt, bench.mode);
    let selected = Selected::from_args();
    let holding = mode.pick(
        Hold {
            ttl: Duration::from_secs(1),
            cycles: 1,
            settle: false,
        },
        Hold {
            ttl: Duration::from_secs(2),
            cycles: 3,
            settle: true,
        },
        Hold {
            ttl: Duration::from_secs(2),
            cycles: 5,
            settle: true,
        },
    );
    let guard_counts: &[usize] = mode.pick(&[1, 10], &[1, 100, 1_000], &[1, 100, 1_000]);
    for &n in guard_counts {
        let id = Row::sized("locker_renewals", n).id();
        if !selected.selects(&id) {
            continue;
        }
        let store = rt.block_on(ready_store(client, None));
        let line = rt.block_on(hold_guards(bench, store, n, &holding));
        mode.report(&id, &line);
    }
}

/// Polls `done` every 2 ms until it holds or `limit` has passed; whether it held.
async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// A Locker on `store` (server clock, monitored client) takes `n` exclusive guards (up to
/// [`ACQUIRES_IN_FLIGHT`] acquires at once) with `hold.ttl`, then holds them for
/// `hold.cycles` renewal cycles: the commands the client starts meanwhile (only the
/// Locker's renewals run) over the cycles the Locker's `stats().renewals` went up by / n,
/// and each round's lag. With `hold.settle` the count starts once a round has renewed all
/// n together (guards taken over longer than the batch window join up in a later round).
/// Returns what it saw, in one line.
async fn hold_guards(bench: &Bench<'_>, store: MongoStore, n: usize, hold: &Hold) -> String {
    let monitor = bench.monitor;
    let coll = store.collection().clone();
    let mut config = LockerConfig::default();
    config.renew_fraction = RENEW_FRACTION;
    config.renew_batch_fraction = BATCH_FRACTION;
    let watched = Watched::new(store);
    let client = LockClient::with_renew_margin(watched, hold.ttl / 10).unwrap();
    let locker = Locker::new(client, config).unwrap();
    let watched = locker.client().store();

    let start = Instant::now();
    let mut guards = Vec::with_capacity(n);
    let mut acquiring = JoinSet::new();
    for i in 0..n {
        if acquiring.len() >= ACQUIRES_IN_FLIGHT
            && let Some(done) = acquiring.join_next().await
        {
            guards.push(done.unwrap());
        }
        let (locker, ttl) = (locker.clone(), hold.ttl);
        acquiring.spawn(async move {
            locker
                .try_acquire(&format!("held/{i:04}"), &LockOptions::exclusive(ttl))
                .await
                .unwrap()
        });
    }
    while let Some(done) = acquiring.join_next().await {
        guards.push(done.unwrap());
    }
    let acquired_in = start.elapsed();

    let cycle = hold.ttl.mul_f64(RENEW_FRACTION);
    let settled = !hold.settle
        || wait_until(cycle * 6, || {
            watched.rounds().iter().any(|r| r.renewed == n)
        })
        .await;
    // The window: from here until the Locker has renewed every guard `cycles` times more.
    let renewals_0 = locker.stats().renewals;
    let rounds_0 = watched.rounds().len();
    let wanted = renewals_0 + hold.cycles * n as u64;
    let limit = cycle * (u32::try_from(hold.cycles).unwrap() + 4);
    let (complete, captured) = monitor
        .probe(wait_until(limit, || locker.stats().renewals >= wanted))
        .await;
    let stats = locker.stats();
    let renewals = stats.renewals - renewals_0;
    assert!(
        renewals > 0,
        "no renewal of {n} guards within {limit:?} ({stats:?})"
    );
    let cycles = renewals as f64 / n as f64;
    let held = guards.iter().filter(|g| g.is_held()).count();
    let rounds: Vec<Round> = watched.rounds().split_off(rounds_0);
    let mut names: Vec<&str> = captured.iter().map(|(name, _)| name.as_str()).collect();
    names.dedup();
    let lags: Vec<f64> = rounds.iter().map(|r| r.lag_ms).collect();
    let took: Vec<f64> = rounds.iter().map(|r| r.took.as_secs_f64() * 1e3).collect();
    let locks: usize = rounds.iter().map(|r| r.locks).sum();
    let line = format!(
        "{:.2} commands per renewal cycle ({}) over {cycles:.1} cycles{}{}; {} rounds of \
         {:.0} locks, round median {:.2} ms; lag median {:.1} ms, max {:.1} ms; guards taken in \
         {:.0} ms, {held} of {n} held at the end, {} renewal failures (TTL {:?})",
        captured.len() as f64 / cycles,
        names.join(", "),
        if settled {
            ""
        } else {
            " (never renewed all together)"
        },
        if complete {
            ""
        } else {
            " (fewer cycles than asked)"
        },
        rounds.len(),
        locks as f64 / rounds.len().max(1) as f64,
        quantile(&took, 0.5),
        quantile(&lags, 0.5),
        lockwright_benches::max(&lags),
        acquired_in.as_secs_f64() * 1e3,
        stats.renew_failures,
        hold.ttl,
    );

    let mut releasing = JoinSet::new();
    for guard in guards {
        releasing.spawn(async move { guard.release().await });
    }
    while let Some(released) = releasing.join_next().await {
        released.unwrap().unwrap();
    }
    locker.shutdown();
    // Best effort: a leftover collection in the test database harms nothing.
    let _ = coll.drop().await;
    line
}
