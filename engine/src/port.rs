//! The port every backend implements. Interface only: the engine does no IO.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::election::LeaderStream;
use crate::error::{Error, Result};
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
///
/// Eight methods are required: the writes the engine decides ([`lock`](Self::lock),
/// [`release`](Self::release), [`renew`](Self::renew), [`renew_each`](Self::renew_each),
/// [`set_comment`](Self::set_comment), [`purge`](Self::purge)), one [`read`](Self::read)
/// for every report, and the store's [`notices`](Self::notices). The others are provided,
/// each one call of a required method, so a store that wraps another forwards the eight
/// and loses nothing: no provided method drops a capability.
pub trait LockStore: Send + Sync + 'static {
    /// Grants a lock, exclusive or shared as its access says ([`crate::LockTable::lock`]).
    fn lock(&self, request: &LockRequest) -> impl Future<Output = Result<LockStatus>> + Send;

    /// Gives up what `what` names: a whole group ([`crate::table::unlock`]), the one lock a
    /// lock id holds on a resource ([`crate::LockTable::unlock_one`]), or a waiter's place
    /// in a resource's queue and the places there whose lease ran out
    /// ([`crate::LockTable::leave_queue`]). One round trip where the backend allows.
    fn release(&self, what: Release<'_>) -> impl Future<Output = Result<Released>> + Send;

    /// Renews a group ([`crate::table::renew`]): every lock of it, or none.
    fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// Renews each of `locks`, the one lock `lock.lock_id` holds on `lock.resource` for
    /// `lock.ttl` ([`crate::LockTable::renew_one`]), independently of the others (one
    /// refusal does not stop the rest), all at one instant and atomically, and returns each
    /// one's outcome in the same order; a constant number of round trips for the whole
    /// batch, and one for a batch of one, where the backend allows. `Err` when the batch as
    /// a whole failed (then nothing is known to have been renewed).
    fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<Result<LockStatus>>>> + Send;

    /// Sets the comment of the one lock `lock_id` holds on `resource`, which must be held
    /// ([`crate::LockTable::set_comment`]): a leader proclaims its value. One round trip
    /// where the backend allows.
    fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> impl Future<Output = Result<LockStatus>> + Send;

    /// Reads what `query` asks, at the store's `now`: matching locks
    /// ([`crate::table::status`]), the live places of a resource's queue, first come first,
    /// without their tickets ([`crate::ResourceState::waiters`]), or every resource's
    /// contention, most contended first ([`Summary::of`]; documents the store cannot decode
    /// are listed in [`Summary::skipped`], not silently left out). One read where the
    /// backend allows. The [`Reading`] is the query's kind.
    fn read(&self, query: Query<'_>) -> impl Future<Output = Result<Reading>> + Send;

    /// Purges the groups holding an abandoned lock ([`crate::table::purge`]).
    fn purge(&self) -> impl Future<Output = Result<Vec<LockStatus>>> + Send;

    /// What this store tells processes of changes: hints to waiters and news of leaders
    /// ([`Notices`]), or `None` for a store that tells nothing (its waiters and observers
    /// only poll).
    fn notices(&self) -> Option<&dyn Notices>;

    /// Removes a group: [`release`](Self::release) of [`Release::Group`].
    fn unlock(&self, lock_id: &LockId) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        async move { Ok(self.release(Release::Group(lock_id)).await?.locks) }
    }

    /// Removes the one lock `lock_id` holds on `resource`: [`release`](Self::release) of
    /// [`Release::Lock`].
    fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> impl Future<Output = Result<Option<LockStatus>>> + Send {
        async move {
            let released = self.release(Release::Lock { resource, lock_id }).await?;
            Ok(released.locks.into_iter().next())
        }
    }

    /// Removes the place `ticket` holds in `resource`'s queue: [`release`](Self::release)
    /// of [`Release::Place`]. `Ok(true)` when it had one.
    fn leave_queue(
        &self,
        resource: &Resource,
        ticket: &LockId,
    ) -> impl Future<Output = Result<bool>> + Send {
        async move {
            let released = self.release(Release::Place { resource, ticket }).await?;
            Ok(released.place)
        }
    }

    /// Renews one lock: [`renew_each`](Self::renew_each) of a batch of one.
    fn renew_one(
        &self,
        lock: &Renewal,
        margin: Duration,
    ) -> impl Future<Output = Result<LockStatus>> + Send {
        async move {
            let mut each = self.renew_each(std::slice::from_ref(lock), margin).await?;
            match each.pop() {
                Some(outcome) if each.is_empty() => outcome,
                _ => Err(Error::backend(
                    "renew_one",
                    "the store answered a batch of one with another number of outcomes",
                )),
            }
        }
    }

    /// Reports matching locks: [`read`](Self::read) of [`Query::Locks`].
    fn status(&self, filter: &Filter) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        async move {
            match self.read(Query::Locks(filter)).await? {
                Reading::Locks(locks) => Ok(locks),
                other => Err(other.mismatch("status")),
            }
        }
    }

    /// The live places of `resource`'s queue: [`read`](Self::read) of
    /// [`Query::Waiters`].
    fn waiters(&self, resource: &Resource) -> impl Future<Output = Result<Vec<Waiter>>> + Send {
        async move {
            match self.read(Query::Waiters(resource)).await? {
                Reading::Waiters(waiters) => Ok(waiters),
                other => Err(other.mismatch("waiters")),
            }
        }
    }

    /// Every resource's contention: [`read`](Self::read) of [`Query::Summary`].
    fn summary(&self) -> impl Future<Output = Result<Summary>> + Send {
        async move {
            match self.read(Query::Summary).await? {
                Reading::Summary(summary) => Ok(summary),
                other => Err(other.mismatch("summary")),
            }
        }
    }

    /// Subscribes to hints ([`Notices::hints`]); `None` where the store sends none.
    fn hints(&self) -> Option<HintStream> {
        self.notices().and_then(Notices::hints)
    }

    /// Tells the store's observers of `election`'s leaders made here from now on
    /// ([`Notices::announce_leaders`]); nothing where the store sends no news.
    fn announce_leaders(&self, election: &Resource) {
        if let Some(n) = self.notices() {
            n.announce_leaders(election);
        }
    }

    /// Subscribes to the news of leaders ([`Notices::leaders`]); `None` where the store
    /// sends none.
    fn leaders(&self) -> Option<LeaderStream> {
        self.notices().and_then(Notices::leaders)
    }
}

