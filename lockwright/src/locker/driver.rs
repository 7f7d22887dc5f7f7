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
use lockwright_engine::locker::{Ended, Event, LockerCore, Reply, RequestId, Transmit};
use lockwright_engine::{Error, Hint, HintStream, LockStore};
use rand_core::{OsRng, UnwrapErr};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{Command, Inner, LeaseView, LockGuard, Locker};
use crate::Client;

type InFlight = Pin<Box<dyn Future<Output = Option<(RequestId, Reply)>> + Send>>;

/// Sends one request; `None` when its deadline passed first (the core's own timer then
/// counts it as unanswered).
fn perform<S: LockStore>(client: Client<S>, t: Transmit, deadline: Instant) -> InFlight {
    Box::pin(async move {
        let work = t.request.send_to(client.store());
        let reply = tokio::time::timeout_at(deadline, work).await.ok()?;
        Some((t.id, reply))
    })
}

/// What the task keeps per acquire and lease, beside the core.
struct Outlets<S: LockStore> {
    acquiring: HashMap<LeaseKey, oneshot::Sender<Result<LockGuard<S>, Error>>>,
    signals: HashMap<LeaseKey, watch::Sender<LeaseView>>,
    releasing: HashMap<LeaseKey, oneshot::Sender<Result<(), Error>>>,
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
        *shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = core.stats();
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
                    core.acquire(key, ask, wait, shared.now());
                }
                Some(Command::Cancel { key }) => {
                    outlets.acquiring.remove(&key);
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
                Some(hint) => core.handle_hint(&hint, shared.now()),
                None => {
                    // The store stopped sending hints: some may have been lost on the way.
                    watch.ended(&shared);
                    core.hints_ended(shared.now());
                }
            },
            () = sleep_until(wake) => core.handle_timeout(shared.now()),
        }
    }
}

/// The task's subscription to the store's hints: taken while some acquire waits, kept for
/// `max_backoff` after the last one stops waiting (a busy locker does not open and close
/// a change stream per grant), and asked for again no sooner than `max_backoff` after the
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
        if shared.config.wake_on_hints && core.is_waiting() {
            self.idle_since = None;
            if self.hints.is_none() && self.not_before.is_none() {
                self.hints = shared.client.store().hints();
                if self.hints.is_none() {
                    self.not_before = Some(now + linger);
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
            if let Some(caller) = outlets.acquiring.remove(&key) {
                let _ = caller.send(Err(error));
            }
        }
        Event::Renewed { key, trust_until } => {
            if let Some(signal) = outlets.signals.get(&key) {
                signal.send_modify(|v| v.trust_until = trust_until);
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
