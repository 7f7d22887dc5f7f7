//! Waiting Lockers on any store (issue 25, waiters woken by the store), shared by the
//! `store_mem` and `store_mongo` benches. Not criterion benchmarks: each measurement runs
//! for a window, records what it saw ([`lockwright_benches::waiting`] names the numbers)
//! and runs once with hints on and once with them off (`LockerConfig::wake_on_hints`).
//!
//! Every Locker is a `Locker` of the `lockwright` crate on a store of its own, handed out by
//! the backend's [`Fleet`]: on MongoDB each on its own `mongodb::Client` (so each has its
//! own change stream, as separate processes would); in memory each a handle on one shared
//! `MemStore` with its own hint subscription. Stores are wrapped in [`Tallied`], which
//! counts the calls each Locker makes and the hint subscriptions it got.
//!
//! - `waiting_cycle`: one Locker per setting takes and releases a free lock, interleaved with
//!   a bare `xlock` + (untimed) `unlock_one` of the store, the uncontended grant the
//!   handover is judged against.
//! - `handover/W`: W + 1 Lockers take one resource in turn, each holding it
//!   [`HANDOVER_HOLD`]; a Locker that released asks again only once another was granted
//!   (no barging), so W Lockers wait at every release. Each sample is the time from a
//!   release returning to the next grant's acquire returning.
//! - `contended/N`: N Lockers loop acquire, hold [`CONTENDED_HOLD`], release, acquire
//!   again at once (a worker loop; the releaser may take it again).
//! - `crashed_holder/W`: a lock taken by the store directly with a TTL of [`CRASH_TTL`] and
//!   never renewed or released, on a store with a takeover grace of [`CRASH_GRACE`]; W
//!   Lockers wait for it; the first grant is timed from the lock's expiry + grace (the
//!   expiry placed at the middle of the crashed grant's round trip).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwright::{Client as LockClient, LockOptions, Locker, LockerConfig};
use lockwright_benches::waiting::{
    CONTENDED, CRASHED, CYCLE, HANDOVER, by_kind, difference, key, parameter, quantile, spread,
};
use lockwright_benches::{Record, RunMode};
use lockwright_engine::{
    Error, Filter, HintStream, LockDetails, LockId, LockRequest, LockStatus, LockStore, Renewal,
    Resource, Result, SharedLimit, Ttl,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub mod fair;

/// The TTL of every Locker's grant: long enough that nothing is renewed or expires while
/// it is measured.
const TTL: Duration = Duration::from_secs(30);
/// How long each grant is held in `handover/W`: long enough that polling waiters have
/// backed off past their first few attempts (with 8 waiters taking turns, the longest has
/// waited some 400 ms at a release), short enough for a few hundred handovers in the full
/// window.
pub const HANDOVER_HOLD: Duration = Duration::from_millis(50);
/// How long each grant is held in `contended/N` (the 5 ms).
pub const CONTENDED_HOLD: Duration = Duration::from_millis(5);
/// The TTL of the crashed holder's lock.
pub const CRASH_TTL: Duration = Duration::from_millis(500);
/// The takeover grace of the stores in `crashed_holder/W` (MongoDB's default is 2 s).
pub const CRASH_GRACE: Duration = Duration::from_millis(200);

/// Commands or calls so far, by name.
#[derive(Clone, Default)]
pub struct Counter(Arc<Mutex<BTreeMap<String, u64>>>);

impl Counter {
    /// One more `name`.
    pub fn add(&self, name: &str) {
        let mut counts = self.0.lock().unwrap();
        match counts.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                counts.insert(name.to_string(), 1);
            }
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap().clone()
    }
}

/// Where the Lockers of one measurement get their stores: one backend, one collection (or
/// table), one takeover grace.
pub trait Fleet {
    /// The backend's store.
    type Store: LockStore;
    /// Whether the backend sends commands ([`Fleet::store`] counts them); otherwise the
    /// Lockers' store calls stand for them.
    const COMMANDS: bool;

    /// A store for one more Locker (on a client of its own where the backend has clients),
    /// whose set-up has run so that none of it is measured; every command its client starts
    /// is counted in `commands`.
    fn store(&self, commands: &Counter) -> impl Future<Output = Self::Store>;

