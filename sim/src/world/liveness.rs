//! `handover_liveness`: in a seed checked for handovers ([`FaultMix::checks_handovers`]:
//! a fast network that loses nothing, no pauses, no failovers, no dropped hint streams), a
//! resource that clients wait for does not stay free. `L` below is the seed's largest
//! one-way latency (3 ms).
//!
//! - A handoff: when the store hands a lock to the place of a fair waiter that still waits
//!   (in a release, or any write that finds the resource free: see `world/queue.rs`), the
//!   waiter holds it (or somebody is granted the resource) by the deadline a release
//!   gives it, below: the store's `First` reaches it, and it holds the lock on it (the
//!   hint says what was handed) or asks at once and claims it. A process whose
//!   waiters are all far back in their lines keeps no subscription (`LockerCore::wants_hints`);
//!   a waiter of such a process that is handed the lock claims it with the attempt that
//!   keeps its place, within `renew_fraction` of `queue_ttl` (plus drift and latencies).
//! - A release: when an unlock removes the lock on a resource at the store and leaves it
//!   free while clients wait for it (each: its application acquiring it, its core
//!   waiting), the store grants the resource again (to anybody) by the earliest deadline
//!   of the waiters still waiting: the unlock's instant plus [`HANDOVER_LATENCIES`] `L`
//!   (4 `L` = 12 ms), plus that waiter's hint delay. That delay is the shipped rule
//!   (`LockerCore::handle_hint`): a waiter acts on a hint at once until hint-woken attempts
//!   of its acquire are refused (it lost races to other waiters), then after a random delay
//!   below `hint_spread` (2 ms) doubled per refusal, up to `max_backoff`; the simulator
//!   bounds those refusals by the `Freed` hints for that resource and `Missed` hints the
//!   waiter heard during the acquire (each wakes at most one attempt). The way the shipped
//!   Locker meets it: the store's `Freed` reaches the waiter, which asks (two `L`); or a
//!   subscription still on its way when the release came sends `Missed` instead (three);
//!   an attempt in flight refused before the release is asked again at once as its
//!   refusal comes back (within three). Without hints a waiter asks only on its backoff,
//!   up to `max_backoff` (half the TTL, 500 ms) later, and so does a racing waiter, which
//!   never acts on a hint: its deadline is `max_backoff` (plus its clock's drift over it)
//!   after the release, plus the latencies.
//! - A takeover: when a lock whose holder crashed is abandoned (its expiry plus the
//!   takeover grace, on the store's clock, which no failover moves in these seeds) while
//!   clients wait for its resource, the store grants it within the same 4 `L`, plus how
//!   far a waiter's clock may fall behind, at the seed's drift bound, over one
//!   `max_backoff` (the longest wait it measures on its own clock, from the refusal whose
//!   `retry_in` said when the lock is abandoned: 27 ms at 5%, 0 without drift). No hint says
//!   that a lock expired: the refusal's `retry_in` is how the waiter knows, and without it
//!   the waiter asks only on its backoff.
//!
//! With fair waiters, a live place in the resource's queue whose waiter crashed holds the
//! resource back from every waiter behind it until it lapses (by the store's clock), and
//! no hint says it lapsed: the waiter behind, which leaves releases to the waiters ahead of
//! it, learns of it at its next attempt, at the latest the one that keeps its place. The
//! obligation then waits for the lapse, plus that attempt's interval (`renew_fraction` of
//! `queue_ttl`), plus how far the waiter's clock falls behind over it, plus four latencies.
//! See `world/queue.rs`.
//!
//! A waiter that stops waiting for the resource (it crashed, or gave up as the world
//! heals) no longer counts; with none left the obligation lapses. The handovers and
//! takeovers checked (met or violated) are counted, so that the check is seen not to be
//! vacuous, and so is the slowest of each that was met.
//!
//! [`FaultMix::checks_handovers`]: crate::FaultMix::checks_handovers

use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{NEAR_HEAD, Reply, Request};
use lockwright_engine::{Filter, LockId, LockStatus, LockStore};

use super::app::App;
use super::{EPOCH, World, at_once};
use crate::report::{Violation, ViolationKind};

/// The bound of a handover, in one-way latencies (the seed's largest): the `Freed` hint
/// reaches the waiter, which asks at once (two); if the waiter's subscription was still on
/// its way to the store when the release came, its `Missed` comes a round trip after it
/// started waiting instead (three); an attempt in flight whose refusal predates the release
/// comes back while the hint does, and the waiter asks again at once (within the same
/// three). One more to spare: a wake lands on the first millisecond its drifting clock
/// reads the instant it asked for.
pub(super) const HANDOVER_LATENCIES: u64 = 4;

