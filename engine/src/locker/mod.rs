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
//! - A waiting acquire asks again after a refusal with full-jitter exponential backoff (no
//!   later than when the store said the locks in its way end), and after a failed or
//!   unanswered attempt too, until attempts have failed without an answer from the store
//!   for `unavailable_timeout`.
//! - A waiting acquire also asks again when the store hints that its resource came free
//!   ([`LockerCore::handle_hint`]). Hints only bring attempts forward: without them the
//!   backoff still asks at least every `max_backoff`.

mod acquire;
mod config;
mod fair;
mod hints;
mod messages;
mod release;
mod renew;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rand_core::RngCore;

use crate::access::Access;
use crate::error::Error;
use crate::lease::{LeaseEvent, LeaseKey, LeaseSchedule};
use crate::names::{LockId, Resource};
use crate::status::{Holder, Renewal};
use crate::time::{LocalMs, Ttl, duration_millis, validate_margin};
use crate::trust::trust_until;

pub use self::config::{LockerConfig, LockerStats};
pub use self::fair::NEAR_HEAD;
pub use self::messages::{Ended, Event, Reply, Request, Transmit};

/// The number of one request the core asked for, to match its reply.
pub type RequestId = u64;

/// Who takes a lock (owner, host, comment), shared by every attempt of one acquire. The core
/// does not read it: it travels to the store with each lock request.
pub type Who = Arc<Holder>;

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
    /// Wait in the resource's queue ([`crate::queue`]): a refused attempt takes (or keeps)
    /// a place, and the lock goes to the waiters in turn. Only for waiting acquires; a
    /// one-shot acquire never takes a place.
    pub fair: bool,
}

/// How long an acquire waits while the lock is held by others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// One attempt: a refusal ends the acquire with `AlreadyLocked`.
    No,
    /// Ask again after every refusal, stale grant or unanswered attempt, without end.
    Forever,
    /// As `Forever`, giving up with `Timeout` at this local instant.
    Until(LocalMs),
}

#[derive(Debug)]
struct Acquire {
    ask: Ask,
    wait: Wait,
    backoff_ms: u64,
    attempt: Option<RequestId>,
    /// When the first of the attempts that failed since the store last answered was sent.
    failing_since: Option<LocalMs>,
    /// When the next attempt is due: the one `Timer::Attempt` of this acquire that counts.
    retry_at: Option<LocalMs>,
    /// The next (or the in-flight) attempt was brought forward by a hint.
    by_hint: bool,
    /// A hint that the resource came free arrived while an attempt was in flight: a
    /// refusal of that attempt may predate the change, so it asks again at once.
    hinted: bool,
    /// Attempts a hint brought forward that were refused all the same (others were woken
    /// too): each doubles the random delay before acting on the next hint.
    contention: u32,
    /// When the last refusal said the locks in the way end (local), so that a retry
    /// rescheduled later (after a hint) still asks by then.
    free_at: Option<LocalMs>,
    /// A fair acquire's place in the queue (see [`fair`]).
    place: Option<fair::Place>,
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
    /// A lock request of acquire `key`, with the lock it may grant and, for a fair one, its
    /// ticket (an orphaned fair attempt gives up the place it may have taken).
    Lock {
        key: LeaseKey,
        grant: Grant,
        ticket: Option<LockId>,
    },
    Renew {
        key: LeaseKey,
    },
    RenewMany {
        keys: Vec<LeaseKey>,
    },
    Unlock {
        release: u64,
    },
    /// Giving a place up; then the lock id is released (after the leave, so that no
    /// handoff to the place can come after the release).
    LeaveQueue {
        then_release: Grant,
    },
}

#[derive(Debug)]
struct InFlight {
    sent: LocalMs,
    deadline: LocalMs,
    purpose: Purpose,
}

