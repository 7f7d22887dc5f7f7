//! The lock runtime: a tokio driver of the engine's sans-IO [`LockerCore`].
//!
//! Every decision (when to ask again, when to renew, when a lock stops being trusted, what
//! to release after an unknown outcome) is the core's; this module only carries requests
//! to the store, replies and timers back, and events out to guards. The simulator drives
//! the same core. The task that does the carrying is in `driver`.

mod driver;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{Ask, LockerCore, Wait, Who};
pub use lockwright_engine::locker::{Ended, LockerConfig, LockerStats};
use lockwright_engine::{Error, LocalMs, LockId, LockStatus, LockStore, Resource, Ttl};
use rand_core::{OsRng, UnwrapErr};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::hostname::hostname;
use crate::{Client, LockOptions};
use driver::drive;

/// What a guard sees of its lease: how it ended, if it has, the local instant (since the
/// locker started) until which the lock may be trusted, and when that was last moved (by
/// the grant or a renewal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseView {
    ended: Option<Ended>,
    trust_until: LocalMs,
    trusted_at: LocalMs,
}

enum Command<S: LockStore> {
    Acquire {
        key: LeaseKey,
        ask: Ask,
        wait: Wait,
        reply: oneshot::Sender<Result<LockGuard<S>, Error>>,
    },
    Cancel {
        key: LeaseKey,
    },
    Release {
        key: LeaseKey,
        reply: Option<oneshot::Sender<Result<(), Error>>>,
    },
}

struct Inner<S> {
    client: Client<S>,
    config: LockerConfig,
    epoch: Instant,
    stats: Mutex<LockerStats>,
    next_key: AtomicU64,
    stop: tokio_util::sync::CancellationToken,
    /// Cancelled when the task has ended.
    finished: tokio_util::sync::CancellationToken,
}

impl<S> Inner<S> {
    /// Local monotonic time since the locker started.
    fn now(&self) -> LocalMs {
        self.local(Instant::now())
    }

    /// `at` on the core's clock.
    fn local(&self, at: Instant) -> LocalMs {
        LocalMs::ZERO.saturating_add(at.saturating_duration_since(self.epoch))
    }

    /// The core's instant `at` on tokio's clock.
    fn instant(&self, at: LocalMs) -> Instant {
        self.epoch + Duration::from_millis(at.as_millis())
    }
}

/// Acquires locks, renews them all from one background task, and tells holders when a lock
/// is lost. Cloning shares the locker. The task ends when the last handle and guard are
/// gone and every release has finished.
///
#[cfg_attr(feature = "mem", doc = "```")]
#[cfg_attr(not(feature = "mem"), doc = "```ignore")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockwright::Error> {
/// use std::time::Duration;
/// use lockwright::{Client, LockOptions, Locker, LockerConfig, MemStore};
///
/// let locker = Locker::new(Client::new(MemStore::new()), LockerConfig::default())?;
/// let options = LockOptions::exclusive(Duration::from_secs(10)).owner("report-job");
/// let guard = locker.acquire("nightly-report", &options).await?;
/// tokio::select! {
///     ended = guard.lost() => eprintln!("stop working: {ended}"),
///     () = async { /* the work, writing with guard.fence() */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct Locker<S: LockStore> {
    shared: Arc<Inner<S>>,
    /// The task's inbox. Only handles and guards hold a sender (the task holds a weak
    /// one), so the task ends when the last of them is gone.
    commands: mpsc::UnboundedSender<Command<S>>,
}

impl<S: LockStore> Clone for Locker<S> {
    fn clone(&self) -> Self {
        Locker {
            shared: Arc::clone(&self.shared),
            commands: self.commands.clone(),
        }
    }
}

