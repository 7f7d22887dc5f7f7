//! The lock-id index of a [`LockTable`]: for each lock id, the resources its group holds
//! a lock on, so that a group operation finds a group's locks without a scan.

use std::collections::BTreeSet;

use super::LockTable;
use crate::names::{LockId, Resource};

/// The resources one group holds a lock on, in the index: the first one inline, since most
/// groups hold one lock (no allocation for them), the others in a set.
#[derive(Clone, Debug, Default)]
pub(super) struct GroupResources {
    first: Option<Resource>,
    rest: BTreeSet<Resource>,
}

impl GroupResources {
    pub(super) fn insert(&mut self, resource: &Resource) {
        if self.first.as_ref() == Some(resource) || self.rest.contains(resource) {
            return;
        }
        if self.first.is_none() {
            self.first = Some(resource.clone());
        } else {
            self.rest.insert(resource.clone());
        }
    }

    pub(super) fn remove(&mut self, resource: &Resource) {
        if self.first.as_ref() == Some(resource) {
            self.first = None;
        } else {
            self.rest.remove(resource);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Resource) -> bool) {
        if self.first.as_ref().is_some_and(|r| !keep(r)) {
            self.first = None;
        }
        self.rest.retain(keep);
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Resource> {
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

impl LockTable {
    pub(super) fn index(&mut self, lock_id: &LockId, resource: &Resource) {
        self.groups
            .entry(lock_id.clone())
            .or_default()
            .insert(resource);
    }

    pub(super) fn unindex(&mut self, lock_id: &LockId, resource: &Resource) {
        if let Some(held) = self.groups.get_mut(lock_id) {
            held.remove(resource);
            if held.is_empty() {
                self.groups.remove(lock_id);
            }
        }
    }
}
