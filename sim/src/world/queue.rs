//! The queues of fair waiters as SEMANTICS.md ("Fair requests and the queue") has them, kept
//! by the world beside the store's own from what reaches the store and what it answers, and
//! the two checks on them. The world's copy is its own: it judges a place live by the store's
//! clock (`now < expires_at`), and fresh (`now < fresh_until`), without the engine's code,
//! so that an engine whose queue goes wrong is seen to.
//!
//! - A refused fair `Lock` request takes a place at the back (`queued_at` now, lapsing its
//!   ticket's lease later), or refreshes its live place where it stands; a place that lapsed
//!   is gone, and the waiter's next refusal takes a new one at the back. The place is fresh
//!   for the ticket's claim lease from the refusal, or stale at once when it was kept far
//!   back; a stale place keeps its order and counts for nobody. A grant removes the
//!   winner's place; a `LeaveQueue` that reaches the store removes the place it names, and
//!   an `Unlock` the places of the lock id it releases.
//! - Handoffs (every seed): a place whose lock id holds a lock on its resource after a
//!   write (other than the grant the write answered) was handed it by that write. It must
//!   have been the first fresh place, past no fresh place, and its lock must run the place's
//!   claim lease from the handoff (`Handoff`); it leaves the queue, and its wait ends there. The
//!   world reads the locks from the store, and judges them by its own copy of the queue; a
//!   release that left its resource free must leave no fresh place waiting.
//! - `fifo` (every seed, whatever its faults): the store grants nobody while a fresh place is
//!   ahead of the grantee's own live place (every fresh place is ahead of a request without
//!   one: a request that is not fair, or a fair one before its first refusal). Every
//!   request of the simulation is exclusive, so every place conflicts. A crashed or paused
//!   waiter's place stays live until it lapses by the store's clock, and blocks meanwhile.
//! - `bounded_waiting` (seeds checked for handovers, [`crate::FaultMix::checks_handovers`]:
//!   calm ones): a fair waiter that keeps its place is granted after waiting, while its
//!   resource is *free* at the store (no lock on it, counting an expired one until its
//!   takeover grace ends), at most
//!
//!   `(k + 1) × G + c × Q`
//!
//!   where `k` is the number of live places ahead of it when it took its place, `c` how
//!   many of their waiters stopped waiting without being granted (crashed; their places
//!   lapse), `G` the handover bound of `handover_liveness` (four one-way latencies, plus
//!   the hint delay the Locker's rule allows the waiters concerned, plus how far a waiter's
//!   clock falls behind over one `max_backoff`), and `Q` what a dead place ahead may cost:
//!   its lease (`queue_ttl`), plus how far the next waiter's clock falls behind over it
//!   (the waiter asks when its last refusal said the place lapses), plus four latencies.
//!   Every grant while it waits is to a place ahead of it (`fifo`), so its wait is the time
//!   the locks of at most `k` waiters ahead and of the holder it found were held, plus at
//!   most `k + 1` handovers, plus the dead places. The time the resource is held is not
//!   bounded by the rule (a holder may hold it while it waits for its job's next resource),
//!   so it is not counted: what is counted is the time nobody holds what the waiter waits
//!   for. The check is judged as time goes on (a waiter the queue blocks for good is seen
//!   to), and at the grant.

use std::collections::BTreeSet;

use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{Reply, Request};
use lockwright_engine::{Error, LockId, Timestamp};

use super::app::App;
use super::{EPOCH, World};
use crate::report::{Violation, ViolationKind};

/// One place in a resource's queue, as the specification has it.
struct Place {
    ticket: LockId,
    /// The lock id a handoff grants it, and the claim lease.
    lock_id: LockId,
    lease: std::time::Duration,
    /// Until when it may be handed the lock (the store's clock).
    fresh_until: Timestamp,
    /// The client incarnation whose request took it.
    client: usize,
    incarnation: u32,
    /// The acquire it waits for, if the client was acquiring the resource when it took it.
    key: Option<LeaseKey>,
    /// When it lapses (the store's clock).
    expires: Timestamp,
    /// `bounded_waiting`'s account of the wait, in seeds checked for it.
    wait: Option<Wait>,
}