/// What [`LockStore::release`] gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release<'a> {
    /// Every lock of the group `lock_id` names.
    Group(&'a LockId),
    /// The one lock `lock_id` holds on `resource`.
    Lock {
        /// Where the lock is.
        resource: &'a Resource,
        /// Its lock id.
        lock_id: &'a LockId,
    },
    /// The place `ticket` holds in `resource`'s queue: a fair acquire that stopped waiting.
    Place {
        /// Whose queue.
        resource: &'a Resource,
        /// The acquire's ticket.
        ticket: &'a LockId,
    },
}

/// What [`LockStore::release`] gave up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// The locks removed, newest first (none for a place).
    pub locks: Vec<LockStatus>,
    /// Whether a place was removed (false unless a place was asked for).
    pub place: bool,
}

impl Released {
    /// The locks a release removed.
    #[must_use]
    pub fn locks(locks: Vec<LockStatus>) -> Self {
        Released {
            locks,
            place: false,
        }
    }

    /// A place's release: whether the place was there.
    #[must_use]
    pub fn place(had: bool) -> Self {
        Released {
            locks: Vec::new(),
            place: had,
        }
    }
}

/// What [`LockStore::read`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query<'a> {
    /// The locks `filter` matches ([`crate::table::status`]).
    Locks(&'a Filter),
    /// The live places of the resource's queue.
    Waiters(&'a Resource),
    /// Every resource's contention.
    Summary,
}

/// What [`LockStore::read`] answered: of the query's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// For [`Query::Locks`].
    Locks(Vec<LockStatus>),
    /// For [`Query::Waiters`].
    Waiters(Vec<Waiter>),
    /// For [`Query::Summary`].
    Summary(Summary),
}

impl Reading {
    /// The error for a reading of another kind than `asked` asked for: a broken store.
    fn mismatch(&self, asked: &'static str) -> Error {
        let got = match self {
            Reading::Locks(_) => "locks",
            Reading::Waiters(_) => "waiters",
            Reading::Summary(_) => "a summary",
        };
        Error::not_applied(asked, format!("the store answered with {got}"))
    }
}

/// What a store tells processes of changes ([`LockStore::notices`]). Never the source of
/// truth: a lost, late or wrong notice costs a waiter or an observer time, never safety.
pub trait Notices: Send + Sync {
    /// Subscribes to hints that resources changed, which wake waiting acquires (see
    /// [`Hint`]); `None` where the store knows them unavailable, so waiters only poll. The
    /// stream starts with [`Hint::Missed`] (a change may have come between a refusal and
    /// the subscription) and ends when the store stops sending hints. Must be called
    /// within the runtime that polls the stream. Dropping the stream unsubscribes.
    fn hints(&self) -> Option<HintStream>;

    /// From now on, tells the store's observers ([`Notices::leaders`]) of each leader of
    /// `election` that this store makes: each grant of its exclusive lock to a request
    /// sent here, and each hand-over of it to the next place in line that a write sent
    /// here made (a claim of a lock handed over earlier is no news,
    /// [`crate::election::grant_is_news`]). A candidate's store is told so before it
    /// campaigns.
    fn announce_leaders(&self, election: &Resource);

    /// Subscribes to the news of who leads the elections on this store (see
    /// [`LeaderNews`](crate::election::LeaderNews)), one subscription for all of them:
    /// `None` where the store knows them unavailable, so observers only poll. The stream
    /// starts with [`LeaderNews::Missed`](crate::election::LeaderNews::Missed) and ends when
    /// the store stops sending news. Must be called within the runtime that polls the
    /// stream. Dropping the stream unsubscribes.
    fn leaders(&self) -> Option<LeaderStream>;
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