    /// The server's own counters now, by name (MongoDB: `serverStatus`'s write
    /// conflicts); empty where there are none.
    fn server_counters(&self) -> impl Future<Output = BTreeMap<String, u64>>;

    /// Everything the fleet opened is closed (clients shut down, its collection dropped).
    fn finish(self) -> impl Future<Output = ()>;
}

/// The store under a measured Locker: `inner`, counting every call by the name of the
/// `LockStore` method, refusals of `xlock` as `refused`, and hint subscriptions as `hints`
/// (or `no_hints` when the store had none to give).
pub struct Tallied<S> {
    inner: S,
    calls: Counter,
}

impl<S: LockStore> LockStore for Tallied<S> {
    async fn xlock(&self, request: &LockRequest) -> Result<LockStatus> {
        self.calls.add("xlock");
        let granted = self.inner.xlock(request).await;
        if let Err(Error::AlreadyLocked { .. }) = granted {
            self.calls.add("refused");
        }
        granted
    }

    async fn slock(&self, request: &LockRequest, limit: Option<SharedLimit>) -> Result<LockStatus> {
        self.calls.add("slock");
        self.inner.slock(request, limit).await
    }

    async fn unlock(&self, lock_id: &LockId) -> Result<Vec<LockStatus>> {
        self.calls.add("unlock");
        self.inner.unlock(lock_id).await
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.calls.add("renew");
        self.inner.renew(lock_id, ttl, margin).await
    }

    async fn renew_one(&self, lock: &Renewal, margin: Duration) -> Result<LockStatus> {
        self.calls.add("renew_one");
        self.inner.renew_one(lock, margin).await
    }

    async fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        self.calls.add("renew_many");
        self.inner.renew_many(locks, margin).await
    }

    async fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> Result<Option<LockStatus>> {
        self.calls.add("unlock_one");
        self.inner.unlock_one(resource, lock_id).await
    }

    async fn leave_queue(&self, resource: &Resource, ticket: &LockId) -> Result<bool> {
        self.inner.leave_queue(resource, ticket).await
    }

    async fn waiters(&self, resource: &Resource) -> Result<Vec<lockwright_engine::Waiter>> {
        self.inner.waiters(resource).await
    }

    async fn summary(&self) -> Result<lockwright_engine::Summary> {
        self.inner.summary().await
    }

    async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>> {
        self.calls.add("status");
        self.inner.status(filter).await
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        self.calls.add("purge");
        self.inner.purge().await
    }

    async fn create_indexes(&self) -> Result<()> {
        self.inner.create_indexes().await
    }

    fn hints(&self) -> Option<HintStream> {
        let hints = self.inner.hints();
        self.calls
            .add(if hints.is_some() { "hints" } else { "no_hints" });
        hints
    }
}

/// What one measurement counts: the commands of its Lockers' clients and their store
/// calls.
#[derive(Clone, Default)]
struct Counts {
    commands: Counter,
    calls: Counter,
}

/// The counts at one instant.
struct Snapshot {
    commands: BTreeMap<String, u64>,
    calls: BTreeMap<String, u64>,
    server: BTreeMap<String, u64>,
}

impl Counts {
    async fn snapshot<F: Fleet>(&self, fleet: &F) -> Snapshot {
        Snapshot {
            commands: self.commands.snapshot(),
            calls: self.calls.snapshot(),
            server: fleet.server_counters().await,
        }
    }
}

/// A Locker of its own on a fresh store of `fleet`, hints on or off.
async fn locker<F: Fleet>(fleet: &F, counts: &Counts, hints: bool) -> Locker<Tallied<F::Store>> {
    let store = Tallied {
        inner: fleet.store(&counts.commands).await,
        calls: counts.calls.clone(),
    };
    Locker::new(LockClient::new(store), locker_config(hints)).unwrap()
}

fn locker_config(hints: bool) -> LockerConfig {
    let mut config = LockerConfig::default();
    config.wake_on_hints = hints;
    config
}

