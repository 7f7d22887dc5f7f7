//! Fair locks: a resource's queue of waiters, kept with its locks.
//!
//! A fair request ([`LockRequest::fair`](crate::LockRequest)) carries a [`Ticket`]: a
//! secret that names its place in the resource's queue across attempts, and the lease of
//! that place. The [`Queue`] is those places in the order they were taken, with their
//! leases; it knows nothing of locks or grants. A place whose lease ran out
//! ([`QueueEntry::is_live`]) no longer counts and is dropped by the next write of the
//! resource (or by purge), so a dead waiter delays the others by at most its place's lease.
//!
//! A place also records what the store grants its waiter when the lock comes free
//! ([`Handoff`]: the lock id, the holder's details, a shared request's limit and the claim
//! lease), so that the store can hand the lock to the head of the line in the very write
//! that frees it. What the queue means for a grant (who may overtake whom, what a refusal
//! does to a place, when a place is handed the lock) is a rule of the resource: see
//! [`ResourceState`](crate::ResourceState) and [`crate::resource`].

use std::ops::Deref;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{Access, Mode, SharedLimit};
use crate::invalid::InvalidArgument;
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::status::Holder;
use crate::time::{Timestamp, Ttl};

/// The shortest lease of a place in a queue: shorter ones would lapse between two attempts
/// of a waiter on a loaded network.
pub const MIN_QUEUE_TTL: Duration = Duration::from_millis(100);

/// The longest lease of a place in a queue: a dead waiter delays the others by up to its
/// place's lease, so a long one defeats the queue's purpose.
pub const MAX_QUEUE_TTL: Duration = Duration::from_secs(600);

/// A fair request's place in a resource's queue: the secret that names it across attempts,
/// its lease, and its claim lease (or none, far back). Like a lock id, the ticket is never
/// shown in errors or logs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// Names the place; the same for every attempt of one waiting acquire.
    pub id: LockId,
    /// How long the place lasts unless the waiter asks again.
    pub ttl: Ttl,
    /// The claim lease, at most `ttl`: how long a lock handed to the place lasts unless its
    /// waiter claims it, and how long after this request the place may be handed the lock
    /// at all ([`QueueEntry::is_fresh`]). `None`: the waiter keeps its place far back
    /// ([`Ticket::far_back`]), and the place is stale at once.
    pub claim: Option<Ttl>,
}

impl Ticket {
    /// A ticket with `id` whose place lasts `ttl`, with a claim lease of `ttl` too.
    ///
    /// # Errors
    /// `InvalidArgument` naming `queue_ttl` outside [`MIN_QUEUE_TTL`]..=[`MAX_QUEUE_TTL`].
    pub fn new(id: LockId, ttl: Duration) -> Result<Self, InvalidArgument> {
        let ttl = Ttl::new(check_place_lease("queue_ttl", ttl)?)?;
        Ok(Ticket {
            id,
            ttl,
            claim: Some(ttl),
        })
    }

    /// The same ticket with a claim lease of `claim`.
    ///
    /// # Errors
    /// `InvalidArgument` naming `claim` when shorter than [`MIN_QUEUE_TTL`] or longer than
    /// the place's lease.
    pub fn with_claim(mut self, claim: Duration) -> Result<Self, InvalidArgument> {
        let claim = check_place_lease("claim", claim)?;
        if claim > self.ttl.as_duration() {
            return Err(InvalidArgument::new(
                "claim",
                format!(
                    "must not be longer than the place's lease ({:?}), not {claim:?}",
                    self.ttl.as_duration()
                ),
            ));
        }
        self.claim = Some(Ttl::new(claim)?);
        Ok(self)
    }

    /// The same ticket, kept far back: the request keeps the place for its lease without
    /// asking to be next, so the place is stale (it keeps its order, counts for nobody and
    /// is handed nothing) until its waiter asks with a claim lease again. A waiter far back
    /// in a slow line asks rarely this way, with a long lease: a handoff never reaches it
    /// while it does not listen, and if it died, nobody waits for it.
    #[must_use]
    pub fn far_back(mut self) -> Self {
        self.claim = None;
        self
    }

    /// The lease a handoff to the place grants: the claim lease, or the place's lease for
    /// a place kept far back (which is handed nothing until it asks again).
    #[must_use]
    pub fn handoff_lease(&self) -> Ttl {
        self.claim.unwrap_or(self.ttl)
    }
}

