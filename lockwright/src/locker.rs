//! The lock runtime: waiting acquire, automatic renewal by one task, the lost-lock signal.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use lockwright_engine::lease::{LeaseConfig, LeaseEvent, LeaseKey, LeaseSchedule, LostCause};
use lockwright_engine::{Error, LockDetails, LockId, LockStatus, LockStore, Ttl};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::{Client, generate_lock_id};

/// What to lock: one holder, or one of at most `limit` holders (`None`: no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// An exclusive lock.
    Exclusive,
    /// A shared lock with an optional limit.
    Shared(Option<u32>),
}

/// How a held lock ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Ended {
    /// The holder released it (or dropped its guard).
    Released,
    /// The store refused a renewal: the lock expired, was purged or taken over.
    Refused,
    /// Its validity ran out before a renewal succeeded: the store was slow or unreachable.
    Expired,
    /// The locker shut down.
    Cancelled,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ended::Released => "released",
            Ended::Refused => "lost: the store refused the renewal",
            Ended::Expired => "lost: validity ran out before a renewal succeeded",
            Ended::Cancelled => "cancelled: the locker shut down",
        })
    }
}

/// Counters for health checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockerStats {
    /// Locks held now.
    pub held: u64,
    /// Successful renewals.
    pub renewals: u64,
    /// Failed renewal attempts (transient errors and refusals).
    pub renew_failures: u64,
    /// Locks lost (refused or expired).
    pub lost: u64,
}

/// How a [`Locker`] behaves. Start from [`LockerConfig::default`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LockerConfig {
    /// Renew when this fraction of the TTL has passed since the last request was sent.
    pub renew_fraction: f64,
    /// How much earlier than `sent + ttl` a lock stops being trusted, to cover the local
    /// clock running slower than the store's. Must be shorter than every TTL used.
    pub drift_margin: Duration,
    /// Attempts per renewal before the lock is given up.
    pub max_renew_attempts: u32,
    /// The wait between attempts of one renewal.
    pub renew_retry: Duration,
    /// The first wait between attempts of `acquire`; it doubles up to `max_backoff`, with
    /// full jitter.
    pub initial_backoff: Duration,
    /// The longest wait between attempts of `acquire`.
    pub max_backoff: Duration,
    /// How long a release may take before it gives up (the lock then expires by its TTL).
    pub release_timeout: Duration,
}

impl Default for LockerConfig {
    fn default() -> Self {
        LockerConfig {
            renew_fraction: 0.5,
            drift_margin: Duration::from_millis(100),
            max_renew_attempts: 3,
            renew_retry: Duration::from_millis(100),
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_secs(1),
            release_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Default)]
struct Counters {
    held: AtomicU64,
    renewals: AtomicU64,
    renew_failures: AtomicU64,
    lost: AtomicU64,
}

/// What a guard sees of its lease: how it ended, if it has, and the local instant (ms since
/// the locker started) until which the lock may be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseView {
    ended: Option<Ended>,
    trust_until: u64,
}

type Signal = watch::Sender<LeaseView>;

enum Command {
    Track {
        key: LeaseKey,
        lock_id: LockId,
        ttl: Ttl,
        sent: u64,
        signal: Signal,
    },
    Untrack {
        key: LeaseKey,
    },
}

struct Shared<S> {
    client: Client<S>,
    config: LockerConfig,
    lease_config: LeaseConfig,
    epoch: Instant,
    counters: Counters,
    next_key: AtomicU64,
    stop: tokio_util::sync::CancellationToken,
}

impl<S> Shared<S> {
    /// Local monotonic time in ms since the locker started.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Acquires locks, renews them all from one background task, and tells holders when a lock
/// is lost. Cloning shares the locker.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockwright::Error> {
/// use std::time::Duration;
/// use lockwright::{Access, Client, Locker, LockerConfig, MemStore};
///
/// let locker = Locker::new(Client::new(MemStore::new()), LockerConfig::default())?;
/// let guard = locker.acquire("nightly-report", Access::Exclusive, Duration::from_secs(10)).await?;
/// tokio::select! {
///     ended = guard.lost() => eprintln!("stop working: {ended}"),
///     () = async { /* the work, writing with guard.fence() */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct Locker<S> {
    shared: Arc<Shared<S>>,
    /// The renewal task's inbox. Only handles and guards hold a sender (the task holds
    /// `shared`, not this), so the task ends when the last of them is gone.
    commands: mpsc::UnboundedSender<Command>,
}

