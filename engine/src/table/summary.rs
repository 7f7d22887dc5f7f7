//! The contention of each resource at one instant: how many hold it, how many wait and for
//! how long. What `lockwright status --watch` shows and `status --prometheus` exports, read
//! from the same documents as every rule, so a summary cannot disagree with a grant.

use std::cmp::Reverse;
use std::ops::Deref;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::Mode;
use crate::error::MalformedDocument;
use crate::names::Resource;
use crate::resource::ResourceState;
use crate::time::Timestamp;

use super::LockTable;

/// One resource's locks and waiters at an instant (the store's clock). A lock counts as
/// held until it is abandoned (its expiry plus the store's takeover grace, the rule every
/// grant follows), and a waiter while its place in the queue is live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceSummary {
    /// The resource.
    pub resource: Resource,
    /// Held exclusive locks (0 or 1).
    pub held_exclusive: u32,
    /// Held shared locks.
    pub held_shared: u32,
    /// Locks abandoned but still stored: expired past the grace, waiting for a takeover or
    /// a purge.
    pub abandoned: u32,
    /// Live places of fair waiters asking for an exclusive lock.
    pub waiting_exclusive: u32,
    /// Live places of fair waiters asking for a shared lock.
    pub waiting_shared: u32,
    /// How long the first live waiter has been queued; `None` without waiters.
    pub longest_wait: Option<Duration>,
    /// The shortest remaining TTL among the held locks that have not expired; `None` when
    /// none of them expires (or none is held).
    pub next_expiry: Option<Duration>,
    /// The last fence granted on the resource.
    pub last_fence: u64,
}

impl ResourceSummary {
    /// The summary of `state` at `now` with the takeover `grace`.
    #[must_use]
    pub fn of(resource: &Resource, state: &ResourceState, now: Timestamp, grace: Duration) -> Self {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let held = |mode: Mode| {
            count(
                state
                    .locks()
                    .filter(|(m, l)| *m == mode && l.is_held(now, grace))
                    .count(),
            )
        };
        let waiting = |mode: Mode| count(state.waiters(now).filter(|e| e.mode == mode).count());
        ResourceSummary {
            resource: resource.clone(),
            held_exclusive: held(Mode::Exclusive),
            held_shared: held(Mode::Shared),
            abandoned: count(
                state
                    .locks()
                    .filter(|(_, l)| l.is_abandoned(now, grace))
                    .count(),
            ),
            waiting_exclusive: waiting(Mode::Exclusive),
            waiting_shared: waiting(Mode::Shared),
            longest_wait: state
                .waiters(now)
                .map(|e| e.queued_at)
                .min()
                .map(|t| now.saturating_duration_since(t)),
            next_expiry: state
                .locks()
                .filter(|(_, l)| l.is_live(now))
                .filter_map(|(_, l)| l.expires_at)
                .min()
                .map(|e| e.saturating_duration_since(now)),
            last_fence: state.last_fence,
        }
    }

    /// Held locks, of either mode.
    #[must_use]
    pub fn held(&self) -> u32 {
        self.held_exclusive.saturating_add(self.held_shared)
    }

    /// Live waiters, of either mode.
    #[must_use]
    pub fn waiting(&self) -> u32 {
        self.waiting_exclusive.saturating_add(self.waiting_shared)
    }

    /// Nothing held, nobody waiting, nothing abandoned: an idle resource document (only its
    /// fence counter is kept).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.held() == 0 && self.waiting() == 0 && self.abandoned == 0
    }

    /// The order of contention: most waiters first, then the longest wait, then most
    /// holders, then the most abandoned locks, then by name.
    fn contention_key(&self) -> impl Ord + '_ {
        (
            Reverse(self.waiting()),
            Reverse(self.longest_wait),
            Reverse(self.held()),
            Reverse(self.abandoned),
            &self.resource,
        )
    }
}

/// Every resource's contention at one instant, and the documents that could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// The resources that are held, waited for or hold abandoned locks, most contended
    /// first (most waiters, then longest wait, then most holders, then name); idle
    /// resources are left out.
    pub resources: Vec<ResourceSummary>,
    /// The stored documents left out because they cannot be decided on (never silently: a
    /// caller reports them).
    pub skipped: Vec<MalformedDocument>,
}