/// `n` Lockers of one process: on one store of `fleet` (one client, one change stream).
async fn lockers_sharing<F: Fleet>(
    fleet: &F,
    counts: &Counts,
    n: usize,
    hints: bool,
) -> Vec<Locker<Tallied<F::Store>>> {
    let client = LockClient::new(Tallied {
        inner: fleet.store(&counts.commands).await,
        calls: counts.calls.clone(),
    });
    (0..n)
        .map(|_| Locker::new(client.clone(), locker_config(hints)).unwrap())
        .collect()
}

async fn lockers<F: Fleet>(
    fleet: &F,
    counts: &Counts,
    n: usize,
    hints: bool,
) -> Vec<Locker<Tallied<F::Store>>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(locker(fleet, counts, hints).await);
    }
    all
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `a - b` in ms, negative when `a` came first.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    if a >= b { ms(a - b) } else { -ms(b - a) }
}

fn switch(hints: bool) -> &'static str {
    if hints { "on" } else { "off" }
}

fn request(resource: &str, lock_id: &str, ttl: Duration) -> LockRequest {
    let mut details = LockDetails::new();
    details.ttl = Some(ttl);
    LockRequest::new(resource, lock_id, &details).unwrap()
}

/// How long a windowed measurement runs.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Before the count starts (every Locker has waited once, subscriptions are open).
    pub warm_up: Duration,
    /// The counted window.
    pub measure: Duration,
    /// Ends the window early once this many samples were taken (test mode).
    pub max_samples: Option<usize>,
}