/// `lease`, when within [`MIN_QUEUE_TTL`]..=[`MAX_QUEUE_TTL`]; an error naming `field`
/// otherwise.
fn check_place_lease(field: &'static str, lease: Duration) -> Result<Duration, InvalidArgument> {
    if (MIN_QUEUE_TTL..=MAX_QUEUE_TTL).contains(&lease) {
        return Ok(lease);
    }
    Err(InvalidArgument::new(
        field,
        format!(
            "must be between {} ms and {} s, not {lease:?}",
            MIN_QUEUE_TTL.as_millis(),
            MAX_QUEUE_TTL.as_secs()
        ),
    ))
}

/// What the store grants a place when it hands it the lock: the lock the waiter's last
/// request asked for, with a short *claim lease* instead of its TTL. The waiter claims the
/// lock to its full TTL with its next request (the same lock id, fair), which the store
/// answers with the grant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Handoff {
    /// The lock id the lock is granted under (a secret).
    pub lock_id: LockId,
    /// Who asked, from where, and why.
    #[serde(flatten)]
    pub holder: Holder,
    /// A shared request's limit (none for an exclusive one, or a shared one without).
    pub limit: Option<SharedLimit>,
    /// The claim lease: the handed lock expires this long after the handoff unless its
    /// waiter claims it. The place's own lease (the waiter asks again within it).
    pub lease: Ttl,
}

impl Handoff {
    /// A handoff of a lock of `lock_id` with `holder`'s details, a shared request's
    /// `limit`, and the claim `lease` (for stores that decode places).
    #[must_use]
    pub fn new(lock_id: LockId, holder: Holder, limit: Option<SharedLimit>, lease: Ttl) -> Self {
        Handoff {
            lock_id,
            holder,
            limit,
            lease,
        }
    }

    /// The access the handed lock is granted with, in `mode`.
    #[must_use]
    pub fn access(&self, mode: Mode) -> Access {
        match mode {
            Mode::Exclusive => Access::Exclusive,
            Mode::Shared => Access::Shared(self.limit),
        }
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
    /// Until when the place may be handed the lock: its waiter's last request plus its
    /// claim lease, or the Unix epoch for a place kept far back (stale whatever the store's
    /// clock reads, also after it stepped back). `None` for a place
    /// whose writer did not record it (an earlier version): such a place is fresh as long
    /// as it is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_until: Option<Timestamp>,
    /// What the store grants the place when it hands it the lock; `None` for a place whose
    /// writer did not record it (an earlier version): such a place is never handed the lock,
    /// and is granted by its own next request, as before.
    pub handoff: Option<Handoff>,
}

impl QueueEntry {
    /// A place for `ticket` in `mode`, taken or refreshed at `now`, that records no handoff
    /// (see [`QueueEntry::with_handoff`]).
    #[must_use]
    pub fn new(ticket: LockId, mode: Mode, queued_at: Timestamp, expires_at: Timestamp) -> Self {
        QueueEntry {
            ticket,
            mode,
            queued_at,
            expires_at,
            fresh_until: None,
            handoff: None,
        }
    }

    /// The same place, handed `handoff` when the lock comes free.
    #[must_use]
    pub fn with_handoff(mut self, handoff: Option<Handoff>) -> Self {
        self.handoff = handoff;
        self
    }

    /// The same place, fresh until `fresh_until` (for stores that decode places).
    #[must_use]
    pub fn with_fresh_until(mut self, fresh_until: Option<Timestamp>) -> Self {
        self.fresh_until = fresh_until;
        self
    }

    /// Live at `now`: its lease has not run out (`now < expires_at`). A place that is not
    /// live blocks nobody and is dropped by the next write of its resource.
    #[must_use]
    pub fn is_live(&self, now: Timestamp) -> bool {
        mutants::active(Mutant::QueueDeadEntryBlocks) || now < self.expires_at
    }

