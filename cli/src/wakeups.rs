//! Doctor's wake-up checks: can waiters be woken through a change stream on the lock
//! collection?
//!
//! [`stream_opens`] only reads: it opens a change stream on the collection and asks it once
//! for changes. That shows the privileges and the deployment allow change streams, which
//! is what usually fails, without writing anything.
//!
//! [`probe`] (`doctor --wakeups`) writes: it does what a waiting acquire does, on a probe
//! resource of its own: a lock is taken, a second store on the same collection (another
//! process, as far as the server can tell) is refused and subscribes to its hints, and the
//! lock is released; the release must come back as a hint. The probe's document is deleted
//! afterwards if it holds no lock.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lockwright::store_mongo::MongoFailure;
use lockwright::{
    Hint, LockId, LockOptions, LockRequest, LockStore, MongoStore, Resource, generate_lock_id,
};
use mongodb::bson::doc;

/// How long each step may take before the probe reports that wake-ups do not work.
const STEP: Duration = Duration::from_secs(10);

/// How long the server may hold the read-only check's `getMore` while no change comes.
const AWAIT: Duration = Duration::from_millis(200);

/// Reads only: opens a change stream on the lock collection (an `aggregate`, which neither
/// creates the collection nor writes) and asks it once for changes (a `getMore`), as a
/// waiting acquire's store does. `Ok(what worked)` or `Err(what did not)`; it does not show
/// that a release reaches a waiter, which only [`probe`] does, with a write.
pub async fn stream_opens(store: &MongoStore) -> Result<String, String> {
    let ns = store.collection().namespace();
    let check = async {
        let mut stream = store.collection().watch().max_await_time(AWAIT).await?;
        // The first call reads the `aggregate`'s own (empty) batch; the second sends the
        // `getMore`.
        for _ in 0..2 {
            stream.next_if_any().await?;
        }
        Ok::<(), mongodb::error::Error>(())
    };
    match tokio::time::timeout(STEP, check).await {
        Ok(Ok(())) => Ok(format!(
            "change streams work here (one opened on {ns} and answered, read only): waiting \
             acquires are woken by releases; to check that a release reaches a waiter, which \
             takes and releases a probe lock, run `lockwright doctor --wakeups`"
        )),
        Ok(Err(e)) => Err(format!(
            "change streams are unavailable here ({})",
            MongoFailure::new(&e)
        )),
        Err(_) => Err(format!("no change stream answered within {STEP:?}")),
    }
}

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
    let details = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .owner("lockwright doctor");
    let holder: LockId = generate_lock_id();
    let request = LockRequest::new(name, holder.as_str(), &details).map_err(|e| e.to_string())?;
    store
        .lock(&request)
        .await
        .map_err(|e| format!("could not take the probe lock: {}", crate::exit::chain(&e)))?;
    let waiter = MongoStore::from_collection(store.collection().clone());
    let theirs = generate_lock_id();
    let asking = LockRequest::new(name, theirs.as_str(), &details).map_err(|e| e.to_string())?;
    if waiter.lock(&asking).await.is_ok() {
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
