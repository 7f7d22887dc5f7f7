//! The store's own retries against a real server (`MONGODB_URI`), driven deterministically
//! with MongoDB's `failCommand` fail point: grants retried with the same grant id, group
//! transactions retried on transient errors and unknown commit results, both bounded by
//! `RETRY_WINDOW`, and failures whose outcome may have been applied reported as such.
//!
//! The server must run with `--setParameter enableTestCommands=1` (scripts/mongod.sh starts
//! it so). A server has one `failCommand` configuration at a time, so the tests here take
//! turns (`FAIL_POINT`); each restricts the fail point to its own client through a unique
//! `appName`, so that other clients and test binaries are unaffected, and always switches it
//! off again, also when the test fails.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{FutureExt, TryStreamExt};
use lockwright_engine::{
    Error, Filter, LockStatus, LockStore, ManualClock, Mode, SharedLimit, Timestamp,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{fresh_store_on, id, options, request, teardown, ttl};
use mongodb::Client;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;

/// How long any one store call may take before the test calls it hung. Generous on
/// purpose: the store gives up after `RETRY_WINDOW` plus one attempt; no tighter wall time
/// is asserted.
const HANG_GUARD: Duration = Duration::from_secs(60);

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Held while a test may have the server's one `failCommand` configuration set.
static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Server codes used to make commands fail.
const SHUTDOWN_IN_PROGRESS: i32 = 91; // retryable write error
const MAX_TIME_MS_EXPIRED: i32 = 50; // an unknown commit result
const WRITE_CONFLICT: i32 = 112;
const OPERATION_FAILED: i32 = 96; // neither retryable nor transient
const WRITE_CONCERN_FAILED: i32 = 64; // a write concern timeout

/// `f`, or a panic when it takes longer than [`HANG_GUARD`].
async fn guarded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} still running after {HANG_GUARD:?}: the retries do not end"),
    }
}

/// An error and its sources, as one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// Asserts a `Backend` error of `op`; returns its message with all sources.
fn backend<T: std::fmt::Debug>(op: &str, result: Result<T, Error>) -> String {
    match result {
        Err(e @ Error::Backend { operation, .. }) if operation == op => chain(&e),
        other => panic!("expected a Backend error of {op}, got {other:?}"),
    }
}

/// Asserts a `Backend` error of `op` that says its outcome is unknown.
fn outcome_unknown<T: std::fmt::Debug>(op: &str, result: Result<T, Error>) {
    let message = backend(op, result);
    assert!(
        message.contains("outcome is unknown"),
        "{op}: the error must say that the outcome is unknown: {message}"
    );
}

/// The names of the commands a client starts, in order.
#[derive(Clone, Default)]
struct Commands(Arc<Mutex<Vec<String>>>);

