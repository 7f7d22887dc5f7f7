//! The port every backend implements. Interface only: the engine does no IO.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::election::LeaderStream;
use crate::error::Result;
use crate::filter::Filter;
use crate::lock::LockRequest;
use crate::names::{LockId, Resource};
use crate::queue::Waiter;
use crate::status::{LockStatus, Renewal};
use crate::table::Summary;
use crate::time::{Timestamp, Ttl};

/// A place where locks live (in memory, in MongoDB). Implementations apply the rules of
/// this crate with their own clock and must pass the conformance suite (the workspace's
/// test kit, `lockwright_testkit::conformance`; a test file runs it against a backend with
/// `lockwright_testkit::conformance_suite!(TheBackend)`). Arguments arrive validated;
/// results follow the same order conventions as [`crate::table`].
pub trait LockStore: Send + Sync + 'static {
    /// Grants a lock, exclusive or shared as its access says ([`crate::LockTable::lock`]).
    fn lock(&self, request: &LockRequest) -> impl Future<Output = Result<LockStatus>> + Send;

    /// Removes a group ([`crate::table::unlock`]).
    fn unlock(&self, lock_id: &LockId) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// Renews a group ([`crate::table::renew`]).
    fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// Renews the one lock `lock.lock_id` holds on `lock.resource` for `lock.ttl`
    /// ([`crate::LockTable::renew_one`]). One round trip where the backend allows.
    fn renew_one(
        &self,
        lock: &Renewal,
        margin: Duration,
    ) -> impl Future<Output = Result<LockStatus>> + Send;

    /// Renews each of `locks` as [`LockStore::renew_one`] would, independently of the
    /// others (one refusal does not stop the rest), all at one instant and atomically, and
    /// returns each one's outcome in the same order; a constant number of round trips for
    /// the whole batch where the backend allows. `Err` when the batch as a
    /// whole failed (then nothing is known to have been renewed).
    fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<Result<LockStatus>>>> + Send;

    /// Removes the one lock `lock_id` holds on `resource`
    /// ([`crate::LockTable::unlock_one`]). One round trip where the backend allows.
    fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> impl Future<Output = Result<Option<LockStatus>>> + Send;

    /// Sets the comment of the one lock `lock_id` holds on `resource`, which must be held
    /// ([`crate::LockTable::set_comment`]): a leader proclaims its value. One round trip
    /// where the backend allows.
    fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> impl Future<Output = Result<LockStatus>> + Send;

    /// Removes the place `ticket` holds in `resource`'s queue, and the places there whose
    /// lease ran out ([`crate::LockTable::leave_queue`]): a fair acquire that stopped
    /// waiting. `Ok(true)` when it had one. One round trip where the backend allows.
    fn leave_queue(
        &self,
        resource: &Resource,
        ticket: &LockId,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The live places of `resource`'s queue, first come first, without their tickets
    /// ([`crate::ResourceState::waiters`]).
    fn waiters(&self, resource: &Resource) -> impl Future<Output = Result<Vec<Waiter>>> + Send;

    /// Reports matching locks ([`crate::table::status`]).
    fn status(&self, filter: &Filter) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// Every resource's contention at the store's `now`, most contended first
    /// ([`Summary::of`]): held locks, abandoned ones and live waiters per resource. One
    /// read where the backend allows; documents it cannot decode are listed in
    /// [`Summary::skipped`], not silently left out.
    fn summary(&self) -> impl Future<Output = Result<Summary>> + Send;

    /// Purges the groups holding an abandoned lock ([`crate::table::purge`]).
    fn purge(&self) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// Creates the indexes the store needs; idempotent. A no-op where there are none.
    fn create_indexes(&self) -> impl Future<Output = Result<()>> + Send;

    /// Subscribes to hints that resources changed, which wake waiting acquires (see
    /// [`Hint`]); `None` where the store has none (the default) or knows them unavailable,
    /// so waiters only poll. Hints are never the source of truth: a lost, late or wrong
    /// hint costs a waiter time, never safety. The stream starts with [`Hint::Missed`] (a
    /// change may have come between a refusal and the subscription) and ends when the
    /// store stops sending hints. Must be called within the runtime that polls the
    /// stream. Dropping the stream unsubscribes.
    fn hints(&self) -> Option<HintStream> {
        None
    }

    /// From now on, tells the store's observers ([`LockStore::leaders`]) of each leader of
    /// `election` that this store makes: each grant of its exclusive lock to a request
    /// sent here, and each hand-over of it to the next place in line that a write sent
    /// here made (a claim of a lock handed over earlier is no news). A candidate's store is
    /// told so before it campaigns. The default (a store that sends no news) does nothing.
    fn announce_leaders(&self, election: &Resource) {
        let _ = election;
    }

    /// Subscribes to the news of who leads the elections on this store (see
    /// [`LeaderNews`](crate::election::LeaderNews)), one subscription for all of them: `None` where the store sends none
    /// (the default) or knows them unavailable, so observers only poll. Like hints, news
    /// is never the source of truth: the stream starts with
    /// [`LeaderNews::Missed`](crate::election::LeaderNews::Missed) and
    /// ends when the store stops sending news. Must be called within the runtime that
    /// polls the stream. Dropping the stream unsubscribes.
    fn leaders(&self) -> Option<LeaderStream> {
        None
    }
}

