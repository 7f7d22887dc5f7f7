//! Locks: what a caller asks for, and what a store keeps.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::Mode;
use crate::error::Error;
use crate::names::{LockId, Resource};
use crate::queue::Ticket;
use crate::status::{Holder, LockStatus};
use crate::time::{Timestamp, Ttl};

/// Optional facts about a lock, as the caller gives them. Checked when a lock is requested.
///
/// ```
/// use std::time::Duration;
/// use lockwright_engine::LockDetails;
///
/// let details = LockDetails::new().owner("billing-worker").ttl(Duration::from_secs(30));
/// assert_eq!(details.holder.owner.as_deref(), Some("billing-worker"));
/// assert_eq!(details.ttl, Some(Duration::from_secs(30)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockDetails {
    /// Who takes the lock, from where, and why.
    #[serde(flatten)]
    pub holder: Holder,
    /// How long the lock lives unless renewed; `None`: until unlocked.
    pub ttl: Option<Duration>,
    /// Makes the request fair: its place in the resource's queue ([`crate::queue`]): the
    /// ticket that names it across attempts (a secret like a lock id, never serialized)
    /// and how long it lasts unless the waiter asks again.
    #[serde(skip)]
    pub queue: Option<QueueAsk>,
}

/// A fair request's ticket and place lease, as [`LockDetails::queue`] takes them. The
/// ticket is a secret: `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct QueueAsk {
    ticket: String,
    ttl: Duration,
}

impl QueueAsk {
    /// The place's lease.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl fmt::Debug for QueueAsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueAsk")
            .field("ticket", &"<redacted>")
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl LockDetails {
    /// No owner, host, comment or TTL.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the owner.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.holder.owner = Some(owner.into());
        self
    }

    /// Sets the host.
    #[must_use]
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.holder.host = Some(host.into());
        self
    }

    /// Sets the comment.
    #[must_use]
    pub fn comment(mut self, comment: impl Into<String>) -> Self {
        self.holder.comment = Some(comment.into());
        self
    }

    /// Sets the TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Makes the request fair: refused, it takes (or keeps) the place `ticket` names in
    /// the resource's queue for `queue_ttl`, and it is granted only when no conflicting
    /// waiter is ahead of it ([`crate::queue`]). Use one ticket (from
    /// `generate_lock_id()`) for every attempt of one wait, and ask again within
    /// `queue_ttl` to keep the place.
    #[must_use]
    pub fn queue(mut self, ticket: impl Into<String>, queue_ttl: Duration) -> Self {
        self.queue = Some(QueueAsk {
            ticket: ticket.into(),
            ttl: queue_ttl,
        });
        self
    }

    /// Checks every field, as a lock request does.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad field: `owner`, `host`, `comment` (empty or
    /// over [`MAX_DETAIL_LEN`](crate::names::MAX_DETAIL_LEN) bytes), `ttl` (zero, under 1 ms, or over 100 years),
    /// `ticket` (empty or too long) or `queue_ttl` (outside 100 ms to 10 minutes).
    pub fn check(&self) -> Result<(), Error> {
        self.holder.check()?;
        self.ttl.map(Ttl::new).transpose()?;
        self.ticket().transpose()?;
        Ok(())
    }

    fn ticket(&self) -> Option<Result<Ticket, Error>> {
        self.queue.as_ref().map(|QueueAsk { ticket, ttl }| {
            let id = LockId::new(ticket.as_str()).map_err(|e| e.about("ticket"))?;
            Ok(Ticket::new(id, *ttl)?)
        })
    }
}

/// A validated request for one lock; the mode comes from the operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockRequest {
    /// The resource to lock.
    pub resource: Resource,
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

    /// Checks every argument of a lock request.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad field: `resource`, `lock_id`, `owner`, `host`,
    /// `comment` (empty or too long) or `ttl` (zero, under 1 ms, or over 100 years).
    pub fn new(resource: &str, lock_id: &str, details: &LockDetails) -> Result<Self, Error> {
        let resource = Resource::new(resource)?;
        let lock_id = LockId::new(lock_id)?;
        details.holder.check()?;
        let ttl = details.ttl.map(Ttl::new).transpose()?;
        let fair = details.ticket().transpose()?;
        Ok(LockRequest {
            resource,
            lock_id,
            holder: details.holder.clone(),
            ttl,
            fair,
        })
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
