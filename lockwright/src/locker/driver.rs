//! The locker's one background task: it sends the core's requests to the store
//! (`perform`), feeds the core commands, replies and timer expiry, and carries its events
//! to callers and guards (`deliver`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{Ended, Event, LockerCore, Reply, Request, RequestId, Transmit};
use lockwright_engine::{Error, Hint, HintStream, LocalMs, LockStatus, LockStore, Mode, Resource};
use rand_core::{OsRng, UnwrapErr};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{Command, Inner, LeaseView, LockGuard, Locker};
use crate::{Client, metrics};

type InFlight = Pin<Box<dyn Future<Output = Option<(RequestId, Reply)>> + Send>>;

/// Sends one request; `None` when its deadline passed first (the core's own timer then
/// counts it as unanswered).
fn perform<S: LockStore>(client: Client<S>, t: Transmit, deadline: Instant) -> InFlight {
    Box::pin(async move {
        let started = Instant::now();
        let work = t.request.send_to(client.store());
        let reply = tokio::time::timeout_at(deadline, work).await.ok()?;
        record_request(&client, &t.request, &reply, started.elapsed());
        Some((t.id, reply))
    })
}

/// A request's outcome and round trip, in the client's metrics.
fn record_request<S: LockStore>(
    client: &Client<S>,
    request: &Request,
    reply: &Reply,
    took: Duration,
) {
    let (operation, resource) = match request {
        Request::Lock { request } => (request.access.operation(), Some(&request.resource)),
        Request::Renew { lock, .. } => ("renew_one", Some(&lock.resource)),
        Request::RenewMany { .. } => ("renew_many", None),
        Request::Unlock { resource, .. } => ("unlock_one", Some(resource)),
        Request::LeaveQueue { resource, .. } => ("leave_queue", Some(resource)),
    };
    let result = match reply {
        Reply::Refused(e) | Reply::Failed(e) => Err(e),
        Reply::Granted(_) | Reply::Done | Reply::Each(_) => Ok(()),
    };
    client
        .labels()
        .operation_outcome(operation, resource, result, took);
}

/// What the task keeps per acquire and lease, beside the core.
struct Outlets<S: LockStore> {
    acquiring: HashMap<LeaseKey, oneshot::Sender<Result<LockGuard<S>, Error>>>,
    signals: HashMap<LeaseKey, watch::Sender<LeaseView>>,
    releasing: HashMap<LeaseKey, oneshot::Sender<Result<(), Error>>>,
    /// For the metrics: what each acquire asks for, and since when.
    asked: HashMap<LeaseKey, Asked>,
    /// For the metrics: each lease's lock, and since when it is held.
    holding: HashMap<LeaseKey, Holding>,
    /// For the metrics: when this locker last released each resource (a grant of it since
    /// is a handover); at most [`RELEASES_KEPT`].
    released: HashMap<Resource, Instant>,
}

/// The most releases [`Outlets::released`] remembers: a release that no grant of this
/// locker follows is forgotten when the map is full.
const RELEASES_KEPT: usize = 1_024;

struct Asked {
    resource: Resource,
    mode: Mode,
    since: Instant,
}

struct Holding {
    resource: Resource,
    mode: Mode,
    ttl: Option<Duration>,
    since: Instant,
}

