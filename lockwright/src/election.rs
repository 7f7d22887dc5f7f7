//! Leader election on a fair exclusive lock: candidates wait in its line, the store hands
//! the lock (the leadership) to the next candidate when the leader resigns or its lease and
//! grace run out, and every leader carries the lock's fence to hand to what it writes.
//!
//! An election is named by a resource. The leader's *value* (a short text it proclaims: an
//! address, a pod name) is the lock's comment, kept in the lock's document, so that anyone
//! reads it with the leader's fence and since-when in one read ([`Client::leader`]).
//! Leadership is a [`LockGuard`]: renewed by the Locker's one task, lost (with its cause)
//! as a lock is, and trusted until the holding rule's deadline.

use std::time::Duration;

use futures_util::Stream;
pub use lockwright_engine::election::Leader;
use lockwright_engine::election::{Observer, leader_of};
use lockwright_engine::{Error, Filter, LockOptions, LockStore, Mode};

use crate::client::Client;
use crate::locker::{Ended, LockGuard, Locker};

/// Leadership of an election: a held lock and the value proclaimed with it. Dropping it
/// resigns.
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership<S: LockStore> {
    guard: LockGuard<S>,
    client: Client<S>,
    value: String,
}

impl<S: LockStore> Leadership<S> {
    /// The fence of this leadership: hand it to every write made as leader.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// The value proclaimed.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Proclaims `value` in place of the one proclaimed, keeping the leadership (the same
    /// lock, fence and lease, and no place given up): one write to the store.
    ///
    /// # Errors
    /// `InvalidArgument` naming `comment` for a bad value; `NotRenewable` when the
    /// leadership is no longer trusted here or no longer held at the store, `LockNotFound`
    /// when it is gone; backend errors. The value proclaimed stays as it was.
    pub async fn proclaim(&mut self, value: &str) -> Result<(), Error> {
        LockOptions::new().comment(value).check()?;
        let status = self.guard.status();
        if !self.guard.is_held() {
            return Err(Error::NotRenewable {
                locks: vec![status.clone()],
            });
        }
        self.client
            .store()
            .set_comment(&status.resource, &status.lock_id, Some(value))
            .await?;
        value.clone_into(&mut self.value);
        Ok(())
    }

    /// Whether the leadership may be trusted now (see [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership ends, with the cause ([`LockGuard::lost`]).
    pub async fn lost(&self) -> Ended {
        self.guard.lost().await
    }

    /// The lock that carries the leadership (its status, fenced writes on MongoDB).
    pub fn guard(&self) -> &LockGuard<S> {
        &self.guard
    }

    /// Resigns: releases the lock, and the store hands the leadership to the next live
    /// candidate in line in the same write.
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn resign(self) -> Result<(), Error> {
        self.guard.release().await
    }
}