/// A client incarnation waiting for a resource under a lease key.
type Waiter = (usize, u32, LeaseKey);

/// A resource left free while clients waited for it: the store must grant it by the
/// deadline of some waiter still waiting.
pub(super) struct Handover {
    resource: usize,
    /// When it came free (real time, ms).
    since: u64,
    /// A crashed holder's lock was abandoned (else, a release or a handoff).
    takeover: bool,
    /// The store handed the lock to a waiter's place, which must claim it.
    handed: bool,
    /// The clients that waited, each with the real instant by which it must have taken
    /// the resource (unless somebody else did).
    waiters: Vec<(Waiter, u64)>,
}

impl Handover {
    /// The earliest deadline of the waiters (the obligation is judged then).
    fn deadline(&self) -> u64 {
        self.waiters.iter().map(|w| w.1).min().unwrap_or(self.since)
    }
}

/// A lock of a crashed holder, still in the store, abandoned at `at` (real time, ms).
pub(super) struct Abandoned {
    resource: usize,
    lock_id: LockId,
    at: u64,
}

impl World {
    /// [`HANDOVER_LATENCIES`] of the seed's largest one-way latency.
    pub(super) fn latencies_bound(&self) -> u64 {
        HANDOVER_LATENCIES * self.mix.latency_ms.1
    }

    /// How much longer than `local_ms` on its own clock a wait of a client of this seed
    /// may last in real time (its clock running slow by up to the seed's drift bound).
    pub(super) fn drift_slack(&self, local_ms: u64) -> u64 {
        let drift = u128::from(self.mix.drift_ppm.unsigned_abs());
        let late =
            (u128::from(local_ms) * drift).div_ceil(1_000_000u128.saturating_sub(drift).max(1));
        u64::try_from(late).unwrap_or(u64::MAX)
    }

    /// The range of the random delay before a waiter acts on a hint after `heard` hints
    /// woke it during its acquire (an upper bound on its hint-woken attempts refused, the
    /// core's contention): none at first, then `hint_spread` doubling up to `max_backoff`
    /// (the rule `LockerCore::handle_hint` documents), in real time.
    pub(super) fn hint_delay_bound(&self, heard: u32) -> u64 {
        if heard == 0 {
            return 0;
        }
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        let range = ms(self.config.hint_spread)
            .saturating_mul(1u64 << (heard - 1).min(32))
            .min(ms(self.config.max_backoff));
        range + self.drift_slack(range)
    }

    /// The deadline of a waiter of a handover after a release (or a handoff to its place)
    /// at `since`: the latencies, plus the longest delay the Locker's rule lets a fair
    /// waiter take before acting on the hint; a racing waiter hears no hints, and asks on
    /// its backoff, at most `max_backoff` (on its clock) after its last refusal.
    fn handover_deadline(&self, since: u64, (client, _, _): Waiter) -> u64 {
        if !self.mix.is_fair(client) {
            let wait = u64::try_from(self.config.max_backoff.as_millis()).unwrap_or(u64::MAX);
            return since + self.latencies_bound() + wait + self.drift_slack(wait);
        }
        let heard =
            since + self.latencies_bound() + self.hint_delay_bound(self.clients[client].wake_hints);
        let c = &self.clients[client];
        if c.watch.listening() || c.last_ahead.is_some_and(|n| n <= NEAR_HEAD) {
            // Listening, or (near the head, by the store's last answer) it must be.
            return heard;
        }
        // A process whose waiters are all far back in their lines does not listen: a waiter
        // handed the lock all the same (the line sped up) claims it with the attempt that
        // keeps its place, due `renew_fraction` of `queue_ttl` after the last one.
        let every = self.config.queue_ttl.mul_f64(self.config.renew_fraction);
        let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        heard.max(since + self.latencies_bound() + every + self.drift_slack(every))
    }

    /// The store handed resource `r` (as `lock`) to a place: the obligations on `r` are met
    /// (the store granted it). If the place's `waiter` still waits, it must claim it (or
    /// somebody be granted `r`) by its handover deadline, as after a release; a place whose
    /// waiter stopped waiting never claims it, and the lock is abandoned at its claim
    /// lease's end plus the grace, as a crashed holder's.
    pub(super) fn handed_to(&mut self, r: usize, waiter: Option<Waiter>, lock: &LockStatus) {
        if !self.liveness {
            return;
        }
        self.granted_to_someone(r);
        let Some(waiter) = waiter.filter(|&w| self.still_waits(w, r)) else {
            self.abandoned.push(Abandoned {
                resource: r,
                lock_id: lock.lock_id.clone(),
                at: self.abandoned_at(lock),
            });
            return;
        };
        if self.healing {
            return;
        }
        let since = self.now;
        let deadline = self.handover_deadline(since, waiter);
        self.handovers.push(Handover {
            resource: r,
            since,
            takeover: false,
            handed: true,
            waiters: vec![(waiter, deadline)],
        });
    }

