//! The acquire path: each attempt's lock request, what its reply (or its silence) means,
//! and the backoff of a waiting acquire.

use rand_core::RngCore;

use super::{Ask, Grant, Held, LockerCore, Purpose, Timer, Wait};
use super::{Event, Reply, Request};
use crate::error::Error;
use crate::lease::LeaseKey;
use crate::lock::LockRequest;
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::status::{Holder, LockStatus};
use crate::time::duration_millis;
use crate::time::{LocalMs, Ttl};
use crate::trust::trust_until;

impl<R: RngCore> LockerCore<R> {
    pub(super) fn attempt(&mut self, key: LeaseKey, now: LocalMs) {
        let Some(a) = self.acquires.get(&key) else {
            return;
        };
        let fair = self.ticket_of(a);
        let Ask {
            resource,
            access,
            ttl,
            who,
            ..
        } = a.ask.clone();
        let bits = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
        // A fair acquire asks with one lock id (its place's), so that a lock the store hands
        // its place, or grants an attempt whose reply is lost, is claimed by the next one.
        let lock_id = match &a.place {
            Some(place) => place.lock_id.clone(),
            None => LockId::from_random(bits),
        };
        // Checked in `acquire`: the TTL is longer than the margin.
        let deadline = trust_until(now, ttl, self.config.drift_margin).unwrap_or(now);
        let grant = Grant {
            resource: resource.clone(),
            lock_id: lock_id.clone(),
            ttl,
        };
        let ticket = fair.as_ref().map(|t| t.id.clone());
        let request = LockRequest {
            resource,
            access,
            lock_id,
            holder: Holder::clone(&who),
            ttl: Some(ttl),
            fair,
        };
        let id = self.send(
            Request::Lock { request },
            Purpose::Lock { key, grant, ticket },
            deadline,
            now,
        );
        if let Some(a) = self.acquires.get_mut(&key) {
            a.attempt = Some(id);
            a.retry_at = None;
            a.hinted = false;
            if let Some(place) = a.place.as_mut() {
                place.asked = true;
            }
        }
    }

    /// The acquire `key` holds `grant` (as `status`), trusted until `until`: it ends, and
    /// the lease schedule renews the lock from now on. Its first lease is `first.0` from
    /// local time `first.1` (a grant's TTL from its request's send time; a handed lock's
    /// claim lease from its waiter's last refusal).
    pub(super) fn hand_out(
        &mut self,
        key: LeaseKey,
        grant: Grant,
        status: LockStatus,
        first: (Ttl, LocalMs),
        until: LocalMs,
    ) {
        if let Some(a) = self.acquires.remove(&key)
            && let Some(at) = a.retry_at
        {
            self.timers.remove(&(at, Timer::Attempt(key)));
        }
        let (lease, since) = first;
        self.schedule
            .insert_handed(key, grant.lock_id.clone(), grant.ttl, lease, since)
            .unwrap_or_else(|e| {
                unreachable!(
                    "the caller checked that the lease is longer than the drift margin, \
                     and the key is fresh: {e}"
                )
            });
        self.held.insert(key, Held { grant, live: true });
        self.stats.held += 1;
        self.events.push_back(Event::Acquired {
            key,
            status,
            trust_until: until,
        });
    }

    /// The reply to an attempt whose acquire was cancelled, gave up or was shut down:
    /// release whatever may have been granted. A fair attempt may also have taken a place
    /// after its acquire gave its place up (the store decided it later): it gives the place
    /// up again and releases its lock id, which the store may hand that place.
    pub(super) fn orphan_settled(
        &mut self,
        grant: Grant,
        ticket: Option<LockId>,
        reply: Option<Reply>,
        now: LocalMs,
    ) {
        if let Some(ticket) = ticket {
            if !matches!(&reply, Some(Reply::Failed(e)) if !e.may_have_applied()) {
                self.give_place_up(grant, ticket, now);
            }
            return;
        }
        match &reply {
            Some(Reply::Granted(_)) => self.start_release(None, grant, now),
            None => self.release_unknown(grant, now),
            Some(Reply::Failed(e)) if e.may_have_applied() => {
                self.release_unknown(grant, now);
            }
            Some(_) => {}
        }
    }

