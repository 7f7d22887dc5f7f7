//! Fair waiting (the queue of fair requests), side by side with unfair waiting in the same
//! run: each measurement runs once with `LockOptions::fair` and once without, hints on.
//!
//! - `fair_writer/R`: R reader Lockers keep a shared lock held with overlapping holds of
//!   [`READER_HOLD`] (each asks again at once after its release, and they start spread over
//!   one hold); a writer Locker asks for the exclusive lock, `rounds` times, each time giving
//!   up after the window. Sample: how long the writer waited (the window, when it was not
//!   granted).
//! - `fair_contended/N`: N Lockers in a worker loop on one resource, [`super::CONTENDED_HOLD`]
//!   holds (as `contended/N`): grants per Locker, Jain's fairness index, the longest wait,
//!   and lock commands per grant (per handover).
//! - `fair_one_process/N`: as `fair_contended/N`, with the N Lockers of one process: on one
//!   store (one client, one change stream), where a release wakes the first waiter's Locker
//!   alone by its ticket's tag.
//! - `fair_abandoned/W`: a holder, then W waiters that take a place and die (fair requests
//!   sent straight to the store, never asked again: a killed process), then one live fair
//!   Locker; the holder releases. Sample: from the release to the live waiter's grant, and
//!   the same less the time the dead places had left at the release.

use std::time::{Duration, Instant};

use lockwright::{LockOptions, LockerConfig};
use lockwright_benches::Record;
use lockwright_benches::waiting::{key, quantile, spread};
use lockwright_engine::{LockId, LockStore, Ticket};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{
    CONTENDED_HOLD, Counter, Counts, Fleet, TTL, Window, finish, lockers, lockers_sharing, ms,
    request, subscriptions, worker_loop,
};

/// Each reader's hold in `fair_writer/R`.
pub const READER_HOLD: Duration = Duration::from_millis(50);

/// The function names of the fair records.
pub const WRITER: &str = "fair_writer";
/// See the module's docs.
pub const CONTENDED: &str = "fair_contended";
/// See the module's docs.
pub const ONE_PROCESS: &str = "fair_one_process";
/// See the module's docs.
pub const ABANDONED: &str = "fair_abandoned";

/// Keys of the fair records' numbers.
pub mod fkey {
    /// 1 for fair waiting, 0 for unfair.
    pub const FAIR: &str = "fair";
    /// Jain's fairness index of grants per Locker: (sum x)^2 / (n * sum x^2), 1 when equal.
    pub const JAIN: &str = "jain";
    /// Fair writer: rounds in which the writer was granted.
    pub const GRANTED: &str = "granted";
    /// Fair writer: rounds.
    pub const ROUNDS: &str = "rounds";
    /// Median of a bare `xlock` on the store, in ms (one uncontended grant).
    pub const RTT_MS: &str = "rtt_ms";
    /// Abandoned: the dead waiters' places' lease, in ms.
    pub const QUEUE_TTL_MS: &str = "queue_ttl_ms";
    /// Abandoned: the grant, less what the dead places had left at the release, in ms.
    pub const AFTER_LAPSE_MS: &str = "after_lapse_ms";
}

/// The record's parameter: `size/fair` or `size/unfair`.
pub fn parameter(size: usize, fair: bool) -> String {
    format!("{size}/{}", if fair { "fair" } else { "unfair" })
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

fn options(fair: bool, exclusive: bool) -> LockOptions {
    let o = if exclusive {
        LockOptions::exclusive(TTL)
    } else {
        LockOptions::shared(None, TTL)
    };
    if fair { o.fair() } else { o }
}

/// The median of `n` bare `xlock`s (released untimed) on a store of `fleet`.
async fn rtt<F: Fleet>(fleet: &F, n: usize) -> f64 {
    let raw = fleet.store(&Counter::default()).await;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let r = request("fair/rtt", &format!("rtt-{i}"), TTL);
        let start = Instant::now();
        raw.xlock(&r).await.unwrap();
        times.push(ms(start.elapsed()));
        raw.unlock_one(&r.resource, &r.lock_id).await.unwrap();
    }
    quantile(&times, 0.5)
}

