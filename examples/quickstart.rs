//! Two workers contend for one resource on the embedded backend (no server needed).
//!
//! Worker A takes the lock, renews it while it works, and releases it; worker B keeps
//! trying and gets the lock once A is done, with a larger fence. Then B "crashes" while
//! holding the lock, and A takes it over once B's TTL and the store's takeover grace (2 s)
//! have run out.
//!
//! Run: `cargo run --example quickstart`

use std::time::{Duration, Instant};

use lockwright::{Client, Error, LockId, LockOptions, LockStatus, MemStore, generate_lock_id};

const RESOURCE: &str = "reports/nightly";
const TTL: Duration = Duration::from_millis(400);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let client = Client::with_renew_margin(MemStore::new(), Duration::from_millis(50))?;
    let start = Instant::now();
    let log = move |who: &str, what: String| {
        println!("{:>6} ms  {who}: {what}", start.elapsed().as_millis());
    };

    // Act 1: A holds and renews; B waits its turn.
    let a = {
        let client = client.clone();
        tokio::spawn(async move {
            let lock_id = generate_lock_id();
            let details = LockOptions::new().owner("worker-a").ttl(TTL);
            let lock = client.lock(RESOURCE, &lock_id, &details).await?;
            log("A", format!("locked {RESOURCE} with fence {}", lock.fence));
            for step in 1..=3 {
                tokio::time::sleep(TTL / 2).await;
                client.renew(&lock_id, TTL).await?;
                log("A", format!("working (step {step}/3), lock renewed"));
            }
            let released = client.unlock(&lock_id).await?;
            log("A", format!("done, released {} lock(s)", released.len()));
            Ok::<_, Error>(())
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b_id = generate_lock_id();
    let b_details = LockOptions::new().owner("worker-b").ttl(TTL);
    let b_lock = xlock_until_granted(
        &client,
        &b_id,
        &b_details,
        Duration::from_millis(150),
        || {
            log("B", "refused: already locked, retrying in 150 ms".into());
        },
    )
    .await?;
    log(
        "B",
        format!("locked {RESOURCE} with fence {}", b_lock.fence),
    );
    a.await.expect("worker A panicked")?;

    // Act 2: B crashes while holding (never unlocks); A takes over after the TTL and the
    // takeover grace.
    log("B", "crashes without unlocking".into());
    let a_id = generate_lock_id();
    let a_details = LockOptions::new().owner("worker-a").ttl(TTL);
    let pause = Duration::from_millis(100);
    let taken = xlock_until_granted(&client, &a_id, &a_details, pause, || {}).await?;
    log(
        "A",
        format!(
            "took over the abandoned lock (TTL and takeover grace over) with fence {} > {}",
            taken.fence, b_lock.fence
        ),
    );
    client.unlock(&a_id).await?;
    let purged = client.purge().await?;
    log("purger", format!("removed {} stale lock(s)", purged.len()));
    Ok(())
}

/// Asks for [`RESOURCE`] until it is granted, calling `refused` and pausing for `pause`
/// after each refusal; any other error ends the wait. (A `Locker` does this for you, with
/// jittered backoff and renewal: see the `fencing` example.)
async fn xlock_until_granted(
    client: &Client<MemStore>,
    lock_id: &LockId,
    details: &LockOptions,
    pause: Duration,
    refused: impl Fn(),
) -> Result<LockStatus, Error> {
    loop {
        match client.lock(RESOURCE, lock_id, details).await {
            Err(Error::AlreadyLocked { .. }) => {
                refused();
                tokio::time::sleep(pause).await;
            }
            result => return result,
        }
    }
}
