//! Fair acquires: waiting in the resource's queue ([`crate::queue`]).
//!
//! A fair acquire draws one ticket and one lock id for all its attempts. Each refused
//! attempt takes or keeps its place in the queue and says how many waiters it must let go
//! first. The store hands the lock to the head of the line when it comes free, under the
//! lock id the place records, with a short claim lease; the waiter's next attempt (the same
//! lock id) claims it, and its reply is the grant. So an attempt whose outcome is unknown
//! needs no release: the next one claims whatever it was granted. From what the
//! refusals say the core decides when to ask again:
//!
//! - it asks again at `renew_fraction` of the place's lease after the attempt that kept
//!   it was sent (that attempt is what keeps the place), and no later than when the store
//!   said the locks and places in its way end;
//! - a waiter with others ahead of it that hears the store's hints does not poll, and does
//!   not act on a hint that the resource came free (the waiter ahead goes first); each hint
//!   that somebody was granted moves it one place forward in its own count, so that the
//!   new head acts on the next release at once. The count is only a guess between two
//!   attempts (a grant to a request that is not fair moves nobody): each attempt replaces
//!   it with the store's answer, and an attempt made too early is refused, never granted
//!   out of turn;
//! - a store that wakes only the process of the queue's first waiter
//!   ([`crate::Hint::First`]) sends no hints to the waiters behind it, so their counts go
//!   stale: they wait for that hint, their keep-place attempts and the store's `retry_in`,
//!   and the one hint drops the count of the waiter it reaches (it is first);
//! - a waiter far back in a slow line ([`Place::far`]'s field) keeps its place far back
//!   ([`Ticket::far_back`]): stale, so that no handoff reaches it while its process does not
//!   listen, for a lease [`Place::far_times`] times as long (at least [`NEAR_KEEPS`], more
//!   the farther back it is), asked for as many times as rarely;
//!   the first such keep comes at the near interval, within the claim lease of the last
//!   near one. It judges its distance and the line's pace on the live places ahead
//!   (`Queued::live_ahead`), which stale places do not leave;
//! - an acquire that stops waiting (cancelled, timed out, shut down) gives its place up and
//!   releases its lock id (the store may have handed it the lock), best effort: a place
//!   that stays lapses with its lease, and a handed lock with its claim lease.

use std::time::Duration;

use rand_core::RngCore;

use super::{Acquire, Grant, LockerCore, Purpose, Request};
use crate::access::Access;
use crate::lease::LeaseKey;
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::notice::HandedLock;
use crate::queue::Ticket;
use crate::status::{Holder, LockStatus, Queued};
use crate::trust::{Wake, WakeRule, trust_wake};

use crate::time::{LocalMs, duration_millis};

/// The most grant fences a waiter keeps while an attempt is in flight (more than a flight
/// can see in practice; past it the count is corrected by the next attempt).
const MAX_EARLY: usize = 1024;

/// A waiter with at most this many places ahead of it is near the head of its line,
/// whatever the pace of the line: its process listens for the store's hints.
pub const NEAR_HEAD: u32 = 1;

/// A waiter that listens goes far back only when, at its line's pace, it is this many
/// keep-place intervals from being near the head; one that does not listen comes near
/// again when it is [`NEAR_KEEPS`] from it (it learns its place only once per interval,
/// and the line's pace is a guess). The gap keeps a process from closing and reopening its
/// hints subscription (a cursor on MongoDB) at every refusal of a waiter on the edge.
const FAR_KEEPS: u64 = 8;
/// See [`FAR_KEEPS`].
const NEAR_KEEPS: u64 = 4;
/// A waiter judges its line's pace only on refusals that span this many keep-place
/// intervals (it keeps its place at least once per interval while near): over a shorter
/// span, a stall (a start, a lost wake the head claims only at its next keep) looks like a
/// slow line, and a waiter that goes far back on it is passed over while it does not ask.
const PACE_KEEPS: u64 = 2;
/// A waiter far back in a line that does not move waits one near interval between keeps
/// for every this many live places ahead of it (and at least [`NEAR_KEEPS`] intervals):
/// see [`Place::far_times`].
const FAR_SPREAD: u32 = 2;