impl<S: LockStore> Locker<S> {
    /// Campaigns in `election` with `value` (the lock's comment, replacing any in
    /// `options`): waits in the election's line (fair, whatever `options` say) and returns
    /// the leadership once the store hands it over. Cancel-safe, as [`Locker::acquire`].
    ///
    #[cfg_attr(feature = "mem", doc = "```")]
    #[cfg_attr(not(feature = "mem"), doc = "```ignore")]
    /// # use std::time::Duration;
    /// # use lockwright::{Client, LockOptions, Locker, LockerConfig, MemStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockwright::Error> {
    /// let locker = Locker::new(Client::new(MemStore::new()), LockerConfig::default())?;
    /// let lease = LockOptions::exclusive(Duration::from_secs(10));
    /// let leading = locker.campaign("scheduler", "10.0.0.7:8080", &lease).await?;
    /// let leader = locker.client().leader("scheduler").await?.expect("somebody leads");
    /// assert_eq!((leader.value.as_deref(), leader.fence), (Some("10.0.0.7:8080"), leading.fence()));
    /// leading.resign().await?; // the next candidate in line is handed the leadership
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locker::acquire`]; `InvalidArgument` naming `access` when `options` ask for a
    /// shared lock (a leader is alone), or `comment` for a bad value (empty, or longer than
    /// the holder's details may be).
    pub async fn campaign(
        &self,
        election: &str,
        value: &str,
        options: &LockOptions,
    ) -> Result<Leadership<S>, Error> {
        if options.access.mode() != Mode::Exclusive {
            return Err(Error::invalid(
                "access",
                "must be exclusive: an election has one leader",
            ));
        }
        let options = options.clone().comment(value).fair();
        let guard = self.acquire(election, &options).await?;
        Ok(Leadership {
            guard,
            client: self.client().clone(),
            value: value.to_owned(),
        })
    }

    /// [`Locker::campaign`], telling `on_leader` who leads while this candidate waits (a
    /// follower's hook, as client-go's `OnNewLeader`): each leader an observer of the
    /// election reading every `every` sees ([`Client::observe`]: in fence order, never one
    /// twice), until this candidate leads. A read that fails is logged (`tracing`, at warn)
    /// and not reported; the campaign goes on. Cancel-safe, as [`Locker::campaign`].
    ///
    /// # Errors
    /// As [`Locker::campaign`].
    pub async fn campaign_following(
        &self,
        election: &str,
        value: &str,
        options: &LockOptions,
        every: Duration,
        mut on_leader: impl FnMut(Leader) + Send,
    ) -> Result<Leadership<S>, Error> {
        use futures_util::StreamExt as _;
        let campaign = self.campaign(election, value, options);
        let mut leaders = std::pin::pin!(self.client().observe(election, every));
        tokio::pin!(campaign);
        loop {
            tokio::select! {
                biased;
                leadership = &mut campaign => return leadership,
                Some(leader) = leaders.next() => match leader {
                    Ok(leader) => on_leader(leader),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "a read of who leads failed; the campaign goes on"
                    ),
                },
            }
        }
    }
}

impl<S: LockStore> Client<S> {
    /// Who leads `election` now, from one read of the store: the holder of its exclusive
    /// lock, unless that lock has expired (none while it is free, or expired and in its
    /// takeover grace).
    ///
    /// # Errors
    /// `InvalidArgument` naming `resource` for a bad name; backend errors.
    pub async fn leader(&self, election: &str) -> Result<Option<Leader>, Error> {
        let filter = Filter::new().resource(election).mode(Mode::Exclusive);
        Ok(leader_of(&self.status(&filter).await?))
    }

    /// The leaders of `election` as they change, read every `every`: each item is a leader
    /// with a higher fence than the one before (never a lower one, whatever the reads
    /// return); an error of one read is an item, and the reads go on. An observer is not a
    /// candidate and keeps no place. It may miss a leader that led for less than `every`
    /// (read as at least 1 ms). A bad election name is the one item, `InvalidArgument`
    /// naming `resource`, and the stream ends.
    pub fn observe(
        &self,
        election: &str,
        every: Duration,
    ) -> impl Stream<Item = Result<Leader, Error>> + Send + 'static {
        use futures_util::StreamExt as _;
        if let Err(e) = lockwright_engine::Resource::new(election) {
            return futures_util::stream::once(async move { Err(e.into()) }).left_stream();
        }
        let client = self.clone();
        let election = election.to_owned();
        let every = every.max(Duration::from_millis(1));
        poll_leaders(client, election, every).right_stream()
    }
}

/// The polling loop behind [`Client::observe`].
fn poll_leaders<S: LockStore>(
    client: Client<S>,
    election: String,
    every: Duration,
) -> impl Stream<Item = Result<Leader, Error>> + Send + 'static {
    let state = (client, election, every, Observer::new(), true);
    futures_util::stream::unfold(
        state,
        |(client, election, every, mut observer, mut first)| async move {
            loop {
                if !first {
                    tokio::time::sleep(every).await;
                }
                first = false;
                let item = match client.leader(&election).await {
                    Ok(leader) => leader.and_then(|l| observer.see(l)).map(Ok),
                    Err(e) => Some(Err(e)),
                };
                if let Some(item) = item {
                    return Some((item, (client, election, every, observer, first)));
                }
            }
        },
    )
}
