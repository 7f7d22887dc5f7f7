//! Grants and one-lock operations: retried with the same grant id, and failures whose
//! outcome is unknown reported as such.

use super::*;
use lockwright_engine::Access;

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
        let lock = guarded("xlock", fx.store.lock(&request("r", "a", None)))
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
        let lock = guarded("xlock", fx.store.lock(&request("r", "a", None)))
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
            fx.store
                .lock(&request("s", "b", None).with_access(Access::Shared(Some(limit)))),
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
        let result = guarded("xlock", fx.store.lock(&request("r", "a", None))).await;
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
        // error, twice: the grant is stored but not acknowledged, so the store retries with
        // the same grant id and must recognise its own grant rather than report a refusal.
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
        let lock = guarded("xlock", fx.store.lock(&request("r", "a", None)))
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
            fx.store
                .lock(&request("s", "b", None).with_access(Access::Shared(Some(limit)))),
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
        let result = guarded("xlock", fx.store.lock(&request("r", "a", None))).await;
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
        let result = guarded("xlock", fx.store.lock(&request("r", "a", None))).await;
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
        let lock = guarded("xlock", fx.store.lock(&request("r", "b", None)))
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
        let result = guarded(
            "slock",
            fx.store
                .lock(&request("r", "a", None).with_access(Access::Shared(None))),
        )
        .await;
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
        let result = guarded("xlock", fx.store.lock(&request("r", "a", None))).await;
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
            .lock(&request("r", "a", Some(Duration::from_secs(30))))
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
