//! `idle_processes/N`: the server's work per grant on a contended resource, as the number
//! of other processes grows. [`CONTENDERS`] Lockers take one resource in a worker loop
//! ([`crate::CONTENDED_HOLD`] holds, as `contended/N`) while N more processes, each a Locker
//! on a client of its own, do nothing that concerns them: half hold a lock of their own
//! (an [`IDLE_TTL`] lease, never renewed in the window), half wait far back in one line
//! that does not move (a lock held by another client for the whole run). The waiters far
//! back learn it from their second refusal (the one that keeps their place) and stop
//! listening, so the window starts after a settling time (the window's warm-up) on top of
//! the worker loop's own.
//!
//! What grows with N is what the processes still send: the far waiters' keep-place writes
//! (one each per `renew_fraction` of `queue_ttl`), and, with hints on, any wakes cursor
//! still open. The line gives commands per grant (everybody's) and the server's CPU time
//! per grant.

use std::time::Duration;

use lockwright::{LockOptions, Locker};
use lockwright_engine::LockStore;
use tokio::task::JoinSet;

use crate::fleets::Fleet;
use crate::loops::worker_loop;
use crate::measures::{lockers, request, switch, waiting_options};
use crate::plan::Window;
use crate::tally::{Counter, Counts};

/// The Lockers contending on the measured resource (the 8 clients).
pub const CONTENDERS: usize = 8;
/// The lease of the idle processes' locks and of the lock their line waits for: longer
/// than any window, so nothing is renewed or expires while measured.
pub const IDLE_TTL: Duration = Duration::from_secs(120);

/// `idle_processes/N`: see the module's docs.
pub async fn idle_processes<F: Fleet>(fleet: &F, n: usize, hints: bool, window: &Window) -> String {
    let counts = Counts::default();
    let contenders = lockers(fleet, &counts, CONTENDERS, hints).await;
    let idle = lockers(fleet, &counts, n, hints).await;
    let setting = switch(hints);
    let far = format!("idle_processes/{n}/{setting}/far");
    let blocker = fleet.store(&Counter::default()).await;
    blocker
        .lock(&request(&far, "blocker", IDLE_TTL))
        .await
        .unwrap();
    let options = LockOptions::exclusive(IDLE_TTL);
    let (mut guards, mut waits) = (Vec::new(), JoinSet::new());
    for (i, l) in idle.iter().enumerate() {
        if i % 2 == 0 {
            let own = format!("idle_processes/{n}/{setting}/held/{i}");
            guards.push(l.acquire(&own, &options).await.unwrap());
        } else {
            let (l, far, options) = (l.clone(), far.clone(), options.clone());
            // Ends with the Locker's shutdown.
            waits.spawn(async move { l.acquire(&far, &options).await.is_ok() });
        }
    }
    tokio::time::sleep(window.warm_up).await;
    let resource = format!("idle_processes/{n}/{setting}/contended");
    let run = worker_loop(
        fleet,
        &counts,
        &contenders,
        &[resource],
        &waiting_options(hints),
        window,
    )
    .await;
    drop(guards);
    idle.iter().for_each(Locker::shutdown);
    while let Some(granted) = waits.join_next().await {
        assert!(!granted.unwrap(), "the line far back never moves");
    }
    format!(
        "{n} idle processes ({} holding, {} waiting far back): {}",
        n.div_ceil(2),
        n / 2,
        run.line_with::<F>(&counts),
    )
}
