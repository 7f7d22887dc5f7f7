//! The lock table and every lock transition, as pure functions of (state, request, now).
//!
//! Single-resource operations (`xlock`, `slock`) touch one [`ResourceState`]. Group
//! operations (`unlock`, `renew`, `status`, `purge`) work over a slice of tables, so a store
//! that shards its resources (the in-memory store does) applies the same code to all shards
//! at once; a single table is the one-shard case.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::filter::Filter;
use crate::lock::{
    LockRequest, LockStatus, Mode, SharedLimit, StoredLock, sort_newest_first, sort_oldest_first,
};
use crate::mutants::{self, Mutant};
use crate::names::{LockId, Resource};
use crate::time::{Timestamp, Ttl};

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
    fn grant(
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
    fn remove_if(
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

/// Every lock of a store: resources by name, plus an index from lock id to the resources its
/// group holds. `Clone + Eq + Hash`, so a model checker can hold it.
///
/// The index is a function of the resources, so equality, hashing and `Debug` look at the
/// resources only, which are in a `BTreeMap`: the fingerprint and the printed form do not
/// depend on hashing. The index itself is a hash map (with foldhash): it is only ever
/// searched for one lock id, and a hash lookup costs a fraction of a B-tree search by string.
#[derive(Clone, Default)]
pub struct LockTable {
    resources: BTreeMap<Resource, ResourceState>,
    groups: HashMap<LockId, GroupResources, foldhash::fast::RandomState>,
}

/// The resources one group holds a lock on, in the index: the first one inline, since most
/// groups hold one lock (no allocation for them), the others in a set.
#[derive(Clone, Debug, Default)]
struct GroupResources {
    first: Option<Resource>,
    rest: BTreeSet<Resource>,
}

impl GroupResources {
    fn insert(&mut self, resource: &Resource) {
        if self.first.as_ref() == Some(resource) || self.rest.contains(resource) {
            return;
        }
        if self.first.is_none() {
            self.first = Some(resource.clone());
        } else {
            self.rest.insert(resource.clone());
        }
    }

    fn remove(&mut self, resource: &Resource) {
        if self.first.as_ref() == Some(resource) {
            self.first = None;
        } else {
            self.rest.remove(resource);
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }

    fn retain(&mut self, mut keep: impl FnMut(&Resource) -> bool) {
        if self.first.as_ref().is_some_and(|r| !keep(r)) {
            self.first = None;
        }
        self.rest.retain(keep);
    }

    fn iter(&self) -> impl Iterator<Item = &Resource> {
        self.first.iter().chain(&self.rest)
    }
}

/// Equal when they hold the same resources, wherever each is kept.
impl PartialEq for GroupResources {
    fn eq(&self, other: &Self) -> bool {
        let len = |h: &GroupResources| usize::from(h.first.is_some()) + h.rest.len();
        len(self) == len(other)
            && self
                .iter()
                .all(|r| other.first.as_ref() == Some(r) || other.rest.contains(r))
    }
}

impl PartialEq for LockTable {
    fn eq(&self, other: &Self) -> bool {
        self.resources == other.resources
    }
}

impl Eq for LockTable {}

impl Hash for LockTable {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.resources.hash(state);
    }
}

impl fmt::Debug for LockTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockTable")
            .field("resources", &self.resources)
            .finish_non_exhaustive()
    }
}

impl LockTable {
    /// The empty table.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A table holding `resources` (for stores that decode stored documents).
    #[must_use]
    pub fn from_resources(resources: impl IntoIterator<Item = (Resource, ResourceState)>) -> Self {
        let mut table = LockTable::new();
        for (name, state) in resources {
            for (_, lock) in state.locks() {
                table.index(&lock.lock_id, &name);
            }
            table.resources.insert(name, state);
        }
        table
    }

    /// The resources, by name, including emptied ones not yet deleted by a purge.
    #[must_use]
    pub fn resources(&self) -> &BTreeMap<Resource, ResourceState> {
        &self.resources
    }

