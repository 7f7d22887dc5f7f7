//! The rules of one resource: when a lock may be granted, what a grant does to the locks
//! already there (expired ones are taken over), and the fence a grant carries.
//!
//! [`LockTable`](crate::LockTable) applies these rules to the resource a request names;
//! the group operations in [`table`](crate::table) only find and remove locks.

use serde::{Deserialize, Serialize};

use crate::lock::{LockRequest, LockStatus, Mode, SharedLimit, StoredLock};
use crate::mutants::{self, Mutant};
use crate::names::LockId;
use crate::time::Timestamp;

/// Fences issued per millisecond of the clock before a resource's counter runs ahead of it.
pub const FENCES_PER_MS: u64 = 1024;

/// The smallest fence a grant at `now` may carry: `now` in ms times [`FENCES_PER_MS`].
///
/// A grant's fence is `max(counter + 1, fence_floor(now))`. Because of the floor, a resource
/// document may be deleted once its counter is below the floor: a later grant on the same
/// resource starts at a floor at least as high, so fences keep increasing across deletion,
/// provided the store's clock does not go backwards.
#[must_use]
pub fn fence_floor(now: Timestamp) -> u64 {
    now.as_millis().saturating_mul(FENCES_PER_MS)
}

/// The locks of one resource: an exclusive lock, or shared locks, or none; and the fence
/// counter (the last fence granted on it).
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
}

impl ResourceState {
    /// A resource state from stored parts (used by stores that decode documents).
    #[must_use]
    pub fn from_parts(fence: u64, exclusive: Option<StoredLock>, shared: Vec<StoredLock>) -> Self {
        ResourceState {
            last_fence: fence,
            exclusive,
            shared,
        }
    }

    /// No lock at all, live or expired.
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

    /// The number of live shared locks at `now`.
    #[must_use]
    pub fn live_shared(&self, now: Timestamp) -> usize {
        self.shared.iter().filter(|l| l.is_live(now)).count()
    }

    /// The exclusive rule: no live exclusive lock and no live shared lock.
    #[must_use]
    pub fn can_xlock(&self, now: Timestamp) -> bool {
        self.exclusive.as_ref().is_none_or(|l| l.is_expired(now))
            && (mutants::active(Mutant::ExclusiveIgnoresShared)
                || self.shared.iter().all(|l| l.is_expired(now)))
    }

    /// The shared rule: no live exclusive lock, `lock_id` holds no live lock here, and fewer
    /// than `limit` live shared locks.
    #[must_use]
    pub fn can_slock(&self, lock_id: &LockId, limit: Option<SharedLimit>, now: Timestamp) -> bool {
        let live_shared = self.live_shared(now);
        self.exclusive.as_ref().is_none_or(|l| l.is_expired(now))
            && self
                .shared
                .iter()
                .all(|l| &l.lock_id != lock_id || l.is_expired(now))
            && (limit.is_none_or(|m| live_shared < m.get() as usize)
                || mutants::active(Mutant::SharedIgnoresLimit))
    }

    /// The fence the next grant at `now` gets.
    #[must_use]
    pub fn next_fence(&self, now: Timestamp) -> u64 {
        let step = u64::from(!mutants::active(Mutant::FenceNotIncremented));
        self.last_fence.saturating_add(step).max(fence_floor(now))
    }

    /// Whether the (empty) resource may be forgotten at `now` without breaking fences.
    #[must_use]
    pub fn can_delete(&self, now: Timestamp) -> bool {
        self.is_empty() && self.last_fence < fence_floor(now)
    }

    /// Grants `request` in `mode` at `now`, which the caller has checked is allowed: removes
    /// every expired lock (takeover), takes the next fence and stores the lock. Returns the
    /// new lock's status and the lock ids whose expired locks were removed.
    pub(crate) fn grant(
        &mut self,
        mode: Mode,
        request: &LockRequest,
        now: Timestamp,
    ) -> (LockStatus, Vec<LockId>) {
        let mut removed = Vec::new();
        if self.exclusive.as_ref().is_some_and(|l| l.is_expired(now))
            && let Some(l) = self.exclusive.take()
        {
            removed.push(l.lock_id);
        }
        self.shared.retain(|l| {
            let keep = l.is_live(now);
            if !keep {
                removed.push(l.lock_id.clone());
            }
            keep
        });
        self.last_fence = self.next_fence(now);
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
