//! `handover_liveness`: in a seed checked for handovers ([`FaultMix::checks_handovers`]:
//! a fast network that loses nothing, no pauses, no failovers, no dropped hint streams), a
//! resource that clients wait for does not stay free.
//!
//! - A release: when an unlock removes the lock on a resource at the store and leaves it
//!   free while some client waits for it (its application acquiring it, its core waiting),
//!   the store grants the resource again within [`HANDOVER_LATENCIES`] one-way latencies
//!   (the seed's largest) of the unlock. The way the shipped Locker does it: the store's
//!   `Freed` hint reaches the waiter (one latency), which asks at once (another); an
//!   attempt already in flight is refused and asked again at once (a round trip); a
//!   waiter whose subscription was still opening hears `Missed` instead (a round trip
//!   more). Without hints a waiter asks only on its backoff, up to `max_backoff` (half
//!   the TTL) later.
//! - A takeover: when a lock whose holder crashed is abandoned (its expiry plus the
//!   takeover grace, on the store's clock, which no failover moves in these seeds) while
//!   some client waits for its resource, the store grants it within the same number of
//!   latencies plus the drift of the waiter's clock over one `max_backoff` (the longest
//!   wait it measures on its own clock, from the refusal whose `retry_in` said when the
//!   lock would be abandoned). No hint says a lock expired: the refusal's `retry_in` is
//!   how the waiter knows, and without it the waiter asks only on its backoff.
//!
//! The obligation lapses when every client that waited at its start has stopped waiting
//! for that resource (crashed, or gave up while the world heals). Any grant of the
//! resource meets it. The handovers and takeovers checked (met or violated) are counted,
//! so that the check is seen not to be vacuous.
//!
//! [`FaultMix::checks_handovers`]: crate::FaultMix::checks_handovers

use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{Reply, Request};
use lockwright_engine::{Filter, LockId, LockStatus, LockStore};

use super::app::App;
use super::{EPOCH, World, at_once};
use crate::{Violation, ViolationKind};

/// The bound of a handover, in one-way latencies: two for the hint and the attempt it
/// wakes, two more for an attempt in flight whose refusal predates the release or for a
/// subscription still opening (its `Missed` comes a round trip after it), and two to spare
/// for the scheduling of those events and the waiters' randomized hint delays, which start
/// at 0 ms and grow only for waiters whose hint-woken attempts lost races.
pub(super) const HANDOVER_LATENCIES: u64 = 4;

/// A client incarnation waiting for a resource under a lease key.
type Waiter = (usize, u32, LeaseKey);

/// A resource left free while clients waited for it: the store must grant it by
/// `deadline`.
pub(super) struct Handover {
    resource: usize,
    /// When it came free (real time, ms).
    since: u64,
    deadline: u64,
    /// A crashed holder's lock was abandoned (else, a release).
    takeover: bool,
    waiters: Vec<Waiter>,
}

/// A lock of a crashed holder, still in the store, abandoned at `at` (real time, ms).
pub(super) struct Abandoned {
    resource: usize,
    lock_id: LockId,
    at: u64,
}

impl World {
    /// [`HANDOVER_LATENCIES`] of the seed's largest one-way latency.
    fn latencies_bound(&self) -> u64 {
        HANDOVER_LATENCIES * self.mix.latency_ms.1
    }

    /// How much longer than `local_ms` on its own clock a wait of a client of this seed
    /// may last in real time (its clock running slow by up to the seed's drift bound).
    fn drift_slack(&self, local_ms: u64) -> u64 {
        let drift = u128::from(self.mix.drift_ppm.unsigned_abs());
        let late = (u128::from(local_ms) * drift).div_ceil(1_000_000u128.saturating_sub(drift).max(1));
        u64::try_from(late).unwrap_or(u64::MAX)
    }

    /// The range of the random delay before a waiter acts on a hint after `heard` hints
    /// woke it during its acquire (an upper bound on its hint-woken attempts refused, the
    /// core's contention): none at first, then `hint_spread` doubling up to `max_backoff`
    /// (the rule `LockerCore::handle_hint` documents), in real time.
    fn hint_delay_bound(&self, heard: u32) -> u64 {
        if heard == 0 {
            return 0;
        }
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        let range = ms(self.config.hint_spread)
            .saturating_mul(1u64 << (heard - 1).min(32))
            .min(ms(self.config.max_backoff));
        range + self.drift_slack(range)
    }

    /// The bound of a handover after a release that `waiters` waited for: the latencies,
    /// plus the hint delay of the waiter with the shortest one.
    fn handover_bound(&self, waiters: &[Waiter]) -> u64 {
        let delay = waiters
            .iter()
            .map(|&(c, _, _)| self.hint_delay_bound(self.clients[c].wake_hints))
            .min()
            .unwrap_or(0);
        self.latencies_bound() + delay
    }

    /// The takeover bound: the latencies, plus how far the slowest clock this seed may
    /// give a waiter falls behind over one `max_backoff` (the longest wait, measured on
    /// the waiter's clock, from the refusal that said when the lock is abandoned).
    fn takeover_bound(&self) -> u64 {
        let wait = u64::try_from(self.config.max_backoff.as_millis()).unwrap_or(u64::MAX);
        self.latencies_bound() + self.drift_slack(wait)
    }

    /// The locks the store holds on resource `r`.
    fn locks_on(&self, r: usize) -> Vec<LockStatus> {
        let filter = Filter::new().resource(self.resources[r].as_str());
        at_once(self.store.status(&filter)).unwrap_or_else(|e| panic!("store-mem failed: {e}"))
    }

    /// Real time (ms) at which a lock is abandoned: its expiry plus the takeover grace, on
    /// the store's clock.
    fn abandoned_at(&self, status: &LockStatus) -> u64 {
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
                    let waiters = self.waiters_of(r);
                    if !waiters.is_empty() {
                        self.handovers.push(Handover {
                            resource: r,
                            since: self.now,
                            deadline: self.now + self.handover_bound(&waiters),
                            takeover: false,
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
            let waiters = self.waiters_of(a.resource);
            if waiters.is_empty() || self.healing {
                continue;
            }
            self.handovers.push(Handover {
                resource: a.resource,
                since: a.at,
                deadline: a.at + self.takeover_bound(),
                takeover: true,
                waiters,
            });
        }
        let (late, pending): (Vec<Handover>, Vec<Handover>) =
            std::mem::take(&mut self.handovers)
                .into_iter()
                .partition(|h| h.deadline < until);
        self.handovers = pending;
        for h in late {
            let r = h.resource;
            let still: Vec<usize> = h
                .waiters
                .iter()
                .filter(|w| self.still_waits(**w, r))
                .map(|w| w.0)
                .collect();
            if still.is_empty() {
                continue;
            }
            let t = &mut self.report.tally;
            let how = if h.takeover {
                t.takeovers_checked += 1;
                "its crashed holder's lock was abandoned"
            } else {
                t.handovers_checked += 1;
                "a release freed it"
            };
            let detail = format!(
                "r{r}: {how} at {} ms while clients {still:?} waited for it, and the store \
                 granted it to nobody by {} ms ({} ms later)",
                h.since,
                h.deadline,
                h.deadline - h.since
            );
            self.note(None, format!("VIOLATION HandoverLiveness: {detail}"));
            self.report.violations.push(Violation {
                at: h.deadline,
                kind: ViolationKind::HandoverLiveness,
                detail,
            });
        }
    }
}