    /// One resource's state.
    #[must_use]
    pub fn resource(&self, name: &Resource) -> Option<&ResourceState> {
        self.resources.get(name)
    }

    /// The number of locks, live or expired.
    #[must_use]
    pub fn lock_count(&self) -> usize {
        self.resources.values().map(|r| r.locks().count()).sum()
    }

    fn index(&mut self, lock_id: &LockId, resource: &Resource) {
        self.groups
            .entry(lock_id.clone())
            .or_default()
            .insert(resource);
    }

    fn unindex(&mut self, lock_id: &LockId, resource: &Resource) {
        if let Some(held) = self.groups.get_mut(lock_id) {
            held.remove(resource);
            if held.is_empty() {
                self.groups.remove(lock_id);
            }
        }
    }

    /// Grants an exclusive lock iff the resource has no live lock; expired locks are taken
    /// over. Not re-entrant.
    ///
    /// # Errors
    /// `AlreadyLocked` when a live lock (of any lock id, this one included) is present.
    pub fn xlock(&mut self, request: &LockRequest, now: Timestamp) -> Result<LockStatus, Error> {
        self.grant_if(Mode::Exclusive, request, now, |r| r.can_xlock(now))
    }

    /// Grants a shared lock iff there is no live exclusive lock, the lock id holds no live
    /// lock on the resource, and fewer than `limit` live shared locks exist (`None`: no
    /// limit). A fresh resource obeys the limit like any other.
    ///
    /// # Errors
    /// `AlreadyLocked` when the rule refuses.
    pub fn slock(
        &mut self,
        request: &LockRequest,
        limit: Option<SharedLimit>,
        now: Timestamp,
    ) -> Result<LockStatus, Error> {
        self.grant_if(Mode::Shared, request, now, |r| {
            r.can_slock(&request.lock_id, limit, now)
        })
    }

    /// Grants `request` in `mode` if `allowed` holds for the resource's state (an empty state
    /// for a resource the table does not know). One search of the table either way; a refused
    /// request leaves the table as it was.
    fn grant_if(
        &mut self,
        mode: Mode,
        request: &LockRequest,
        now: Timestamp,
        allowed: impl Fn(&ResourceState) -> bool,
    ) -> Result<LockStatus, Error> {
        let refused = || Error::AlreadyLocked {
            resource: request.resource.clone(),
        };
        let (status, taken_over) = match self.resources.entry(request.resource.clone()) {
            Entry::Occupied(entry) => {
                let state = entry.into_mut();
                if !allowed(state) {
                    return Err(refused());
                }
                state.grant(mode, request, now)
            }
            Entry::Vacant(entry) => {
                let mut state = ResourceState::default();
                if !allowed(&state) {
                    return Err(refused());
                }
                let granted = state.grant(mode, request, now);
                entry.insert(state);
                granted
            }
        };
        for lock_id in &taken_over {
            self.unindex(lock_id, &request.resource);
        }
        self.index(&request.lock_id, &request.resource);
        Ok(status)
    }

