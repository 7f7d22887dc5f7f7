//! The Locker runtime: on paused tokio time against the in-memory store (the store's clock
//! follows tokio's), and on real time with short TTLs against MongoDB.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright::SharedLimit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[cfg(feature = "mem")]
use lockwright::MemStore;
use lockwright::{
    Client, Ended, Error, Filter, LockOptions, LockRequest, LockStatus, LockStore, Locker,
    LockerConfig, Outcome, Release, Released, Renewal,
};
use lockwright_testkit::Backend;
#[cfg(feature = "mem")]
use lockwright_testkit::Mem;
#[cfg(feature = "mongo")]
use lockwright_testkit::Mongo;
use tokio::time::Instant;

/// A store whose renewals (and optionally grants) can be broken on demand.
struct Faulty<S> {
    inner: S,
    /// Renewals fail with a transport error.
    renew_fails: AtomicBool,
    /// Renewals never answer.
    renew_hangs: AtomicBool,
    /// Grants happen, but the reply comes late.
    slow_grant: AtomicBool,
    /// The next grant's reply comes this many ms late (once).
    grant_delay_once_ms: AtomicU64,
    /// This many unlocks fail with a transport error before the store is reached.
    unlock_failures: AtomicU64,
    /// The next grant fails with a backend error of this outcome: `NotApplied` before the
    /// store is reached, `Unknown` after the store granted it (a lost reply).
    grant_failure: std::sync::Mutex<Option<Outcome>>,
    /// Release round trips: one per `unlock_one` call.
    unlock_calls: AtomicU64,
    /// This many grants fail with an unreachable server, before the store is reached.
    grants_unreachable: AtomicU64,
    /// Renewal round trips: one per `renew_one` or `renew_many` call.
    renew_calls: AtomicU64,
}

fn faulty<S>(inner: S) -> Faulty<S> {
    Faulty {
        inner,
        renew_fails: AtomicBool::new(false),
        renew_hangs: AtomicBool::new(false),
        slow_grant: AtomicBool::new(false),
        grant_delay_once_ms: AtomicU64::new(0),
        unlock_failures: AtomicU64::new(0),
        grant_failure: std::sync::Mutex::new(None),
        unlock_calls: AtomicU64::new(0),
        grants_unreachable: AtomicU64::new(0),
        renew_calls: AtomicU64::new(0),
    }
}

impl<S> Faulty<S> {
    /// A renewal hangs or fails, as set.
    async fn renew_fault(&self) -> Result<(), Error> {
        self.renew_calls.fetch_add(1, Ordering::SeqCst);
        if self.renew_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.renew_fails.load(Ordering::SeqCst) {
            return Err(Error::backend(
                "renew",
                std::io::Error::other("connection refused"),
            ));
        }
        Ok(())
    }
}

impl<S: LockStore> lockwright_testkit::Forward for Faulty<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn lock(&self, r: &LockRequest) -> Result<LockStatus, Error> {
        let unreachable = self
            .grants_unreachable
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if unreachable {
            let down = std::io::Error::other("no server available");
            return Err(Error::not_applied("xlock", down));
        }
        let failure = self.grant_failure.lock().unwrap().take();
        let lost = || std::io::Error::other("connection reset");
        match failure {
            Some(Outcome::NotApplied) => return Err(Error::not_applied("xlock", lost())),
            Some(Outcome::Unknown) => {
                let _granted = self.inner.lock(r).await;
                return Err(Error::backend("xlock", lost()));
            }
            None => {}
        }
        let granted = self.inner.lock(r).await;
        if self.slow_grant.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let delay = self.grant_delay_once_ms.swap(0, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        granted
    }
    async fn release(&self, what: Release<'_>) -> Result<Released, Error> {
        if let Release::Lock { .. } = what {
            self.unlock_calls.fetch_add(1, Ordering::SeqCst);
            let fail = self
                .unlock_failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fail {
                return Err(Error::backend(
                    "unlock",
                    std::io::Error::other("connection reset"),
                ));
            }
        }
        self.inner.release(what).await
    }
    async fn renew_each(
        &self,
        locks: &[Renewal],
        m: Duration,
    ) -> Result<Vec<Result<LockStatus, Error>>, Error> {
        self.renew_fault().await?;
        self.inner.renew_each(locks, m).await
    }

