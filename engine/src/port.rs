//! The port every backend implements. Interface only: the engine does no IO.

use std::future::Future;
use std::time::Duration;

use crate::election::LeaderStream;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::lock::LockRequest;
use crate::names::{LockId, Resource};
use crate::notice::{HintStream, Notices};
use crate::queue::Waiter;
use crate::status::{LockStatus, Renewal};
use crate::table::Summary;
use crate::time::Ttl;

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