    /// The locks of `lock_id`, with their resource and mode.
    pub fn group<'a>(
        &'a self,
        lock_id: &LockId,
    ) -> impl Iterator<Item = (&'a Resource, Mode, &'a StoredLock)> + 'a {
        let lock_id = lock_id.clone();
        self.groups
            .get(&lock_id)
            .into_iter()
            .flat_map(GroupResources::iter)
            .filter_map(move |name| {
                let state = self.resources.get(name)?;
                let (mode, lock) = state.lock_of(&lock_id)?;
                Some((name, mode, lock))
            })
    }

    /// Removes the locks of `lock_id` for which `pred` holds; returns their statuses at `now`.
    fn remove_group_where(
        &mut self,
        lock_id: &LockId,
        now: Timestamp,
        pred: impl Fn(&StoredLock) -> bool,
        out: &mut Vec<LockStatus>,
    ) {
        // The group's index entry is taken out, trimmed to the locks that stay, and put back
        // only if any do (unlock removes them all).
        let Some((lock_id, mut names)) = self.groups.remove_entry(lock_id) else {
            return;
        };
        let resources = &mut self.resources;
        names.retain(|name| {
            let removed = resources
                .get_mut(name)
                .and_then(|state| state.remove_if(&lock_id, &pred));
            if let Some((mode, lock)) = &removed {
                out.push(lock.status(name, *mode, now));
            }
            removed.is_none()
        });
        if !names.is_empty() {
            self.groups.insert(lock_id, names);
        }
    }

    /// Removes, in one pass over the resources, every lock for which `doomed` holds, and
    /// takes them out of the index; appends their statuses at `now` to `out`.
    fn remove_where(
        &mut self,
        now: Timestamp,
        doomed: impl Fn(&StoredLock) -> bool,
        out: &mut Vec<LockStatus>,
    ) {
        let first = out.len();
        for (name, state) in &mut self.resources {
            if state.exclusive.as_ref().is_some_and(&doomed)
                && let Some(lock) = state.exclusive.take()
            {
                out.push(lock.status(name, Mode::Exclusive, now));
            }
            state.shared.retain(|lock| {
                let keep = !doomed(lock);
                if !keep {
                    out.push(lock.status(name, Mode::Shared, now));
                }
                keep
            });
        }
        for removed in &out[first..] {
            self.unindex(&removed.lock_id, &removed.resource);
        }
    }

    /// Unlocks a group; see [`unlock`].
    pub fn unlock(&mut self, lock_id: &LockId, now: Timestamp) -> Vec<LockStatus> {
        unlock(&mut [self], lock_id, now)
    }

    /// Renews a group; see [`renew`].
    ///
    /// # Errors
    /// As [`renew`].
    pub fn renew(
        &mut self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
        now: Timestamp,
    ) -> Result<Vec<LockStatus>, Error> {
        renew(&mut [self], lock_id, ttl, margin, now)
    }

    /// Renews the one lock `lock_id` holds on `resource`, and no other lock of its group:
    /// sets its `expires_at = now + ttl` and `renewed_at = now` (a lock without a TTL
    /// included) and returns it. For a holder that knows its group is this one lock (a
    /// `Locker` guard), the same as [`renew`] of the group, in one step on one resource.
    ///
    /// # Errors
    /// `LockNotFound` when `lock_id` holds no lock on `resource` (released, purged or taken
    /// over); `NotRenewable` (nothing changed) when it expires at or before `now + margin`.
    pub fn renew_one(
        &mut self,
        resource: &Resource,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
        now: Timestamp,
    ) -> Result<LockStatus, Error> {
        let margin = if mutants::active(Mutant::RenewWithoutMargin) {
            Duration::ZERO
        } else {
            margin
        };
        let state = self
            .resources
            .get_mut(resource)
            .ok_or(Error::LockNotFound)?;
        let (mode, lock) = state
            .exclusive
            .iter_mut()
            .map(|l| (Mode::Exclusive, l))
            .chain(state.shared.iter_mut().map(|l| (Mode::Shared, l)))
            .find(|(_, l)| &l.lock_id == lock_id)
            .ok_or(Error::LockNotFound)?;
        if lock
            .expires_at
            .is_some_and(|e| e <= now.saturating_add(margin))
        {
            return Err(Error::NotRenewable {
                locks: vec![lock.status(resource, mode, now)],
            });
        }
        lock.expires_at = Some(now.saturating_add(ttl.as_duration()));
        lock.renewed_at = Some(now);
        Ok(lock.status(resource, mode, now))
    }

    /// Removes the one lock `lock_id` holds on `resource`, live or expired, and no other
    /// lock of its group; returns it as it was just before removal, or `None` when there is
    /// none (already released, purged or taken over). For a holder that knows its group is
    /// this one lock, the same as [`unlock`] of the group.
    pub fn unlock_one(
        &mut self,
        resource: &Resource,
        lock_id: &LockId,
        now: Timestamp,
    ) -> Option<LockStatus> {
        let (mode, lock) = self
            .resources
            .get_mut(resource)?
            .remove_if(lock_id, |_| true)?;
        if let Some(names) = self.groups.get_mut(lock_id) {
            names.remove(resource);
            if names.is_empty() {
                self.groups.remove(lock_id);
            }
        }
        Some(lock.status(resource, mode, now))
    }

    /// Reports matching locks; see [`status`].
    #[must_use]
    pub fn status(&self, filter: &Filter, now: Timestamp) -> Vec<LockStatus> {
        status(&[self], filter, now)
    }

    /// Purges expired groups; see [`purge`].
    pub fn purge(&mut self, now: Timestamp) -> Vec<LockStatus> {
        purge(&mut [self], now)
    }

    fn expired_groups(&self, now: Timestamp, out: &mut Vec<LockId>) {
        for state in self.resources.values() {
            for (_, lock) in state.locks() {
                if lock.is_expired(now) {
                    out.push(lock.lock_id.clone());
                }
            }
        }
    }
}