/// The one background task: feeds the core commands, replies and timer expiry; sends its
/// requests; carries its events to callers and guards.
pub(super) async fn drive<S: LockStore>(
    shared: Arc<Inner<S>>,
    mut core: LockerCore<UnwrapErr<OsRng>>,
    commands: mpsc::WeakUnboundedSender<Command<S>>,
    mut inbox: mpsc::UnboundedReceiver<Command<S>>,
) {
    let mut outlets = Outlets {
        acquiring: HashMap::new(),
        signals: HashMap::new(),
        releasing: HashMap::new(),
        asked: HashMap::new(),
        holding: HashMap::new(),
        released: HashMap::new(),
    };
    let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
    let mut watch = Watch::default();
    let (mut open, mut stopped) = (true, false);
    loop {
        while let Some(t) = core.poll_transmit() {
            let deadline = shared.instant(t.deadline);
            in_flight.push(perform(shared.client.clone(), t, deadline));
        }
        *shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = core.stats();
        while let Some(event) = core.poll_event() {
            deliver(&shared, &mut core, &commands, &mut outlets, event);
        }
        let stats = core.stats();
        *shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = stats;
        metrics::gauges(outlets.asked.len(), stats.held);
        if !open && core.is_idle() && in_flight.is_empty() {
            break;
        }
        watch.update(&shared, &mut core);
        let wake = match (
            core.poll_timeout().map(|ms| shared.instant(ms)),
            watch.wake(shared.config.max_backoff),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            biased;
            () = shared.stop.cancelled(), if !stopped => {
                stopped = true;
                core.shutdown();
            }
            command = inbox.recv(), if open => match command {
                Some(Command::Acquire { key, ask, wait, reply }) => {
                    outlets.acquiring.insert(key, reply);
                    let mode = ask.access.mode();
                    let (resource, since) = (ask.resource.clone(), Instant::now());
                    outlets.asked.insert(key, Asked { resource, mode, since });
                    core.acquire(key, ask, wait, shared.now());
                }
                Some(Command::Cancel { key }) => {
                    outlets.acquiring.remove(&key);
                    if let Some(a) = outlets.asked.remove(&key) {
                        shared.client.labels().acquire(a.mode, &a.resource, Err("cancelled"), a.since.elapsed());
                    }
                    core.cancel(key);
                }
                Some(Command::Release { key, reply }) => {
                    if let Some(reply) = reply {
                        outlets.releasing.insert(key, reply);
                    }
                    core.release(key, shared.now());
                }
                None => open = false,
            },
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                if let Some((id, reply)) = done {
                    core.handle_reply(id, reply, shared.now());
                }
            }
            hint = next_hint(&mut watch.hints), if watch.hints.is_some() => match hint {
                Some(hint) => {
                    metrics::hint();
                    core.handle_hint(&hint, shared.now());
                }
                None => {
                    metrics::hint_stream("ended");
                    // The store stopped sending hints: some may have been lost on the way.
                    watch.ended(&shared);
                    core.hints_ended(shared.now());
                }
            },
            () = sleep_until(wake) => core.handle_timeout(shared.now()),
        }
    }
    shared.finished.cancel();
}

/// The task's subscription to the store's hints: taken while some acquire waits, kept for
/// `max_backoff` after the last one stops waiting (a busy locker does not open and close
/// a wakes cursor per grant), and asked for again no sooner than `max_backoff` after the
/// store had none to give or ended one.
#[derive(Default)]
struct Watch {
    hints: Option<HintStream>,
    /// Since when nobody waited, while subscribed.
    idle_since: Option<Instant>,
    /// No subscription before then.
    not_before: Option<Instant>,
}

impl Watch {
    fn update<S: LockStore>(&mut self, shared: &Inner<S>, core: &mut LockerCore<UnwrapErr<OsRng>>) {
        let linger = shared.config.max_backoff;
        let now = Instant::now();
        if self.not_before.is_some_and(|t| t <= now) {
            self.not_before = None;
        }
        if shared.config.wake_on_hints && core.wants_hints() {
            self.idle_since = None;
            if self.hints.is_none() && self.not_before.is_none() {
                self.hints = shared.client.store().hints();
                if self.hints.is_none() {
                    self.not_before = Some(now + linger);
                } else {
                    metrics::hint_stream("opened");
                }
            }
        } else if self.hints.is_some() {
            let since = *self.idle_since.get_or_insert(now);
            if since + linger <= now {
                self.hints = None;
                self.idle_since = None;
                core.hints_ended(shared.now());
            }
        }
    }

    /// When `update` has something to do without any other wake-up: unsubscribe after the
    /// linger, or subscribe again.
    fn wake(&self, linger: Duration) -> Option<Instant> {
        match (&self.hints, self.idle_since) {
            (Some(_), Some(since)) => Some(since + linger),
            (Some(_), None) => None,
            (None, _) => self.not_before,
        }
    }

    fn ended<S>(&mut self, shared: &Inner<S>) {
        self.hints = None;
        self.idle_since = None;
        self.not_before = Some(Instant::now() + shared.config.max_backoff);
    }
}

