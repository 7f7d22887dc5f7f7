//! Doctor's wake-up checks: can a waiter be woken when the lock it waits for is handed to
//! it?
//!
//! A write that hands a lock to the head of a resource's queue is followed by the writer's
//! insert of a small wake document into one of the capped collections
//! `<collection>.wakes.<k>` ([`MongoStore::wake_collections`]), the shard of the waiting
//! process's store; a process with a waiter near the head of a line keeps one tailable
//! cursor on its shard and hears the wakes that name it.
//!
//! [`wakes_readable`] only reads: it opens a tailable cursor on the store's shard
//! ([`MongoStore::wake_collection`]) and asks it once for more (a `getMore`), as a waiting
//! process does. That shows the privileges and the deployment allow it, which is what
//! usually fails, without writing anything. A shard that does not exist yet is fine: it is
//! created on first use, by the first process that waits there or the first hand-over to
//! one.
//!
//! [`probe`] (`doctor --wakeups`) writes: it does what a fair waiting acquire does, on a
//! probe resource of its own. A lock is taken; a second store on the same collection, with
//! a client of its own (another process, as far as the server can tell), asks for it with a
//! ticket, is refused and takes a place in the resource's queue, and subscribes to its
//! hints; the lock is released, which hands it to that place, and the wake must come back
//! as a hint. The lock handed to the waiter is then released too, the waiter's client
//! closes its cursor, and the probe's document is deleted if it holds no lock.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lockwright::store_mongo::MongoFailure;
use lockwright::{
    Error, Hint, LockId, LockOptions, LockRequest, LockStore, MongoStore, Resource, Ticket,
    generate_lock_id,
};
use mongodb::Database;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};

use crate::connect::{ConnArgs, connect};

/// How long each step may take before the probe reports that wake-ups do not work.
const STEP: Duration = Duration::from_secs(10);

/// How long the server may hold the read-only check's `getMore` while no wake comes.
const AWAIT_MS: i64 = 200;

/// The probe's locks and its waiter's place last this long, should doctor die midway.
const PROBE_TTL: Duration = Duration::from_secs(30);

/// What the read-only check found on the store's shard of wakes.
enum Shard {
    /// A tailable cursor opened on it and answered a `getMore`.
    Answered,
    /// It does not exist yet.
    Missing,
    /// It exists but holds no document, so no tailable cursor stays open on it.
    Empty,
}

/// Reads only: opens a tailable cursor on the store's wake collection (a `find`, which
/// neither creates the collection nor writes) and asks it once for more (a `getMore`), as
/// a waiting process does. `Ok(what worked)` or `Err(what did not)`; it does not show that a
/// hand-over reaches a waiter, which only [`probe`] does, with a write.
pub async fn wakes_readable(store: &MongoStore) -> Result<String, String> {
    let db = store.client().database(&store.collection().namespace().db);
    let shard = store.wake_collection();
    let ns = format!("{}.{shard}", db.name());
    let probe_lock = "to check that a hand-over reaches a waiter, which takes and releases a \
                      probe lock, run `lockwright doctor --wakeups`";
    match tokio::time::timeout(STEP, tail(&db, &shard)).await {
        Ok(Ok(Shard::Answered)) => Ok(format!(
            "the wakes can be read here (a tailable cursor opened on {ns} and answered, read \
             only): a waiting acquire is woken when the lock is handed to it; {probe_lock}"
        )),
        Ok(Ok(Shard::Missing)) => Ok(format!(
            "the wake collection {ns} does not exist yet, which is fine: it is created on \
             first use, by the first process that waits there or the first hand-over to one; \
             {probe_lock}"
        )),
        Ok(Ok(Shard::Empty)) => Ok(format!(
            "the wake collection {ns} exists but is empty, which is fine: the first process \
             that waits there puts a document in it; {probe_lock}"
        )),
        Ok(Err(e)) => Err(format!(
            "the wakes cannot be read here ({})",
            MongoFailure::new(&e)
        )),
        Err(_) => Err(format!(
            "no tailable cursor on the wakes answered within {STEP:?}"
        )),
    }
}

/// Opens a tailable cursor on `shard` that hears no wake (it asks for a store tag nobody
/// has), asks it once for more, and closes it. The commands are sent by hand, in one
/// session, to tell a shard that is missing from one that answers.
async fn tail(db: &Database, shard: &str) -> Result<Shard, mongodb::error::Error> {
    let mut session = db.client().start_session().await?;
    let found = db
        .run_command(doc! {
            "find": shard,
            "filter": { "s": ObjectId::new().to_hex() },
            "tailable": true,
            "awaitData": true,
        })
        .session(&mut session)
        .await?;
    let id = cursor_id(&found);
    if id == 0 {
        let names = db
            .list_collection_names()
            .filter(doc! { "name": shard })
            .authorized_collections(true)
            .await?;
        return Ok(if names.is_empty() {
            Shard::Missing
        } else {
            Shard::Empty
        });
    }
    let more = db
        .run_command(doc! {
            "getMore": id, "collection": shard, "maxTimeMS": AWAIT_MS,
        })
        .session(&mut session)
        .await;
    if more.as_ref().map_or(true, |reply| cursor_id(reply) != 0) {
        // Best effort: the server closes an idle cursor itself after 10 minutes.
        let _ = db
            .run_command(doc! { "killCursors": shard, "cursors": [id] })
            .session(&mut session)
            .await;
    }
    more.map(|_| Shard::Answered)
}