/// Removes every lock of `lock_id`, live or expired, from all `shards`, and returns each
/// one's status as it was just before removal, newest first. Unknown lock id: empty list.
/// Emptied resources stay (with their fence counter) until a purge deletes them.
pub fn unlock<T: DerefMut<Target = LockTable>>(
    shards: &mut [T],
    lock_id: &LockId,
    now: Timestamp,
) -> Vec<LockStatus> {
    let mut out = Vec::new();
    for table in shards.iter_mut() {
        table.remove_group_where(lock_id, now, |_| true, &mut out);
    }
    sort_newest_first(&mut out);
    out
}

/// Sets `expires_at = now + ttl` and `renewed_at = now` on every lock of `lock_id`, locks
/// without a TTL included, and returns the renewed statuses oldest first. All or nothing.
///
/// # Errors
/// `LockNotFound` when the group holds no lock; `NotRenewable` (nothing changed) when any
/// lock has `expires_at <= now + margin`, listing those locks.
pub fn renew<T: DerefMut<Target = LockTable>>(
    shards: &mut [T],
    lock_id: &LockId,
    ttl: Ttl,
    margin: Duration,
    now: Timestamp,
) -> Result<Vec<LockStatus>, Error> {
    let margin = if mutants::active(Mutant::RenewWithoutMargin) {
        Duration::ZERO
    } else {
        margin
    };
    let deadline = now.saturating_add(margin);
    let mut found = false;
    let mut refused = Vec::new();
    for table in shards.iter() {
        for (name, mode, lock) in table.group(lock_id) {
            found = true;
            if lock.expires_at.is_some_and(|e| e <= deadline) {
                refused.push(lock.status(name, mode, now));
            }
        }
    }
    if !found {
        return Err(Error::LockNotFound);
    }
    if !refused.is_empty() {
        sort_oldest_first(&mut refused);
        return Err(Error::NotRenewable { locks: refused });
    }
    let expires_at = now.saturating_add(ttl.as_duration());
    let mut renewed = Vec::new();
    for table in shards.iter_mut() {
        let table: &mut LockTable = table;
        let Some(names) = table.groups.get(lock_id) else {
            continue;
        };
        for name in names.iter() {
            let Some(state) = table.resources.get_mut(name) else {
                continue;
            };
            let slot = state
                .exclusive
                .iter_mut()
                .map(|l| (Mode::Exclusive, l))
                .chain(state.shared.iter_mut().map(|l| (Mode::Shared, l)))
                .find(|(_, l)| &l.lock_id == lock_id);
            if let Some((mode, lock)) = slot {
                lock.expires_at = Some(expires_at);
                lock.renewed_at = Some(now);
                renewed.push(lock.status(name, mode, now));
            }
        }
    }
    sort_oldest_first(&mut renewed);
    Ok(renewed)
}