async fn next_hint(hints: &mut Option<HintStream>) -> Option<Hint> {
    match hints {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Acts on one event of the core.
fn deliver<S: LockStore>(
    shared: &Arc<Inner<S>>,
    core: &mut LockerCore<UnwrapErr<OsRng>>,
    commands: &mpsc::WeakUnboundedSender<Command<S>>,
    outlets: &mut Outlets<S>,
    event: Event,
) {
    match event {
        Event::Acquired {
            key,
            status,
            trust_until,
        } => {
            let caller = outlets.acquiring.remove(&key);
            record_grant(shared, outlets, key, &status);
            // A caller exists only while a handle does, so the sender upgrades.
            let (Some(caller), Some(commands)) = (caller, commands.upgrade()) else {
                core.release(key, shared.now());
                return;
            };
            // Never the lock id: it is the holder's secret. The resource is logged escaped.
            tracing::debug!(
                lease = key,
                resource = %status.resource,
                mode = ?status.mode,
                fence = status.fence,
                "lock acquired"
            );
            let (signal, view) = watch::channel(LeaseView {
                ended: None,
                trust_until,
                trusted_at: shared.now(),
            });
            outlets.signals.insert(key, signal);
            let guard = LockGuard {
                locker: Locker {
                    shared: Arc::clone(shared),
                    commands,
                },
                key,
                status,
                view,
                released: AtomicBool::new(false),
            };
            // If the caller is gone, the guard comes back and its drop releases the lock.
            let _ = caller.send(Ok(guard));
        }
        Event::AcquireFailed { key, error } => {
            if let Some(a) = outlets.asked.remove(&key) {
                let outcome = Err(metrics::outcome(&error));
                shared
                    .client
                    .labels()
                    .acquire(a.mode, &a.resource, outcome, a.since.elapsed());
            }
            if let Some(caller) = outlets.acquiring.remove(&key) {
                let _ = caller.send(Err(error));
            }
        }
        Event::Renewed { key, trust_until } => {
            if let (Some(signal), Some(ttl)) = (
                outlets.signals.get(&key),
                outlets.holding.get(&key).and_then(|h| h.ttl),
            ) {
                let previous = signal.borrow().trust_until;
                metrics::renewal_lag(renewal_lag(&shared.config, previous, ttl, shared.now()));
            }
            if let Some(signal) = outlets.signals.get(&key) {
                let now = shared.now();
                signal.send_modify(|v| {
                    v.trust_until = trust_until;
                    v.trusted_at = now;
                });
            }
        }
        Event::AttemptFailed { key, error } => {
            tracing::debug!(
                acquire = key,
                error = %crate::purger::error_chain(&error),
                "acquire attempt failed; asking again"
            );
        }
        Event::RenewFailed { key, error } => {
            tracing::debug!(lease = key, error = %crate::purger::error_chain(&error), "renewal failed");
        }
        Event::Ended { key, how } => {
            if matches!(how, Ended::Refused | Ended::Expired) {
                tracing::warn!(lease = key, cause = %how, "lock lost");
            }
            if let Some(h) = outlets.holding.remove(&key) {
                let lost = match how {
                    Ended::Refused => Some("refused"),
                    Ended::Expired => Some("expired"),
                    _ => None,
                };
                let labels = shared.client.labels();
                labels.ended(h.mode, &h.resource, h.since.elapsed(), lost);
                if how == Ended::Released {
                    if outlets.released.len() >= RELEASES_KEPT {
                        outlets.released.clear();
                    }
                    outlets.released.insert(h.resource, Instant::now());
                }
            }
            if let Some(signal) = outlets.signals.remove(&key) {
                signal.send_modify(|v| v.ended = Some(how));
            }
        }
        Event::Released { key, result } => {
            let caller = key.and_then(|k| outlets.releasing.remove(&k));
            match (caller, result) {
                (Some(caller), result) => {
                    let _ = caller.send(result);
                }
                (None, Err(e)) => tracing::warn!(
                    error = %crate::purger::error_chain(&e),
                    "background release failed; the lock will expire by its TTL"
                ),
                (None, Ok(())) => {}
            }
        }
    }
}

/// A grant's metrics: the acquire's wait, and the handover from this locker's last release
/// of the resource.
fn record_grant<S: LockStore>(
    shared: &Inner<S>,
    outlets: &mut Outlets<S>,
    key: LeaseKey,
    status: &LockStatus,
) {
    let labels = shared.client.labels();
    let now = Instant::now();
    if let Some(a) = outlets.asked.remove(&key) {
        labels.acquire(a.mode, &a.resource, Ok(()), now.duration_since(a.since));
    }
    if let Some(released) = outlets.released.remove(&status.resource) {
        labels.handover(&status.resource, now.duration_since(released));
    }
    outlets.holding.insert(
        key,
        Holding {
            resource: status.resource.clone(),
            mode: status.mode,
            ttl: status.ttl,
            since: now,
        },
    );
}

/// How long after it fell due a renewal was confirmed at `now`: the lease's previous
/// trust deadline is `sent + ttl - drift_margin` of the request before, and the renewal
/// fell due at `sent + ttl * renew_fraction`. Zero for one sent early (in a batch).
fn renewal_lag(
    config: &lockwright_engine::locker::LockerConfig,
    previous: LocalMs,
    ttl: Duration,
    now: LocalMs,
) -> Duration {
    let sent = previous
        .saturating_add(config.drift_margin)
        .as_millis()
        .saturating_sub(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    let due = LocalMs::from_millis(sent).saturating_add(ttl.mul_f64(config.renew_fraction));
    now.saturating_duration_since(due)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
