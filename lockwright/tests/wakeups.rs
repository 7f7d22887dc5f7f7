//! Waiters woken by the store: a release wakes a waiting acquire through the store's hints
//! (an in-process notifier; on MongoDB, the wake the release inserts, which the waiter's
//! process reads through its tailable cursor), not through its backoff; a waiter whose
//! cursor fails still gets the lock, through the reply to the write that keeps its place
//! (the release handed it the lock); and a racing waiter keeps no cursor at all.
//!
//! The waiters that must be woken have a backoff of an hour, so that polling cannot explain
//! a grant: the tests assert that the grant comes (and, on MongoDB, the exact number of
//! lock requests it took), never how fast.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lockwright::{Client, LockOptions, Locker, LockerConfig};

/// A waiter that polls once an hour: only a hint can wake it within a test.
fn hint_only() -> LockerConfig {
    let mut config = LockerConfig::default();
    config.initial_backoff = Duration::from_secs(3_600);
    config.max_backoff = Duration::from_secs(3_600);
    config
}

/// On tokio's paused clock a waiter woken by the release is granted at the release's
/// instant; a waiter that polled would be granted (virtual) minutes later.
#[cfg(feature = "mem")]
#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_at_once_in_memory() {
    use tokio::time::Instant;

    let client = Client::new(lockwright::MemStore::new());
    let holder = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let waiter = Locker::new(client, hint_only()).unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(30));
    let held = holder.acquire("job", &options).await.unwrap();
    let waiting = {
        let options = options.clone();
        tokio::spawn(async move {
            let guard = waiter.acquire("job", &options).await;
            (Instant::now(), guard)
        })
    };
    // The waiter is refused, subscribes, and asks once more on the subscription's `Missed`.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the lock is held");
    held.release().await.unwrap();
    let released = Instant::now();
    let (granted, guard) = waiting.await.unwrap();
    let guard = guard.unwrap();
    assert!(
        granted.duration_since(released) < Duration::from_secs(1),
        "woken by the release, not by its hourly poll: granted {:?} after it",
        granted.duration_since(released)
    );
    guard.release().await.unwrap();
}

#[cfg(feature = "mongo")]
mod mongo {
    use lockwright::{LockId, LockRequest, LockStore, MongoStore, Ticket};
    use lockwright_testkit::mongo::fixture::{CommandLog, Outcome, fresh_store, options, teardown};
    use mongodb::bson::{doc, oid::ObjectId};

    use super::*;

    /// A store on `on`'s collection with a client of its own (another process, its own
    /// wakes cursor), an `appName` of its own for fail points, and its commands recorded.
    async fn other_process(on: &MongoStore) -> (MongoStore, CommandLog, String) {
        let app = format!("lockwright-wakeups-{}", ObjectId::new().to_hex());
        let mut opts = options().await;
        let log = CommandLog::attach(&mut opts);
        opts.app_name = Some(app.clone());
        let client = mongodb::Client::with_options(opts).unwrap();
        let ns = on.collection().namespace();
        let store = MongoStore::from_collection(client.database(&ns.db).collection(&ns.coll));
        (store, log, app)
    }

    /// The `failCommand` fail point is the server's, one setting for the whole test binary:
    /// the tests that set it take turns.
    static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    fn count(log: &[String], name: &str) -> usize {
        log.iter().filter(|c| *c == name).count()
    }

