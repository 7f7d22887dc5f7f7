//! The Lockers of a measurement, and the two measurements that are not windows:
//! `waiting_cycle` (interleaved rounds) and `crashed_holder/W` (rounds around a lock that
//! expires).

use std::time::{Duration, Instant};

use lockwright::{Client as LockClient, LockOptions, Locker, LockerConfig};
use lockwright_benches::{max, quantile};
use lockwright_engine::{LockRequest, LockStore};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::fleets::Fleet;
use crate::tally::{Counter, Counts, Tallied};
use crate::{CRASH_GRACE, CRASH_TTL, TTL};

/// A Locker measured on a store of `F`, its calls counted.
pub type Measured<F> = Locker<Tallied<<F as Fleet>::Store>>;

/// A Locker of its own on a fresh store of `fleet`, hints on or off.
pub async fn locker<F: Fleet>(fleet: &F, counts: &Counts, hints: bool) -> Measured<F> {
    let store = Tallied {
        inner: fleet.store(&counts.commands).await,
        calls: counts.calls.clone(),
    };
    Locker::new(LockClient::new(store), config(hints)).unwrap()
}

fn config(hints: bool) -> LockerConfig {
    let mut config = LockerConfig::default();
    config.wake_on_hints = hints;
    config
}

/// What the Lockers of a setting ask with: hints on is the default (a fair waiter, which
/// the store wakes); hints off is plain polling (a racing waiter that hears no hints), the
/// yardstick the targets compare with.
pub fn waiting_options(hints: bool) -> LockOptions {
    let options = LockOptions::exclusive(TTL);
    if hints { options } else { options.racing() }
}

/// `n` Lockers, each on a store of its own.
pub async fn lockers<F: Fleet>(
    fleet: &F,
    counts: &Counts,
    n: usize,
    hints: bool,
) -> Vec<Measured<F>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(locker(fleet, counts, hints).await);
    }
    all
}

/// `n` Lockers of one process: on one store of `fleet` (one client, one wakes cursor).
pub async fn lockers_sharing<F: Fleet>(
    fleet: &F,
    counts: &Counts,
    n: usize,
    hints: bool,
) -> Vec<Measured<F>> {
    let client = LockClient::new(Tallied {
        inner: fleet.store(&counts.commands).await,
        calls: counts.calls.clone(),
    });
    (0..n)
        .map(|_| Locker::new(client.clone(), config(hints)).unwrap())
        .collect()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `a - b` in ms, negative when `a` came first.
pub fn signed_ms(a: Instant, b: Instant) -> f64 {
    if a >= b { ms(a - b) } else { -ms(b - a) }
}

pub fn switch(hints: bool) -> &'static str {
    if hints { "on" } else { "off" }
}

pub fn request(resource: &str, lock_id: &str, ttl: Duration) -> LockRequest {
    LockRequest::new(resource, lock_id, &LockOptions::new().ttl(ttl)).unwrap()
}

/// The median of `n` bare `xlock`s (released untimed) on `store`: one uncontended grant.
pub async fn bare_xlock<S: LockStore>(store: &S, n: usize) -> f64 {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let r = request("bare", &format!("bare-{i}"), TTL);
        let start = Instant::now();
        store.lock(&r).await.unwrap();
        times.push(ms(start.elapsed()));
        store.unlock_one(&r.resource, &r.lock_id).await.unwrap();
    }
    quantile(&times, 0.5)
}