impl Window {
    /// Sleeps through the window, or until `samples()` reaches `max_samples`.
    async fn pass(&self, samples: impl Fn() -> usize) {
        let start = Instant::now();
        while start.elapsed() < self.measure {
            if self.max_samples.is_some_and(|m| samples() >= m) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn scaled(self, by: f64) -> Window {
        Window {
            warm_up: self.warm_up.mul_f64(by),
            measure: self.measure.mul_f64(by),
            max_samples: self.max_samples,
        }
    }
}

/// What each measurement runs in a mode: sizes, rounds and windows.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Untimed cycles before the timed ones.
    pub cycle_warm_up: usize,
    /// Timed rounds of the cycle (each: a bare xlock, a cycle with hints on, one off).
    pub cycle_rounds: usize,
    /// Waiting Lockers of `handover/W`.
    pub handover_waiters: &'static [usize],
    /// The window of each `handover/W`.
    pub handover: Window,
    /// Lockers of `contended/N`.
    pub contended_lockers: &'static [usize],
    /// The window of each `contended/N`.
    pub contended: Window,
    /// Waiting Lockers of `crashed_holder/W`.
    pub crashed_waiters: &'static [usize],
    /// Crashed locks waited out per `crashed_holder/W`.
    pub crashed_rounds: usize,
    /// Readers of `fair_writer/R`.
    pub fair_readers: &'static [usize],
    /// Rounds of `fair_writer/R`; its window's `measure` is how long the writer waits.
    pub fair_writer_rounds: usize,
    /// The window of `fair_writer/R`.
    pub fair_writer: Window,
    /// Lockers of `fair_contended/N`.
    pub fair_lockers: &'static [usize],
    /// The window of `fair_contended/N`.
    pub fair_contended: Window,
    /// Dead waiters of `fair_abandoned/W`.
    pub fair_dead: &'static [usize],
    /// Rounds of `fair_abandoned/W`.
    pub fair_abandoned_rounds: usize,
}

impl Plan {
    /// The plan of `mode`: test mode runs each measurement once on the smallest sizes (a
    /// few samples), quick mode (CI) 2 or 3 s each, full mode 10 or 15 s each; every
    /// window (not the test mode's) `scale` times as long.
    pub fn of(mode: RunMode, scale: f64) -> Plan {
        let scale = if mode == RunMode::Test { 1.0 } else { scale };
        let window = |warm_up: u64, measure: u64, max_samples: Option<usize>| {
            Window {
                warm_up: Duration::from_millis(warm_up),
                measure: Duration::from_millis(measure),
                max_samples,
            }
            .scaled(scale)
        };
        mode.pick(
            Plan {
                cycle_warm_up: 1,
                cycle_rounds: 3,
                handover_waiters: &[1],
                handover: window(0, 5_000, Some(3)),
                contended_lockers: &[2],
                contended: window(50, 300, None),
                crashed_waiters: &[1],
                crashed_rounds: 1,
                fair_readers: &[2],
                fair_writer_rounds: 1,
                fair_writer: window(0, 1_000, None),
                fair_lockers: &[2],
                fair_contended: window(50, 300, None),
                fair_dead: &[1],
                fair_abandoned_rounds: 1,
            },
            Plan {
                cycle_warm_up: 20,
                cycle_rounds: 300,
                handover_waiters: &[8, 64],
                handover: window(500, 3_000, None),
                contended_lockers: &[8, 64],
                contended: window(500, 2_000, None),
                crashed_waiters: &[8],
                crashed_rounds: 2,
                fair_readers: &[8],
                fair_writer_rounds: 3,
                fair_writer: window(300, 2_000, None),
                fair_lockers: &[64],
                fair_contended: window(500, 3_000, None),
                fair_dead: &[8],
                fair_abandoned_rounds: 1,
            },
            Plan {
                cycle_warm_up: 50,
                cycle_rounds: 1_000,
                handover_waiters: &[1, 8, 64],
                handover: window(1_000, 15_000, None),
                contended_lockers: &[8, 64],
                contended: window(1_000, 10_000, None),
                crashed_waiters: &[8, 64],
                crashed_rounds: 5,
                fair_readers: &[8],
                fair_writer_rounds: 10,
                fair_writer: window(500, 5_000, None),
                fair_lockers: &[8, 64],
                fair_contended: window(1_000, 10_000, None),
                fair_dead: &[8],
                fair_abandoned_rounds: 3,
            },
        )
    }
}

/// The record's numbers, commands and notes, as the report reads them. `per` is what the
/// counts are divided by (grants, cycles, rounds); `counted` the window's counts.
fn finish<F: Fleet>(
    mut record: Record,
    hints: bool,
    numbers: &[(&str, f64)],
    counted: (&Snapshot, &Snapshot),
    per: f64,
    subscriptions: u64,
    note: String,
) -> Record {
    let (before, after) = counted;
    let calls = difference(&before.calls, &after.calls);
    let commands = if F::COMMANDS {
        difference(&before.commands, &after.commands)
    } else {
        // In memory the store calls are the commands (without the bookkeeping names).
        calls
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "refused" | "no_hints"))
            .map(|(name, n)| (name.clone(), *n))
            .collect()
    };
    let per = per.max(1.0);
    let (lock, stream, other) = by_kind(&commands);
    let mut by_count: Vec<(&String, &u64)> = commands.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    record.custom = true;
    record.commands = Some(lock as f64 / per);
    record.command_names = by_count.iter().map(|(name, _)| (*name).clone()).collect();
    let mut extra: BTreeMap<String, f64> = numbers
        .iter()
        .map(|(k, v)| ((*k).to_string(), *v))
        .collect();
    let calls_of = |name: &str| calls.get(name).copied().unwrap_or(0) as f64;
    for (k, v) in [
        (key::HINTS, f64::from(u8::from(hints))),
        (key::SUBSCRIPTIONS, subscriptions as f64),
        (key::LOCK_PER_GRANT, lock as f64 / per),
        (key::STREAM_PER_GRANT, stream as f64 / per),
        (key::OTHER_PER_GRANT, other as f64 / per),
        (key::ATTEMPTS_PER_GRANT, calls_of("xlock") / per),
    ] {
        extra.insert(k.to_string(), v);
    }
    for (name, n) in &commands {
        extra.insert(format!("{}{name}", key::PER_GRANT_PREFIX), *n as f64 / per);
    }
    for (name, n) in difference(&before.server, &after.server) {
        extra.insert(format!("{}{name}", key::SERVER_PREFIX), n as f64 / per);
    }
    for name in after.server.keys() {
        extra
            .entry(format!("{}{name}", key::SERVER_PREFIX))
            .or_insert(0.0);
    }
    record.extra = extra;
    record.note = Some(note);
    record
}