/// A fair wait under `bounded_waiting`.
struct Wait {
    /// When the place was taken (real time, ms).
    since: u64,
    /// The resource's free time then.
    free_then: u64,
    /// The places ahead when it was taken: their tickets and waiters.
    ahead: Vec<(LockId, usize, u32)>,
    /// How long dead places held the queue back then (places that had lapsed a little
    /// before, whose waiters behind may not know yet: [`World::queue_holds_back`]), in ms.
    held_back: u64,
}

/// How long a resource has been free at the store: its locks block grants until
/// `blocked_until` (real time); `total` is the free time up to `checked`.
#[derive(Clone, Copy, Default)]
struct FreeClock {
    total: u64,
    checked: u64,
    blocked_until: u64,
}

impl FreeClock {
    /// The free time up to real time `t` (not before `checked`).
    fn at(&self, t: u64) -> u64 {
        self.total + t.saturating_sub(self.checked.max(self.blocked_until))
    }
}

/// The real instant (ms) at which the store's clock, `offset` ahead of real time, reads
/// `t`.
fn real_ms(t: Timestamp, offset: u64) -> u64 {
    t.as_millis()
        .saturating_sub(EPOCH.as_millis())
        .saturating_sub(offset)
}

/// The world's copy of the queues.
#[derive(Default)]
pub(super) struct Queues {
    places: Vec<Vec<Place>>,
    /// Tickets whose place lapsed, or was handed the lock after its waiter stopped waiting:
    /// places whose waiters were never granted.
    lapsed: BTreeSet<LockId>,
    /// When places of each resource lapsed (real time, ms).
    lapse_times: Vec<Vec<u64>>,
    free: Vec<FreeClock>,
    /// Whether `bounded_waiting` is checked in this seed.
    bounded: bool,
}

impl Queues {
    pub(super) fn new(resources: usize, bounded: bool) -> Self {
        Queues {
            places: (0..resources).map(|_| Vec::new()).collect(),
            lapsed: BTreeSet::new(),
            lapse_times: vec![Vec::new(); resources],
            free: vec![FreeClock::default(); resources],
            bounded,
        }
    }
}

impl World {
    /// Drops the places of resource `r` that lapsed by the store's clock `now`.
    fn drop_lapsed(&mut self, r: usize, now: Timestamp) {
        let offset = self.store_offset;
        let q = &mut self.queues;
        let mut lapsed = 0;
        q.places[r].retain(|p| {
            let live = now < p.expires;
            if !live {
                q.lapsed.insert(p.ticket.clone());
                q.lapse_times[r].push(real_ms(p.expires, offset));
                lapsed += 1;
            }
            live
        });
        self.report.tally.places_lapsed += lapsed;
    }

    /// Real time (ms) at which a place lapses.
    fn lapses_at(&self, p: &Place) -> u64 {
        real_ms(p.expires, self.store_offset)
    }

    /// Whether the waiter of a place still waits for it: the same incarnation, neither
    /// crashed, acquiring the resource under the same acquire.
    fn place_waits(&self, p: &Place, r: usize) -> bool {
        let c = &self.clients[p.client];
        c.incarnation == p.incarnation
            && !c.crashed
            && matches!(c.app, App::Acquiring { key, resource }
                if resource == r && p.key.is_none_or(|k| k == key))
    }

