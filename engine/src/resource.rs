//! The rules of one resource, in one place: when a lock may be granted, what a refusal
//! reports (`retry_in`, a fair request's place) and does to the queue, what a grant does to
//! the locks already there (abandoned ones, expired for the takeover grace, are taken over)
//! and to the queue, the fence a grant carries, and when a lock may be taken over or
//! renewed.
//!
//! [`LockTable`](crate::LockTable) applies these rules to the resource a request names;
//! the group operations in [`table`](crate::table) only find and remove locks, asking
//! [`StoredLock::is_abandoned`] and [`StoredLock::is_renewable`] here which ones.
//!
//! ## Fair requests
//!
//! A fair request that is refused takes a place at the back of the resource's [`Queue`],
//! or keeps (and refreshes) the place it has, in the same write that refused it; a grant
//! removes the winner's place. The grant rule with a queue: a request is granted iff the
//! rule without a queue grants it **and** no live, conflicting place is ahead of its own
//! ([`ResourceState::queue_allows`]). A request without a place of its own (every request
//! that is not fair, and a fair request before its first refusal) has every place ahead of
//! it: it may not overtake any waiter it conflicts with, but it takes no place when refused.
//!
//! - An exclusive request conflicts with every place ahead.
//! - A shared request conflicts with an exclusive place ahead (writer preference: readers
//!   that come after a waiting writer wait behind it); shared places ahead do not block it,
//!   except under a limit, where they hold their slots first: with limit `m`, it is granted
//!   only if the held shared locks plus the live shared places ahead are fewer than `m`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{Access, Mode, SharedLimit};
use crate::error::Error;
use crate::lock::{LockRequest, StoredLock};
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::queue::{Queue, QueueEntry, Ticket};
use crate::status::{LockStatus, Queued};
use crate::time::Timestamp;

mod handoff;
#[cfg(test)]
mod tests;

/// The takeover grace of a store that is not told otherwise: how long past its expiry a lock
/// that was not released still blocks every other grant ([`StoredLock::is_abandoned`]).
///
/// A replica set judges expiry with the clock of whichever member is primary, and a
/// failover switches clocks: a lease written under one member's clock and judged by a member
/// whose clock runs ahead expires early by the difference, and another client could take it
/// while its holder still trusts it. The grace absorbs that difference. Members kept by NTP
/// are within milliseconds of each other; ntpd corrects a clock by a step only once it is
/// 128 ms off, and chrony's usual `makestep 1.0` once it is 1 s off, so a member can be up
/// to about a second off before it is put right. Two seconds covers that twice over, and
/// costs a crashed holder's lock two seconds more before another client gets it (a release
/// frees a lock at once, grace or not).
pub const DEFAULT_TAKEOVER_GRACE: Duration = Duration::from_secs(2);

/// The longest takeover grace a store accepts: a grace is a clock error to absorb, and an
/// hour of it is a broken deployment, not a skewed one.
pub const MAX_TAKEOVER_GRACE: Duration = Duration::from_secs(3600);

/// Checks a store's takeover grace.
///
/// # Errors
/// `InvalidArgument` naming `takeover_grace` when it is above [`MAX_TAKEOVER_GRACE`].
pub fn check_takeover_grace(grace: Duration) -> Result<Duration, Error> {
    if grace > MAX_TAKEOVER_GRACE {
        return Err(Error::invalid(
            "takeover_grace",
            format!(
                "must be at most {} s, not {grace:?}",
                MAX_TAKEOVER_GRACE.as_secs()
            ),
        ));
    }
    Ok(grace)
}

/// Fences per second of the fence clock: a reading's seconds are shifted by 22 bits, and its
/// increment within the second fills the bits below, capped at `2^22 - 1`.
pub const FENCES_PER_SECOND: u64 = 1 << 22;

/// A reading of a store's fence clock, in the shape of MongoDB's cluster time (a BSON
/// timestamp): seconds, and an increment that orders the readings within a second. Every
/// store takes its fence floor from such a reading by the one rule
/// [`ClusterTime::fence_floor`]: MongoDB from the replica set's `$$CLUSTER_TIME`, which no
/// failover moves back (its pipelines write the same rule in the server's language, held to
/// this one by the differential and predicate tests); a store without a cluster time, such
/// as the in-memory one, from its clock ([`ClusterTime::at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterTime {
    /// Whole seconds since the Unix epoch.
    pub seconds: u32,
    /// The order of the reading within its second.
    pub increment: u32,
}

