//! What the core and its driver exchange: the requests to send to the store, the store's
//! replies, and the events the driver acts on.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RequestId;
use crate::error::Error;
use crate::lease::LeaseKey;
use crate::lock::LockRequest;
use crate::mutants::{self, Mutant};
use crate::names::{LockId, Resource};
use crate::port::LockStore;
use crate::status::{LockStatus, Renewal};
use crate::time::LocalMs;

/// A request for the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Grant `request`. Its lock id is fresh for this attempt; its access, owner, host and
    /// comment are the acquire's.
    Lock {
        /// The lock to take, as a store takes it.
        request: LockRequest,
    },
    /// Renew this one lock (each attempt's lock id is fresh, so the group is that one
    /// lock), refused if it expires within `margin`.
    Renew {
        /// The lock.
        lock: Renewal,
        /// The renew margin (the core's, from the client).
        margin: Duration,
    },
    /// Renew each of these locks as `Renew` would, in one batch; the reply is
    /// [`Reply::Each`], in the same order.
    RenewMany {
        /// The locks.
        locks: Vec<Renewal>,
        /// The renew margin (the core's, from the client).
        margin: Duration,
    },
    /// Release the one lock `lock_id` holds (or may hold) on `resource`.
    Unlock {
        /// Where the lock is.
        resource: Resource,
        /// Its lock id.
        lock_id: LockId,
    },
    /// Give up the place `ticket` holds (or may hold) in `resource`'s queue: a fair
    /// acquire stopped waiting. Best effort: the place lapses with its lease anyway.
    LeaveQueue {
        /// Where the place is.
        resource: Resource,
        /// The acquire's ticket.
        ticket: LockId,
    },
}

impl Request {
    /// Asks `store` for what this request asks and turns its answer into the core's
    /// [`Reply`]. The one mapping from requests to the store's operations: the `lockwright`
    /// Locker's driver sends every request through it, and so does the simulator, so what
    /// the simulator checks is what ships.
    pub async fn send_to<S: LockStore>(&self, store: &S) -> Reply {
        match self {
            Request::Lock { request } => Reply::from_lock(store.lock(request).await),
            Request::Renew { lock, margin } => {
                Reply::from_done(store.renew_one(lock, *margin).await)
            }
            Request::RenewMany { locks, margin } => {
                Reply::from_batch(store.renew_each(locks, *margin).await)
            }
            Request::Unlock { .. } if mutants::active(Mutant::LockerReleaseNotSent) => Reply::Done,
            Request::Unlock { resource, lock_id } => {
                Reply::from_done(store.unlock_one(resource, lock_id).await)
            }
            Request::LeaveQueue { resource, ticket } => {
                Reply::from_done(store.leave_queue(resource, ticket).await)
            }
        }
    }
}

/// A request to send, and the local instant after which its reply no longer counts (the
/// core then treats its outcome as unknown; the driver may abandon it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Quote it in [`LockerCore::handle_reply`](super::LockerCore::handle_reply).
    pub id: RequestId,
    /// What to send.
    pub request: Request,
    /// Local ms.
    pub deadline: LocalMs,
}

/// How the store answered a request.
#[derive(Debug)]
pub enum Reply {
    /// A `Lock` request was granted.
    Granted(LockStatus),
    /// A `Renew` or `Unlock` request was applied.
    Done,
    /// The store refused by the lock rules (`AlreadyLocked`, `NotRenewable`,
    /// `LockNotFound`): nothing was written.
    Refused(Error),
    /// The request failed; unless the error is a bad argument, it may have been applied.
    Failed(Error),
    /// A `RenewMany` request's outcome for each lock, in order.
    Each(Vec<Reply>),
}

impl Reply {
    /// The reply to a `Lock` request, from the store's answer.
    #[must_use]
    pub fn from_lock(result: Result<LockStatus, Error>) -> Reply {
        match result {
            Ok(status) => Reply::Granted(status),
            Err(e) => Reply::from_error(e),
        }
    }

    /// The reply to a `Renew` or `Unlock` request, from the store's answer.
    #[must_use]
    pub fn from_done<T>(result: Result<T, Error>) -> Reply {
        match result {
            Ok(_) => Reply::Done,
            Err(e) => Reply::from_error(e),
        }
    }

    /// The reply to a `RenewMany` request, from the store's answer.
    #[must_use]
    pub fn from_batch(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Reply {
        match result {
            Ok(each) => Reply::Each(each.into_iter().map(Reply::from_done).collect()),
            Err(e) => Reply::Failed(e),
        }
    }

    fn from_error(e: Error) -> Reply {
        match e {
            Error::AlreadyLocked { .. } | Error::NotRenewable { .. } | Error::LockNotFound => {
                Reply::Refused(e)
            }
            e => Reply::Failed(e),
        }
    }
}

/// How a held lock ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Ended {
    /// The holder released it (or dropped its guard).
    Released,
    /// The store refused a renewal: the lock expired, was purged or taken over.
    Refused,
    /// Its validity ran out before a renewal succeeded: the store was slow or unreachable.
    Expired,
    /// The locker shut down.
    Cancelled,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ended::Released => "released",
            Ended::Refused => "lost: the store refused the renewal",
            Ended::Expired => "lost: validity ran out before a renewal succeeded",
            Ended::Cancelled => "cancelled: the locker shut down",
        })
    }
}

/// What the driver must act on.
#[derive(Debug)]
pub enum Event {
    /// The acquire `key` holds its lock, trusted until local `trust_until`. The lease keeps
    /// the key.
    Acquired {
        /// The acquire's key, now the lease's.
        key: LeaseKey,
        /// The lock as granted.
        status: LockStatus,
        /// Local ms.
        trust_until: LocalMs,
    },
    /// The acquire `key` ended without a lock.
    AcquireFailed {
        /// The acquire.
        key: LeaseKey,
        /// Why.
        error: Error,
    },
    /// An attempt of the waiting acquire `key` failed or got no reply (whatever it may have
    /// been granted is being released); it asks again after its backoff.
    AttemptFailed {
        /// The acquire.
        key: LeaseKey,
        /// Why.
        error: Error,
    },
    /// The lease `key` was renewed and is trusted until local `trust_until`.
    Renewed {
        /// The lease.
        key: LeaseKey,
        /// Local ms.
        trust_until: LocalMs,
    },
    /// One renewal attempt of `key` failed (it may be retried).
    RenewFailed {
        /// The lease.
        key: LeaseKey,
        /// Why.
        error: Error,
    },
    /// The lease `key` must no longer be trusted.
    Ended {
        /// The lease.
        key: LeaseKey,
        /// How.
        how: Ended,
    },
    /// A release finished: of the lease `key`, or (`None`) of a grant nobody holds (after
    /// an unknown outcome, a stale grant or a cancelled acquire).
    Released {
        /// The lease, if the release was asked for.
        key: Option<LeaseKey>,
        /// `Err` when it gave up after `release_timeout`; the lock expires by its TTL.
        result: Result<(), Error>,
    },
}