    /// Before the store applies `request` (its clock set): nothing yet; after, with its
    /// reply: the queue follows, and a grant is checked for `fifo` and `bounded_waiting`.
    pub(super) fn queue_after(
        &mut self,
        client: usize,
        incarnation: u32,
        request: &Request,
        reply: &Reply,
        store_now: Timestamp,
    ) {
        self.follow_handoffs(request, reply, store_now);
        match (request, reply) {
            (Request::Lock { request, .. }, Reply::Granted(status)) => {
                let r = self.resource_index(&request.resource);
                // A claim takes a lock the store handed the place at the head of the line
                // earlier (the engine's rule, checked by the model), or one granted to an
                // earlier attempt: not a grant past anybody.
                let claim = status.renewed_at.is_some();
                self.drop_lapsed(r, store_now);
                let ticket = request.fair.as_ref().map(|t| &t.id);
                let own =
                    ticket.and_then(|t| self.queues.places[r].iter().position(|p| &p.ticket == t));
                let before = &self.queues.places[r][..own.unwrap_or(self.queues.places[r].len())];
                let who: Vec<usize> = before
                    .iter()
                    .filter(|p| store_now < p.fresh_until)
                    .map(|p| p.client)
                    .collect();
                let ahead = who.len();
                if !self.queues.places[r].is_empty() {
                    self.report.tally.grants_past_queue += 1;
                }
                if ticket.is_some() {
                    self.report.tally.fair_grants += 1;
                }
                if ahead > 0 && !claim {
                    let what = if ticket.is_some() {
                        "a fair request"
                    } else {
                        "a request that is not fair"
                    };
                    self.violation(
                        ViolationKind::QueueOrder,
                        format!(
                            "r{r} granted to {what} of client {client} while {ahead} fresh \
                             place(s) were ahead of it (of clients {who:?})"
                        ),
                    );
                }
                if let Some(i) = own {
                    let place = self.queues.places[r].remove(i);
                    if let Some(wait) = place.wait {
                        self.judge_wait(r, place.client, &wait, true);
                    }
                }
            }
            (
                Request::Lock { request, .. },
                Reply::Refused(Error::AlreadyLocked {
                    queued, retry_in, ..
                }),
            ) => {
                let Some(ticket) = &request.fair else {
                    return;
                };
                let r = self.resource_index(&request.resource);
                self.drop_lapsed(r, store_now);
                if self.record {
                    let ahead: Vec<usize> = self.queues.places[r]
                        .iter()
                        .take_while(|p| p.ticket != ticket.id)
                        .map(|p| p.client)
                        .collect();
                    self.note(
                        Some(client),
                        format!(
                            "store refuses r{r} (says {queued:?} ahead, free in {retry_in:?}; \
                             places of clients {ahead:?} ahead)"
                        ),
                    );
                }
                let expires = store_now.saturating_add(ticket.ttl.as_duration());
                let fresh_until = ticket.claim.map_or(Timestamp::EPOCH, |c| {
                    store_now.saturating_add(c.as_duration())
                });
                let lease = ticket.handoff_lease().as_duration();
                self.report.tally.far_keeps += u64::from(ticket.claim.is_none());
                if let Some(p) = self.queues.places[r]
                    .iter_mut()
                    .find(|p| p.ticket == ticket.id)
                {
                    p.expires = expires;
                    p.fresh_until = fresh_until;
                    p.lease = lease;
                    return;
                }
                let key = match self.clients[client].app {
                    App::Acquiring { key, resource } if resource == r => Some(key),
                    _ => None,
                };
                self.report.tally.places_taken += 1;
                let held_back = self
                    .queue_holds_back(r, self.now)
                    .map_or(0, |b| b.saturating_sub(self.now));
                let wait = self.queues.bounded.then(|| Wait {
                    held_back,
                    since: self.now,
                    free_then: self.queues.free[r].at(self.now),
                    ahead: self.queues.places[r]
                        .iter()
                        .map(|p| (p.ticket.clone(), p.client, p.incarnation))
                        .collect(),
                });
                self.queues.places[r].push(Place {
                    ticket: ticket.id.clone(),
                    lock_id: request.lock_id.clone(),
                    lease,
                    fresh_until,
                    client,
                    incarnation,
                    key,
                    expires,
                    wait,
                });
            }
            (Request::LeaveQueue { resource, ticket }, _) => {
                self.give_up_places(resource, store_now, |p| &p.ticket == ticket);
            }
            // A release gives up the places of its lock id where it releases.
            (
                Request::Unlock {
                    resource, lock_id, ..
                },
                _,
            ) => self.give_up_places(resource, store_now, |p| &p.lock_id == lock_id),
            _ => {}
        }
    }