impl<S> Clone for Locker<S> {
    fn clone(&self) -> Self {
        Locker {
            shared: Arc::clone(&self.shared),
            commands: self.commands.clone(),
        }
    }
}

impl<S> fmt::Debug for Locker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S: LockStore> Locker<S> {
    /// A locker on `client`, with its renewal task spawned on the current tokio runtime.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad configuration (`renew_fraction` outside (0, 1), zero
    /// `max_renew_attempts`, zero `renew_retry`, `initial_backoff` or `release_timeout`, or
    /// `max_backoff` below `initial_backoff`).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(client: Client<S>, config: LockerConfig) -> Result<Self, Error> {
        let lease_config = LeaseConfig::new(
            config.renew_fraction,
            config.drift_margin,
            config.max_renew_attempts,
            config.renew_retry,
        )?;
        if config.initial_backoff.is_zero() {
            return Err(Error::invalid(
                "initial_backoff",
                "must be greater than zero",
            ));
        }
        if config.max_backoff < config.initial_backoff {
            return Err(Error::invalid(
                "max_backoff",
                "must be at least initial_backoff",
            ));
        }
        if config.release_timeout.is_zero() {
            return Err(Error::invalid(
                "release_timeout",
                "must be greater than zero",
            ));
        }
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            client,
            config,
            lease_config,
            epoch: Instant::now(),
            counters: Counters::default(),
            next_key: AtomicU64::new(1),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        tokio::spawn(renewer(Arc::clone(&shared), rx));
        Ok(Locker { shared, commands })
    }

    /// The client underneath.
    pub fn client(&self) -> &Client<S> {
        &self.shared.client
    }

    /// The counters.
    pub fn stats(&self) -> LockerStats {
        let c = &self.shared.counters;
        LockerStats {
            held: c.held.load(Ordering::Relaxed),
            renewals: c.renewals.load(Ordering::Relaxed),
            renew_failures: c.renew_failures.load(Ordering::Relaxed),
            lost: c.lost.load(Ordering::Relaxed),
        }
    }

    /// Stops renewing: every held lock ends with [`Ended::Cancelled`] (its lease then runs
    /// out in the store). Locks are not released; release them first to free them at once.
    pub fn shutdown(&self) {
        self.shared.stop.cancel();
    }

    /// Tries once to take the lock, without waiting.
    ///
    /// # Errors
    /// `AlreadyLocked` when it is held; `InvalidArgument` for bad arguments (including a TTL
    /// not longer than the drift margin); backend errors.
    pub async fn try_acquire(
        &self,
        resource: &str,
        access: Access,
        ttl: Duration,
    ) -> Result<LockGuard<S>, Error> {
        match self.attempt(resource, access, ttl).await? {
            Attempt::Held(guard) => Ok(*guard),
            Attempt::Stale => Err(Error::backend(
                "acquire",
                "the grant arrived after the lock stopped being trusted (the store took longer \
                 than the TTL minus the drift margin); it was released",
            )),
        }
    }

    /// One request for the lock. A grant whose reply arrives after its trust deadline is
    /// released and reported as stale: a guard is never handed out already untrusted.
    async fn attempt(
        &self,
        resource: &str,
        access: Access,
        ttl: Duration,
    ) -> Result<Attempt<S>, Error> {
        let ttl = Ttl::new(ttl)?;
        let config = &self.shared.config;
        if lockwright_engine::holder::trust_until(0, ttl, config.drift_margin).is_none() {
            return Err(Error::invalid(
                "ttl",
                "must be longer than the locker's drift margin",
            ));
        }
        let left_at_renewal = ttl.as_duration().mul_f64(1.0 - config.renew_fraction);
        if left_at_renewal <= self.shared.client.renew_margin() {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "leaves {left_at_renewal:?} at the renewal point, not more than the client's \
                     renew margin ({:?}), so every renewal would be refused: use a longer TTL \
                     or a client with a smaller margin",
                    self.shared.client.renew_margin()
                ),
            ));
        }
        if self.shared.stop.is_cancelled() {
            return Err(Error::invalid("locker", "has been shut down"));
        }
        let lock_id = generate_lock_id();
        // Armed until the guard exists: if this future is dropped mid-request, whatever the
        // store granted is released in the background.
        let mut pending = PendingRelease::new(self.clone(), lock_id.clone());
        let details = LockDetails::new().ttl(ttl.as_duration());
        let sent = self.shared.now();
        let status = match access {
            Access::Exclusive => self.shared.client.xlock(resource, &lock_id, &details).await,
            Access::Shared(limit) => {
                self.shared
                    .client
                    .slock(resource, &lock_id, &details, limit)
                    .await
            }
        };
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                // Refused or failed: with a transport error the grant may still have happened.
                if !matches!(
                    e,
                    Error::AlreadyLocked { .. } | Error::InvalidArgument { .. }
                ) {
                    pending.release_now();
                }
                pending.disarm();
                return Err(e);
            }
        };
        let key = self.shared.next_key.fetch_add(1, Ordering::Relaxed);
        // Checked above: the TTL is longer than the drift margin.
        let trust_until =
            lockwright_engine::holder::trust_until(sent, ttl, self.shared.config.drift_margin)
                .unwrap_or(sent);
        if self.shared.now() >= trust_until {
            tracing::debug!("grant arrived after its trust deadline; releasing it");
            pending.release_now();
            pending.disarm();
            return Ok(Attempt::Stale);
        }
        let (signal, view) = watch::channel(LeaseView {
            ended: None,
            trust_until,
        });
        self.shared.counters.held.fetch_add(1, Ordering::Relaxed);
        let tracked = self.commands.send(Command::Track {
            key,
            lock_id: lock_id.clone(),
            ttl,
            sent,
            signal,
        });
        if tracked.is_err() {
            self.shared.counters.held.fetch_sub(1, Ordering::Relaxed);
            pending.release_now();
            pending.disarm();
            return Err(Error::invalid("locker", "has been shut down"));
        }
        pending.disarm();
        // Never the lock id: it is the holder's secret. The resource is logged escaped.
        tracing::debug!(
            lease = key,
            resource = ?status.resource.as_str(),
            mode = ?status.mode,
            fence = status.fence,
            "lock acquired"
        );
        Ok(Attempt::Held(Box::new(LockGuard {
            locker: self.clone(),
            key,
            status,
            view,
            released: AtomicBool::new(false),
        })))
    }

    /// Takes the lock, waiting with jittered exponential backoff while it is held by others.
    /// Cancel-safe: dropping the future leaves no lock behind. Bound the wait with
    /// `tokio::time::timeout` or [`Locker::acquire_until`].
    ///
    /// # Errors
    /// As [`Locker::try_acquire`], except that `AlreadyLocked` is waited out.
    pub async fn acquire(
        &self,
        resource: &str,
        access: Access,
        ttl: Duration,
    ) -> Result<LockGuard<S>, Error> {
        let mut backoff = self.shared.config.initial_backoff;
        loop {
            match self.attempt(resource, access, ttl).await {
                Ok(Attempt::Held(guard)) => return Ok(*guard),
                // Held by others, or granted too late to trust: wait and ask again.
                Ok(Attempt::Stale) | Err(Error::AlreadyLocked { .. }) => {
                    let jittered = backoff.mul_f64(rand::random::<f64>());
                    tokio::time::sleep(jittered.max(Duration::from_millis(1))).await;
                    backoff = (backoff * 2).min(self.shared.config.max_backoff);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// As [`Locker::acquire`], giving up with `AlreadyLocked` at `deadline`.
    ///
    /// # Errors
    /// As [`Locker::acquire`], and `AlreadyLocked` when the deadline passes.
    pub async fn acquire_until(
        &self,
        resource: &str,
        access: Access,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<LockGuard<S>, Error> {
        match tokio::time::timeout_at(deadline, self.acquire(resource, access, ttl)).await {
            Ok(result) => result,
            Err(_) => Err(Error::AlreadyLocked {
                resource: lockwright_engine::Resource::new(resource)?,
            }),
        }
    }

    async fn unlock_bounded(&self, lock_id: &LockId) -> Result<(), Error> {
        match tokio::time::timeout(
            self.shared.config.release_timeout,
            self.shared.client.unlock(lock_id),
        )
        .await
        {
            Ok(result) => result.map(|_| ()),
            Err(elapsed) => Err(Error::backend("release", elapsed)),
        }
    }
}

/// The outcome of one request for a lock that was not an error.
enum Attempt<S: LockStore> {
    /// Granted in time: the guard (boxed: the other variant is empty).
    Held(Box<LockGuard<S>>),
    /// Granted, but the reply came after the lock stopped being trusted; released.
    Stale,
}

/// Releases a lock id in the background when dropped while armed.
struct PendingRelease<S: LockStore> {
    locker: Locker<S>,
    lock_id: LockId,
    armed: bool,
}

impl<S: LockStore> PendingRelease<S> {
    fn new(locker: Locker<S>, lock_id: LockId) -> Self {
        PendingRelease {
            locker,
            lock_id,
            armed: true,
        }
    }
    fn disarm(&mut self) {
        self.armed = false;
    }
    fn release_now(&self) {
        release_in_background(self.locker.clone(), self.lock_id.clone());
    }
}

impl<S: LockStore> Drop for PendingRelease<S> {
    fn drop(&mut self) {
        if self.armed {
            self.release_now();
        }
    }
}

fn release_in_background<S: LockStore>(locker: Locker<S>, lock_id: LockId) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            if let Err(e) = locker.unlock_bounded(&lock_id).await {
                tracing::warn!(error = %crate::purger::error_chain(&e), "background release failed; the lock will expire by its TTL");
            }
        });
    }
}

