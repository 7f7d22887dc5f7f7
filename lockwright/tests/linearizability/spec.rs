//! The sequential specification: the engine's lock table at a fixed instant, and each
//! operation applied to a store.

use super::*;
use lockwright::Access;

/// One operation of a client.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Xlock {
        resource: &'static str,
        lock_id: &'static str,
        ttl_ms: Option<u64>,
    },
    Slock {
        resource: &'static str,
        lock_id: &'static str,
        ttl_ms: Option<u64>,
        limit: Option<u32>,
    },
    Unlock {
        lock_id: &'static str,
    },
    Renew {
        lock_id: &'static str,
    },
    /// `renew_one` of the lock `lock_id` holds on `resource`.
    RenewOne {
        resource: &'static str,
        lock_id: &'static str,
    },
    /// `unlock_one` of the lock `lock_id` holds on `resource`.
    UnlockOne {
        resource: &'static str,
        lock_id: &'static str,
    },
    /// `renew_many` of the locks `(resource, lock_id, ttl_ms)`, in order, each the lock
    /// `lock_id` holds on `resource` (no lock twice: see [`renewal_batch`]).
    RenewMany {
        locks: Vec<(&'static str, &'static str, u64)>,
    },
    Status {
        resource: &'static str,
    },
    Purge,
}

/// A lock as reported, reduced to what identifies it and what the operations change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Lock {
    pub(crate) resource: String,
    pub(crate) lock_id: String,
    pub(crate) mode: Mode,
    pub(crate) fence: u64,
    pub(crate) expires_at: Option<Timestamp>,
    pub(crate) renewed_at: Option<Timestamp>,
}

impl From<&LockStatus> for Lock {
    fn from(s: &LockStatus) -> Self {
        Lock {
            resource: s.resource.as_str().to_owned(),
            lock_id: s.lock_id.as_str().to_owned(),
            mode: s.mode,
            fence: s.fence,
            expires_at: s.expires_at,
            renewed_at: s.renewed_at,
        }
    }
}

/// What an operation returned, in comparable form. Lists are sorted: the order of a list is
/// the differential tests' business, not a question of atomicity.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ret {
    /// A grant, with its fence.
    Granted(u64),
    /// The locks unlocked, renewed, reported or purged (a one-lock operation: the lock
    /// renewed or released, or none).
    Locks(Vec<Lock>),
    AlreadyLocked,
    LockNotFound,
    NotRenewable(Vec<Lock>),
    /// A batch's outcome for each of its locks, in the batch's order (each as [`one`]
    /// gives it).
    Each(Vec<Ret>),
    /// Any other error: never expected, from the engine or from a store.
    Failed(String),
}

/// Sorted reductions of `locks`.
pub(crate) fn reduce(locks: &[LockStatus]) -> Vec<Lock> {
    let mut out: Vec<Lock> = locks.iter().map(Lock::from).collect();
    out.sort();
    out
}

/// The comparable form of an error.
pub(crate) fn refusal(e: Error) -> Ret {
    match e {
        Error::AlreadyLocked { .. } => Ret::AlreadyLocked,
        Error::LockNotFound => Ret::LockNotFound,
        Error::NotRenewable { locks } => Ret::NotRenewable(reduce(&locks)),
        other => Ret::Failed(format!("{other:?}")),
    }
}

/// The comparable form of a grant's outcome.
pub(crate) fn grant(result: Result<LockStatus, Error>) -> Ret {
    result.map_or_else(refusal, |s| Ret::Granted(s.fence))
}

/// The comparable form of a group operation's outcome.
pub(crate) fn locks(result: Result<Vec<LockStatus>, Error>) -> Ret {
    result.map_or_else(refusal, |l| Ret::Locks(reduce(&l)))
}

/// The comparable form of a one-lock operation's outcome.
pub(crate) fn one(result: Result<Option<LockStatus>, Error>) -> Ret {
    result.map_or_else(refusal, |l| Ret::Locks(reduce(l.as_slice())))
}

