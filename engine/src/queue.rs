//! Fair locks: a resource's queue of waiters, kept with its locks.
//!
//! A fair request ([`LockRequest::fair`](crate::LockRequest)) carries a [`Ticket`]: a
//! secret that names its place in the resource's queue across attempts, and the lease of
//! that place. A fair request that is refused takes a place at the back of the queue, or
//! keeps (and refreshes) the place it has, in the same write that refused it; a grant
//! removes the winner's place. A place whose lease ran out ([`QueueEntry::is_live`]) no
//! longer counts and is dropped by the next write of the resource (or by purge), so a dead
//! waiter delays the others by at most its place's lease.
//!
//! The grant rule with a queue: a request is granted iff the rule without a queue grants it
//! **and** no live, conflicting place is ahead of its own ([`ResourceState::queue_allows`]).
//! A request without a place of its own (every request that is not fair, and a fair request
//! before its first refusal) has every place ahead of it: it may not overtake any waiter it
//! conflicts with, but it takes no place when refused.
//!
//! - An exclusive request conflicts with every place ahead.
//! - A shared request conflicts with an exclusive place ahead (writer preference: readers
//!   that come after a waiting writer wait behind it); shared places ahead do not block it,
//!   except under a limit, where they hold their slots first: with limit `m`, it is granted
//!   only if the held shared locks plus the live shared places ahead are fewer than `m`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::{Mode, SharedLimit};
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::rules::{ResourceState, Rule};
use crate::time::{Timestamp, Ttl};

/// The shortest lease of a place in a queue: shorter ones would lapse between two attempts
/// of a waiter on a loaded network.
pub const MIN_QUEUE_TTL: Duration = Duration::from_millis(100);

/// The longest lease of a place in a queue: a dead waiter delays the others by up to its
/// place's lease, so a long one defeats the queue's purpose.
pub const MAX_QUEUE_TTL: Duration = Duration::from_secs(600);

/// A fair request's place in a resource's queue: the secret that names it across attempts,
/// and its lease. Like a lock id, the ticket is never shown in errors or logs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// Names the place; the same for every attempt of one waiting acquire.
    pub id: LockId,
    /// How long the place lasts unless the waiter asks again.
    pub ttl: Ttl,
}

impl Ticket {
    /// A ticket with `id` whose place lasts `ttl`.
    ///
    /// # Errors
    /// `InvalidArgument` naming `queue_ttl` outside [`MIN_QUEUE_TTL`]..=[`MAX_QUEUE_TTL`].
    pub fn new(id: LockId, ttl: Duration) -> Result<Self, crate::Error> {
        if !(MIN_QUEUE_TTL..=MAX_QUEUE_TTL).contains(&ttl) {
            return Err(crate::Error::invalid(
                "queue_ttl",
                format!(
                    "must be between {} ms and {} s, not {ttl:?}",
                    MIN_QUEUE_TTL.as_millis(),
                    MAX_QUEUE_TTL.as_secs()
                ),
            ));
        }
        Ok(Ticket {
            id,
            ttl: Ttl::new(ttl)?,
        })
    }
}

/// One waiter's place in a resource's queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueEntry {
    /// The waiter's ticket id (a secret, like a lock id).
    pub ticket: LockId,
    /// What the waiter asks for.
    pub mode: Mode,
    /// When it took the place (the store's clock).
    pub queued_at: Timestamp,
    /// When the place lapses unless the waiter asks again.
    pub expires_at: Timestamp,
}

impl QueueEntry {
    /// A place for `ticket` in `mode`, taken or refreshed at `now`.
    #[must_use]
    pub fn new(ticket: LockId, mode: Mode, queued_at: Timestamp, expires_at: Timestamp) -> Self {
        QueueEntry {
            ticket,
            mode,
            queued_at,
            expires_at,
        }
    }

    /// Live at `now`: its lease has not run out (`now < expires_at`). A place that is not
    /// live blocks nobody and is dropped by the next write of its resource.
    #[must_use]
    pub fn is_live(&self, now: Timestamp) -> bool {
        mutants::active(Mutant::QueueDeadEntryBlocks) || now < self.expires_at
    }
}

