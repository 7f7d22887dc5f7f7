//! What a store tells processes of changes: hints to waiting acquires (a lock freed,
//! taken, or handed to a place) and news of leaders, behind one [`Notices`] part of the
//! store port ([`LockStore::notices`](crate::LockStore::notices)). Never the source of
//! truth: a lost, late or wrong notice costs a waiter or an observer time, never safety
//! (except a wake that carries a grant, which the waiter trusts by the rule in
//! [`crate::trust::trust_wake`]).

use std::pin::Pin;

use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::election::LeaderStream;
use crate::names::Resource;
use crate::status::LockStatus;
use crate::time::Timestamp;

/// What a store tells processes of changes ([`LockStore::notices`](crate::LockStore::notices)). Never the source of
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

/// A subscription to a store's hints. See [`LockStore::hints`](crate::LockStore::hints).
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