    /// The places of `resource` that `gone` picks leave the queue (given up by a waiter that
    /// left, or by a release of their lock id), after the ones that lapsed by `store_now`.
    fn give_up_places(
        &mut self,
        resource: &lockwright_engine::Resource,
        store_now: Timestamp,
        gone: impl Fn(&Place) -> bool,
    ) {
        let r = self.resource_index(resource);
        self.drop_lapsed(r, store_now);
        let before = self.queues.places[r].len();
        self.queues.places[r].retain(|p| !gone(p));
        let left = before - self.queues.places[r].len();
        self.report.tally.places_left += left as u64;
    }

    /// After the store applied `request`, before the queue follows its answer: the places
    /// of the resource it wrote whose lock id now holds a lock there were handed it by this
    /// write (all but the request's own place, when it was granted: that is its grant). Each
    /// must have been the first fresh place, and its lock must run the place's claim lease
    /// from the handoff (`Handoff`); it leaves the queue, and its wait ends there.
    fn follow_handoffs(&mut self, request: &Request, reply: &Reply, store_now: Timestamp) {
        // The resource written, the request's own place when it was granted, and the places
        // the write took out before it handed over: the one a waiter leaves, or those of the
        // lock id a release unlocks.
        let (resource, own, left, released) = match (request, reply) {
            (Request::Lock { request, .. }, Reply::Granted(_)) => (
                &request.resource,
                request.fair.as_ref().map(|t| &t.id),
                None,
                None,
            ),
            (Request::Lock { request, .. }, _) => (&request.resource, None, None, None),
            (
                Request::Unlock {
                    resource, lock_id, ..
                },
                _,
            ) => (resource, None, None, Some(lock_id)),
            (Request::LeaveQueue { resource, ticket }, _) => (resource, None, Some(ticket), None),
            _ => return,
        };
        let gone = |p: &Place| left == Some(&p.ticket) || released == Some(&p.lock_id);
        let r = self.resource_index(resource);
        if self.queues.places[r].is_empty() {
            return;
        }
        let locks = self.locks_on(r);
        let mut i = 0;
        let mut fresh_ahead = 0;
        while i < self.queues.places[r].len() {
            let p = &self.queues.places[r][i];
            let lock = locks.iter().find(|l| l.lock_id == p.lock_id);
            let live = store_now < p.expires;
            let fresh = live && store_now < p.fresh_until;
            let Some(lock) = lock.filter(|_| Some(&p.ticket) != own) else {
                fresh_ahead += usize::from(fresh && !gone(p));
                i += 1;
                continue;
            };
            let lease_ends = store_now.saturating_add(p.lease);
            let client = p.client;
            let fault = if !live {
                Some("a place that had lapsed".to_owned())
            } else if !fresh {
                Some(
                    "a stale place (kept far back, or not asked for within its claim lease)"
                        .to_owned(),
                )
            } else if fresh_ahead > 0 {
                Some(format!("a place behind {fresh_ahead} fresh place(s)"))
            } else if lock.expires_at != Some(lease_ends) {
                Some(format!(
                    "a claim lease to {:?}, not the place's lease from the handoff ({lease_ends:?})",
                    lock.expires_at
                ))
            } else {
                None
            };
            if let Some(fault) = fault {
                self.violation(
                    ViolationKind::Handoff,
                    format!("r{r} was handed to {fault} (client {client})"),
                );
            }
            self.note(Some(client), format!("store hands r{r} to its place"));
            self.report.tally.places_handed += 1;
            let p = &self.queues.places[r][i];
            let waiter = p.key.map(|key| (p.client, p.incarnation, key));
            if !self.place_waits(p, r) {
                let ticket = p.ticket.clone();
                self.queues.lapsed.insert(ticket);
            }
            let lock = lock.clone();
            self.handed_to(r, waiter, &lock);
            let place = self.queues.places[r].remove(i);
            if let Some(wait) = place.wait {
                self.judge_wait(r, place.client, &wait, true);
            }
        }
    }