/// The locks matching every set field of `filter` at `now`, oldest first.
#[must_use]
pub fn status<T: Deref<Target = LockTable>>(
    shards: &[T],
    filter: &Filter,
    now: Timestamp,
) -> Vec<LockStatus> {
    let mut out = Vec::new();
    let by_name = filter
        .resource
        .as_deref()
        .and_then(|r| Resource::new(r).ok());
    let by_group = filter.lock_id.as_deref().and_then(|l| LockId::new(l).ok());
    for table in shards {
        let mut push = |name: &Resource, state: &ResourceState| {
            for (mode, lock) in state.locks() {
                if filter.matches(name, mode, lock, now) {
                    out.push(lock.status(name, mode, now));
                }
            }
        };
        if let Some(name) = &by_name {
            if let Some(state) = table.resources.get(name) {
                push(name, state);
            }
        } else if let Some(lock_id) = &by_group {
            for name in table
                .groups
                .get(lock_id)
                .into_iter()
                .flat_map(GroupResources::iter)
            {
                if let Some(state) = table.resources.get(name) {
                    push(name, state);
                }
            }
        } else {
            for (name, state) in &table.resources {
                push(name, state);
            }
        }
    }
    sort_oldest_first(&mut out);
    out
}

/// Purge at `now`: let G be the lock ids with at least one lock expired at `now`; remove
/// every lock whose lock id is in G and that was created before `now` (strictly: a lock
/// created in the purge's own millisecond may have been granted after the purge began, so it
/// is spared). Then delete
/// the resources left with no lock whose fence counter is below [`fence_floor`]`(now)`.
/// Returns everything removed in [`sort_purged`] order.
///
/// The three phases are public so that a store working in batches (MongoDB) applies the
/// same rule: [`expired_groups`], then [`purge_groups`] per batch of G, then
/// [`delete_empty`].
pub fn purge<T: DerefMut<Target = LockTable>>(shards: &mut [T], now: Timestamp) -> Vec<LockStatus> {
    let groups = expired_groups(shards, now);
    let removed = purge_groups(shards, &groups, now);
    delete_empty(shards, now);
    removed
}

/// Purge's first phase: the lock ids holding at least one lock expired at `now`.
#[must_use]
pub fn expired_groups<T: Deref<Target = LockTable>>(
    shards: &[T],
    now: Timestamp,
) -> BTreeSet<LockId> {
    let mut expired = Vec::new();
    for table in shards {
        table.expired_groups(now, &mut expired);
    }
    // Collected first: the ids are then sorted once and the set built in one pass, rather
    // than searched for and inserted one by one.
    expired.into_iter().collect()
}

/// Purge's second phase: removes every lock of `groups` created before `now`, and
/// returns them in [`sort_purged`] order.
pub fn purge_groups<T: DerefMut<Target = LockTable>>(
    shards: &mut [T],
    groups: &BTreeSet<LockId>,
    now: Timestamp,
) -> Vec<LockStatus> {
    let resources: usize = shards.iter().map(|t| t.resources.len()).sum();
    let strategy = if groups.len().saturating_mul(SCAN_WHEN_ONE_GROUP_IN) >= resources {
        PurgeStrategy::Scan
    } else {
        PurgeStrategy::ByGroup
    };
    purge_groups_by(shards, groups, now, strategy)
}

/// Purge's second phase scans the whole table, rather than looking each group up, once there
/// is at least one group to purge per this many resources. A lookup is a search of the index
/// and of the resources, at memory addresses that do not follow one another; a scan reads
/// the table in order and tests each lock against the set of groups. On a table of 100,000
/// resources with 50,000 groups to purge, the scan took half the time of the lookups (about
/// 280 against 550 ns per resource); a lookup costs about as much as scanning a few dozen
/// resources, so this bound leans towards the lookups.
const SCAN_WHEN_ONE_GROUP_IN: usize = 16;

