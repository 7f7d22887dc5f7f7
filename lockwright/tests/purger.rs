//! The purger loop on paused tokio time, against the in-memory store and a failing store.
#![cfg(feature = "mem")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockwright::{
    Client, Error, Filter, LockId, LockOptions, LockStatus, LockStore, ManualClock, MemStore,
    Purger, Timestamp, generate_lock_id,
};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

#[tokio::test(start_paused = true)]
async fn purges_at_start_and_every_interval_until_stopped() {
    let clock = Arc::new(ManualClock::new(T0));
    let client = Client::new(MemStore::with_clock(Arc::clone(&clock)));
    let ttl = LockOptions::new().ttl(Duration::from_secs(1));
    client.lock("a", generate_lock_id(), &ttl).await.unwrap();
    client
        .lock("live", generate_lock_id(), &LockOptions::new())
        .await
        .unwrap();
    // Past the TTL and the store's takeover grace: abandoned, so purged.
    clock.advance(Duration::from_secs(1) + lockwright::DEFAULT_TAKEOVER_GRACE);

    let handle = Purger::new(client.clone(), Duration::from_secs(30))
        .unwrap()
        .spawn();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        client.status(&Filter::new()).await.unwrap().len(),
        1,
        "first purge at start"
    );

    client.lock("b", generate_lock_id(), &ttl).await.unwrap();
    // Past the TTL and the store's takeover grace: abandoned, so purged.
    clock.advance(Duration::from_secs(1) + lockwright::DEFAULT_TAKEOVER_GRACE);
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(
        client.status(&Filter::new()).await.unwrap().len(),
        2,
        "not yet"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        client.status(&Filter::new()).await.unwrap().len(),
        1,
        "second purge"
    );

    let report = handle.stop().await;
    assert_eq!(report.runs, 2);
    assert_eq!(report.removed, 2);
    assert_eq!(report.failures, 0);
}

#[test]
fn zero_interval_is_rejected() {
    let err = Purger::new(Client::new(MemStore::new()), Duration::ZERO).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                field: "interval",
                ..
            }
        ),
        "{err}"
    );
}

/// A store whose purge removes one lock and then fails, to check nothing is lost.
struct HalfBrokenStore {
    inner: MemStore,
    purges: AtomicU32,
}

impl lockwright_testkit::Forward for HalfBrokenStore {
    type Inner = MemStore;

    fn inner(&self) -> &MemStore {
        &self.inner
    }

    async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.purges.fetch_add(1, Ordering::SeqCst);
        let removed = self.inner.purge().await?;
        Err(Error::PurgeIncomplete {
            removed,
            source: Box::new(Error::backend(
                "purge",
                std::io::Error::other("connection reset"),
            )),
        })
    }
}

lockwright_testkit::forward_lock_store!(HalfBrokenStore);

#[tokio::test(start_paused = true)]
async fn failures_are_counted_reported_and_retried() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = HalfBrokenStore {
        inner: MemStore::with_clock(Arc::clone(&clock)),
        purges: AtomicU32::new(0),
    };
    let client = Client::new(store);
    let ttl = LockOptions::new().ttl(Duration::from_secs(1));
    client.lock("a", generate_lock_id(), &ttl).await.unwrap();
    // Past the TTL and the store's takeover grace: abandoned, so purged.
    clock.advance(Duration::from_secs(1) + lockwright::DEFAULT_TAKEOVER_GRACE);

    let handle = Purger::new(client.clone(), Duration::from_secs(5))
        .unwrap()
        .spawn();
    tokio::time::sleep(Duration::from_millis(5_001)).await;
    let report = handle.stop().await;
    assert_eq!(report.runs, 2);
    assert_eq!(report.failures, 2, "the loop goes on after a failure");
    assert_eq!(report.removed, 1, "what a failed purge removed is counted");
    let last = report.last_error.unwrap();
    assert!(
        last.contains("connection reset"),
        "the cause is kept: {last}"
    );
    assert_eq!(client.store().purges.load(Ordering::SeqCst), 2);
}

#[test]
fn generated_lock_ids_are_valid_and_distinct() {
    let ids: std::collections::BTreeSet<String> = (0..1000)
        .map(|_| generate_lock_id().as_str().to_owned())
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(
        ids.iter()
            .all(|i| i.len() == 32 && i.chars().all(|c| c.is_ascii_hexdigit()))
    );
    assert!(LockId::new(ids.iter().next().unwrap().as_str()).is_ok());
}

/// Dropping the handle stops the purger: it used to run on for good.
#[tokio::test(start_paused = true)]
async fn dropping_the_handle_stops_the_purger() {
    let store = HalfBrokenStore {
        inner: MemStore::new(),
        purges: AtomicU32::new(0),
    };
    let client = Client::new(store);
    let handle = Purger::new(client.clone(), Duration::from_secs(1))
        .unwrap()
        .spawn();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let purges = || client.store().purges.load(Ordering::SeqCst);
    assert_eq!(purges(), 2);
    drop(handle);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(purges(), 2, "no purge after the handle was dropped");
}
