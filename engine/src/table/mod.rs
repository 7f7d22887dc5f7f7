//! The lock table and every lock transition, as pure functions of (state, request, now).
//!
//! Single-resource operations (`xlock`, `slock`) touch one [`ResourceState`]. Group
//! operations (`unlock`, `renew`, `status`, `purge`) work over a slice of tables, so a store
//! that shards its resources (the in-memory store does) applies the same code to all shards
//! at once; a single table is the one-shard case.

mod group;
mod index;
mod purge;
mod summary;
#[cfg(test)]
mod tests;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::access::Mode;
use crate::error::Error;
use crate::lock::{LockRequest, StoredLock};
use crate::names::{LockId, Resource};
use crate::status::LockStatus;
use crate::time::Timestamp;

pub use self::group::{renew, status, unlock};
use self::index::GroupResources;
pub use self::purge::{delete_empty, expired_groups, purge, purge_groups, sort_purged};
pub use self::summary::{ResourceSummary, Summary};
pub use crate::resource::{
    ClusterTime, FENCES_PER_SECOND, Handed, Moves, ResourceState, fence_floor,
};

/// Every lock of a store: resources by name, plus an index from lock id to the resources its
/// group holds, the store's takeover grace, and its fence clock. `Clone + Eq + Hash`, so a
/// model checker can hold it.
///
/// The index is a function of the resources, so equality, hashing and `Debug` look at the
/// resources only, which are in a `BTreeMap`: the fingerprint and the printed form do not
/// depend on hashing; the grace is configuration and the fence clock a clock, which a
/// store's documents do not show (a model that lets the clock go back keeps the fence clock
/// in its own state). The index itself is a hash map (with foldhash): it is only ever
/// searched for one lock id, and a hash lookup costs a fraction of a B-tree search by string.
#[derive(Clone, Default)]
pub struct LockTable {
    resources: BTreeMap<Resource, ResourceState>,
    groups: HashMap<LockId, GroupResources, foldhash::fast::RandomState>,
    grace: Duration,
    fence_clock: u64,
    /// The fence floor every write reads, in place of the one of its `now`
    /// ([`LockTable::with_fence_floor`]).
    fixed_floor: Option<u64>,
    /// The locks handed to heads of queues since a store last took them
    /// ([`LockTable::take_handed`]).
    handed: Vec<Handed>,
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
    /// The empty table, with no takeover grace (expired locks may be taken over at once).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The same table with takeover `grace`: an expired lock blocks other grants, counts
    /// towards shared limits and is spared by purge until `expires_at + grace <= now`
    /// ([`StoredLock::is_abandoned`]), and its holder may renew it until then.
    #[must_use]
    pub fn with_takeover_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The takeover grace.
    #[must_use]
    pub fn takeover_grace(&self) -> Duration {
        self.grace
    }

    /// The fence clock: the highest [`fence_floor`] of any `now` a grant or purge was given,
    /// so that it never goes back even when the store's clock does (a replica set's failover
    /// to a member whose clock is behind). Grants take their fence at or above it, and purge
    /// deletes a resource only once its counter is below it.
    #[must_use]
    pub fn fence_clock(&self) -> u64 {
        self.fence_clock
    }

    /// Moves the fence clock to `floor` if that is ahead of it: for a store whose fence floor
    /// comes from a clock of its own (MongoDB's cluster time), read with its documents.
    pub fn raise_fence_clock(&mut self, floor: u64) {
        self.fence_clock = self.fence_clock.max(floor);
    }

    /// The same table, whose writes read the fence floor as `floor`, whatever their `now`:
    /// for a store that replays a write of its own whose floor came from a clock of its own
    /// (MongoDB's cluster time), read with the write's reply, so that the replay takes the
    /// very fences the write took.
    #[must_use]
    pub fn with_fence_floor(mut self, floor: u64) -> Self {
        self.fixed_floor = Some(floor);
        self
    }

