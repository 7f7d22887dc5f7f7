//! The Locker's logic, sans-IO: waiting acquire, renewal, loss and release of held locks.
//!
//! [`LockerCore`] is a state machine in the style of `quinn-proto`. It performs no IO and
//! reads no clock: its driver passes the local monotonic time (ms) into every call, sends
//! the requests it takes from [`LockerCore::poll_transmit`] to the store, reports each
//! reply with [`LockerCore::handle_reply`], calls [`LockerCore::handle_timeout`] at the
//! instant [`LockerCore::poll_timeout`] names, and acts on what
//! [`LockerCore::poll_event`] says (hand out a guard, signal a loss, finish a release).
//! Randomness (lock ids, backoff jitter) comes from the generator the driver hands over.
//!
//! The tokio `Locker` of the `lockwright` crate drives it against a real store, and the
//! simulator drives the same code against a faulty network in virtual time, so the
//! simulator checks what users run.
//!
//! What it guarantees:
//! - A grant is handed out ([`Event::Acquired`]) only while it may still be trusted: a
//!   reply that arrives at or after `sent + ttl - drift_margin` is released instead.
//! - Every held lock is renewed at `renew_fraction` of its TTL; when its trusted validity
//!   runs out, or the store refuses a renewal, [`Event::Ended`] says so no later than the
//!   trust deadline.
//! - A request whose outcome is unknown (it failed in a way that may have been applied, or
//!   no reply came before its deadline) is followed by a release of its lock id, and a
//!   release is retried until `release_timeout` has passed.
//! - A waiting acquire asks again after a refusal with full-jitter exponential backoff.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand_core::RngCore;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::holder::trust_until;
use crate::lease::{LeaseConfig, LeaseEvent, LeaseKey, LeaseSchedule, LostCause};
use crate::lock::{LockDetails, LockStatus, Renewal};
use crate::mutants::{self, Mutant};
use crate::names::{LockId, Resource};
use crate::time::{Ttl, duration_millis};

/// The number of one request the core asked for, to match its reply.
pub type RequestId = u64;

/// Who takes a lock (owner, host, comment; the TTL is the acquire's), shared by every
/// attempt of one acquire. The core does not read it: it travels to the store with each
/// lock request.
pub type Who = Arc<LockDetails>;

/// What one acquire asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    /// What to lock.
    pub resource: Resource,
    /// How.
    pub access: Access,
    /// The lease of each grant.
    pub ttl: Ttl,
    /// Who is asking.
    pub who: Who,
}

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
    /// Failed renewal attempts (transient errors, refusals and renewals without a reply).
    pub renew_failures: u64,
    /// Locks lost (refused or expired).
    pub lost: u64,
}

/// How a Locker behaves. Start from [`LockerConfig::default`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LockerConfig {
    /// Renew when this fraction of the TTL has passed since the last request was sent.
    pub renew_fraction: f64,
    /// How much earlier than `sent + ttl` a lock stops being trusted, to cover the local
    /// clock running slower than the store's. Must be shorter than every TTL used.
    pub drift_margin: Duration,
    /// Attempts per renewal before the lock is given up.
    pub max_renew_attempts: u32,
    /// The wait between attempts of one renewal, and between attempts of one release.
    pub renew_retry: Duration,
    /// The first wait between attempts of a waiting acquire; it doubles up to
    /// `max_backoff`, with full jitter.
    pub initial_backoff: Duration,
    /// The longest wait between attempts of a waiting acquire.
    pub max_backoff: Duration,
    /// How long a release keeps trying before it gives up (the lock then expires by its
    /// TTL). One attempt waits at most this long, or the lock's TTL if shorter.
    pub release_timeout: Duration,
    /// Whenever a renewal is due, the other locks whose renewal falls due within this
    /// fraction of their TTL are renewed with it, in one batch (in [0, `renew_fraction`];
    /// 0 renews every lock on its own).
    pub renew_batch_fraction: f64,
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
            renew_batch_fraction: 0.1,
        }
    }
}

impl LockerConfig {
    /// Checks the configuration and derives the lease schedule's.
    ///
    /// # Errors
    /// `InvalidArgument` for `renew_fraction` outside (0, 1), zero `max_renew_attempts`,
    /// zero `renew_retry`, `initial_backoff` or `release_timeout`, or `max_backoff` below
    /// `initial_backoff`.
    pub fn lease_config(&self) -> Result<LeaseConfig, Error> {
        let lease = LeaseConfig::new(
            self.renew_fraction,
            self.drift_margin,
            self.max_renew_attempts,
            self.renew_retry,
        )?
        .with_batch_fraction(self.renew_batch_fraction)?;
        if self.initial_backoff.is_zero() {
            return Err(Error::invalid(
                "initial_backoff",
                "must be greater than zero",
            ));
        }
        if self.max_backoff < self.initial_backoff {
            return Err(Error::invalid(
                "max_backoff",
                "must be at least initial_backoff",
            ));
        }
        if self.release_timeout.is_zero() {
            return Err(Error::invalid(
                "release_timeout",
                "must be greater than zero",
            ));
        }
        Ok(lease)
    }
}