fn subscriptions(counts: &Counts) -> u64 {
    counts.calls.snapshot().get("hints").copied().unwrap_or(0)
}

/// `waiting_cycle`: one Locker with hints on and one with hints off, each on a store of its
/// own, take and release a free lock in turn, interleaved with a bare `xlock` of a third
/// store (released untimed); `warm_up` untimed rounds first. Returns the two records.
pub async fn cycle<F: Fleet>(fleet: &F, group: &str, warm_up: usize, rounds: usize) -> [Record; 2] {
    let records =
        [true, false].map(|hints| Record::new(group, CYCLE, Some(parameter(None, hints)), 1));
    let raw = fleet.store(&Counter::default()).await;
    let counts = [Counts::default(), Counts::default()];
    let lockers = [
        locker(fleet, &counts[0], true).await,
        locker(fleet, &counts[1], false).await,
    ];
    let options = LockOptions::exclusive(TTL);
    let bare = request("cycle/bare", "cycle-bare", TTL);
    // [hints on, off] x [acquire, release, cycle]
    let mut times: [[Vec<f64>; 3]; 2] = Default::default();
    let mut xlocks = Vec::with_capacity(rounds);
    let mut before = None;
    for round in 0..warm_up + rounds {
        if round == warm_up {
            before = Some([
                counts[0].snapshot(fleet).await,
                counts[1].snapshot(fleet).await,
            ]);
            for t in times.iter_mut().flatten() {
                t.clear();
            }
            xlocks.clear();
        }
        let start = Instant::now();
        raw.xlock(&bare).await.unwrap();
        xlocks.push(ms(start.elapsed()));
        raw.unlock_one(&bare.resource, &bare.lock_id).await.unwrap();
        // Alternate which setting goes first.
        for i in [round % 2, 1 - round % 2] {
            let resource = format!("cycle/{}", switch(i == 0));
            let start = Instant::now();
            let guard = lockers[i].acquire(&resource, &options).await.unwrap();
            let acquired = start.elapsed();
            guard.release().await.unwrap();
            let cycle = start.elapsed();
            times[i][0].push(ms(acquired));
            times[i][1].push(ms(cycle - acquired));
            times[i][2].push(ms(cycle));
        }
    }
    let after = [
        counts[0].snapshot(fleet).await,
        counts[1].snapshot(fleet).await,
    ];
    let before = before.expect("at least one timed round");
    for l in &lockers {
        l.shutdown();
    }
    let xlock_p50 = quantile(&xlocks, 0.5);
    let mut out = records;
    for (i, record) in out.iter_mut().enumerate() {
        let [acquire, release, cycle] = &times[i];
        let mut numbers: Vec<(&str, f64)> = spread(cycle).to_vec();
        numbers.extend([
            (key::XLOCK_P50_MS, xlock_p50),
            (key::ACQUIRE_P50_MS, quantile(acquire, 0.5)),
            (key::RELEASE_P50_MS, quantile(release, 0.5)),
        ]);
        let hints = i == 0;
        let note = format!(
            "one Locker (hints {}), acquire + release of a free lock, {rounds} rounds \
             interleaved with the other setting and a bare xlock of the store (median {:.3} \
             ms); counts per cycle",
            switch(hints),
            xlock_p50,
        );
        *record = finish::<F>(
            std::mem::take(record),
            hints,
            &numbers,
            (&before[i], &after[i]),
            rounds as f64,
            subscriptions(&counts[i]),
            note,
        );
    }
    out
}

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
    resource: String,
    hold: Duration,
    mut stop: watch::Receiver<bool>,
    granted: Arc<watch::Sender<usize>>,
    turns: Arc<Mutex<Turns>>,
) {
    let options = LockOptions::exclusive(TTL);
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
        tokio::time::sleep(hold).await;
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

/// `handover/W`: W + 1 Lockers take one resource in turn (see the module's docs); each
/// sample is a release returning → the next grant's acquire returning, both in the window.
pub async fn handover<F: Fleet>(
    fleet: &F,
    group: &str,
    waiters: usize,
    hints: bool,
    window: &Window,
) -> Record {
    let mut record = Record::new(
        group,
        HANDOVER,
        Some(parameter(Some(waiters as u64), hints)),
        1,
    );
    record.size = Some(waiters as u64);
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
            resource.clone(),
            HANDOVER_HOLD,
            stop.clone(),
            Arc::clone(&granted),
            Arc::clone(&turns),
        ));
    }
    tokio::time::sleep(window.warm_up).await;
    let before = counts.snapshot(fleet).await;
    let (first, start) = (*granted.borrow(), Instant::now());
    window.pass(|| granted.borrow().saturating_sub(first)).await;
    let (last, end) = (*granted.borrow(), Instant::now());
    let after = counts.snapshot(fleet).await;
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    for l in &all {
        l.shutdown();
    }
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
        if took < 0.0 {
            early += 1;
        }
        samples.push(took.max(0.0));
    }
    let grants = last - first;
    let seconds = (end - start).as_secs_f64();
    let mut numbers: Vec<(&str, f64)> = spread(&samples).to_vec();
    numbers.extend([
        (key::LOCKERS, waiters as f64),
        (key::HOLD_MS, ms(HANDOVER_HOLD)),
        (key::SECONDS, seconds),
        (key::GRANTS, grants as f64),
        (key::EARLY, f64::from(early)),
    ]);
    let note = format!(
        "{waiters} waiting Locker(s) + 1 holding, each on a store of its own, hints {}; \
         holds of {:?}; a releaser asks again once another was granted; counts per grant",
        switch(hints),
        HANDOVER_HOLD,
    );
    finish::<F>(
        record,
        hints,
        &numbers,
        (&before, &after),
        grants as f64,
        subscriptions(&counts),
        note,
    )
}

