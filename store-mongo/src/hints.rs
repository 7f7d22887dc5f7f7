//! Hints for waiters from one tailable cursor per store, on the store's shard of wakes.
//!
//! The first subscription opens a tailable cursor that awaits inserts on the capped
//! collection of wakes this store's tag belongs to (module `wakes`), filtered on that tag
//! (a task of its own); the last one to be dropped closes it, so a process with any number
//! of waiters keeps one cursor open while any of them listens. Each wake names a resource
//! and the tag of the place that was handed its lock: it is [`Hint::First`], and of this
//! store's waiters only the one whose ticket has that tag acts (it claims its lock). No
//! other write reaches the cursor: a release without a hand-over, a grant, a renewal or a
//! keep-place write hints nothing (waiters behind the head learn where they are from their
//! own attempts, see the engine's `locker::fair`).
//!
//! The news of leaders for observers comes the same way (a [`HintSource`] of
//! [`LeaderNews`]): one cursor per store on the leaders' collection, unfiltered, whatever
//! the number of elections its observers observe; each news names its election, and every
//! subscriber picks its own. Unlike wakes, the news the collection holds when the cursor
//! opens is not passed on: the `Missed` of the opening has observers read who leads, and
//! an old leader is no news.
//!
//! Nothing depends on the cursor: after any error the task reopens it, and every
//! subscriber gets [`Hint::Missed`] (so every waiter asks once more), as it does after
//! each opening. The wakes still in the shard are read again at each opening, less those
//! this store has already passed on (it remembers the last few thousand). Where the wakes
//! cannot be read (missing privileges) the store says so once in the log, ends the
//! subscriptions and gives none for a while; waiters then poll.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use lockwright_engine::election::{Leader, LeaderNews};
use lockwright_engine::{HandedLock, Hint, Resource, Timestamp};
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::CursorType;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use crate::failure::MongoFailure;
use crate::setup::command_code;
use crate::wakes::{self, CREATED, EXPIRES, FENCE, LEADERS, PLACE, RESOURCE, STORE, VALUE, Wakes};

/// What a tailed collection's documents say: hints for waiters, or news for observers.
pub(crate) trait Tailed: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// Sent at each opening of the cursor, and to a subscriber that fell behind.
    fn missed() -> Self;
    /// What `doc` says; `None` for a document that says nothing (a collection's seed).
    fn of(doc: &Document) -> Option<Self>;
}

impl Tailed for Hint {
    fn missed() -> Self {
        Hint::Missed
    }

    fn of(doc: &Document) -> Option<Self> {
        hint_of(doc)
    }
}

impl Tailed for LeaderNews {
    fn missed() -> Self {
        LeaderNews::Missed
    }

    fn of(doc: &Document) -> Option<Self> {
        news_of(doc)
    }
}

/// A subscription to a source.
type Subscription<T> = std::pin::Pin<Box<dyn futures_util::Stream<Item = T> + Send>>;

/// Hints a subscriber may fall behind by before it gets `Missed` instead.
const CAPACITY: usize = 1024;
/// The wakes a store remembers having passed on (more than a shard holds).
const MAX_SEEN: usize = 4096;
/// How long each `getMore` of the cursor waits for an insert. An insert wakes it at once
/// (the server wakes every cursor awaiting the shard, and those it does not match wait on),
/// so this only sets how often an idle cursor costs a command: with 64 waiting processes,
/// about one `getMore` per grant (10 s would save most of them, but a failed cursor is
/// then noticed up to 10 s late).
const AWAIT: Duration = Duration::from_secs(1);
/// The same for the leaders' cursor: an idle observing process costs a `getMore` every 10 s
/// (a failed cursor may be noticed that late; the observers' own reads cover it).
const LEADERS_AWAIT: Duration = Duration::from_secs(10);
/// The server's error code for a tailable cursor on a collection that is not capped
/// (BadValue).
const NOT_CAPPED: i32 = 2;
/// How long the store gives no subscription after finding the wakes unreadable.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(60);
/// The first pause before reopening a failed cursor; it doubles up to `MAX_REOPEN_PAUSE`.
const REOPEN_PAUSE: Duration = Duration::from_millis(50);
const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// Server error codes that mean the wakes cannot be read here, whatever is retried:
/// Unauthorized, IllegalOperation, CommandNotSupported.
const UNAVAILABLE_CODES: [i32; 3] = [13, 20, 115];

