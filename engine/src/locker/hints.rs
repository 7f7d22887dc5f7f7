//! Waking waiters: what a store's hint does to the waiting acquires.
//!
//! Only fair waiters act on hints; a racing waiter polls on its backoff and on the store's
//! `retry_in`, and is never woken (so a release wakes no herd). A hint that a resource
//! came free brings its fair waiters' next attempt forward; one that
//! arrives while an attempt is in flight makes a refusal of that attempt ask again at
//! once (the store may have decided before the change). A hint never grants, refuses or
//! ends anything: every decision is still the store's answer to an attempt.
//!
//! Many waiters hear the same hint (one per process on MongoDB), and only one of them can
//! be granted an exclusive lock. So a waiter whose hint-woken attempts keep being refused
//! acts on the next hint after a random delay whose range doubles with each such refusal
//! (from `hint_spread`, up to `max_backoff`); a hint that somebody was granted the
//! resource sends the waiters still waiting to act back to their backoff. Waiters that
//! lost races spread out, and the first to act usually takes the lock before the others'
//! delays end, so one release costs a few attempts, not one per waiter.

use rand_core::RngCore;

use super::{LockerCore, Wait};
use crate::lease::LeaseKey;
use crate::mutants::{self, Mutant};
use crate::notice::Hint;
use crate::time::{LocalMs, duration_millis};

impl<R: RngCore> LockerCore<R> {
    /// The store hinted at a change at local time `now` (see [`Hint`]): the waiting
    /// acquires it concerns ask again soon. Hints for resources nobody here waits for are
    /// ignored.
    pub fn handle_hint(&mut self, hint: &Hint, now: LocalMs) {
        self.last_now = self.last_now.max(now);
        if mutants::active(Mutant::LockerIgnoresHints) {
            return;
        }
        self.hearing = true;
        // Only fair waiters hear hints: racing ones poll on their backoff and the store's
        // `retry_in`, so a release wakes no herd.
        let concerned = |key: &LeaseKey, resource: Option<&crate::Resource>| {
            self.acquires.get(key).is_some_and(|a| {
                a.ask.fair && a.wait != Wait::No && resource.is_none_or(|r| *r == a.ask.resource)
            })
        };
        let (resource, taken, fence, first, grant) = match hint {
            Hint::Freed(r) => (Some(r), false, None, None, None),
            Hint::Taken(r, fence) => (Some(r), true, *fence, None, None),
            Hint::First {
                resource,
                taken,
                place,
                grant,
            } => (
                Some(resource),
                *taken,
                None,
                Some(place.as_deref()),
                grant.filter(|_| place.is_some() && !*taken),
            ),
            Hint::Missed => (None, false, None, None, None),
        };
        let keys: Vec<LeaseKey> = self
            .acquires
            .keys()
            .filter(|k| concerned(k, resource))
            .copied()
            .collect();
        for key in keys {
            let Some(a) = self.acquires.get_mut(&key) else {
                continue;
            };
            if let (Some(named), Some(place)) = (first, a.place.as_mut()) {
                // The store says a waiter of this store is first; if it names this one (or
                // nobody in particular), none of the grants since its last count reached
                // it, so the count is dropped (see `super::fair`). Another waiter here is
                // behind the one named, and the change is not its turn.
                if !place.is_named(named) {
                    continue;
                }
                place.first();
                let shared = matches!(a.ask.access, crate::access::Access::Shared(_));
                // The store handed this place the lock and says what: held at once.
                if let Some(grant) = &grant
                    && self.take_handed(key, grant, now)
                {
                    continue;
                }
                if !taken || shared {
                    self.wake_one(key, now);
                }
                continue;
            }
            // A waiter far back in its line does not listen: its process may hear hints for
            // another waiter, and its next attempt keeps its place anyway.
            let far = a.place.as_ref().is_some_and(super::fair::Place::far);
            if far && !taken {
                continue;
            }
            // A fair waiter with others ahead leaves a release to them, and moves forward
            // when one of them is granted (see `super::fair`).
            let behind = a.place.as_ref().is_some_and(super::fair::Place::behind);
            let queued = a.place.is_some();
            if taken && queued && Self::moved_forward(a, fence) {
                self.wake_one(key, now);
            } else if taken && !behind {
                self.back_to_backoff(key, now);
            } else if !(behind && resource.is_some()) {
                self.wake_one(key, now);
            }
        }
    }

