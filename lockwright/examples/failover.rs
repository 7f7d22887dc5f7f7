//! Failover on a real replica set: contending clients while the primary steps down or dies.
//!
//! Half of the clients go through [`Locker`] (waiting acquire, background renewal, `lost()`),
//! half through [`Client`] (xlock or slock with a limit, renew by hand, unlock), all on a few
//! resources so that they really contend. A side task forces a failover every `--every`
//! seconds, alternately `replSetStepDown` on the primary and SIGKILL of the primary followed by
//! a restart of that member, through `scripts/mongod.sh`.
//!
//! An independent observer (plain data recorded by the clients, none of Lockwright's own
//! checks) keeps every holder's *trusted interval* on this process's monotonic clock: from
//! the instant the grant was returned until the holder stops trusting it (a `Locker` holder:
//! the last instant it found `is_held()` true before it sent the release or saw `lost()`
//! fire; a `Client` holder: the unlock sent, or `request_sent + ttl - drift_margin` of the
//! last successful grant or renewal). At the end it checks:
//!
//! - **overlaps**: no two exclusive holders' intervals on one resource overlap, an exclusive
//!   one overlaps no shared one, and shared holders never exceed the limit;
//! - **fence regressions**: fences are unique per resource and increase in grant order (a
//!   grant returned before another was sent has the lower fence; of two grants on a resource
//!   at least one of which is exclusive, the one whose trusted interval starts first has the
//!   lower fence);
//! - **lost grants**: a grant that was returned `Ok` is found in the store (by `status`, or a
//!   renewal that is not `LockNotFound`) whenever the answer arrives while its holder still
//!   trusts it;
//! - **recovery**: every client makes a successful grant again after the last failover;
//! - **panics and hangs**: nothing in the process panics, and every task joins within
//!   `--join-timeout` seconds of the end.
//!
//! A `Client` grant that failed with an error other than a refusal has an unknown outcome: it
//! is released (unlock with its lock id) and not counted as a grant.
//!
//! Run (starts and stops a three-member replica set on 127.0.0.1):
//!
//! ```text
//! scripts/mongod.sh run --members 3 -- \
//!   cargo run -p lockwright --features mongo --release --example failover -- --clients 32 --seconds 60
//! ```
//!
//! It needs `MONGODB_URI` (the set, on 127.0.0.1 only) and `LOCKWRIGHT_REPLSET_DIR` (its state
//! dir), which `scripts/mongod.sh run --members 3` exports. Exit status: 0 when every check
//! passes, 1 when one fails, 2 when the run could not be set up.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clap::Parser;
use lockwright::{
    Access, Client, Ended, Error, Filter, LockDetails, LockGuard, LockId, LockOptions, Locker,
    LockerConfig, MongoStore, generate_lock_id,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Contending lock clients on a three-member replica set while its primary fails over.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
struct Args {
    /// Contending clients: half through `Locker`, half through `Client`.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// How long the clients contend, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Seconds between failovers, alternately a step-down and a SIGKILL + restart of the
    /// primary. The first comes after this long; the last at least this long before the end.
    #[arg(long, default_value_t = 10)]
    every: u64,
    /// Resources the clients contend for.
    #[arg(long, default_value_t = 4)]
    resources: usize,
    /// TTL of every lock, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// The drift margin, in milliseconds: a holder trusts a lock until
    /// `sent + ttl - margin` (the `Locker`'s `drift_margin`, and the `Client` holders' rule).
    #[arg(long, default_value_t = 100)]
    drift_margin_ms: u64,
    /// The limit of every shared lock.
    #[arg(long, default_value_t = 2)]
    shared_limit: u32,
    /// The share of grants asked for as exclusive locks (the rest are shared).
    #[arg(long, default_value_t = 0.6)]
    exclusive_share: f64,
    /// A client that has made no grant for this long (ms) asks next for a resource of its
    /// own, which no other client contends for, so that its recovery after a failover shows
    /// within this bound instead of hiding behind contention.
    #[arg(long, default_value_t = 2000)]
    starve_ms: u64,
    /// How long a `Locker` client waits in `acquire_until` for a contended resource (ms).
    #[arg(long, default_value_t = 2000)]
    acquire_wait_ms: u64,
    /// Bound on every single store call made by the harness, in seconds (a call that takes
    /// longer counts as a `Timeout` error).
    #[arg(long, default_value_t = 15)]
    op_timeout: u64,
    /// Seconds every task has, after the run ends, to finish before it counts as hung.
    #[arg(long, default_value_t = 60)]
    join_timeout: u64,
    /// The database to use; each run uses a fresh collection in it.
    #[arg(long, default_value = "lockwright_failover")]
    database: String,
    /// Contend without any failover (a baseline for the numbers).
    #[arg(long)]
    no_failover: bool,
    /// Checks the observer: `Client` holders break the holding rule (they hold every lock
    /// for its TTL plus 500 ms without renewing it, trusting it throughout), so the run must
    /// FAIL with overlaps.
    #[arg(long)]
    break_holding_rule: bool,
}

impl Args {
    fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
    fn margin(&self) -> Duration {
        Duration::from_millis(self.drift_margin_ms)
    }
    fn op_timeout(&self) -> Duration {
        Duration::from_secs(self.op_timeout)
    }
    /// The next resource for client `id`: its own after `starve_ms` without a grant, else a
    /// contended one.
    fn pick_resource(&self, id: usize, last_grant: Instant, rng: &mut StdRng) -> usize {
        if last_grant.elapsed() >= Duration::from_millis(self.starve_ms) {
            self.resources + id
        } else {
            rng.random_range(0..self.resources)
        }
    }
}

/// Which API a client goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Locker,
    Client,
}

/// How a holder stopped trusting its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stop {
    /// It decided to release (and then sent the release).
    Released,
    /// `lost()` fired, or `is_held()` turned false, with this cause (`None`: `is_held()`
    /// turned false before `lost()` said why).
    Lost(Option<LostWhy>),
    /// A `Client` holder reached `sent + ttl - margin` without a renewal.
    Deadline,
    /// The store said the lock is gone while the holder trusted it (a lost grant).
    Gone,
    /// The grant came back too late to be trusted at all.
    NeverTrusted,
}

