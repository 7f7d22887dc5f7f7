//! Helpers for tests that need a real MongoDB (feature `test-util`; never for production).
//!
//! The server comes from `MONGODB_URI`: the test command (`scripts/test`) starts a
//! throwaway replica set with `scripts/mongod.sh` and sets it; users can point it at their
//! own deployment. Without it, tests fail with a message saying so: they never pass
//! vacuously.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lockwright_engine::ManualClock;
use mongodb::Client;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document};
use mongodb::error::ErrorKind;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ClientOptions;

use crate::MongoStore;

/// The database test collections are created in, unless `LOCKWRIGHT_TEST_DATABASE` names
/// another (the kill matrix runs MongoDB harnesses side by side, each on its own).
pub const TEST_DATABASE: &str = "lockwright_test";

/// The database test collections are created in: `LOCKWRIGHT_TEST_DATABASE`, or
/// [`TEST_DATABASE`].
#[must_use]
pub fn test_database() -> String {
    std::env::var("LOCKWRIGHT_TEST_DATABASE").unwrap_or_else(|_| TEST_DATABASE.to_owned())
}

/// The server's URI from `MONGODB_URI`.
///
/// # Panics
/// When `MONGODB_URI` is not set: a test that needs MongoDB must not pass without one.
#[must_use]
pub fn uri() -> String {
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => uri,
        _ => panic!(
            "MONGODB_URI is not set. These tests need a real MongoDB replica set: run them \
             through `scripts/test` (which starts a throwaway mongod via scripts/mongod.sh), \
             or `scripts/mongod.sh run -- cargo test ...`, or set MONGODB_URI to your own \
             deployment."
        ),
    }
}

/// Driver options for the test server, failing fast when the server is unreachable.
///
/// # Panics
/// When the URI cannot be parsed.
pub async fn options() -> ClientOptions {
    let mut options = ClientOptions::parse(uri())
        .await
        .expect("MONGODB_URI must be a valid MongoDB URI");
    options
        .server_selection_timeout
        .get_or_insert(Duration::from_secs(10));
    options
}

/// The commands a client started (the driver's command monitoring), in order, with their
/// bodies, and how each ended: tests count round trips with it, and check that a command a
/// fail point targets did fail.
#[derive(Clone, Default)]
pub struct CommandLog(Arc<Mutex<Recorded>>);

/// What a [`CommandLog`] holds: the commands started since the last take (request id, name,
/// body), and the ends of the commands not yet taken with their outcome, by request id.
#[derive(Default)]
struct Recorded {
    started: Vec<(i32, String, Document)>,
    ended: HashMap<i32, Outcome>,
}

/// How a recorded command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered it with success.
    Succeeded,
    /// It failed: with the server's error code when the server refused it, with none when the
    /// driver gave up on it (a network error, a timeout).
    Failed(Option<i32>),
}

/// The names of the commands only: their bodies carry lock ids, which no output shows.
impl std::fmt::Debug for CommandLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_list()
            .entries(log.started.iter().map(|(_, name, _)| name))
            .finish()
    }
}

impl CommandLog {
    /// Records every command that clients built from `options` start from now on, and how
    /// each ends.
    pub fn attach(options: &mut ClientOptions) -> Self {
        let log = CommandLog::default();
        let sink = log.clone();
        options.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
            let mut log = sink.0.lock().unwrap_or_else(PoisonError::into_inner);
            match e {
                CommandEvent::Started(started) => {
                    log.started
                        .push((started.request_id, started.command_name, started.command))
                }
                CommandEvent::Succeeded(ended) => {
                    log.ended.insert(ended.request_id, Outcome::Succeeded);
                }
                CommandEvent::Failed(ended) => {
                    let code = match &*ended.failure.kind {
                        ErrorKind::Command(refused) => Some(refused.code),
                        _ => None,
                    };
                    log.ended.insert(ended.request_id, Outcome::Failed(code));
                }
                _ => {}
            }
        }));
        log
    }

    /// The commands (name and body) started since the last take, in order.
    pub fn take_commands(&self) -> Vec<(String, Document)> {
        self.take_outcomes()
            .into_iter()
            .map(|(name, body, _)| (name, body))
            .collect()
    }

    /// The names of the commands started since the last take, in order (also to forget
    /// them, before the commands a test counts).
    pub fn take(&self) -> Vec<String> {
        self.take_outcomes()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect()
    }

    /// The names of the commands started since the last take, in order, left in the log (to
    /// wait for a command and then take it with its outcome).
    pub fn peek(&self) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        log.started
            .iter()
            .map(|(_, name, _)| name.clone())
            .collect()
    }

    /// How many of the commands named `name` started since the last take have ended (left
    /// in the log).
    pub fn answered(&self, name: &str) -> usize {
        let log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        log.started
            .iter()
            .filter(|(id, n, _)| n == name && log.ended.contains_key(id))
            .count()
    }

    /// The commands (name and body) started since the last take, in order, each with how it
    /// ended: none while it is still running.
    pub fn take_outcomes(&self) -> Vec<(String, Document, Option<Outcome>)> {
        let mut log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let started = std::mem::take(&mut log.started);
        // Request ids grow: an end kept with a lower id than every command taken now belongs
        // to one an earlier take returned while it ran, which no take returns again.
        if let Some(first) = started.iter().map(|(id, _, _)| *id).min() {
            log.ended.retain(|id, _| *id >= first);
        }
        started
            .into_iter()
            .map(|(id, name, body)| {
                let outcome = log.ended.remove(&id);
                (name, body, outcome)
            })
            .collect()
    }
}