    /// None: this store never passed its inner store's hints on, so waiters on it poll, and
    /// the timings of these tests were set that way.
    fn notices(&self) -> Option<&dyn lockwright::Notices> {
        None
    }
}

lockwright_testkit::forward_lock_store!(impl<S: LockStore> Faulty<S>);

fn config(ttl: Duration) -> LockerConfig {
    let mut c = LockerConfig::default();
    c.drift_margin = ttl / 5;
    c.renew_retry = ttl / 20;
    c
}

async fn locker<B: Backend>() -> Locker<Faulty<B::Store>> {
    let client =
        Client::with_renew_margin(faulty(B::real_time_store().await), B::TTL / 10).unwrap();
    Locker::new(client, config(B::TTL)).unwrap()
}

async fn held<S: LockStore>(locker: &Locker<S>) -> usize {
    locker.client().status(&Filter::new()).await.unwrap().len()
}

async fn auto_renewal_keeps_a_lock_for_many_ttls<B: Backend>() {
    let locker = locker::<B>().await;
    let guard = locker
        .acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    tokio::time::sleep(B::TTL * 5).await;
    assert!(guard.is_held(), "{guard:?}");
    assert_eq!(guard.ended(), None);
    let other = locker
        .try_acquire("job", &LockOptions::exclusive(B::TTL))
        .await;
    assert!(
        matches!(other, Err(Error::AlreadyLocked { .. })),
        "{other:?}"
    );
    let stats = locker.stats();
    assert!(stats.renewals >= 5, "{stats:?}");
    assert_eq!((stats.held, stats.lost), (1, 0));
    guard.release().await.unwrap();
    B::teardown(locker.client().store().inner_ref()).await;
}

async fn broken_backend_fires_lost_before_the_lease_expires<B: Backend>(hang: bool) {
    let locker = locker::<B>().await;
    let sent = Instant::now();
    let guard = locker
        .acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    let store = locker.client().store();
    if hang {
        store.renew_hangs.store(true, Ordering::SeqCst)
    } else {
        store.renew_fails.store(true, Ordering::SeqCst)
    }
    let ended = guard.lost().await;
    let lost_after = sent.elapsed();
    assert_eq!(ended, Ended::Expired);
    assert!(
        lost_after < B::TTL,
        "lost after {lost_after:?}: the lease (ttl {:?}) could have expired",
        B::TTL
    );
    assert!(!guard.is_held());
    let stats = locker.stats();
    assert_eq!((stats.held, stats.lost), (0, 1), "{stats:?}");
    assert!(stats.renew_failures >= 1 || hang, "{stats:?}");
    B::teardown(store.inner_ref()).await;
}

/// `running_out` gives its notice only when renewals stop moving the trust on: never while
/// they succeed, and when they fail, `notice` before the trust ends and before the lock is
/// lost.
async fn running_out_gives_notice_only_when_renewals_fail<B: Backend>() {
    // Failed renewals are retried until the trust ends (by default the lease is given up
    // after three, and the loss is the notice).
    let mut config = config(B::TTL);
    config.max_renew_attempts = u32::MAX;
    let client =
        Client::with_renew_margin(faulty(B::real_time_store().await), B::TTL / 10).unwrap();
    let locker = Locker::new(client, config).unwrap();
    let guard = locker
        .acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    // Within the most it gives (half the trust left after a renewal is due: a tenth of the
    // TTL with this configuration's drift margin of a fifth).
    let notice = B::TTL / 20;
    tokio::select! {
        end = guard.running_out(notice) => panic!("ran out at {end:?} while renewals succeed"),
        () = tokio::time::sleep(B::TTL * 4) => {}
    }
    locker
        .client()
        .store()
        .renew_fails
        .store(true, Ordering::SeqCst);
    let end = guard.running_out(notice).await;
    let warned = Instant::now();
    assert_eq!(guard.ended(), None, "the notice comes before the loss");
    assert!(guard.is_held());
    assert_eq!(guard.trusted_until(), Some(end));
    assert!(
        end > warned && end - warned <= notice,
        "notice of {:?}, asked for {notice:?}",
        end - warned
    );
    assert_eq!(guard.lost().await, Ended::Expired);
    assert!(
        Instant::now() >= end,
        "lost at the end of its trust, not before"
    );
    assert_eq!(guard.trusted_until(), None);
    // Once ended, it resolves at once.
    assert!(guard.running_out(notice).await <= Instant::now());
    B::teardown(locker.client().store().inner_ref()).await;
}

