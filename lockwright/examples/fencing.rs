//! Fencing tokens end to end: a paused holder's late write is rejected downstream.
//!
//! Worker A takes a lock with a short TTL, checks it holds it, and is then paused (think of
//! a long garbage-collection pause) past the TTL. Worker B takes the lock over and writes
//! with its larger fence. When A wakes up it still sends the write it had prepared; the
//! downstream store remembers the highest fence it accepted and rejects A's stale one.
//!
//! Run: `cargo run --example fencing -p lockwright`

use std::time::Duration;

use lockwright::{Client, Error, LockOptions, Locker, LockerConfig, MemStore};
use lockwright_testkit::{FencedStore, Verdict};

/// Writes `value` to `key` of the downstream store with `fence`, saying what happened.
fn write(
    downstream: &FencedStore<&'static str>,
    key: &'static str,
    fence: u64,
    value: &str,
) -> Result<(), String> {
    match downstream.write(key, fence) {
        Verdict::Rejected { highest } => Err(format!(
            "rejected {value:?}: fence {fence} is older than {highest}"
        )),
        Verdict::Accepted | Verdict::AcceptedStale { .. } => {
            println!("  downstream accepted {value:?} with fence {fence}");
            Ok(())
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let downstream = FencedStore::new();
    let client = Client::with_renew_margin(MemStore::new(), Duration::from_millis(20))?;
    let mut config = LockerConfig::default();
    config.drift_margin = Duration::from_millis(30);
    let locker = Locker::new(client.clone(), config)?;

    // A: a plain lock without renewal, so that its pause costs it the lock.
    let a_id = lockwright::generate_lock_id();
    let ttl = Duration::from_millis(300);
    let a = client
        .xlock(
            "invoice-42",
            &a_id,
            &lockwright::LockDetails::new().ttl(ttl),
        )
        .await?;
    println!("A holds invoice-42 with fence {}", a.fence);
    write(&downstream, "invoice-42", a.fence, "A: draft")
        .map_err(|e| Error::invalid("example", e))?;
    println!("A prepares its next write... and pauses for 500 ms");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Meanwhile the lock expired; B takes it over and writes.
    let b = locker
        .acquire(
            "invoice-42",
            &LockOptions::exclusive(Duration::from_secs(2)),
        )
        .await?;
    println!("B took invoice-42 over with fence {}", b.fence());
    write(&downstream, "invoice-42", b.fence(), "B: final")
        .map_err(|e| Error::invalid("example", e))?;

    // A wakes up and sends the write it prepared before its pause.
    match write(&downstream, "invoice-42", a.fence, "A: stale") {
        Ok(()) => println!("A's stale write got through: fencing failed"),
        Err(why) => println!("A's late write: {why}"),
    }
    b.release().await?;
    Ok(())
}
