//! Status filters: which locks a `status` call reports.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::Mode;
use crate::error::Error;
use crate::lock::StoredLock;
use crate::names::{LockId, MAX_DETAIL_LEN, Resource, check_text};
use crate::time::Timestamp;

/// Selects locks by every field that is set (all must match). The empty filter matches all.
///
/// TTL bounds apply to the remaining TTL `max(expires_at - now, 0)`; a lock without a TTL
/// never matches a TTL bound. Both bounds may be set together.
///
/// ```
/// use std::time::Duration;
/// use lockwright_engine::{Filter, Mode};
///
/// let expiring_soon = Filter::new().mode(Mode::Exclusive).ttl_lt(Duration::from_secs(5));
/// assert_eq!(expiring_soon.ttl_lt, Some(Duration::from_secs(5)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Filter {
    /// Only locks on this resource.
    pub resource: Option<String>,
    /// Only locks of this group.
    pub lock_id: Option<String>,
    /// Only locks with this owner.
    pub owner: Option<String>,
    /// Only locks of this mode.
    pub mode: Option<Mode>,
    /// Only locks created strictly before this instant.
    pub created_before: Option<Timestamp>,
    /// Only locks created strictly after this instant.
    pub created_after: Option<Timestamp>,
    /// Only locks whose remaining TTL is less than this.
    pub ttl_lt: Option<Duration>,
    /// Only locks whose remaining TTL is at least this.
    pub ttl_gte: Option<Duration>,
}

impl Filter {
    /// The filter that matches every lock.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Only locks on `resource`.
    #[must_use]
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only locks of the group `lock_id`.
    #[must_use]
    pub fn lock_id(mut self, lock_id: impl Into<String>) -> Self {
        self.lock_id = Some(lock_id.into());
        self
    }

    /// Only locks owned by `owner`.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Only locks of `mode`.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Only locks created strictly before `t`.
    #[must_use]
    pub fn created_before(mut self, t: Timestamp) -> Self {
        self.created_before = Some(t);
        self
    }

    /// Only locks created strictly after `t`.
    #[must_use]
    pub fn created_after(mut self, t: Timestamp) -> Self {
        self.created_after = Some(t);
        self
    }

    /// Only locks with a remaining TTL below `d`.
    #[must_use]
    pub fn ttl_lt(mut self, d: Duration) -> Self {
        self.ttl_lt = Some(d);
        self
    }

    /// Only locks with a remaining TTL of at least `d`.
    #[must_use]
    pub fn ttl_gte(mut self, d: Duration) -> Self {
        self.ttl_gte = Some(d);
        self
    }

    /// Checks the set fields: names and owner must be non-empty and within their bounds.
    ///
    /// # Errors
    /// `InvalidArgument` naming `filter.resource`, `filter.lock_id` or `filter.owner`.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(r) = &self.resource {
            Resource::new(r.as_str()).map_err(|e| e.about("filter.resource"))?;
        }
        if let Some(l) = &self.lock_id {
            LockId::new(l.as_str()).map_err(|e| e.about("filter.lock_id"))?;
        }
        if let Some(o) = &self.owner {
            check_text("filter.owner", o, MAX_DETAIL_LEN)?;
        }
        Ok(())
    }

    /// Whether `lock`, held on `resource` in `mode`, matches at `now`.
    #[must_use]
    pub fn matches(
        &self,
        resource: &Resource,
        mode: Mode,
        lock: &StoredLock,
        now: Timestamp,
    ) -> bool {
        let remaining = lock.remaining_ttl(now);
        self.resource
            .as_deref()
            .is_none_or(|r| r == resource.as_str())
            && self
                .lock_id
                .as_deref()
                .is_none_or(|l| l == lock.lock_id.as_str())
            && self
                .owner
                .as_ref()
                .is_none_or(|o| lock.holder.owner.as_ref() == Some(o))
            && self.mode.is_none_or(|m| m == mode)
            && self.created_before.is_none_or(|t| lock.created_at < t)
            && self.created_after.is_none_or(|t| lock.created_at > t)
            && self.ttl_lt.is_none_or(|d| remaining.is_some_and(|r| r < d))
            && (self
                .ttl_gte
                .is_none_or(|d| remaining.is_some_and(|r| r >= d))
                || (self.ttl_lt.is_some()
                    && crate::mutants::active(crate::mutants::Mutant::StatusTtlBoundOverwritten)))
    }
}
