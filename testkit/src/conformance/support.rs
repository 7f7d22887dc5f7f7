//! What the cases share: imports, durations, names, assertions.

pub use std::collections::BTreeSet;
pub use std::fmt::Debug;
pub use std::time::Duration;

pub use lockwright_engine::{
    DEFAULT_TAKEOVER_GRACE, Error, Filter, LockId, LockOptions, LockStatus, LockStore, Mode,
    Renewal, Timestamp, Ttl,
};

pub use crate::Backend;

pub use super::{Ctx, Fair, RENEW_MARGIN, T0};

pub const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// A fresh lock id of 128 random bits, as the library generates them.
pub fn generate_lock_id() -> LockId {
    LockId::from_random(rand::random())
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub fn ttl(d: Duration) -> LockOptions {
    LockOptions::new().ttl(d)
}

pub fn forever() -> LockOptions {
    LockOptions::new()
}

pub fn at(offset: Duration) -> Timestamp {
    T0.saturating_add(offset)
}

pub fn id(name: &str) -> LockId {
    LockId::new(name).expect("test lock ids are valid")
}

#[track_caller]
pub fn assert_locked<T: Debug>(result: Result<T, Error>, resource: &str) {
    match result {
        Err(Error::AlreadyLocked { resource: r, .. }) => assert_eq!(r.as_str(), resource),
        other => panic!("expected AlreadyLocked on {resource}, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_invalid<T: Debug>(result: Result<T, Error>, field: &str) {
    match result {
        Err(Error::InvalidArgument { field: f, reason }) => {
            assert_eq!(f, field, "wrong field named ({reason})");
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidArgument for {field}, got {other:?}"),
    }
}

/// (resource, lock id) pairs, in the order given.
pub fn pairs(locks: &[LockStatus]) -> Vec<(String, String)> {
    locks
        .iter()
        .map(|l| {
            (
                l.resource.as_str().to_owned(),
                l.lock_id.as_str().to_owned(),
            )
        })
        .collect()
}

pub fn pair(resource: &str, lock_id: &LockId) -> (String, String) {
    (resource.to_string(), lock_id.as_str().to_owned())
}

pub async fn all<B: Backend>(cx: &Ctx<B>) -> Vec<LockStatus> {
    cx.status(&Filter::new()).await.expect("status")
}

pub fn resources(locks: &[LockStatus]) -> BTreeSet<String> {
    locks
        .iter()
        .map(|l| l.resource.as_str().to_owned())
        .collect()
}

pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_string()).collect()
}

/// `lock` as it reads after a renewal at `now` for `ttl`.
pub fn renewed(lock: &LockStatus, now: Timestamp, ttl: Duration) -> LockStatus {
    let mut want = lock.clone();
    want.expires_at = Some(now.saturating_add(ttl));
    want.renewed_at = Some(now);
    want.ttl = Some(ttl);
    want
}
