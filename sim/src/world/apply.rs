//! The store applies a request that reached it, and the world records what the checks
//! and the report need: fences granted, lock ids granted and unlocked, refused renewals.

use std::time::Duration;

use lockwright_engine::locker::{Access, Reply, Request};
use lockwright_engine::{Error, LockStore, Renewal, SharedLimit};

use super::{EPOCH, World, at_once};
use crate::ViolationKind;

impl World {
    pub(super) fn apply(&mut self, client: usize, incarnation: u32, request: &Request) -> Reply {
        self.clock
            .set(EPOCH.saturating_add(Duration::from_millis(self.now)));
        match request {
            Request::Lock { request, access } => {
                let resource = &request.resource;
                let result = match access {
                    Access::Exclusive => at_once(self.store.xlock(request)),
                    Access::Shared(limit) => {
                        let limit = limit.map(|l| {
                            SharedLimit::new(l).unwrap_or_else(|e| panic!("shared limit: {e}"))
                        });
                        at_once(self.store.slock(request, limit))
                    }
                };
                match &result {
                    Ok(status) => {
                        let r = self.resource_index(resource);
                        if status.fence <= self.granted[r] {
                            self.violation(
                                ViolationKind::FenceMonotonic,
                                format!(
                                    "r{r} granted fence {} after {}",
                                    status.fence, self.granted[r]
                                ),
                            );
                        }
                        self.granted[r] = self.granted[r].max(status.fence);
                        self.grants
                            .insert(request.lock_id.clone(), (client, incarnation));
                        self.note(
                            Some(client),
                            format!("store grants r{r}, fence {}", status.fence),
                        );
                    }
                    Err(Error::AlreadyLocked { .. }) => {}
                    Err(e) => panic!("store-mem failed: {e}"),
                }
                Reply::from_lock(result)
            }
            Request::Renew {
                resource,
                lock_id,
                ttl,
            } => {
                let lock = Renewal {
                    resource: resource.clone(),
                    lock_id: lock_id.clone(),
                    ttl: *ttl,
                };
                let result = at_once(self.store.renew_one(&lock, self.config.drift_margin));
                if let Err(e) = &result
                    && !matches!(e, Error::NotRenewable { .. } | Error::LockNotFound)
                {
                    panic!("store-mem failed: {e}");
                }
                Reply::from_done(result)
            }
            Request::RenewMany { locks } => {
                let margin = self.config.drift_margin;
                let result = at_once(self.store.renew_many(locks, margin));
                if let Ok(each) = &result {
                    for e in each.iter().filter_map(|r| r.as_ref().err()) {
                        if !matches!(e, Error::NotRenewable { .. } | Error::LockNotFound) {
                            panic!("store-mem failed: {e}");
                        }
                        self.report.tally.batched_refusals += 1;
                    }
                }
                Reply::from_batch(result)
            }
            Request::Unlock { resource, lock_id } => {
                let result = at_once(self.store.unlock_one(resource, lock_id));
                if let Err(e) = &result {
                    panic!("store-mem failed: {e}");
                }
                self.unlocked.insert(lock_id.clone());
                if self.lost_grants.remove(lock_id) {
                    self.report.tally.unknown_grants_released += 1;
                }
                if self.lost_unlocks.remove(lock_id) {
                    self.report.tally.releases_retried += 1;
                }
                Reply::from_done(result)
            }
        }
    }
}