    /// After the store applied `request`: the free clocks of the resources whose locks it
    /// may have changed move on.
    pub(super) fn locks_changed(&mut self, request: &Request) {
        if !self.queues.bounded {
            return;
        }
        let touched: Vec<usize> = match request {
            Request::Lock { request, .. } => vec![self.resource_index(&request.resource)],
            Request::Renew { lock, .. } => vec![self.resource_index(&lock.resource)],
            Request::RenewMany { locks, .. } => locks
                .iter()
                .map(|l| self.resource_index(&l.resource))
                .collect(),
            Request::Unlock { resource, .. } => vec![self.resource_index(resource)],
            Request::LeaveQueue { .. } => Vec::new(),
        };
        for r in touched {
            let now = self.now;
            let blocked_until = self
                .locks_on(r)
                .iter()
                .map(|l| self.abandoned_at(l))
                .max()
                .unwrap_or(0);
            let f = &mut self.queues.free[r];
            f.total = f.at(now);
            f.checked = now;
            f.blocked_until = blocked_until;
        }
    }

    /// The `bounded_waiting` budget of a wait on resource `r`, in ms of free time.
    fn wait_budget(&self, r: usize, client: usize, wait: &Wait) -> u64 {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let k = wait.ahead.len() as u64;
        // Places ahead whose waiters stopped waiting without being granted.
        let dead = wait
            .ahead
            .iter()
            .filter(|(ticket, _, _)| {
                self.queues.lapsed.contains(ticket)
                    || self.queues.places[r]
                        .iter()
                        .any(|p| &p.ticket == ticket && !self.place_waits(p, r))
            })
            .count() as u64;
        // The hint delay of the waiters concerned (this one and those ahead).
        let heard = std::iter::once(client)
            .chain(wait.ahead.iter().map(|&(_, c, _)| c))
            .map(|c| self.clients[c].wake_hints)
            .max()
            .unwrap_or(0);
        let latencies = self.latencies_bound();
        let gap = latencies
            + self.hint_delay_bound(heard)
            + self.drift_slack(ms(self.config.max_backoff));
        // A dead place may be handed the lock before it lapses, which holds it for the
        // place's claim lease and the takeover grace from the handoff.
        let lapse = ms(self.config.queue_ttl) + self.claim_hold() + self.lapse_slack();
        (k + 1) * gap + dead * lapse + wait.held_back
    }

    /// How long after a dead place lapses the waiter behind it may take to be granted: no
    /// hint says that a place lapsed, and a waiter whose last refusal counted that place
    /// ahead of it leaves releases to it (the Locker's rule: it neither polls nor acts on
    /// `Freed` while others are ahead); it asks again when its last refusal said the locks
    /// and places in its way end, or at the latest to keep its place, `renew_fraction` of
    /// `queue_ttl` after its last attempt was sent (500 ms). So: that interval, plus how
    /// far the waiter's clock falls behind over it, plus four latencies.
    /// How long a lock handed to a place that never claims it holds its resource from the
    /// handoff: the claim lease (the place's lease) and the takeover grace. A handoff comes
    /// no later than the place lapses.
    pub(super) fn claim_hold(&self) -> u64 {
        u64::try_from(self.config.queue_ttl.as_millis()).unwrap_or(u64::MAX) + self.opts.grace_ms
    }

