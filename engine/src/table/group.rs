//! Group operations: unlock, renew and report the locks of one lock id (or of a filter)
//! across a slice of tables, and the one-lock forms a `Locker` guard uses.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::{GroupResources, LockTable, ResourceState};
use crate::access::Mode;
use crate::error::Error;
use crate::filter::Filter;
use crate::lock::StoredLock;
use crate::names::{LockId, Resource};
use crate::status::{LockStatus, sort_newest_first, sort_oldest_first};
use crate::time::{Timestamp, Ttl};

impl LockTable {
    /// Removes the locks of `lock_id` for which `pred` holds (and, for a `release`, its
    /// places on the resources it held: [`ResourceState::drop_places_of`]); returns their
    /// statuses at `now`.
    pub(super) fn remove_group_where(
        &mut self,
        lock_id: &LockId,
        now: Timestamp,
        pred: impl Fn(&StoredLock) -> bool,
        release: bool,
        out: &mut Vec<LockStatus>,
    ) {
        // The group's index entry is taken out, trimmed to the locks that stay, and put back
        // only if any do (unlock removes them all).
        let Some((lock_id, mut names)) = self.groups.remove_entry(lock_id) else {
            return;
        };
        let first = out.len();
        let resources = &mut self.resources;
        names.retain(|name| {
            let removed = resources.get_mut(name).and_then(|state| {
                let removed = state.remove_if(&lock_id, &pred);
                if release && removed.is_some() {
                    state.drop_places_of(&lock_id);
                }
                removed
            });
            if let Some((mode, lock)) = &removed {
                out.push(lock.status(name, *mode, now));
            }
            removed.is_none()
        });
        if !names.is_empty() {
            self.groups.insert(lock_id, names);
        }
        if !(release && crate::mutants::active(crate::mutants::Mutant::ResignLeavesPlace)) {
            self.hand_over_after(now, out, first);
        }
    }

    /// Hands over on every resource that `out[first..]` (locks just removed) names.
    pub(super) fn hand_over_after(&mut self, now: Timestamp, out: &[LockStatus], first: usize) {
        let mut freed: Vec<Resource> = out[first..].iter().map(|s| s.resource.clone()).collect();
        freed.sort_unstable();
        freed.dedup();
        for name in &freed {
            self.hand_over(name, now);
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
    /// over); `NotRenewable` (nothing changed) when it is not
    /// [renewable](StoredLock::is_renewable): `expires_at + grace <= now + margin`.
    pub fn renew_one(
        &mut self,
        resource: &Resource,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
        now: Timestamp,
    ) -> Result<LockStatus, Error> {
        let (mode, lock) = self.renewable_one(resource, lock_id, margin, now)?;
        lock.expires_at = Some(now.saturating_add(ttl.as_duration()));
        lock.renewed_at = Some(now);
        Ok(lock.status(resource, mode, now))
    }

    /// The one lock `lock_id` holds on `resource`, and its mode, if it is
    /// [renewable](StoredLock::is_renewable) at `now` with `margin`.
    ///
    /// # Errors
    /// `LockNotFound` when there is none; `NotRenewable` when it is not renewable.
    fn renewable_one(
        &mut self,
        resource: &Resource,
        lock_id: &LockId,
        margin: Duration,
        now: Timestamp,
    ) -> Result<(Mode, &mut StoredLock), Error> {
        let grace = self.grace;
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
        if !lock.is_renewable(now, margin, grace) {
            return Err(Error::NotRenewable {
                locks: vec![lock.status(resource, mode, now)],
            });
        }
        Ok((mode, lock))
    }

    /// Sets the comment of the one lock `lock_id` holds on `resource` (who holds it stays,
    /// and so do its lease, fence and group): a leader proclaims its value this way. The
    /// lock must be held, by the rule that lets a holder renew it with no margin:
    /// `expires_at + grace > now`.
    ///
    /// # Errors
    /// `LockNotFound` when `lock_id` holds no lock on `resource`; `NotRenewable` (nothing
    /// changed) when its lease and grace are over.
    pub fn set_comment(
        &mut self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<String>,
        now: Timestamp,
    ) -> Result<LockStatus, Error> {
        if crate::mutants::active(crate::mutants::Mutant::ProclaimChangesHolder)
            && let Some(lock) = (self.resources.get_mut(resource))
                .and_then(|state| state.exclusive.as_mut())
                .filter(|l| &l.lock_id != lock_id)
        {
            lock.holder.comment = comment;
            return Ok(lock.status(resource, Mode::Exclusive, now));
        }
        let (mode, lock) = self.renewable_one(resource, lock_id, Duration::ZERO, now)?;
        lock.holder.comment = comment;
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
        let state = self.resources.get_mut(resource)?;
        let (mode, lock) = state.remove_if(lock_id, |_| true)?;
        state.drop_places_of(lock_id);
        if let Some(names) = self.groups.get_mut(lock_id) {
            names.remove(resource);
            if names.is_empty() {
                self.groups.remove(lock_id);
            }
        }
        if !crate::mutants::active(crate::mutants::Mutant::ResignLeavesPlace) {
            self.hand_over(resource, now);
        }
        Some(lock.status(resource, mode, now))
    }

    /// Reports matching locks; see [`status`].
    #[must_use]
    pub fn status(&self, filter: &Filter, now: Timestamp) -> Vec<LockStatus> {
        status(&[self], filter, now)
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
        table.remove_group_where(lock_id, now, |_| true, true, &mut out);
    }
    sort_newest_first(&mut out);
    out
}

/// Sets `expires_at = now + ttl` and `renewed_at = now` on every lock of `lock_id`, locks
/// without a TTL included, and returns the renewed statuses oldest first. All or nothing.
///
/// # Errors
/// `LockNotFound` when the group holds no lock; `NotRenewable` (nothing changed) when any
/// lock is not [renewable](StoredLock::is_renewable) (`expires_at + grace <= now + margin`),
/// listing those locks.
pub fn renew<T: DerefMut<Target = LockTable>>(
    shards: &mut [T],
    lock_id: &LockId,
    ttl: Ttl,
    margin: Duration,
    now: Timestamp,
) -> Result<Vec<LockStatus>, Error> {
    let mut found = false;
    let mut refused = Vec::new();
    for table in shards.iter() {
        for (name, mode, lock) in table.group(lock_id) {
            found = true;
            if !lock.is_renewable(now, margin, table.grace) {
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