/// A held lock. Renewed in the background until released, dropped or lost.
///
/// Hand [`LockGuard::fence`] to downstream systems with every write; await
/// [`LockGuard::lost`] (or `select!` on it) to stop working when the lock is lost.
pub struct LockGuard<S: LockStore> {
    locker: Locker<S>,
    key: LeaseKey,
    status: LockStatus,
    view: watch::Receiver<LeaseView>,
    released: AtomicBool,
}

impl<S: LockStore> fmt::Debug for LockGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.status.resource)
            .field("mode", &self.status.mode)
            .field("fence", &self.status.fence)
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

impl<S: LockStore> LockGuard<S> {
    /// The fencing token of this grant.
    pub fn fence(&self) -> u64 {
        self.status.fence
    }

    /// The lock as granted.
    pub fn status(&self) -> &LockStatus {
        &self.status
    }

    /// The lock id (the group of this one lock). A secret: do not log it.
    pub fn lock_id(&self) -> &LockId {
        &self.status.lock_id
    }

    /// How the lock ended, if it has.
    pub fn ended(&self) -> Option<Ended> {
        self.view.borrow().ended
    }

    /// Whether the lock may be trusted now: it has not ended, and the local clock is still
    /// before `sent + ttl - drift_margin` of the request that granted or last renewed it
    /// (so a holder whose renewals are starved stops trusting it in time).
    pub fn is_held(&self) -> bool {
        let view = *self.view.borrow();
        view.ended.is_none() && self.locker.shared.now() < view.trust_until
    }

