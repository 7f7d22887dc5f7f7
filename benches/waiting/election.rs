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

use std::time::{Duration, Instant};

use lockwright::LockOptions;
use lockwright_benches::{max, quantile};
use lockwright_engine::LockStore;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::fleets::Fleet;
use crate::measures::{bare_xlock, lockers, ms, request, signed_ms};
use crate::tally::{Counter, Counts};
use crate::{CRASH_GRACE, CRASH_TTL, TTL};

/// How long each leader leads before it resigns.
const LEAD: Duration = Duration::from_millis(5);

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
