//! Leader election: how fast leadership passes on.
//!
//! - `election_resign/N`: N candidates, each a Locker on a store of its own (a process),
//!   campaign for one election; each leader holds it for [`LEAD`], resigns, and campaigns
//!   again. Sample: the time from a resignation returning to the next leader's `campaign`
//!   returning (the store hands the leadership over in the resignation itself), against a
//!   bare xlock.
//! - `election_killed/N`: a leader that died (a lock taken by the store directly with a
//!   lease of [`CRASH_TTL`], never renewed or released, on stores with a takeover grace of
//!   [`CRASH_GRACE`]) and N candidates in line: the first leader's `campaign` returning,
//!   against its lease and the grace (from half the dead grant's round trip).
//! - `election_observed/N`: [`CANDIDATES`] candidates lead in turn for [`OBSERVED_LEAD`]
//!   each while N processes (each a client of its own) observe the election
//!   (`Client::observe`, woken by the store's news of leaders, reading at least every
//!   [`OBSERVE_EVERY`]). Sample: the server's CPU time and the commands per leader change,
//!   how many changes the observers reported, and how long after the resignation
//!   returned (the store hands the leadership over in it) each observer reported the next
//!   leader.

use std::time::{Duration, Instant};

use lockwright::LockOptions;
use lockwright_benches::{max, quantile};
use lockwright_engine::LockStore;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::fleets::Fleet;
use crate::measures::{bare_xlock, lockers, ms, request, signed_ms};
use crate::tally::{Counter, Counts, Tallied};
use crate::{CRASH_GRACE, CRASH_TTL, TTL};

/// How long each leader leads before it resigns.
const LEAD: Duration = Duration::from_millis(5);
/// The candidates of `election_observed/N`.
const CANDIDATES: usize = 8;
/// How long each leader leads in `election_observed/N`: long enough for an observer to
/// see it.
const OBSERVED_LEAD: Duration = Duration::from_millis(200);
/// The longest an observer of `election_observed/N` goes without reading who leads (the
/// store's news tells it of each leader; longer than the measurement, so no read falls in
/// it).
const OBSERVE_EVERY: Duration = Duration::from_secs(30);

/// `election_resign/N`: see the module's docs.
pub async fn resign<F: Fleet>(fleet: &F, n: usize, changes: usize) -> String {
    let rtt = bare_xlock(&*fleet.store(&Counter::default()).await, 20).await;
    let counts = Counts::default();
    let all = lockers(fleet, &counts, n, true).await;
    let election = format!("election_resign/{n}");
    let (led_tx, mut led) = mpsc::unbounded_channel();
    let (resigned_tx, mut resigned) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    for l in &all {
        let (l, election, led_tx, resigned_tx) = (
            l.clone(),
            election.clone(),
            led_tx.clone(),
            resigned_tx.clone(),
        );
        tasks.spawn(async move {
            let lease = LockOptions::exclusive(TTL);
            loop {
                let leading = l.campaign(&election, "bench", &lease).await.unwrap();
                if led_tx.send(Instant::now()).is_err() {
                    return;
                }
                tokio::time::sleep(LEAD).await;
                leading.resign().await.unwrap();
                let _ = resigned_tx.send(Instant::now());
            }
        });
    }
    let before = counts.snapshot();
    let mut gaps = Vec::with_capacity(changes);
    let _first = led.recv().await;
    while gaps.len() < changes {
        let (Some(gone), Some(next)) = (resigned.recv().await, led.recv().await) else {
            break;
        };
        gaps.push(signed_ms(next, gone));
    }
    let after = counts.snapshot();
    drop(led);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    all.iter().for_each(lockwright::Locker::shutdown);
    format!(
        "next leader after a resignation: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms over {} \
         changes (bare xlock {rtt:.2} ms); {}",
        quantile(&gaps, 0.5),
        quantile(&gaps, 0.99),
        max(&gaps),
        gaps.len(),
        counts.line(F::COMMANDS, (&before, &after), gaps.len() as f64, "change"),
    )
}

