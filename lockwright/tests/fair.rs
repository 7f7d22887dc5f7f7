//! Fair acquires through the `Locker`, in memory on tokio's paused clock (virtual time, so
//! the waits below are exact and no test depends on the machine's speed): waiters are
//! granted in the order they came, and a writer among readers whose holds overlap is
//! granted once the readers ahead of it are done, where an unfair writer is never granted.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]
#![cfg(feature = "mem")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright::{Client, LockOptions, Locker, LockerConfig, MemStore};
use tokio::time::{Instant, sleep, timeout};

const HOLD: Duration = Duration::from_millis(20);

/// Readers that keep a shared lock on "doc" held by somebody: each holds for `HOLD` and asks
/// again at once, and they start `HOLD / 8` apart, so their holds overlap.
fn overlapping_readers(client: &Client<MemStore>, n: usize) {
    for i in 0..n {
        let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
        tokio::spawn(async move {
            sleep(HOLD / 8 * u32::try_from(i).unwrap()).await;
            let options = LockOptions::shared(None, Duration::from_secs(30));
            loop {
                let guard = locker.acquire("doc", &options).await.unwrap();
                sleep(HOLD).await;
                guard.release().await.unwrap();
            }
        });
    }
}

/// How long a writer (fair or not) waits for "doc" among 8 overlapping readers, giving up
/// after `patience`.
async fn writer_wait(fair: bool, patience: Duration) -> Option<Duration> {
    let client = Client::new(MemStore::new());
    overlapping_readers(&client, 8);
    sleep(HOLD * 3).await; // the readers are in full swing
    let writer = Locker::new(client, LockerConfig::default()).unwrap();
    let mut options = LockOptions::exclusive(Duration::from_secs(30));
    if !fair {
        options = options.racing();
    }
    let asked = Instant::now();
    let guard = timeout(patience, writer.acquire("doc", &options))
        .await
        .ok()?;
    let waited = asked.elapsed();
    guard.unwrap().release().await.unwrap();
    Some(waited)
}

#[tokio::test(start_paused = true)]
async fn a_fair_writer_among_overlapping_readers_is_granted_after_one_hold() {
    let waited = writer_wait(true, Duration::from_secs(10))
        .await
        .expect("the fair writer is granted");
    // The readers holding when it came finish within one hold; none started after it.
    assert!(
        waited <= HOLD + Duration::from_millis(5),
        "granted {waited:?} after asking, more than one reader hold ({HOLD:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unfair_writer_among_overlapping_readers_is_starved() {
    // The same run without fairness: what the fair writer's test guards against.
    assert_eq!(writer_wait(false, Duration::from_secs(10)).await, None);
}

#[tokio::test(start_paused = true)]
async fn fair_waiters_are_granted_in_the_order_they_came() {
    let client = Client::new(MemStore::new());
    let holder = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(30)).fair();
    let held = holder.acquire("job", &options).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
        let (options, order) = (options.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = locker.acquire("job", &options).await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(1)).await;
            guard.release().await.unwrap();
        }));
        // Each takes its place before the next comes.
        sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(client.waiters("job").await.unwrap().len(), 6);
    held.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
    assert!(client.waiters("job").await.unwrap().is_empty());
}