/// Up to this many groups, the scan tests membership in their ordered set; beyond it, it
/// builds a hash set of them first.
const SCAN_HASHES_OVER: usize = 16;

/// How purge's second phase finds the locks of the groups it purges (the outcome is the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PurgeStrategy {
    /// Each group through the index.
    ByGroup,
    /// One pass over every resource.
    Scan,
}

fn purge_groups_by<T: DerefMut<Target = LockTable>>(
    shards: &mut [T],
    groups: &BTreeSet<LockId>,
    now: Timestamp,
    strategy: PurgeStrategy,
) -> Vec<LockStatus> {
    let doomed = |l: &StoredLock| {
        (l.created_at < now || mutants::active(Mutant::PurgeIgnoresCreatedBefore))
            && (l.is_expired(now) || !mutants::active(Mutant::PurgeIgnoresGroups))
    };
    let mut removed = Vec::new();
    match strategy {
        PurgeStrategy::ByGroup => {
            for table in shards.iter_mut() {
                for lock_id in groups {
                    table.remove_group_where(lock_id, now, doomed, &mut removed);
                }
            }
        }
        PurgeStrategy::Scan => {
            let hashed: Option<HashSet<&LockId, foldhash::fast::RandomState>> =
                (groups.len() > SCAN_HASHES_OVER).then(|| groups.iter().collect());
            let member = |id: &LockId| {
                hashed
                    .as_ref()
                    .map_or_else(|| groups.contains(id), |h| h.contains(id))
            };
            for table in shards.iter_mut() {
                table.remove_where(now, |l| member(&l.lock_id) && doomed(l), &mut removed);
            }
        }
    }
    sort_purged(&mut removed);
    removed
}

/// Purge's last phase: forgets the resources that hold no lock and whose fence counter is
/// below [`fence_floor`]`(now)`, so fences keep increasing after they are gone.
pub fn delete_empty<T: DerefMut<Target = LockTable>>(shards: &mut [T], now: Timestamp) {
    for table in shards.iter_mut() {
        table.resources.retain(|_, state| !state.can_delete(now));
    }
}