/// What a store handed a waiter's place, as a hint tells its waiter
/// ([`Hint::First`]'s `grant`): the lock id and holder are the waiter's own, and its claim
/// lease is the waiter's place lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HandedLock {
    /// The fence of the grant.
    pub fence: u64,
    /// When the store handed the lock over (its clock).
    pub created_at: Timestamp,
    /// When the handed lock expires unless its waiter claims it; `None`: never.
    pub expires_at: Option<Timestamp>,
}

impl HandedLock {
    /// What a store that handed `lock` (as its status says) tells its waiter.
    #[must_use]
    pub fn of(lock: &LockStatus) -> Self {
        HandedLock {
            fence: lock.fence,
            created_at: lock.created_at,
            expires_at: lock.expires_at,
        }
    }
}

/// A subscription to a store's hints. See [`LockStore::hints`].
pub type HintStream = Pin<Box<dyn Stream<Item = Hint> + Send>>;

/// What a store tells waiters about a change. Only a hint: it may be late, lost,
/// duplicated or reordered, and a waiter acts on it by asking the store again.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Hint {
    /// Locks on the resource were released, purged or replaced: its waiters may now be
    /// granted.
    Freed(Resource),
    /// The resource was granted to somebody, with this fence when the store knows it:
    /// waiters about to act on an earlier `Freed` can go back to waiting, and a fair waiter
    /// moves one place forward (the fence tells a grant its place already counted from a
    /// later one).
    Taken(Resource, Option<u64>),
    /// One of this store's fair waiters is first in the resource's queue after a change: a
    /// release or a waiter leaving (`taken` false), or a grant to somebody else (`taken`
    /// true). A store that can send this wakes only the process of the queue's first
    /// waiter, and the others hear nothing of the change (MongoDB: see its `hints`
    /// module), so a fair waiter that hears it stops counting the waiters ahead of it:
    /// after a release it asks at once, after a grant it asks at once only if it is shared
    /// (it may share the lock). `place` names the first waiter by its ticket's
    /// [`LockId::place_tag`](crate::LockId::place_tag), so that of the waiters of one
    /// process only that one acts; `None` wakes every fair waiter of the resource here. A waiter that
    /// is not fair takes it as `Freed` or `Taken`.
    ///
    /// A store that handed the lock to the place it names (in the write that freed it)
    /// may say what it handed (`grant`): the place's waiter then trusts the grant at once,
    /// without asking, from the send time of its last attempt that the store answered with
    /// its place (the handoff came after that answer), and claims the lock with its first
    /// renewal (see the engine's `locker::fair`).
    First {
        /// The resource whose queue it is.
        resource: Resource,
        /// Whether the change was a grant.
        taken: bool,
        /// The tag of the first waiter's ticket
        /// ([`LockId::place_tag`](crate::LockId::place_tag)), when the store knows it.
        place: Option<String>,
        /// The lock the store handed that place, when it says so (only with `place`).
        #[serde(default)]
        grant: Option<HandedLock>,
    },
    /// Hints may have been lost (a subscription began, the stream reopened or fell
    /// behind): every waiter asks again once.
    Missed,
}