/// `fair_writer/R`: see the module's docs.
pub async fn writer<F: Fleet>(
    fleet: &F,
    group: &str,
    readers: usize,
    fair: bool,
    rounds: usize,
    window: &Window,
) -> Record {
    let mut record = Record::new(group, WRITER, Some(parameter(readers, fair)), 1);
    record.size = Some(readers as u64);
    let rtt = rtt(fleet, 20).await;
    let counts = Counts::default();
    let all = lockers(fleet, &counts, readers, true).await;
    let writer = lockers(fleet, &counts, 1, true).await.remove(0);
    let resource = format!("fair_writer/{readers}/{fair}");
    let (stop_tx, stop) = watch::channel(false);
    let mut tasks = JoinSet::new();
    for (i, l) in all.iter().enumerate() {
        let (l, resource, mut stop) = (l.clone(), resource.clone(), stop.clone());
        let delay = READER_HOLD.mul_f64(i as f64 / readers as f64);
        tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            let shared = options(false, false);
            loop {
                let guard = tokio::select! {
                    g = l.acquire(&resource, &shared) => g.unwrap(),
                    _ = stop.wait_for(|s| *s) => return,
                };
                tokio::time::sleep(READER_HOLD).await;
                guard.release().await.unwrap();
                if *stop.borrow() {
                    return;
                }
            }
        });
    }
    tokio::time::sleep(window.warm_up.max(READER_HOLD * 2)).await;
    let before = counts.snapshot(fleet).await;
    let (mut waits, mut granted) = (Vec::new(), 0u32);
    for _ in 0..rounds {
        let asked = Instant::now();
        let exclusive = options(fair, true);
        match tokio::time::timeout(window.measure, writer.acquire(&resource, &exclusive)).await {
            Ok(guard) => {
                waits.push(ms(asked.elapsed()));
                granted += 1;
                tokio::time::sleep(READER_HOLD).await;
                guard.unwrap().release().await.unwrap();
                // The readers take over again before the next round.
                tokio::time::sleep(READER_HOLD * 2).await;
            }
            Err(_) => waits.push(ms(window.measure)),
        }
    }
    let after = counts.snapshot(fleet).await;
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    writer.shutdown();
    for l in &all {
        l.shutdown();
    }
    let mut numbers: Vec<(&str, f64)> = spread(&waits).to_vec();
    numbers.extend([
        (fkey::FAIR, f64::from(u8::from(fair))),
        (fkey::GRANTED, f64::from(granted)),
        (fkey::ROUNDS, rounds as f64),
        (fkey::RTT_MS, rtt),
        (key::HOLD_MS, ms(READER_HOLD)),
        (key::LOCKERS, readers as f64),
    ]);
    let note = format!(
        "{readers} readers (not fair) holding {READER_HOLD:?} each with overlapping holds; a \
         writer ({}) waits at most {:?} per round, {rounds} rounds; wait in ms",
        if fair { "fair" } else { "not fair" },
        window.measure,
    );
    let per = f64::from(granted.max(1));
    finish::<F>(
        record,
        true,
        &numbers,
        (&before, &after),
        per,
        subscriptions(&counts),
        note,
    )
}

