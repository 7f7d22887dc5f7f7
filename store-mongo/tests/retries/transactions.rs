//! Group transactions (unlock, renew, purge) and reads (status), retried on transient
//! errors and unknown commit results within the window.

use super::*;

pub(crate) fn transient() -> Document {
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
            .lock(&request("r", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .lock(&request("r2", "a", Some(Duration::from_secs(30))))
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
            .lock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .lock(&request("r2", "a", Some(Duration::from_secs(300))))
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

pub(crate) fn unknown_commit() -> Document {
    doc! { "errorCode": MAX_TIME_MS_EXPIRED }
}

#[tokio::test]
async fn unlock_and_renew_retry_an_unknown_commit_result() {
    run("commit-unknown", None, |fx| async move {
        let granted = fx
            .store
            .lock(&request("r", "a", Some(Duration::from_secs(30))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .lock(&request("r2", "a", Some(Duration::from_secs(30))))
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
            .lock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .lock(&request("r2", "a", Some(Duration::from_secs(300))))
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
            .lock(&request("r", "a", Some(Duration::from_secs(300))))
            .await
            .unwrap();
        // A group of two locks: unlock and renew take the transaction.
        fx.store
            .lock(&request("r2", "a", Some(Duration::from_secs(300))))
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
        let granted = guarded("xlock", fx.store.lock(&request("r", "b", None))).await;
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
                .lock(&request(
                    &format!("r{i}"),
                    &format!("g{i}"),
                    Some(Duration::from_secs(1)),
                ))
                .await
                .unwrap();
        }
        fx.store
            .lock(&request("kept", "k", Some(Duration::from_secs(600))))
            .await
            .unwrap();
        // Past the 1 s TTLs and the store's takeover grace: abandoned.
        clock.advance(Duration::from_secs(2) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);

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