/// A fair acquire's place: its ticket, the lock id of all its attempts, and what the last
/// refusal said.
#[derive(Debug)]
pub(super) struct Place {
    ticket: LockId,
    /// The lock id every attempt asks with, which the store hands the lock to.
    pub(super) lock_id: LockId,
    /// Whether an attempt was sent (it may have taken a place, or been granted).
    pub(super) asked: bool,
    /// The waiters ahead that it must let go first, as the last refusal said and the hints
    /// since then moved it; `None` before any refusal (no place yet).
    ahead: Option<u32>,
    /// The live places ahead of it as the last refusal said, fresh or not: how far back it
    /// is, whatever the waiters ahead do (the pace of the line is judged on it).
    live_ahead: Option<u32>,
    /// Whether the attempt that last kept the place kept it far back
    /// ([`Ticket::far_back`]): the next keep is due a far-back interval later.
    kept_far: bool,
    /// How many times `queue_ttl` the lease of that attempt's ticket was, kept far back
    /// ([`Place::far_times`]).
    kept_times: u32,
    /// When the attempt that took or last kept the place was sent (local).
    kept_at: Option<LocalMs>,
    /// The fence of the last grant `ahead` accounts for: a `Taken` hint with a fence at or
    /// below it came before the refusal, whose count already left its place out.
    fence: u64,
    /// The fences of the grants hinted while an attempt was in flight: its refusal may
    /// have been decided before or after them, which their fences tell.
    early: Vec<u64>,
    /// The first refusal that gave this place (when its attempt was sent, and the live
    /// count it said): with the last one, how fast the line moves.
    first_count: Option<(LocalMs, u32)>,
    /// Far back: more than [`NEAR_HEAD`] places ahead, and at the line's pace so far not
    /// near the head before the place must be kept again. Its process need not listen for
    /// it ([`LockerCore::wants_hints`]), and it keeps its place far back: stale, rarely, for
    /// a longer lease.
    far: bool,
}

impl Place {
    pub(super) fn new(ticket: LockId, lock_id: LockId) -> Self {
        Place {
            ticket,
            lock_id,
            asked: false,
            ahead: None,
            live_ahead: None,
            kept_far: false,
            kept_times: 0,
            kept_at: None,
            fence: 0,
            early: Vec::new(),
            first_count: None,
            far: false,
        }
    }

    /// Whether the waiter is far back in its line (see [`Place::far`]'s field).
    pub(super) fn far(&self) -> bool {
        self.far
    }

    /// Whether the waiter's process should listen for the store's hints: it has a place
    /// (a refusal gave it one; until then its attempt's answer is what it waits for) and
    /// is not far back.
    pub(super) fn listens(&self) -> bool {
        self.ahead.is_some() && !self.far
    }

    /// Whether, going by the refusals so far, the waiter stays more than [`NEAR_HEAD`]
    /// places back for longer than [`NEAR_KEEPS`] times `every` ms (the time until the
    /// place is next kept) if it is far back already, [`FAR_KEEPS`] times if it is not:
    /// the line moved `first - live_ahead` live places in the time between the first
    /// refusal and the last one, and has `live_ahead - NEAR_HEAD` to go. A waiter with at
    /// most [`NEAR_HEAD`] fresh places ahead is near whatever the live ones (those far
    /// back are passed over), and one whose refusals span less than [`PACE_KEEPS`] times
    /// `every` does not know the pace yet (a line that moved no place in a few
    /// milliseconds, or across one stall, may move fast): it is near.
    fn far_back(&self, every: u64) -> bool {
        let (Some(ahead), Some(live), Some(kept), Some((t0, first))) =
            (self.ahead, self.live_ahead, self.kept_at, self.first_count)
        else {
            return false;
        };
        if kept.0.saturating_sub(t0.0) < every.saturating_mul(PACE_KEEPS) {
            return false;
        }
        if ahead <= NEAR_HEAD {
            return mutants::active(Mutant::LockerHeadStopsListening);
        }
        let moved = u64::from(first.saturating_sub(live));
        let to_go = u64::from(live.saturating_sub(NEAR_HEAD));
        let span = kept.0 - t0.0;
        let horizon = every * if self.far { NEAR_KEEPS } else { FAR_KEEPS };
        // to_go / (moved / span) > horizon, without dividing by a line that did not move.
        u128::from(to_go) * u128::from(span) > u128::from(moved) * u128::from(horizon)
    }

    /// How many times `queue_ttl` the lease of a place kept far back is, and how many near
    /// intervals apart its keeps are: [`NEAR_KEEPS`] in a line that moved since the
    /// waiter's first refusal; in one that did not, one per [`FAR_SPREAD`] live places
    /// ahead if that is more. So the far keeps of a long line that does not move add up, per
    /// interval, to a number that grows with the log of its length, not with it, and the
    /// waiters nearest the front, which a line that starts moving reaches first, ask most
    /// often; a waiter in a line that moves (whose pace a stall may have made look slow)
    /// asks every [`NEAR_KEEPS`] intervals, and is passed over for no longer.
    fn far_times(&self) -> u32 {
        let near = u32::try_from(NEAR_KEEPS).unwrap_or(u32::MAX);
        let live = self.live_ahead.unwrap_or(0);
        let moved = self.first_count.is_some_and(|(_, first)| first > live);
        if moved {
            near
        } else {
            (live / FAR_SPREAD).max(near)
        }
    }

