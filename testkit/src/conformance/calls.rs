//! The calls the cases make: the port's operations with names as strings, each checked
//! with the engine's own constructors (`LockRequest::new`, `Access::shared`, `Ticket::new`,
//! `LockId::new`, `Resource::new`, `Ttl::new`, `Filter::validate`) before the store sees
//! it, as the library's client does, so that a case of refused input names the same field
//! on every store. Nothing else is added: the store's answer is returned as it is.

use std::time::Duration;

use lockwright_engine::{
    Access, Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockStore, Resource,
    Summary, Ticket, Ttl, Waiter,
};

use super::Ctx;
use crate::Backend;

impl<B: Backend> Ctx<B> {
    /// An exclusive lock on `resource` for the group `lock_id` ([`LockStore::lock`]), with
    /// the lease and holder of `options` (its access is not read).
    ///
    /// # Errors
    /// `InvalidArgument` (`resource`, `lock_id`, `owner`, `host`, `comment`, `ttl`), or the
    /// store's error.
    pub async fn xlock(
        &self,
        resource: &str,
        lock_id: impl AsRef<str>,
        options: &LockOptions,
    ) -> Result<LockStatus, Error> {
        self.lock(resource, lock_id.as_ref(), options, Access::Exclusive, None)
            .await
    }

    /// A shared lock, at most `limit` live on the resource ([`LockStore::lock`]).
    ///
    /// # Errors
    /// As [`Ctx::xlock`], and `limit` for `Some(0)`.
    pub async fn slock(
        &self,
        resource: &str,
        lock_id: impl AsRef<str>,
        options: &LockOptions,
        limit: Option<u32>,
    ) -> Result<LockStatus, Error> {
        let access = Access::shared(limit)?;
        self.lock(resource, lock_id.as_ref(), options, access, None)
            .await
    }

    /// [`Ctx::xlock`], fair: `fair`'s ticket names its place in the queue.
    ///
    /// # Errors
    /// As [`Ctx::xlock`], and `ticket` (empty or too long) or `queue_ttl` (outside 100 ms to
    /// 10 minutes).
    pub async fn xlock_fair(
        &self,
        resource: &str,
        lock_id: impl AsRef<str>,
        fair: &Fair,
    ) -> Result<LockStatus, Error> {
        let (options, place) = (&fair.options, Some(fair));
        self.lock(
            resource,
            lock_id.as_ref(),
            options,
            Access::Exclusive,
            place,
        )
        .await
    }

    /// [`Ctx::slock`], fair: `fair`'s ticket names its place in the queue.
    ///
    /// # Errors
    /// As [`Ctx::slock`] and [`Ctx::xlock_fair`].
    pub async fn slock_fair(
        &self,
        resource: &str,
        lock_id: impl AsRef<str>,
        fair: &Fair,
        limit: Option<u32>,
    ) -> Result<LockStatus, Error> {
        let access = Access::shared(limit)?;
        self.lock(
            resource,
            lock_id.as_ref(),
            &fair.options,
            access,
            Some(fair),
        )
        .await
    }

    async fn lock(
        &self,
        resource: &str,
        lock_id: &str,
        options: &LockOptions,
        access: Access,
        fair: Option<&Fair>,
    ) -> Result<LockStatus, Error> {
        let mut request = LockRequest::new(resource, lock_id, options)?.with_access(access);
        if let Some(Fair {
            ticket,
            lease,
            claim,
            far,
            ..
        }) = fair
        {
            let id = LockId::new(ticket).map_err(|e| e.about("ticket"))?;
            let mut ticket = Ticket::new(id, *lease)?;
            if let Some(claim) = claim {
                ticket = ticket.with_claim(*claim)?;
            }
            if *far {
                ticket = ticket.far_back();
            }
            request = request.fair(ticket);
        }
        self.store.lock(&request).await
    }

