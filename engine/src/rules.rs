//! The rules of one resource: when a lock may be granted, what a grant does to the locks
//! already there (abandoned ones, expired for the takeover grace, are taken over), and the
//! fence a grant carries.
//!
//! [`LockTable`](crate::LockTable) applies these rules to the resource a request names;
//! the group operations in [`table`](crate::table) only find and remove locks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::{LockRequest, LockStatus, Mode, SharedLimit, StoredLock};
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::queue::QueueEntry;
use crate::time::Timestamp;

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
pub fn check_takeover_grace(grace: Duration) -> Result<Duration, crate::Error> {
    if grace > MAX_TAKEOVER_GRACE {
        return Err(crate::Error::invalid(
            "takeover_grace",
            format!(
                "must be at most {} s, not {grace:?}",
                MAX_TAKEOVER_GRACE.as_secs()
            ),
        ));
    }
    Ok(grace)
}

/// Fences issued per millisecond of the clock before a resource's counter runs ahead of it.
pub const FENCES_PER_MS: u64 = 1024;

/// The fence floor of the store's clock at `now`: `now` in ms times [`FENCES_PER_MS`].
///
/// A grant's fence is `max(counter + 1, floor)`, where `floor` is the highest value this
/// function gave for any `now` the table was used at (see [`LockTable`](crate::LockTable)'s
/// fence clock), so it never goes back even when the clock does. Because of the floor, a
/// resource may be deleted once its counter is below the floor: a later grant on the same
/// resource starts at a floor at least as high, so fences keep increasing across deletion.
#[must_use]
pub fn fence_floor(now: Timestamp) -> u64 {
    now.as_millis().saturating_mul(FENCES_PER_MS)
}

/// The rule of a grant: exclusive, or shared by `lock_id` with a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule<'a> {
    /// `xlock`'s rule ([`ResourceState::can_xlock`]).
    Exclusive {
        /// The ticket of a fair request: its place in the queue ([`crate::queue`]).
        ticket: Option<&'a LockId>,
    },
    /// `slock`'s rule for `lock_id` with `limit` ([`ResourceState::can_slock`]).
    Shared {
        /// The lock id asking.
        lock_id: &'a LockId,
        /// The limit it asks with.
        limit: Option<SharedLimit>,
        /// The ticket of a fair request: its place in the queue ([`crate::queue`]).
        ticket: Option<&'a LockId>,
    },
}

impl<'a> Rule<'a> {
    /// The rule of `request` in `mode` (`limit` is read for a shared request only).
    #[must_use]
    pub fn of(mode: Mode, request: &'a LockRequest, limit: Option<SharedLimit>) -> Self {
        let ticket = request.fair.as_ref().map(|t| &t.id);
        match mode {
            Mode::Exclusive => Rule::Exclusive { ticket },
            Mode::Shared => Rule::Shared {
                lock_id: &request.lock_id,
                limit,
                ticket,
            },
        }
    }

    /// The mode the rule grants.
    #[must_use]
    pub fn mode(&self) -> Mode {
        match self {
            Rule::Exclusive { .. } => Mode::Exclusive,
            Rule::Shared { .. } => Mode::Shared,
        }
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
    pub queue: Vec<QueueEntry>,
}

impl ResourceState {
    /// A resource state from stored parts (used by stores that decode documents).
    #[must_use]
    pub fn from_parts(fence: u64, exclusive: Option<StoredLock>, shared: Vec<StoredLock>) -> Self {
        ResourceState {
            last_fence: fence,
            exclusive,
            shared,
            queue: Vec::new(),
        }
    }

    /// The same state with `queue` as its waiters' places (for stores that decode them).
    #[must_use]
    pub fn with_queue(mut self, queue: Vec<QueueEntry>) -> Self {
        self.queue = queue;
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

    /// Whether `rule` allows a grant at `now` with the takeover `grace`: the locks allow it,
    /// and no live place that conflicts with it is ahead in the queue
    /// ([`ResourceState::queue_allows`]).
    #[must_use]
    pub fn allows(&self, rule: &Rule<'_>, now: Timestamp, grace: Duration) -> bool {
        let locks = match rule {
            Rule::Exclusive { .. } => self.can_xlock(now, grace),
            Rule::Shared { lock_id, limit, .. } => self.can_slock(lock_id, *limit, now, grace),
        };
        locks && self.queue_allows(rule, now, grace)
    }

    /// How long after `now` `rule` first allows a grant, should no lock here be renewed or
    /// released and no waiter ask again: the earliest instant a held lock is abandoned or a
    /// waiter's place lapses at which the rule allows (locks are only ever abandoned and
    /// places only lapse as time goes on, so the rule, once it allows, keeps allowing).
    /// `None` when no such instant comes (a lock without a TTL is in the way). What a
    /// refusal reports as `retry_in`.
    #[must_use]
    pub fn free_in(&self, rule: &Rule<'_>, now: Timestamp, grace: Duration) -> Option<Duration> {
        let mut ends: Vec<Timestamp> = self
            .locks()
            .filter_map(|(_, l)| l.expires_at.map(|e| e.saturating_add(grace)))
            .chain(self.queue.iter().map(|e| e.expires_at))
            .filter(|&t| t > now)
            .collect();
        ends.sort_unstable();
        ends.into_iter()
            .find(|&t| self.allows(rule, t, grace))
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

    /// Grants `request` in `mode` at `now` with the fence clock at `floor`, which the caller
    /// has checked is allowed: removes every abandoned lock (takeover), takes the next fence
    /// and stores the lock. Returns the new lock's status and the lock ids whose locks were
    /// removed.
    pub(crate) fn grant(
        &mut self,
        mode: Mode,
        request: &LockRequest,
        now: Timestamp,
        grace: Duration,
        floor: u64,
    ) -> (LockStatus, Vec<LockId>) {
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
        self.dequeue_granted(request.fair.as_ref(), now);
        self.last_fence = self.next_fence(floor);
        let lock = StoredLock::granted(request, now, self.last_fence);
        let status = lock.status(&request.resource, mode, now);
        match mode {
            Mode::Exclusive => self.exclusive = Some(lock),
            Mode::Shared => self.shared.push(lock),
        }
        (status, removed)
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
