//! Doctor's wake-up probe: does a release reach a waiter through the store's change stream?
//!
//! It does what a waiting acquire does, on a probe resource of its own: a lock is taken, a
//! second store on the same collection (another process, as far as the server can tell)
//! is refused and subscribes to its hints, and the lock is released; the release must come
//! back as a hint. The probe's document is deleted afterwards if it holds no lock.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lockwright::{
    Hint, LockDetails, LockId, LockRequest, LockStore, MongoStore, Resource, generate_lock_id,
};
use mongodb::bson::doc;

/// How long each step may take before the probe reports that wake-ups do not work.
const STEP: Duration = Duration::from_secs(10);

/// `Ok(what worked)` or `Err(what did not)`; a failure means waiters poll.
pub async fn probe(store: &MongoStore) -> Result<String, String> {
    let resource = format!("lockwright-doctor-wakeup-{}", std::process::id());
    let result = run(store, &resource).await;
    // Best effort: a document left holding no lock is also what purge removes.
    let _ = store
        .collection()
        .delete_one(doc! {
            "resource": &resource, "exclusive.acquired": false, "shared.count": 0,
        })
        .await;
    result
}

async fn run(store: &MongoStore, name: &str) -> Result<String, String> {
    let resource = Resource::new(name).map_err(|e| e.to_string())?;
    let details = LockDetails::new()
        .ttl(Duration::from_secs(30))
        .owner("lockwright doctor");
    let holder: LockId = generate_lock_id();
    let request = LockRequest::new(name, holder.as_str(), &details).map_err(|e| e.to_string())?;
    store
        .xlock(&request)
        .await
        .map_err(|e| format!("could not take the probe lock: {}", crate::exit::chain(&e)))?;
    let waiter = MongoStore::from_collection(store.collection().clone());
    let theirs = generate_lock_id();
    let asking = LockRequest::new(name, theirs.as_str(), &details).map_err(|e| e.to_string())?;
    if waiter.xlock(&asking).await.is_ok() {
        return Err("the probe lock was granted twice: run the conformance tests".into());
    }
    let Some(mut hints) = waiter.hints() else {
        return Err(unavailable(&waiter));
    };
    let opened = Instant::now();
    match tokio::time::timeout(STEP, hints.next()).await {
        Ok(Some(Hint::Missed)) => {}
        Ok(Some(other)) => return Err(format!("the change stream began with {other:?}")),
        Ok(None) => return Err(unavailable(&waiter)),
        Err(_) => return Err(format!("no change stream opened within {STEP:?}")),
    }
    let open_ms = opened.elapsed().as_millis();
    let released = Instant::now();
    store.unlock_one(&resource, &holder).await.map_err(|e| {
        format!(
            "could not release the probe lock: {}",
            crate::exit::chain(&e)
        )
    })?;
    let deadline = released + STEP;
    loop {
        match tokio::time::timeout_at(deadline.into(), hints.next()).await {
            Ok(Some(Hint::Freed(r))) if r == resource => {
                return Ok(format!(
                    "wake-ups work: a release reached a waiter's change stream {} ms after \
                     it was sent (the stream opened in {open_ms} ms)",
                    released.elapsed().as_millis()
                ));
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err(unavailable(&waiter)),
            Err(_) => {
                return Err(format!(
                    "a release did not reach a waiter's change stream within {STEP:?}"
                ));
            }
        }
    }
}

fn unavailable(waiter: &MongoStore) -> String {
    match waiter.hints_unavailable() {
        Some(why) => format!("change streams are unavailable here ({why})"),
        None => "the change stream ended".into(),
    }
}