/// `election_killed/N`: see the module's docs.
pub async fn killed<F: Fleet>(fleet: &F, n: usize, rounds: usize) -> String {
    let counts = Counts::default();
    let dead = fleet.store(&Counter::default()).await;
    let all = lockers(fleet, &counts, n, true).await;
    let (mut delays, mut rtts) = (Vec::new(), Vec::new());
    let before = counts.snapshot();
    for round in 0..rounds {
        let election = format!("election_killed/{n}/{round}");
        let sent = Instant::now();
        dead.lock(&request(&election, &format!("dead-{round}"), CRASH_TTL))
            .await
            .unwrap();
        let received = Instant::now();
        rtts.push(ms(received - sent));
        let free_at = sent + (received - sent) / 2 + CRASH_TTL + CRASH_GRACE;
        let (led_tx, mut led) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        for l in &all {
            let (l, election, led_tx) = (l.clone(), election.clone(), led_tx.clone());
            tasks.spawn(async move {
                let lease = LockOptions::exclusive(TTL);
                let leading = l.campaign(&election, "bench", &lease).await.unwrap();
                let _ = led_tx.send((Instant::now(), leading));
            });
        }
        let (at, leading) = led.recv().await.unwrap();
        delays.push(signed_ms(at, free_at));
        tasks.abort_all();
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        leading.resign().await.unwrap();
    }
    let after = counts.snapshot();
    all.iter().for_each(lockwright::Locker::shutdown);
    format!(
        "first leader after the dead one's lease + grace (lease {CRASH_TTL:?}, grace \
         {CRASH_GRACE:?}): median {:.2} ms, max {:.2} ms over {rounds} round(s); the dead \
         grant's round trip {:.2} ms; {}",
        quantile(&delays, 0.5),
        max(&delays),
        quantile(&rtts, 0.5),
        counts.line(F::COMMANDS, (&before, &after), rounds as f64, "round"),
    )
}

/// `election_observed/N`: see the module's docs.
pub async fn observed<F: Fleet>(fleet: &F, n: usize, changes: usize) -> String {
    use futures_util::StreamExt as _;
    use std::sync::{Arc, Mutex};
    let rtt = bare_xlock(&*fleet.store(&Counter::default()).await, 20).await;
    let counts = Counts::default();
    let all = lockers(fleet, &counts, CANDIDATES, true).await;
    let election = format!("election_observed/{n}");
    // What each observer reported (fence, when), and when each leader resigned (fence,
    // when the resignation returned).
    let reported: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let resigned: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let client = lockwright::Client::new(Tallied {
            inner: fleet.store(&counts.commands).await,
            calls: counts.calls.clone(),
        });
        let (election, reported) = (election.clone(), Arc::clone(&reported));
        tasks.spawn(async move {
            let mut leaders = Box::pin(client.observe(&election, OBSERVE_EVERY));
            while let Some(leader) = leaders.next().await {
                let fence = leader.unwrap().fence;
                reported.lock().unwrap().push((fence, Instant::now()));
            }
        });
    }
    let (led_tx, mut led) = mpsc::unbounded_channel();
    for l in &all {
        let (l, election, led_tx, resigned) = (
            l.clone(),
            election.clone(),
            led_tx.clone(),
            Arc::clone(&resigned),
        );
        tasks.spawn(async move {
            let lease = LockOptions::exclusive(TTL);
            loop {
                let leading = l.campaign(&election, "bench", &lease).await.unwrap();
                if led_tx.send(()).is_err() {
                    return;
                }
                tokio::time::sleep(OBSERVED_LEAD).await;
                let fence = leading.fence();
                leading.resign().await.unwrap();
                resigned.lock().unwrap().push((fence, Instant::now()));
            }
        });
    }
    // Two leaders first: every observer is observing by then.
    for _ in 0..2 {
        led.recv().await;
    }
    let (before, cpu_before, since) = (counts.snapshot(), fleet.server_cpu().await, Instant::now());
    for _ in 0..changes {
        led.recv().await;
    }
    let (after, cpu_after) = (counts.snapshot(), fleet.server_cpu().await);
    // The last change's news reaches every observer.
    tokio::time::sleep(OBSERVED_LEAD / 2).await;
    drop(led);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    all.iter().for_each(lockwright::Locker::shutdown);
    let resigned = resigned.lock().unwrap().clone();
    // Each report after `since`: how long after the resignation that made its leader (the
    // last one with a lower fence) returned.
    let seen: Vec<f64> = reported
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at > since)
        .filter_map(|(fence, at)| {
            let (_, gone) = resigned
                .iter()
                .filter(|(f, _)| f < fence)
                .max_by_key(|(f, _)| *f)?;
            Some(signed_ms(*at, *gone))
        })
        .collect();
    let cpu = cpu_before.zip(cpu_after).map_or_else(
        || "server CPU n/a".to_string(),
        |(b, a)| {
            format!(
                "server CPU {:.3} ms",
                ms(a.saturating_sub(b)) / changes as f64
            )
        },
    );
    format!(
        "{n} observing process(es) (reads at least every {OBSERVE_EVERY:?}), leaders of \
         {OBSERVED_LEAD:?}: {cpu} per leader change; the observers reported {:.2} of each \
         change, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms after the resignation returned \
         (bare xlock {rtt:.2} ms); {}",
        seen.len() as f64 / (changes * n.max(1)) as f64,
        quantile(&seen, 0.5),
        quantile(&seen, 0.99),
        max(&seen),
        counts.line(F::COMMANDS, (&before, &after), changes as f64, "change"),
    )
}