async fn refused_renewal_is_reported<B: Backend>() {
    let locker = locker::<B>().await;
    let guard = locker
        .acquire(
            "job",
            &LockOptions::shared(SharedLimit::new(2).unwrap(), B::TTL),
        )
        .await
        .unwrap();
    locker.client().unlock(guard.lock_id()).await.unwrap(); // behind the holder's back
    assert_eq!(guard.lost().await, Ended::Refused);
    B::teardown(locker.client().store().inner_ref()).await;
}

async fn cancelled_acquire_leaves_nothing_behind<B: Backend>() {
    let locker = locker::<B>().await;
    let holder = locker
        .acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    let waited = tokio::time::timeout(
        B::TTL * 2,
        locker.acquire("job", &LockOptions::exclusive(B::TTL)),
    )
    .await;
    assert!(waited.is_err(), "still held by the first guard");
    let deadline = Instant::now() + B::TTL;
    let gave_up = locker
        .acquire_until("job", &LockOptions::exclusive(B::TTL), deadline)
        .await;
    assert!(matches!(gave_up, Err(Error::Timeout { .. })));
    assert_eq!(held(&locker).await, 1, "only the holder's lock");
    holder.release().await.unwrap();

    // Cancelled after the store granted, before the reply arrived: the grant is released.
    locker
        .client()
        .store()
        .slow_grant
        .store(true, Ordering::SeqCst);
    let cancelled = tokio::time::timeout(
        B::TTL / 4,
        locker.acquire("job", &LockOptions::exclusive(B::TTL)),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(
        until_nothing_held(&locker, B::TTL).await,
        0,
        "the lock won by the cancelled acquire was released"
    );
    assert_eq!(locker.stats().held, 0);
    B::teardown(locker.client().store().inner_ref()).await;
}

async fn many_locks_one_task<B: Backend>(n: usize) {
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let store = faulty(B::real_time_store().await);
    store.status(&Filter::new()).await.unwrap(); // the backend's own tasks (driver pools) start
    let before = alive();
    // Three times the usual TTL: on MongoDB a renewal then has 1.8 s to come back before its
    // lock stops being trusted, as mongod replies of over half a second were seen on a
    // loaded machine (batching, not surviving slow replies, is what this test is about).
    let ttl = B::TTL * 3;
    let client = Client::with_renew_margin(store, ttl / 10).unwrap();
    let locker = Locker::new(client, config(ttl)).unwrap();
    // Taken together: all at once, so that their renewals fall due together.
    let options = LockOptions::exclusive(ttl);
    let names: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
    let started = Instant::now();
    let guards: Vec<_> =
        futures_util::future::join_all(names.iter().map(|name| locker.try_acquire(name, &options)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    // On a loaded machine the grants come back spread out; renewals due within one batch
    // window of each other go together, so each cycle takes at most this many batches.
    let window = ttl.mul_f64(LockerConfig::default().renew_batch_fraction);
    let batches_per_cycle = (started.elapsed().as_secs_f64() / window.as_secs_f64())
        .ceil()
        .max(1.0) as u64;
    tokio::task::yield_now().await;
    let after = alive();
    if B::COUNTS_TASKS {
        assert_eq!(after, before + 1, "one renewal task for {n} locks");
    }
    tokio::time::sleep(ttl * 2).await;
    assert!(guards.iter().all(|g| g.is_held()));
    let stats = locker.stats();
    assert_eq!(stats.held, n as u64);
    assert!(stats.renewals >= 2 * n as u64, "{stats:?}");
    // Taken together, renewed together: one round trip per renewal cycle, not per lock.
    let calls = locker.client().store().renew_calls.load(Ordering::SeqCst);
    let cycles = stats.renewals / n as u64;
    assert!(
        batches_per_cycle * 4 <= n as u64,
        "grants spread over {batches_per_cycle} batch windows: too slow to tell batches apart"
    );
    assert!(
        calls <= (cycles + 1) * batches_per_cycle,
        "{calls} renewal round trips for {cycles} cycles of {n} locks \
         (at most {batches_per_cycle} batches a cycle)"
    );
    for g in &guards {
        g.release().await.unwrap();
    }
    assert_eq!(held(&locker).await, 0);
    B::teardown(locker.client().store().inner_ref()).await;
}

async fn release_is_idempotent_and_drop_releases<B: Backend>() {
    let locker = locker::<B>().await;
    let guard = locker
        .acquire("a", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    guard.release().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(guard.lost().await, Ended::Released);
    let dropped = locker
        .acquire("b", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    let fence = dropped.fence();
    drop(dropped);
    assert_eq!(
        until_nothing_held(&locker, B::TTL).await,
        0,
        "dropping a guard releases in the background"
    );
    let again = locker
        .acquire("b", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    assert!(again.fence() > fence);
    locker.shutdown();
    assert_eq!(again.lost().await, Ended::Cancelled);
    let refused = locker
        .try_acquire("c", &LockOptions::exclusive(B::TTL))
        .await;
    assert!(matches!(refused, Err(Error::Shutdown)), "{refused:?}");
    B::teardown(locker.client().store().inner_ref()).await;
}

/// Owner, host and comment reach the store with the lock, and so does a shared limit;
/// bad ones are refused before anything is sent.
async fn options_are_recorded_with_the_lock<B: Backend>() {
    let locker = locker::<B>().await;
    let options = LockOptions::shared(SharedLimit::new(2).unwrap(), B::TTL)
        .owner("billing-worker")
        .comment("invoice run");
    // The options name no host: the Locker records this machine's.
    assert_eq!(options.holder.host, None);
    let host = Some(gethostname::gethostname().to_string_lossy().into_owned());
    let first = locker.acquire("tenant", &options).await.unwrap();
    let second = locker.acquire("tenant", &options).await.unwrap();
    let third = locker.try_acquire("tenant", &options).await;
    assert!(
        matches!(third, Err(Error::AlreadyLocked { .. })),
        "{third:?}"
    );
    let found = locker.client().status(&Filter::new()).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    for lock in &found {
        assert_eq!(lock.holder.owner.as_deref(), Some("billing-worker"));
        assert_eq!(lock.holder.comment.as_deref(), Some("invoice run"));
        assert_eq!(lock.holder.host, host);
    }
    for (bad, field) in [
        (options.clone().owner(""), "owner"),
        (options.clone().comment("c".repeat(2_000)), "comment"),
        (LockOptions::exclusive(B::TTL).host(""), "host"),
        // A Locker renews what it holds: a lock without a TTL is refused.
        (LockOptions::new().owner("billing-worker"), "ttl"),
    ] {
        let refused = locker.try_acquire("other", &bad).await;
        assert!(
            matches!(&refused, Err(Error::InvalidArgument { field: f, .. }) if *f == field),
            "{field}: {refused:?}"
        );
    }
    first.release().await.unwrap();
    second.release().await.unwrap();
    B::teardown(locker.client().store().inner_ref()).await;
}

/// Waits (a bounded while) until the store holds no lock.
async fn until_nothing_held<S: LockStore>(locker: &Locker<S>, ttl: Duration) -> usize {
    let mut left = held(locker).await;
    for _ in 0..50 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(ttl / 50).await;
        left = held(locker).await;
    }
    left
}

/// A grant whose reply arrives after the lock stopped being trusted (`sent + ttl - drift
/// margin`) is released, never handed out as a guard: `try_acquire` says so, and `acquire`
/// asks again.
async fn late_grant_is_released_not_handed_out<B: Backend>() {
    let locker = locker::<B>().await;
    let store = locker.client().store();
    let late = u64::try_from((B::TTL * 9 / 10).as_millis()).unwrap();
    store.grant_delay_once_ms.store(late, Ordering::SeqCst);
    let stale = locker
        .try_acquire("job", &LockOptions::exclusive(B::TTL))
        .await;
    assert!(
        matches!(
            stale,
            // The driver stops waiting at the trust deadline (no reply), or the reply
            // arrived after it (a stale grant): either way it is not handed out.
            Err(Error::StaleGrant { .. }
                | Error::NoReply {
                    operation: "acquire"
                })
        ),
        "{stale:?}"
    );
    assert_eq!(
        until_nothing_held(&locker, B::TTL).await,
        0,
        "the late grant was released"
    );
    store.grant_delay_once_ms.store(late, Ordering::SeqCst);
    let guard = locker
        .acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    assert!(guard.is_held(), "{guard:?}");
    assert_eq!(
        held(&locker).await,
        1,
        "the late grant released, the next one held"
    );
    assert_eq!(locker.stats().held, 1);
    guard.release().await.unwrap();
    B::teardown(store.inner_ref()).await;
}

/// A lock request that failed without being applied is not followed by a release write; one
/// whose outcome is unknown (the store granted it, the reply was lost) is released, with one
/// write, and leaves nothing held.
async fn only_an_unknown_outcome_is_released<B: Backend>() {
    let locker = locker::<B>().await;
    let store = locker.client().store();
    let options = LockOptions::exclusive(B::TTL);
    *store.grant_failure.lock().unwrap() = Some(Outcome::NotApplied);
    let failed = locker.try_acquire("job", &options).await;
    assert!(
        matches!(&failed, Err(e @ Error::Backend { .. }) if !e.may_have_applied()),
        "{failed:?}"
    );
    *store.grant_failure.lock().unwrap() = Some(Outcome::Unknown);
    let failed = locker.try_acquire("job", &options).await;
    assert!(
        matches!(&failed, Err(e @ Error::Backend { .. }) if e.may_have_applied()),
        "{failed:?}"
    );
    assert_eq!(
        until_nothing_held(&locker, B::TTL).await,
        0,
        "the grant was released"
    );
    assert_eq!(
        store.unlock_calls.load(Ordering::SeqCst),
        1,
        "one release write, for the unknown outcome only"
    );
    let guard = locker.try_acquire("job", &options).await.unwrap();
    guard.release().await.unwrap();
    B::teardown(store.inner_ref()).await;
}

/// A waiting acquire asks again through failed attempts (the store unreachable for a while)
/// and is granted once the store answers; when every attempt fails for
/// `unavailable_timeout`, it gives up with the last failure. Both are counted.
async fn waiting_acquire_outlasts_a_short_outage_not_a_long_one<B: Backend>() {
    let store = faulty(B::real_time_store().await);
    let client = Client::with_renew_margin(store, B::TTL / 10).unwrap();
    let mut config = config(B::TTL);
    config.unavailable_timeout = B::TTL * 2;
    let locker = Locker::new(client, config).unwrap();
    let store = locker.client().store();
    let options = LockOptions::exclusive(B::TTL);
    store.grants_unreachable.store(3, Ordering::SeqCst);
    let guard = locker.acquire("job", &options).await.unwrap();
    assert_eq!(locker.stats().acquire_failures, 3);
    guard.release().await.unwrap();

    store.grants_unreachable.store(u64::MAX, Ordering::SeqCst);
    let started = Instant::now();
    let gave_up = locker.acquire("job", &options).await;
    assert!(
        matches!(
            &gave_up,
            Err(Error::Backend {
                operation: "xlock",
                ..
            })
        ),
        "{gave_up:?}"
    );
    assert!(
        started.elapsed() >= B::TTL * 2,
        "not before unavailable_timeout"
    );
    assert!(locker.stats().acquire_failures > 4);
    store.grants_unreachable.store(0, Ordering::SeqCst);
    B::teardown(store.inner_ref()).await;
}

/// A release that fails is tried again until it succeeds (within `release_timeout`), and
/// the guard's `release` reports the success.
async fn failed_release_is_retried<B: Backend>() {
    let locker = locker::<B>().await;
    let store = locker.client().store();
    let guard = locker
        .try_acquire("job", &LockOptions::exclusive(B::TTL))
        .await
        .unwrap();
    store.unlock_failures.store(2, Ordering::SeqCst);
    guard.release().await.unwrap();
    assert_eq!(store.unlock_failures.load(Ordering::SeqCst), 0);
    assert_eq!(held(&locker).await, 0, "released on the third attempt");
    assert_eq!(guard.ended(), Some(Ended::Released));
    B::teardown(store.inner_ref()).await;
}

/// The renewal task lives as long as a handle or a guard does, and no longer (it used to
/// hold the sender of its own inbox, and outlive everything but `shutdown`).
#[cfg(feature = "mem")]
#[tokio::test(start_paused = true)]
async fn the_renewal_task_ends_with_the_last_handle_and_guard() {
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = alive();
    let locker = locker::<Mem>().await;
    let guard = locker
        .acquire("job", &LockOptions::exclusive(Mem::TTL))
        .await
        .unwrap();
    let other_handle = locker.clone();
    drop(locker);
    drop(other_handle);
    tokio::time::sleep(Mem::TTL * 3).await;
    assert!(guard.is_held(), "the guard keeps the renewals going");
    assert_eq!(alive(), before + 1, "the renewal task");
    drop(guard); // released in the background
    for _ in 0..50 {
        if alive() == before {
            break;
        }
        tokio::time::sleep(Mem::TTL / 50).await;
    }
    assert_eq!(
        alive(),
        before,
        "the renewal task ended with the last handle and guard"
    );
}

impl<S> Faulty<S> {
    fn inner_ref(&self) -> &S {
        &self.inner
    }
}

#[cfg(feature = "mem")]
#[tokio::test]
async fn bad_configuration_is_rejected() {
    let client = || Client::new(MemStore::new());
    let mut c = LockerConfig::default();
    c.renew_fraction = 1.5;
    assert!(matches!(
        Locker::new(client(), c),
        Err(Error::InvalidArgument {
            field: "renew_fraction",
            ..
        })
    ));
    // Each error names the configuration's own field.
    let mut c = LockerConfig::default();
    c.max_renew_attempts = 0;
    assert!(matches!(
        Locker::new(client(), c),
        Err(Error::InvalidArgument {
            field: "max_renew_attempts",
            ..
        })
    ));
    let mut c = LockerConfig::default();
    c.renew_retry = Duration::ZERO;
    assert!(matches!(
        Locker::new(client(), c),
        Err(Error::InvalidArgument {
            field: "renew_retry",
            ..
        })
    ));
    let mut c = LockerConfig::default();
    c.renew_batch_fraction = 0.6;
    assert!(matches!(
        Locker::new(client(), c),
        Err(Error::InvalidArgument {
            field: "renew_batch_fraction",
            ..
        })
    ));
    let mut c = LockerConfig::default();
    c.max_backoff = Duration::ZERO;
    assert!(matches!(
        Locker::new(client(), c),
        Err(Error::InvalidArgument {
            field: "max_backoff",
            ..
        })
    ));
    let locker = Locker::new(client(), LockerConfig::default()).unwrap();
    let short = locker
        .try_acquire("r", &LockOptions::exclusive(Duration::from_millis(50)))
        .await;
    assert!(
        matches!(short, Err(Error::InvalidArgument { field: "ttl", .. })),
        "ttl within the drift margin"
    );
    let refused_by_margin = locker
        .try_acquire("r", &LockOptions::exclusive(Duration::from_secs(2)))
        .await;
    assert!(
        matches!(&refused_by_margin, Err(Error::InvalidArgument { field: "ttl", reason }) if reason.contains("renew margin")),
        "the client's 1 s margin would refuse every renewal of a 2 s lock renewed at half-time: {refused_by_margin:?}"
    );
}

macro_rules! locker_tests {
    ($module:ident, $backend:ty, $($attr:tt)*) => {
        mod $module {
            use super::*;
            #[tokio::test($($attr)*)]
            async fn auto_renewal_keeps_a_lock_for_many_ttls() { super::auto_renewal_keeps_a_lock_for_many_ttls::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn failing_backend_fires_lost_before_the_lease_expires() { super::broken_backend_fires_lost_before_the_lease_expires::<$backend>(false).await }
            #[tokio::test($($attr)*)]
            async fn hanging_backend_fires_lost_before_the_lease_expires() { super::broken_backend_fires_lost_before_the_lease_expires::<$backend>(true).await }
            #[tokio::test($($attr)*)]
            async fn running_out_gives_notice_only_when_renewals_fail() { super::running_out_gives_notice_only_when_renewals_fail::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn refused_renewal_is_reported() { super::refused_renewal_is_reported::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn cancelled_acquire_leaves_nothing_behind() { super::cancelled_acquire_leaves_nothing_behind::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn many_locks_one_task() { super::many_locks_one_task::<$backend>(<$backend as Backend>::MANY).await }
            #[tokio::test($($attr)*)]
            async fn release_is_idempotent_and_drop_releases() { super::release_is_idempotent_and_drop_releases::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn late_grant_is_released_not_handed_out() { super::late_grant_is_released_not_handed_out::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn options_are_recorded_with_the_lock() { super::options_are_recorded_with_the_lock::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn only_an_unknown_outcome_is_released() { super::only_an_unknown_outcome_is_released::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn waiting_acquire_outlasts_a_short_outage_not_a_long_one() { super::waiting_acquire_outlasts_a_short_outage_not_a_long_one::<$backend>().await }
            #[tokio::test($($attr)*)]
            async fn failed_release_is_retried() { super::failed_release_is_retried::<$backend>().await }
        }
    };
}

#[cfg(feature = "mem")]
locker_tests!(store_mem, Mem, start_paused = true);
#[cfg(feature = "mongo")]
locker_tests!(store_mongo, Mongo,);

/// A holder that crashed (never renews, never releases) costs a waiting acquire no more than
/// the end of its lock: the refusal says when the lock is abandoned (TTL plus the store's
/// takeover grace), and the waiter asks again then, not up to a backoff later. On tokio's
/// paused clock, which the in-memory store reads, so the instant is exact.
#[cfg(feature = "mem")]
#[tokio::test(start_paused = true)]
async fn a_waiter_asks_again_when_a_crashed_holders_lock_ends() {
    let locker = locker::<Mem>().await;
    let crashed = lockwright::generate_lock_id();
    let ttl = Duration::from_millis(1_300);
    let started = Instant::now();
    locker
        .client()
        .lock("job", &crashed, &lockwright::LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    let guard = locker
        .acquire("job", &LockOptions::exclusive(Mem::TTL))
        .await
        .unwrap();
    let waited = started.elapsed();
    let ends = ttl + lockwright::DEFAULT_TAKEOVER_GRACE;
    assert!(
        waited >= ends && waited <= ends + Duration::from_millis(5),
        "granted {waited:?} after the crash; the lock ended after {ends:?}"
    );
    guard.release().await.unwrap();
}