/// The grants of `contended/N`, and who waits since when.
struct Queue {
    /// (Locker, when its acquire returned, how long it waited).
    grants: Vec<(usize, Instant, Duration)>,
    /// Since when each Locker waits, if it does.
    waiting: Vec<Option<Instant>>,
}

/// One Locker of `contended/N`: acquire, hold, release, again at once; until `stop`.
async fn work<S: LockStore>(
    i: usize,
    locker: Locker<S>,
    resource: String,
    hold: Duration,
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
        tokio::time::sleep(hold).await;
        guard.release().await.unwrap();
        if *stop.borrow() {
            return;
        }
    }
}

/// What a worker loop saw in its window.
struct Loop {
    before: Snapshot,
    after: Snapshot,
    seconds: f64,
    grants: u64,
    per_locker: Vec<u64>,
    longest: Duration,
}

impl Loop {
    /// The numbers every worker loop reports.
    fn numbers(&self, n: usize) -> [(&'static str, f64); 8] {
        let min = self.per_locker.iter().copied().min().unwrap_or(0) as f64;
        let max = self.per_locker.iter().copied().max().unwrap_or(0) as f64;
        [
            (key::LOCKERS, n as f64),
            (key::HOLD_MS, ms(CONTENDED_HOLD)),
            (key::SECONDS, self.seconds),
            (key::GRANTS, self.grants as f64),
            (key::GRANTS_PER_S, self.grants as f64 / self.seconds),
            (key::LONGEST_WAIT_MS, ms(self.longest)),
            (key::GRANTS_MIN, min),
            (key::GRANTS_MAX, max),
        ]
    }
}

/// Runs `lockers` in a worker loop on `resource` with [`CONTENDED_HOLD`] holds, asking
/// with `options`, over `window`.
async fn worker_loop<F: Fleet, S: LockStore>(
    fleet: &F,
    counts: &Counts,
    lockers: &[Locker<S>],
    resource: &str,
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
            resource.to_string(),
            CONTENDED_HOLD,
            options.clone(),
            stop.clone(),
            Arc::clone(&queue),
        ));
    }
    tokio::time::sleep(window.warm_up).await;
    let before = counts.snapshot(fleet).await;
    let start = Instant::now();
    window.pass(|| 0).await;
    let end = Instant::now();
    let after = counts.snapshot(fleet).await;
    let still_waiting: Vec<Duration> = queue
        .lock()
        .unwrap()
        .waiting
        .iter()
        .flatten()
        .map(|since| end.saturating_duration_since(*since))
        .collect();
    stop_tx.send_replace(true);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    for l in lockers {
        l.shutdown();
    }
    let queue = queue.lock().unwrap();
    let mut per_locker = vec![0u64; n];
    let mut longest = still_waiting.iter().copied().max().unwrap_or_default();
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
    }
}