/// `Ended` minus `Released`, which is not a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LostWhy {
    Refused,
    Expired,
    Cancelled,
    Other,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Released => "released",
            Stop::Lost(Some(LostWhy::Refused)) => "lost: refused",
            Stop::Lost(Some(LostWhy::Expired)) => "lost: expired",
            Stop::Lost(Some(LostWhy::Cancelled)) => "lost: cancelled",
            Stop::Lost(Some(LostWhy::Other)) => "lost: other",
            Stop::Lost(None) => "is_held() false",
            Stop::Deadline => "trust deadline",
            Stop::Gone => "gone from the store",
            Stop::NeverTrusted => "returned too late to trust",
        }
    }
}

/// One grant as the observer saw it.
#[derive(Clone, Debug)]
struct Holding {
    client: usize,
    kind: Kind,
    resource: usize,
    exclusive: bool,
    fence: u64,
    /// When the request was sent (for a `Locker` grant, when `acquire` was called: an earlier
    /// instant, which keeps the real-time order check sound).
    sent: Instant,
    /// When the grant was returned: the trusted interval starts here.
    start: Instant,
    /// When the holder stopped trusting it (`end <= start`: never trusted).
    end: Instant,
    stop: Stop,
}

impl Holding {
    fn trusted(&self) -> bool {
        self.end > self.start
    }
}

/// What a store call or a wait came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Xlock,
    Slock,
    Acquire,
    Renew,
    Status,
    Unlock,
    Release,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Xlock => "xlock",
            Op::Slock => "slock",
            Op::Acquire => "acquire (Locker)",
            Op::Renew => "renew",
            Op::Status => "status",
            Op::Unlock => "unlock",
            Op::Release => "release (Locker)",
        }
    }
}

/// The variant of an error, or `Timeout` for the harness's own bound.
fn variant(e: Option<&Error>) -> &'static str {
    match e {
        None => "Timeout",
        Some(Error::InvalidArgument { .. }) => "InvalidArgument",
        Some(Error::AlreadyLocked { .. }) => "AlreadyLocked",
        Some(Error::LockNotFound) => "LockNotFound",
        Some(Error::NotRenewable { .. }) => "NotRenewable",
        Some(Error::Malformed { .. }) => "Malformed",
        Some(Error::Misconfigured { .. }) => "Misconfigured",
        Some(Error::Backend { .. }) => "Backend",
        Some(Error::PurgeIncomplete { .. }) => "PurgeIncomplete",
        Some(_) => "other",
    }
}

/// The error and its sources, on one line.
fn chain(e: &Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let _ = write!(s, ": {cause}");
        source = cause.source();
    }
    s
}

/// Everything the clients report, in plain data.
#[derive(Default)]
struct Observer {
    holdings: Vec<Holding>,
    /// (operation, variant) -> count, for failed calls.
    errors: BTreeMap<(Op, &'static str), u64>,
    /// The first message seen of each (operation, variant).
    first_error: BTreeMap<(Op, &'static str), String>,
    /// Grant requests refused by the rules (`AlreadyLocked`; for the `Locker`, a wait that
    /// ran out).
    refusals: u64,
    /// Grant requests with an unknown outcome (an error other than a refusal), released.
    unknown: u64,
    /// Conclusive probes that found the lock in the store.
    found: u64,
    /// Probes whose answer came too late (or failed), so they say nothing.
    inconclusive: u64,
    /// Lost grants: descriptions.
    lost: Vec<String>,
    /// Renewals by `Client` holders that succeeded.
    renewals: u64,
}

#[derive(Clone)]
struct Shared {
    args: Arc<Args>,
    epoch: Instant,
    obs: Arc<Mutex<Observer>>,
    stop_at: Instant,
}

impl Shared {
    fn obs(&self) -> MutexGuard<'_, Observer> {
        // A poisoned observer still holds good data: a panic elsewhere is reported by join.
        self.obs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    fn error(&self, op: Op, e: Option<&Error>) {
        let v = variant(e);
        let mut obs = self.obs();
        *obs.errors.entry((op, v)).or_default() += 1;
        obs.first_error.entry((op, v)).or_insert_with(|| {
            e.map_or_else(|| "no answer within the harness's bound".to_string(), chain)
        });
    }
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }
}

/// Resources `0..resources` are contended; `resources + id` is client `id`'s own.
fn resource_name(r: usize) -> String {
    format!("failover/{r}")
}

/// A hold time: mostly short, sometimes across several renewals.
fn hold_time(rng: &mut StdRng) -> Duration {
    if rng.random_bool(0.85) {
        Duration::from_millis(rng.random_range(10..150))
    } else {
        Duration::from_millis(rng.random_range(1000..3000))
    }
}

/// Sleeps a random time below `cap` (full jitter).
async fn jitter(rng: &mut StdRng, cap: Duration) {
    let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX).max(2);
    tokio::time::sleep(Duration::from_millis(rng.random_range(1..ms))).await;
}

/// The outcome of a probe of one holding.
enum Probe {
    Found,
    Missing,
    Inconclusive,
}

/// Looks the lock up with `status`; conclusive when the answer arrives before `trust_end`
/// (the store then answered while the lock was live by the holding rule).
async fn probe(
    sh: &Shared,
    client: &Client<MongoStore>,
    lock_id: &LockId,
    resource: usize,
    fence: u64,
    still_trusted: impl Fn() -> bool,
) -> Probe {
    let filter = Filter::new().lock_id(lock_id.as_str());
    match tokio::time::timeout(sh.args.op_timeout(), client.status(&filter)).await {
        Ok(Ok(locks)) => {
            if !still_trusted() {
                return Probe::Inconclusive;
            }
            let name = resource_name(resource);
            if locks
                .iter()
                .any(|l| l.resource.as_str() == name && l.fence == fence)
            {
                Probe::Found
            } else {
                Probe::Missing
            }
        }
        Ok(Err(e)) => {
            sh.error(Op::Status, Some(&e));
            Probe::Inconclusive
        }
        Err(_) => {
            sh.error(Op::Status, None);
            Probe::Inconclusive
        }
    }
}

fn record_probe(sh: &Shared, p: &Probe, what: impl FnOnce() -> String) -> bool {
    let mut obs = sh.obs();
    match p {
        Probe::Found => obs.found += 1,
        Probe::Inconclusive => obs.inconclusive += 1,
        Probe::Missing => {
            obs.lost.push(what());
            return true;
        }
    }
    false
}