    /// Fresh at `now`: live, and its waiter asked to be next within the claim lease it gave
    /// (`now < fresh_until`; a place that records no `fresh_until` is fresh while live).
    /// Only a fresh place counts for the grant rule and is handed the lock: a live place
    /// that is not fresh keeps its order, blocks nobody, and counts again once its waiter
    /// asks with a claim lease.
    #[must_use]
    pub fn is_fresh(&self, now: Timestamp) -> bool {
        // A place that never lapses (the mutant) counts for ever, as it did when live.
        mutants::active(Mutant::QueueDeadEntryBlocks)
            || self.is_live(now)
                && (mutants::active(Mutant::StalePlaceCounts)
                    || self.fresh_until.is_none_or(|t| now < t))
    }
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

/// The places of a resource's fair waiters, first come first, with their leases. Places
/// whose lease ran out stay until the next write of the resource drops them
/// ([`Queue::drop_dead`]); every reading here skips them.
///
/// Reading a queue is reading its places in order (it dereferences to a slice of them);
/// changing it goes through the methods below, which keep the order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Queue(Vec<QueueEntry>);

impl Queue {
    /// An empty queue.
    #[must_use]
    pub fn new() -> Self {
        Queue::default()
    }

    /// Every place, live or not, in order.
    #[must_use]
    pub fn as_slice(&self) -> &[QueueEntry] {
        &self.0
    }

    /// The live places at `now`, in order.
    pub fn live(&self, now: Timestamp) -> impl Iterator<Item = &QueueEntry> {
        self.0.iter().filter(move |e| e.is_live(now))
    }

    /// The fresh places ahead of `ticket`'s own live place, or every fresh place when it
    /// has none (or there is no ticket): the places a request must let go first.
    pub fn ahead<'a>(
        &'a self,
        ticket: Option<&'a LockId>,
        now: Timestamp,
    ) -> impl Iterator<Item = &'a QueueEntry> + 'a {
        self.before(ticket, now).filter(move |e| e.is_fresh(now))
    }

    /// The live places ahead of `ticket`'s own live place (every live place when it has
    /// none), fresh or not: how far back in the line it is.
    pub fn live_ahead<'a>(
        &'a self,
        ticket: Option<&'a LockId>,
        now: Timestamp,
    ) -> impl Iterator<Item = &'a QueueEntry> + 'a {
        self.before(ticket, now).filter(move |e| e.is_live(now))
    }

    /// Every place before `ticket`'s own live place, or every place when it has none.
    fn before<'a>(
        &'a self,
        ticket: Option<&'a LockId>,
        now: Timestamp,
    ) -> impl Iterator<Item = &'a QueueEntry> + 'a {
        let own = ticket.and_then(|t| self.0.iter().position(|e| &e.ticket == t && e.is_live(now)));
        self.0[..own.unwrap_or(self.0.len())].iter()
    }

    /// `ticket` takes a place at the back in `mode` at `now`, or refreshes the place it has
    /// (keeping its order, taking the new mode, lease and what a handoff grants: see
    /// [`LockRequest::handoff`](crate::LockRequest::handoff)), fresh for the ticket's claim
    /// lease from `now` (stale for good when kept far back, until it asks with a claim lease
    /// again), after the dead places are dropped.
    pub fn join(&mut self, ticket: &Ticket, mode: Mode, handoff: Handoff, now: Timestamp) {
        self.drop_dead(now);
        let expires_at = now.saturating_add(ticket.ttl.as_duration());
        // Far back: stale however the store's clock moves (were it `now`, a clock stepped
        // back would make the place fresh for the size of the step, and a release would
        // hand it a lock with the place's long lease).
        let fresh_until = ticket
            .claim
            .map_or(Timestamp::EPOCH, |c| now.saturating_add(c.as_duration()));
        let handoff = Some(handoff);
        match self.0.iter_mut().find(|e| e.ticket == ticket.id) {
            Some(e) => {
                e.expires_at = expires_at;
                e.fresh_until = Some(fresh_until);
                e.mode = mode;
                e.handoff = handoff;
            }
            None => self.0.push(
                QueueEntry::new(ticket.id.clone(), mode, now, expires_at)
                    .with_fresh_until(Some(fresh_until))
                    .with_handoff(handoff),
            ),
        }
    }

    /// Takes the place at `index` out of the queue.
    ///
    /// # Panics
    /// When `index` is out of bounds (a broken invariant of the caller).
    pub fn take(&mut self, index: usize) -> QueueEntry {
        self.0.remove(index)
    }

    /// Removes `ticket`'s place, live or not. Returns whether it had one.
    pub fn remove(&mut self, ticket: &LockId) -> bool {
        let before = self.0.len();
        self.0.retain(|e| &e.ticket != ticket);
        self.0.len() != before
    }

    /// Keeps the places for which `keep` holds, in order.
    pub fn retain(&mut self, keep: impl FnMut(&QueueEntry) -> bool) {
        self.0.retain(keep);
    }

    /// Drops the places whose lease ran out at `now`.
    pub fn drop_dead(&mut self, now: Timestamp) {
        self.0.retain(|e| e.is_live(now));
    }
}