impl ClusterTime {
    /// The reading of a store without a cluster time at `now`: its seconds, and the
    /// milliseconds within the second as the increment, so that the floor grows with `now`
    /// (seconds past `u32::MAX`, in the year 2106, saturate).
    #[must_use]
    pub fn at(now: Timestamp) -> Self {
        let ms = now.as_millis();
        ClusterTime {
            seconds: u32::try_from(ms / 1000).unwrap_or(u32::MAX),
            increment: u32::try_from(ms % 1000).unwrap_or(0),
        }
    }

    /// The fence floor of this reading: `seconds * 2^22 + min(increment, 2^22 - 1)`.
    ///
    /// A grant's fence is `max(counter + 1, floor)`, where `floor` is the highest value this
    /// rule gave for any reading the store has made (see [`LockTable`](crate::LockTable)'s
    /// fence clock), so it never goes back even when the clock does. Because of the floor, a
    /// resource may be deleted once its counter is below the floor: a later grant on the same
    /// resource starts at a floor at least as high, so fences keep increasing across
    /// deletion. It stays below `i64::MAX` (BSON's largest integer) for every reading.
    #[must_use]
    pub fn fence_floor(self) -> u64 {
        u64::from(self.seconds) * FENCES_PER_SECOND
            + u64::from(self.increment).min(FENCES_PER_SECOND - 1)
    }
}

/// The fence floor of a store without a cluster time, whose clock reads `now`:
/// `ClusterTime::at(now).fence_floor()`.
#[must_use]
pub fn fence_floor(now: Timestamp) -> u64 {
    ClusterTime::at(now).fence_floor()
}

/// A lock the store handed to the head of a queue ([`ResourceState::hand_over`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handed {
    /// The ticket of the place it was handed to (a secret, like a lock id).
    pub ticket: LockId,
    /// The lock as granted, with its claim lease.
    pub status: LockStatus,
}

/// What a write did to a resource besides its own answer: the locks it handed to the head
/// of the queue, and the lock ids whose abandoned locks it took over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Moves {
    /// The locks handed over, in the order of their places.
    pub handed: Vec<Handed>,
    /// The lock ids whose locks were taken over (removed).
    pub taken_over: Vec<LockId>,
}

impl Moves {
    /// Adds `other`'s moves to these.
    pub fn extend(&mut self, other: Moves) {
        self.handed.extend(other.handed);
        self.taken_over.extend(other.taken_over);
    }
}

/// The locks of one resource: an exclusive lock, or shared locks, or none; the fence
/// counter (the last fence granted on it); and the queue of fair waiters.
///
/// Invariant kept by the grants: never an exclusive and a shared lock together, and at most
/// one lock per lock id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceState {
    /// The last fence granted on this resource (the counter the next grant starts from).
    pub last_fence: u64,
    /// The exclusive lock, if any (live or expired).
    pub exclusive: Option<StoredLock>,
    /// The shared locks in grant order (live or expired).
    pub shared: Vec<StoredLock>,
    /// The places of fair waiters, first come first ([`crate::queue`]); places whose lease
    /// ran out stay until the next write of the resource drops them.
    pub queue: Queue,
}

impl ResourceState {
    /// A resource state from stored parts (used by stores that decode documents).
    #[must_use]
    pub fn from_parts(fence: u64, exclusive: Option<StoredLock>, shared: Vec<StoredLock>) -> Self {
        ResourceState {
            last_fence: fence,
            exclusive,
            shared,
            queue: Queue::new(),
        }
    }

    /// The same state with `queue` as its waiters' places (for stores that decode them).
    #[must_use]
    pub fn with_queue(mut self, queue: Vec<QueueEntry>) -> Self {
        self.queue = Queue::from(queue);
        self
    }

