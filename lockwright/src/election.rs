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
use lockwright_engine::election::{LeaderNews, LeaderStream, Observer, leader_of, news_needs_read};
use lockwright_engine::{Error, Filter, LockOptions, LockStore, Mode, Resource, Timestamp};
use tokio::time::Instant;

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
        self.client()
            .store()
            .announce_leaders(&Resource::new(election)?);
        let guard = self.acquire(election, &options).await?;
        Ok(Leadership {
            guard,
            client: self.client().clone(),
            value: value.to_owned(),
        })
    }

    /// [`Locker::campaign`], telling `on_leader` who leads while this candidate waits (a
    /// follower's hook, as client-go's `OnNewLeader`): each leader an observer of the
    /// election sees ([`Client::observe`]: woken by the store's news where it sends news,
    /// reading at least every `every`; in fence order, never one twice), until this
    /// candidate leads. A read that fails is logged (`tracing`, at warn)
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

    /// The leaders of `election` as they change: each item is a leader with a higher fence
    /// than the one before (never a lower one, whatever the reads and news say); an error
    /// of one read is an item, and the observer goes on. An observer is not a candidate and
    /// keeps no place.
    ///
    /// Where the store sends news of leaders ([`LockStore::leaders`]: MongoDB and memory
    /// do), the observer hears of each new leader from the store, about half a round trip
    /// after the write that made it (one subscription per store, whatever the number of
    /// elections observed), and reads who leads once at the start, after news may have
    /// been lost, and whenever `every` passes with no news of the election. Elsewhere it
    /// reads every `every`. Either way it may miss a leader that led for less than `every`
    /// (read as at least 1 ms) whose news was lost: on MongoDB, news is sent by the
    /// candidates' stores ([`Locker::campaign`] tells its store to), so a leader handed
    /// the lock by a write no candidate made (an administrator's unlock, a purge) is only
    /// read. A bad election name is the one item, `InvalidArgument` naming `resource`, and
    /// the stream ends.
    pub fn observe(
        &self,
        election: &str,
        every: Duration,
    ) -> impl Stream<Item = Result<Leader, Error>> + Send + 'static {
        use futures_util::StreamExt as _;
        let election = match Resource::new(election) {
            Ok(election) => election,
            Err(e) => {
                return futures_util::stream::once(async move { Err(e.into()) }).left_stream();
            }
        };
        let watch = Watch {
            news: self.store().leaders(),
            client: self.clone(),
            election,
            every: every.max(Duration::from_millis(1)),
            observer: Observer::new(),
            read_at: Instant::now(),
        };
        futures_util::stream::unfold(watch, |mut watch| async move {
            let item = watch.next().await;
            Some((item, watch))
        })
        .right_stream()
    }
}

/// What an observer does next.
enum Step {
    /// Pass a leader the store's news told of through the observer.
    Heard(Leader),
    /// Read who leads.
    Read,
}

/// An observer's state between the items of [`Client::observe`].
struct Watch<S: LockStore> {
    client: Client<S>,
    election: Resource,
    every: Duration,
    observer: Observer,
    /// The store's news of leaders, while it sends them.
    news: Option<LeaderStream>,
    /// When the next read is due, unless news comes first.
    read_at: Instant,
}

impl<S: LockStore> Watch<S> {
    /// The next leader to report (or a read's error): from the news where the store sends
    /// them, from reads every `every` (and after news may have been lost) otherwise.
    async fn next(&mut self) -> Result<Leader, Error> {
        use futures_util::StreamExt as _;
        loop {
            let news = async {
                match self.news.as_mut() {
                    Some(news) => news.next().await,
                    None => std::future::pending().await,
                }
            };
            let step = tokio::select! {
                biased;
                heard = news => match heard {
                    Some(LeaderNews::Leads { election, leader, until }) if election == self.election => {
                        // News of a lease that has ended (it came late) is confirmed by a read.
                        if news_needs_read(until, wall_clock()) {
                            Step::Read
                        } else {
                            self.read_at = Instant::now() + self.every;
                            Step::Heard(leader)
                        }
                    }
                    Some(LeaderNews::Leads { .. }) => continue,
                    Some(LeaderNews::Missed) => Step::Read,
                    None => {
                        // The store stopped sending news: reads alone from now on.
                        self.news = None;
                        Step::Read
                    }
                },
                () = tokio::time::sleep_until(self.read_at) => Step::Read,
            };
            let leader = match step {
                Step::Heard(leader) => leader,
                Step::Read => {
                    self.read_at = Instant::now() + self.every;
                    match self.client.leader(self.election.as_str()).await? {
                        Some(leader) => leader,
                        None => continue,
                    }
                }
            };
            if let Some(leader) = self.observer.see(leader) {
                return Ok(leader);
            }
        }
    }
}

/// The wall clock, against which news says when its lease ends (the store's clock: on
/// MongoDB the server's; a process whose clock is far behind the store's trusts late news
/// longer, one ahead reads more often).
fn wall_clock() -> Timestamp {
    Timestamp::from_system_time(std::time::SystemTime::now()).unwrap_or(Timestamp::EPOCH)
}