    /// The subscription to the store's hints ended, or was dropped, at local time `now`:
    /// hints may have been lost (as [`Hint::Missed`]: every waiter asks once), and until
    /// the next hint arrives the waiters poll on their backoff as waiters that never heard
    /// a hint do.
    pub fn hints_ended(&mut self, now: LocalMs) {
        self.handle_hint(&Hint::Missed, now);
        self.hearing = false;
    }

    /// Whether some acquire is waiting.
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        self.acquires.values().any(|a| a.wait != Wait::No)
    }

    /// Whether some fair acquire is waiting in a queue, not far back in its line (hints
    /// would help it; racing waiters never act on one, an acquire whose first attempt is
    /// not answered yet waits for that answer, and a waiter far back keeps its place by
    /// asking, see `super::fair`): the driver subscribes to the store's hints while this
    /// holds. So an uncontended acquire opens no cursor on MongoDB, and neither does a process
    /// whose waiters all wait far back.
    #[must_use]
    pub fn wants_hints(&self) -> bool {
        self.acquires.values().any(|a| {
            a.ask.fair
                && a.wait != Wait::No
                && a.place.as_ref().is_some_and(super::fair::Place::listens)
        })
    }

    /// The waiting acquire `key` heard that its resource may be free: its next attempt is
    /// brought forward to now plus its random hint delay, or (with an attempt in flight)
    /// made as soon as that attempt is refused.
    pub(super) fn wake_one(&mut self, key: LeaseKey, now: LocalMs) {
        let Some(a) = self.acquires.get_mut(&key) else {
            return;
        };
        if a.attempt.is_some() {
            a.hinted = true;
            return;
        }
        let (contention, planned) = (a.contention, a.retry_at);
        let range = self.hint_delay_range(contention);
        let delay = if range == 0 {
            0
        } else {
            self.rng.next_u64() % range.saturating_add(1)
        };
        if delay == 0 {
            // At once, not through a timer (a runtime's timer may round up to its tick).
            if let Some(old) = planned {
                self.timers.remove(&(old, super::Timer::Attempt(key)));
            }
            if let Some(a) = self.acquires.get_mut(&key) {
                a.by_hint = true;
            }
            self.attempt(key, now);
            return;
        }
        let at = now.saturating_add_millis(delay);
        if planned.is_none_or(|planned| at < planned) {
            self.set_retry(key, at, true);
        }
    }

    /// Somebody was granted the resource `key` waits for: an attempt a hint brought
    /// forward goes back to the backoff, and a refusal of the attempt in flight is no
    /// longer a reason to ask again at once.
    fn back_to_backoff(&mut self, key: LeaseKey, now: LocalMs) {
        let Some(a) = self.acquires.get_mut(&key) else {
            return;
        };
        a.hinted = false;
        if a.attempt.is_none() && a.by_hint {
            self.schedule_retry(key, None, now);
        }
    }

    /// The range (ms) of the random delay before acting on a hint, after `contention`
    /// hint-woken attempts were refused: none at first, then `hint_spread` doubling up to
    /// `max_backoff`.
    fn hint_delay_range(&self, contention: u32) -> u64 {
        if contention == 0 {
            return 0;
        }
        let spread = duration_millis(self.config.hint_spread).max(1);
        let max = duration_millis(self.config.max_backoff).max(1);
        spread
            .saturating_mul(1u64 << (contention - 1).min(32))
            .min(max)
    }
}