impl Deref for Queue {
    type Target = [QueueEntry];
    fn deref(&self) -> &[QueueEntry] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Queue {
    type Item = &'a QueueEntry;
    type IntoIter = std::slice::Iter<'a, QueueEntry>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl From<Vec<QueueEntry>> for Queue {
    fn from(places: Vec<QueueEntry>) -> Self {
        Queue(places)
    }
}

impl FromIterator<QueueEntry> for Queue {
    fn from_iter<I: IntoIterator<Item = QueueEntry>>(places: I) -> Self {
        Queue(places.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(id: &str) -> Ticket {
        Ticket::new(LockId::new(id).unwrap(), Duration::from_secs(3)).unwrap()
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// What a handoff grants a waiter asking with lock id `l`.
    fn handoff() -> Handoff {
        let lease = Ttl::new(Duration::from_secs(3)).unwrap();
        Handoff::new(LockId::new("l").unwrap(), Holder::default(), None, lease)
    }

    fn ids<'a>(places: impl Iterator<Item = &'a QueueEntry>) -> Vec<&'a str> {
        places.map(|e| e.ticket.as_str()).collect()
    }

    #[test]
    fn places_keep_their_order_and_lapse_with_their_lease() {
        let mut q = Queue::new();
        q.join(&ticket("a"), Mode::Exclusive, handoff(), at(0));
        q.join(&ticket("b"), Mode::Shared, handoff(), at(1_000));
        q.join(&ticket("c"), Mode::Shared, handoff(), at(2_000));
        // A refresh keeps the place and takes the new lease and mode.
        q.join(&ticket("a"), Mode::Shared, handoff(), at(2_500));
        assert_eq!(ids(q.live(at(2_500))), ["a", "b", "c"]);
        assert_eq!(q[0].mode, Mode::Shared);
        assert_eq!(q[0].queued_at, at(0));
        // b's lease (taken at 1 s for 3 s) ends at 4 s: it no longer counts, but stays
        // until something drops it.
        assert_eq!(ids(q.live(at(4_000))), ["a", "c"]);
        assert_eq!(q.len(), 3);
        assert_eq!(
            ids(q.ahead(Some(&LockId::new("c").unwrap()), at(4_000))),
            ["a"]
        );
        // Without a live place of its own, everyone live is ahead.
        assert_eq!(
            ids(q.ahead(Some(&LockId::new("b").unwrap()), at(4_000))),
            ["a", "c"]
        );
        assert_eq!(ids(q.ahead(None, at(4_000))), ["a", "c"]);
        q.drop_dead(at(4_000));
        assert_eq!(ids(q.iter()), ["a", "c"]);
        assert!(q.remove(&LockId::new("a").unwrap()));
        assert!(!q.remove(&LockId::new("a").unwrap()));
        // A place taken after the dead ones are dropped goes to the back.
        q.join(&ticket("b"), Mode::Exclusive, handoff(), at(4_000));
        assert_eq!(ids(q.iter()), ["c", "b"]);
    }

    /// A place kept far back is stale at once, and stays stale when the store's clock steps
    /// back (an NTP step, a failover to a member behind): it is never handed the lock, with
    /// its long lease or any other, until its waiter asks with a claim lease again.
    #[test]
    fn a_place_kept_far_back_stays_stale_when_the_clock_steps_back() {
        let mut q = Queue::new();
        let far = Ticket::new(LockId::new("a").unwrap(), MAX_QUEUE_TTL)
            .unwrap()
            .far_back();
        q.join(&far, Mode::Exclusive, handoff(), at(10_000));
        assert!(q[0].is_live(at(10_000)));
        for now in [10_000, 9_999, 5_000, 0] {
            assert!(!q[0].is_fresh(at(now)), "fresh at {now} ms");
        }
        // Asking with a claim lease makes it fresh again, for that lease.
        q.join(&ticket("a"), Mode::Exclusive, handoff(), at(11_000));
        assert!(q[0].is_fresh(at(11_000)));
        assert!(!q[0].is_fresh(at(14_000)));
    }
}