/// Unlocks `lock_id`, bounded; errors are counted (the lock then expires by its TTL).
async fn unlock(sh: &Shared, client: &Client<MongoStore>, lock_id: &LockId) {
    match tokio::time::timeout(sh.args.op_timeout(), client.unlock(lock_id)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => sh.error(Op::Unlock, Some(&e)),
        Err(_) => sh.error(Op::Unlock, None),
    }
}

/// A client that calls `xlock`/`slock`, renews by hand, and unlocks.
async fn client_task(id: usize, sh: Shared, client: Client<MongoStore>) {
    let mut rng = StdRng::from_os_rng();
    let args = Arc::clone(&sh.args);
    let (ttl, margin) = (args.ttl(), args.margin());
    let mut backoff = Duration::from_millis(10);
    let mut last_grant = Instant::now();
    while Instant::now() < sh.stop_at {
        let resource = args.pick_resource(id, last_grant, &mut rng);
        let exclusive = rng.random_bool(args.exclusive_share);
        let lock_id = generate_lock_id();
        let details = LockDetails::new().owner(format!("client-{id}")).ttl(ttl);
        let name = resource_name(resource);
        let op = if exclusive { Op::Xlock } else { Op::Slock };
        let sent = Instant::now();
        let call = async {
            if exclusive {
                client.xlock(&name, &lock_id, &details).await
            } else {
                client
                    .slock(&name, &lock_id, &details, Some(args.shared_limit))
                    .await
            }
        };
        let status = match tokio::time::timeout(args.op_timeout(), call).await {
            Ok(Ok(status)) => status,
            Ok(Err(Error::AlreadyLocked { .. })) => {
                sh.obs().refusals += 1;
                jitter(&mut rng, backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
            Ok(Err(e)) => {
                sh.error(op, Some(&e));
                sh.obs().unknown += 1;
                unlock(&sh, &client, &lock_id).await;
                jitter(&mut rng, Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                sh.error(op, None);
                sh.obs().unknown += 1;
                unlock(&sh, &client, &lock_id).await;
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        let start = Instant::now();
        last_grant = start;
        let mut trust_end = if args.break_holding_rule {
            sent + ttl + Duration::from_secs(1)
        } else {
            sent + ttl - margin
        };
        let mut holding = Holding {
            client: id,
            kind: Kind::Client,
            resource,
            exclusive,
            fence: status.fence,
            sent,
            start,
            end: start,
            stop: Stop::NeverTrusted,
        };
        if start >= trust_end {
            sh.obs().holdings.push(holding);
            unlock(&sh, &client, &lock_id).await;
            continue;
        }
        let hold_until = if args.break_holding_rule {
            start + ttl + Duration::from_millis(500)
        } else {
            start + hold_time(&mut rng)
        };
        // One status probe at a random point of the hold; renewals at half the TTL.
        let mut probe_at = Some(start + (hold_until - start).mul_f64(rng.random_range(0.0..1.0)));
        let mut renew_at = (!args.break_holding_rule).then(|| sent + ttl / 2);
        let stop = loop {
            let now = Instant::now();
            if now >= trust_end {
                break Stop::Deadline;
            }
            if now >= hold_until {
                break Stop::Released;
            }
            if probe_at.is_some_and(|t| now >= t) {
                probe_at = None;
                let p = probe(&sh, &client, &lock_id, resource, status.fence, || {
                    Instant::now() < trust_end
                })
                .await;
                let gone = record_probe(&sh, &p, || {
                    format!(
                        "client {id} (Client) fence {} on {name}: status did not list it at {:.3} s \
                         while trusted until {:.3} s",
                        status.fence,
                        sh.secs(Instant::now()),
                        sh.secs(trust_end)
                    )
                });
                if gone {
                    holding.end = Instant::now().min(trust_end);
                    break Stop::Gone;
                }
                continue;
            }
            if renew_at.is_some_and(|t| now >= t) {
                let renew_sent = Instant::now();
                let budget = trust_end.saturating_duration_since(renew_sent);
                match tokio::time::timeout(budget, client.renew(&lock_id, ttl)).await {
                    Ok(Ok(_)) => {
                        sh.obs().renewals += 1;
                        trust_end = trust_end.max(renew_sent + ttl - margin);
                        renew_at = Some(renew_sent + ttl / 2);
                    }
                    Ok(Err(Error::LockNotFound)) => {
                        sh.error(Op::Renew, Some(&Error::LockNotFound));
                        if Instant::now() < trust_end {
                            sh.obs().lost.push(format!(
                                "client {id} (Client) fence {} on {name}: renew said LockNotFound \
                                 at {:.3} s while trusted until {:.3} s",
                                status.fence,
                                sh.secs(Instant::now()),
                                sh.secs(trust_end)
                            ));
                            holding.end = Instant::now();
                            break Stop::Gone;
                        }
                        renew_at = None;
                    }
                    Ok(Err(e)) => {
                        // NotRenewable: the lock is there but within the renew margin; stop
                        // renewing. A backend error: try again shortly.
                        let refused = matches!(e, Error::NotRenewable { .. });
                        sh.error(Op::Renew, Some(&e));
                        renew_at = if refused {
                            None
                        } else {
                            Some(Instant::now() + Duration::from_millis(100))
                        };
                    }
                    Err(_) => {
                        // The budget ran out: the trust deadline has passed.
                        sh.error(Op::Renew, None);
                        renew_at = None;
                    }
                }
                continue;
            }
            let mut next = hold_until.min(trust_end);
            for t in [probe_at, renew_at].into_iter().flatten() {
                next = next.min(t);
            }
            tokio::time::sleep_until(next.into()).await;
        };
        holding.stop = stop;
        holding.end = match stop {
            Stop::Released => Instant::now().min(trust_end),
            Stop::Deadline => trust_end,
            _ => holding.end,
        };
        sh.obs().holdings.push(holding);
        unlock(&sh, &client, &lock_id).await;
    }
}

fn lost_why(e: Ended) -> LostWhy {
    match e {
        Ended::Refused => LostWhy::Refused,
        Ended::Expired => LostWhy::Expired,
        Ended::Cancelled => LostWhy::Cancelled,
        _ => LostWhy::Other,
    }
}

/// A client that goes through a `Locker`: acquire, hold while watching `lost()`, release.
async fn locker_task(id: usize, sh: Shared, locker: Locker<MongoStore>) {
    let mut rng = StdRng::from_os_rng();
    let args = Arc::clone(&sh.args);
    let ttl = args.ttl();
    let mut last_grant = Instant::now();
    while Instant::now() < sh.stop_at {
        let resource = args.pick_resource(id, last_grant, &mut rng);
        let exclusive = rng.random_bool(args.exclusive_share);
        let access = if exclusive {
            Access::Exclusive
        } else {
            Access::Shared(Some(args.shared_limit))
        };
        let name = resource_name(resource);
        let called = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(args.acquire_wait_ms);
        let acquired = tokio::time::timeout(
            args.op_timeout(),
            locker.acquire_until(&name, &LockOptions::new(access, ttl), deadline),
        )
        .await;
        let guard = match acquired {
            Ok(Ok(guard)) => guard,
            Ok(Err(Error::Timeout { .. })) => {
                sh.obs().refusals += 1;
                continue;
            }
            Ok(Err(e)) => {
                // The Locker releases whatever such a request may have been granted.
                sh.error(Op::Acquire, Some(&e));
                sh.obs().unknown += 1;
                jitter(&mut rng, Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                sh.error(Op::Acquire, None);
                sh.obs().unknown += 1;
                continue;
            }
        };
        let start = Instant::now();
        last_grant = start;
        let holding = hold_guard(
            id,
            &sh,
            &mut rng,
            (locker.client(), &guard),
            (resource, exclusive),
            called,
            start,
        )
        .await;
        sh.obs().holdings.push(holding);
        match tokio::time::timeout(args.op_timeout(), guard.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => sh.error(Op::Release, Some(&e)),
            Err(_) => sh.error(Op::Release, None),
        }
    }
    locker.shutdown();
}

/// Holds a `Locker` guard: acts (checks `is_held()`) every 10 ms until the hold time is up
/// or the lock is lost, and probes the store once.
async fn hold_guard(
    id: usize,
    sh: &Shared,
    rng: &mut StdRng,
    (client, guard): (&Client<MongoStore>, &LockGuard<MongoStore>),
    (resource, exclusive): (usize, bool),
    called: Instant,
    start: Instant,
) -> Holding {
    let mut holding = Holding {
        client: id,
        kind: Kind::Locker,
        resource,
        exclusive,
        fence: guard.fence(),
        sent: called,
        start,
        end: start,
        stop: Stop::NeverTrusted,
    };
    if !guard.is_held() {
        return holding;
    }
    let hold_until = start + hold_time(rng);
    let mut probe_at = Some(start + (hold_until - start).mul_f64(rng.random_range(0.0..1.0)));
    // The last instant at which the holder found the lock held: it acts only then.
    let mut last_held = start;
    let tick = Duration::from_millis(10);
    let stop = loop {
        let next = hold_until
            .min(last_held + tick)
            .min(probe_at.unwrap_or(hold_until));
        tokio::select! {
            ended = guard.lost() => {
                break Stop::Lost(Some(lost_why(ended)));
            }
            () = tokio::time::sleep_until(next.into()) => {}
        }
        let now = Instant::now();
        if !guard.is_held() {
            break match guard.ended() {
                Some(e) => Stop::Lost(Some(lost_why(e))),
                None => Stop::Lost(None),
            };
        }
        last_held = now;
        if now >= hold_until {
            break Stop::Released;
        }
        if probe_at.is_some_and(|t| now >= t) {
            probe_at = None;
            let p = probe(sh, client, guard.lock_id(), resource, guard.fence(), || {
                guard.is_held()
            })
            .await;
            let gone = record_probe(sh, &p, || {
                format!(
                    "client {id} (Locker) fence {} on {}: status did not list it at {:.3} s \
                     while is_held() was true",
                    guard.fence(),
                    resource_name(resource),
                    sh.secs(Instant::now()),
                )
            });
            if gone {
                holding.end = last_held;
                holding.stop = Stop::Gone;
                return holding;
            }
            if guard.is_held() {
                last_held = Instant::now();
            }
        }
    };
    // Released: the release is sent right after this check.
    holding.end = if stop == Stop::Released && guard.is_held() {
        Instant::now()
    } else {
        last_held
    };
    holding.stop = stop;
    holding
}

/// How a failover was forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    StepDown,
    Kill,
}

/// One forced failover.
#[derive(Clone, Debug)]
struct Failover {
    n: usize,
    action: Action,
    /// The member that was primary.
    member: Option<usize>,
    /// When the command that forced it returned (the failover had happened by then).
    at: Instant,
    /// How long that command took (it first waits for a healthy set).
    took: Duration,
    /// After a kill: how long the restart took until the set was healthy again.
    restart: Option<Duration>,
    error: Option<String>,
}

/// Runs `scripts/mongod.sh ARGS`; its stdout, trimmed.
async fn run_script(script: &std::path::Path, args: Vec<String>) -> Result<String, String> {
    let script = script.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&script)
            .args(&args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "mongod.sh {} failed ({})",
                args.join(" "),
                out.status
            ))
        }
    })
    .await
    .map_err(|e| format!("the task running mongod.sh failed: {e}"))?
}