    /// Moves the fence clock to `now` (never back), and returns it.
    pub(crate) fn tick(&mut self, now: Timestamp) -> u64 {
        let floor = self.fixed_floor.unwrap_or_else(|| fence_floor(now));
        self.fence_clock = self.fence_clock.max(floor);
        self.fence_clock
    }

    /// The locks handed to heads of queues by the writes since the last call, in order; a
    /// store that wakes waiters tells each handed place's waiter. A table whose handoffs
    /// nobody takes keeps them (a model checker's table, which is never the same value for
    /// long, may ignore them).
    pub fn take_handed(&mut self) -> Vec<Handed> {
        std::mem::take(&mut self.handed)
    }

    /// Applies `moves` (what a write of `resource` handed and took over) to the lock-id
    /// index, and keeps the handoffs for [`LockTable::take_handed`].
    fn moved(&mut self, resource: &Resource, moves: Moves) {
        for lock_id in &moves.taken_over {
            self.unindex(lock_id, resource);
        }
        for h in &moves.handed {
            self.index(&h.status.lock_id, resource);
        }
        self.handed.extend(moves.handed);
    }

    /// Hands the lock of `resource` to the head of its queue if it is free for it at
    /// `now` ([`ResourceState::hand_over`]): after every write that may free it.
    pub(crate) fn hand_over(&mut self, resource: &Resource, now: Timestamp) {
        // Only a queue can be handed anything: the fence clock is read only then.
        if (self.resources.get(resource)).is_none_or(|state| state.queue.is_empty()) {
            return;
        }
        let (grace, floor) = (self.grace, self.tick(now));
        let Some(state) = self.resources.get_mut(resource) else {
            return;
        };
        let moves = state.hand_over(resource, now, grace, floor);
        self.moved(resource, moves);
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

    /// Grants `request` if the rule of its access allows it on the resource. Exclusive: the
    /// resource has no held lock (abandoned locks, expired for at least the takeover grace,
    /// are taken over); not re-entrant. Shared: no held exclusive lock, the lock id holds no
    /// held lock on the resource, and fewer than the limit of held shared locks (none: no
    /// limit); a fresh resource obeys the limit like any other. Either way no live
    /// conflicting place may be ahead in the queue ([`crate::queue`]).
    ///
    /// # Errors
    /// `AlreadyLocked` when the rule refuses.
    pub fn lock(&mut self, request: &LockRequest, now: Timestamp) -> Result<LockStatus, Error> {
        self.grant_if(request, now)
    }

    /// Grants `request` if the rules allow it on the resource's state (an empty state for a
    /// resource the table does not know). One search of the table either way. A refused
    /// request leaves the locks as they were and says when the rule would allow it; a fair
    /// one takes or refreshes its place in the queue ([`crate::queue`]).
    fn grant_if(&mut self, request: &LockRequest, now: Timestamp) -> Result<LockStatus, Error> {
        let (grace, floor) = (self.grace, self.tick(now));
        let resource = &request.resource;
        let (decided, moves) = match self.resources.entry(resource.clone()) {
            Entry::Occupied(entry) => entry.into_mut().decide(request, now, grace, floor),
            Entry::Vacant(entry) => {
                let mut state = ResourceState::default();
                let decided = state.decide(request, now, grace, floor);
                // A refused request that is not fair leaves nothing to keep.
                if decided.0.is_ok() || !state.queue.is_empty() {
                    entry.insert(state);
                }
                decided
            }
        };
        self.moved(resource, moves);
        let status = decided?;
        self.index(&request.lock_id, resource);
        Ok(status)
    }

    /// Removes the place `ticket` holds in `resource`'s queue (a waiter that stopped
    /// waiting), with the places whose lease ran out at `now`, and hands the lock to the new
    /// head if it is free for it. Returns whether it had one.
    pub fn leave_queue(&mut self, resource: &Resource, ticket: &LockId, now: Timestamp) -> bool {
        let had = self
            .resources
            .get_mut(resource)
            .is_some_and(|state| state.leave_queue(ticket, now));
        self.hand_over(resource, now);
        had
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
}