impl<S: LockStore> fmt::Debug for Locker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S: LockStore> Locker<S> {
    /// A locker on `client`, with its task spawned on the current tokio runtime.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad configuration (`renew_fraction` outside (0, 1), zero
    /// `max_renew_attempts`, zero `renew_retry`, `initial_backoff` or `release_timeout`, or
    /// `max_backoff` below `initial_backoff`).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(client: Client<S>, config: LockerConfig) -> Result<Self, Error> {
        // Lock ids are secrets: every random bit (lock ids and backoff jitter alike) comes
        // from the operating system's generator.
        let core = LockerCore::new(config.clone(), client.renew_margin(), UnwrapErr(OsRng))?;
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Inner {
            client,
            config,
            epoch: Instant::now(),
            stats: Mutex::new(LockerStats::default()),
            next_key: AtomicU64::new(1),
            stop: tokio_util::sync::CancellationToken::new(),
            finished: tokio_util::sync::CancellationToken::new(),
        });
        tokio::spawn(drive(Arc::clone(&shared), core, commands.downgrade(), rx));
        Ok(Locker { shared, commands })
    }

    /// The client underneath.
    pub fn client(&self) -> &Client<S> {
        &self.shared.client
    }

    /// The counters.
    pub fn stats(&self) -> LockerStats {
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops renewing: every held lock ends with [`Ended::Cancelled`] (its lease then runs
    /// out in the store), acquires under way fail and new ones are refused, both with
    /// [`Error::Shutdown`]. Locks are not
    /// released; release them first to free them at once (releasing a guard still works
    /// after shutdown).
    pub fn shutdown(&self) {
        self.shared.stop.cancel();
    }

    /// Drops this handle and waits until the locker's task has ended: once no other handle
    /// or guard is left, and what the task still had to send (a place given up by an
    /// acquire that stopped waiting, a release) has been answered or has timed out. A
    /// process that exits right after an acquire was cancelled awaits this first (bounded
    /// by a timeout of its own), so that its place does not stay in the queue until it
    /// lapses.
    pub async fn closed(self) {
        let finished = self.shared.finished.clone();
        drop(self);
        finished.cancelled().await;
    }

    /// Tries once to take the lock on `resource` as `options` say, without waiting.
    ///
    /// # Errors
    /// `AlreadyLocked` when it is held; `InvalidArgument` for bad arguments (`resource`,
    /// `owner`, `host`, `comment`, `limit`, or a `ttl` not longer than the drift margin);
    /// `Shutdown` after [`Locker::shutdown`]; `StaleGrant` for a grant whose reply came too
    /// late to trust and `NoReply` when none came in time (whatever may have been granted is
    /// released); backend errors (after one whose outcome is unknown, the attempt's lock id
    /// is released; after one that wrote nothing, nothing more is sent).
    pub async fn try_acquire(
        &self,
        resource: &str,
        options: &LockOptions,
    ) -> Result<LockGuard<S>, Error> {
        self.start(resource, options, |_| Wait::No).await
    }

    /// Takes the lock, waiting with jittered exponential backoff while it is held by others
    /// (and asking again when a grant came too late to trust, or no reply came in time).
    /// Cancel-safe: dropping the future leaves no lock behind. Bound the wait with
    /// [`Locker::acquire_until`] or `tokio::time::timeout`.
    ///
    /// # Errors
    /// As [`Locker::try_acquire`], except that `AlreadyLocked` is waited out.
    pub async fn acquire(
        &self,
        resource: &str,
        options: &LockOptions,
    ) -> Result<LockGuard<S>, Error> {
        self.start(resource, options, |_| Wait::Forever).await
    }

    /// As [`Locker::acquire`], giving up at `deadline`.
    ///
    /// # Errors
    /// As [`Locker::acquire`], and [`Error::Timeout`] when the deadline passes first (at
    /// once, with nothing sent to the store, when it has already passed).
    pub async fn acquire_until(
        &self,
        resource: &str,
        options: &LockOptions,
        deadline: Instant,
    ) -> Result<LockGuard<S>, Error> {
        self.start(resource, options, |shared| {
            Wait::Until(shared.local(deadline))
        })
        .await
    }

    async fn start(
        &self,
        resource: &str,
        options: &LockOptions,
        wait: impl FnOnce(&Inner<S>) -> Wait,
    ) -> Result<LockGuard<S>, Error> {
        let resource = Resource::new(resource)?;
        let ttl = options.ttl.ok_or_else(|| {
            Error::invalid(
                "ttl",
                "is needed: a Locker renews its locks within their TTL",
            )
        })?;
        let ttl = Ttl::new(ttl)?;
        // Owner, host and comment are checked by the core, before anything is sent.
        let access = options.access;
        let mut holder = options.holder.clone();
        if holder.host.is_none() {
            holder.host = hostname().map(str::to_owned);
        }
        let key = self.shared.next_key.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let command = Command::Acquire {
            key,
            ask: Ask {
                resource,
                access,
                ttl,
                who: Who::new(holder),
                fair: options.fair,
            },
            wait: wait(&self.shared),
            reply,
        };
        self.commands.send(command).map_err(|_| Error::Shutdown)?;
        // Armed until the answer arrives: if this future is dropped, the core abandons the
        // acquire and releases whatever its request in flight is granted.
        let mut cancel = CancelOnDrop {
            commands: &self.commands,
            key,
            armed: true,
        };
        let result = answer.await.unwrap_or_else(|_| Err(Error::Shutdown));
        cancel.armed = false;
        result
    }
}

struct CancelOnDrop<'a, S: LockStore> {
    commands: &'a mpsc::UnboundedSender<Command<S>>,
    key: LeaseKey,
    armed: bool,
}