/// The store's side: the stream that is open, if any, and whether streams work at all.
#[derive(Debug)]
pub(crate) struct HintSource<T: Tailed = Hint> {
    /// This store's tag: its fair requests' places carry it, and its cursor hears the
    /// wakes that name it (and no other store's).
    tag: String,
    /// The collection tailed: a shard of wakes, or the leaders'.
    k: usize,
    /// Which of its documents the cursor returns.
    filter: Document,
    /// How long each `getMore` waits.
    await_time: Duration,
    /// Whether what the collection held before the cursor opened is left out.
    only_new: bool,
    /// Who goes without when the collection cannot be read (for the log).
    fallback: &'static str,
    hub: Mutex<Weak<Hub<T>>>,
    /// The wakes already passed on, by `_id`, across openings of the cursor.
    seen: Seen,
    /// Since when, and why, the wakes are known to be unreadable.
    unavailable: Arc<Mutex<Option<(Instant, String)>>>,
    /// Whether the unavailability was logged (once per store).
    logged: Arc<AtomicBool>,
}

/// One open (or opening) cursor and its subscribers.
#[derive(Debug)]
struct Hub<T> {
    shared: Arc<Shared<T>>,
    task: tokio::task::AbortHandle,
}

impl<T> Drop for Hub<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `_id`s of the wakes passed on (as text: BSON values are not hashable), oldest
/// first.
#[derive(Debug, Default)]
struct SeenIds {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl SeenIds {
    /// Whether `id` is new (it is remembered from now on).
    fn first_time(&mut self, id: String) -> bool {
        if !self.set.insert(id.clone()) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > MAX_SEEN
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

type Seen = Arc<Mutex<SeenIds>>;

#[derive(Debug)]
struct Shared<T> {
    sender: Mutex<Option<broadcast::Sender<T>>>,
    seen: Seen,
    /// The cursor is open (its first `Missed` was sent).
    open: AtomicBool,
}

impl<T> Shared<T> {
    fn send(&self, hint: T) {
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

impl HintSource<Hint> {
    /// A source with a fresh tag (an `ObjectId`'s hex: unique across processes), on the
    /// shard of wakes of that tag.
    pub(crate) fn new() -> Self {
        let tag = mongodb::bson::oid::ObjectId::new().to_hex();
        HintSource {
            k: wakes::shard_of(&tag),
            filter: doc! { STORE: tag.as_str() },
            await_time: AWAIT,
            only_new: false,
            fallback: "waiting acquires",
            tag,
            hub: Mutex::default(),
            seen: Seen::default(),
            unavailable: Arc::default(),
            logged: Arc::default(),
        }
    }
}

impl HintSource<LeaderNews> {
    /// A source of the news of every election, on the leaders' collection.
    pub(crate) fn leaders() -> Self {
        HintSource {
            tag: String::new(),
            k: LEADERS,
            filter: doc! { RESOURCE: { "$exists": true } },
            await_time: LEADERS_AWAIT,
            only_new: true,
            fallback: "observers",
            hub: Mutex::default(),
            seen: Seen::default(),
            unavailable: Arc::default(),
            logged: Arc::default(),
        }
    }
}

impl<T: Tailed> HintSource<T> {
    /// The tag of this store's places.
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// A subscription, opening the cursor if none is open; `None` while the wakes are
    /// known to be unreadable. Must be called within a tokio runtime.
    pub(crate) fn subscribe(&self, wakes: &Arc<Wakes>) -> Option<Subscription<T>> {
        if let Some((since, _)) = lock(&self.unavailable).as_ref()
            && since.elapsed() < UNAVAILABLE_FOR
        {
            return None;
        }
        let mut slot = lock(&self.hub);
        let hub = match slot.upgrade() {
            Some(hub) => hub,
            None => {
                let hub = self.open(Arc::clone(wakes));
                *slot = Arc::downgrade(&hub);
                hub
            }
        };
        drop(slot);
        let rx = lock(&hub.shared.sender).as_ref()?.subscribe();
        // Joining a cursor already open: a wake may have come since this store's refusal,
        // before the subscription.
        let missed_first = hub.shared.open.load(Ordering::Acquire);
        let hints = BroadcastStream::new(rx).map(move |received| {
            let _keep_open = &hub;
            received.unwrap_or_else(|_| T::missed())
        });
        Some(if missed_first {
            Box::pin(futures_util::stream::once(async { T::missed() }).chain(hints))
        } else {
            Box::pin(hints)
        })
    }

    /// Why the wakes cannot be read here, if the last attempt found so.
    pub(crate) fn unavailable(&self) -> Option<String> {
        lock(&self.unavailable).as_ref().map(|(_, why)| why.clone())
    }

    fn open(&self, wakes: Arc<Wakes>) -> Arc<Hub<T>> {
        let (tx, _) = broadcast::channel(CAPACITY);
        let shared = Arc::new(Shared {
            sender: Mutex::new(Some(tx)),
            seen: Arc::clone(&self.seen),
            open: AtomicBool::new(false),
        });
        let unavailable = Arc::clone(&self.unavailable);
        let logged = Arc::clone(&self.logged);
        let tail = Tail {
            k: self.k,
            filter: self.filter.clone(),
            await_time: self.await_time,
            only_new: self.only_new,
            fallback: self.fallback,
        };
        let task = tokio::spawn(run(wakes, tail, Arc::clone(&shared), unavailable, logged));
        Arc::new(Hub {
            shared,
            task: task.abort_handle(),
        })
    }
}

/// The tag a fair request's place carries: the store's tag, a dot, and the ticket's
/// [`LockId::place_tag`](lockwright_engine::LockId::place_tag) (64 bits of a hash, which
/// tell the waiters of one store apart). Empty for a request that
/// is not fair (it takes no place).
pub(crate) fn place_tag(store: &str, request: &lockwright_engine::LockRequest) -> String {
    request.fair.as_ref().map_or_else(String::new, |t| {
        format!("{store}.{}", t.id.place_tag().trim_start_matches('#'))
    })
}

/// What one wake hints: the place named by its tag (`#` and hex, as
/// [`LockId::place_tag`](lockwright_engine::LockId::place_tag) writes it) was handed the
/// resource's lock, and what it was handed when the wake says (all of its fence and
/// creation; its expiry if it has one). `None` for a document that is not a wake (the seed
/// of a shard).
fn hint_of(wake: &Document) -> Option<Hint> {
    let resource = wake.get_str(RESOURCE).ok()?;
    let place = wake.get_str(PLACE).ok()?;
    let date = |field| date_of(wake, field);
    let fence = wake.get_i64(FENCE).ok().and_then(|f| u64::try_from(f).ok());
    let grant = fence
        .zip(date(CREATED))
        .map(|(fence, created_at)| HandedLock {
            fence,
            created_at,
            expires_at: date(EXPIRES),
        });
    Some(Hint::First {
        resource: Resource::stored(resource),
        taken: false,
        place: Some(format!("#{place}")),
        grant,
    })
}

/// The date in `field` of a wake or news document, if it holds one.
fn date_of(doc: &Document, field: &str) -> Option<Timestamp> {
    match doc.get(field) {
        Some(Bson::DateTime(d)) => u64::try_from(d.timestamp_millis())
            .ok()
            .map(Timestamp::from_millis),
        _ => None,
    }
}

/// What news of a leader says: the election, who leads it since when with what fence and
/// value, and when the lease the news is of ends. `None` for a document that is not news
/// (the collection's seed).
fn news_of(news: &Document) -> Option<LeaderNews> {
    let resource = news.get_str(RESOURCE).ok()?;
    let fence = u64::try_from(news.get_i64(FENCE).ok()?).ok()?;
    let since = date_of(news, CREATED)?;
    let value = news.get_str(VALUE).ok().map(str::to_owned);
    // News from before leases were carried has none: taken as current, as it was.
    let until = date_of(news, EXPIRES);
    Some(LeaderNews::Leads {
        election: Resource::stored(resource),
        leader: Leader::new(value, fence, since),
        until,
    })
}

/// Opens the tailable cursor of `tail` on `coll` (creating the collection if it is not
/// known to exist; when only new documents are wanted, marking those there as seen first).
async fn open(
    wakes: &Wakes,
    coll: &mongodb::Collection<Document>,
    tail: &Tail,
    seen: &Seen,
) -> Result<mongodb::Cursor<Document>, mongodb::error::Error> {
    wakes.ensure(tail.k).await?;
    if tail.only_new {
        skip_existing(coll, &tail.filter, seen).await?;
    }
    coll.find(tail.filter.clone())
        .cursor_type(CursorType::TailableAwait)
        .max_await_time(tail.await_time)
        .await
}

/// Marks every document of `coll` that `filter` matches as passed on already: the news
/// that came before the cursor opens is not passed on (the `Missed` sent at the opening
/// has its subscribers read who leads instead, so that an old leader is not news).
async fn skip_existing(
    coll: &mongodb::Collection<Document>,
    filter: &Document,
    seen: &Seen,
) -> Result<(), mongodb::error::Error> {
    let mut existing = coll
        .find(filter.clone())
        .projection(doc! { "_id": 1 })
        .await?;
    while let Some(doc) = existing.next().await {
        let id = doc?.get("_id").map_or_else(String::new, Bson::to_string);
        lock(seen).first_time(id);
    }
    Ok(())
}

/// What a hub's cursor tails: collection `k` of the wakes, with `filter`.
struct Tail {
    k: usize,
    filter: Document,
    /// How long each `getMore` waits.
    await_time: Duration,
    /// Whether only what is inserted once the cursor opens is passed on.
    only_new: bool,
    fallback: &'static str,
}

/// The hub's task: open the cursor, send `Missed`, pass each wake not seen before on as a
/// hint; when the cursor ends or fails, pause and reopen it; stop for good where the wakes
/// cannot be read. The pause doubles while reopened cursors fail before delivering
/// anything. A cursor that ends without an error found its shard empty: it is seeded.
async fn run<T: Tailed>(
    wakes: Arc<Wakes>,
    tail: Tail,
    shared: Arc<Shared<T>>,
    unavailable: Arc<Mutex<Option<(Instant, String)>>>,
    logged: Arc<AtomicBool>,
) {
    let k = tail.k;
    let coll = wakes.shard(k);
    let mut pause = REOPEN_PAUSE;
    loop {
        let opened = open(&wakes, &coll, &tail, &shared.seen).await;
        let failed = match opened {
            Ok(mut cursor) => {
                *lock(&unavailable) = None;
                shared.open.store(true, Ordering::Release);
                shared.send(T::missed());
                let failed = loop {
                    match cursor.next().await {
                        Some(Ok(wake)) => {
                            pause = REOPEN_PAUSE;
                            let id = wake.get("_id").map_or_else(String::new, Bson::to_string);
                            if lock(&shared.seen).first_time(id)
                                && let Some(hint) = T::of(&wake)
                            {
                                shared.send(hint);
                            }
                        }
                        Some(Err(e)) => break Some(e),
                        None => break None,
                    }
                };
                shared.open.store(false, Ordering::Release);
                if failed.is_none()
                    && let Err(e) = wakes.seed(k).await
                {
                    tracing::debug!(error = %MongoFailure::new(&e), "could not seed the wakes");
                }
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
                        who = tail.fallback,
                        "the wakes cannot be read: these will poll"
                    );
                }
                *lock(&unavailable) = Some((Instant::now(), why));
                // Ends every subscription.
                lock(&shared.sender).take();
                return;
            }
            if command_code(&e) == Some(NOT_CAPPED) {
                // The shard was dropped and made anew, plain, by a write: capped again.
                if let Err(e) = wakes.recap(k).await {
                    tracing::debug!(error = %MongoFailure::new(&e), "could not cap the wakes again");
                }
            }
            tracing::debug!(error = %MongoFailure::new(&e), "the wakes cursor failed; reopening it");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_REOPEN_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_hints_the_place_it_names() {
        let wake = doc! { "_id": 1, STORE: "65a1", PLACE: "3f9a", RESOURCE: "r" };
        assert_eq!(
            hint_of(&wake),
            Some(Hint::First {
                resource: Resource::new("r").unwrap(),
                taken: false,
                place: Some("#3f9a".into()),
                grant: None,
            })
        );
        let at = mongodb::bson::DateTime::from_millis(5_000);
        let handed = doc! { "_id": 2, STORE: "65a1", PLACE: "3f9a", RESOURCE: "r", FENCE: 7_i64, CREATED: at };
        let Some(Hint::First { grant, .. }) = hint_of(&handed) else {
            panic!("a wake");
        };
        assert_eq!(
            grant,
            Some(HandedLock {
                fence: 7,
                created_at: Timestamp::from_millis(5_000),
                expires_at: None,
            })
        );
        assert_eq!(hint_of(&doc! { STORE: "" }), None, "a shard's seed");
    }

    #[test]
    fn a_wake_is_passed_on_once() {
        let mut seen = SeenIds::default();
        assert!(seen.first_time("a".into()));
        assert!(!seen.first_time("a".into()));
        for i in 0..MAX_SEEN {
            assert!(seen.first_time(i.to_string()));
        }
        assert!(
            seen.first_time("a".into()),
            "forgotten after MAX_SEEN others"
        );
    }
}
