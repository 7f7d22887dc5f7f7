//! The handoff: the store hands a freed lock to the head of the line in the write that frees
//! it, and the waiter claims it with its next request ([`ResourceState::hand_over`],
//! [`ResourceState::claim`]).

use std::time::Duration;

use super::{Handed, Moves, ResourceState};
use crate::access::Mode;
use crate::lock::{LockRequest, StoredLock};
use crate::mutants::{self, Mutant};
use crate::status::LockStatus;
use crate::time::Timestamp;

impl ResourceState {
    /// A fair `request` whose lock id holds a lock here in the mode it asks for, and that
    /// lock is held (not abandoned), claims it: the lock was handed to its place, or an
    /// earlier attempt of the same request was granted. The claim renews the lock to the
    /// request's TTL from `now` (`renewed_at = now`), keeps its fence, and removes the
    /// request's place if it still has one; the answer is the grant. `None` for any other
    /// request, which the rules decide as usual (a request that is not fair and asks again
    /// with a lock id that holds a lock is refused: grants are not re-entrant).
    pub fn claim(
        &mut self,
        request: &LockRequest,
        now: Timestamp,
        grace: Duration,
    ) -> Option<LockStatus> {
        let ticket = request.fair.as_ref()?;
        let revive = mutants::active(Mutant::ClaimRevivesLapsed);
        let lock = match request.mode() {
            Mode::Exclusive => self.exclusive.as_mut(),
            Mode::Shared => self
                .shared
                .iter_mut()
                .find(|l| l.lock_id == request.lock_id),
        }
        .filter(|l| l.lock_id == request.lock_id && (revive || l.is_held(now, grace)))?;
        lock.expires_at = request.ttl.map(|t| now.saturating_add(t.as_duration()));
        lock.renewed_at = Some(now);
        let status = lock.status(&request.resource, request.mode(), now);
        self.queue.remove(&ticket.id);
        self.queue.drop_dead(now);
        Some(status)
    }

    /// The store hands the lock over: while the first live place of the queue is one the
    /// rules would grant (nobody is ahead of it: the locks alone decide), it is granted the
    /// lock its place records ([`Handoff`](crate::queue::Handoff)) with the next fence and a claim lease of the
    /// place's lease from `now`, and its place is removed, with the abandoned locks (taken
    /// over) and the dead places. So an exclusive head is handed the lock alone, and a run
    /// of shared heads is handed it together, up to each one's limit. A place that records
    /// no handoff stops the handing (it is granted by its own request). Every write that
    /// may free a resource runs this: a lock request (before it is decided), a release, a
    /// waiter leaving, and purge.
    pub fn hand_over(
        &mut self,
        resource: &crate::names::Resource,
        now: Timestamp,
        grace: Duration,
        floor: u64,
    ) -> Moves {
        let mut moves = Moves::default();
        loop {
            let past_conflicts = mutants::active(Mutant::HandoffPastConflict);
            let dead_too = mutants::active(Mutant::HandoffToDeadPlace);
            let candidates: Vec<usize> = self
                .queue
                .iter()
                .enumerate()
                .filter(|(_, e)| dead_too || e.is_fresh(now))
                .map(|(i, _)| i)
                .take(if past_conflicts { usize::MAX } else { 1 })
                .collect();
            let Some(i) = candidates.into_iter().find(|&i| {
                let e = &self.queue[i];
                e.handoff.as_ref().is_some_and(|h| match e.mode {
                    Mode::Exclusive => self.can_xlock(now, grace),
                    Mode::Shared => self.can_slock(&h.lock_id, h.limit, now, grace),
                })
            }) else {
                break;
            };
            let place = self.queue.take(i);
            let Some(handoff) = place.handoff else {
                unreachable!("only a place that records a handoff is handed the lock");
            };
            moves.taken_over.extend(self.take_over(now, grace));
            self.queue.drop_dead(now);
            self.last_fence = self.next_fence(floor);
            let start = if mutants::active(Mutant::ClaimLeaseFromQueuedAt) {
                place.queued_at
            } else {
                now
            };
            let lock = StoredLock {
                lock_id: handoff.lock_id,
                holder: handoff.holder,
                created_at: now,
                renewed_at: None,
                expires_at: Some(start.saturating_add(handoff.lease.as_duration())),
                fence: self.last_fence,
            };
            moves.handed.push(Handed {
                ticket: place.ticket,
                status: lock.status(resource, place.mode, now),
            });
            self.install(lock, place.mode);
        }
        moves
    }
}