/// Forces a failover at each instant of `plan`: step-down, kill + restart, alternately.
async fn failover_task(
    sh: Shared,
    script: PathBuf,
    dir: String,
    plan: Vec<Instant>,
    out: Arc<Mutex<Vec<Failover>>>,
) {
    for (i, when) in plan.into_iter().enumerate() {
        tokio::time::sleep_until(when.into()).await;
        let action = if i % 2 == 0 {
            Action::StepDown
        } else {
            Action::Kill
        };
        let sub = match action {
            Action::StepDown => "step-down",
            Action::Kill => "kill-primary",
        };
        let called = Instant::now();
        let result = run_script(&script, vec![sub.to_string(), dir.clone()]).await;
        let at = Instant::now();
        let mut f = Failover {
            n: i + 1,
            action,
            member: None,
            at,
            took: at - called,
            restart: None,
            error: None,
        };
        match result.and_then(|s| {
            s.parse::<usize>()
                .map_err(|e| format!("mongod.sh {sub} printed {s:?}: {e}"))
        }) {
            Ok(m) => f.member = Some(m),
            Err(e) => f.error = Some(e),
        }
        eprintln!(
            "failover: #{} {} of member {} done at {:.1} s (the command took {:.2} s){}",
            f.n,
            sub,
            f.member.map_or("?".to_string(), |m| m.to_string()),
            sh.secs(at),
            f.took.as_secs_f64(),
            f.error
                .as_ref()
                .map_or(String::new(), |e| format!(": ERROR {e}"))
        );
        if let (Action::Kill, Some(m)) = (action, f.member) {
            let t = Instant::now();
            match run_script(
                &script,
                vec!["restart-member".into(), dir.clone(), m.to_string()],
            )
            .await
            {
                Ok(_) => {
                    f.restart = Some(t.elapsed());
                    eprintln!(
                        "failover: #{} member {m} restarted, set healthy at {:.1} s",
                        f.n,
                        sh.secs(Instant::now())
                    );
                }
                Err(e) => f.error = Some(e),
            }
        }
        out.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(f);
    }
}