/// The id of the cursor a `find` or `getMore` reply describes (0: closed).
fn cursor_id(reply: &Document) -> i64 {
    match reply.get_document("cursor").ok().and_then(|c| c.get("id")) {
        Some(Bson::Int64(id)) => *id,
        Some(Bson::Int32(id)) => i64::from(*id),
        _ => 0,
    }
}

/// The probe's side of a fair acquire: the holder's lock id, and the waiter's store, lock
/// id and ticket.
struct Probe {
    resource: Resource,
    holder: LockId,
    waiter: MongoStore,
    theirs: LockId,
    ticket: Ticket,
}

/// `Ok(what worked)` or `Err(what did not)`; a failure means waiters poll. The waiter is
/// a store of its own on a client of its own, connected as `conn` says.
pub async fn probe(store: &MongoStore, conn: &ConnArgs) -> Result<String, String> {
    let name = format!("lockwright-doctor-wakeup-{}", std::process::id());
    let probe = Probe {
        resource: Resource::new(&name).map_err(|e| e.to_string())?,
        holder: generate_lock_id(),
        waiter: connect(conn).await.map_err(|e| e.message)?,
        theirs: generate_lock_id(),
        ticket: Ticket::new(generate_lock_id(), PROBE_TTL).map_err(|e| e.to_string())?,
    };
    let result = run(store, &probe).await;
    // Best effort, whatever step failed: the waiter leaves its place (if it still has one)
    // before the holder releases, so that nothing is handed over any more; then the
    // waiter releases what it was handed. A lock or place left behind lapses within
    // PROBE_TTL, and purge removes the document.
    let _ = probe
        .waiter
        .leave_queue(&probe.resource, &probe.ticket.id)
        .await;
    let _ = store.unlock_one(&probe.resource, &probe.holder).await;
    let _ = probe
        .waiter
        .unlock_one(&probe.resource, &probe.theirs)
        .await;
    // The waiter's subscription ended with `run`; its client closes the cursor it kept on
    // the wakes (a `killCursors`) before doctor exits, rather than leaving it to the
    // server's timeout of 10 minutes.
    let _ = tokio::time::timeout(STEP, probe.waiter.client().clone().shutdown()).await;
    let _ = store
        .collection()
        .delete_one(doc! {
            "resource": &name, "exclusive.acquired": false, "shared.count": 0,
        })
        .await;
    result
}

async fn run(store: &MongoStore, probe: &Probe) -> Result<String, String> {
    let name = probe.resource.as_str();
    let details = LockOptions::new().ttl(PROBE_TTL).owner("lockwright doctor");
    let request =
        LockRequest::new(name, probe.holder.as_str(), &details).map_err(|e| e.to_string())?;
    store
        .lock(&request)
        .await
        .map_err(|e| format!("could not take the probe lock: {}", crate::exit::chain(&e)))?;
    let waiter = &probe.waiter;
    let asking = LockRequest::new(name, probe.theirs.as_str(), &details)
        .map_err(|e| e.to_string())?
        .fair(probe.ticket.clone());
    match waiter.lock(&asking).await {
        Err(Error::AlreadyLocked { .. }) => {}
        Ok(_) => return Err("the probe lock was granted twice: run the conformance tests".into()),
        Err(e) => {
            return Err(format!(
                "the probe's waiter could not take a place in the queue: {}",
                crate::exit::chain(&e)
            ));
        }
    }
    let Some(mut hints) = waiter.hints() else {
        return Err(unavailable(waiter));
    };
    let opened = Instant::now();
    match tokio::time::timeout(STEP, hints.next()).await {
        Ok(Some(Hint::Missed)) => {}
        Ok(Some(other)) => return Err(format!("the wakes cursor began with {other:?}")),
        Ok(None) => return Err(unavailable(waiter)),
        Err(_) => return Err(format!("no wakes cursor opened within {STEP:?}")),
    }
    let open_ms = opened.elapsed().as_millis();
    let released = Instant::now();
    store
        .unlock_one(&probe.resource, &probe.holder)
        .await
        .map_err(|e| {
            format!(
                "could not release the probe lock: {}",
                crate::exit::chain(&e)
            )
        })?;
    let place = probe.ticket.id.place_tag();
    let deadline = released + STEP;
    let delay = loop {
        match tokio::time::timeout_at(deadline.into(), hints.next()).await {
            Ok(Some(Hint::First {
                resource,
                place: Some(p),
                ..
            })) if resource == probe.resource && p == place => break released.elapsed(),
            Ok(Some(_)) => {}
            Ok(None) => return Err(unavailable(waiter)),
            Err(_) => {
                return Err(format!(
                    "a hand-over did not reach the waiter's wakes cursor within {STEP:?}"
                ));
            }
        }
    };
    waiter
        .unlock_one(&probe.resource, &probe.theirs)
        .await
        .map_err(|e| {
            format!(
                "a hand-over woke the waiter, but the lock handed to it could not be released: \
                 {}",
                crate::exit::chain(&e)
            )
        })?;
    Ok(format!(
        "wake-ups work: a release handed the probe lock to a waiting process, whose wakes \
         cursor heard it {} ms after the release was sent (the cursor opened in {open_ms} ms)",
        delay.as_millis()
    ))
}

fn unavailable(waiter: &MongoStore) -> String {
    match waiter.hints_unavailable() {
        Some(why) => format!("the wakes cannot be read here ({why})"),
        None => "the wakes cursor ended".into(),
    }
}