    /// The takeover bound: the latencies, plus how far the slowest clock this seed may
    /// give a waiter falls behind over one `max_backoff` (the longest wait, measured on
    /// the waiter's clock, from the refusal that said when the lock is abandoned).
    fn takeover_bound(&self) -> u64 {
        let wait = u64::try_from(self.config.max_backoff.as_millis()).unwrap_or(u64::MAX);
        self.latencies_bound() + self.drift_slack(wait)
    }

    /// The locks the store holds on resource `r`.
    pub(super) fn locks_on(&self, r: usize) -> Vec<LockStatus> {
        let filter = Filter::new().resource(self.resources[r].as_str());
        at_once(self.store.status(&filter)).unwrap_or_else(|e| panic!("store-mem failed: {e}"))
    }

    /// Real time (ms) at which a lock is abandoned: its expiry plus the takeover grace, on
    /// the store's clock.
    pub(super) fn abandoned_at(&self, status: &LockStatus) -> u64 {
        let expires = status.expires_at.map_or(u64::MAX, |t| {
            t.as_millis().saturating_sub(EPOCH.as_millis())
        });
        expires
            .saturating_add(self.opts.grace_ms)
            .saturating_sub(self.store_offset)
    }

    /// The clients waiting for resource `r` now (neither crashed nor paused).
    fn waiters_of(&self, r: usize) -> Vec<Waiter> {
        self.clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c.app {
                App::Acquiring { key, resource }
                    if resource == r && c.is_active() && c.core.is_waiting() =>
                {
                    Some((i, c.incarnation, key))
                }
                _ => None,
            })
            .collect()
    }

    fn still_waits(&self, (client, incarnation, key): Waiter, r: usize) -> bool {
        let c = &self.clients[client];
        c.incarnation == incarnation
            && !c.crashed
            && matches!(c.app, App::Acquiring { key: k, resource } if k == key && resource == r)
    }

    /// Before the store applies `request`: whether it is an unlock of a lock the store
    /// holds (whose removal may free its resource).
    pub(super) fn unlocks_a_held_lock(&self, request: &Request) -> bool {
        if !self.liveness {
            return false;
        }
        let Request::Unlock { resource, lock_id } = request else {
            return false;
        };
        self.locks_on(self.resource_index(resource))
            .iter()
            .any(|l| l.lock_id == *lock_id)
    }

    /// After the store applied `request` of `client`'s incarnation `incarnation`: a grant
    /// meets the obligations of its resource; an unlock that left its resource free starts
    /// one; requests of a crashed incarnation (still on their way when it crashed) leave
    /// locks that will be abandoned.
    pub(super) fn handovers_after(
        &mut self,
        client: usize,
        incarnation: u32,
        request: &Request,
        reply: &Reply,
        unlocked_held: bool,
    ) {
        if !self.liveness {
            return;
        }
        let dead = self.crashed.contains(&(client, incarnation));
        match (request, reply) {
            (Request::Lock { request, .. }, Reply::Granted(status)) => {
                let r = self.resource_index(&request.resource);
                self.granted_to_someone(r);
                if dead {
                    self.abandoned.push(Abandoned {
                        resource: r,
                        lock_id: request.lock_id.clone(),
                        at: self.abandoned_at(status),
                    });
                }
            }
            (Request::Unlock { resource, lock_id }, _) => {
                self.abandoned.retain(|a| a.lock_id != *lock_id);
                let r = self.resource_index(resource);
                if unlocked_held && !self.healing && self.locks_on(r).is_empty() {
                    let since = self.now;
                    let waiters: Vec<(Waiter, u64)> = self
                        .waiters_of(r)
                        .into_iter()
                        .map(|w| (w, self.handover_deadline(since, w)))
                        .collect();
                    if !waiters.is_empty() {
                        self.handovers.push(Handover {
                            resource: r,
                            since,
                            takeover: false,
                            handed: false,
                            waiters,
                        });
                    }
                }
            }
            (Request::Renew { .. } | Request::RenewMany { .. }, _) if dead => {
                // A renewal that left before the crash moves its lock's end.
                let mut abandoned = std::mem::take(&mut self.abandoned);
                for a in &mut abandoned {
                    if let Some(l) = self
                        .locks_on(a.resource)
                        .iter()
                        .find(|l| l.lock_id == a.lock_id)
                    {
                        a.at = self.abandoned_at(l);
                    }
                }
                self.abandoned = abandoned;
            }
            _ => {}
        }
    }

    /// The store granted resource `r`: every obligation on it is met.
    fn granted_to_someone(&mut self, r: usize) {
        let now = self.now;
        let mut met = Vec::new();
        self.handovers.retain(|h| {
            let hit = h.resource == r;
            if hit {
                met.push((h.takeover, now - h.since));
            }
            !hit
        });
        // A crashed holder's lock is taken over only once abandoned.
        self.abandoned.retain(|a| a.resource != r || a.at > now);
        let t = &mut self.report.tally;
        for (takeover, took) in met {
            if takeover {
                t.takeovers_checked += 1;
                t.slowest_takeover_ms = t.slowest_takeover_ms.max(took);
            } else {
                t.handovers_checked += 1;
                t.slowest_handover_ms = t.slowest_handover_ms.max(took);
            }
        }
    }

    /// `client`'s incarnation `incarnation` crashed: the locks it holds in the store will
    /// be abandoned.
    pub(super) fn holder_crashed(&mut self, client: usize, incarnation: u32) {
        if !self.liveness {
            return;
        }
        self.clock.set(self.store_now());
        let locks = at_once(self.store.status(&Filter::new()))
            .unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        for l in locks {
            if self.grants.get(&l.lock_id) == Some(&(client, incarnation)) {
                let resource = self.resource_index(&l.resource);
                let at = self.abandoned_at(&l);
                self.abandoned.push(Abandoned {
                    resource,
                    lock_id: l.lock_id,
                    at,
                });
            }
        }
    }

    /// Time moves on to `until` (before the events at `until` are handled): crashed
    /// holders' locks abandoned by then start their obligations (with the clients waiting
    /// as they were), and obligations whose deadline passed are judged.
    pub(super) fn advance_handovers(&mut self, until: u64) {
        if !self.liveness || (self.abandoned.is_empty() && self.handovers.is_empty()) {
            return;
        }
        let (due, later): (Vec<Abandoned>, Vec<Abandoned>) = std::mem::take(&mut self.abandoned)
            .into_iter()
            .partition(|a| a.at <= until);
        self.abandoned = later;
        for a in due {
            if self.healing {
                continue;
            }
            let deadline = a.at + self.takeover_bound();
            let waiters: Vec<(Waiter, u64)> = self
                .waiters_of(a.resource)
                .into_iter()
                .map(|w| (w, deadline))
                .collect();
            if !waiters.is_empty() {
                self.handovers.push(Handover {
                    resource: a.resource,
                    since: a.at,
                    takeover: true,
                    handed: false,
                    waiters,
                });
            }
        }
        // Judged once the earliest deadline passed: a waiter that stopped waiting (crashed,
        // or gave up while the world heals) no longer counts, and the deadline is the
        // earliest of those still waiting.
        let mut judged = Vec::new();
        for mut h in std::mem::take(&mut self.handovers) {
            if h.deadline() >= until {
                self.handovers.push(h);
                continue;
            }
            let r = h.resource;
            h.waiters.retain(|&(w, _)| self.still_waits(w, r));
            if h.waiters.is_empty() {
                continue;
            }
            // Places of waiters that crashed, ahead in the queue of every waiter still
            // waiting, hold the resource back until they lapse, and the waiters behind
            // them until they hear of it.
            if let Some(later) = self.queue_holds_back(r, h.since) {
                for w in &mut h.waiters {
                    w.1 = w.1.max(later);
                }
            }
            if h.deadline() >= until {
                self.handovers.push(h);
            } else {
                judged.push(h);
            }
        }
        for h in judged {
            let r = h.resource;
            let deadline = h.deadline();
            let still: Vec<usize> = h.waiters.iter().map(|w| (w.0).0).collect();
            let t = &mut self.report.tally;
            let how = if h.takeover {
                t.takeovers_checked += 1;
                "its crashed holder's lock was abandoned"
            } else if h.handed {
                t.handovers_checked += 1;
                "the store handed it to a waiting place, not claimed"
            } else {
                t.handovers_checked += 1;
                "a release freed it"
            };
            let detail = format!(
                "r{r}: {how} at {} ms while clients {still:?} waited for it, and the store \
                 granted it to nobody by {deadline} ms ({} ms later)",
                h.since,
                deadline - h.since
            );
            self.note(None, format!("VIOLATION HandoverLiveness: {detail}"));
            self.report.violations.push(Violation {
                at: deadline,
                kind: ViolationKind::HandoverLiveness,
                detail,
            });
        }
    }
}