impl<S: LockStore> Drop for CancelOnDrop<'_, S> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Cancel { key: self.key });
        }
    }
}

/// A held lock. Renewed in the background until released, dropped or lost.
///
/// Hand [`LockGuard::fence`] to downstream systems with every write; await
/// [`LockGuard::lost`] (or `select!` on it) to stop working when the lock is lost.
/// Dropping the guard releases the lock.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard<S: LockStore> {
    locker: Locker<S>,
    key: LeaseKey,
    status: LockStatus,
    view: watch::Receiver<LeaseView>,
    released: AtomicBool,
}

impl<S: LockStore> fmt::Debug for LockGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.status.resource)
            .field("mode", &self.status.mode)
            .field("fence", &self.status.fence)
            .field("ended", &self.ended())
            .finish_non_exhaustive()
    }
}

impl<S: LockStore> LockGuard<S> {
    /// The fencing token of this grant.
    pub fn fence(&self) -> u64 {
        self.status.fence
    }

    /// The user's `collection`, written under this grant's fence: each write applies only
    /// if no higher fence of this resource has written the document, in the same single
    /// command, and a refused write is [`Error::Fenced`] (feature `mongo`). Kept after the
    /// lock is lost, its writes are refused once a successor has written.
    ///
    /// ```no_run
    /// # async fn f(locker: lockwright::Locker<lockwright::MongoStore>, orders: mongodb::Collection<mongodb::bson::Document>) -> Result<(), lockwright::Error> {
    /// use lockwright::LockOptions;
    /// use mongodb::bson::doc;
    /// use std::time::Duration;
    ///
    /// let guard = locker.acquire("order-7", &LockOptions::exclusive(Duration::from_secs(30))).await?;
    /// guard.fenced(&orders).update_one(doc! {"_id": 7}, doc! {"$set": {"state": "paid"}}).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "mongo")]
    pub fn fenced<T: Send + Sync>(
        &self,
        collection: &mongodb::Collection<T>,
    ) -> lockwright_store_mongo::FencedCollection<T> {
        lockwright_store_mongo::FencedCollection::new(
            collection,
            self.status.resource.clone(),
            self.status.fence,
        )
    }

    /// The lock as granted.
    pub fn status(&self) -> &LockStatus {
        &self.status
    }

    /// The lock id (the group of this one lock). A secret: do not log it.
    pub fn lock_id(&self) -> &LockId {
        &self.status.lock_id
    }

