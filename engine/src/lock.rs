//! Locks: what a caller asks for, and what a store keeps.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{Access, Mode};
use crate::error::Error;
use crate::names::{LockId, Resource};
use crate::options::LockOptions;
use crate::queue::{Handoff, Ticket};
use crate::status::{Holder, LockStatus};
use crate::time::{Timestamp, Ttl};

/// A validated request for one lock: what a store's `lock` decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockRequest {
    /// The resource to lock.
    pub resource: Resource,
    /// Exclusive, or shared with an optional limit.
    pub access: Access,
    /// The group the lock joins.
    pub lock_id: LockId,
    /// Who takes it, from where, and why.
    pub holder: Holder,
    /// Time to live; `None`: until unlocked.
    pub ttl: Option<Ttl>,
    /// A fair request's place in the resource's queue ([`crate::queue`]); `None`: not fair
    /// (it still waits behind the queue, but takes no place in it when refused).
    pub fair: Option<Ticket>,
}

impl LockRequest {
    /// The same request, fair: refused, it takes (or keeps) the place `ticket` names in the
    /// resource's queue, and it is granted only when no conflicting waiter is ahead of it.
    #[must_use]
    pub fn fair(mut self, ticket: Ticket) -> Self {
        self.fair = Some(ticket);
        self
    }

    /// Checks every argument of a lock request. The request is not fair (a place in the
    /// queue is named by a ticket: [`LockRequest::fair`]), whatever `options.fair` says.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad field: `resource`, `lock_id`, `owner`, `host`,
    /// `comment` (empty or too long) or `ttl` (zero, under 1 ms, or over 100 years).
    pub fn new(resource: &str, lock_id: &str, options: &LockOptions) -> Result<Self, Error> {
        let resource = Resource::new(resource)?;
        let lock_id = LockId::new(lock_id)?;
        options.holder.check()?;
        let ttl = options.ttl.map(Ttl::new).transpose()?;
        Ok(LockRequest {
            resource,
            access: options.access,
            lock_id,
            holder: options.holder.clone(),
            ttl,
            fair: None,
        })
    }

    /// The same request with `access`.
    #[must_use]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The ticket that names a fair request's place in the queue.
    #[must_use]
    pub fn ticket(&self) -> Option<&LockId> {
        self.fair.as_ref().map(|t| &t.id)
    }

    /// The kind of lock it asks for.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.access.mode()
    }

    /// What a handoff to this fair request's place grants (its lock, with a claim lease of
    /// `lease`, the place's lease).
    #[must_use]
    pub fn handoff(&self, lease: Ttl) -> Handoff {
        let limit = match self.access {
            Access::Shared(limit) => limit,
            Access::Exclusive => None,
        };
        Handoff::new(self.lock_id.clone(), self.holder.clone(), limit, lease)
    }
}

/// One lock as a store keeps it, inside its resource (which also gives its mode).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredLock {
    /// The group the lock belongs to.
    pub lock_id: LockId,
    /// Who took it, from where, and why.
    #[serde(flatten)]
    pub holder: Holder,
    /// When it was granted (the store's clock).
    pub created_at: Timestamp,
    /// When it was last renewed.
    pub renewed_at: Option<Timestamp>,
    /// When it expires; `None`: never.
    pub expires_at: Option<Timestamp>,
    /// Its fencing token: greater than every fence granted before on the resource.
    pub fence: u64,
}

impl StoredLock {
    /// A lock of `lock_id` created at `created_at` with `fence`, and no details, renewal or
    /// expiry (set the public fields for those). For stores that decode stored locks.
    #[must_use]
    pub fn new(lock_id: LockId, created_at: Timestamp, fence: u64) -> Self {
        StoredLock {
            lock_id,
            holder: Holder::default(),
            created_at,
            renewed_at: None,
            expires_at: None,
            fence,
        }
    }

    /// A lock granted at `now` with `fence`.
    #[must_use]
    pub fn granted(request: &LockRequest, now: Timestamp, fence: u64) -> Self {
        StoredLock {
            lock_id: request.lock_id.clone(),
            holder: request.holder.clone(),
            created_at: now,
            renewed_at: None,
            expires_at: request.ttl.map(|t| now.saturating_add(t.as_duration())),
            fence,
        }
    }

    /// Expired at `now`: `expires_at <= now` (locks without a TTL never expire). Its holder
    /// can no longer count on it; whether another grant may take it over is
    /// [`StoredLock::is_abandoned`].
    #[must_use]
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }

    /// Live at `now`: not expired (locks without a TTL are always live).
    #[must_use]
    pub fn is_live(&self, now: Timestamp) -> bool {
        !self.is_expired(now)
    }

    /// The remaining TTL at `now`: `None` without a TTL, zero once expired.
    #[must_use]
    pub fn remaining_ttl(&self, now: Timestamp) -> Option<Duration> {
        self.expires_at.map(|e| e.saturating_duration_since(now))
    }

    /// The status report of this lock on `resource` at `now`.
    #[must_use]
    pub fn status(&self, resource: &Resource, mode: Mode, now: Timestamp) -> LockStatus {
        LockStatus {
            resource: resource.clone(),
            lock_id: self.lock_id.clone(),
            mode,
            holder: self.holder.clone(),
            created_at: self.created_at,
            renewed_at: self.renewed_at,
            expires_at: self.expires_at,
            ttl: self.remaining_ttl(now),
            fence: self.fence,
        }
    }
}