    /// No lock at all, live or expired (waiters may still be queued).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.exclusive.is_none() && self.shared.is_empty()
    }

    /// Every lock with its mode.
    pub fn locks(&self) -> impl Iterator<Item = (Mode, &StoredLock)> {
        self.exclusive
            .iter()
            .map(|l| (Mode::Exclusive, l))
            .chain(self.shared.iter().map(|l| (Mode::Shared, l)))
    }

    /// The lock `lock_id` holds here, if any.
    #[must_use]
    pub fn lock_of(&self, lock_id: &LockId) -> Option<(Mode, &StoredLock)> {
        self.locks().find(|(_, l)| &l.lock_id == lock_id)
    }

    /// The number of held shared locks at `now` (live, or expired but inside the takeover
    /// `grace`): the ones a shared limit counts.
    #[must_use]
    pub fn held_shared(&self, now: Timestamp, grace: Duration) -> usize {
        self.shared.iter().filter(|l| l.is_held(now, grace)).count()
    }

    /// The exclusive rule: no held exclusive lock and no held shared lock (a lock is held
    /// until its takeover `grace` after expiry has passed: [`StoredLock::is_held`]).
    #[must_use]
    pub fn can_xlock(&self, now: Timestamp, grace: Duration) -> bool {
        self.exclusive
            .as_ref()
            .is_none_or(|l| l.is_abandoned(now, grace))
            && (mutants::active(Mutant::ExclusiveIgnoresShared)
                || self.shared.iter().all(|l| l.is_abandoned(now, grace)))
    }

    /// The shared rule: no held exclusive lock, `lock_id` holds no held lock here, and fewer
    /// than `limit` held shared locks.
    #[must_use]
    pub fn can_slock(
        &self,
        lock_id: &LockId,
        limit: Option<SharedLimit>,
        now: Timestamp,
        grace: Duration,
    ) -> bool {
        let held_shared = self.held_shared(now, grace);
        self.exclusive
            .as_ref()
            .is_none_or(|l| l.is_abandoned(now, grace))
            && self
                .shared
                .iter()
                .all(|l| &l.lock_id != lock_id || l.is_abandoned(now, grace))
            && (limit.is_none_or(|m| held_shared < m.get() as usize)
                || mutants::active(Mutant::SharedIgnoresLimit))
    }

    /// Whether `request` may be granted at `now` with the takeover `grace`: the locks allow
    /// it (the exclusive or the shared rule, as its access says), and no live place that
    /// conflicts with it is ahead in the queue ([`ResourceState::queue_allows`]).
    #[must_use]
    pub fn allows(&self, request: &LockRequest, now: Timestamp, grace: Duration) -> bool {
        let locks = match request.access {
            Access::Exclusive => self.can_xlock(now, grace),
            Access::Shared(limit) => self.can_slock(&request.lock_id, limit, now, grace),
        };
        locks && self.queue_allows(request, now, grace)
    }

    /// How long after `now` `request` may first be granted, should no lock here be renewed or
    /// released and no waiter ask again: the earliest instant a held lock is abandoned or a
    /// waiter's place lapses at which the rules allow it (locks are only ever abandoned and
    /// places only lapse as time goes on, so the rules, once they allow, keep allowing).
    /// `None` when no such instant comes (a lock without a TTL is in the way). What a
    /// refusal reports as `retry_in`.
    #[must_use]
    pub fn free_in(
        &self,
        request: &LockRequest,
        now: Timestamp,
        grace: Duration,
    ) -> Option<Duration> {
        let mut ends: Vec<Timestamp> = self
            .locks()
            .filter_map(|(_, l)| l.expires_at.map(|e| e.saturating_add(grace)))
            .chain(self.queue.iter().map(|e| e.expires_at))
            .chain(self.queue.iter().filter_map(|e| e.fresh_until))
            .filter(|&t| t > now)
            .collect();
        ends.sort_unstable();
        ends.into_iter()
            .find(|&t| self.allows(request, t, grace))
            .map(|t| t.saturating_duration_since(now))
    }

    /// The fence the next grant gets when the store's fence clock reads `floor`.
    #[must_use]
    pub fn next_fence(&self, floor: u64) -> u64 {
        let step = u64::from(!mutants::active(Mutant::FenceNotIncremented));
        self.last_fence.saturating_add(step).max(floor)
    }

    /// Whether the (empty) resource may be forgotten, when the store's fence clock reads
    /// `floor`, without breaking fences.
    #[must_use]
    pub fn can_delete(&self, floor: u64) -> bool {
        self.is_empty() && self.queue.is_empty() && self.last_fence < floor
    }

    /// The live places of the queue at `now`, in order.
    pub fn waiters(&self, now: Timestamp) -> impl Iterator<Item = &QueueEntry> {
        self.queue.live(now)
    }

    /// The queue's part of the grant rule: whether no live place that conflicts with
    /// `request` is ahead of its own (see the [module documentation](self)).
    #[must_use]
    pub fn queue_allows(&self, request: &LockRequest, now: Timestamp, grace: Duration) -> bool {
        if mutants::active(Mutant::QueueIgnored) {
            return true;
        }
        let ticket = request.ticket();
        match request.access {
            Access::Exclusive => self.queue.ahead(ticket, now).next().is_none(),
            Access::Shared(limit) => {
                let mut shared_ahead = 0usize;
                for e in self.queue.ahead(ticket, now) {
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

    /// How many fresh places ahead of the request's own conflict with it (every place
    /// for an exclusive request or a limited shared one, the exclusive places for a shared
    /// one without a limit), and how many live ones: what a refusal reports as the
    /// waiter's place.
    #[must_use]
    pub fn queued(&self, request: &LockRequest, now: Timestamp) -> Queued {
        let ticket = request.ticket();
        Queued {
            ahead: self.conflicting(request, self.queue.ahead(ticket, now)),
            live_ahead: self.conflicting(request, self.queue.live_ahead(ticket, now)),
            fence: self.last_fence,
        }
    }

    /// How many of the places `ahead` conflict with `request`.
    fn conflicting<'a>(
        &self,
        request: &LockRequest,
        ahead: impl Iterator<Item = &'a QueueEntry>,
    ) -> u32 {
        let n = match request.access {
            Access::Exclusive | Access::Shared(Some(_)) => ahead.count(),
            Access::Shared(None) => ahead.filter(|e| e.mode == Mode::Exclusive).count(),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Drops the places whose lease ran out at `now`.
    pub fn drop_dead_waiters(&mut self, now: Timestamp) {
        self.queue.drop_dead(now);
    }

    /// Removes `ticket`'s place (a waiter that stopped waiting), and the dead places.
    /// Returns whether it had one.
    pub fn leave_queue(&mut self, ticket: &LockId, now: Timestamp) -> bool {
        let had = self.queue.remove(ticket);
        self.queue.drop_dead(now);
        had
    }

    /// Decides `request` at `now` with the takeover `grace` and the fence clock at `floor`.
    ///
    /// First the store hands the lock to the head of the queue if it is free for it
    /// ([`ResourceState::hand_over`]: the holder released it or is gone). Then a fair request
    /// whose lock id holds a lock here in the mode it asks for claims it
    /// ([`ResourceState::claim`]); any other request is granted if the rules allow, or
    /// refused. A refusal leaves the locks as they were and says when the rule would allow
    /// the request; a fair one takes or refreshes its place in the queue first, and reports
    /// it. Returns the answer, and what the write handed over and took over.
    pub fn decide(
        &mut self,
        request: &LockRequest,
        now: Timestamp,
        grace: Duration,
        floor: u64,
    ) -> (Result<LockStatus, Error>, Moves) {
        let revive = mutants::active(Mutant::ClaimRevivesLapsed);
        if revive && let Some(status) = self.claim(request, now, grace) {
            return (Ok(status), Moves::default());
        }
        let mut moves = self.hand_over(&request.resource, now, grace, floor);
        if !revive && let Some(status) = self.claim(request, now, grace) {
            return (Ok(status), moves);
        }
        if self.allows(request, now, grace) {
            let (status, taken_over) = self.grant(request, now, grace, floor);
            moves.taken_over.extend(taken_over);
            return (Ok(status), moves);
        }
        let queued = request.fair.as_ref().map(|ticket| {
            self.queue.join(
                ticket,
                request.mode(),
                request.handoff(ticket.handoff_lease()),
                now,
            );
            self.queued(request, now)
        });
        let refused = Error::AlreadyLocked {
            resource: request.resource.clone(),
            retry_in: self.free_in(request, now, grace),
            queued,
        };
        (Err(refused), moves)
    }

    /// A grant removes the winner's place and the dead ones.
    fn dequeue_granted(&mut self, ticket: Option<&Ticket>, now: Timestamp) {
        self.queue.drop_dead(now);
        if let Some(t) = ticket
            && !mutants::active(Mutant::GrantLeavesEntry)
        {
            self.queue.remove(&t.id);
        }
    }

    /// Removes every abandoned lock (a grant takes them over); returns their lock ids.
    pub(super) fn take_over(&mut self, now: Timestamp, grace: Duration) -> Vec<LockId> {
        let mut removed = Vec::new();
        if self
            .exclusive
            .as_ref()
            .is_some_and(|l| l.is_abandoned(now, grace))
            && let Some(l) = self.exclusive.take()
        {
            removed.push(l.lock_id);
        }
        self.shared.retain(|l| {
            let keep = l.is_held(now, grace);
            if !keep {
                removed.push(l.lock_id.clone());
            }
            keep
        });
        removed
    }

    /// Stores a granted `lock` in `mode`.
    pub(super) fn install(&mut self, lock: StoredLock, mode: Mode) {
        match mode {
            Mode::Exclusive => self.exclusive = Some(lock),
            Mode::Shared => self.shared.push(lock),
        }
    }

    /// Grants `request` at `now` with the fence clock at `floor`, which the caller
    /// has checked is allowed: removes every abandoned lock (takeover), takes the next fence
    /// and stores the lock. Returns the new lock's status and the lock ids whose locks were
    /// removed.
    pub(crate) fn grant(
        &mut self,
        request: &LockRequest,
        now: Timestamp,
        grace: Duration,
        floor: u64,
    ) -> (LockStatus, Vec<LockId>) {
        let removed = self.take_over(now, grace);
        self.dequeue_granted(request.fair.as_ref(), now);
        self.last_fence = self.next_fence(floor);
        let lock = StoredLock::granted(request, now, self.last_fence);
        let status = lock.status(&request.resource, request.mode(), now);
        self.install(lock, request.mode());
        (status, removed)
    }

    /// Takes the places that would be handed a lock of `lock_id` out of the queue: a release
    /// of a lock id also gives up its waiting on the resources it releases, so that the
    /// release does not hand the lock straight back to it.
    pub(crate) fn drop_places_of(&mut self, lock_id: &LockId) {
        self.queue
            .retain(|p| p.handoff.as_ref().is_none_or(|h| &h.lock_id != lock_id));
    }

    /// Removes the lock of `lock_id` when `pred` holds for it.
    pub(crate) fn remove_if(
        &mut self,
        lock_id: &LockId,
        pred: impl Fn(&StoredLock) -> bool,
    ) -> Option<(Mode, StoredLock)> {
        if self
            .exclusive
            .as_ref()
            .is_some_and(|l| &l.lock_id == lock_id && pred(l))
        {
            return self.exclusive.take().map(|l| (Mode::Exclusive, l));
        }
        let i = self
            .shared
            .iter()
            .position(|l| &l.lock_id == lock_id && pred(l))?;
        Some((Mode::Shared, self.shared.remove(i)))
    }
}

/// The takeover and renewal predicates: every rule and store asks these (MongoDB's
/// pipelines write the same comparisons in their own language, checked against these by
/// the predicate tests).
impl StoredLock {
    /// Abandoned at `now` with the takeover `grace`: `expires_at + grace <= now`. The one
    /// takeover predicate of every rule and store: until then the lock blocks every other
    /// grant, counts towards a shared limit and is spared by purge, though it has expired,
    /// so that a store whose clock runs up to `grace` ahead of the clock that wrote
    /// `expires_at` (a new primary) cannot hand it to another holder early.
    #[must_use]
    pub fn is_abandoned(&self, now: Timestamp, grace: Duration) -> bool {
        let now = if crate::mutants::active(crate::mutants::Mutant::TakeoverUnexpired) {
            now.saturating_add(Duration::from_millis(1))
        } else {
            now
        };
        let grace = if crate::mutants::active(crate::mutants::Mutant::TakeoverIgnoresGrace) {
            Duration::ZERO
        } else {
            grace
        };
        self.expires_at
            .is_some_and(|e| e.saturating_add(grace) <= now)
    }

    /// Held at `now` with the takeover `grace`: not [abandoned](StoredLock::is_abandoned).
    #[must_use]
    pub fn is_held(&self, now: Timestamp, grace: Duration) -> bool {
        !self.is_abandoned(now, grace)
    }

    /// Renewable at `now` with the renew `margin` and the takeover `grace`: nobody may take
    /// it over before `now + margin`, that is `expires_at + grace > now + margin` (locks
    /// without a TTL always are). So a lock whose expiry a store's clock has passed may
    /// still be renewed inside the grace, by its own holder only: nobody else can have
    /// taken it. The one renewal predicate of every rule and store; a lock that is not
    /// renewable gives `NotRenewable`.
    #[must_use]
    pub fn is_renewable(&self, now: Timestamp, margin: Duration, grace: Duration) -> bool {
        let margin = if crate::mutants::active(crate::mutants::Mutant::RenewWithoutMargin) {
            Duration::ZERO
        } else {
            margin
        };
        self.expires_at
            .is_none_or(|e| e.saturating_add(grace) > now.saturating_add(margin))
    }
}