#[derive(Debug)]
struct Release {
    key: Option<LeaseKey>,
    grant: Grant,
    deadline: LocalMs,
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
    renew_margin: Duration,
    rng: R,
    schedule: LeaseSchedule,
    acquires: BTreeMap<LeaseKey, Acquire>,
    held: BTreeMap<LeaseKey, Held>,
    requests: BTreeMap<RequestId, InFlight>,
    releases: BTreeMap<u64, Release>,
    /// Pending timers; entries whose subject is gone are skipped when they fire.
    timers: BTreeSet<(LocalMs, Timer)>,
    outbox: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: LockerStats,
    next_id: u64,
    shut_down: bool,
    /// The latest local time the driver passed in (for requests made where none is given:
    /// a cancelled fair acquire's leaving the queue).
    last_now: LocalMs,
    /// The store's hints reach this core: a hint came since the last subscription ended
    /// ([`LockerCore::hints_ended`]). Waiting acquires then rely on them, and poll only as a
    /// safety net.
    hearing: bool,
}

impl<R: RngCore> LockerCore<R> {
    /// A core with `config` whose renewals ask the store with `renew_margin` (the client's:
    /// the store refuses to renew a lock that expires within it), drawing lock ids and
    /// jitter from `rng` (use a cryptographic generator seeded from the OS outside
    /// simulation: lock ids are secrets).
    ///
    /// # Errors
    /// As [`LockerConfig::lease_config`], and `InvalidArgument` naming `renew_margin` when
    /// it is over 100 years.
    pub fn new(config: LockerConfig, renew_margin: Duration, rng: R) -> Result<Self, Error> {
        let lease = config.lease_config()?;
        let renew_margin = validate_margin(renew_margin)?;
        Ok(LockerCore {
            config,
            renew_margin,
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
            last_now: LocalMs::ZERO,
            hearing: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LockerConfig {
        &self.config
    }

    /// The renew margin its renewals ask with.
    pub fn renew_margin(&self) -> Duration {
        self.renew_margin
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
    pub fn acquire(&mut self, key: LeaseKey, ask: Ask, wait: Wait, now: LocalMs) {
        self.last_now = self.last_now.max(now);
        let error = if self.shut_down {
            Some(Error::Shutdown)
        } else if trust_until(LocalMs::ZERO, ask.ttl, self.config.drift_margin).is_none() {
            Some(Error::invalid(
                "ttl",
                "must be longer than the locker's drift margin",
            ))
        } else if let Some(left) = self.left_at_renewal(ask.ttl) {
            Some(Error::invalid(
                "ttl",
                format!(
                    "leaves {left:?} at the renewal point, not more than the client's renew \
                     margin ({:?}), so every renewal would be refused: use a longer TTL or a \
                     client with a smaller margin",
                    self.renew_margin
                ),
            ))
        } else if self.acquires.contains_key(&key) || self.held.contains_key(&key) {
            Some(Error::invalid("key", "is already in use"))
        } else if let Err(e) = ask.who.check() {
            // The core builds each attempt's request unchecked: owner, host and comment are
            // checked here, once.
            Some(e.into())
        } else {
            None
        };
        if let Some(error) = error {
            self.events.push_back(Event::AcquireFailed { key, error });
            return;
        }
        if let Wait::Until(deadline) = wait
            && deadline <= now
        {
            // Past its deadline before it began: nothing is sent, so nothing can be granted
            // after the caller was told `Timeout`.
            self.events.push_back(Event::AcquireFailed {
                key,
                error: Error::Timeout {
                    resource: ask.resource,
                },
            });
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
                failing_since: None,
                retry_at: None,
                by_hint: false,
                hinted: false,
                contention: 0,
                free_at: None,
                place: None,
            },
        );
        if let Some(a) = self.acquires.get_mut(&key)
            && a.ask.fair
            && a.wait != Wait::No
        {
            let bits = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
            let lock_bits =
                (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
            a.place = Some(fair::Place::new(
                LockId::from_random(bits),
                LockId::from_random(lock_bits),
            ));
        }
        self.attempt(key, now);
    }

    /// What a lease of `ttl` has left when its renewal falls due, if that is not more than
    /// the renew margin (so the store would refuse every renewal).
    fn left_at_renewal(&self, ttl: Ttl) -> Option<Duration> {
        let left = ttl.as_duration().mul_f64(1.0 - self.config.renew_fraction);
        (left <= self.renew_margin).then_some(left)
    }

    /// Abandons the acquire `key` (its caller is gone): whatever its request in flight is
    /// granted is released. A key that is no longer acquiring is left alone.
    pub fn cancel(&mut self, key: LeaseKey) {
        // The request stays in flight with its purpose; with the acquire gone, its reply
        // is an orphan's.
        if let Some(a) = self.acquires.remove(&key) {
            self.leave_queue(a);
        }
    }

    /// Releases the lease `key`: it stops being trusted and renewed at once
    /// ([`Event::Ended`] with [`Ended::Released`] if it was live), and its lock id is
    /// unlocked, retried until `release_timeout` ([`Event::Released`]). A key the core
    /// does not hold is reported released at once.
    pub fn release(&mut self, key: LeaseKey, now: LocalMs) {
        self.last_now = self.last_now.max(now);
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
        for (key, a) in std::mem::take(&mut self.acquires) {
            self.leave_queue(a);
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
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    /// The next event to act on.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`LockerCore::handle_timeout`] next (local ms), if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<LocalMs> {
        let timer = self.timers.first().map(|(t, _)| *t);
        match (timer, self.schedule.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The store answered request `id` at local time `now`. Replies to requests the core
    /// no longer waits for (past their deadline) are ignored.
    pub fn handle_reply(&mut self, id: RequestId, reply: Reply, now: LocalMs) {
        self.last_now = self.last_now.max(now);
        let Some(request) = self.requests.remove(&id) else {
            return;
        };
        self.timers.remove(&(request.deadline, Timer::Request(id)));
        self.settle(id, request, Some(reply), now);
    }

    /// Time has reached `now`: requests past their deadline count as unanswered, waiting
    /// acquires ask again or give up, renewals are sent, leases whose trust ran out end.
    pub fn handle_timeout(&mut self, now: LocalMs) {
        self.last_now = self.last_now.max(now);
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
                    if self
                        .acquires
                        .get(&key)
                        .is_some_and(|a| a.attempt.is_none() && a.retry_at == Some(at))
                    {
                        self.attempt(key, now);
                    }
                }
                Timer::GiveUp(key) => {
                    if let Some(a) = self.acquires.remove(&key) {
                        let resource = a.ask.resource.clone();
                        self.leave_queue(a);
                        self.events.push_back(Event::AcquireFailed {
                            key,
                            error: Error::Timeout { resource },
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

    fn send(
        &mut self,
        request: Request,
        purpose: Purpose,
        deadline: LocalMs,
        now: LocalMs,
    ) -> RequestId {
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

    /// How a request ended: with a reply, or (`None`) unanswered by its deadline.
    fn settle(&mut self, id: RequestId, request: InFlight, reply: Option<Reply>, now: LocalMs) {
        match request.purpose {
            Purpose::Lock { key, grant, ticket } => {
                let ours = self
                    .acquires
                    .get(&key)
                    .is_some_and(|a| a.attempt == Some(id));
                if ours {
                    self.lock_settled(key, grant, request.sent, reply, now);
                } else {
                    self.orphan_settled(grant, ticket, reply, now);
                }
            }
            Purpose::Renew { key } => self.renew_settled(key, request.sent, reply, now),
            Purpose::RenewMany { keys } => self.batch_settled(keys, request.sent, reply, now),
            Purpose::Unlock { release } => self.unlock_settled(release, reply, now),
            // Best effort: a place that stays lapses with its lease.
            Purpose::LeaveQueue { then_release } => self.start_release(None, then_release, now),
        }
    }
}