impl Summary {
    /// The summary of `shards` at `now` (each with its own takeover grace), with `skipped`
    /// documents a store could not decode.
    #[must_use]
    pub fn of<T: Deref<Target = LockTable>>(
        shards: &[T],
        now: Timestamp,
        skipped: Vec<MalformedDocument>,
    ) -> Self {
        let mut resources: Vec<ResourceSummary> = shards
            .iter()
            .flat_map(|table| {
                table
                    .resources()
                    .iter()
                    .map(|(name, state)| ResourceSummary::of(name, state, now, table.grace))
            })
            .filter(|s| !s.is_idle())
            .collect();
        resources.sort_by(|a, b| a.contention_key().cmp(&b.contention_key()));
        Summary { resources, skipped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Access, LockId, LockOptions, LockRequest, SharedLimit, Ticket};

    const T0: Timestamp = Timestamp::from_millis(1_000_000);

    fn at(ms: u64) -> Timestamp {
        T0.saturating_add(Duration::from_millis(ms))
    }

    fn request(resource: &str, lock_id: &str, ttl_ms: u64) -> LockRequest {
        let details = LockOptions::new().ttl(Duration::from_millis(ttl_ms));
        LockRequest::new(resource, lock_id, &details).unwrap()
    }

    fn fair(resource: &str, lock_id: &str, queue_ms: u64) -> LockRequest {
        let ticket = Ticket::new(
            LockId::new(format!("ticket-{lock_id}")).unwrap(),
            Duration::from_millis(queue_ms),
        )
        .unwrap();
        request(resource, lock_id, 10_000).fair(ticket)
    }

    #[test]
    fn counts_holders_waiters_and_abandoned_locks_most_contended_first() {
        let grace = Duration::from_millis(500);
        let mut t = LockTable::new().with_takeover_grace(grace);
        // `hot`: one exclusive holder, two fair writers and a fair reader queued.
        t.lock(&request("hot", "h", 5_000), at(0)).unwrap();
        t.lock(&fair("hot", "w1", 3_000), at(100)).unwrap_err();
        t.lock(
            &fair("hot", "r1", 3_000).with_access(Access::Shared(None)),
            at(200),
        )
        .unwrap_err();
        // w2's place lapses at 1 300: a dead waiter is not counted.
        t.lock(&fair("hot", "w2", 1_000), at(300)).unwrap_err();
        // `readers`: two shared holders under a limit of 3, one expiring soon.
        let limit = Some(SharedLimit::new(3).unwrap());
        t.lock(
            &request("readers", "s1", 1_000).with_access(Access::Shared(limit)),
            at(0),
        )
        .unwrap();
        t.lock(
            &request("readers", "s2", 9_000).with_access(Access::Shared(limit)),
            at(0),
        )
        .unwrap();
        // `stale`: an exclusive lock that expired at 400 and is abandoned at 900.
        t.lock(&request("stale", "old", 400), at(0)).unwrap();
        // `idle`: granted and released; only its fence counter is left.
        t.lock(&request("idle", "gone", 1_000), at(0)).unwrap();
        t.unlock(&LockId::new("gone").unwrap(), at(10));

        let now = at(2_000);
        let summary = Summary::of(&[&t], now, Vec::new());
        let names: Vec<&str> = summary
            .resources
            .iter()
            .map(|s| s.resource.as_str())
            .collect();
        assert_eq!(names, ["hot", "readers", "stale"]);
        let hot = &summary.resources[0];
        assert_eq!(
            (hot.held_exclusive, hot.held_shared, hot.abandoned),
            (1, 0, 0)
        );
        assert_eq!((hot.waiting_exclusive, hot.waiting_shared), (1, 1));
        assert_eq!(hot.longest_wait, Some(Duration::from_millis(1_900)));
        assert_eq!(hot.next_expiry, Some(Duration::from_millis(3_000)));
        let readers = &summary.resources[1];
        // s1 expired at 1 000 and was abandoned at 1 500: only s2 is held.
        assert_eq!(
            (readers.held_shared, readers.abandoned, readers.waiting()),
            (1, 1, 0)
        );
        assert_eq!(readers.next_expiry, Some(Duration::from_millis(7_000)));
        assert_eq!(readers.longest_wait, None);
        let stale = &summary.resources[2];
        assert_eq!(
            (stale.held(), stale.abandoned, stale.next_expiry),
            (0, 1, None)
        );

        // Inside the grace an expired lock is still held (it blocks grants), though it
        // has no remaining TTL.
        let early = Summary::of(&[&t], at(600), Vec::new());
        let stale = early
            .resources
            .iter()
            .find(|s| s.resource.as_str() == "stale")
            .unwrap();
        assert_eq!(
            (stale.held_exclusive, stale.abandoned, stale.next_expiry),
            (1, 0, None)
        );
    }

    #[test]
    fn ties_go_by_longest_wait_then_holders_then_name() {
        let mut t = LockTable::new();
        t.lock(&request("b", "hb", 10_000), at(0)).unwrap();
        t.lock(&request("a", "ha", 10_000), at(0)).unwrap();
        t.lock(&fair("a", "wa", 5_000), at(50)).unwrap_err();
        t.lock(&request("c", "hc", 10_000), at(0)).unwrap();
        t.lock(&fair("c", "wc", 5_000), at(10)).unwrap_err();
        let mut shared = LockTable::new();
        for id in ["s1", "s2"] {
            shared
                .lock(
                    &request("d", id, 10_000).with_access(Access::Shared(None)),
                    at(0),
                )
                .unwrap();
        }
        let summary = Summary::of(&[&t, &shared], at(100), Vec::new());
        let names: Vec<&str> = summary
            .resources
            .iter()
            .map(|s| s.resource.as_str())
            .collect();
        // c and a have one waiter each, c's longer; then d (two holders), then b.
        assert_eq!(names, ["c", "a", "d", "b"]);
    }
}