/// `contended/N`: N Lockers in a worker loop on one resource with [`CONTENDED_HOLD`] holds.
pub async fn contended<F: Fleet>(
    fleet: &F,
    group: &str,
    n: usize,
    hints: bool,
    window: &Window,
) -> Record {
    let mut record = Record::new(group, CONTENDED, Some(parameter(Some(n as u64), hints)), 1);
    record.size = Some(n as u64);
    let counts = Counts::default();
    let all = lockers(fleet, &counts, n, hints).await;
    let resource = format!("contended/{n}/{}", switch(hints));
    let options = LockOptions::exclusive(TTL);
    let run = worker_loop(fleet, &counts, &all, &resource, &options, window).await;
    let numbers = run.numbers(n);
    let note = format!(
        "{n} Lockers, each on a store of its own, hints {}, in a worker loop on one resource \
         (acquire, hold {:?}, release, acquire again at once); counts per grant",
        switch(hints),
        CONTENDED_HOLD,
    );
    finish::<F>(
        record,
        hints,
        &numbers,
        (&run.before, &run.after),
        run.grants as f64,
        subscriptions(&counts),
        note,
    )
}

/// `crashed_holder/W`: `rounds` times, a lock is taken by the store directly with a TTL of
/// [`CRASH_TTL`] and never renewed or released, and W Lockers wait for it on a fleet whose
/// takeover grace is [`CRASH_GRACE`]; each round's sample is how long after the lock's
/// expiry + grace the first of them was granted.
pub async fn crashed<F: Fleet>(
    fleet: &F,
    group: &str,
    waiters: usize,
    hints: bool,
    rounds: usize,
) -> Record {
    let mut record = Record::new(
        group,
        CRASHED,
        Some(parameter(Some(waiters as u64), hints)),
        1,
    );
    record.size = Some(waiters as u64);
    let counts = Counts::default();
    let holder = fleet.store(&Counter::default()).await;
    let all = lockers(fleet, &counts, waiters, hints).await;
    let options = LockOptions::exclusive(TTL);
    let (mut delays, mut rtts) = (Vec::new(), Vec::new());
    let before = counts.snapshot(fleet).await;
    for round in 0..rounds {
        let resource = format!("crashed/{waiters}/{}/{round}", switch(hints));
        let crashed = request(&resource, &format!("crashed-{round}"), CRASH_TTL);
        let sent = Instant::now();
        holder.xlock(&crashed).await.unwrap();
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
    let after = counts.snapshot(fleet).await;
    for l in &all {
        l.shutdown();
    }
    let mut numbers: Vec<(&str, f64)> = spread(&delays).to_vec();
    numbers.extend([
        (key::LOCKERS, waiters as f64),
        (key::TTL_MS, ms(CRASH_TTL)),
        (key::GRACE_MS, ms(CRASH_GRACE)),
        (key::CRASH_RTT_MS, quantile(&rtts, 0.5)),
    ]);
    let note = format!(
        "{waiters} waiting Locker(s), hints {}; a lock with a TTL of {:?}, never renewed, \
         takeover grace {:?}; first grant after expiry + grace, in ms; counts per round",
        switch(hints),
        CRASH_TTL,
        CRASH_GRACE,
    );
    finish::<F>(
        record,
        hints,
        &numbers,
        (&before, &after),
        rounds as f64,
        subscriptions(&counts),
        note,
    )
}

/// One line about `record` for the bench's output.
fn summary(record: &Record) -> String {
    if let Some(line) = fair::summary(record) {
        return line;
    }
    let x = |k: &str| record.extra.get(k).copied().unwrap_or(f64::NAN);
    let counts = format!(
        "lock commands {:.2}, stream {:.2}, attempts {:.2} per {}; {} subscription(s)",
        x(key::LOCK_PER_GRANT),
        x(key::STREAM_PER_GRANT),
        x(key::ATTEMPTS_PER_GRANT),
        if record.function == CYCLE {
            "cycle"
        } else if record.function == CRASHED {
            "round"
        } else {
            "grant"
        },
        x(key::SUBSCRIPTIONS),
    );
    let body = match record.function.as_str() {
        CYCLE => format!(
            "cycle p50 {:.3} ms (acquire {:.3}, release {:.3}), p99 {:.3} ms; bare xlock p50 \
             {:.3} ms",
            x(key::P50_MS),
            x(key::ACQUIRE_P50_MS),
            x(key::RELEASE_P50_MS),
            x(key::P99_MS),
            x(key::XLOCK_P50_MS),
        ),
        HANDOVER => format!(
            "handover p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms over {} ({} early)",
            x(key::P50_MS),
            x(key::P99_MS),
            x(key::MAX_MS),
            x(key::SAMPLES),
            x(key::EARLY),
        ),
        CONTENDED => format!(
            "{:.1} grants/s, longest wait {:.1} ms, grants per Locker {}..{}",
            x(key::GRANTS_PER_S),
            x(key::LONGEST_WAIT_MS),
            x(key::GRANTS_MIN),
            x(key::GRANTS_MAX),
        ),
        _ => format!(
            "first grant after expiry + grace: median {:.2} ms, max {:.2} ms over {} round(s)",
            x(key::P50_MS),
            x(key::MAX_MS),
            x(key::SAMPLES),
        ),
    };
    format!("{}: {body}; {counts}", record.id())
}

/// Saves `record` (and in test mode says it ran, as criterion does).
fn save(record: &Record, mode: RunMode) {
    if mode == RunMode::Test {
        println!("Testing {}", record.id());
    }
    println!("{}", summary(record));
    if mode == RunMode::Test {
        println!("Success");
    }
    record.save(mode).unwrap();
}

/// Every waiting measurement of `plan` that `selects` (criterion's filter on the record
/// ids) wants, on fleets made by `fleet` (with the takeover grace given, or the store's
/// default), each with hints off and on (which goes first alternates).
pub async fn run_all<F: Fleet>(
    group: &str,
    mode: RunMode,
    plan: &Plan,
    selects: impl Fn(&str) -> bool,
    fleet: impl AsyncFn(Option<Duration>) -> F,
) {
    let id = |function: &str, size: Option<usize>, hints: bool| {
        format!(
            "{group}/{function}/{}",
            parameter(size.map(|s| s as u64), hints)
        )
    };
    let wanted = |function: &str, size: Option<usize>| {
        selects(&id(function, size, true)) || selects(&id(function, size, false))
    };
    let mut order = [false, true];
    if wanted(CYCLE, None) {
        let f = fleet(None).await;
        for record in cycle(&f, group, plan.cycle_warm_up, plan.cycle_rounds).await {
            save(&record, mode);
        }
        f.finish().await;
    }
    for &w in plan.handover_waiters {
        if !wanted(HANDOVER, Some(w)) {
            continue;
        }
        for hints in order {
            let f = fleet(None).await;
            save(&handover(&f, group, w, hints, &plan.handover).await, mode);
            f.finish().await;
        }
        order.reverse();
    }
    for &n in plan.contended_lockers {
        if !wanted(CONTENDED, Some(n)) {
            continue;
        }
        for hints in order {
            let f = fleet(None).await;
            save(&contended(&f, group, n, hints, &plan.contended).await, mode);
            f.finish().await;
        }
        order.reverse();
    }
    for &w in plan.crashed_waiters {
        if !wanted(CRASHED, Some(w)) {
            continue;
        }
        for hints in order {
            let f = fleet(Some(CRASH_GRACE)).await;
            save(
                &crashed(&f, group, w, hints, plan.crashed_rounds).await,
                mode,
            );
            f.finish().await;
        }
        order.reverse();
    }
    fair::run_all(group, mode, plan, &selects, &fleet).await;
}
