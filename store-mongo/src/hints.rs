//! Hints for waiters from one change stream per store.
//!
//! The first subscription opens a change stream on the lock collection (a task of its
//! own); the last one to be dropped closes it, so a process with any number of waiters
//! keeps one cursor open while any of them waits. The stream asks only for updates,
//! replacements and deletions, and projects what maps an event to the waiters: the
//! document's `_id` (which a refusal's reply named, so the store keeps `_id → resource`
//! for the documents its refusals saw) and whether the update made a grant (it sets
//! `lastGrant`). A grant is [`Hint::Taken`]; any other change, a release, a purge's
//! rewrite or deletion, a waiter leaving the queue, is [`Hint::Freed`]; renewals and
//! writes of the queue alone (a waiter taking or keeping its place) hint nothing. A change
//! that leaves a fair waiter first in a queue reaches the store of that waiter alone, as
//! [`Hint::First`] (see [`pipeline`]).
//!
//! Nothing depends on the stream: after any error or invalidation the task reopens it from
//! now, without resume tokens, and every subscriber gets [`Hint::Missed`] (so every waiter
//! asks once more), as it does after each opening. Where change streams are unavailable
//! (missing privileges, a server that refuses them) the store says so once in the log,
//! ends the subscriptions and gives none for a while; waiters then poll.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use lockwright_engine::{Hint, HintStream, Resource};
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use crate::failure::MongoFailure;
use crate::schema::{LAST_FENCE, LAST_GRANT, WAKE};
use crate::setup::command_code;

/// Hints a subscriber may fall behind by before it gets `Missed` instead.
const CAPACITY: usize = 1024;
/// Documents whose `_id` the store remembers; past it the map starts again (and waiters
/// get `Missed`).
const MAX_IDS: usize = 16_384;
/// How long the store gives no subscription after finding change streams unavailable.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(60);
/// The first pause before reopening a failed stream; it doubles up to `MAX_REOPEN_PAUSE`.
const REOPEN_PAUSE: Duration = Duration::from_millis(50);
const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// Server error codes that mean change streams cannot work here, whatever is retried:
/// Unauthorized, IllegalOperation, CommandNotSupported, and "only supported on replica
/// sets".
const UNAVAILABLE_CODES: [i32; 4] = [13, 20, 115, 40573];

/// The store's side: the stream that is open, if any, and whether streams work at all.
#[derive(Debug)]
pub(crate) struct HintSource {
    /// This store's tag: its fair requests' places carry it, and its stream hears the
    /// wakes that name it (and no other store's).
    tag: String,
    hub: Mutex<Weak<Hub>>,
    /// `_id` (as text: BSON values are not hashable) → resource, for the documents this
    /// store's refusals read (a refusal comes before its waiter subscribes).
    ids: Ids,
    /// Since when, and why, change streams are known not to work.
    unavailable: Arc<Mutex<Option<(Instant, String)>>>,
    /// Whether the unavailability was logged (once per store).
    logged: Arc<AtomicBool>,
}

