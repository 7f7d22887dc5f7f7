//! Fencing tokens end to end: a paused holder's late write is rejected where the data is
//! stored.
//!
//! Worker A takes a lock with a short TTL, writes, and is then paused (think of a long
//! garbage-collection pause) past the TTL. Worker B takes the lock over and writes with its
//! larger fence. When A wakes up it still sends the write it had prepared, and the store of
//! the data rejects it:
//!
//! - by default, with locks in memory and an in-memory stand-in for the data's store that
//!   remembers the highest fence it accepted: `cargo run --example fencing -p lockwright`;
//! - with `--mongo`, with locks and data in MongoDB (`MONGODB_URI`, a replica set): the data
//!   is a document in a collection of the user's, written through `LockGuard::fenced`, and
//!   the server itself refuses A's write: `MONGODB_URI=... cargo run --example fencing -p
//!   lockwright --features mongo -- --mongo`.
//!
//! Exits with an error if A's stale write got through.

use std::time::Duration;

use lockwright::{Client, Error, LockOptions, LockStore, Locker, LockerConfig};

#[cfg(feature = "mem")]
mod downstream;
#[cfg(feature = "mem")]
use downstream::Downstream;

/// How long A holds its lock, and how long it pauses.
const TTL: Duration = Duration::from_millis(300);
const PAUSE: Duration = Duration::from_millis(500);

/// A lock without renewal for A (so that its pause costs it the lock), a `Locker` for B.
async fn a_then_b<S: LockStore + 'static>(
    client: &Client<S>,
) -> Result<(lockwright::LockStatus, Locker<S>), Error> {
    let a = client
        .lock(
            "invoice-42",
            lockwright::generate_lock_id(),
            &LockOptions::new().ttl(TTL),
        )
        .await?;
    println!("A holds invoice-42 with fence {}", a.fence);
    let mut config = LockerConfig::default();
    config.drift_margin = Duration::from_millis(30);
    Ok((a, Locker::new(client.clone(), config)?))
}

fn failed(what: &str) -> Error {
    Error::invalid("example", format!("fencing failed: {what}"))
}

#[cfg(feature = "mem")]
async fn in_memory() -> Result<(), Error> {
    use lockwright::MemStore;
    let downstream = Downstream::default();
    let write = |fence: u64, value: &str| match downstream.write(fence) {
        Err(highest) => {
            println!("  rejected {value:?}: fence {fence} is older than {highest}");
            false
        }
        Ok(()) => {
            println!("  downstream accepted {value:?} with fence {fence}");
            true
        }
    };
    let client = Client::with_renew_margin(MemStore::new(), Duration::from_millis(20))?;
    let (a, locker) = a_then_b(&client).await?;
    write(a.fence, "A: draft");
    println!("A prepares its next write... and pauses for {PAUSE:?}");
    tokio::time::sleep(PAUSE).await;

    let b = locker
        .acquire(
            "invoice-42",
            &LockOptions::exclusive(Duration::from_secs(2)),
        )
        .await?;
    println!("B took invoice-42 over with fence {}", b.fence());
    write(b.fence(), "B: final");

    println!("A wakes up and sends the write it prepared:");
    let stale_accepted = write(a.fence, "A: stale");
    b.release().await?;
    if stale_accepted {
        return Err(failed("A's stale write got through"));
    }
    Ok(())
}

#[cfg(feature = "mongo")]
async fn on_mongodb() -> Result<(), Error> {
    use lockwright::{FencedCollection, MongoStore};
    use mongodb::bson::{Document, doc, oid::ObjectId};

    let uri = std::env::var("MONGODB_URI")
        .map_err(|_| Error::invalid("MONGODB_URI", "--mongo needs a replica set's URI"))?;
    // Collections of their own, dropped at the end.
    let name = format!("fencing_example_{}", ObjectId::new().to_hex());
    let store = MongoStore::connect(&uri, "lockwright_examples", &name)
        .await?
        .with_takeover_grace(Duration::from_millis(100))?;
    let orders = store
        .client()
        .database("lockwright_examples")
        .collection::<Document>(&format!("{name}_invoices"));
    let locks = store.collection().clone();
    let client = Client::with_renew_margin(store, Duration::from_millis(20))?;
    client.create_indexes().await?;

    let outcome = async {
        let (a, locker) = a_then_b(&client).await?;
        let a_writes = FencedCollection::new(&orders, a.resource.clone(), a.fence);
        a_writes
            .upsert_one(doc! {"_id": 42}, doc! {"$set": {"text": "A: draft"}})
            .await?;
        println!("  the server accepted A's draft with fence {}", a.fence);
        println!("A prepares its next write... and pauses for {PAUSE:?}");
        tokio::time::sleep(PAUSE).await;

        let b = locker
            .acquire(
                "invoice-42",
                &LockOptions::exclusive(Duration::from_secs(2)),
            )
            .await?;
        println!("B took invoice-42 over with fence {}", b.fence());
        b.fenced(&orders)
            .update_one(doc! {"_id": 42}, doc! {"$set": {"text": "B: final"}})
            .await?;
        println!("  the server accepted B's write with fence {}", b.fence());

        println!("A wakes up and sends the write it prepared:");
        let late = a_writes
            .update_one(doc! {"_id": 42}, doc! {"$set": {"text": "A: stale"}})
            .await;
        b.release().await?;
        match late {
            Err(e @ Error::Fenced { .. }) => println!("  the server refused it: {e}"),
            Ok(_) => return Err(failed("the server accepted A's stale write")),
            Err(e) => return Err(e),
        }
        let kept = orders.find_one(doc! {"_id": 42}).await.ok().flatten();
        let text = kept.as_ref().and_then(|d| d.get_str("text").ok());
        println!("  the invoice reads {text:?}");
        if text != Some("B: final") {
            return Err(failed("the invoice lost B's write"));
        }
        Ok(())
    }
    .await;
    // Clean up whatever happened; the outcome is what counts.
    let _ = orders.drop().await;
    let _ = locks.drop().await;
    outcome
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mongo = std::env::args().skip(1).any(|a| a == "--mongo");
    if mongo {
        #[cfg(feature = "mongo")]
        return on_mongodb().await;
        #[cfg(not(feature = "mongo"))]
        return Err(Error::invalid(
            "--mongo",
            "build the example with --features mongo",
        ));
    }
    #[cfg(feature = "mem")]
    return in_memory().await;
    #[cfg(not(feature = "mem"))]
    Err(Error::invalid(
        "backend",
        "without the `mem` feature, run the example with --mongo",
    ))
}