/// How long an acquire waits while the lock is held by others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// One attempt: a refusal ends the acquire with `AlreadyLocked`.
    No,
    /// Ask again after every refusal, stale grant or unanswered attempt, without end.
    Forever,
    /// As `Forever`, giving up with `Timeout` at this local instant (ms).
    Until(u64),
}

/// A request for the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Grant `resource` to `lock_id` (`xlock` or `slock`).
    Lock {
        /// What to lock.
        resource: Resource,
        /// How.
        access: Access,
        /// A fresh lock id for this attempt.
        lock_id: LockId,
        /// The lease.
        ttl: Ttl,
        /// Who is asking (owner, host, comment), recorded with the lock.
        details: Who,
    },
    /// Renew the one lock `lock_id` holds on `resource` for `ttl` (each attempt's lock id
    /// is fresh, so the group is that one lock).
    Renew {
        /// Where the lock is.
        resource: Resource,
        /// Its lock id.
        lock_id: LockId,
        /// The lease.
        ttl: Ttl,
    },
    /// Renew each of these locks as `Renew` would, in one batch; the reply is
    /// [`Reply::Each`], in the same order.
    RenewMany {
        /// The locks.
        locks: Vec<Renewal>,
    },
    /// Release the one lock `lock_id` holds (or may hold) on `resource`.
    Unlock {
        /// Where the lock is.
        resource: Resource,
        /// Its lock id.
        lock_id: LockId,
    },
}

/// A request to send, and the local instant after which its reply no longer counts (the
/// core then treats its outcome as unknown; the driver may abandon it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Quote it in [`LockerCore::handle_reply`].
    pub id: RequestId,
    /// What to send.
    pub request: Request,
    /// Local ms.
    pub deadline: u64,
}

/// How the store answered a request.
#[derive(Debug)]
pub enum Reply {
    /// A `Lock` request was granted.
    Granted(LockStatus),
    /// A `Renew` or `Unlock` request was applied.
    Done,
    /// The store refused by the lock rules (`AlreadyLocked`, `NotRenewable`,
    /// `LockNotFound`): nothing was written.
    Refused(Error),
    /// The request failed; unless the error is a bad argument, it may have been applied.
    Failed(Error),
    /// A `RenewMany` request's outcome for each lock, in order.
    Each(Vec<Reply>),
}

impl Reply {
    /// The reply to a `Lock` request, from the store's answer.
    #[must_use]
    pub fn from_lock(result: Result<LockStatus, Error>) -> Reply {
        match result {
            Ok(status) => Reply::Granted(status),
            Err(e) => Reply::from_error(e),
        }
    }

    /// The reply to a `Renew` or `Unlock` request, from the store's answer.
    #[must_use]
    pub fn from_done<T>(result: Result<T, Error>) -> Reply {
        match result {
            Ok(_) => Reply::Done,
            Err(e) => Reply::from_error(e),
        }
    }