/// `fair_contended/N` (each Locker on a store of its own) and `fair_one_process/N` (all on
/// one, `one_process`): see the module's docs.
pub async fn contended<F: Fleet>(
    fleet: &F,
    group: &str,
    (n, one_process): (usize, bool),
    fair: bool,
    window: &Window,
) -> Record {
    let function = if one_process { ONE_PROCESS } else { CONTENDED };
    let mut record = Record::new(group, function, Some(parameter(n, fair)), 1);
    record.size = Some(n as u64);
    let rtt = rtt(fleet, 20).await;
    let counts = Counts::default();
    let all = if one_process {
        lockers_sharing(fleet, &counts, n, true).await
    } else {
        lockers(fleet, &counts, n, true).await
    };
    let resource = format!("{function}/{n}/{fair}");
    let run = worker_loop(
        fleet,
        &counts,
        &all,
        &resource,
        &options(fair, true),
        window,
    )
    .await;
    let mut numbers = run.numbers(n).to_vec();
    numbers.extend([
        (fkey::FAIR, f64::from(u8::from(fair))),
        (fkey::RTT_MS, rtt),
        (fkey::JAIN, jain(&run.per_locker)),
    ]);
    let note = format!(
        "{n} Lockers ({}), {}, hints on, in a worker loop on one resource (acquire, hold \
         {CONTENDED_HOLD:?}, release, acquire again at once); counts per grant",
        if fair { "fair" } else { "not fair" },
        if one_process {
            "all on one store"
        } else {
            "each on a store of its own"
        },
    );
    finish::<F>(
        record,
        true,
        &numbers,
        (&run.before, &run.after),
        run.grants as f64,
        subscriptions(&counts),
        note,
    )
}

/// `fair_abandoned/W`: see the module's docs.
pub async fn abandoned<F: Fleet>(fleet: &F, group: &str, dead: usize, rounds: usize) -> Record {
    let mut record = Record::new(group, ABANDONED, Some(parameter(dead, true)), 1);
    record.size = Some(dead as u64);
    let rtt = rtt(fleet, 20).await;
    let counts = Counts::default();
    let holder = lockers(fleet, &counts, 1, true).await.remove(0);
    let live = lockers(fleet, &counts, 1, true).await.remove(0);
    let ghosts = fleet.store(&Counter::default()).await;
    let queue_ttl = LockerConfig::default().queue_ttl;
    let before = counts.snapshot(fleet).await;
    let (mut delays, mut after_lapse) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let resource = format!("fair_abandoned/{dead}/{round}");
        let held = holder
            .acquire(&resource, &LockOptions::exclusive(TTL))
            .await
            .unwrap();
        // The dead waiters: each takes a place, then is never heard of again.
        let mut last_place = Instant::now();
        for i in 0..dead {
            let ticket = LockId::new(format!("ghost-{round}-{i}")).unwrap();
            let r = request(&resource, &format!("ghost-lock-{round}-{i}"), TTL)
                .fair(Ticket::new(ticket, queue_ttl).unwrap());
            let sent = Instant::now();
            assert!(ghosts.xlock(&r).await.is_err(), "the lock is held");
            last_place = sent;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let (live, resource) = (live.clone(), resource.clone());
            tokio::spawn(async move {
                let fair = options(true, true);
                let guard = live.acquire(&resource, &fair).await.unwrap();
                let _ = tx.send(Instant::now());
                guard.release().await.unwrap();
            })
        };
        // The live waiter takes its place behind the dead ones.
        tokio::time::sleep(Duration::from_millis(200)).await;
        held.release().await.unwrap();
        let released = Instant::now();
        let granted = rx.await.unwrap();
        waiter.await.unwrap();
        // The last dead place lapses `queue_ttl` after it was taken (sent before that).
        let lapse = last_place + queue_ttl;
        delays.push(ms(granted - released));
        after_lapse.push(if granted >= lapse {
            ms(granted - lapse)
        } else {
            -ms(lapse - granted)
        });
    }
    let after = counts.snapshot(fleet).await;
    holder.shutdown();
    live.shutdown();
    let mut numbers: Vec<(&str, f64)> = spread(&delays).to_vec();
    numbers.extend([
        (fkey::FAIR, 1.0),
        (fkey::RTT_MS, rtt),
        (fkey::QUEUE_TTL_MS, ms(queue_ttl)),
        (
            fkey::AFTER_LAPSE_MS,
            after_lapse.iter().copied().fold(f64::MIN, f64::max),
        ),
        (key::LOCKERS, dead as f64),
    ]);
    let note = format!(
        "{dead} waiters took places (lease {queue_ttl:?}) and died; one live fair Locker behind \
         them; from the holder's release to the live waiter's grant, in ms, {rounds} round(s)"
    );
    finish::<F>(
        record,
        true,
        &numbers,
        (&before, &after),
        rounds as f64,
        subscriptions(&counts),
        note,
    )
}