    pub(super) fn lock_settled(
        &mut self,
        key: LeaseKey,
        grant: Grant,
        sent: LocalMs,
        reply: Option<Reply>,
        now: LocalMs,
    ) {
        let (hinted, by_hint, fair) = match self.acquires.get_mut(&key) {
            Some(a) => {
                a.attempt = None;
                (
                    std::mem::take(&mut a.hinted),
                    std::mem::take(&mut a.by_hint),
                    a.place.is_some(),
                )
            }
            None => (false, false, false),
        };
        let ttl = grant.ttl;
        let until = trust_until(sent, ttl, self.config.drift_margin).unwrap_or(sent);
        match reply {
            Some(Reply::Granted(status))
                if now < until || mutants::active(Mutant::LockerHandsOutStaleGrant) =>
            {
                self.hand_out(key, grant, status, (ttl, sent), until);
            }
            Some(Reply::Granted(_)) if fair => {
                // Granted too late to trust: ask again at once, which claims the lock anew
                // (a fair acquire keeps its lock id), and trust that answer.
                self.store_answered(key);
                let resource = grant.resource.clone();
                self.retry_or_fail(key, Error::StaleGrant { resource }, Some(now), now);
            }
            Some(Reply::Granted(_)) => {
                // Granted too late to trust: release it, and ask again if waiting.
                self.store_answered(key);
                let resource = grant.resource.clone();
                self.start_release(None, grant, now);
                self.retry_or_fail(key, Error::StaleGrant { resource }, None, now);
            }
            Some(Reply::Refused(e)) => {
                self.store_answered(key);
                // The store decided between `sent` and `now`: the locks in the way are
                // abandoned no later than `now + retry_in` on this clock. Asking at
                // `sent + retry_in` could be early by a round trip, and be refused again,
                // which the head of a fair line risks (one more attempt, of one waiter):
                // its request then reaches the store about when the lock frees, however
                // late this reply came back (a loaded client or network), and nobody
                // else's write may hand it the lock sooner.
                let free_at = match &e {
                    Error::AlreadyLocked {
                        retry_in: Some(d),
                        queued,
                        ..
                    } if !mutants::active(Mutant::LockerIgnoresRetryIn) => {
                        let head = queued.is_some_and(|q| q.ahead == 0);
                        Some(if head { sent } else { now }.saturating_add(*d))
                    }
                    _ => None,
                };
                let queued = match &e {
                    Error::AlreadyLocked { queued, .. } => *queued,
                    _ => None,
                };
                let queued_place = queued.is_some();
                let every = self.keep_every();
                let initial = duration_millis(self.config.initial_backoff).max(1);
                if let Some(a) = self.acquires.get_mut(&key) {
                    a.free_at = free_at;
                    // A waiter in a queue is not racing a herd: only the head acts on a
                    // release, so a refusal (the lock is still held) spreads nothing.
                    if by_hint && !queued_place {
                        a.contention = a.contention.saturating_add(1);
                    }
                    let was_head = a.place.as_ref().is_some_and(super::fair::Place::is_head);
                    Self::place_kept(a, queued, sent, every);
                    // A waiter that just reached the head of its line is next: one that hears
                    // no hints polls afresh from the first backoff, not from where its wait
                    // behind the others left it (the store hands it the lock at the
                    // release, and it claims it with its next attempt).
                    if !was_head && a.place.as_ref().is_some_and(super::fair::Place::is_head) {
                        a.backoff_ms = initial;
                    }
                }
                let waiting = self.acquires.get(&key).is_some_and(|a| a.wait != Wait::No);
                if hinted && waiting {
                    self.wake_one(key, now);
                } else {
                    self.retry_or_fail(key, e, free_at, now);
                }
            }
            Some(Reply::Done | Reply::Each(_)) => self.fail(
                key,
                Error::backend("acquire", "the store's answer does not fit a lock request"),
            ),
            Some(Reply::Failed(e)) => {
                // A fair acquire's next attempt claims whatever this one may have been
                // granted; leaving the queue releases it.
                if e.may_have_applied() && !fair {
                    self.release_unknown(grant, now);
                }
                if matches!(e, Error::Backend { .. }) {
                    self.attempt_failed(key, e, sent, now);
                } else {
                    // Retrying cannot help (a bad argument, a malformed document, a
                    // misconfigured store).
                    self.fail(key, e);
                }
            }
            None => {
                if !fair {
                    self.release_unknown(grant, now);
                }
                let e = Error::NoReply {
                    operation: "acquire",
                };
                self.attempt_failed(key, e, sent, now);
            }
        }
    }

    /// The store answered an attempt of `key` (with a refusal or a grant).
    fn store_answered(&mut self, key: LeaseKey) {
        if let Some(a) = self.acquires.get_mut(&key) {
            a.failing_since = None;
        }
    }