/// The comparable form of a batch's outcome.
pub(crate) fn each(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Ret {
    result.map_or_else(refusal, |each| {
        Ret::Each(each.into_iter().map(|r| one(r.map(Some))).collect())
    })
}

/// The renewals of a `RenewMany`.
pub(crate) fn renewals(locks: &[(&'static str, &'static str, u64)]) -> Vec<Renewal> {
    locks
        .iter()
        .map(|&(resource, lock_id, ttl_ms)| Renewal {
            resource: res(resource),
            lock_id: id(lock_id),
            ttl: Ttl::new(Duration::from_millis(ttl_ms)).unwrap(),
        })
        .collect()
}

/// A validated resource name.
pub(crate) fn res(resource: &str) -> Resource {
    Resource::new(resource).unwrap()
}

/// A lock request without details.
pub(crate) fn request(resource: &str, lock_id: &str, ttl_ms: Option<u64>) -> LockRequest {
    let mut details = LockOptions::new();
    details.ttl = ttl_ms.map(Duration::from_millis);
    LockRequest::new(resource, lock_id, &details).unwrap()
}

/// A validated shared limit.
pub(crate) fn limit(m: Option<u32>) -> Option<SharedLimit> {
    m.map(|m| SharedLimit::new(m).unwrap())
}

/// A validated lock id.
pub(crate) fn id(lock_id: &str) -> LockId {
    LockId::new(lock_id).unwrap()
}

/// [`RENEW_TTL`], validated.
pub(crate) fn renew_ttl() -> Ttl {
    Ttl::new(RENEW_TTL).unwrap()
}

/// The specification: the engine's table, every operation applied at [`NOW`].
#[derive(Clone, Debug)]
pub(crate) struct Spec(pub(crate) LockTable);

impl SequentialSpec for Spec {
    type Op = Op;
    type Ret = Ret;

    fn invoke(&mut self, op: &Op) -> Ret {
        let table = &mut self.0;
        match *op {
            Op::RenewMany { ref locks } => Ret::Each(
                renewals(locks)
                    .iter()
                    .map(|r| {
                        one(table
                            .renew_one(&r.resource, &r.lock_id, r.ttl, MARGIN, NOW)
                            .map(Some))
                    })
                    .collect(),
            ),
            Op::Xlock {
                resource,
                lock_id,
                ttl_ms,
            } => grant(table.lock(&request(resource, lock_id, ttl_ms), NOW)),
            Op::Slock {
                resource,
                lock_id,
                ttl_ms,
                limit: m,
            } => grant(table.lock(
                &request(resource, lock_id, ttl_ms).with_access(Access::Shared(limit(m))),
                NOW,
            )),
            Op::Unlock { lock_id } => locks(Ok(table.unlock(&id(lock_id), NOW))),
            Op::Renew { lock_id } => locks(table.renew(&id(lock_id), renew_ttl(), MARGIN, NOW)),
            Op::RenewOne { resource, lock_id } => one(table
                .renew_one(&res(resource), &id(lock_id), renew_ttl(), MARGIN, NOW)
                .map(Some)),
            Op::UnlockOne { resource, lock_id } => {
                one(Ok(table.unlock_one(&res(resource), &id(lock_id), NOW)))
            }
            Op::Status { resource } => {
                locks(Ok(table.status(&Filter::new().resource(resource), NOW)))
            }
            Op::Purge => locks(Ok(table.purge(NOW))),
        }
    }
}

/// Applies `op` to `store` (whose clock reads [`NOW`]).
pub(crate) async fn apply<S: LockStore>(store: &S, op: &Op) -> Ret {
    match *op {
        Op::RenewMany { ref locks } => each(store.renew_each(&renewals(locks), MARGIN).await),
        Op::Xlock {
            resource,
            lock_id,
            ttl_ms,
        } => grant(store.lock(&request(resource, lock_id, ttl_ms)).await),
        Op::Slock {
            resource,
            lock_id,
            ttl_ms,
            limit: m,
        } => grant(
            store
                .lock(&request(resource, lock_id, ttl_ms).with_access(Access::Shared(limit(m))))
                .await,
        ),
        Op::Unlock { lock_id } => locks(store.unlock(&id(lock_id)).await),
        Op::Renew { lock_id } => locks(store.renew(&id(lock_id), renew_ttl(), MARGIN).await),
        Op::RenewOne { resource, lock_id } => one(store
            .renew_one(
                &Renewal {
                    resource: res(resource),
                    lock_id: id(lock_id),
                    ttl: renew_ttl(),
                },
                MARGIN,
            )
            .await
            .map(Some)),
        Op::UnlockOne { resource, lock_id } => {
            one(store.unlock_one(&res(resource), &id(lock_id)).await)
        }
        Op::Status { resource } => locks(store.status(&Filter::new().resource(resource)).await),
        Op::Purge => locks(store.purge().await),
    }
}