    /// Waits (as long as a loaded machine may need) until `log` has recorded `n` commands
    /// named `name` since it was last taken; returns them all.
    async fn until_sent(log: &CommandLog, name: &str, n: usize) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..6_000 {
            seen.extend(log.take());
            if count(&seen, name) >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{name} sent {} times in a minute, not {n}: {seen:?}",
            count(&seen, name)
        );
    }

    /// Waits until `n` commands named `name` that `log` recorded since it was last taken
    /// have been answered (leaving them in the log).
    async fn until_answered(log: &CommandLog, name: &str, n: usize) {
        for _ in 0..6_000 {
            if log.answered(name) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} not answered {n} times in a minute: {log:?}");
    }

    /// Waits as [`until_sent`] until `log` has recorded a command named `name` since it was
    /// last taken, but leaves the commands in the log (to take them with their outcomes).
    async fn until_started(log: &CommandLog, name: &str) {
        for _ in 0..6_000 {
            if count(&log.peek(), name) >= 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{name} not sent in a minute: {log:?}");
    }

    /// A holder on `store` that holds `job` (exclusive, 30 s), and a waiter in another
    /// process (its commands in `log`, its `appName` in `app`) that polls once an hour,
    /// keeps places leased for `queue_ttl` (the default if `None`), and waits for `job`:
    /// refused, then its cursor opens (`find`) and its `Missed` makes it ask once more,
    /// refused again, both answered before this returns (a request still in flight at the
    /// release would claim the handed lock itself, not the wake).
    struct Contended {
        holder: Locker<MongoStore>,
        held: lockwright::LockGuard<MongoStore>,
        waiter: Locker<MongoStore>,
        waiting:
            tokio::task::JoinHandle<Result<lockwright::LockGuard<MongoStore>, lockwright::Error>>,
        log: CommandLog,
        app: String,
    }

    async fn contended(store: MongoStore, queue_ttl: Option<Duration>) -> Contended {
        let (theirs, log, app) = other_process(&store).await;
        let holder = Locker::new(Client::new(store), LockerConfig::default()).unwrap();
        let mut config = hint_only();
        if let Some(ttl) = queue_ttl {
            config.queue_ttl = ttl;
        }
        let waiter = Locker::new(Client::new(theirs), config).unwrap();
        let options = LockOptions::exclusive(Duration::from_secs(30));
        let held = holder.acquire("job", &options).await.unwrap();
        let waiting = {
            let (waiter, options) = (waiter.clone(), options.clone());
            tokio::spawn(async move { waiter.acquire("job", &options).await })
        };
        until_answered(&log, "findAndModify", 2).await;
        Contended {
            holder,
            held,
            waiter,
            waiting,
            log,
            app,
        }
    }

    /// A waiter in another process holds the lock after the release without a request of
    /// its own: the release handed its place the lock, and the wake said what. Its backoff
    /// is an hour, so no poll did. Its first renewal would claim it; its release ends it
    /// unclaimed.
    #[tokio::test]
    async fn a_release_wakes_a_waiter_in_another_process() {
        // The kill matrix's harness `wakeups_mongo`: the mutant named by
        // `LOCKWRIGHT_MUTANT`, if any.
        #[cfg(lockwright_mutants)]
        lockwright_testkit::activate_mutant();
        let Contended {
            holder,
            held,
            waiter,
            waiting,
            log,
            ..
        } = contended(fresh_store(None).await, None).await;
        let before = log.take();
        assert_eq!(count(&before, "find"), 1, "one cursor: {before:?}");
        held.release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the release wakes the waiter")
            .unwrap()
            .unwrap();
        let after = log.take();
        assert_eq!(
            count(&after, "findAndModify"),
            0,
            "no request after the release: the wake carried the grant: {after:?}"
        );
        assert_eq!(waiter.stats().handed_by_hint, 1);
        let stored = holder
            .client()
            .status(&lockwright::Filter::new())
            .await
            .unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(
            (guard.status().fence, &guard.status().created_at),
            (stored[0].fence, &stored[0].created_at),
            "the guard says what the store handed"
        );
        guard.release().await.unwrap();
        let after = log.take();
        assert_eq!(count(&after, "findAndModify"), 1, "the release: {after:?}");
        assert!(
            holder
                .client()
                .status(&lockwright::Filter::new())
                .await
                .unwrap()
                .is_empty(),
            "released unclaimed"
        );
        teardown(holder.client().store()).await;
    }

    /// A lock held on a wake is claimed by its holder's first renewal: the store's lease,
    /// the claim lease until then, becomes the lock's TTL, under the same fence.
    #[tokio::test]
    async fn a_lock_held_on_a_wake_is_claimed_by_its_first_renewal() {
        // A claim lease of 10 s: the first renewal, at half of it, finds 5 s left, more
        // than the renew margin (1 s) however loaded the machine.
        let Contended {
            holder,
            held,
            waiter,
            waiting,
            ..
        } = contended(fresh_store(None).await, Some(Duration::from_secs(10))).await;
        held.release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the release wakes the waiter")
            .unwrap()
            .unwrap();
        assert_eq!(waiter.stats().handed_by_hint, 1, "held on the wake");
        let handed = holder
            .client()
            .status(&lockwright::Filter::new())
            .await
            .unwrap();
        for _ in 0..6_000 {
            if waiter.stats().renewals >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(waiter.stats().renewals >= 1, "renewed within a minute");
        let claimed = holder
            .client()
            .status(&lockwright::Filter::new())
            .await
            .unwrap();
        assert_eq!((claimed.len(), handed.len()), (1, 1));
        assert_eq!(claimed[0].fence, handed[0].fence, "the same grant");
        assert!(claimed[0].renewed_at.is_some() && handed[0].renewed_at.is_none());
        assert!(
            claimed[0].expires_at > handed[0].expires_at,
            "claimed for its TTL"
        );
        assert_eq!(waiter.stats().lost, 0);
        guard.release().await.unwrap();
        teardown(holder.client().store()).await;
    }

    /// A wake heard while a request of the waiter's own is in flight is not trusted: the
    /// request's reply decides. Here the waiter's keep-place request is held up in the
    /// server (a fail point blocks it for 3 s) while the release hands its place the lock
    /// and the wake arrives; the request then claims the handed lock, and the waiter holds
    /// it from that reply. The lock its guard holds is the store's, and stays there: a
    /// waiter that trusted the wake at once (the mutant `locker_trusts_wake_in_flight`)
    /// takes the reply that comes after for a grant nobody waits for, and releases the
    /// very lock its guard holds.
    #[tokio::test]
    async fn a_wake_heard_with_a_request_in_flight_waits_for_its_reply() {
        // The kill matrix's harness `wakeups_mongo` (this test alone): the mutant named by
        // `LOCKWRIGHT_MUTANT`, if any.
        #[cfg(lockwright_mutants)]
        lockwright_testkit::activate_mutant();
        let _fail_point = FAIL_POINT.lock().await;
        let store = fresh_store(None).await;
        let admin = store.client().database("admin");
        // A claim lease of 12 s: the held-up request (3 s) claims the handed lock well
        // within it, however loaded the machine. Refused twice, the waiter's next request
        // is the one to keep its place, 6 s later.
        let Contended {
            holder,
            held,
            waiter,
            waiting,
            log,
            app,
        } = contended(store, Some(Duration::from_secs(12))).await;
        let fail = doc! {
            "configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": {
                "failCommands": ["findAndModify"], "blockConnection": true,
                "blockTimeMS": 3_000, "appName": &app,
            },
        };
        admin.run_command(fail).await.unwrap();
        log.take();
        until_started(&log, "findAndModify").await;
        // The request is in flight (held up in the server): the release hands its place the
        // lock, and the wake says so before the request is answered.
        held.release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiting).await;
        until_answered(&log, "findAndModify", 1).await;
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        let guard = guard.expect("granted").unwrap().unwrap();
        // Whatever the waiter did with the reply, it has done by now (the reply came 3 s
        // after the wake); the lock its guard holds must still be in the store.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stored = holder
            .client()
            .status(&lockwright::Filter::new())
            .await
            .unwrap();
        assert_eq!(
            stored.iter().map(|l| l.fence).collect::<Vec<_>>(),
            [guard.status().fence],
            "the store holds the guard's lock (handed {} by a wake)",
            waiter.stats().handed_by_hint
        );
        assert!(
            stored[0].renewed_at.is_some(),
            "claimed by the held-up request"
        );
        assert_eq!(waiter.stats().handed_by_hint, 0, "the wake only woke it");
        assert!(guard.is_held(), "the guard still holds");
        guard.release().await.unwrap();
        teardown(holder.client().store()).await;
    }

    /// A racing waiter keeps no cursor: it is granted by polling on its backoff, and no
    /// `find` (no cursor) was sent by its process.
    #[tokio::test]
    async fn a_racing_waiter_keeps_no_cursor_and_polls() {
        let store = fresh_store(None).await;
        let (theirs, log, _) = other_process(&store).await;
        let holder = Locker::new(Client::new(store), LockerConfig::default()).unwrap();
        let mut config = LockerConfig::default();
        config.max_backoff = Duration::from_millis(200);
        let waiter = Locker::new(Client::new(theirs), config).unwrap();
        let options = LockOptions::exclusive(Duration::from_secs(30));
        let held = holder.acquire("job", &options).await.unwrap();
        let waiting = {
            let (waiter, options) = (waiter.clone(), options.clone().racing());
            tokio::spawn(async move { waiter.acquire("job", &options).await })
        };
        let asked = until_sent(&log, "findAndModify", 3).await;
        held.release().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("polling grants the lock")
            .unwrap()
            .unwrap();
        let mut sent = asked;
        sent.extend(log.take());
        assert_eq!(count(&sent, "find"), 0, "no cursor: {sent:?}");
        assert_eq!(
            guard.status().renewed_at,
            None,
            "granted by its own request"
        );
        guard.release().await.unwrap();
        teardown(holder.client().store()).await;
    }

    /// A fair waiter whose cursor fails and cannot be reopened (a fail point on its
    /// `getMore` and `find`), and which never polls (its backoff is an hour): the
    /// release hands it the lock in the store, and the write that keeps its place (at
    /// `renew_fraction` of `queue_ttl`) claims it.
    #[tokio::test]
    async fn a_fair_waiter_whose_cursor_fails_is_granted_through_its_keep_place_reply() {
        let options = LockOptions::exclusive(Duration::from_secs(30)).fair();
        let (guard, holder) = cursor_fails(hint_only(), options).await;
        assert!(
            guard.status().renewed_at.is_some(),
            "its keep-place write claimed the lock the release handed it: {:?}",
            guard.status()
        );
        guard.release().await.unwrap();
        teardown(holder.client().store()).await;
    }

    /// An uncontended acquire (fair, the default) and its release cost two commands and
    /// open no cursor: the acquire listens only once a refusal gave it a place.
    #[tokio::test]
    async fn an_uncontended_cycle_is_two_commands_and_no_cursor() {
        let store = fresh_store(None).await;
        let (theirs, log, _) = other_process(&store).await;
        let locker = Locker::new(Client::new(theirs), LockerConfig::default()).unwrap();
        let options = LockOptions::exclusive(Duration::from_secs(30));
        // The first command of a store checks its set-up: not part of a cycle.
        locker
            .acquire("warm-up", &options)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        // The Locker's subscription, if it took one, lingers `max_backoff` (1 s): wait past
        // it, so that whatever it sends is in the log.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        log.take();
        for _ in 0..3 {
            let guard = locker.acquire("job", &options).await.unwrap();
            guard.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let sent = log.take();
        assert_eq!(
            sent,
            vec!["findAndModify"; 6],
            "two commands a cycle: {sent:?}"
        );
        locker.shutdown();
        teardown(&store).await;
    }

    /// A fair waiter two places back in a line that does not move stops listening: its
    /// second refusal tells it the line's pace, its process closes its wakes cursor
    /// (`killCursors`) while it still waits, and sends no cursor command while it keeps its
    /// place. When the places ahead leave and the holder releases, the store hands it the
    /// lock, and the write that keeps its place claims it.
    #[tokio::test]
    async fn a_fair_waiter_far_back_keeps_no_cursor_and_is_still_granted() {
        let store = fresh_store(None).await;
        let (theirs, log, _) = other_process(&store).await;
        let client = Client::new(store);
        let options = LockOptions::exclusive(Duration::from_secs(30));
        let store = client.store();
        store
            .lock(&LockRequest::new("job", "holder", &options).unwrap())
            .await
            .unwrap();
        // Two places ahead, leased for a minute, whose waiters never ask again.
        for place in ["p1", "p2"] {
            let ticket = Ticket::new(LockId::new(place).unwrap(), Duration::from_secs(60));
            let request = LockRequest::new("job", place, &options)
                .unwrap()
                .fair(ticket.unwrap());
            assert!(store.lock(&request).await.is_err(), "queued");
        }
        let mut config = LockerConfig::default();
        config.queue_ttl = Duration::from_secs(1);
        let waiter = Locker::new(Client::new(theirs), config).unwrap();
        let waiting = {
            let (waiter, options) = (waiter.clone(), options.clone());
            tokio::spawn(async move { waiter.acquire("job", &options).await })
        };
        let far = until_sent(&log, "killCursors", 1).await;
        assert_eq!(count(&far, "find"), 1, "one cursor, closed: {far:?}");
        assert!(count(&far, "findAndModify") >= 2, "{far:?}");
        // Two more keep-place writes with no cursor: the first 500 ms after the last near
        // keep (within its claim lease), then far back (stale, every 2 s).
        // Both answered before the places ahead leave: a keep still in flight then would
        // find nobody ahead, and the waiter would come near and keep its place fresh before
        // the release.
        until_answered(&log, "findAndModify", 2).await;
        let kept = log.take();
        assert_eq!(
            count(&kept, "find") + count(&kept, "getMore"),
            0,
            "no cursor while far back: {kept:?}"
        );
        for place in ["p1", "p2"] {
            assert!(client.leave_queue("job", place).await.unwrap());
        }
        store.unlock(&LockId::new("holder").unwrap()).await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("its keep-place write takes the lock")
            .unwrap()
            .unwrap();
        assert!(
            guard.status().renewed_at.is_none(),
            "granted by its own write: the release hands nothing to a place kept far back: {:?}",
            guard.status()
        );
        guard.release().await.unwrap();
        teardown(client.store()).await;
    }

    /// The waiter's guard, and the holder's Locker (to drop the collection with).
    /// Where the wakes' capped collections cannot be made (a user without the `create`
    /// privilege; servers that speak MongoDB's protocol without capped collections),
    /// waiting still works: every `create` of the test's processes is refused, no acquire
    /// fails, and three fair waiters are granted in the order they came, by polling.
    #[tokio::test]
    async fn waiters_are_granted_in_order_where_the_wakes_cannot_be_made() {
        let _fail_point = FAIL_POINT.lock().await;
        let store = fresh_store(None).await;
        let admin = store.client().database("admin");
        let app = format!("lockwright-nowakes-{}", ObjectId::new().to_hex());
        // Each store a process of its own, its commands recorded.
        let logs = std::sync::Mutex::new(Vec::new());
        let process = || async {
            let mut opts = options().await;
            logs.lock().unwrap().push(CommandLog::attach(&mut opts));
            opts.app_name = Some(app.clone());
            let client = mongodb::Client::with_options(opts).unwrap();
            let ns = store.collection().namespace();
            MongoStore::from_collection(client.database(&ns.db).collection(&ns.coll))
        };
        // Unauthorized, for this test's processes alone.
        let fail = doc! {
            "configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": { "failCommands": ["create"], "errorCode": 13, "appName": &app },
        };
        admin.run_command(fail).await.unwrap();
        let holder = Locker::new(Client::new(process().await), LockerConfig::default()).unwrap();
        let options = LockOptions::exclusive(Duration::from_secs(30));
        let held = holder.acquire("job", &options).await.unwrap();
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for name in ["first", "second", "third"] {
            let locker =
                Locker::new(Client::new(process().await), LockerConfig::default()).unwrap();
            let (tx, options) = (tx.clone(), options.clone());
            waiters.push(tokio::spawn(async move {
                let guard = locker.acquire("job", &options).await;
                let _ = tx.send(name);
                guard.unwrap().release().await.unwrap();
            }));
            // Each has its place before the next one comes.
            let mut placed = false;
            for _ in 0..6_000 {
                let waiting = store
                    .waiters(&lockwright::Resource::new("job").unwrap())
                    .await;
                if waiting.unwrap().len() == waiters.len() {
                    placed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(placed, "{name} took its place within a minute");
        }
        held.release().await.unwrap();
        let mut granted = Vec::new();
        for waiter in waiters {
            let done = tokio::time::timeout(Duration::from_secs(120), waiter).await;
            done.expect("granted within two minutes, by polling")
                .unwrap();
        }
        while let Ok(name) = order.try_recv() {
            granted.push(name);
        }
        let shards = store
            .client()
            .database(&store.collection().namespace().db)
            .list_collection_names()
            .await
            .unwrap();
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        let creates: Vec<Option<Outcome>> = logs
            .into_inner()
            .unwrap()
            .iter()
            .flat_map(CommandLog::take_outcomes)
            .filter(|(name, _, _)| name == "create")
            .map(|(_, _, outcome)| outcome)
            .collect();
        assert!(
            !creates.is_empty()
                && creates
                    .iter()
                    .all(|o| *o == Some(Outcome::Failed(Some(13)))),
            "the wakes' collections were asked for, and refused: {creates:?}"
        );
        assert_eq!(granted, ["first", "second", "third"], "granted in order");
        let ours = format!("{}.wakes", store.collection().namespace().coll);
        assert!(
            !shards.iter().any(|c| c.starts_with(&ours)),
            "no wake collection of {ours} was made: {shards:?}"
        );
        teardown(&store).await;
    }

    type Granted = (lockwright::LockGuard<MongoStore>, Locker<MongoStore>);

    /// A waiter with `config` waits for a lock held by another process; its wakes cursor
    /// then fails and cannot be reopened, and the holder releases. Returns its guard.
    async fn cursor_fails(config: LockerConfig, options: LockOptions) -> Granted {
        let _fail_point = FAIL_POINT.lock().await;
        let store = fresh_store(None).await;
        let admin = store.client().database("admin");
        let (theirs, log, app) = other_process(&store).await;
        let shard = format!(
            "{}.{}",
            store.collection().namespace().db,
            theirs.wake_collection()
        );
        let holder = Locker::new(Client::new(store), LockerConfig::default()).unwrap();
        let waiter = Locker::new(Client::new(theirs), config).unwrap();
        let held = holder
            .acquire("job", &LockOptions::exclusive(Duration::from_secs(30)))
            .await
            .unwrap();
        let waiting = {
            let (waiter, options) = (waiter.clone(), options.clone());
            tokio::spawn(async move { waiter.acquire("job", &options).await })
        };
        until_sent(&log, "find", 1).await;
        // BadValue: nothing the driver retries; the store reopens and fails. Only on the
        // waiter's wake shard: a `find` the store makes on the lock collection (its set-up
        // check) must not fail the waiter's keep-place writes.
        let fail = doc! {
            "configureFailPoint": "failCommand", "mode": "alwaysOn",
            "data": {
                "failCommands": ["getMore", "find"], "errorCode": 2, "appName": &app,
                "namespace": &shard,
            },
        };
        admin.run_command(fail).await.unwrap();
        // Every cursor command sent from now on fails. A `find` sent after this point
        // reopens the cursor, so the cursor open before it has ended (its next `getMore`
        // failed, or the store closed it), and the reopened one fails too: no cursor can
        // tell the waiter of the release. (Waiting for a failed `getMore` first was racy:
        // the store may close and reopen its cursor between two attempts of the waiter,
        // with no `getMore` in between.)
        log.take();
        until_started(&log, "find").await;
        held.release().await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(60), waiting).await;
        // Every cursor command sent since the fail point was set, taken before it is lifted.
        let cursor: Vec<(String, Option<Outcome>)> = log
            .take_outcomes()
            .into_iter()
            .filter(|(name, _, _)| name == "find" || name == "getMore")
            .map(|(name, _, outcome)| (name, outcome))
            .collect();
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        let guard = granted.expect("polling grants the lock").unwrap().unwrap();
        // The fail point fired (the cursor's reopening was refused with its code), and no
        // cursor command sent after it succeeded: no cursor told the waiter of the release,
        // so its own requests got it the lock.
        assert!(
            cursor.iter().any(|(name, outcome)| name == "find"
                && *outcome == Some(Outcome::Failed(Some(2)))),
            "the fail point refused the cursor's reopening: {cursor:?}"
        );
        assert!(
            !cursor
                .iter()
                .any(|(_, outcome)| *outcome == Some(Outcome::Succeeded)),
            "no cursor command succeeded after the fail point: {cursor:?}"
        );
        (guard, holder)
    }
}