/// The order purge reports in: grouped by lock id (ascending), newest first in a group.
pub fn sort_purged(locks: &mut [LockStatus]) {
    locks.sort_by(|a, b| {
        a.lock_id
            .cmp(&b.lock_id)
            .then_with(|| b.creation_key().cmp(&a.creation_key()))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockDetails;

    fn req(resource: &str, lock_id: &str, ttl_ms: Option<u64>) -> LockRequest {
        let mut d = LockDetails::new();
        d.ttl = ttl_ms.map(Duration::from_millis);
        LockRequest::new(resource, lock_id, &d).unwrap()
    }

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn emptied_resource_is_kept_until_the_floor_passes_its_counter() {
        let mut table = LockTable::new();
        // Many grants within one millisecond push the counter past the floor.
        for i in 0..(FENCES_PER_MS + 10) {
            let id = format!("id{i}");
            table.slock(&req("r", &id, None), None, t(5)).unwrap();
            table.unlock(&LockId::new(id).unwrap(), t(5));
        }
        let counter = table
            .resource(&Resource::new("r").unwrap())
            .unwrap()
            .last_fence;
        assert!(counter > fence_floor(t(6)));
        table.purge(t(6));
        assert!(
            table.resources().contains_key(&Resource::new("r").unwrap()),
            "kept: counter ahead of floor"
        );
        table.purge(t(7));
        assert!(
            table.resources().is_empty(),
            "deleted once the floor passed the counter"
        );
        let next = table.xlock(&req("r", "again", None), t(7)).unwrap();
        assert!(next.fence > counter);
    }

    #[test]
    fn index_follows_takeover_and_purge() {
        let mut table = LockTable::new();
        table.xlock(&req("r", "a", Some(10)), t(0)).unwrap();
        table.xlock(&req("r", "b", None), t(10)).unwrap();
        let a = LockId::new("a").unwrap();
        assert_eq!(table.group(&a).count(), 0, "taken over");
        assert!(table.unlock(&a, t(10)).is_empty());
        let rebuilt = LockTable::from_resources(table.resources().clone());
        assert_eq!(rebuilt, table);
        assert_eq!(
            rebuilt.groups, table.groups,
            "the index is a function of the resources"
        );
    }

    /// A grant or an unlock at some instant: what the purge test builds its tables with.
    #[derive(Clone, Debug)]
    enum Step {
        Grant {
            resource: u8,
            lock: u8,
            shared: bool,
            ttl_ms: Option<u64>,
            at: u64,
        },
        Unlock {
            lock: u8,
            at: u64,
        },
    }

    /// Lock ids `g0` to `g23`: more than [`SCAN_HASHES_OVER`], so that purging all of them
    /// takes the scan's hash-set path.
    const LOCK_IDS: u8 = 24;

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..12u8, 0..LOCK_IDS, any::<bool>(), proptest::option::of(1..60u64), 0..100u64)
                .prop_map(|(resource, lock, shared, ttl_ms, at)| Step::Grant {
                    resource,
                    lock,
                    shared,
                    ttl_ms,
                    at,
                }),
            1 => (0..LOCK_IDS, 0..100u64).prop_map(|(lock, at)| Step::Unlock { lock, at }),
        ]
    }

    fn build(steps: &[Step]) -> LockTable {
        let mut table = LockTable::new();
        for s in steps {
            match *s {
                Step::Grant {
                    resource,
                    lock,
                    shared,
                    ttl_ms,
                    at,
                } => {
                    let r = req(&format!("r{resource}"), &format!("g{lock}"), ttl_ms);
                    // A refused grant leaves the table as it was; either outcome is a table.
                    let _ = if shared {
                        table.slock(&r, SharedLimit::new(2).ok(), t(at))
                    } else {
                        table.xlock(&r, t(at))
                    };
                }
                Step::Unlock { lock, at } => {
                    table.unlock(&LockId::new(format!("g{lock}")).unwrap(), t(at));
                }
            }
        }
        table
    }

    proptest::proptest! {
        /// Purge's second phase removes the same locks, and leaves the same table and index,
        /// whether it looks each group up or scans the table; for the expired groups, for
        /// any other few groups (a batch of them, or ids the table does not hold), and for
        /// every lock id.
        #[test]
        fn purge_by_group_and_by_scan_agree(
            steps in proptest::collection::vec(step(), 0..80),
            at in 0..160u64,
            extra in proptest::collection::btree_set(0..LOCK_IDS + 4, 0..4),
        ) {
            let table = build(&steps);
            let ids = |range: &mut dyn Iterator<Item = u8>| -> BTreeSet<LockId> {
                range.map(|i| LockId::new(format!("g{i}")).unwrap()).collect()
            };
            let expired = expired_groups(&[&table], t(at));
            let few = ids(&mut extra.iter().copied());
            let all = ids(&mut (0..LOCK_IDS));
            proptest::prop_assert!(all.len() > SCAN_HASHES_OVER);
            for groups in [expired, few, all] {
                let mut by_group = table.clone();
                let mut by_scan = table.clone();
                let a = purge_groups_by(&mut [&mut by_group], &groups, t(at), PurgeStrategy::ByGroup);
                let b = purge_groups_by(&mut [&mut by_scan], &groups, t(at), PurgeStrategy::Scan);
                proptest::prop_assert_eq!(&a, &b);
                proptest::prop_assert_eq!(&by_group, &by_scan);
                proptest::prop_assert_eq!(&by_group.groups, &by_scan.groups);
                let rebuilt = LockTable::from_resources(by_scan.resources().clone());
                proptest::prop_assert_eq!(&rebuilt.groups, &by_scan.groups);
                for lock in &a {
                    proptest::prop_assert!(groups.contains(&lock.lock_id));
                }
            }
        }
    }
}