    pub(super) fn lapse_slack(&self) -> u64 {
        let keep = self.config.queue_ttl.mul_f64(self.config.renew_fraction);
        let keep = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        keep + self.drift_slack(keep) + self.latencies_bound()
    }

    /// Judges a wait on resource `r` of `client`'s place: at its grant (`granted`), or as
    /// time goes on. Returns whether it broke the bound.
    fn judge_wait(&mut self, r: usize, client: usize, wait: &Wait, granted: bool) -> bool {
        let free = self.queues.free[r].at(self.now) - wait.free_then;
        let budget = self.wait_budget(r, client, wait);
        if granted {
            let t = &mut self.report.tally;
            t.fair_waits_checked += 1;
            t.fair_waits_behind += u64::from(!wait.ahead.is_empty());
            t.longest_fair_wait_ms = t.longest_fair_wait_ms.max(self.now - wait.since);
            t.most_free_wait_ms = t.most_free_wait_ms.max(free);
        }
        if free <= budget {
            return false;
        }
        let detail = format!(
            "client {client} took its place in r{r}'s queue at {} ms behind {} waiter(s) \
             (clients {:?}) and {} after {} ms, {free} ms of them with r{r} free (bound {budget} ms)",
            wait.since,
            wait.ahead.len(),
            wait.ahead.iter().map(|a| a.1).collect::<Vec<_>>(),
            if granted {
                "was granted"
            } else {
                "still waits"
            },
            self.now - wait.since,
        );
        self.note(None, format!("VIOLATION BoundedWaiting: {detail}"));
        self.report.violations.push(Violation {
            at: self.now,
            kind: ViolationKind::BoundedWaiting,
            detail,
        });
        true
    }

    /// Time moves on to `until`: the waits under way are judged (each broken bound is
    /// reported once; a waiter that stopped waiting is no longer followed).
    pub(super) fn advance_waits(&mut self, until: u64) {
        if !self.queues.bounded || self.healing {
            return;
        }
        for r in 0..self.queues.places.len() {
            let mut i = 0;
            while i < self.queues.places[r].len() {
                let p = &self.queues.places[r][i];
                if p.wait.is_none() {
                    i += 1;
                    continue;
                }
                let waits = self.place_waits(p, r) && self.lapses_at(p) > until;
                let client = p.client;
                let mut wait = self.queues.places[r][i].wait.take();
                if waits && let Some(w) = &wait {
                    if self.judge_wait(r, client, w, false) {
                        wait = None;
                    }
                } else {
                    wait = None;
                }
                self.queues.places[r][i].wait = wait;
                i += 1;
            }
        }
    }

    /// How many places of `r`'s queue are fresh at the store's instant `now`.
    pub(super) fn fresh_places(&self, r: usize, now: Timestamp) -> usize {
        let places = self.queues.places[r].iter();
        places
            .filter(|p| now < p.expires && now < p.fresh_until)
            .count()
    }

    /// How long dead places hold back a handover of resource `r` that came free at `since`:
    /// until [`lapse_slack`](Self::lapse_slack) after the last of the places that lapsed
    /// since then, or lapsed a little before (the waiter behind may not know yet), and of
    /// the live places of waiters that stopped waiting (crashed) ahead of the first waiter
    /// still waiting. `None` if none does.
    pub(super) fn queue_holds_back(&self, r: usize, since: u64) -> Option<u64> {
        // A dead place ahead may be handed the lock before it lapses (at `x` at the latest),
        // and holds it for its claim lease and the grace from then.
        let slack = self.lapse_slack() + self.claim_hold();
        let mut lapses: Vec<u64> = self.queues.lapse_times[r]
            .iter()
            .copied()
            .filter(|&x| x + slack > since)
            .collect();
        for p in &self.queues.places[r] {
            let x = self.lapses_at(p);
            if x > since && self.place_waits(p, r) {
                break;
            }
            if x + slack > since {
                lapses.push(x);
            }
        }
        lapses.into_iter().max().map(|x| x + slack)
    }
}
