//! The store under the measured Locker: the MongoDB store, noting when each grant and
//! renewal reaches it, so that each renewal round's lag can be reported.

use lockwright_engine::Access;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lockwright_engine::{
    LockId, LockRequest, LockStatus, LockStore, Notices, Query, Reading, Release, Released,
    Renewal, Resource, Result, Ttl,
};
use lockwright_store_mongo::MongoStore;

use crate::locker::RENEW_FRACTION;

/// One renewal round as it reached the store.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    /// Locks in the request (1: `renew_one`; more: `renew_many`).
    pub locks: usize,
    /// Locks it renewed.
    pub renewed: usize,
    /// How long after the earliest of its locks was due it reached the store, in ms
    /// (negative: early).
    pub lag_ms: f64,
    /// The store call's duration.
    pub took: Duration,
}

#[derive(Default)]
struct RenewLog {
    /// When each lock's grant or last successful renewal reached the store.
    sent: HashMap<Resource, Instant>,
    rounds: Vec<Round>,
}

/// The store under the measured Locker, noting when each grant and renewal reaches it. A
/// lock is due for renewal at `sent + TTL x renew_fraction`, `sent` being when its grant or
/// last successful renewal reached the store (the Locker counts from when it sent the
/// request, a few µs earlier); a round's lag is how long after the earliest due lock in it
/// the round reached the store.
pub struct Watched {
    inner: MongoStore,
    log: Mutex<RenewLog>,
}

impl Watched {
    /// `inner`, watched from now on.
    pub fn new(inner: MongoStore) -> Self {
        Watched {
            inner,
            log: Mutex::default(),
        }
    }

    /// The instant a round reaches the store, and its lag.
    fn begin<'a>(&self, locks: impl Iterator<Item = (&'a Resource, Ttl)>) -> (Instant, f64) {
        let at = Instant::now();
        let log = self.log.lock().unwrap();
        let due = locks
            .filter_map(|(r, ttl)| {
                Some(*log.sent.get(r)? + ttl.as_duration().mul_f64(RENEW_FRACTION))
            })
            .min();
        let lag_ms = due.map_or(0.0, |due| {
            if at >= due {
                (at - due).as_secs_f64() * 1e3
            } else {
                -(due - at).as_secs_f64() * 1e3
            }
        });
        (at, lag_ms)
    }

    fn end<'a>(
        &self,
        at: Instant,
        lag_ms: f64,
        locks: usize,
        renewed: impl Iterator<Item = &'a Resource>,
    ) {
        let took = at.elapsed();
        let mut log = self.log.lock().unwrap();
        let mut count = 0;
        for r in renewed {
            log.sent.insert(r.clone(), at);
            count += 1;
        }
        log.rounds.push(Round {
            locks,
            renewed: count,
            lag_ms,
            took,
        });
    }

    /// The rounds so far, in the order they reached the store.
    pub fn rounds(&self) -> Vec<Round> {
        self.log.lock().unwrap().rounds.clone()
    }
}

impl LockStore for Watched {
    async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
        let at = Instant::now();
        let granted = self.inner.lock(request).await;
        if granted.is_ok() && request.access == Access::Exclusive {
            let mut log = self.log.lock().unwrap();
            log.sent.insert(request.resource.clone(), at);
        }
        granted
    }

    async fn release(&self, what: Release<'_>) -> Result<Released> {
        self.inner.release(what).await
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.inner.renew(lock_id, ttl, margin).await
    }

    async fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        let (at, lag_ms) = self.begin(locks.iter().map(|r| (&r.resource, r.ttl)));
        let outcomes = self.inner.renew_each(locks, margin).await;
        let renewed: Vec<&Resource> = match &outcomes {
            Ok(each) => locks
                .iter()
                .zip(each)
                .filter(|(_, outcome)| outcome.is_ok())
                .map(|(r, _)| &r.resource)
                .collect(),
            Err(_) => Vec::new(),
        };
        self.end(at, lag_ms, locks.len(), renewed.into_iter());
        outcomes
    }

    async fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        self.inner.set_comment(resource, lock_id, comment).await
    }

    async fn read(&self, query: Query<'_>) -> Result<Reading> {
        self.inner.read(query).await
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        self.inner.purge().await
    }

    fn notices(&self) -> Option<&dyn Notices> {
        self.inner.notices()
    }
}