/// A fair request's place as its refusal reports it (`Error::AlreadyLocked::queued`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Queued {
    /// The live places ahead of it that it must let go first: every place ahead for an
    /// exclusive request or a limited shared one, the exclusive places ahead for a shared
    /// one without a limit. 0: nobody.
    pub ahead: u32,
    /// The resource's last fence when the store decided: grants with a higher fence came
    /// after the refusal (their places are counted in `ahead`).
    pub fence: u64,
}

/// What a waiter reports about the others: one live place of a resource's queue, without
/// its ticket.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Waiter {
    /// What the waiter asks for.
    pub mode: Mode,
    /// When it took its place (the store's clock).
    pub queued_at: Timestamp,
    /// When its place lapses unless it asks again.
    pub expires_at: Timestamp,
}

impl From<&QueueEntry> for Waiter {
    fn from(e: &QueueEntry) -> Self {
        Waiter {
            mode: e.mode,
            queued_at: e.queued_at,
            expires_at: e.expires_at,
        }
    }
}

impl ResourceState {
    /// The live places of the queue at `now`, in order.
    pub fn waiters(&self, now: Timestamp) -> impl Iterator<Item = &QueueEntry> {
        self.queue.iter().filter(move |e| e.is_live(now))
    }

    /// The live places ahead of `ticket`'s own live place, or every live place when it has
    /// none (or no ticket).
    fn ahead<'a>(
        &'a self,
        ticket: Option<&'a LockId>,
        now: Timestamp,
    ) -> impl Iterator<Item = &'a QueueEntry> + 'a {
        let own = ticket.and_then(|t| {
            self.queue
                .iter()
                .position(|e| &e.ticket == t && e.is_live(now))
        });
        let end = own.unwrap_or(self.queue.len());
        self.queue[..end].iter().filter(move |e| e.is_live(now))
    }

    /// The queue's part of the grant rule: whether no live place that conflicts with `rule`
    /// is ahead of the request's own (see the [module documentation](self)).
    #[must_use]
    pub fn queue_allows(&self, rule: &Rule<'_>, now: Timestamp, grace: Duration) -> bool {
        if mutants::active(Mutant::QueueIgnored) {
            return true;
        }
        match rule {
            Rule::Exclusive { ticket } => self.ahead(*ticket, now).next().is_none(),
            Rule::Shared { limit, ticket, .. } => {
                let mut shared_ahead = 0usize;
                for e in self.ahead(*ticket, now) {
                    match e.mode {
                        Mode::Exclusive if !mutants::active(Mutant::SharedOvertakesWriter) => {
                            return false;
                        }
                        Mode::Exclusive => {}
                        Mode::Shared => shared_ahead += 1,
                    }
                }
                // With nobody ahead this is the limit rule itself, which `can_slock` applies:
                // only the slots the readers ahead hold first are the queue's to count.
                shared_ahead == 0
                    || limit.is_none_or(|m: SharedLimit| {
                        self.held_shared(now, grace) + shared_ahead < m.get() as usize
                    })
            }
        }
    }

    /// How many live places ahead of the request's own conflict with `rule` (every place
    /// for an exclusive request or a limited shared one, the exclusive places for a shared
    /// one without a limit): what a refusal reports as the waiter's place.
    #[must_use]
    pub fn queued(&self, rule: &Rule<'_>, now: Timestamp) -> Queued {
        Queued {
            ahead: self.conflicting_ahead(rule, now),
            fence: self.last_fence,
        }
    }

    /// See [`ResourceState::queued`].
    #[must_use]
    pub fn conflicting_ahead(&self, rule: &Rule<'_>, now: Timestamp) -> u32 {
        let n = match rule {
            Rule::Exclusive { ticket }
            | Rule::Shared {
                ticket,
                limit: Some(_),
                ..
            } => self.ahead(*ticket, now).count(),
            Rule::Shared {
                ticket,
                limit: None,
                ..
            } => self
                .ahead(*ticket, now)
                .filter(|e| e.mode == Mode::Exclusive)
                .count(),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Drops the places whose lease ran out at `now`.
    pub fn drop_dead_waiters(&mut self, now: Timestamp) {
        self.queue.retain(|e| e.is_live(now));
    }

    /// A refused fair request takes its place at the back, or refreshes the live place it
    /// has (keeping its order), after the dead places are dropped.
    pub(crate) fn enqueue(&mut self, ticket: &crate::queue::Ticket, mode: Mode, now: Timestamp) {
        self.drop_dead_waiters(now);
        let expires_at = now.saturating_add(ticket.ttl.as_duration());
        match self.queue.iter_mut().find(|e| e.ticket == ticket.id) {
            Some(e) => {
                e.expires_at = expires_at;
                e.mode = mode;
            }
            None => self
                .queue
                .push(QueueEntry::new(ticket.id.clone(), mode, now, expires_at)),
        }
    }

    /// A grant removes the winner's place and the dead ones.
    pub(crate) fn dequeue_granted(
        &mut self,
        ticket: Option<&crate::queue::Ticket>,
        now: Timestamp,
    ) {
        self.drop_dead_waiters(now);
        if let Some(t) = ticket
            && !mutants::active(Mutant::GrantLeavesEntry)
        {
            self.queue.retain(|e| e.ticket != t.id);
        }
    }

    /// Removes `ticket`'s place (a waiter that stopped waiting), and the dead places.
    /// Returns whether it had one.
    pub fn leave_queue(&mut self, ticket: &LockId, now: Timestamp) -> bool {
        let had = self.queue.iter().any(|e| &e.ticket == ticket);
        self.queue.retain(|e| &e.ticket != ticket && e.is_live(now));
        had
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Error, LockDetails, LockRequest, LockTable};

    const T0: Timestamp = Timestamp::from_millis(1_000_000);

    fn at(ms: u64) -> Timestamp {
        T0.saturating_add(Duration::from_millis(ms))
    }

    fn fair(lock_id: &str, ticket: &str) -> LockRequest {
        let details = LockDetails::new().ttl(Duration::from_secs(10));
        LockRequest::new("r", lock_id, &details)
            .unwrap()
            .fair(Ticket::new(LockId::new(ticket).unwrap(), Duration::from_secs(3)).unwrap())
    }

    fn plain(lock_id: &str) -> LockRequest {
        LockRequest::new(
            "r",
            lock_id,
            &LockDetails::new().ttl(Duration::from_secs(10)),
        )
        .unwrap()
    }

    fn ahead_of(e: Error) -> Option<u32> {
        match e {
            Error::AlreadyLocked { queued, .. } => queued.map(|q| q.ahead),
            other => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn debug_never_shows_a_ticket() {
        let details = LockDetails::new().queue("secret-ticket-42", Duration::from_secs(3));
        let request = LockRequest::new("r", "lock", &details).unwrap();
        for shown in [format!("{details:?}"), format!("{request:?}")] {
            assert!(!shown.contains("secret-ticket-42"), "{shown}");
        }
        let bad = LockDetails::new().queue("x".repeat(300), Duration::from_secs(3));
        let e = LockRequest::new("r", "lock", &bad).unwrap_err();
        assert!(!format!("{e} {e:?}").contains("xxxx"), "{e:?}");
    }

    #[test]
    fn waiters_are_granted_in_order() {
        let mut t = LockTable::new();
        t.xlock(&plain("holder"), at(0)).unwrap();
        assert_eq!(
            ahead_of(t.xlock(&fair("a", "ta"), at(1)).unwrap_err()),
            Some(0)
        );
        assert_eq!(
            ahead_of(t.xlock(&fair("b", "tb"), at(2)).unwrap_err()),
            Some(1)
        );
        t.unlock(&LockId::new("holder").unwrap(), at(3));
        // b asks first after the release, but a is ahead: refused, its place kept.
        assert_eq!(
            ahead_of(t.xlock(&fair("b", "tb"), at(4)).unwrap_err()),
            Some(1)
        );
        // A request that is not fair does not overtake either, and takes no place.
        assert_eq!(ahead_of(t.xlock(&plain("c"), at(4)).unwrap_err()), None);
        t.xlock(&fair("a", "ta"), at(5)).unwrap();
        let state = t.resource(&"r".try_into().unwrap()).unwrap();
        assert_eq!(state.queue.len(), 1, "the grant removed the winner's place");
        t.unlock(&LockId::new("a").unwrap(), at(6));
        t.xlock(&fair("b", "tb"), at(7)).unwrap();
    }

    #[test]
    fn a_dead_place_blocks_nobody() {
        let mut t = LockTable::new();
        t.xlock(&plain("holder"), at(0)).unwrap();
        t.xlock(&fair("a", "ta"), at(1)).unwrap_err();
        t.unlock(&LockId::new("holder").unwrap(), at(2));
        // a's place lapses at 3,001 ms: until then b waits, then it goes.
        let e = t.xlock(&fair("b", "tb"), at(3_000)).unwrap_err();
        assert!(
            matches!(e, Error::AlreadyLocked { retry_in: Some(d), .. } if d == Duration::from_millis(1))
        );
        t.xlock(&fair("b", "tb"), at(3_001)).unwrap();
        assert!(
            t.resource(&"r".try_into().unwrap())
                .unwrap()
                .queue
                .is_empty()
        );
    }

    #[test]
    fn a_waiting_writer_holds_back_later_readers() {
        let mut t = LockTable::new();
        t.slock(&plain("r1"), None, at(0)).unwrap();
        t.xlock(&fair("w", "tw"), at(1)).unwrap_err();
        // A reader after the writer waits behind it, fair or not.
        assert_eq!(
            ahead_of(t.slock(&fair("r2", "t2"), None, at(2)).unwrap_err()),
            Some(1)
        );
        t.slock(&plain("r3"), None, at(2)).unwrap_err();
        t.unlock(&LockId::new("r1").unwrap(), at(3));
        t.xlock(&fair("w", "tw"), at(4)).unwrap();
        t.unlock(&LockId::new("w").unwrap(), at(5));
        t.slock(&fair("r2", "t2"), None, at(6)).unwrap();
    }

    #[test]
    fn readers_ahead_hold_their_slots_under_a_limit() {
        let limit = Some(SharedLimit::new(2).unwrap());
        let mut t = LockTable::new();
        t.slock(&plain("h1"), limit, at(0)).unwrap();
        t.slock(&plain("h2"), limit, at(0)).unwrap();
        t.slock(&fair("a", "ta"), limit, at(1)).unwrap_err();
        t.unlock(&LockId::new("h1").unwrap(), at(2));
        // One slot: a's. A later shared ask waits; without a limit it would not.
        t.slock(&fair("b", "tb"), limit, at(3)).unwrap_err();
        t.slock(&plain("c"), None, at(3)).unwrap();
        t.slock(&fair("a", "ta"), limit, at(4)).unwrap_err(); // c took the slot
        t.unlock(&LockId::new("c").unwrap(), at(5));
        t.slock(&fair("a", "ta"), limit, at(6)).unwrap();
    }

    #[test]
    fn leaving_the_queue_lets_the_next_one_in() {
        let mut t = LockTable::new();
        t.xlock(&plain("holder"), at(0)).unwrap();
        t.xlock(&fair("a", "ta"), at(1)).unwrap_err();
        t.xlock(&fair("b", "tb"), at(1)).unwrap_err();
        assert!(t.leave_queue(&"r".try_into().unwrap(), &LockId::new("ta").unwrap(), at(2)));
        t.unlock(&LockId::new("holder").unwrap(), at(3));
        t.xlock(&fair("b", "tb"), at(4)).unwrap();
    }

    #[test]
    fn a_refusal_says_when_dead_places_end() {
        let mut t = LockTable::new();
        t.xlock(&fair("a", "ta"), at(0)).unwrap();
        t.xlock(&fair("b", "tb"), at(0)).unwrap_err();
        t.unlock(&LockId::new("a").unwrap(), at(1));
        // b's place lives until 3,000 ms: c may go then.
        let e = t.xlock(&fair("c", "tc"), at(10)).unwrap_err();
        assert!(
            matches!(e, Error::AlreadyLocked { retry_in: Some(d), queued: Some(Queued { ahead: 1, .. }), .. } if d == Duration::from_millis(2_990))
        );
    }
}