impl Commands {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn count(commands: &[String], name: &str) -> usize {
    commands.iter().filter(|c| *c == name).count()
}

/// A store on a fresh collection whose client carries a unique `appName`, and the commands
/// that client starts.
struct Fixture {
    store: MongoStore,
    commands: Commands,
    app: String,
}

impl Fixture {
    async fn new(test: &str, clock: Option<Arc<ManualClock>>) -> Fixture {
        let app = format!("lockwright-retries-{test}-{}", ObjectId::new().to_hex());
        let commands = Commands::default();
        let sink = commands.clone();
        let mut opts = options().await;
        opts.app_name = Some(app.clone());
        // After an injected "node is shutting down" error the driver marks the server
        // unknown until its monitor hears from it again; with the default 10 s heartbeat
        // that can outlast server selection. The server's state never changed, so let the
        // monitor notice soon.
        opts.heartbeat_freq = Some(Duration::from_millis(500));
        opts.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
            if let CommandEvent::Started(s) = e {
                sink.0.lock().unwrap().push(s.command_name);
            }
        }));
        let client = Client::with_options(opts).unwrap();
        let store = fresh_store_on(&client, clock).await;
        // The set-up check (hello, listIndexes) runs once, here, so that the commands
        // counted later are the operations' own.
        store.status(&Filter::new()).await.unwrap();
        Fixture {
            store,
            commands,
            app,
        }
    }

    async fn configure(&self, mode: Bson, data: Option<Document>) {
        let mut command = doc! { "configureFailPoint": "failCommand", "mode": mode };
        if let Some(mut data) = data {
            data.insert("appName", self.app.clone());
            command.insert("data", data);
        }
        self.store
            .client()
            .database("admin")
            .run_command(command)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "configureFailPoint failCommand failed (does the server run with \
                     --setParameter enableTestCommands=1?): {e}"
                )
            });
    }

    /// Makes `commands` of this test's client fail as `data` says, `mode` times; forgets
    /// the commands started so far.
    async fn fail(&self, mode: Bson, commands: &[&str], data: Document) {
        let mut data = data;
        data.insert("failCommands", commands.to_vec());
        self.configure(mode, Some(data)).await;
        self.commands.take();
    }

    async fn off(&self) {
        self.configure(Bson::from("off"), None).await;
    }

    /// Aborts, on the server, the transactions this test's client left open: one whose
    /// commit never reached the server stays open (holding its writes) until the server
    /// reaps it after `transactionLifetimeLimitSeconds` (60 s by default), and the driver
    /// does not abort a transaction once its commit was attempted. Returns how many
    /// sessions were killed.
    async fn kill_open_transactions(&self) -> usize {
        let admin = self.store.client().database("admin");
        let ops: Vec<Document> = admin
            .aggregate([
                doc! { "$currentOp": { "idleSessions": true } },
                doc! { "$match": { "appName": &self.app, "transaction": { "$exists": true } } },
            ])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let sessions: Vec<Bson> = ops
            .iter()
            .filter_map(|op| op.get_document("lsid").ok())
            .map(|lsid| Bson::Document(doc! { "id": lsid.get("id").unwrap().clone() }))
            .collect();
        if !sessions.is_empty() {
            admin
                .run_command(doc! { "killSessions": sessions.clone() })
                .await
                .unwrap();
        }
        sessions.len()
    }

    async fn status(&self) -> Vec<LockStatus> {
        guarded("status", self.store.status(&Filter::new()))
            .await
            .unwrap()
    }

    /// The stored document of `resource`.
    async fn document(&self, resource: &str) -> Document {
        self.store
            .collection()
            .find_one(doc! { "resource": resource })
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no document for {resource}"))
    }
}

fn times(n: i32) -> Bson {
    Bson::Document(doc! { "times": n })
}

fn always_on() -> Bson {
    Bson::from("alwaysOn")
}