    /// How the lock ended, if it has.
    pub fn ended(&self) -> Option<Ended> {
        self.view.borrow().ended
    }

    /// Whether the lock may be trusted now: it has not ended, and the local clock is still
    /// before `sent + ttl - drift_margin` of the request that granted or last renewed it
    /// (so a holder whose renewals are starved stops trusting it in time).
    pub fn is_held(&self) -> bool {
        let view = *self.view.borrow();
        view.ended.is_none() && self.locker.shared.now() < view.trust_until
    }

    /// The instant until which the lock may be trusted (as [`LockGuard::is_held`] judges
    /// it), or `None` once it has ended. Renewals move it forward.
    pub fn trusted_until(&self) -> Option<Instant> {
        let view = *self.view.borrow();
        match view.ended {
            None => Some(self.locker.shared.instant(view.trust_until)),
            Some(_) => None,
        }
    }

    /// Resolves when less than `notice` of the lock's trust is left (its renewals have not
    /// moved [`LockGuard::trusted_until`] on in time: the store is slow or unreachable), or
    /// when the lock has ended; returns the instant by which work under the lock must have
    /// stopped: the end of its trust, or now when it has ended.
    ///
    /// Give work that needs time to stop a `notice` of that time: it then has until the
    /// returned instant, and never longer than the lock may be trusted. A renewal that is
    /// merely slow must not end the work, so the notice is never more than half the time
    /// from when the next renewal is due to the end of trust: at most
    /// `(ttl × (1 − renew_fraction) − drift_margin) / 2` for a lock renewed as usual, and
    /// less while the trust the grant gave is short (a lock the store handed over is
    /// trusted for its claim lease until its first renewal claims it).
    pub async fn running_out(&self, notice: Duration) -> Instant {
        let config = &self.locker.shared.config;
        let mut view = self.view.clone();
        loop {
            let now = *view.borrow_and_update();
            if now.ended.is_some() {
                return Instant::now();
            }
            let end = self.locker.shared.instant(now.trust_until);
            // The renewal is due at `renew_fraction` of the trust given (or earlier).
            let given = now.trust_until.saturating_duration_since(now.trusted_at);
            let cap = given
                .mul_f64(1.0 - config.renew_fraction)
                .saturating_sub(config.drift_margin)
                / 2;
            let warn = end
                .checked_sub(notice.min(cap))
                .unwrap_or(self.locker.shared.epoch);
            tokio::select! {
                () = tokio::time::sleep_until(warn) => {
                    // Unless a renewal moved it meanwhile (then look again).
                    if *view.borrow() == now {
                        return end;
                    }
                }
                changed = view.changed() => {
                    if changed.is_err() {
                        // The locker's task is gone: nothing renews the lock any more.
                        return end.min(Instant::now());
                    }
                }
            }
        }
    }

    /// Resolves when the lock ends, with the cause. Use it in `select!` beside the work.
    pub async fn lost(&self) -> Ended {
        let mut view = self.view.clone();
        match view.wait_for(|v| v.ended.is_some()).await {
            Ok(v) => v.ended.unwrap_or(Ended::Cancelled),
            Err(_) => Ended::Cancelled,
        }
    }

    /// Releases the lock now, retried until the locker's `release_timeout`. Idempotent:
    /// later calls return `Ok` without contacting the store.
    ///
    /// # Errors
    /// The last backend error when `release_timeout` passed (the lock then expires by its
    /// TTL).
    pub async fn release(&self) -> Result<(), Error> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        let command = Command::Release {
            key: self.key,
            reply: Some(reply),
        };
        // The guard holds a sender, so the task is alive to take it.
        self.locker
            .commands
            .send(command)
            .map_err(|_| Error::Shutdown)?;
        answer.await.unwrap_or_else(|_| Err(Error::Shutdown))
    }
}

impl<S: LockStore> Drop for LockGuard<S> {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            let _ = self.locker.commands.send(Command::Release {
                key: self.key,
                reply: None,
            });
        }
    }
}