    /// Releases the group ([`LockStore::unlock`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`lock_id`), or the store's error.
    pub async fn unlock(&self, lock_id: impl AsRef<str>) -> Result<Vec<LockStatus>, Error> {
        let lock_id = LockId::new(lock_id.as_ref())?;
        self.store.unlock(&lock_id).await
    }

    /// Renews the group for `ttl` with [`Ctx::margin`] ([`LockStore::renew`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`lock_id`, `ttl`), or the store's error.
    pub async fn renew(
        &self,
        lock_id: impl AsRef<str>,
        ttl: Duration,
    ) -> Result<Vec<LockStatus>, Error> {
        let lock_id = LockId::new(lock_id.as_ref())?;
        let ttl = Ttl::new(ttl)?;
        self.store.renew(&lock_id, ttl, self.margin).await
    }

    /// Renews exactly `lock` for `ttl` with [`Ctx::margin`] ([`LockStore::renew_one`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`ttl`), or the store's error.
    pub async fn renew_one(&self, lock: &LockStatus, ttl: Duration) -> Result<LockStatus, Error> {
        let renewal = lock.renewal(Ttl::new(ttl)?);
        self.store.renew_one(&renewal, self.margin).await
    }

    /// Releases exactly `lock` ([`LockStore::unlock_one`]).
    ///
    /// # Errors
    /// The store's error.
    pub async fn unlock_one(&self, lock: &LockStatus) -> Result<Option<LockStatus>, Error> {
        self.store.unlock_one(&lock.resource, &lock.lock_id).await
    }

    /// Leaves `resource`'s queue ([`LockStore::leave_queue`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`resource`, and `ticket` for a bad lock id), or the store's error.
    pub async fn leave_queue(
        &self,
        resource: &str,
        ticket: impl AsRef<str>,
    ) -> Result<bool, Error> {
        let resource = Resource::new(resource)?;
        let ticket = LockId::new(ticket.as_ref()).map_err(|e| e.about("ticket"))?;
        self.store.leave_queue(&resource, &ticket).await
    }

    /// The live places of `resource`'s queue ([`LockStore::waiters`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`resource`), or the store's error.
    pub async fn waiters(&self, resource: &str) -> Result<Vec<Waiter>, Error> {
        let resource = Resource::new(resource)?;
        self.store.waiters(&resource).await
    }

    /// The locks matching `filter` ([`LockStore::status`]).
    ///
    /// # Errors
    /// `InvalidArgument` (`filter.resource`, `filter.lock_id`, `filter.owner`), or the
    /// store's error.
    pub async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
        filter.validate()?;
        self.store.status(filter).await
    }

    /// Every resource's contention ([`LockStore::summary`]).
    ///
    /// # Errors
    /// The store's error.
    pub async fn summary(&self) -> Result<Summary, Error> {
        self.store.summary().await
    }

    /// Purges the abandoned groups ([`LockStore::purge`]).
    ///
    /// # Errors
    /// The store's error.
    pub async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.store.purge().await
    }
}

/// A fair request's options and its place: the ticket that names it (unchecked until the
/// request is made, so that a case can send a bad one) and its lease. The ticket is a
/// secret, as a lock id is: `Debug` never shows it.
#[derive(Clone)]
pub struct Fair {
    /// The lock's lease and holder.
    pub options: LockOptions,
    /// The place's name.
    pub ticket: String,
    /// The place's lease.
    pub lease: Duration,
    /// The place's claim lease; `None`: its lease.
    pub claim: Option<Duration>,
    /// Kept far back ([`Ticket::far_back`]): stale at once, whatever `claim` says.
    pub far: bool,
}

impl std::fmt::Debug for Fair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fair")
            .field("options", &self.options)
            .field("ticket", &"<redacted>")
            .field("lease", &self.lease)
            .field("claim", &self.claim)
            .field("far", &self.far)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_ticket() {
        let fair = Fair {
            options: LockOptions::new(),
            ticket: "secret-ticket-7".into(),
            lease: Duration::from_secs(5),
            claim: None,
            far: false,
        };
        let shown = format!("{fair:?}");
        assert!(!shown.contains("secret-ticket-7"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
