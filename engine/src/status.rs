//! What a store reports: a lock's status and holder, a waiter's place, a renewal to make.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::Mode;
use crate::invalid::InvalidArgument;
use crate::names::{LockId, MAX_DETAIL_LEN, Resource, check_text};
use crate::time::{Timestamp, Ttl};

/// Who took a lock, from where, and why: text a store keeps with the lock and reports back.
/// No lock rule reads it (a status filter may select by owner). Each field, when set, is
/// non-empty and at most [`MAX_DETAIL_LEN`] bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Holder {
    /// Who is taking the lock (a user or service name).
    pub owner: Option<String>,
    /// The host the lock is taken from.
    pub host: Option<String>,
    /// Free text, e.g. the job the lock protects.
    pub comment: Option<String>,
}

impl Holder {
    /// Checks every field, as a lock request does.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first bad field: `owner`, `host` or `comment` (empty or
    /// over [`MAX_DETAIL_LEN`] bytes).
    pub fn check(&self) -> Result<(), InvalidArgument> {
        let fields = [
            ("owner", &self.owner),
            ("host", &self.host),
            ("comment", &self.comment),
        ];
        for (field, value) in fields {
            if let Some(v) = value {
                check_text(field, v, MAX_DETAIL_LEN)?;
            }
        }
        Ok(())
    }
}

/// One lock to renew in a batch: the lock `lock_id` holds on `resource`, for `ttl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Renewal {
    /// Where the lock is.
    pub resource: Resource,
    /// Its lock id.
    pub lock_id: LockId,
    /// The new lease.
    pub ttl: Ttl,
}

/// What a store reports about one lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockStatus {
    /// The locked resource.
    pub resource: Resource,
    /// The group the lock belongs to.
    pub lock_id: LockId,
    /// Exclusive or shared.
    pub mode: Mode,
    /// Who took it, from where, and why.
    #[serde(flatten)]
    pub holder: Holder,
    /// When it was granted (the store's clock).
    pub created_at: Timestamp,
    /// When it was last renewed.
    pub renewed_at: Option<Timestamp>,
    /// When it expires; `None`: never.
    pub expires_at: Option<Timestamp>,
    /// Remaining time to live when reported: `None` without a TTL, zero once expired.
    pub ttl: Option<Duration>,
    /// The fencing token of the grant.
    pub fence: u64,
}

impl LockStatus {
    /// The renewal of this lock (its resource and lock id) for `ttl`.
    #[must_use]
    pub fn renewal(&self, ttl: Ttl) -> Renewal {
        Renewal {
            resource: self.resource.clone(),
            lock_id: self.lock_id.clone(),
            ttl,
        }
    }

    /// The creation order of locks: by creation time, then resource name, then fence (the
    /// per-resource grant sequence). Every operation that orders locks uses this key.
    #[must_use]
    pub fn creation_key(&self) -> (Timestamp, &Resource, u64) {
        (self.created_at, &self.resource, self.fence)
    }
}

/// Sorts oldest first by [`LockStatus::creation_key`].
pub fn sort_oldest_first(locks: &mut [LockStatus]) {
    locks.sort_by(|a, b| a.creation_key().cmp(&b.creation_key()));
}

/// Sorts newest first by [`LockStatus::creation_key`].
pub fn sort_newest_first(locks: &mut [LockStatus]) {
    locks.sort_by(|a, b| b.creation_key().cmp(&a.creation_key()));
}

/// A fair request's place as its refusal reports it (`Error::AlreadyLocked::queued`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Queued {
    /// The fresh places ahead of it that it must let go first: every place ahead for an
    /// exclusive request or a limited shared one, the exclusive places ahead for a shared
    /// one without a limit. 0: nobody.
    pub ahead: u32,
    /// The live places ahead of it counted the same way, fresh or not (places kept far
    /// back count here, not in `ahead`): how far back in the line it is.
    #[serde(default)]
    pub live_ahead: u32,
    /// The resource's last fence when the store decided: grants with a higher fence came
    /// after the refusal (their places are counted in `ahead`).
    pub fence: u64,
}
