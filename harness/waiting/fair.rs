//! Fair waiting (the queue of fair requests), side by side with unfair waiting in the same
//! run: each measurement runs once with `LockOptions::fair` and once without, hints on.
//!
//! - `fair_writer/R`: R reader Lockers keep a shared lock held with overlapping holds of
//!   [`READER_HOLD`] (each asks again at once after its release, and they start spread over
//!   one hold); a writer Locker asks for the exclusive lock, `rounds` times, each time giving
//!   up after the window. Sample: how long the writer waited (the window, when it was not
//!   granted).
//! - `fair_contended/N`: N Lockers in a worker loop on one resource, [`crate::CONTENDED_HOLD`]
//!   holds (as `contended/N`): grants per Locker, Jain's fairness index, the longest wait,
//!   and lock commands per grant (per handover).
//! - `fair_one_process/N`: as `fair_contended/N`, with the N Lockers of one process: on one
//!   store (one client, one wakes cursor), where a release wakes the first waiter's Locker
//!   alone by its ticket's tag.
//! - `fair_abandoned/W`: a holder, then W waiters that take a place and die (fair requests
//!   sent straight to the store, never asked again: a killed process), then one live fair
//!   Locker; the holder releases. Sample: from the release to the live waiter's grant, and
//!   the same less the time the dead places had left at the release.

use std::time::{Duration, Instant};

use lockwright::{LockOptions, Locker, LockerConfig};
use lockwright_benches::{jain, max, quantile};
use lockwright_engine::{LockId, LockStore, Ticket};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::TTL;
use crate::fleets::Fleet;
use crate::loops::worker_loop;
use crate::measures::{bare_xlock, lockers, lockers_sharing, ms, request, signed_ms};
use crate::plan::Window;
use crate::tally::{Counter, Counts};

/// Each reader's hold in `fair_writer/R`.
pub const READER_HOLD: Duration = Duration::from_millis(50);

fn options(fair: bool, exclusive: bool) -> LockOptions {
    let o = if exclusive {
        LockOptions::exclusive(TTL)
    } else {
        LockOptions::shared(None, TTL)
    };
    if fair { o } else { o.racing() }
}

/// One uncontended grant on a store of `fleet`: the median of 20 bare `xlock`s.
async fn rtt<F: Fleet>(fleet: &F) -> f64 {
    bare_xlock(&*fleet.store(&Counter::default()).await, 20).await
}

/// `fair_writer/R`: see the module's docs.
pub async fn writer<F: Fleet>(
    fleet: &F,
    readers: usize,
    fair: bool,
    rounds: usize,
    window: &Window,
) -> String {
    let rtt = rtt(fleet).await;
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
    let before = counts.snapshot();
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
    let after = counts.snapshot();
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    writer.shutdown();
    all.iter().for_each(Locker::shutdown);
    format!(
        "writer granted in {granted} of {rounds} rounds (giving up after {:?}), wait p50 \
         {:.1} ms, max {:.1} ms; reader hold {READER_HOLD:?}, bare xlock {rtt:.2} ms; {}",
        window.measure,
        quantile(&waits, 0.5),
        max(&waits),
        counts.line(F::COMMANDS, (&before, &after), f64::from(granted), "grant"),
    )
}

/// `fair_contended/N` (each Locker on a store of its own) and `fair_one_process/N` (all on
/// one, `one_process`): see the module's docs.
pub async fn contended<F: Fleet>(
    fleet: &F,
    (n, one_process): (usize, bool),
    fair: bool,
    window: &Window,
) -> String {
    let rtt = rtt(fleet).await;
    let counts = Counts::default();
    let all = if one_process {
        lockers_sharing(fleet, &counts, n, true).await
    } else {
        lockers(fleet, &counts, n, true).await
    };
    let resource = format!("fair_contended/{n}/{one_process}/{fair}");
    let run = worker_loop(
        fleet,
        &counts,
        &all,
        &[resource],
        &options(fair, true),
        window,
    )
    .await;
    format!(
        "{}, Jain {:.3}; bare xlock {rtt:.2} ms; {}",
        run.line(),
        jain(&run.per_locker),
        counts.line(
            F::COMMANDS,
            (&run.before, &run.after),
            run.grants as f64,
            "grant"
        ),
    )
}

/// `fair_abandoned/W`: see the module's docs.
pub async fn abandoned<F: Fleet>(fleet: &F, dead: usize, rounds: usize) -> String {
    let rtt = rtt(fleet).await;
    let counts = Counts::default();
    let holder = lockers(fleet, &counts, 1, true).await.remove(0);
    let live = lockers(fleet, &counts, 1, true).await.remove(0);
    let ghosts = fleet.store(&Counter::default()).await;
    let queue_ttl = LockerConfig::default().queue_ttl;
    let before = counts.snapshot();
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
            assert!(ghosts.lock(&r).await.is_err(), "the lock is held");
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
        after_lapse.push(signed_ms(granted, lapse));
    }
    let after = counts.snapshot();
    holder.shutdown();
    live.shutdown();
    format!(
        "live waiter granted {:.1} ms (max) after the release, at most {:.1} ms after the \
         dead places lapsed (their lease {queue_ttl:?}) over {rounds} round(s); bare xlock \
         {rtt:.2} ms; {}",
        max(&delays),
        max(&after_lapse),
        counts.line(F::COMMANDS, (&before, &after), rounds as f64, "round"),
    )
}