/// A client on the test server whose commands are recorded.
///
/// # Panics
/// When the URI cannot be parsed.
pub async fn monitored_client() -> (Client, CommandLog) {
    let mut options = options().await;
    let log = CommandLog::attach(&mut options);
    let client = Client::with_options(options).expect("client options are valid");
    (client, log)
}

/// A store on a fresh, uniquely named collection with its indexes created, on the server's
/// clock or on `clock`.
///
/// # Panics
/// When the server cannot be reached or the indexes cannot be created.
pub async fn fresh_store(clock: Option<Arc<ManualClock>>) -> MongoStore {
    let client = Client::with_options(options().await).expect("client options are valid");
    fresh_store_on(&client, clock).await
}

/// As [`fresh_store`], on an existing client (say, one with command monitoring).
///
/// # Panics
/// As [`fresh_store`].
pub async fn fresh_store_on(client: &Client, clock: Option<Arc<ManualClock>>) -> MongoStore {
    let name = format!("t_{}", ObjectId::new().to_hex());
    let mut store =
        MongoStore::from_collection(client.database(&test_database()).collection(&name));
    if let Some(clock) = clock {
        store = store.with_clock(clock);
    }
    store
        .create_indexes()
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test MongoDB at MONGODB_URI: {e:?}"));
    store
}

/// Drops the store's collection and shuts its client down (the driver wants an explicit
/// shutdown before the runtime ends).
pub async fn teardown(store: &MongoStore) {
    // Dropping is best effort: a failure here must not hide the test's own outcome.
    let _ = store.collection().drop().await;
    let db = store.client().database(&store.collection().namespace().db);
    let shards = store.wake_collections();
    if let Ok(names) = db.list_collection_names().await {
        for name in names.iter().filter(|n| shards.contains(n)) {
            let _ = db.collection::<Document>(name).drop().await;
        }
    }
    store.client().clone().shutdown().await;
}

/// The whole lock table as stored, decoded with the store's own decoder, for comparison
/// with the engine's table after every step of a differential test.
///
/// # Panics
/// When the collection cannot be read or holds a malformed document.
pub async fn snapshot(store: &MongoStore) -> lockwright_engine::LockTable {
    use futures_util::TryStreamExt;
    let docs: Vec<mongodb::bson::Document> = store
        .collection()
        .find(mongodb::bson::doc! {})
        .await
        .expect("read the lock collection")
        .try_collect()
        .await
        .expect("read the lock collection");
    let resources = docs
        .iter()
        .map(crate::schema::decode)
        .collect::<Result<Vec<_>, _>>()
        .expect("stored documents decode");
    lockwright_engine::LockTable::from_resources(resources)
}

/// The stages of the winning plan(s) in `explain` output, depth first, each with its index
/// name when it has one (`IXSCAN(resource_1)`, `COLLSCAN`, ...).
#[must_use]
pub fn winning_stages(explained: &Document) -> Vec<String> {
    fn stages(b: &Bson, out: &mut Vec<String>) {
        match b {
            Bson::Document(d) => {
                if let Ok(stage) = d.get_str("stage") {
                    out.push(match d.get_str("indexName") {
                        Ok(index) => format!("{stage}({index})"),
                        Err(_) => stage.to_string(),
                    });
                }
                d.values().for_each(|v| stages(v, out));
            }
            Bson::Array(items) => items.iter().for_each(|v| stages(v, out)),
            _ => {}
        }
    }
    fn winning(b: &Bson, out: &mut Vec<String>) {
        match b {
            Bson::Document(d) => {
                for (k, v) in d {
                    if k == "winningPlan" {
                        stages(v, out);
                    } else {
                        winning(v, out);
                    }
                }
            }
            Bson::Array(items) => items.iter().for_each(|v| winning(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    winning(&Bson::Document(explained.clone()), &mut out);
    out
}

/// The server-side validity test of a lock document (the pipelines' copy of the decoder's
/// checks), as an aggregation expression: `{ $project: { ok: valid_expression() } }` tells
/// whether the grant pipelines would decide on a document.
#[must_use]
pub fn valid_expression() -> Bson {
    crate::pipeline::valid()
}

/// Whether the store's decoder accepts `doc`, and if not, the field it names.
///
/// # Errors
/// The decoder's complaint.
pub fn decode_check(doc: &Document) -> Result<(), lockwright_engine::MalformedDocument> {
    crate::schema::decode(doc).map(|_| ())
}

/// The exclusive slot of a resource document when nobody holds it, as the store writes it
/// (for tests and benches that insert documents of the store's schema).
#[must_use]
pub fn empty_exclusive() -> Document {
    crate::schema::empty_exclusive()
}

/// A lock request on `resource` for `lock_id`, with `ttl`.
///
/// # Panics
/// When a name is refused: tests pass valid ones.
#[must_use]
pub fn request(
    resource: &str,
    lock_id: &str,
    ttl: Option<Duration>,
) -> lockwright_engine::LockRequest {
    let mut details = lockwright_engine::LockOptions::new();
    details.ttl = ttl;
    lockwright_engine::LockRequest::new(resource, lock_id, &details)
        .unwrap_or_else(|e| panic!("a test request must be valid: {e}"))
}

/// The lock id `s`.
///
/// # Panics
/// When `s` is refused as a lock id.
#[must_use]
pub fn id(s: &str) -> lockwright_engine::LockId {
    lockwright_engine::LockId::new(s)
        .unwrap_or_else(|e| panic!("a test lock id must be valid: {e}"))
}

/// A TTL of `secs` seconds.
///
/// # Panics
/// When `secs` is out of range.
#[must_use]
pub fn ttl(secs: u64) -> lockwright_engine::Ttl {
    lockwright_engine::Ttl::new(Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("a test TTL must be valid: {e}"))
}