/// Prints a line of progress every 5 s until the run ends.
async fn progress(sh: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    while Instant::now() < sh.stop_at {
        tick.tick().await;
        let obs = sh.obs();
        let errors: u64 = obs.errors.values().sum();
        eprintln!(
            "failover: {:5.1} s: {} grants, {} refusals, {} errors, {} lost grants",
            sh.secs(Instant::now()),
            obs.holdings.len(),
            obs.refusals,
            errors,
            obs.lost.len()
        );
    }
}

/// MONGODB_URI with the harness's timeouts, after checking that it names 127.0.0.1 only.
fn harness_uri(uri: &str) -> Result<String, String> {
    let rest = uri.strip_prefix("mongodb://").ok_or(
        "MONGODB_URI must start with mongodb:// and name 127.0.0.1 (this harness kills servers)",
    )?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let hosts = &rest[..end];
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    for h in hosts.split(',') {
        let host = h.rsplit_once(':').map_or(h, |(host, _)| host);
        if host != "127.0.0.1" {
            return Err(format!(
                "MONGODB_URI names {h}: this harness kills and restarts servers, so it runs \
                 against 127.0.0.1 only"
            ));
        }
    }
    let tail = &rest[end..];
    let mut sep = if tail.contains('?') {
        if tail.ends_with(['?', '&']) { "" } else { "&" }
    } else if tail.is_empty() {
        "/?"
    } else {
        "?"
    };
    let mut out = uri.to_string();
    let lower = uri.to_ascii_lowercase();
    for (key, value) in [
        ("serverSelectionTimeoutMS", "5000"),
        ("connectTimeoutMS", "2000"),
    ] {
        if !lower.contains(&key.to_ascii_lowercase()) {
            let _ = write!(out, "{sep}{key}={value}");
            sep = "&";
        }
    }
    Ok(out)
}

/// The renew margin of every client: below half the TTL, so that the `Locker`'s renewals (at
/// half the TTL) are allowed.
const RENEW_MARGIN: Duration = Duration::from_millis(200);

/// Locker counters, added up over every `Locker`.
#[derive(Default)]
struct LockerTotals {
    renewals: u64,
    renew_failures: u64,
    lost: u64,
}