/// `waiting_cycle`: one Locker with hints on and one with hints off, each on a store of its
/// own, take and release a free lock in turn, interleaved with a bare `xlock` of a third
/// store (released untimed); `warm_up` untimed rounds first. A line for each, hints on
/// first.
pub async fn cycle<F: Fleet>(fleet: &F, warm_up: usize, rounds: usize) -> [String; 2] {
    let raw = fleet.store(&Counter::default()).await;
    let counts = [Counts::default(), Counts::default()];
    let lockers = [
        locker(fleet, &counts[0], true).await,
        locker(fleet, &counts[1], false).await,
    ];
    let options = [waiting_options(true), waiting_options(false)];
    let bare = request("cycle/bare", "cycle-bare", TTL);
    // [hints on, off] x [acquire, release, cycle]
    let mut times: [[Vec<f64>; 3]; 2] = Default::default();
    let mut xlocks = Vec::with_capacity(rounds);
    let mut before = None;
    for round in 0..warm_up + rounds {
        if round == warm_up {
            before = Some([counts[0].snapshot(), counts[1].snapshot()]);
            times.iter_mut().flatten().for_each(Vec::clear);
            xlocks.clear();
        }
        let start = Instant::now();
        raw.lock(&bare).await.unwrap();
        xlocks.push(ms(start.elapsed()));
        raw.unlock_one(&bare.resource, &bare.lock_id).await.unwrap();
        // Alternate which setting goes first.
        for i in [round % 2, 1 - round % 2] {
            let resource = format!("cycle/{}", switch(i == 0));
            let start = Instant::now();
            let guard = lockers[i].acquire(&resource, &options[i]).await.unwrap();
            let acquired = start.elapsed();
            guard.release().await.unwrap();
            let cycle = start.elapsed();
            times[i][0].push(ms(acquired));
            times[i][1].push(ms(cycle - acquired));
            times[i][2].push(ms(cycle));
        }
    }
    let after = [counts[0].snapshot(), counts[1].snapshot()];
    let before = before.expect("at least one timed round");
    lockers.iter().for_each(Locker::shutdown);
    [0, 1].map(|i| {
        let [acquire, release, cycle] = &times[i];
        format!(
            "cycle p50 {:.3} ms (acquire {:.3}, release {:.3}), p99 {:.3} ms over {rounds} \
             rounds; bare xlock p50 {:.3} ms; {}",
            quantile(cycle, 0.5),
            quantile(acquire, 0.5),
            quantile(release, 0.5),
            quantile(cycle, 0.99),
            quantile(&xlocks, 0.5),
            counts[i].line(F::COMMANDS, (&before[i], &after[i]), rounds as f64, "cycle"),
        )
    })
}

/// `crashed_holder/W`: `rounds` times, a lock is taken by the store directly with a TTL of
/// [`CRASH_TTL`] and never renewed or released, and W Lockers wait for it on a fleet whose
/// takeover grace is [`CRASH_GRACE`]; each round's sample is how long after the lock's
/// expiry + grace (the expiry placed at the middle of the crashed grant's round trip) the
/// first of them was granted.
pub async fn crashed<F: Fleet>(fleet: &F, waiters: usize, hints: bool, rounds: usize) -> String {
    let counts = Counts::default();
    let holder = fleet.store(&Counter::default()).await;
    let all = lockers(fleet, &counts, waiters, hints).await;
    let options = waiting_options(hints);
    let (mut delays, mut rtts) = (Vec::new(), Vec::new());
    let before = counts.snapshot();
    for round in 0..rounds {
        let resource = format!("crashed/{waiters}/{}/{round}", switch(hints));
        let crashed = request(&resource, &format!("crashed-{round}"), CRASH_TTL);
        let sent = Instant::now();
        holder.lock(&crashed).await.unwrap();
        let received = Instant::now();
        rtts.push(ms(received - sent));
        let free_at = sent + (received - sent) / 2 + CRASH_TTL + CRASH_GRACE;
        let (granted_tx, mut granted) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        for l in &all {
            let (l, resource, options, granted_tx) = (
                l.clone(),
                resource.clone(),
                options.clone(),
                granted_tx.clone(),
            );
            tasks.spawn(async move {
                let guard = l.acquire(&resource, &options).await.unwrap();
                let _ = granted_tx.send((Instant::now(), guard));
            });
        }
        let (at, guard) = granted.recv().await.unwrap();
        delays.push(signed_ms(at, free_at));
        // The others stop waiting (their acquires are cancelled).
        tasks.abort_all();
        while let Some(done) = tasks.join_next().await {
            // Aborted waiters end cancelled; a waiter whose acquire failed says why.
            if let Err(e) = done
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        guard.release().await.unwrap();
    }
    let after = counts.snapshot();
    all.iter().for_each(Locker::shutdown);
    format!(
        "first grant after expiry + grace (TTL {CRASH_TTL:?}, grace {CRASH_GRACE:?}): median \
         {:.2} ms, max {:.2} ms over {rounds} round(s); the crashed grant's round trip {:.2} \
         ms; {}",
        quantile(&delays, 0.5),
        max(&delays),
        quantile(&rtts, 0.5),
        counts.line(F::COMMANDS, (&before, &after), rounds as f64, "round"),
    )
}