/// Runs `body` on a fresh fixture while holding [`FAIL_POINT`]; afterwards, whatever
/// happened, switches the fail point off and drops the collection. When the body passed,
/// also checks that the store is not stuck: `status` and `purge` still work.
async fn run<F, Fut>(test: &str, clock: Option<Arc<ManualClock>>, body: F)
where
    F: FnOnce(Arc<Fixture>) -> Fut,
    Fut: Future<Output = ()>,
{
    let _turn = FAIL_POINT.lock().await;
    let fx = Arc::new(Fixture::new(test, clock).await);
    let outcome = AssertUnwindSafe(body(Arc::clone(&fx))).catch_unwind().await;
    fx.off().await;
    if outcome.is_ok() {
        guarded("status", fx.store.status(&Filter::new()))
            .await
            .unwrap_or_else(|e| panic!("status after the fail point was switched off: {e:?}"));
        guarded("purge", fx.store.purge())
            .await
            .unwrap_or_else(|e| panic!("purge after the fail point was switched off: {e:?}"));
    }
    // Otherwise the collection drop waits for the server to reap them.
    fx.kill_open_transactions().await;
    teardown(&fx.store).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Asserts that `resource`'s document holds exactly one lock, `lock_id`'s, in `mode`.
async fn holds_exactly(fx: &Fixture, resource: &str, lock_id: &str, mode: Mode) {
    let doc = fx.document(resource).await;
    let exclusive = doc.get_document("exclusive").unwrap();
    let shared = doc.get_document("shared").unwrap();
    let shared_ids: Vec<&str> = shared
        .get_array("locks")
        .unwrap()
        .iter()
        .map(|l| l.as_document().unwrap().get_str("lockId").unwrap())
        .collect();
    match mode {
        Mode::Exclusive => {
            assert_eq!(exclusive.get_bool("acquired"), Ok(true), "{doc}");
            assert_eq!(exclusive.get_str("lockId"), Ok(lock_id), "{doc}");
            assert!(shared_ids.is_empty(), "{doc}");
        }
        Mode::Shared => {
            assert_eq!(exclusive.get_bool("acquired"), Ok(false), "{doc}");
            assert_eq!(shared_ids, [lock_id], "{doc}");
            let n = match shared.get("count") {
                Some(Bson::Int32(n)) => i64::from(*n),
                Some(Bson::Int64(n)) => *n,
                other => panic!("shared.count: {other:?} in {doc}"),
            };
            assert_eq!(n, 1, "{doc}");
        }
    }
    let held: Vec<(String, String)> = fx
        .status()
        .await
        .into_iter()
        .filter(|l| l.resource.as_str() == resource)
        .map(|l| (l.lock_id.as_str().to_string(), format!("{:?}", l.mode)))
        .collect();
    assert_eq!(
        held,
        [(lock_id.to_string(), format!("{mode:?}"))],
        "status of {resource}"
    );
}

// ------------------------------------------------------------------ grants ---

#[tokio::test]
async fn grant_is_retried_after_closed_connections() {
    run("grant-closed", None, |fx| async move {
        // The driver retries the findAndModify once by itself; the second failure is
        // the store's to retry.
        fx.fail(
            times(2),
            &["findAndModify"],
            doc! { "closeConnection": true },
        )
        .await;
        let lock = guarded("xlock", fx.store.xlock(&request("r", "a", None)))
            .await
            .unwrap();
        assert_eq!(
            (lock.resource.as_str(), lock.lock_id.as_str(), lock.mode),
            ("r", "a", Mode::Exclusive)
        );
        assert_eq!(
            count(&fx.commands.take(), "findAndModify"),
            3,
            "two failed attempts (the driver's and its retry), then the store's retry"
        );
        holds_exactly(&fx, "r", "a", Mode::Exclusive).await;
        assert_eq!(
            fx.document("r").await.get_i64("lastFence").unwrap(),
            i64::try_from(lock.fence).unwrap(),
            "one grant, one fence"
        );
    })
    .await;
}

#[tokio::test]
async fn grant_is_retried_after_shutdown_in_progress() {
    run("grant-shutdown", None, |fx| async move {
        let shutdown = doc! { "errorCode": SHUTDOWN_IN_PROGRESS };
        fx.fail(times(2), &["findAndModify"], shutdown.clone())
            .await;
        let lock = guarded("xlock", fx.store.xlock(&request("r", "a", None)))
            .await
            .unwrap();
        assert_eq!(
            (lock.resource.as_str(), lock.lock_id.as_str(), lock.mode),
            ("r", "a", Mode::Exclusive)
        );
        assert_eq!(count(&fx.commands.take(), "findAndModify"), 3);
        holds_exactly(&fx, "r", "a", Mode::Exclusive).await;

        fx.fail(times(2), &["findAndModify"], shutdown).await;
        let limit = SharedLimit::new(1).unwrap();
        let lock = guarded(
            "slock",
            fx.store.slock(&request("s", "b", None), Some(limit)),
        )
        .await
        .unwrap();
        assert_eq!(
            (lock.resource.as_str(), lock.lock_id.as_str(), lock.mode),
            ("s", "b", Mode::Shared)
        );
        assert_eq!(count(&fx.commands.take(), "findAndModify"), 3);
        holds_exactly(&fx, "s", "b", Mode::Shared).await;
    })
    .await;
}

/// Once an attempt failed in a way that may have been applied, later failures that are as
/// retryable are still retried within `RETRY_WINDOW` (a regression: the store used to give
/// up at the next one). Here the store's second attempt fails like the first (the driver's
/// retry included), and the third succeeds.
#[tokio::test]
async fn grant_keeps_retrying_within_the_window_after_an_unknown_outcome() {
    run("grant-closed-4", None, |fx| async move {
        fx.fail(
            times(4),
            &["findAndModify"],
            doc! { "closeConnection": true },
        )
        .await;
        let result = guarded("xlock", fx.store.xlock(&request("r", "a", None))).await;
        let attempts = count(&fx.commands.take(), "findAndModify");
        let lock = result
            .unwrap_or_else(|e| panic!("xlock after {attempts} findAndModify: {}", chain(&e)));
        assert_eq!(lock.lock_id.as_str(), "a");
        assert_eq!(attempts, 5);
        holds_exactly(&fx, "r", "a", Mode::Exclusive).await;
    })
    .await;
}

/// Needs mongodb >= 3.8.1: 3.6.0 dropped the `writeConcernError` of a `findAndModify` reply
/// and reported the write as acknowledged (RUST-2479), so the store never saw the failure.
#[tokio::test]
async fn grant_applied_but_unacknowledged_is_still_granted() {
    run("grant-applied", None, |fx| async move {
        // The server runs the findAndModify and then reports a retryable write concern
        // error: the grant is stored but not acknowledged, twice (the driver's retry is
        // answered from the server's record of the first), so the store retries with the
        // same grant id and must recognise its own grant rather than report a refusal.
        fx.fail(
            times(2),
            &["findAndModify"],
            doc! {
                "writeConcernError": {
                    "code": SHUTDOWN_IN_PROGRESS,
                    "errmsg": "injected by the failCommand fail point",
                },
            },
        )
        .await;
        let lock = guarded("xlock", fx.store.xlock(&request("r", "a", None)))
            .await
            .unwrap();
        assert_eq!(
            (lock.resource.as_str(), lock.lock_id.as_str(), lock.mode),
            ("r", "a", Mode::Exclusive)
        );
        assert_eq!(count(&fx.commands.take(), "findAndModify"), 3);
        holds_exactly(&fx, "r", "a", Mode::Exclusive).await;

        // The same with a shared lock under a limit of one: the retry must not count the
        // request's own applied grant against the limit.
        fx.fail(
            times(2),
            &["findAndModify"],
            doc! {
                "writeConcernError": {
                    "code": SHUTDOWN_IN_PROGRESS,
                    "errmsg": "injected by the failCommand fail point",
                },
            },
        )
        .await;
        let limit = SharedLimit::new(1).unwrap();
        let lock = guarded(
            "slock",
            fx.store.slock(&request("s", "b", None), Some(limit)),
        )
        .await
        .unwrap();
        assert_eq!((lock.lock_id.as_str(), lock.mode), ("b", Mode::Shared));
        holds_exactly(&fx, "s", "b", Mode::Shared).await;
    })
    .await;
}

/// A grant applied but not acknowledged by a majority (`WriteConcernFailed`, as after a
/// `wtimeout`) is not known to survive a failover, so it must not be reported as granted.
/// Needs mongodb >= 3.8.1, as `grant_applied_but_unacknowledged_is_still_granted`.
#[tokio::test]
async fn grant_failing_its_write_concern_is_not_reported_granted() {
    run("grant-wce", None, |fx| async move {
        fx.fail(
            times(1),
            &["findAndModify"],
            doc! {
                "writeConcernError": {
                    "code": WRITE_CONCERN_FAILED,
                    "errmsg": "injected by the failCommand fail point",
                    "errInfo": { "wtimeout": true },
                },
            },
        )
        .await;
        let result = guarded("xlock", fx.store.xlock(&request("r", "a", None))).await;
        outcome_unknown("xlock", result);
    })
    .await;
}

#[tokio::test]
async fn grant_failing_for_good_on_closed_connections_is_an_unknown_outcome() {
    run("grant-closed-always", None, |fx| async move {
        fx.fail(
            always_on(),
            &["findAndModify"],
            doc! { "closeConnection": true },
        )
        .await;
        let result = guarded("xlock", fx.store.xlock(&request("r", "a", None))).await;
        outcome_unknown("xlock", result);
        let attempts = count(&fx.commands.take(), "findAndModify");
        assert!(
            attempts > 2,
            "the store retried beyond the driver's one retry ({attempts} attempts)"
        );
        fx.off().await;
        // The connection was closed before the command ran: nothing was granted, and the
        // resource is free.
        assert_eq!(fx.status().await, []);
        let lock = guarded("xlock", fx.store.xlock(&request("r", "b", None)))
            .await
            .unwrap();
        assert_eq!(lock.lock_id.as_str(), "b");
    })
    .await;
}

#[tokio::test]
async fn grant_failing_for_good_on_shutdown_is_an_unknown_outcome() {
    run("grant-shutdown-always", None, |fx| async move {
        fx.fail(
            always_on(),
            &["findAndModify"],
            doc! { "errorCode": SHUTDOWN_IN_PROGRESS },
        )
        .await;
        let result = guarded("slock", fx.store.slock(&request("r", "a", None), None)).await;
        outcome_unknown("slock", result);
        assert!(count(&fx.commands.take(), "findAndModify") > 2);
    })
    .await;
}

#[tokio::test]
async fn grant_is_not_retried_after_a_plain_server_error() {
    run("grant-plain", None, |fx| async move {
        fx.fail(
            times(1),
            &["findAndModify"],
            doc! { "errorCode": OPERATION_FAILED },
        )
        .await;
        let result = guarded("xlock", fx.store.xlock(&request("r", "a", None))).await;
        let message = backend("xlock", result);
        assert!(
            !message.contains("outcome is unknown"),
            "a command the server refused to run was not applied: {message}"
        );
        assert_eq!(fx.commands.take(), ["findAndModify"], "not retried");
        assert_eq!(fx.status().await, []);
    })
    .await;
}

// ---------------------------------------------------------------- one lock ---

/// A renewal or release of one lock is one `findAndModify`, retried like a grant: applying
/// it twice is the same as once.
#[tokio::test]
async fn one_lock_operations_are_retried_after_shutdown_in_progress() {
    run("one-lock-shutdown", None, |fx| async move {
        let granted = fx
            .store
            .xlock(&request("r", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();
        let shutdown = doc! { "errorCode": SHUTDOWN_IN_PROGRESS };
        fx.fail(times(2), &["findAndModify"], shutdown.clone())
            .await;
        let renewed = guarded(
            "renew_one",
            fx.store
                .renew_one(&granted.renewal(ttl(600)), Duration::ZERO),
        )
        .await
        .unwrap();
        assert!(renewed.expires_at > granted.expires_at);
        assert_eq!(count(&fx.commands.take(), "findAndModify"), 3);

        fx.fail(times(2), &["findAndModify"], shutdown).await;
        let released = guarded(
            "unlock_one",
            fx.store.unlock_one(&granted.resource, &granted.lock_id),
        )
        .await
        .unwrap();
        // The driver's own retry may have applied it first: then it is already gone.
        assert!(released.is_none_or(|l| l.lock_id.as_str() == "a"));
        assert_eq!(count(&fx.commands.take(), "findAndModify"), 3);
        assert_eq!(fx.status().await, []);
    })
    .await;
}

// ------------------------------------------------------------ transactions ---

fn transient() -> Document {
    doc! {
        "errorCode": WRITE_CONFLICT,
        "errorLabels": ["TransientTransactionError"],
    }
}

#[tokio::test]
async fn unlock_and_renew_retry_a_transient_error() {
    run("txn-transient", None, |fx| async move {
        let granted = fx
            .store
            .xlock(&request("r", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .xlock(&request("r2", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();

        fx.fail(times(1), &["aggregate"], transient()).await;
        let renewed = guarded("renew", fx.store.renew(&id("a"), ttl(600), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(renewed.len(), 2);
        assert!(
            renewed[0].expires_at > granted.expires_at,
            "renewed: {:?} -> {:?}",
            granted.expires_at,
            renewed[0].expires_at
        );
        let commands = fx.commands.take();
        assert_eq!(count(&commands, "aggregate"), 2, "{commands:?}");
        assert_eq!(count(&commands, "commitTransaction"), 1, "{commands:?}");

        fx.fail(times(1), &["aggregate"], transient()).await;
        let released = guarded("unlock", fx.store.unlock(&id("a"))).await.unwrap();
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].lock_id.as_str(), "a");
        let commands = fx.commands.take();
        assert_eq!(count(&commands, "aggregate"), 2, "{commands:?}");
        assert_eq!(count(&commands, "commitTransaction"), 1, "{commands:?}");
        assert_eq!(fx.status().await, []);
    })
    .await;
}

#[tokio::test]
async fn unlock_and_renew_give_up_on_transient_errors_within_the_window() {
    run("txn-transient-always", None, |fx| async move {
        let granted = fx
            .store
            .xlock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .xlock(&request("r2", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        fx.fail(always_on(), &["aggregate"], transient()).await;

        let result = guarded("unlock", fx.store.unlock(&id("a"))).await;
        let message = backend("unlock", result);
        assert!(message.contains("TransientTransactionError") || message.contains("112"));
        let commands = fx.commands.take();
        assert!(count(&commands, "aggregate") > 1, "retried: {commands:?}");
        assert_eq!(count(&commands, "commitTransaction"), 0, "{commands:?}");

        let result = guarded("renew", fx.store.renew(&id("a"), ttl(600), Duration::ZERO)).await;
        backend("renew", result);
        assert!(count(&fx.commands.take(), "aggregate") > 1);

        fx.off().await;
        // Nothing was written: the lock is held as granted, and can be released.
        let held = fx.status().await;
        assert_eq!(held.len(), 2);
        assert_eq!(
            (held[0].lock_id.as_str(), held[0].expires_at),
            ("a", granted.expires_at)
        );
        let released = guarded("unlock", fx.store.unlock(&id("a"))).await.unwrap();
        assert_eq!(released.len(), 2);
    })
    .await;
}

fn unknown_commit() -> Document {
    doc! { "errorCode": MAX_TIME_MS_EXPIRED }
}

#[tokio::test]
async fn unlock_and_renew_retry_an_unknown_commit_result() {
    run("commit-unknown", None, |fx| async move {
        let granted = fx
            .store
            .xlock(&request("r", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .xlock(&request("r2", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();

        fx.fail(times(1), &["commitTransaction"], unknown_commit())
            .await;
        let renewed = guarded("renew", fx.store.renew(&id("a"), ttl(600), Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(renewed.len(), 2);
        let commands = fx.commands.take();
        assert_eq!(count(&commands, "commitTransaction"), 2, "{commands:?}");
        assert_eq!(count(&commands, "aggregate"), 1, "{commands:?}");
        let held = fx.status().await;
        assert_eq!(held.len(), 2);
        assert!(
            held[0].expires_at > granted.expires_at,
            "the renewal committed"
        );

        fx.fail(times(1), &["commitTransaction"], unknown_commit())
            .await;
        let released = guarded("unlock", fx.store.unlock(&id("a"))).await.unwrap();
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].lock_id.as_str(), "a");
        let commands = fx.commands.take();
        assert_eq!(count(&commands, "commitTransaction"), 2, "{commands:?}");
        assert_eq!(count(&commands, "aggregate"), 1, "{commands:?}");
        assert_eq!(fx.status().await, [], "the unlock committed");
    })
    .await;
}

#[tokio::test]
async fn unlock_with_a_commit_result_unknown_for_good_says_so() {
    run("commit-unknown-always", None, |fx| async move {
        fx.store
            .xlock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .xlock(&request("r2", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        fx.fail(always_on(), &["commitTransaction"], unknown_commit())
            .await;
        let result = guarded("unlock", fx.store.unlock(&id("a"))).await;
        outcome_unknown("unlock", result);
        let commands = fx.commands.take();
        assert!(
            count(&commands, "commitTransaction") > 1,
            "the commit was retried: {commands:?}"
        );
        fx.off().await;
        // The failing commits never ran: the lock is still held.
        let held = fx.status().await;
        assert_eq!(held.len(), 2, "{held:?}");
        // The store ended their transaction on the server when it gave up (see
        // `group_is_free_again_soon_after_a_commit_given_up_as_unknown`).
        assert_eq!(fx.kill_open_transactions().await, 0);
        let released = guarded("unlock", fx.store.unlock(&id("a"))).await.unwrap();
        assert_eq!(released.len(), 2);
        assert_eq!(fx.status().await, []);
    })
    .await;
}

/// When the store gives up on a commit whose result is unknown while the server is up (the
/// commit never ran), the driver never aborts a transaction once its commit was attempted,
/// so the transaction would stay open on the server with its writes until the server reaps
/// it (`transactionLifetimeLimitSeconds`, 60 s by default), and every unlock, renew or purge
/// batch touching the group's documents would fail with `WriteConflict` meanwhile. The store
/// kills the session when it gives up, which ends it at once.
#[tokio::test]
async fn group_is_free_again_soon_after_a_commit_given_up_as_unknown() {
    run("commit-unknown-orphan", None, |fx| async move {
        fx.store
            .xlock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .xlock(&request("r2", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        fx.fail(always_on(), &["commitTransaction"], unknown_commit())
            .await;
        outcome_unknown("unlock", guarded("unlock", fx.store.unlock(&id("a"))).await);
        fx.off().await;
        let started = std::time::Instant::now();
        let released = guarded("unlock", fx.store.unlock(&id("a"))).await;
        let took = started.elapsed();
        assert!(
            released.as_ref().is_ok_and(|r| r.len() == 2),
            "unlock after the fail point was switched off, {took:?}: {released:?}"
        );
        let started = std::time::Instant::now();
        let granted = guarded("xlock", fx.store.xlock(&request("r", "b", None))).await;
        let took = started.elapsed();
        assert!(granted.is_ok(), "xlock, {took:?}: {granted:?}");
    })
    .await;
}

// ------------------------------------------------------------ purge, status ---

#[tokio::test]
async fn purge_and_status_work_again_after_fail_points() {
    let clock = Arc::new(ManualClock::new(T0));
    run("purge-status", Some(Arc::clone(&clock)), |fx| async move {
        for i in 0..3 {
            fx.store
                .xlock(&request(
                    &format!("r{i}"),
                    &format!("g{i}"),
                    Some(Duration::from_secs(1)),
                ))
                .await
                .unwrap();
        }
        fx.store
            .xlock(&request("kept", "k", Some(Duration::from_secs(600))))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));

        // Reads that fail for good are errors, not empty answers.
        fx.fail(always_on(), &["aggregate", "find"], transient())
            .await;
        backend("purge", guarded("purge", fx.store.purge()).await);
        backend(
            "status",
            guarded("status", fx.store.status(&Filter::new())).await,
        );
        fx.off().await;
        assert_eq!(fx.status().await.len(), 4);

        // A purge batch whose commit result is unknown once is committed by the retry.
        fx.fail(times(1), &["commitTransaction"], unknown_commit())
            .await;
        let mut removed: Vec<String> = guarded("purge", fx.store.purge())
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.lock_id.as_str().to_string())
            .collect();
        removed.sort();
        assert_eq!(removed, ["g0", "g1", "g2"]);
        assert_eq!(count(&fx.commands.take(), "commitTransaction"), 2);
        fx.off().await;
        let held = fx.status().await;
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].lock_id.as_str(), "k");
    })
    .await;
}