/// One line about a fair record for the bench's output; `None` for another record.
pub(super) fn summary(record: &Record) -> Option<String> {
    let x = |k: &str| record.extra.get(k).copied().unwrap_or(f64::NAN);
    let body = match record.function.as_str() {
        WRITER => format!(
            "writer granted in {} of {} rounds, wait p50 {:.1} ms, max {:.1} ms (reader hold \
             {:.0} ms, bare xlock {:.2} ms)",
            x(fkey::GRANTED),
            x(fkey::ROUNDS),
            x(key::P50_MS),
            x(key::MAX_MS),
            x(key::HOLD_MS),
            x(fkey::RTT_MS),
        ),
        CONTENDED | ONE_PROCESS => format!(
            "{:.1} grants/s, grants per Locker {}..{}, Jain {:.3}, longest wait {:.1} ms, lock \
             commands {:.2} per grant (bare xlock {:.2} ms)",
            x(key::GRANTS_PER_S),
            x(key::GRANTS_MIN),
            x(key::GRANTS_MAX),
            x(fkey::JAIN),
            x(key::LONGEST_WAIT_MS),
            x(key::LOCK_PER_GRANT),
            x(fkey::RTT_MS),
        ),
        ABANDONED => format!(
            "live waiter granted {:.1} ms after the release (max), at most {:.1} ms after the \
             dead places lapsed (lease {:.0} ms, bare xlock {:.2} ms)",
            x(key::MAX_MS),
            x(fkey::AFTER_LAPSE_MS),
            x(fkey::QUEUE_TTL_MS),
            x(fkey::RTT_MS),
        ),
        _ => return None,
    };
    Some(format!("{}: {body}", record.id()))
}

/// Every fair measurement of `plan` that `selects` wants, fair and unfair in turn.
pub(super) async fn run_all<F: Fleet>(
    group: &str,
    mode: lockwright_benches::RunMode,
    plan: &super::Plan,
    selects: &impl Fn(&str) -> bool,
    fleet: &impl AsyncFn(Option<Duration>) -> F,
) {
    let wanted = |function: &str, size: usize| {
        [true, false]
            .iter()
            .any(|&f| selects(&format!("{group}/{function}/{}", parameter(size, f))))
    };
    for &r in plan.fair_readers {
        if wanted(WRITER, r) {
            for fair in [true, false] {
                let f = fleet(None).await;
                let record = writer(
                    &f,
                    group,
                    r,
                    fair,
                    plan.fair_writer_rounds,
                    &plan.fair_writer,
                );
                super::save(&record.await, mode);
                f.finish().await;
            }
        }
    }
    for one_process in [false, true] {
        let function = if one_process { ONE_PROCESS } else { CONTENDED };
        for &n in plan.fair_lockers {
            if wanted(function, n) {
                for fair in [true, false] {
                    let f = fleet(None).await;
                    let run = contended(&f, group, (n, one_process), fair, &plan.fair_contended);
                    super::save(&run.await, mode);
                    f.finish().await;
                }
            }
        }
    }
    for &w in plan.fair_dead {
        if wanted(ABANDONED, w) {
            let f = fleet(None).await;
            super::save(
                &abandoned(&f, group, w, plan.fair_abandoned_rounds).await,
                mode,
            );
            f.finish().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn jain_index() {
        assert!((super::jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((super::jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
    }
}