/// Panics anywhere in the process (the `Locker`'s own renewal tasks included).
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn main() -> ExitCode {
    let args = Args::parse();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        default_hook(info);
    }));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("failover: cannot start the tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("failover: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn check_args(args: &Args) -> Result<(), String> {
    if args.clients < 2 {
        return Err("--clients must be at least 2 (half Locker, half Client)".into());
    }
    if args.resources == 0 || args.shared_limit == 0 || args.every == 0 || args.seconds == 0 {
        return Err("--resources, --shared-limit, --every and --seconds must be positive".into());
    }
    if !(0.0..=1.0).contains(&args.exclusive_share) {
        return Err("--exclusive-share must be between 0 and 1".into());
    }
    if args.ttl() <= args.margin() || args.ttl() / 2 <= RENEW_MARGIN {
        return Err(format!(
            "--ttl-ms must be above --drift-margin-ms and above {} ms (twice the renew margin)",
            RENEW_MARGIN.as_millis() * 2
        ));
    }
    Ok(())
}

async fn connect(uri: &str, args: &Args, collection: &str) -> Result<Client<MongoStore>, String> {
    let store = MongoStore::connect(uri, &args.database, collection)
        .await
        .map_err(|e| chain(&e))?;
    Client::with_renew_margin(store, RENEW_MARGIN).map_err(|e| chain(&e))
}

#[allow(clippy::too_many_lines)]
async fn run(args: Args) -> Result<bool, String> {
    check_args(&args)?;
    let uri = std::env::var("MONGODB_URI").map_err(|_| {
        "MONGODB_URI is not set: run under `scripts/mongod.sh run --members 3 -- ...`".to_string()
    })?;
    let uri = harness_uri(&uri)?;
    let dir = if args.no_failover {
        String::new()
    } else {
        let dir = std::env::var("LOCKWRIGHT_REPLSET_DIR").map_err(|_| {
            "LOCKWRIGHT_REPLSET_DIR is not set: run under `scripts/mongod.sh run --members 3 -- ...` \
             (or pass --no-failover)"
                .to_string()
        })?;
        if !std::path::Path::new(&dir).join("state.env").is_file() {
            return Err(format!("LOCKWRIGHT_REPLSET_DIR={dir} has no state.env"));
        }
        dir
    };
    let script = std::env::var_os("LOCKWRIGHT_MONGOD_SH").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mongod.sh")),
        PathBuf::from,
    );
    let offsets: Vec<u64> = if args.no_failover {
        Vec::new()
    } else {
        (1..)
            .map(|k| k * args.every)
            .take_while(|t| t + args.every <= args.seconds)
            .collect()
    };
    if !args.no_failover && offsets.is_empty() {
        return Err("--seconds must be at least twice --every, for one failover".into());
    }

    let collection = format!("run_{:016x}", rand::random::<u64>());
    let setup = connect(&uri, &args, &collection).await?;
    let t = Instant::now();
    loop {
        match setup.create_indexes().await {
            Ok(()) => break,
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                eprintln!("failover: create_indexes: {} (retrying)", chain(&e));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(format!("create_indexes: {}", chain(&e))),
        }
    }
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(connect(&uri, &args, &collection).await?);
    }
    let mut locker_config = LockerConfig::default();
    locker_config.drift_margin = args.margin();

    let args = Arc::new(args);
    let epoch = Instant::now();
    let sh = Shared {
        args: Arc::clone(&args),
        epoch,
        obs: Arc::new(Mutex::new(Observer::default())),
        stop_at: epoch + Duration::from_secs(args.seconds),
    };
    eprintln!(
        "failover: {} clients ({} Locker, {} Client) on {} resources, TTL {} ms, {} s, failovers at {:?} s; collection {}.{}",
        args.clients,
        args.clients.div_ceil(2),
        args.clients / 2,
        args.resources,
        args.ttl_ms,
        args.seconds,
        offsets,
        args.database,
        collection
    );

    let totals = Arc::new(Mutex::new(LockerTotals::default()));
    let mut tasks: Vec<(String, tokio::task::JoinHandle<()>)> = Vec::new();
    for (id, client) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        if id % 2 == 0 {
            let locker = Locker::new(client, locker_config.clone()).map_err(|e| chain(&e))?;
            let totals = Arc::clone(&totals);
            tasks.push((
                format!("client {id} (Locker)"),
                tokio::spawn(async move {
                    locker_task(id, sh, locker.clone()).await;
                    let s = locker.stats();
                    let mut t = totals
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    t.renewals += s.renewals;
                    t.renew_failures += s.renew_failures;
                    t.lost += s.lost;
                }),
            ));
        } else {
            tasks.push((
                format!("client {id} (Client)"),
                tokio::spawn(client_task(id, sh, client)),
            ));
        }
    }
    let failovers = Arc::new(Mutex::new(Vec::new()));
    let plan: Vec<Instant> = offsets
        .iter()
        .map(|s| epoch + Duration::from_secs(*s))
        .collect();
    if !plan.is_empty() {
        tasks.push((
            "failover".into(),
            tokio::spawn(failover_task(
                sh.clone(),
                script,
                dir,
                plan,
                Arc::clone(&failovers),
            )),
        ));
    }
    let reporter = tokio::spawn(progress(sh.clone()));

    let join_deadline = sh.stop_at + Duration::from_secs(args.join_timeout);
    let (mut panics, mut hangs) = (Vec::new(), Vec::new());
    for (name, handle) in tasks {
        let abort = handle.abort_handle();
        match tokio::time::timeout_at(join_deadline.into(), handle).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_panic() => panics.push(name),
            Ok(Err(e)) => panics.push(format!("{name}: {e}")),
            Err(_) => {
                abort.abort();
                hangs.push(name);
            }
        }
    }
    reporter.abort();
    let hooked = PANICS.load(std::sync::atomic::Ordering::SeqCst);
    if hooked > panics.len() {
        panics.push(format!(
            "{} panic(s) outside the joined tasks (e.g. a Locker's renewal task): see stderr",
            hooked - panics.len()
        ));
    }
    let _ = setup.store().collection().drop().await;

    let obs = std::mem::take(&mut *sh.obs());
    let failovers = std::mem::take(
        &mut *failovers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let totals = std::mem::take(
        &mut *totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let report = Report {
        args: &args,
        epoch,
        obs: &obs,
        failovers: &failovers,
        planned: offsets.len(),
        totals: &totals,
        panics: &panics,
        hangs: &hangs,
    };
    Ok(report.print())
}

/// The checks over what was observed, and the tables.
struct Report<'a> {
    args: &'a Args,
    epoch: Instant,
    obs: &'a Observer,
    failovers: &'a [Failover],
    planned: usize,
    totals: &'a LockerTotals,
    panics: &'a [String],
    hangs: &'a [String],
}

/// How the clients came back after one failover.
#[derive(Clone, Copy, Default)]
struct Recovery {
    /// From the failover to the first grant of any client.
    first: Option<Duration>,
    /// From the failover until every client had made a grant (`None` if some client did not
    /// before the next failover).
    all: Option<Duration>,
    /// Clients with no grant between this failover and the next.
    late: usize,
}

/// Violations of one check: how many, and the first few, described.
#[derive(Default)]
struct Found {
    count: usize,
    examples: Vec<String>,
}

impl Found {
    fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < 10 {
            self.examples.push(what());
        }
    }
}