    /// An attempt sent at `sent` failed or got no reply: a one-shot acquire ends with
    /// `error`; a waiting one asks again after its backoff, unless attempts have failed
    /// without an answer from the store for `unavailable_timeout` (it then ends with
    /// `error`).
    fn attempt_failed(&mut self, key: LeaseKey, error: Error, sent: LocalMs, now: LocalMs) {
        self.stats.acquire_failures += 1;
        let timeout = self.config.unavailable_timeout;
        let Some(a) = self.acquires.get_mut(&key) else {
            return;
        };
        let since = *a.failing_since.get_or_insert(sent);
        if a.wait == Wait::No || since.saturating_add(timeout) <= now {
            self.fail(key, error);
            return;
        }
        self.events.push_back(Event::AttemptFailed { key, error });
        self.schedule_retry(key, None, now);
    }

    /// After an outcome that may have been a grant: release it.
    fn release_unknown(&mut self, grant: Grant, now: LocalMs) {
        if !mutants::active(Mutant::LockerNoReleaseAfterUnknown) {
            self.start_release(None, grant, now);
        }
    }

    fn fail(&mut self, key: LeaseKey, error: Error) {
        if let Some(a) = self.acquires.remove(&key) {
            self.leave_queue(a);
            self.events.push_back(Event::AcquireFailed { key, error });
        }
    }

    /// A waiting acquire waits (full jitter, doubling backoff, and no later than `free_at`)
    /// and asks again; a one-shot acquire ends with `error`.
    fn retry_or_fail(
        &mut self,
        key: LeaseKey,
        error: Error,
        free_at: Option<LocalMs>,
        now: LocalMs,
    ) {
        if self.acquires.get(&key).is_some_and(|a| a.wait == Wait::No) {
            self.fail(key, error);
        } else {
            self.schedule_retry(key, free_at, now);
        }
    }

    /// The waiting acquire `key` asks again after a random wait up to its backoff, which
    /// doubles up to `max_backoff`, or at `free_at` (when the store said the locks in the
    /// way are abandoned; else when the last refusal said so, if still ahead) if that is
    /// sooner: a crashed holder costs its waiters one attempt at its lock's end,
    /// not a series of blind ones. A fair acquire that hears the store's hints polls only as
    /// a safety net: after a random wait between half of `max_backoff` and all of it; it
    /// also asks again in time to keep its place, and with others ahead of it it does not
    /// poll at all ([`super::fair`]). A racing acquire hears no hints: it polls on its
    /// backoff.
    pub(super) fn schedule_retry(&mut self, key: LeaseKey, free_at: Option<LocalMs>, now: LocalMs) {
        let max = duration_millis(self.config.max_backoff).max(1);
        let Some(a) = self.acquires.get(&key) else {
            return;
        };
        let backoff = a.backoff_ms;
        let failing = a.failing_since.is_some();
        let free_at = free_at.or(a.free_at.filter(|&t| t > now));
        let keep_by = self.keep_place_by(a);
        let hears = self.hearing && self.config.wake_on_hints && a.ask.fair;
        // Far back in the line, a waiter asks only to keep its place, listening or not.
        let far = a.place.as_ref().is_some_and(super::fair::Place::far);
        let behind = far || hears && a.place.as_ref().is_some_and(super::fair::Place::behind);
        let wait = if hears {
            max / 2 + self.rng.next_u64() % (max - max / 2 + 1)
        } else {
            self.rng.next_u64() % backoff.saturating_add(1)
        };
        if let Some(a) = self.acquires.get_mut(&key) {
            a.backoff_ms = backoff.saturating_mul(2).min(max);
        }
        // After a failed attempt, a keep that is overdue (the failed attempt was to keep the
        // place) waits a random time up to the backoff, and no longer than a keep-place
        // interval (the place may still be kept): a store that fails every attempt is not
        // asked in a loop.
        let every = self.keep_every();
        let keep_by = match keep_by {
            Some(keep) if failing && keep <= now => {
                let range = backoff.min(every).max(1);
                Some(now.saturating_add_millis(1 + self.rng.next_u64() % range))
            }
            keep => keep,
        };
        let mut at = match (behind, keep_by) {
            (true, Some(keep)) => keep,
            _ => now.saturating_add_millis(wait.max(1)),
        };
        if let Some(keep) = keep_by {
            at = at.min(keep);
        }
        if let Some(free) = free_at {
            at = at.min(free);
        }
        self.set_retry(key, at.max(now.saturating_add_millis(1)), false);
    }

    /// The next attempt of `key` is at `at` (replacing the one planned), brought forward
    /// by a hint or not.
    pub(super) fn set_retry(&mut self, key: LeaseKey, at: LocalMs, by_hint: bool) {
        let Some(a) = self.acquires.get_mut(&key) else {
            return;
        };
        if let Some(old) = a.retry_at.replace(at) {
            self.timers.remove(&(old, Timer::Attempt(key)));
        }
        a.by_hint = by_hint;
        self.timers.insert((at, Timer::Attempt(key)));
    }
}
