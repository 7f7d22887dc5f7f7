//! The store applies a request that reached it (through the same `Request::send_to` the
//! Locker's driver uses), and the world records what the checks and the report need:
//! fences granted, lock ids granted and unlocked, refused renewals, resources left free
//! while clients wait, the queues of fair waiters; the hints the operation gave the
//! subscribers leave for their clients.

use std::time::Duration;

use lockwright_engine::Timestamp;
use lockwright_engine::locker::{Reply, Request};
use lockwright_engine::table::fence_floor;

use super::{World, at_once};
use crate::report::ViolationKind;

impl World {
    pub(super) fn apply(&mut self, client: usize, incarnation: u32, request: &Request) -> Reply {
        // The store judges by its own clock, which a failover may have moved.
        let store_now = self.store_now();
        self.clock.set(store_now);
        let unlocks_held = self.unlocks_a_held_lock(request);
        // A release that removes a lock (a resign, in an election) must hand it over.
        let releases = match request {
            Request::Unlock { resource, lock_id } => {
                let r = self.resource_index(resource);
                self.locks_on(r)
                    .iter()
                    .any(|l| l.lock_id == *lock_id)
                    .then_some(r)
            }
            _ => None,
        };
        if let Request::Lock { request, .. } = request {
            // A campaign's value (a handoff hands the lock with the comment of the request
            // that took the place).
            self.record_value(&request.lock_id, request.holder.comment.as_deref());
        }
        let reply = at_once(request.send_to(&self.store));
        // The hints the operation gave the subscribers leave for their clients (store-mem
        // sends them for grants, releases and handoffs, which any lock request may make;
        // one it sent otherwise would leave with the next).
        if matches!(
            request,
            Request::Lock { .. } | Request::Unlock { .. } | Request::LeaveQueue { .. }
        ) {
            self.pump_hints();
        }
        // store-mem fails only on a broken rule or argument: the simulation is wrong.
        let outcomes = match &reply {
            Reply::Each(each) => each.as_slice(),
            one => std::slice::from_ref(one),
        };
        for outcome in outcomes {
            match outcome {
                Reply::Failed(e) => panic!("store-mem failed: {e}"),
                Reply::Refused(_) if matches!(request, Request::RenewMany { .. }) => {
                    self.report.tally.batched_refusals += 1;
                }
                _ => {}
            }
        }
        match (request, &reply) {
            (Request::Lock { request, .. }, Reply::Granted(status)) => {
                let r = self.resource_index(&request.resource);
                // A claim (a fair request's lock id held the lock already: handed over, or
                // granted to an earlier attempt) renews it and keeps its fence; only a new
                // grant must carry a new fence.
                let claim = status.renewed_at.is_some();
                if !claim && status.fence <= self.granted[r] {
                    self.violation(
                        ViolationKind::FenceMonotonic,
                        format!(
                            "r{r} granted fence {} after {}",
                            status.fence, self.granted[r]
                        ),
                    );
                }
                self.granted[r] = self.granted[r].max(status.fence);
                if status.fence >= fence_floor(store_now.saturating_add(Duration::from_millis(1))) {
                    self.report.tally.grants_behind_fence_clock += 1;
                }
                self.grants
                    .insert(request.lock_id.clone(), (client, incarnation));
                self.note(
                    Some(client),
                    format!("store grants r{r}, fence {}", status.fence),
                );
            }
            (Request::Unlock { lock_id, .. }, _) => {
                self.unlocked.insert(lock_id.clone());
                if self.lost_grants.remove(lock_id) {
                    self.report.tally.unknown_grants_released += 1;
                }
                if self.lost_unlocks.remove(lock_id) {
                    self.report.tally.releases_retried += 1;
                }
            }
            _ => {}
        }
        self.queue_after(client, incarnation, request, &reply, store_now);
        if let Some(r) = releases {
            self.check_release_handed_over(r, store_now);
        }
        self.locks_changed(request);
        self.handovers_after(client, incarnation, request, &reply, unlocks_held);
        reply
    }

    /// After a release that removed a lock on `r`, once the queue has followed the store's
    /// answer: when `r` is left free, no fresh place waits (the release handed the lock to
    /// the first one in the same write: `Handoff`).
    fn check_release_handed_over(&mut self, r: usize, store_now: Timestamp) {
        let fresh = self.fresh_places(r, store_now);
        if fresh > 0 && self.locks_on(r).is_empty() {
            self.violation(
                ViolationKind::Handoff,
                format!("a release left r{r} free while {fresh} fresh place(s) waited"),
            );
        }
    }
}