impl Report<'_> {
    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    fn describe(&self, h: &Holding) -> String {
        format!(
            "client {} ({:?}) {} fence {} trusted {:.3}..{:.3} s (sent {:.3} s, {})",
            h.client,
            h.kind,
            if h.exclusive { "exclusive" } else { "shared" },
            h.fence,
            self.secs(h.start),
            self.secs(h.end),
            self.secs(h.sent),
            h.stop.name()
        )
    }

    fn by_resource(&self) -> BTreeMap<usize, Vec<&Holding>> {
        let mut map: BTreeMap<usize, Vec<&Holding>> = BTreeMap::new();
        for h in &self.obs.holdings {
            map.entry(h.resource).or_default().push(h);
        }
        map
    }

    /// Exclusive intervals overlapping anything, and shared ones above the limit.
    fn overlaps(&self) -> Found {
        let mut found = Found::default();
        for (r, holdings) in self.by_resource() {
            let mut events: Vec<(Instant, bool, usize)> = Vec::new();
            for (i, h) in holdings.iter().enumerate() {
                if h.trusted() {
                    events.push((h.start, true, i));
                    events.push((h.end, false, i));
                }
            }
            // At one instant, ends before starts: touching intervals do not overlap.
            events.sort_by_key(|&(t, start, i)| (t, start, i));
            let mut active: Vec<usize> = Vec::new();
            for (_, start, i) in events {
                if !start {
                    active.retain(|&a| a != i);
                    continue;
                }
                let b = holdings[i];
                let conflict = active
                    .iter()
                    .find(|&&a| b.exclusive || holdings[a].exclusive);
                let shared = active.iter().filter(|&&a| !holdings[a].exclusive).count();
                if let Some(&a) = conflict {
                    found.add(|| {
                        format!(
                            "{}: {} overlaps {}",
                            resource_name(r),
                            self.describe(b),
                            self.describe(holdings[a])
                        )
                    });
                } else if !b.exclusive && shared + 1 > self.args.shared_limit as usize {
                    found.add(|| {
                        format!(
                            "{}: {} is shared holder {} (limit {})",
                            resource_name(r),
                            self.describe(b),
                            shared + 1,
                            self.args.shared_limit
                        )
                    });
                }
                active.push(i);
            }
        }
        found
    }

    /// Grants whose fence is out of order: a duplicate; not above a grant returned before
    /// it was sent; or not above an earlier-starting grant when one of the two is exclusive
    /// and it was trusted at all.
    fn fence_regressions(&self) -> Found {
        let mut found = Found::default();
        for (r, holdings) in self.by_resource() {
            let mut bad: BTreeMap<usize, String> = BTreeMap::new();
            let mut seen: HashMap<u64, usize> = HashMap::new();
            for (i, h) in holdings.iter().enumerate() {
                if let Some(&j) = seen.get(&h.fence) {
                    bad.entry(i).or_insert_with(|| {
                        format!("the same fence as {}", self.describe(holdings[j]))
                    });
                } else {
                    seen.insert(h.fence, i);
                }
            }
            // Real-time order: A returned before B was sent => A.fence < B.fence.
            let mut by_start: Vec<usize> = (0..holdings.len()).collect();
            by_start.sort_by_key(|&i| holdings[i].start);
            let mut by_sent: Vec<usize> = (0..holdings.len()).collect();
            by_sent.sort_by_key(|&i| holdings[i].sent);
            let (mut j, mut max): (usize, Option<usize>) = (0, None);
            for &b in &by_sent {
                while j < by_start.len() && holdings[by_start[j]].start < holdings[b].sent {
                    let a = by_start[j];
                    if max.is_none_or(|m| holdings[a].fence > holdings[m].fence) {
                        max = Some(a);
                    }
                    j += 1;
                }
                if let Some(a) = max.filter(|&a| holdings[a].fence >= holdings[b].fence) {
                    bad.entry(b).or_insert_with(|| {
                        format!(
                            "not above {}, returned before it was sent",
                            self.describe(holdings[a])
                        )
                    });
                }
            }
            // Trusted-interval order where one of the two is exclusive.
            let (mut max_all, mut max_excl): (Option<usize>, Option<usize>) = (None, None);
            for &b in &by_start {
                let hb = holdings[b];
                let bound = if hb.exclusive { max_all } else { max_excl };
                if hb.trusted()
                    && let Some(a) = bound.filter(|&a| holdings[a].fence >= hb.fence)
                {
                    bad.entry(b).or_insert_with(|| {
                        format!(
                            "not above {}, which started first",
                            self.describe(holdings[a])
                        )
                    });
                }
                if max_all.is_none_or(|m| hb.fence > holdings[m].fence) {
                    max_all = Some(b);
                }
                if hb.exclusive && max_excl.is_none_or(|m| hb.fence > holdings[m].fence) {
                    max_excl = Some(b);
                }
            }
            for (b, why) in bad {
                found.add(|| {
                    format!(
                        "{}: {} is {why}",
                        resource_name(r),
                        self.describe(holdings[b])
                    )
                });
            }
        }
        found
    }

    /// For each failover that happened, how the clients recovered; and the clients that
    /// made no grant after the last one.
    fn recovery(&self) -> (Vec<Recovery>, Vec<usize>) {
        let mut starts: Vec<Vec<Instant>> = vec![Vec::new(); self.args.clients];
        for h in &self.obs.holdings {
            starts[h.client].push(h.start);
        }
        for s in &mut starts {
            s.sort();
        }
        let ok: Vec<&Failover> = self
            .failovers
            .iter()
            .filter(|f| f.member.is_some())
            .collect();
        let mut rows = Vec::new();
        for (k, f) in ok.iter().enumerate() {
            let next = ok.get(k + 1).map(|n| n.at);
            let firsts: Vec<Option<Instant>> = starts
                .iter()
                .map(|s| s.iter().copied().find(|&t| t > f.at))
                .collect();
            let first_any = firsts.iter().flatten().min().map(|t| *t - f.at);
            let late = firsts
                .iter()
                .filter(|t| match (t, next) {
                    (None, _) => true,
                    (Some(t), Some(n)) => *t >= n,
                    (Some(_), None) => false,
                })
                .count();
            let all = if late == 0 {
                firsts.iter().flatten().max().map(|t| *t - f.at)
            } else {
                None
            };
            rows.push(Recovery {
                first: first_any,
                all,
                late,
            });
        }
        let never: Vec<usize> = match ok.last() {
            Some(f) => (0..self.args.clients)
                .filter(|&c| !starts[c].iter().any(|&t| t > f.at))
                .collect(),
            None => (0..self.args.clients)
                .filter(|&c| starts[c].is_empty())
                .collect(),
        };
        (rows, never)
    }

    /// Prints the tables; whether every check passed.
    #[allow(clippy::too_many_lines)]
    fn print(&self) -> bool {
        let obs = self.obs;
        let overlaps = self.overlaps();
        let fences = self.fence_regressions();
        let (recovery, never) = self.recovery();
        let failed_failovers = self.failovers.iter().filter(|f| f.error.is_some()).count()
            + self.planned.saturating_sub(self.failovers.len());
        let count = |kind: Kind, exclusive: Option<bool>| {
            obs.holdings
                .iter()
                .filter(|h| h.kind == kind && exclusive.is_none_or(|e| h.exclusive == e))
                .count()
        };
        let grants = obs.holdings.len();
        let exclusive = obs.holdings.iter().filter(|h| h.exclusive).count();
        let passed = overlaps.count == 0
            && fences.count == 0
            && obs.lost.is_empty()
            && never.is_empty()
            && self.panics.is_empty()
            && self.hangs.is_empty()
            && failed_failovers == 0
            && grants > 0;
        let mark = |n: usize| {
            if n == 0 {
                "0".to_string()
            } else {
                format!("**{n}**")
            }
        };

        let a = self.args;
        println!();
        println!(
            "{} clients ({} Locker, {} Client), {} resources, TTL {} ms, drift margin {} ms, shared limit {}, {} s, {}{}",
            a.clients,
            a.clients.div_ceil(2),
            a.clients / 2,
            a.resources,
            a.ttl_ms,
            a.drift_margin_ms,
            a.shared_limit,
            a.seconds,
            if a.no_failover {
                "no failover".to_string()
            } else {
                format!("a failover every {} s", a.every)
            },
            if a.break_holding_rule {
                " (--break-holding-rule: Client holders break the holding rule on purpose)"
            } else {
                ""
            }
        );
        println!();
        println!("| measure | Locker | Client | total |");
        println!("|---|---|---|---|");
        println!(
            "| grants (exclusive / shared) | {} ({} / {}) | {} ({} / {}) | {grants} ({exclusive} / {}) |",
            count(Kind::Locker, None),
            count(Kind::Locker, Some(true)),
            count(Kind::Locker, Some(false)),
            count(Kind::Client, None),
            count(Kind::Client, Some(true)),
            count(Kind::Client, Some(false)),
            grants - exclusive
        );
        let own = |kind: Kind| {
            obs.holdings
                .iter()
                .filter(|h| h.kind == kind && h.resource >= a.resources)
                .count()
        };
        println!(
            "| of which on the client's own resource (after {} ms without a grant) | {} | {} | {} |",
            a.starve_ms,
            own(Kind::Locker),
            own(Kind::Client),
            own(Kind::Locker) + own(Kind::Client)
        );
        let mut stops: BTreeMap<Stop, (usize, usize)> = BTreeMap::new();
        for h in &obs.holdings {
            let e = stops.entry(h.stop).or_default();
            match h.kind {
                Kind::Locker => e.0 += 1,
                Kind::Client => e.1 += 1,
            }
        }
        for (stop, (l, c)) in &stops {
            println!(
                "| holdings ended: {} | {l} | {c} | {} |",
                stop.name(),
                l + c
            );
        }
        println!(
            "| renewals (the Locker's: ok / failed attempts / locks lost) | {} / {} / {} | {} | |",
            self.totals.renewals, self.totals.renew_failures, self.totals.lost, obs.renewals
        );
        println!("| refusals | | | {} |", obs.refusals);
        println!(
            "| grant errors, outcome unknown (released, not counted as grants) | | | {} |",
            obs.unknown
        );
        println!(
            "| probes of held locks: found / inconclusive | | | {} / {} |",
            obs.found, obs.inconclusive
        );
        println!("| overlaps | | | {} |", mark(overlaps.count));
        println!("| fence regressions | | | {} |", mark(fences.count));
        println!("| lost grants | | | {} |", mark(obs.lost.len()));
        println!(
            "| clients that never recovered | | | {} |",
            mark(never.len())
        );
        println!(
            "| panics / hangs | | | {} / {} |",
            mark(self.panics.len()),
            mark(self.hangs.len())
        );
        println!(
            "| failovers done / failed | | | {} / {} |",
            self.failovers.len() - self.failovers.iter().filter(|f| f.error.is_some()).count(),
            mark(failed_failovers)
        );
        println!(
            "| **result** | | | {} |",
            if passed { "PASS" } else { "**FAIL**" }
        );

        let mut variants: Vec<&'static str> =
            vec!["Backend", "Malformed", "Misconfigured", "Timeout"];
        for (_, v) in obs.errors.keys() {
            if !variants.contains(v) {
                variants.push(v);
            }
        }
        println!();
        println!("| errors by variant | {} |", variants.join(" | "));
        println!("|---|{}", "---|".repeat(variants.len()));
        let ops: Vec<Op> = {
            let mut ops: Vec<Op> = obs.errors.keys().map(|(op, _)| *op).collect();
            ops.dedup();
            ops
        };
        if ops.is_empty() {
            println!("| (none) |{}", " 0 |".repeat(variants.len()));
        }
        for op in ops {
            let cells: Vec<String> = variants
                .iter()
                .map(|v| obs.errors.get(&(op, v)).copied().unwrap_or(0).to_string())
                .collect();
            println!("| {} | {} |", op.name(), cells.join(" | "));
        }

        println!();
        println!(
            "| failover | at | action | primary was | command took | first grant after | every client granted again after | clients not back before the next | member restarted in |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        if self.failovers.is_empty() {
            println!("| (none) | | | | | | | | |");
        }
        let mut rows = recovery.iter();
        for f in self.failovers {
            let fmt =
                |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()));
            let Recovery { first, all, late } = if f.member.is_some() {
                rows.next().copied().unwrap_or_default()
            } else {
                Recovery::default()
            };
            println!(
                "| {} | {:.1} s | {} | {} | {:.2} s | {} | {} | {} | {} |",
                f.n,
                self.secs(f.at),
                match f.action {
                    Action::StepDown => "replSetStepDown",
                    Action::Kill => "SIGKILL + restart",
                },
                f.member.map_or("?".into(), |m| format!("member {m}")),
                f.took.as_secs_f64(),
                fmt(first),
                fmt(all),
                late,
                match (&f.error, f.restart) {
                    (Some(e), _) => format!("FAILED: {e}"),
                    (None, Some(d)) => format!("{:.2} s", d.as_secs_f64()),
                    (None, None) => "-".into(),
                }
            );
        }

        let section = |title: &str, items: &[String]| {
            if !items.is_empty() {
                println!();
                println!("{title}:");
                for i in items.iter().take(10) {
                    println!("  - {i}");
                }
                if items.len() > 10 {
                    println!("  - ... and {} more", items.len() - 10);
                }
            }
        };
        section("overlaps", &overlaps.examples);
        section("fence regressions", &fences.examples);
        section("lost grants", &obs.lost);
        section(
            "clients that made no grant after the last failover",
            &never
                .iter()
                .map(|c| format!("client {c}"))
                .collect::<Vec<_>>(),
        );
        section("panicked tasks", self.panics);
        section("hung tasks (aborted)", self.hangs);
        section(
            "failed failovers",
            &self
                .failovers
                .iter()
                .filter_map(|f| f.error.clone())
                .collect::<Vec<_>>(),
        );
        let firsts: Vec<String> = obs
            .first_error
            .iter()
            .map(|((op, v), m)| format!("{} {v}: {m}", op.name()))
            .collect();
        if !firsts.is_empty() {
            println!();
            println!("first error of each kind:");
            for f in firsts {
                println!("  - {f}");
            }
        }
        passed
    }
}
