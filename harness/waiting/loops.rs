//! The windowed measurements: `handover/W` (Lockers taking turns, no barging) and the
//! worker loop behind `contended/N` and the fair contended measurements.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwright::{LockOptions, Locker};
use lockwright_benches::{max, quantile};
use lockwright_engine::LockStore;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::fleets::Fleet;
use crate::measures::{lockers, ms, signed_ms, switch, waiting_options};
use crate::plan::Window;
use crate::tally::{Counts, Snapshot};
use crate::{CONTENDED_HOLD, HANDOVER_HOLD};

/// The grants and releases of `handover/W`, in grant order.
#[derive(Default)]
struct Turns {
    /// When each grant's acquire returned; the index is the grant's number.
    grants: Vec<Instant>,
    /// When the release of grant `n` returned.
    releases: Vec<(usize, Instant)>,
}

/// One Locker of `handover/W`: takes the resource, holds it `hold`, releases it, and asks
/// again once somebody else was granted it; until `stop`.
async fn take_turns<S: LockStore>(
    locker: Locker<S>,
    (resource, options): (String, LockOptions),
    mut stop: watch::Receiver<bool>,
    granted: Arc<watch::Sender<usize>>,
    turns: Arc<Mutex<Turns>>,
) {
    loop {
        let guard = tokio::select! {
            guard = locker.acquire(&resource, &options) => guard.unwrap(),
            _ = stop.wait_for(|s| *s) => return,
        };
        let at = Instant::now();
        let n = {
            let mut turns = turns.lock().unwrap();
            turns.grants.push(at);
            turns.grants.len() - 1
        };
        granted.send_replace(n + 1);
        tokio::time::sleep(HANDOVER_HOLD).await;
        guard.release().await.unwrap();
        let released = Instant::now();
        turns.lock().unwrap().releases.push((n, released));
        // Back in line once another Locker has the lock: no barging.
        let mut grants = granted.subscribe();
        tokio::select! {
            _ = grants.wait_for(|g| *g > n + 1) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// `handover/W`: W + 1 Lockers take one resource in turn, each holding it
/// [`HANDOVER_HOLD`]; each sample is a release returning → the next grant's acquire
/// returning, both in the window. A grant can return before the release that freed the
/// lock does (the release still waits for its write concern): such a sample counts as 0,
/// and the line says how many there were ("early").
pub async fn handover<F: Fleet>(fleet: &F, waiters: usize, hints: bool, window: &Window) -> String {
    let counts = Counts::default();
    let all = lockers(fleet, &counts, waiters + 1, hints).await;
    let resource = format!("handover/{waiters}/{}", switch(hints));
    let (stop_tx, stop) = watch::channel(false);
    let granted = Arc::new(watch::channel(0usize).0);
    let turns = Arc::new(Mutex::new(Turns::default()));
    let mut tasks = JoinSet::new();
    for l in &all {
        tasks.spawn(take_turns(
            l.clone(),
            (resource.clone(), waiting_options(hints)),
            stop.clone(),
            Arc::clone(&granted),
            Arc::clone(&turns),
        ));
    }
    tokio::time::sleep(window.warm_up).await;
    let before = counts.snapshot();
    let (first, start) = (*granted.borrow(), Instant::now());
    window.pass(|| granted.borrow().saturating_sub(first)).await;
    let (last, end) = (*granted.borrow(), Instant::now());
    let after = counts.snapshot();
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    all.iter().for_each(Locker::shutdown);
    let turns = turns.lock().unwrap();
    let (mut samples, mut early) = (Vec::new(), 0u32);
    for &(n, released) in &turns.releases {
        let Some(&next) = turns.grants.get(n + 1) else {
            continue;
        };
        if released < start || next > end {
            continue;
        }
        let took = signed_ms(next, released);
        early += u32::from(took < 0.0);
        samples.push(took.max(0.0));
    }
    let grants = last - first;
    format!(
        "handover p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms over {} handovers ({early} early) \
         in {:.1} s; {}",
        quantile(&samples, 0.5),
        quantile(&samples, 0.99),
        max(&samples),
        samples.len(),
        (end - start).as_secs_f64(),
        counts.line(F::COMMANDS, (&before, &after), grants as f64, "grant"),
    )
}

/// The grants of a worker loop, and who waits since when.
struct Queue {
    /// (Locker, when its acquire returned, how long it waited).
    grants: Vec<(usize, Instant, Duration)>,
    /// Since when each Locker waits, if it does.
    waiting: Vec<Option<Instant>>,
}

/// One Locker of a worker loop: acquire, hold, release, again at once; until `stop`.
async fn work<S: LockStore>(
    i: usize,
    locker: Locker<S>,
    resource: String,
    options: LockOptions,
    mut stop: watch::Receiver<bool>,
    queue: Arc<Mutex<Queue>>,
) {
    loop {
        let asked = Instant::now();
        queue.lock().unwrap().waiting[i] = Some(asked);
        let guard = tokio::select! {
            guard = locker.acquire(&resource, &options) => guard.unwrap(),
            _ = stop.wait_for(|s| *s) => return,
        };
        let at = Instant::now();
        {
            let mut queue = queue.lock().unwrap();
            queue.waiting[i] = None;
            queue.grants.push((i, at, at - asked));
        }
        tokio::time::sleep(CONTENDED_HOLD).await;
        guard.release().await.unwrap();
        if *stop.borrow() {
            return;
        }
    }
}

/// What a worker loop saw in its window.
pub struct Loop {
    pub before: Snapshot,
    pub after: Snapshot,
    pub seconds: f64,
    pub grants: u64,
    pub per_locker: Vec<u64>,
    /// The longest wait of an acquire granted in the window, or still waiting at its end.
    pub longest: Duration,
    /// The CPU time the server used in the window, where it reports it.
    pub server_cpu: Option<Duration>,
    /// The CPU time this process (every Locker, its driver and the harness) used in the
    /// window.
    pub client_cpu: Duration,
}

impl Loop {
    /// [`Loop::line`], then the commands per grant of `counts` over the window.
    pub fn line_with<F: Fleet>(&self, counts: &Counts) -> String {
        let per_grant = counts.line(
            F::COMMANDS,
            (&self.before, &self.after),
            self.grants as f64,
            "grant",
        );
        format!("{}; {per_grant}", self.line())
    }

    /// Grants per second, the longest wait, grants per Locker, and the server's and the
    /// clients' CPU time per grant.
    pub fn line(&self) -> String {
        let grants = self.grants.max(1) as f64;
        let cpu = self.server_cpu.map_or_else(
            || "server CPU n/a".to_string(),
            |cpu| {
                format!(
                    "server CPU {:.2} ms per grant ({:.0}% of a core)",
                    ms(cpu) / grants,
                    100.0 * cpu.as_secs_f64() / self.seconds
                )
            },
        );
        format!(
            "{:.1} grants/s over {:.1} s, longest wait {:.1} ms, grants per Locker {}..{}, {cpu}, \
             client CPU {:.2} ms per grant",
            self.grants as f64 / self.seconds,
            self.seconds,
            ms(self.longest),
            self.per_locker.iter().min().unwrap_or(&0),
            self.per_locker.iter().max().unwrap_or(&0),
            ms(self.client_cpu) / grants,
        )
    }
}

/// Runs `lockers` in a worker loop with [`CONTENDED_HOLD`] holds, Locker `i` on
/// `resources[i % len]`, asking with `options`, over `window`; the server's CPU time is
/// read from `fleet` at the window's ends.
pub async fn worker_loop<F: Fleet, S: LockStore>(
    fleet: &F,
    counts: &Counts,
    lockers: &[Locker<S>],
    resources: &[String],
    options: &LockOptions,
    window: &Window,
) -> Loop {
    let n = lockers.len();
    let (stop_tx, stop) = watch::channel(false);
    let queue = Arc::new(Mutex::new(Queue {
        grants: Vec::new(),
        waiting: vec![None; n],
    }));
    let mut tasks = JoinSet::new();
    for (i, l) in lockers.iter().enumerate() {
        tasks.spawn(work(
            i,
            l.clone(),
            resources[i % resources.len()].clone(),
            options.clone(),
            stop.clone(),
            Arc::clone(&queue),
        ));
    }
    tokio::time::sleep(window.warm_up).await;
    // The warm-up lasts until every Locker was granted once (the first round's waits
    // include the start: 64 Lockers opening their stores at once), or a window's length
    // (a racing Locker may never be granted).
    let warming = Instant::now();
    while warming.elapsed() < window.measure {
        let granted: std::collections::HashSet<usize> =
            queue.lock().unwrap().grants.iter().map(|g| g.0).collect();
        if granted.len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu_before = fleet.server_cpu().await;
    let before = counts.snapshot();
    let client_before = crate::cpu::process_cpu();
    let start = Instant::now();
    window.pass(|| 0).await;
    let end = Instant::now();
    let client_cpu = crate::cpu::process_cpu().saturating_sub(client_before);
    let after = counts.snapshot();
    let cpu_after = fleet.server_cpu().await;
    let still_waiting = queue
        .lock()
        .unwrap()
        .waiting
        .iter()
        .flatten()
        .map(|since| end.saturating_duration_since(*since))
        .max();
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    lockers.iter().for_each(Locker::shutdown);
    let queue = queue.lock().unwrap();
    let mut per_locker = vec![0u64; n];
    let mut longest = still_waiting.unwrap_or_default();
    let mut grants = 0u64;
    for &(i, at, waited) in &queue.grants {
        if at >= start && at <= end {
            grants += 1;
            per_locker[i] += 1;
            longest = longest.max(waited);
        }
    }
    Loop {
        before,
        after,
        seconds: (end - start).as_secs_f64(),
        grants,
        per_locker,
        longest,
        server_cpu: cpu_before
            .zip(cpu_after)
            .map(|(before, after)| after.saturating_sub(before)),
        client_cpu,
    }
}

/// `contended/N`: N Lockers in a worker loop on one resource with [`CONTENDED_HOLD`] holds
/// (acquire, hold, release, acquire again at once: the releaser may take it again).
pub async fn contended<F: Fleet>(fleet: &F, n: usize, hints: bool, window: &Window) -> String {
    let resource = format!("contended/{n}/{}", switch(hints));
    on_resources(fleet, n, &[resource], hints, window).await
}

/// `contended_spread/N/R`: N Lockers in a worker loop on R resources (Locker `i` on resource
/// `i % R`), [`CONTENDED_HOLD`] holds: the 64 clients on 16 resources.
pub async fn spread<F: Fleet>(
    fleet: &F,
    (n, resources): (usize, usize),
    hints: bool,
    window: &Window,
) -> String {
    let names: Vec<String> = (0..resources)
        .map(|r| format!("contended_spread/{n}/{r}/{}", switch(hints)))
        .collect();
    on_resources(fleet, n, &names, hints, window).await
}

/// N fresh Lockers in a worker loop on `resources`, hints on or off: the loop's line and
/// its commands per grant.
async fn on_resources<F: Fleet>(
    fleet: &F,
    n: usize,
    resources: &[String],
    hints: bool,
    window: &Window,
) -> String {
    let counts = Counts::default();
    let all = lockers(fleet, &counts, n, hints).await;
    let options = waiting_options(hints);
    let run = worker_loop(fleet, &counts, &all, resources, &options, window).await;
    run.line_with::<F>(&counts)
}
