//! Leader election with fenced writes: three candidates campaign for `scheduler`; each
//! leads in turn (in the order they campaigned), writes the schedule under its fence, and
//! resigns, and the store hands the leadership to the next. An observer prints each leader
//! it sees. Then the first leader, deposed, sends a write it had prepared, and the store of
//! the data rejects it:
//!
//! - by default, with locks in memory and an in-memory stand-in for the data's store that
//!   remembers the highest fence it accepted: `cargo run --example election -p lockwright`;
//! - with `--mongo`, with locks and data in MongoDB (`MONGODB_URI`, a replica set): the
//!   schedule is a document in a collection of the user's, written through
//!   `LockGuard::fenced`, and the server refuses the deposed leader's write:
//!   `MONGODB_URI=... cargo run --example election -p lockwright --features mongo -- --mongo`.
//!
//! Exits with an error if the candidates did not lead in order with rising fences, if the
//! observer missed a leader, or if the deposed leader's write got through.

use std::time::Duration;

use futures_util::StreamExt;
use lockwright::{Client, Error, LockOptions, LockStore, Locker, LockerConfig};

#[cfg(feature = "mem")]
mod downstream;
#[cfg(feature = "mem")]
use downstream::Downstream;

const ELECTION: &str = "scheduler";
const CANDIDATES: [&str; 3] = ["node-a:7000", "node-b:7000", "node-c:7000"];

fn failed(what: &str) -> Error {
    Error::invalid("example", format!("the election went wrong: {what}"))
}

/// Runs the election on `client`'s store; each leader's write goes through `write(fence,
/// text)` (true: accepted). Returns the fences of the leaders, in turn, and the first one's
/// (stale by then) write's outcome.
async fn elect<S, W, F>(client: &Client<S>, write: W) -> Result<(Vec<u64>, bool), Error>
where
    S: LockStore,
    W: Fn(u64, String) -> F,
    F: std::future::Future<Output = Result<bool, Error>>,
{
    let lease = LockOptions::exclusive(Duration::from_secs(10));
    let lockers: Vec<Locker<S>> = CANDIDATES
        .iter()
        .map(|_| Locker::new(client.clone(), LockerConfig::default()))
        .collect::<Result<_, _>>()?;
    let mut observer = Box::pin(client.observe(ELECTION, Duration::from_millis(10)));
    // Each candidate campaigns once the ones before it lead or are in line (else a later
    // one could lead first, and the loop below, which takes them in order, would wait on
    // the first while the later one leads).
    let mut campaigns = Vec::new();
    let resource = lockwright::Resource::new(ELECTION)?;
    for (locker, value) in lockers.iter().zip(CANDIDATES) {
        let (locker, lease) = (locker.clone(), lease.clone());
        campaigns.push(tokio::spawn(async move {
            locker.campaign(ELECTION, value, &lease).await
        }));
        loop {
            let leads = usize::from(client.leader(ELECTION).await?.is_some());
            if leads + client.store().waiters(&resource).await?.len() >= campaigns.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut fences = Vec::new();
    let mut first_fence = None;
    for (campaign, value) in campaigns.into_iter().zip(CANDIDATES) {
        let leading = campaign.await.map_err(|e| failed(&e.to_string()))??;
        let seen = observer
            .next()
            .await
            .ok_or_else(|| failed("the observer stopped"))??;
        println!(
            "{value} leads with fence {} (the observer saw {} with fence {})",
            leading.fence(),
            seen.value.as_deref().unwrap_or("?"),
            seen.fence
        );
        if seen.fence != leading.fence() || seen.value.as_deref() != Some(value) {
            return Err(failed("the observer saw another leader"));
        }
        if !write(leading.fence(), format!("schedule by {value}")).await? {
            return Err(failed("a leader's write was refused"));
        }
        fences.push(leading.fence());
        first_fence.get_or_insert(leading.fence());
        leading.resign().await?;
    }
    if !fences.windows(2).all(|w| w[0] < w[1]) {
        return Err(failed("the fences did not rise"));
    }
    println!(
        "{} wakes up and sends the write it had prepared:",
        CANDIDATES[0]
    );
    let stale = write(
        first_fence.unwrap_or_default(),
        format!("stale schedule by {}", CANDIDATES[0]),
    )
    .await?;
    for l in &lockers {
        l.shutdown();
    }
    Ok((fences, stale))
}

#[cfg(feature = "mem")]
async fn in_memory() -> Result<(), Error> {
    let downstream = Downstream::default();
    let client = Client::new(lockwright::MemStore::new());
    let (_, stale) = elect(&client, |fence, text| {
        let verdict = downstream.write(fence);
        async move {
            Ok(match verdict {
                Err(highest) => {
                    println!("  rejected {text:?}: fence {fence} is older than {highest}");
                    false
                }
                Ok(()) => {
                    println!("  accepted {text:?} with fence {fence}");
                    true
                }
            })
        }
    })
    .await?;
    if stale {
        return Err(failed("the deposed leader's write got through"));
    }
    Ok(())
}

#[cfg(feature = "mongo")]
async fn on_mongodb() -> Result<(), Error> {
    use lockwright::{FencedCollection, MongoStore, Resource};
    use mongodb::bson::{Document, doc, oid::ObjectId};

    let uri = std::env::var("MONGODB_URI")
        .map_err(|_| Error::invalid("MONGODB_URI", "--mongo needs a replica set's URI"))?;
    let name = format!("election_example_{}", ObjectId::new().to_hex());
    let store = MongoStore::connect(&uri, "lockwright_examples", &name).await?;
    let schedules = store
        .client()
        .database("lockwright_examples")
        .collection::<Document>(&format!("{name}_schedules"));
    let locks = store.collection().clone();
    let client = Client::new(store);
    client.create_indexes().await?;
    let resource = Resource::new(ELECTION)?;
    let outcome = elect(&client, |fence, text| {
        let writes = FencedCollection::new(&schedules, resource.clone(), fence);
        async move {
            match writes
                .upsert_one(doc! {"_id": ELECTION}, doc! {"$set": {"text": &text}})
                .await
            {
                Ok(_) => {
                    println!("  the server accepted {text:?} with fence {fence}");
                    Ok(true)
                }
                Err(e @ Error::Fenced { .. }) => {
                    println!("  the server refused {text:?}: {e}");
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        }
    })
    .await;
    let kept = schedules
        .find_one(doc! {"_id": ELECTION})
        .await
        .ok()
        .flatten();
    let _ = schedules.drop().await;
    let _ = locks.drop().await;
    let (_, stale) = outcome?;
    let text = kept.as_ref().and_then(|d| d.get_str("text").ok());
    println!("the schedule reads {text:?}");
    if stale || text != Some(&format!("schedule by {}", CANDIDATES[2])) {
        return Err(failed("the deposed leader's write got through"));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mongo = std::env::args().skip(1).any(|a| a == "--mongo");
    if mongo {
        #[cfg(feature = "mongo")]
        return on_mongodb().await;
        #[cfg(not(feature = "mongo"))]
        return Err(Error::invalid("--mongo", "build with --features mongo"));
    }
    #[cfg(feature = "mem")]
    return in_memory().await;
    #[cfg(not(feature = "mem"))]
    Err(Error::invalid(
        "example",
        "build with --features mem, or run with --mongo",
    ))
}