    /// Resolves when the lock ends, with the cause. Use it in `select!` beside the work.
    pub async fn lost(&self) -> Ended {
        let mut view = self.view.clone();
        match view.wait_for(|v| v.ended.is_some()).await {
            Ok(v) => v.ended.unwrap_or(Ended::Cancelled),
            Err(_) => Ended::Cancelled,
        }
    }

    /// Releases the lock now, bounded by the locker's `release_timeout`. Idempotent: later
    /// calls return `Ok` without contacting the store.
    ///
    /// # Errors
    /// A backend error or timeout (the lock then expires by its TTL).
    pub async fn release(&self) -> Result<(), Error> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_tracking();
        self.locker.unlock_bounded(&self.status.lock_id).await
    }

    fn stop_tracking(&self) {
        // The renewer may be gone (shut down); then there is nothing to stop.
        let _ = self
            .locker
            .commands
            .send(Command::Untrack { key: self.key });
    }
}

impl<S: LockStore> Drop for LockGuard<S> {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.stop_tracking();
            release_in_background(self.locker.clone(), self.status.lock_id.clone());
        }
    }
}

type RenewFuture = Pin<Box<dyn Future<Output = (LeaseKey, u64, Result<(), Error>)> + Send>>;

/// The one background task: owns the lease schedule, sends renewals, signals losses.
async fn renewer<S: LockStore>(
    shared: Arc<Shared<S>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut schedule = LeaseSchedule::new(shared.lease_config);
    let mut signals: HashMap<LeaseKey, Signal> = HashMap::new();
    let mut in_flight: FuturesUnordered<RenewFuture> = FuturesUnordered::new();
    loop {
        let wake = schedule
            .next_wakeup()
            .map(|ms| shared.epoch + Duration::from_millis(ms));
        tokio::select! {
            biased;
            () = shared.stop.cancelled() => break,
            cmd = commands.recv() => match cmd {
                Some(Command::Track { key, lock_id, ttl, sent, signal }) => {
                    if schedule.insert(key, lock_id, ttl, sent).is_ok() {
                        signals.insert(key, signal);
                    } else {
                        end(&shared, signal, Ended::Expired);
                    }
                }
                Some(Command::Untrack { key }) => {
                    schedule.remove(key);
                    if let Some(signal) = signals.remove(&key) {
                        end(&shared, signal, Ended::Released);
                    }
                }
                None => break,
            },
            Some((key, sent, result)) = in_flight.next(), if !in_flight.is_empty() => {
                let now = shared.now();
                match result {
                    Ok(()) => {
                        shared.counters.renewals.fetch_add(1, Ordering::Relaxed);
                        schedule.renewed(key, sent);
                        if let (Some(signal), Some(until)) = (signals.get(&key), schedule.trust_until(key)) {
                            signal.send_modify(|v| v.trust_until = until);
                        }
                    }
                    Err(e) => {
                        shared.counters.renew_failures.fetch_add(1, Ordering::Relaxed);
                        let refused = matches!(e, Error::NotRenewable { .. } | Error::LockNotFound);
                        tracing::debug!(lease = key, refused, error = %crate::purger::error_chain(&e), "renewal failed");
                        if let Some(LeaseEvent::Lost { key, cause }) = schedule.renew_failed(key, refused, now) {
                            lose(&shared, &mut signals, key, cause);
                        }
                    }
                }
            }
            () = sleep_until(wake) => {
                let now = shared.now();
                for event in schedule.poll(now) {
                    match event {
                        LeaseEvent::Renew { key, lock_id, ttl } => {
                            let client = shared.client.clone();
                            let until = schedule.trust_until(key).unwrap_or(now);
                            let budget = Duration::from_millis(until.saturating_sub(now).max(1));
                            in_flight.push(Box::pin(async move {
                                let result = match tokio::time::timeout(budget, client.renew(&lock_id, ttl.as_duration())).await {
                                    Ok(r) => r.map(|_| ()),
                                    Err(elapsed) => Err(Error::backend("renew", elapsed)),
                                };
                                (key, now, result)
                            }));
                        }
                        LeaseEvent::Lost { key, cause } => lose(&shared, &mut signals, key, cause),
                    }
                }
            }
        }
    }
    for (_, signal) in signals.drain() {
        end(&shared, signal, Ended::Cancelled);
    }
}

/// Signals the end of a tracked lease; the renewer is the one place `held` goes down.
fn end<S>(shared: &Shared<S>, signal: Signal, how: Ended) {
    shared.counters.held.fetch_sub(1, Ordering::Relaxed);
    signal.send_modify(|v| v.ended = Some(how));
}

fn lose<S>(
    shared: &Shared<S>,
    signals: &mut HashMap<LeaseKey, Signal>,
    key: LeaseKey,
    cause: LostCause,
) {
    if let Some(signal) = signals.remove(&key) {
        shared.counters.lost.fetch_add(1, Ordering::Relaxed);
        let how = match cause {
            LostCause::Refused => Ended::Refused,
            LostCause::Expired => Ended::Expired,
        };
        tracing::warn!(lease = key, cause = %how, "lock lost");
        end(shared, signal, how);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