    /// The reply to a `RenewMany` request, from the store's answer.
    #[must_use]
    pub fn from_batch(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Reply {
        match result {
            Ok(each) => Reply::Each(each.into_iter().map(Reply::from_done).collect()),
            Err(e) => Reply::Failed(e),
        }
    }

    fn from_error(e: Error) -> Reply {
        match e {
            Error::AlreadyLocked { .. } | Error::NotRenewable { .. } | Error::LockNotFound => {
                Reply::Refused(e)
            }
            e => Reply::Failed(e),
        }
    }
}

/// What the driver must act on.
#[derive(Debug)]
pub enum Event {
    /// The acquire `key` holds its lock, trusted until local `trust_until`. The lease keeps
    /// the key.
    Acquired {
        /// The acquire's key, now the lease's.
        key: LeaseKey,
        /// The lock as granted.
        status: LockStatus,
        /// Local ms.
        trust_until: u64,
    },
    /// The acquire `key` ended without a lock.
    AcquireFailed {
        /// The acquire.
        key: LeaseKey,
        /// Why.
        error: Error,
    },
    /// The lease `key` was renewed and is trusted until local `trust_until`.
    Renewed {
        /// The lease.
        key: LeaseKey,
        /// Local ms.
        trust_until: u64,
    },
    /// One renewal attempt of `key` failed (it may be retried).
    RenewFailed {
        /// The lease.
        key: LeaseKey,
        /// Why.
        error: Error,
    },
    /// The lease `key` must no longer be trusted.
    Ended {
        /// The lease.
        key: LeaseKey,
        /// How.
        how: Ended,
    },
    /// A release finished: of the lease `key`, or (`None`) of a grant nobody holds (after
    /// an unknown outcome, a stale grant or a cancelled acquire).
    Released {
        /// The lease, if the release was asked for.
        key: Option<LeaseKey>,
        /// `Err` when it gave up after `release_timeout`; the lock expires by its TTL.
        result: Result<(), Error>,
    },
}

#[derive(Debug)]
struct Acquire {
    ask: Ask,
    wait: Wait,
    backoff_ms: u64,
    attempt: Option<RequestId>,
}

/// One lock a lock request asked for (and perhaps got): what a release needs.
#[derive(Clone, Debug)]
struct Grant {
    resource: Resource,
    lock_id: LockId,
    ttl: Ttl,
}

#[derive(Debug)]
enum Purpose {
    Lock { key: LeaseKey, grant: Grant },
    Renew { key: LeaseKey },
    RenewMany { keys: Vec<LeaseKey> },
    Unlock { release: u64 },
}

#[derive(Debug)]
struct InFlight {
    sent: u64,
    deadline: u64,
    purpose: Purpose,
}

#[derive(Debug)]
struct Release {
    key: Option<LeaseKey>,
    grant: Grant,
    deadline: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A request's reply is due.
    Request(RequestId),
    /// A waiting acquire asks again.
    Attempt(LeaseKey),
    /// A waiting acquire gives up.
    GiveUp(LeaseKey),
    /// A release tries again.
    Release(u64),
}

/// A held lock the core knows the lock id of, until it is released.
#[derive(Debug)]
struct Held {
    grant: Grant,
    /// Still renewed and trusted (not yet lost, released or cancelled).
    live: bool,
}

/// The Locker's state machine. See the [module documentation](self).
#[derive(Debug)]
pub struct LockerCore<R> {
    config: LockerConfig,
    rng: R,
    schedule: LeaseSchedule,
    acquires: BTreeMap<LeaseKey, Acquire>,
    held: BTreeMap<LeaseKey, Held>,
    requests: BTreeMap<RequestId, InFlight>,
    releases: BTreeMap<u64, Release>,
    /// Pending timers; entries whose subject is gone are skipped when they fire.
    timers: BTreeSet<(u64, Timer)>,
    outbox: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: LockerStats,
    next_id: u64,
    shut_down: bool,
}

impl<R: RngCore> LockerCore<R> {
    /// A core with `config`, drawing lock ids and jitter from `rng` (use a cryptographic
    /// generator seeded from the OS outside simulation: lock ids are secrets).
    ///
    /// # Errors
    /// As [`LockerConfig::lease_config`].
    pub fn new(config: LockerConfig, rng: R) -> Result<Self, Error> {
        let lease = config.lease_config()?;
        Ok(LockerCore {
            config,
            rng,
            schedule: LeaseSchedule::new(lease),
            acquires: BTreeMap::new(),
            held: BTreeMap::new(),
            requests: BTreeMap::new(),
            releases: BTreeMap::new(),
            timers: BTreeSet::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            stats: LockerStats::default(),
            next_id: 1,
            shut_down: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LockerConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> LockerStats {
        self.stats
    }

    /// Whether nothing is under way: no acquire, no held lock being renewed, no request in
    /// flight and no release pending. A driver whose handles are all gone may stop then.
    pub fn is_idle(&self) -> bool {
        self.acquires.is_empty()
            && self.schedule.is_empty()
            && self.requests.is_empty()
            && self.releases.is_empty()
    }

    /// Starts acquiring `resource` under the caller's unique `key`; the first request is
    /// ready at once. Ends with [`Event::Acquired`] or [`Event::AcquireFailed`].
    pub fn acquire(&mut self, key: LeaseKey, ask: Ask, wait: Wait, now: u64) {
        let error = if self.shut_down {
            Some(Error::Shutdown)
        } else if trust_until(0, ask.ttl, self.config.drift_margin).is_none() {
            Some(Error::invalid(
                "ttl",
                "must be longer than the locker's drift margin",
            ))
        } else if self.acquires.contains_key(&key) || self.held.contains_key(&key) {
            Some(Error::invalid("key", "is already in use"))
        } else {
            None
        };
        if let Some(error) = error {
            self.events.push_back(Event::AcquireFailed { key, error });
            return;
        }
        if let Wait::Until(deadline) = wait {
            self.timers.insert((deadline, Timer::GiveUp(key)));
        }
        self.acquires.insert(
            key,
            Acquire {
                ask,
                wait,
                backoff_ms: duration_millis(self.config.initial_backoff).max(1),
                attempt: None,
            },
        );
        self.attempt(key, now);
    }

    /// Abandons the acquire `key` (its caller is gone): whatever its request in flight is
    /// granted is released. A key that is no longer acquiring is left alone.
    pub fn cancel(&mut self, key: LeaseKey) {
        // The request stays in flight with its purpose; with the acquire gone, its reply
        // is an orphan's.
        self.acquires.remove(&key);
    }

    /// Releases the lease `key`: it stops being trusted and renewed at once
    /// ([`Event::Ended`] with [`Ended::Released`] if it was live), and its lock id is
    /// unlocked, retried until `release_timeout` ([`Event::Released`]). A key the core
    /// does not hold is reported released at once.
    pub fn release(&mut self, key: LeaseKey, now: u64) {
        self.cancel(key);
        match self.held.remove(&key) {
            Some(held) => {
                if held.live {
                    self.schedule.remove(key);
                    self.stats.held -= 1;
                    self.events.push_back(Event::Ended {
                        key,
                        how: Ended::Released,
                    });
                }
                self.start_release(Some(key), held.grant, now);
            }
            None => self.events.push_back(Event::Released {
                key: Some(key),
                result: Ok(()),
            }),
        }
    }

    /// Stops: every live lease ends with [`Ended::Cancelled`] and is no longer renewed (its
    /// lease runs out in the store), every acquire fails, and later acquires are refused.
    /// Releases under way go on.
    pub fn shutdown(&mut self) {
        self.shut_down = true;
        for key in std::mem::take(&mut self.acquires).into_keys() {
            self.events.push_back(Event::AcquireFailed {
                key,
                error: Error::Shutdown,
            });
        }
        for (&key, held) in &mut self.held {
            if held.live {
                held.live = false;
                self.schedule.remove(key);
                self.stats.held -= 1;
                self.events.push_back(Event::Ended {
                    key,
                    how: Ended::Cancelled,
                });
            }
        }
        // Renewals in flight no longer matter.
        self.requests
            .retain(|_, r| !matches!(r.purpose, Purpose::Renew { .. } | Purpose::RenewMany { .. }));
    }

    /// The next request to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    /// The next event to act on.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`LockerCore::handle_timeout`] next (local ms), if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        let timer = self.timers.first().map(|(t, _)| *t);
        match (timer, self.schedule.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The store answered request `id` at local time `now`. Replies to requests the core
    /// no longer waits for (past their deadline) are ignored.
    pub fn handle_reply(&mut self, id: RequestId, reply: Reply, now: u64) {
        let Some(request) = self.requests.remove(&id) else {
            return;
        };
        self.timers.remove(&(request.deadline, Timer::Request(id)));
        self.settle(id, request, Some(reply), now);
    }

    /// Time has reached `now`: requests past their deadline count as unanswered, waiting
    /// acquires ask again or give up, renewals are sent, leases whose trust ran out end.
    pub fn handle_timeout(&mut self, now: u64) {
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Request(id) => {
                    if let Some(request) = self.requests.remove(&id) {
                        self.settle(id, request, None, now);
                    }
                }
                Timer::Attempt(key) => {
                    if self.acquires.get(&key).is_some_and(|a| a.attempt.is_none()) {
                        self.attempt(key, now);
                    }
                }
                Timer::GiveUp(key) => {
                    if let Some(a) = self.acquires.remove(&key) {
                        self.events.push_back(Event::AcquireFailed {
                            key,
                            error: Error::Timeout {
                                resource: a.ask.resource,
                            },
                        });
                    }
                }
                Timer::Release(rid) => self.send_unlock(rid, now),
            }
        }
        let mut batch: Vec<(LeaseKey, Renewal)> = Vec::new();
        for event in self.schedule.poll(now) {
            match event {
                LeaseEvent::Renew { key, lock_id, ttl } => {
                    if let Some(held) = self.held.get(&key) {
                        let resource = held.grant.resource.clone();
                        batch.push((
                            key,
                            Renewal {
                                resource,
                                lock_id,
                                ttl,
                            },
                        ));
                    }
                }
                LeaseEvent::Lost { key, cause } => self.lose(key, cause),
            }
        }
        self.send_renewals(batch, now);
    }

    /// One lock: one `Renew`. More: one `RenewMany`, answered by the earliest of their
    /// trust deadlines.
    fn send_renewals(&mut self, mut batch: Vec<(LeaseKey, Renewal)>, now: u64) {
        let deadline = batch
            .iter()
            .filter_map(|(key, _)| self.schedule.trust_until(*key))
            .min()
            .unwrap_or(now);
        match batch.len() {
            0 => {}
            1 => {
                if let Some((key, r)) = batch.pop() {
                    let request = Request::Renew {
                        resource: r.resource,
                        lock_id: r.lock_id,
                        ttl: r.ttl,
                    };
                    self.send(request, Purpose::Renew { key }, deadline, now);
                }
            }
            _ => {
                let (keys, locks) = batch.into_iter().unzip();
                let request = Request::RenewMany { locks };
                self.send(request, Purpose::RenewMany { keys }, deadline, now);
            }
        }
    }

    fn send(&mut self, request: Request, purpose: Purpose, deadline: u64, now: u64) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        self.requests.insert(
            id,
            InFlight {
                sent: now,
                deadline,
                purpose,
            },
        );
        self.timers.insert((deadline, Timer::Request(id)));
        self.outbox.push_back(Transmit {
            id,
            request,
            deadline,
        });
        id
    }

    fn attempt(&mut self, key: LeaseKey, now: u64) {
        let Some(a) = self.acquires.get(&key) else {
            return;
        };
        let Ask {
            resource,
            access,
            ttl,
            who: details,
        } = a.ask.clone();
        let bits = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
        let lock_id = LockId::from_random(bits);
        // Checked in `acquire`: the TTL is longer than the margin.
        let deadline = trust_until(now, ttl, self.config.drift_margin).unwrap_or(now);
        let grant = Grant {
            resource: resource.clone(),
            lock_id: lock_id.clone(),
            ttl,
        };
        let id = self.send(
            Request::Lock {
                resource,
                access,
                lock_id,
                ttl,
                details,
            },
            Purpose::Lock { key, grant },
            deadline,
            now,
        );
        if let Some(a) = self.acquires.get_mut(&key) {
            a.attempt = Some(id);
        }
    }

    /// How a request ended: with a reply, or (`None`) unanswered by its deadline.
    fn settle(&mut self, id: RequestId, request: InFlight, reply: Option<Reply>, now: u64) {
        match request.purpose {
            Purpose::Lock { key, grant } => {
                let ours = self
                    .acquires
                    .get(&key)
                    .is_some_and(|a| a.attempt == Some(id));
                if ours {
                    self.lock_settled(key, grant, request.sent, reply, now);
                } else {
                    self.orphan_settled(grant, reply, now);
                }
            }
            Purpose::Renew { key } => self.renew_settled(key, request.sent, reply, now),
            Purpose::RenewMany { keys } => self.batch_settled(keys, request.sent, reply, now),
            Purpose::Unlock { release } => self.unlock_settled(release, reply, now),
        }
    }

    /// The reply to an attempt whose acquire was cancelled, gave up or was shut down:
    /// release whatever may have been granted.
    fn orphan_settled(&mut self, grant: Grant, reply: Option<Reply>, now: u64) {
        match &reply {
            Some(Reply::Granted(_)) => self.start_release(None, grant, now),
            None => self.release_unknown(grant, now),
            Some(Reply::Failed(e)) if may_have_applied(e) => {
                self.release_unknown(grant, now);
            }
            Some(_) => {}
        }
    }

    fn lock_settled(
        &mut self,
        key: LeaseKey,
        grant: Grant,
        sent: u64,
        reply: Option<Reply>,
        now: u64,
    ) {
        if let Some(a) = self.acquires.get_mut(&key) {
            a.attempt = None;
        }
        let ttl = grant.ttl;
        let until = trust_until(sent, ttl, self.config.drift_margin).unwrap_or(sent);
        match reply {
            Some(Reply::Granted(status))
                if now < until || mutants::active(Mutant::LockerHandsOutStaleGrant) =>
            {
                self.acquires.remove(&key);
                if self
                    .schedule
                    .insert(key, grant.lock_id.clone(), ttl, sent)
                    .is_err()
                {
                    // Unreachable: `acquire` checked the TTL against the margin.
                    self.start_release(None, grant, now);
                    self.events.push_back(Event::AcquireFailed {
                        key,
                        error: Error::invalid("ttl", "must be longer than the drift margin"),
                    });
                    return;
                }
                self.held.insert(key, Held { grant, live: true });
                self.stats.held += 1;
                self.events.push_back(Event::Acquired {
                    key,
                    status,
                    trust_until: until,
                });
            }
            Some(Reply::Granted(_)) => {
                // Granted too late to trust: release it, and ask again if waiting.
                self.start_release(None, grant, now);
                self.retry_or_fail(
                    key,
                    Error::backend(
                        "acquire",
                        "the grant arrived after the lock stopped being trusted (the store \
                         took longer than the TTL minus the drift margin); it was released",
                    ),
                    now,
                );
            }
            Some(Reply::Refused(e)) => self.retry_or_fail(key, e, now),
            Some(Reply::Done | Reply::Each(_)) => self.fail(
                key,
                Error::backend("acquire", "the store's answer does not fit a lock request"),
            ),
            Some(Reply::Failed(e)) => {
                if may_have_applied(&e) {
                    self.release_unknown(grant, now);
                }
                self.fail(key, e);
            }
            None => {
                self.release_unknown(grant, now);
                self.retry_or_fail(
                    key,
                    Error::backend(
                        "acquire",
                        "no reply before the grant would have stopped being trusted (the TTL \
                         minus the drift margin); whatever was granted is being released",
                    ),
                    now,
                );
            }
        }
    }

    /// After an outcome that may have been a grant: release it.
    fn release_unknown(&mut self, grant: Grant, now: u64) {
        if !mutants::active(Mutant::LockerNoReleaseAfterUnknown) {
            self.start_release(None, grant, now);
        }
    }

    fn fail(&mut self, key: LeaseKey, error: Error) {
        if self.acquires.remove(&key).is_some() {
            self.events.push_back(Event::AcquireFailed { key, error });
        }
    }

    /// A waiting acquire waits (full jitter, doubling backoff) and asks again; a one-shot
    /// acquire ends with `error`.
    fn retry_or_fail(&mut self, key: LeaseKey, error: Error, now: u64) {
        let max = duration_millis(self.config.max_backoff).max(1);
        let Some(a) = self.acquires.get_mut(&key) else {
            return;
        };
        if a.wait == Wait::No {
            self.fail(key, error);
            return;
        }
        let wait = (self.rng.next_u64() % a.backoff_ms.saturating_add(1)).max(1);
        a.backoff_ms = a.backoff_ms.saturating_mul(2).min(max);
        self.timers
            .insert((now.saturating_add(wait), Timer::Attempt(key)));
    }

    /// Each lock of a batch is settled on its own outcome; a failure of the whole batch is
    /// each lock's failure.
    fn batch_settled(&mut self, keys: Vec<LeaseKey>, sent: u64, reply: Option<Reply>, now: u64) {
        match reply {
            Some(Reply::Each(each)) if each.len() == keys.len() => {
                for (key, reply) in keys.into_iter().zip(each) {
                    self.renew_settled(key, sent, Some(reply), now);
                }
            }
            None => {
                for key in keys {
                    self.renew_settled(key, sent, None, now);
                }
            }
            other => {
                let cause = Arc::new(match other {
                    Some(Reply::Failed(e)) => e,
                    _ => Error::backend("renew", "the store's answer to a batch does not fit it"),
                });
                for key in keys {
                    let e = Error::backend("renew", Arc::clone(&cause));
                    self.renew_settled(key, sent, Some(Reply::Failed(e)), now);
                }
            }
        }
    }

    fn renew_settled(&mut self, key: LeaseKey, sent: u64, reply: Option<Reply>, now: u64) {
        if !self.held.get(&key).is_some_and(|h| h.live) {
            return;
        }
        let (refused, error) = match reply {
            Some(Reply::Done) => {
                self.schedule.renewed(key, sent);
                if let Some(until) = self.schedule.trust_until(key) {
                    self.stats.renewals += 1;
                    self.events.push_back(Event::Renewed {
                        key,
                        trust_until: until,
                    });
                }
                return;
            }
            Some(Reply::Refused(e)) => (true, e),
            Some(Reply::Failed(e)) => (false, e),
            Some(Reply::Granted(_) | Reply::Each(_)) => (
                false,
                Error::backend("renew", "the store's answer does not fit a renewal"),
            ),
            None => (
                false,
                Error::backend("renew", "no reply before the lock stopped being trusted"),
            ),
        };
        self.stats.renew_failures += 1;
        self.events.push_back(Event::RenewFailed { key, error });
        if let Some(LeaseEvent::Lost { key, cause }) = self.schedule.renew_failed(key, refused, now)
        {
            self.lose(key, cause);
        }
    }

    fn lose(&mut self, key: LeaseKey, cause: LostCause) {
        if mutants::active(Mutant::LockerLossNotSignalled) {
            return;
        }
        if let Some(held) = self.held.get_mut(&key)
            && held.live
        {
            held.live = false;
            self.stats.held -= 1;
            self.stats.lost += 1;
            self.events.push_back(Event::Ended {
                key,
                how: match cause {
                    LostCause::Refused => Ended::Refused,
                    LostCause::Expired => Ended::Expired,
                },
            });
        }
    }

    fn start_release(&mut self, key: Option<LeaseKey>, grant: Grant, now: u64) {
        let rid = self.next_id;
        self.next_id += 1;
        let deadline = now.saturating_add(duration_millis(self.config.release_timeout));
        self.releases.insert(
            rid,
            Release {
                key,
                grant,
                deadline,
            },
        );
        self.send_unlock(rid, now);
    }

    fn send_unlock(&mut self, rid: u64, now: u64) {
        let Some(r) = self.releases.get(&rid) else {
            return;
        };
        let deadline = r.deadline.min(now.saturating_add(r.grant.ttl.as_millis()));
        let request = Request::Unlock {
            resource: r.grant.resource.clone(),
            lock_id: r.grant.lock_id.clone(),
        };
        self.send(request, Purpose::Unlock { release: rid }, deadline, now);
    }

    fn unlock_settled(&mut self, rid: u64, reply: Option<Reply>, now: u64) {
        let error = match reply {
            // A refusal (no such lock) leaves nothing to release either.
            Some(Reply::Done | Reply::Refused(_)) => {
                if let Some(r) = self.releases.remove(&rid) {
                    self.events.push_back(Event::Released {
                        key: r.key,
                        result: Ok(()),
                    });
                }
                return;
            }
            Some(Reply::Failed(e)) => e,
            Some(Reply::Granted(_) | Reply::Each(_)) => {
                Error::backend("release", "the store's answer does not fit a release")
            }
            None => Error::backend("release", "no reply in time"),
        };
        let Some(r) = self.releases.get(&rid) else {
            return;
        };
        let retry = now.saturating_add(duration_millis(self.config.renew_retry));
        if retry < r.deadline && !mutants::active(Mutant::LockerReleaseNotRetried) {
            self.timers.insert((retry, Timer::Release(rid)));
        } else if let Some(r) = self.releases.remove(&rid) {
            self.events.push_back(Event::Released {
                key: r.key,
                result: Err(error),
            });
        }
    }
}

/// Whether a failed lock request may still have been granted (anything but a bad
/// argument or a refusal).
fn may_have_applied(e: &Error) -> bool {
    !matches!(
        e,
        Error::AlreadyLocked { .. } | Error::InvalidArgument { .. }
    )
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::lock::{LockDetails, LockRequest};
    use crate::table::LockTable;
    use crate::time::Timestamp;

    fn core() -> LockerCore<StdRng> {
        let config = LockerConfig {
            release_timeout: Duration::from_millis(1_000),
            ..LockerConfig::default()
        };
        LockerCore::new(config, StdRng::seed_from_u64(7)).unwrap()
    }

    fn ttl() -> Ttl {
        Ttl::new(Duration::from_millis(1_000)).unwrap()
    }

    fn ask(resource: Resource) -> Ask {
        Ask {
            resource,
            access: Access::Exclusive,
            ttl: ttl(),
            who: Who::default(),
        }
    }

    fn acquire(core: &mut LockerCore<StdRng>, key: LeaseKey, wait: Wait, now: u64) -> Transmit {
        let resource = Resource::new("job").unwrap();
        core.acquire(key, ask(resource), wait, now);
        core.poll_transmit().expect("a lock request")
    }

    /// Grants `t` on a fresh table, as a store would.
    fn grant(t: &Transmit) -> Reply {
        let Request::Lock { lock_id, .. } = &t.request else {
            panic!("not a lock request: {t:?}");
        };
        let details = LockDetails::new().ttl(Duration::from_secs(1));
        let req = LockRequest::new("job", lock_id.as_str(), &details).unwrap();
        Reply::Granted(
            LockTable::new()
                .xlock(&req, Timestamp::from_millis(0))
                .unwrap(),
        )
    }

    fn events(core: &mut LockerCore<StdRng>) -> Vec<Event> {
        std::iter::from_fn(|| core.poll_event()).collect()
    }

    fn refused() -> Reply {
        Reply::Refused(Error::AlreadyLocked {
            resource: Resource::new("job").unwrap(),
        })
    }

    #[test]
    fn a_grant_is_trusted_from_the_send_time_and_renewed_at_the_fraction() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 100);
        assert_eq!(t.deadline, 1_000, "sent + ttl - margin");
        c.handle_reply(t.id, grant(&t), 150);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [Event::Acquired {
                    key: 1,
                    trust_until: 1_000,
                    ..
                }]
            ),
            "{ev:?}"
        );
        assert_eq!(c.poll_timeout(), Some(600));
        c.handle_timeout(600);
        let renew = c.poll_transmit().unwrap();
        assert!(matches!(renew.request, Request::Renew { .. }));
        assert_eq!(renew.deadline, 1_000);
        c.handle_reply(renew.id, Reply::Done, 620);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [Event::Renewed {
                    key: 1,
                    trust_until: 1_500
                }]
            ),
            "{ev:?}"
        );
        assert_eq!(c.stats().renewals, 1);
    }

    #[test]
    fn a_grant_arriving_at_its_trust_deadline_is_released_not_handed_out() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::Forever, 0);
        c.handle_reply(t.id, grant(&t), 900);
        assert!(events(&mut c).is_empty(), "no guard");
        let unlock = c.poll_transmit().unwrap();
        let (Request::Lock { lock_id: a, .. }, Request::Unlock { lock_id: b, .. }) =
            (&t.request, &unlock.request)
        else {
            panic!("{unlock:?}");
        };
        assert_eq!(a, b, "the stale grant's lock id is released");
        let next = c.poll_timeout().unwrap();
        assert!(
            (901..=921).contains(&next),
            "asks again after a jittered backoff: {next}"
        );
        c.handle_timeout(next);
        assert!(matches!(
            c.poll_transmit().unwrap().request,
            Request::Lock { .. }
        ));

        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 0);
        c.handle_reply(t.id, grant(&t), 950);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [Event::AcquireFailed {
                    key: 1,
                    error: Error::Backend { .. }
                }]
            ),
            "{ev:?}"
        );
    }

    #[test]
    fn an_unanswered_lock_request_is_released_and_a_waiting_acquire_asks_again() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::Forever, 0);
        assert_eq!(c.poll_timeout(), Some(900));
        c.handle_timeout(900);
        let unlock = c.poll_transmit().unwrap();
        assert!(matches!(unlock.request, Request::Unlock { .. }));
        // The late reply is ignored: the lock id is being released.
        c.handle_reply(t.id, grant(&t), 901);
        assert!(events(&mut c).is_empty());
        c.handle_reply(unlock.id, Reply::Done, 905);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [Event::Released {
                    key: None,
                    result: Ok(())
                }]
            ),
            "{ev:?}"
        );
    }

    #[test]
    fn refusals_back_off_with_full_jitter_doubling_to_the_cap() {
        let mut c = core();
        let mut now = 0;
        let mut t = acquire(&mut c, 1, Wait::Forever, now);
        let mut waits = Vec::new();
        for _ in 0..12 {
            c.handle_reply(t.id, refused(), now);
            let next = c.poll_timeout().unwrap();
            waits.push(next - now);
            now = next;
            c.handle_timeout(now);
            t = c.poll_transmit().unwrap();
        }
        assert!(waits.iter().all(|w| (1..=1_000).contains(w)), "{waits:?}");
        assert!(waits[0] <= 20 && waits[1] <= 40, "{waits:?}");
        let distinct: BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 6, "jittered: {waits:?}");
    }

    #[test]
    fn an_unanswered_renewal_ends_the_lease_at_its_trust_deadline() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 0);
        c.handle_reply(t.id, grant(&t), 10);
        events(&mut c);
        c.handle_timeout(500);
        assert!(c.poll_transmit().is_some());
        assert_eq!(c.poll_timeout(), Some(900));
        c.handle_timeout(899);
        assert!(events(&mut c).is_empty());
        c.handle_timeout(900);
        let ev = events(&mut c);
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::Ended {
                    key: 1,
                    how: Ended::Expired
                }
            )),
            "{ev:?}"
        );
        assert_eq!(c.stats().lost, 1);
        assert_eq!(c.stats().held, 0);
    }

    #[test]
    fn renewals_falling_due_together_go_out_as_one_batch() {
        let mut c = core();
        for (key, at) in [(1, 0), (2, 10), (3, 20)] {
            let t = acquire(&mut c, key, Wait::No, at);
            c.handle_reply(t.id, grant(&t), at + 1);
        }
        events(&mut c);
        c.handle_timeout(500);
        let batch = c.poll_transmit().unwrap();
        let Request::RenewMany { locks } = &batch.request else {
            panic!("one batch: {batch:?}");
        };
        assert_eq!(locks.len(), 3);
        assert_eq!(batch.deadline, 900, "the earliest trust deadline");
        assert!(c.poll_transmit().is_none());
        let done = || Reply::Done;
        let gone = Reply::Refused(Error::LockNotFound);
        c.handle_reply(batch.id, Reply::Each(vec![done(), gone, done()]), 520);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [
                    Event::Renewed {
                        key: 1,
                        trust_until: 1_400
                    },
                    Event::RenewFailed { key: 2, .. },
                    Event::Ended {
                        key: 2,
                        how: Ended::Refused
                    },
                    Event::Renewed {
                        key: 3,
                        trust_until: 1_400
                    },
                ]
            ),
            "{ev:?}"
        );
    }

    #[test]
    fn a_release_is_retried_until_the_release_timeout() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 0);
        c.handle_reply(t.id, grant(&t), 10);
        events(&mut c);
        c.release(1, 100);
        let mut attempts = 0;
        let mut now = 100;
        while let Some(u) = c.poll_transmit() {
            attempts += 1;
            c.handle_reply(u.id, Reply::Failed(Error::backend("unlock", "down")), now);
            match c.poll_timeout() {
                Some(next) => {
                    now = next;
                    c.handle_timeout(now);
                }
                None => break,
            }
        }
        assert_eq!(attempts, 10, "every 100 ms for 1 s");
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [
                    Event::Ended {
                        key: 1,
                        how: Ended::Released
                    },
                    Event::Released {
                        key: Some(1),
                        result: Err(_)
                    }
                ]
            ),
            "{ev:?}"
        );
        assert!(c.is_idle());
    }

    #[test]
    fn a_cancelled_or_abandoned_acquire_releases_what_it_is_granted() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::Forever, 0);
        c.cancel(1);
        c.handle_reply(t.id, grant(&t), 10);
        assert!(events(&mut c).is_empty());
        assert!(matches!(
            c.poll_transmit().unwrap().request,
            Request::Unlock { .. }
        ));

        let mut c = core();
        let t = acquire(&mut c, 1, Wait::Until(50), 0);
        c.handle_timeout(50);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [Event::AcquireFailed {
                    key: 1,
                    error: Error::Timeout { .. }
                }]
            ),
            "{ev:?}"
        );
        c.handle_reply(t.id, grant(&t), 60);
        assert!(matches!(
            c.poll_transmit().unwrap().request,
            Request::Unlock { .. }
        ));
    }

    #[test]
    fn shutdown_cancels_leases_and_refuses_new_acquires() {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 0);
        c.handle_reply(t.id, grant(&t), 10);
        events(&mut c);
        c.shutdown();
        c.acquire(2, ask(Resource::new("job").unwrap()), Wait::Forever, 20);
        let ev = events(&mut c);
        assert!(
            matches!(
                ev[..],
                [
                    Event::Ended {
                        key: 1,
                        how: Ended::Cancelled
                    },
                    Event::AcquireFailed {
                        key: 2,
                        error: Error::Shutdown
                    }
                ]
            ),
            "{ev:?}"
        );
        assert_eq!(c.poll_timeout(), None, "nothing renewed");
    }
}