    /// The store said a waiter of this process is first in the queue: nobody known ahead
    /// (the next attempt's refusal, if any, counts again).
    pub(super) fn first(&mut self) {
        self.ahead = Some(0);
        self.early.clear();
    }

    /// Whether a hint naming the first place by `tag` (any place: `None`) may mean this one.
    pub(super) fn is_named(&self, tag: Option<&str>) -> bool {
        tag.is_none_or(|t| t == self.ticket.place_tag())
    }

    /// Nobody is ahead, by the last refusal and the hints since.
    pub(super) fn is_head(&self) -> bool {
        self.ahead == Some(0)
    }

    /// Others are ahead: the waiter leaves releases to them.
    pub(super) fn behind(&self) -> bool {
        self.ahead.is_some_and(|n| n > 0)
    }
}

impl<R: RngCore> LockerCore<R> {
    /// The ticket an attempt of `a` carries, if it is fair: a place with a lease of
    /// `queue_ttl` and the same claim lease, or far back, one kept far back for
    /// [`Place::far_times`] times as long.
    pub(super) fn ticket_of(&self, a: &Acquire) -> Option<Ticket> {
        let place = a.place.as_ref()?;
        if place.far {
            let lease = self.far_lease(place.far_times());
            return Ticket::new(place.ticket.clone(), lease)
                .ok()
                .map(Ticket::far_back);
        }
        Ticket::new(place.ticket.clone(), self.config.queue_ttl).ok()
    }

    /// The lease of a place kept far back: `times` times `queue_ttl`, at most the longest
    /// place lease.
    fn far_lease(&self, times: u32) -> std::time::Duration {
        self.config
            .queue_ttl
            .saturating_mul(times)
            .min(crate::queue::MAX_QUEUE_TTL)
    }

    /// How often a waiter keeps its place (ms): `renew_fraction` of the place's lease.
    pub(super) fn keep_every(&self) -> u64 {
        let every = self.config.queue_ttl.mul_f64(self.config.renew_fraction);
        duration_millis(every).max(1)
    }

    /// How often a waiter far back keeps its place (ms), with a lease `times` times
    /// `queue_ttl`: `renew_fraction` of it.
    fn keep_far_every(&self, times: u32) -> u64 {
        let every = self.far_lease(times).mul_f64(self.config.renew_fraction);
        duration_millis(every).max(1)
    }

    /// A fair attempt sent at `sent` was refused with the waiter's place (`queued`); the
    /// grants hinted while it was in flight that came after the refusal (a higher fence)
    /// move the waiter forward. Whether the waiter is now far back is judged on the new
    /// count, against `every` ([`Self::keep_every`]).
    pub(super) fn place_kept(a: &mut Acquire, queued: Option<Queued>, sent: LocalMs, every: u64) {
        let Some(place) = a.place.as_mut() else {
            return;
        };
        let early = std::mem::take(&mut place.early);
        match queued {
            Some(q) => {
                // The attempt carried the ticket of the place as it was when sent (nothing
                // changes it while an attempt is in flight).
                place.kept_times = place.far_times();
                let later = early.iter().filter(|&&f| f > q.fence).count();
                place.ahead = Some(
                    q.ahead
                        .saturating_sub(u32::try_from(later).unwrap_or(u32::MAX)),
                );
                let later = u32::try_from(later).unwrap_or(u32::MAX);
                place.live_ahead = Some(q.live_ahead.max(q.ahead).saturating_sub(later));
                place.fence = early.into_iter().fold(q.fence, u64::max);
                place.kept_at = Some(sent);
                place.kept_far = place.far;
                let live = place.live_ahead.unwrap_or(0);
                place.first_count.get_or_insert((sent, live));
                place.far = place.far_back(every);
            }
            None => {
                place.ahead = None;
                place.live_ahead = None;
                place.kept_far = false;
                place.kept_at = None;
                place.first_count = None;
                place.far = false;
            }
        }
    }

    /// When `a` must ask again to keep its place, if it has one: `renew_fraction` of the
    /// lease the attempt that kept it gave it. A waiter that just went far back asks again
    /// within the claim lease of its last keep (which the store may still hand the lock
    /// to, and its process may no longer hear): a place stops being handed the lock only
    /// once it is kept far back.
    pub(super) fn keep_place_by(&self, a: &Acquire) -> Option<LocalMs> {
        let place = a.place.as_ref()?;
        let every = if place.kept_far {
            self.keep_far_every(place.kept_times)
        } else {
            self.keep_every()
        };
        Some(place.kept_at?.saturating_add_millis(every))
    }