/// One open (or opening) change stream and its subscribers.
#[derive(Debug)]
struct Hub {
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Ids = Arc<Mutex<HashMap<String, Resource>>>;

#[derive(Debug)]
struct Shared {
    sender: Mutex<Option<broadcast::Sender<Hint>>>,
    ids: Ids,
    /// The stream is open (its first `Missed` was sent).
    open: AtomicBool,
}

impl Shared {
    fn send(&self, hint: Hint) {
        if let Some(tx) = lock(&self.sender).as_ref() {
            // No receiver: nobody listens any more; the hub is being dropped.
            let _ = tx.send(hint);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while these are locked; a poisoned map is still a valid map.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HintSource {
    /// A source with a fresh tag (an `ObjectId`'s hex: unique across processes).
    pub(crate) fn new() -> Self {
        HintSource {
            tag: mongodb::bson::oid::ObjectId::new().to_hex(),
            hub: Mutex::default(),
            ids: Ids::default(),
            unavailable: Arc::default(),
            logged: Arc::default(),
        }
    }

    /// The tag of this store's places.
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// A subscription, opening the stream if none is open; `None` while change streams are
    /// known to be unavailable. Must be called within a tokio runtime.
    pub(crate) fn subscribe(&self, coll: &Collection<Document>) -> Option<HintStream> {
        if let Some((since, _)) = lock(&self.unavailable).as_ref()
            && since.elapsed() < UNAVAILABLE_FOR
        {
            return None;
        }
        let mut slot = lock(&self.hub);
        let hub = match slot.upgrade() {
            Some(hub) => hub,
            None => {
                let hub = self.open(coll.clone());
                *slot = Arc::downgrade(&hub);
                hub
            }
        };
        drop(slot);
        let rx = lock(&hub.shared.sender).as_ref()?.subscribe();
        // Joining a stream already open: a change may have come since this store's
        // refusal, before the subscription.
        let missed_first = hub.shared.open.load(Ordering::Acquire);
        let hints = BroadcastStream::new(rx).map(move |received| {
            let _keep_open = &hub;
            received.unwrap_or(Hint::Missed)
        });
        Some(if missed_first {
            Box::pin(futures_util::stream::once(async { Hint::Missed }).chain(hints))
        } else {
            Box::pin(hints)
        })
    }

    /// A refusal read the document `id` of `resource`: map its events to the resource.
    pub(crate) fn note(&self, id: Option<&Bson>, resource: &Resource) {
        let Some(id) = id else { return };
        let id = id.to_string();
        let mut ids = lock(&self.ids);
        if ids.get(&id) == Some(resource) {
            return;
        }
        if ids.len() >= MAX_IDS {
            ids.clear();
            drop(ids);
            if let Some(hub) = lock(&self.hub).upgrade() {
                hub.shared.send(Hint::Missed);
            }
            ids = lock(&self.ids);
        }
        ids.insert(id, resource.clone());
    }

    /// Why change streams do not work here, if the last attempt found so.
    pub(crate) fn unavailable(&self) -> Option<String> {
        lock(&self.unavailable).as_ref().map(|(_, why)| why.clone())
    }

    fn open(&self, coll: Collection<Document>) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(CAPACITY);
        let shared = Arc::new(Shared {
            sender: Mutex::new(Some(tx)),
            ids: Arc::clone(&self.ids),
            open: AtomicBool::new(false),
        });
        let unavailable = Arc::clone(&self.unavailable);
        let logged = Arc::clone(&self.logged);
        let task = tokio::spawn(run(
            coll,
            self.tag.clone(),
            Arc::clone(&shared),
            unavailable,
            logged,
        ));
        Arc::new(Hub {
            shared,
            task: task.abort_handle(),
        })
    }
}

/// The pipeline after `$changeStream`: updates, replacements and deletions, less the quiet
/// updates, with the document's `_id` and whether an update set `lastGrant` (a grant). The
/// fields the driver needs to resume are kept.
///
/// Quiet updates free nobody: renewals (they only set `renewedAt` and `expiresAt` fields)
/// and writes of the queue alone (a fair refusal taking or refreshing its place, dead
/// places dropped): hinting those would wake every waiter of a resource at each waiter's
/// every attempt. The server reports such a write as `queue`, `queue.<i>`,
/// `queue.<i>.<field>` in `updatedFields` and `queue` in `truncatedArrays`, whatever the
/// diff it chose; a `leave_queue` that removed a place also sets `lastLeave`, so it is
/// not quiet and hints `Freed` (the next waiter may go).
///
/// Of the writes that leave a fair waiter first in a queue, only the store of that
/// waiter hears: they set `wake` to `"<tag>.<ticket tag>:<random>"`, with the tag of the
/// store whose request took the first place and its ticket's tag ([`place_tag`]), and the
/// stream passes such an event only when the store's tag is `tag`, this store's. It is
/// [`Hint::First`], naming the ticket's tag, so that of the waiters of this store only the
/// first acts. So a release or a grant on a resource with
/// 64 waiting processes reaches one of them, not 64 (each stream's `getMore` answers only
/// for an event it passes, or after the server's await time); the waiters behind the
/// first hear nothing until their turn (see the engine's `locker::fair`). Writes that set
/// no `wake` (on a resource without a queue, a purge, the Go library's) reach everyone.
pub(crate) fn pipeline(tag: &str) -> Vec<Document> {
    let description = "$updateDescription";
    let size_of =
        |field: &str| doc! { "$size": { "$ifNull": [format!("{description}.{field}"), []] } };
    let all_match = |input: Bson, regex: &str| {
        doc! { "$allElementsTrue": [{ "$map": {
            "input": input,
            "in": { "$regexMatch": { "input": "$$this", "regex": regex } },
        } }] }
    };
    let updated_keys = Bson::Document(doc! { "$map": {
        "input": { "$objectToArray": format!("{description}.updatedFields") },
        "in": "$$this.k",
    } });
    let truncated = Bson::Document(doc! { "$map": {
        "input": { "$ifNull": [format!("{description}.truncatedArrays"), []] },
        "in": "$$this.field",
    } });
    let quiet = doc! { "$and": [
        { "$eq": ["$operationType", "update"] },
        { "$eq": [size_of("removedFields"), 0] },
        all_match(truncated, "^queue$"),
        all_match(updated_keys, "(^queue(\\.|$))|((^|\\.)(renewedAt|expiresAt)$)"),
    ] };
    let granted = format!("{description}.updatedFields.{LAST_GRANT}");
    let wake = format!("updateDescription.updatedFields.{WAKE}");
    vec![
        doc! { "$match": { "operationType": { "$in": ["update", "replace", "delete"] } } },
        doc! { "$match": { "$or": [
            { wake.as_str(): { "$exists": false } },
            // The tag is hexadecimal: nothing in it is special to a regular expression.
            { wake.as_str(): { "$regex": format!("^{tag}\\.") } },
        ] } },
        doc! { "$match": { "$expr": { "$not": [quiet] } } },
        doc! { "$project": {
            "_id": 1, "operationType": 1, "ns": 1, "documentKey._id": 1,
            "granted": { "$ne": [{ "$type": granted }, "missing"] },
            "wake": format!("${wake}"),
            "fence": format!("{description}.updatedFields.{LAST_FENCE}"),
        } },
    ]
}

/// The tag a fair request's place carries: the store's tag, a dot, and the ticket's own
/// [`LockId::tag`](lockwright_engine::LockId::tag) (16 bits of a hash, which tell the
/// waiters of one store apart and reveal nothing of the ticket). Empty for a request that
/// is not fair (it takes no place).
pub(crate) fn place_tag(store: &str, request: &lockwright_engine::LockRequest) -> String {
    request.fair.as_ref().map_or_else(String::new, |t| {
        format!("{store}.{}", t.id.tag().trim_start_matches('#'))
    })
}

/// The ticket tag (`#` and hex) a `wake` value names after the store's tag, if it has one.
fn named_place(wake: &str) -> Option<String> {
    let (place, _) = wake.split_once(':')?;
    let (_, ticket) = place.split_once('.')?;
    Some(format!("#{ticket}"))
}

/// What one event hints, given the documents refusals saw (`None`: nobody here waits on it).
fn hint_of(event: &Document, ids: &HashMap<String, Resource>) -> Option<Hint> {
    let id = event.get_document("documentKey").ok()?.get("_id")?;
    let resource = ids.get(&id.to_string())?.clone();
    let granted = event.get_str("operationType") == Ok("update")
        && event.get_bool("granted").unwrap_or(false);
    // A grant sets the fence counter to the new lock's fence.
    let fence = match event.get("fence") {
        Some(Bson::Int64(f)) => u64::try_from(*f).ok(),
        Some(Bson::Int32(f)) => u64::try_from(*f).ok(),
        _ => None,
    };
    Some(if let Ok(wake) = event.get_str("wake") {
        Hint::First {
            resource,
            taken: granted,
            place: named_place(wake),
        }
    } else if granted {
        Hint::Taken(resource, fence)
    } else {
        Hint::Freed(resource)
    })
}

/// The hub's task: open the stream, send `Missed`, map each event to a hint; on any error
/// or invalidation pause and reopen from now; stop for good where streams are unavailable.
/// The pause doubles while reopened streams fail before delivering anything.
async fn run(
    coll: Collection<Document>,
    tag: String,
    shared: Arc<Shared>,
    unavailable: Arc<Mutex<Option<(Instant, String)>>>,
    logged: Arc<AtomicBool>,
) {
    let mut pause = REOPEN_PAUSE;
    loop {
        let opened = coll
            .watch()
            .pipeline(pipeline(&tag))
            .await
            .map(mongodb::change_stream::ChangeStream::with_type::<Document>);
        let failed = match opened {
            Ok(mut stream) => {
                *lock(&unavailable) = None;
                shared.open.store(true, Ordering::Release);
                shared.send(Hint::Missed);
                let failed = loop {
                    match stream.next().await {
                        Some(Ok(event)) => {
                            pause = REOPEN_PAUSE;
                            if event.get_str("operationType") == Ok("invalidate") {
                                break None;
                            }
                            let hint = hint_of(&event, &lock(&shared.ids));
                            if let Some(hint) = hint {
                                shared.send(hint);
                            }
                        }
                        Some(Err(e)) => break Some(e),
                        None => break None,
                    }
                };
                shared.open.store(false, Ordering::Release);
                failed
            }
            Err(e) => Some(e),
        };
        if let Some(e) = failed {
            if command_code(&e).is_some_and(|c| UNAVAILABLE_CODES.contains(&c)) {
                let why = MongoFailure::new(&e).to_string();
                if !logged.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        collection = %coll.namespace(),
                        error = %why,
                        "change streams are unavailable: waiting acquires will poll"
                    );
                }
                *lock(&unavailable) = Some((Instant::now(), why));
                // Ends every subscription.
                lock(&shared.sender).take();
                return;
            }
            tracing::debug!(error = %MongoFailure::new(&e), "the change stream failed; reopening it");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_REOPEN_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_map_to_hints_for_the_documents_refusals_saw() {
        let r = Resource::new("r").unwrap();
        let ids = HashMap::from([(Bson::Int32(1).to_string(), r.clone())]);
        let event = |op: &str, id: i32, granted: bool| {
            doc! { "operationType": op, "documentKey": { "_id": id }, "granted": granted }
        };
        assert_eq!(
            hint_of(&event("update", 1, false), &ids),
            Some(Hint::Freed(r.clone()))
        );
        assert_eq!(
            hint_of(&event("update", 1, true), &ids),
            Some(Hint::Taken(r.clone(), None))
        );
        assert_eq!(
            hint_of(&event("delete", 1, false), &ids),
            Some(Hint::Freed(r.clone()))
        );
        assert_eq!(hint_of(&event("update", 2, false), &ids), None);
        let mut first = event("update", 1, true);
        first.insert("wake", "65a1.3f9a:0.25");
        assert_eq!(
            hint_of(&first, &ids),
            Some(Hint::First {
                resource: r.clone(),
                taken: true,
                place: Some("#3f9a".into()),
            })
        );
        first.insert("granted", false);
        first.insert("wake", "65a1:0.25");
        assert_eq!(
            hint_of(&first, &ids),
            Some(Hint::First {
                resource: r,
                taken: false,
                place: None,
            }),
            "a wake that names no ticket wakes every fair waiter of the resource"
        );
    }
}
