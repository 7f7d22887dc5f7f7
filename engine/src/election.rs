//! The rules of leader election on a fair exclusive lock, for those who read it: who leads,
//! as a store's status says ([`leader_of`]), and which of the leaders an observer reads it
//! reports ([`Observer`]).
//!
//! A candidate campaigns with a fair exclusive request whose comment is its *value*; the
//! holder of the election's exclusive lock leads, and proclaims a new value by setting the
//! lock's comment ([`LockTable::set_comment`](crate::LockTable::set_comment)); it resigns by
//! releasing the lock, which hands it to the next live place in line in the same write.
//! Every rule a candidate follows is a lock rule; these two are the reader's.
//!
//! ```
//! use lockwright_engine::election::{Leader, Observer};
//! use lockwright_engine::Timestamp;
//!
//! let leader = |fence| Leader::new(None, fence, Timestamp::from_millis(0));
//! let mut observer = Observer::new();
//! assert_eq!(observer.see(leader(5)).map(|l| l.fence), Some(5));
//! assert_eq!(observer.see(leader(3)), None); // a read that lags: not a leader change
//! assert_eq!(observer.see(leader(5)), None); // the same leader
//! assert_eq!(observer.see(leader(6)).map(|l| l.fence), Some(6));
//! ```

use std::pin::Pin;

use futures_core::Stream;
use serde::{Deserialize, Serialize};

use crate::access::Mode;
use crate::lock::StoredLock;
use crate::mutants::{self, Mutant};
use crate::names::Resource;
use crate::status::LockStatus;
use crate::time::Timestamp;

/// Who leads an election, as the store says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader proclaimed (its lock's comment), if any.
    pub value: Option<String>,
    /// The fence of its leadership: a later leader's is higher.
    pub fence: u64,
    /// When it became leader (the store's clock).
    pub since: Timestamp,
}

impl Leader {
    /// A leader with `value`, `fence` and `since`.
    #[must_use]
    pub fn new(value: Option<String>, fence: u64, since: Timestamp) -> Self {
        Leader {
            value,
            fence,
            since,
        }
    }

    /// The leadership `lock` carries.
    #[must_use]
    pub fn of(lock: &LockStatus) -> Self {
        Leader {
            value: lock.holder.comment.clone(),
            fence: lock.fence,
            since: lock.created_at,
        }
    }

    /// The leadership a stored exclusive `lock` carries.
    #[must_use]
    pub fn of_stored(lock: &StoredLock) -> Self {
        Leader {
            value: lock.holder.comment.clone(),
            fence: lock.fence,
            since: lock.created_at,
        }
    }
}

/// What a store tells observers of elections ([`LockStore::leaders`](crate::LockStore::leaders)).
/// Only news: it may be late, lost, duplicated or reordered, so an observer passes a leader
/// it hears of through its [`Observer`] as it does one it read, and reads the store after
/// [`LeaderNews::Missed`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LeaderNews {
    /// `leader` was granted the election's exclusive lock (by a request, or handed it in
    /// the line), whose lease ends at `until` unless renewed (the store's clock; `None` for
    /// a lock without a TTL). News may come late: see [`news_needs_read`].
    Leads {
        /// The election.
        election: Resource,
        /// Who leads it.
        leader: Leader,
        /// When the lease the news is of ends, unless renewed.
        until: Option<Timestamp>,
    },
    /// News may have been lost (the subscription began, or its stream reopened or fell
    /// behind): who leads is to be read.
    Missed,
}

/// A subscription to a store's news of leaders. See
/// [`LockStore::leaders`](crate::LockStore::leaders).
pub type LeaderStream = Pin<Box<dyn Stream<Item = LeaderNews> + Send>>;

/// Who leads, given the locks a status read of the election's resource returned: the
/// holder of its exclusive lock, unless that lock has expired (none while it is free, or
/// expired and in its takeover grace, when nobody may trust it). Of several (reads that
/// span a takeover), the one with the highest fence.
#[must_use]
pub fn leader_of<'a>(locks: impl IntoIterator<Item = &'a LockStatus>) -> Option<Leader> {
    locks
        .into_iter()
        .filter(|l| l.mode == Mode::Exclusive && l.ttl.is_none_or(|t| !t.is_zero()))
        .max_by_key(|l| l.fence)
        .map(Leader::of)
}

/// Whether a lock a request was just granted makes news of a new leader, for a store that
/// announces the leaders of its elections: an exclusive grant made now. A claim (a fair
/// request that found the lock the store had handed its place, and renewed it) is no news:
/// the write that handed it over told of that leader.
#[must_use]
pub fn grant_is_news(granted: &LockStatus) -> bool {
    granted.mode == Mode::Exclusive && granted.renewed_at.is_none()
}

/// Whether news of a leader whose lease ends at `until` must be confirmed by a read before
/// it is reported, at wall time `now`: when that lease has ended. News carries no promise
/// that its leader still leads (it may arrive late: its writer paused after its write, a
/// cursor fell behind); a leader whose lease has ended may have been replaced, or the
/// leadership lapsed, and nothing would retract the report. A renewal moves the lease on
/// without news, so a read tells.
#[must_use]
pub fn news_needs_read(until: Option<Timestamp>, now: Timestamp) -> bool {
    until.is_some_and(|until| until <= now)
}

/// What an observer of an election reports of the leaders its reads return: each leader
/// once, in the order of their fences, never one with a fence at or below one it reported.
/// Reads may come back out of order (a poll and a wake-up's read overlap) or from a
/// member that lags; a leader older than the last one reported is no change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Observer {
    last: Option<u64>,
}

impl Observer {
    /// An observer that has reported nobody.
    #[must_use]
    pub fn new() -> Self {
        Observer::default()
    }

    /// The fence of the last leader reported.
    #[must_use]
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// The leader a read returned: `Some` (to report) when it leads after the last one
    /// reported, `None` when it is that one or an older one.
    pub fn see(&mut self, leader: Leader) -> Option<Leader> {
        let newer = if mutants::active(Mutant::ObserveReportsStaleLeader) {
            self.last != Some(leader.fence)
        } else {
            self.last.is_none_or(|last| leader.fence > last)
        };
        newer.then(|| {
            self.last = Some(leader.fence);
            leader
        })
    }
}