    /// A hint that somebody was granted the resource, with `fence`: a waiter with others
    /// ahead moves one place forward, unless the grant came before its last refusal (which
    /// counted it already); with an attempt in flight, the fence waits for its answer.
    /// Returns whether a shared waiter has nobody ahead any more (it may share the lock with
    /// the one granted, so it asks at once).
    pub(super) fn moved_forward(a: &mut Acquire, fence: Option<u64>) -> bool {
        let in_flight = a.attempt.is_some();
        let Some(place) = a.place.as_mut() else {
            return false;
        };
        if in_flight {
            if let Some(f) = fence
                && place.early.len() < MAX_EARLY
            {
                place.early.push(f);
            }
            return false;
        }
        if let Some(f) = fence {
            if f <= place.fence {
                return false;
            }
            place.fence = f;
        }
        match place.ahead {
            Some(n) if n > 0 => {
                place.ahead = Some(n - 1);
                place.far &= n - 1 > NEAR_HEAD;
                n == 1 && matches!(a.ask.access, Access::Shared(_))
            }
            _ => false,
        }
    }

    /// The store says (a hint) that it handed `grant` to the place of the waiting acquire
    /// `key`: the waiter holds the lock at once, trusted as the reply to an attempt sent
    /// when its last refusal was would be (the store answered that refusal before the
    /// handoff), for the claim lease, and claims it for its TTL with its first renewal. So
    /// a handover costs the release and the wake, not a request of the new holder too.
    /// Only when that is sound; otherwise the hint only wakes the waiter, which claims the
    /// lock with its next attempt:
    /// - no attempt is in flight (its reply decides: a grant claims the lock, and a
    ///   refusal may predate the handoff);
    /// - the refusal kept the place near, with the claim lease (a place kept far back is
    ///   handed nothing);
    /// - the grant's fence is above every fence the refusal and the hints since accounted
    ///   for: the handoff came after the refusal (a late hint of a handoff the place's
    ///   waiter never claimed, before its place was taken anew, has a lower one);
    /// - the trust left is longer than the renew margin, and so is the lease left when the
    ///   first renewal falls due (the claim must still be renewable).
    ///
    /// Returns whether the grant was handed out.
    pub(super) fn take_handed(&mut self, key: LeaseKey, grant: &HandedLock, now: LocalMs) -> bool {
        let Some(a) = self.acquires.get(&key) else {
            return false;
        };
        let Some(place) = a.place.as_ref() else {
            return false;
        };
        let Some(kept_at) = place.kept_at else {
            return false;
        };
        let wake = Wake {
            in_flight: a.attempt.is_some(),
            kept_far: place.kept_far,
            kept_at,
            place_fence: place.fence,
            fence: grant.fence,
            created_at: grant.created_at,
            expires_at: grant.expires_at,
        };
        let rule = WakeRule {
            queue_ttl: self.config.queue_ttl,
            ttl: a.ask.ttl,
            renew_fraction: self.config.renew_fraction,
            renew_margin: self.renew_margin,
            drift_margin: self.config.drift_margin,
        };
        let Some((lease, since, until)) = trust_wake(&wake, &rule, now) else {
            return false;
        };
        let mode = a.ask.access.mode();
        let status = LockStatus {
            resource: a.ask.resource.clone(),
            lock_id: place.lock_id.clone(),
            mode,
            holder: Holder::clone(&a.ask.who),
            created_at: grant.created_at,
            renewed_at: None,
            expires_at: grant.expires_at,
            ttl: grant.expires_at.map(|e| {
                Duration::from_millis(e.as_millis().saturating_sub(grant.created_at.as_millis()))
            }),
            fence: grant.fence,
        };
        let handed = Grant {
            resource: a.ask.resource.clone(),
            lock_id: place.lock_id.clone(),
            ttl: a.ask.ttl,
        };
        self.stats.handed_by_hint += 1;
        self.hand_out(key, handed, status, (lease, since), until);
        true
    }

    /// The acquire `a` stopped waiting: it gives its place up, if it may have one, and
    /// releases its lock id, which the store may have handed the lock to.
    pub(super) fn leave_queue(&mut self, a: Acquire) {
        let Some(place) = a.place else {
            return;
        };
        if !place.asked {
            return; // no attempt ever took a place
        }
        let grant = Grant {
            resource: a.ask.resource,
            lock_id: place.lock_id,
            ttl: a.ask.ttl,
        };
        self.give_place_up(grant, place.ticket, self.last_now);
    }

    /// Gives up the place `ticket` may hold in `grant`'s resource, then (once the store
    /// answered, or did not in time) releases `grant`'s lock id there, which the store may
    /// have handed that place (or granted): after the leave, no handoff to the place can
    /// follow the release.
    pub(super) fn give_place_up(&mut self, grant: Grant, ticket: LockId, now: LocalMs) {
        let deadline = now.saturating_add(self.config.release_timeout);
        self.send(
            Request::LeaveQueue {
                resource: grant.resource.clone(),
                ticket,
            },
            Purpose::LeaveQueue {
                then_release: grant,
            },
            deadline,
            now,
        );
    }
}
