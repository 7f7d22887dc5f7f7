//! The MongoDB backend of Lockwright, on the official `mongodb` driver.
//!
//! - **One round trip per lock.** `xlock` and `slock` are each a single
//!   `findAndModify` with upsert on the resource, whose update pipeline evaluates the lock
//!   rule with the server's clock and applies the grant only where it allows, so the server
//!   decides atomically; the document returned says whether this request was granted.
//!   Concurrent first grants on a new resource race on the unique index, and the server
//!   retries the loser as an update. The one-lock commands' pipelines are built once per
//!   shape and sent encoded, with the request's inputs bound by `let`, so a call costs the
//!   client about what a bare write does.
//! - **Server time.** Every time decision and every stored timestamp uses the server's clock
//!   (`$$NOW` in pipelines, `hello.localTime` where a literal instant is needed). Tests may
//!   replace it with a hand-driven clock (feature `test-util`); the pipelines stay the same.
//! - **Group operations in constant round trips.** `unlock` and `renew` are one transaction
//!   (read the group, decide with the engine, one `updateMany`, commit): three commands
//!   whatever the group's size, all or nothing. `purge` reads the expired groups, then
//!   removes them in transactions of [`DEFAULT_PURGE_BATCH`] groups (a document left with
//!   no lock is deleted there, the others rewritten), then deletes any other document that
//!   holds no lock: its command count grows with the number of batches only.
//! - **Schema** shared with square/mongo-lock (one document per resource; the module
//!   `schema` in the source lists every field): the Go library pointed at the same
//!   collection keeps working. What others wrote is read leniently where no rule depends on
//!   it (empty or over-long lock ids, details of any type) and strictly where one does; a
//!   document that fails the strict part is never written, and the operations over many
//!   documents finish on the others before naming it ([`Error::Skipped`]).
//! - **Failures.** What is safe to retry is retried within [`RETRY_WINDOW`]; a write whose
//!   outcome is unknown is a `Backend` error that says so, never a refusal. Each lock
//!   operation (`xlock`, `slock`, `unlock`, `unlock_one`, `renew`, `renew_one`,
//!   `renew_each`) and `create_indexes` gives up after the driver's server selection
//!   timeout plus [`RETRY_WINDOW`] in all, whatever its steps wait for; `status` and `purge`,
//!   whose work grows with the collection, are bounded per command.
//!
//! A replica set (or sharded cluster) is required, because transactions make the group
//! operations atomic and majority writes make grants survive a failover; a one-member
//! replica set is enough. The store also refuses to run without a unique index on
//! `resource` that it can trust ([`MongoStore::create_indexes`] makes one, compatible with
//! the Go library's), and names it as the `hint` of every grant, so that a grant fails
//! rather than inserts a second document for a resource once the index is gone.
//!
//! **Time across failovers.** Each member has its own wall clock, and a failover switches
//! from one to another. Expiry is judged by the primary's (`$$NOW`), with a takeover grace
//! ([`MongoStore::with_takeover_grace`]) that covers members whose readings disagree: a lock
//! blocks others until `expiresAt + grace <= now`. Fences are taken from the replica set's
//! cluster time, which no failover moves back: a grant's fence is `max(lastFence + 1,
//! seconds * 2^22 + increment)`, and purge deletes an emptied document only once its
//! `lastFence` is below that floor, so fences keep increasing across deletion and failover.

mod command;
mod failure;
pub mod fenced;
mod group;
mod hints;
#[cfg(lockwright_mutants)]
pub mod mutants;
#[cfg(not(lockwright_mutants))]
mod mutants;
mod names;
mod one_lock;
mod pipeline;
mod purge;
mod queue;
mod read;
mod retry;
mod schema;
mod setup;
mod status;
#[cfg(feature = "test-util")]
pub mod test_support;
mod wakes;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mongodb::bson::{Bson, Document};
use mongodb::options::{ClientOptions, CollectionOptions, WriteConcern};
use mongodb::{Client, Collection};

pub use failure::MongoFailure;
pub use fenced::{DEFAULT_FENCE_FIELD, FencedCollection};
use lockwright_engine::election::{Leader, LeaderNews, LeaderStream};
use lockwright_engine::{
    Clock, DEFAULT_TAKEOVER_GRACE, Error, HintStream, LockId, LockRequest, LockStatus, LockStore,
    Notices, Query, Reading, Release, Released, Renewal, Resource, Result, Timestamp, Ttl,
};
pub use retry::RETRY_WINDOW;
pub use setup::CollectionUse;

/// Lock groups removed per purge transaction unless [`MongoStore::with_purge_batch`] says
/// otherwise.
pub const DEFAULT_PURGE_BATCH: usize = 500;

/// Lock documents in a MongoDB collection.
#[derive(Debug)]
pub struct MongoStore {
    client: Client,
    coll: Collection<Document>,
    write_concern: WriteConcern,
    /// `write_concern` as the one-lock commands send it (`None`: the server's default).
    raw_write_concern: Option<mongodb::bson::RawDocumentBuf>,
    /// The one-lock commands' pipelines, built once per shape.
    templates: command::Templates,
    clock: Option<Arc<dyn Clock>>,
    purge_batch: usize,
    /// The name of the trusted unique index on `resource`, once the set-up was checked.
    ready: Mutex<Option<Arc<str>>>,
    /// Whether the set-up check ever passed: from then on the collection is in use, and a
    /// collection found missing (dropped) is refused, never created afresh under holders
    /// that still trust their locks.
    was_ready: std::sync::atomic::AtomicBool,
    /// The longest a lock operation runs: the server selection timeout plus [`RETRY_WINDOW`].
    bound: Duration,
    /// How long past its expiry a lock that was not released still blocks other grants.
    grace: Duration,
    /// The wakes cursor behind [`LockStore::hints`].
    hints: hints::HintSource,
    /// The capped collections a hand-over's wakes go to.
    wakes: Arc<wakes::Wakes>,
    /// The leaders' cursor behind [`LockStore::leaders`].
    leaders: hints::HintSource<LeaderNews>,
    /// The elections whose leaders this store announces ([`LockStore::announce_leaders`]).
    elections: Mutex<HashSet<Resource>>,
}

/// The server selection timeout the driver uses unless the URI says otherwise.
const DEFAULT_SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a lock operation was given up: it ran for its whole bound.
#[derive(Debug, thiserror::Error)]
#[error(
    "gave up after {0:?} (the server selection timeout plus the retry window): no server \
     answered in time"
)]
struct GaveUp(Duration);

impl MongoStore {
    /// Connects to `uri` (TLS, auth and timeouts as the URI says) and uses `collection` in
    /// `database`, with majority write concern.
    ///
    /// # Errors
    /// `InvalidArgument` naming `database` or `collection` for a name MongoDB refuses
    /// (empty, `$` in a collection name, a `system.` collection, ...); `Backend` when the
    /// URI cannot be parsed or resolved. The server itself is first contacted by the first
    /// operation.
    pub async fn connect(uri: &str, database: &str, collection: &str) -> Result<Self> {
        if let Some((field, why)) = names::refused(database, collection) {
            return Err(Error::invalid(field, why));
        }
        let options = ClientOptions::parse(uri)
            .await
            .map_err(|e| failure::backend("connect", &e))?;
        let selection = options
            .server_selection_timeout
            .unwrap_or(DEFAULT_SERVER_SELECTION_TIMEOUT);
        let client = Client::with_options(options).map_err(|e| failure::backend("connect", &e))?;
        let mut store = Self::from_collection(client.database(database).collection(collection));
        store.bound = selection.saturating_add(RETRY_WINDOW);
        Ok(store)
    }

    /// Uses an existing collection handle (and its client), with majority write concern
    /// whatever the handle's own is: a grant acknowledged by fewer members can be rolled
    /// back by a failover and granted again. [`MongoStore::with_write_concern`] chooses
    /// another. Lock operations give up after the driver's default server selection timeout
    /// (30 s) plus [`RETRY_WINDOW`] (the client's own timeout cannot be read back from it).
    #[must_use]
    pub fn from_collection(coll: Collection<Document>) -> Self {
        let write_concern = WriteConcern::majority();
        let client = coll.client().clone();
        let wakes = Arc::new(wakes::Wakes::new(&coll));
        let store = MongoStore {
            client,
            coll,
            write_concern: write_concern.clone(),
            raw_write_concern: None,
            templates: command::Templates::default(),
            clock: None,
            purge_batch: DEFAULT_PURGE_BATCH,
            ready: Mutex::new(None),
            was_ready: std::sync::atomic::AtomicBool::new(false),
            bound: DEFAULT_SERVER_SELECTION_TIMEOUT.saturating_add(RETRY_WINDOW),
            grace: DEFAULT_TAKEOVER_GRACE,
            hints: hints::HintSource::new(),
            wakes,
            leaders: hints::HintSource::leaders(),
            elections: Mutex::default(),
        };
        store.with_write_concern(write_concern)
    }

    /// Uses `write_concern` for every write (and for commits).
    #[must_use]
    pub fn with_write_concern(mut self, write_concern: WriteConcern) -> Self {
        let ns = self.coll.namespace();
        let options = CollectionOptions::builder()
            .write_concern(write_concern.clone())
            .build();
        self.coll = self
            .client
            .database(&ns.db)
            .collection_with_options(&ns.coll, options);
        self.raw_write_concern = command::write_concern(&write_concern);
        self.write_concern = write_concern;
        self
    }

    /// Replaces the server's clock by `clock` in every pipeline and query: **for tests
    /// only** (feature `test-util`), so that expiry can be driven without sleeping (a
    /// [`ManualClock`](lockwright_engine::ManualClock)). The pipelines are the same ones that
    /// run with the server's clock, given its readings as literals.
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Uses takeover `grace` instead of [`DEFAULT_TAKEOVER_GRACE`]: a lock that expired
    /// without being released blocks other grants, counts towards shared limits and is
    /// spared by purge until `expiresAt + grace <= now` on the primary's clock, and its
    /// holder may renew it until then. It must cover how far the clock of any member that may
    /// become primary runs ahead of the others' (`lockwright doctor` measures it); every
    /// client and purger of the collection should use the same grace. Zero gives the plain
    /// rule, safe only while the primary's clock never changes.
    ///
    /// # Errors
    /// `InvalidArgument` naming `takeover_grace` when it is above
    /// [`MAX_TAKEOVER_GRACE`](lockwright_engine::MAX_TAKEOVER_GRACE).
    pub fn with_takeover_grace(mut self, grace: Duration) -> Result<Self> {
        self.grace = lockwright_engine::check_takeover_grace(grace)?;
        Ok(self)
    }

    /// The takeover grace.
    #[must_use]
    pub fn takeover_grace(&self) -> Duration {
        self.grace
    }

    /// The capped collections (in the lock collection's database) that hand-overs send
    /// their wakes to, one per shard: `<collection>.wakes.<k>` for `k` in `0`..`f` (created
    /// on first use), and last the one the news of leaders goes to,
    /// `<collection>.wakes.leaders`. A waiting process keeps one tailable cursor on the
    /// shard of its store ([`MongoStore::wake_collection`]) while a waiter of it is near the
    /// head of a line, and an observing process one on the leaders' while it observes.
    #[must_use]
    pub fn wake_collections(&self) -> Vec<String> {
        self.wakes.shard_names()
    }

    /// The wake collection this store's waiters are woken through (one of
    /// [`MongoStore::wake_collections`], by the store's tag).
    #[must_use]
    pub fn wake_collection(&self) -> String {
        self.wakes.shard_name(wakes::shard_of(self.tag()))
    }

    /// Why this store's wakes could not be read, if its last attempt found them unreadable
    /// (missing privileges): its waiting acquires then only poll.
    #[must_use]
    pub fn hints_unavailable(&self) -> Option<String> {
        self.hints.unavailable()
    }

    /// Removes at most `groups` lock groups per purge transaction.
    ///
    /// # Errors
    /// `InvalidArgument` naming `purge_batch` when zero.
    pub fn with_purge_batch(mut self, groups: usize) -> Result<Self> {
        if groups == 0 {
            return Err(Error::invalid("purge_batch", "must be at least 1"));
        }
        self.purge_batch = groups;
        Ok(self)
    }

    /// The collection the locks live in.
    #[must_use]
    pub fn collection(&self) -> &Collection<Document> {
        &self.coll
    }

    /// The driver client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs the lock operation `op` for at most its bound; past it, `op` fails with an
    /// unknown outcome (a write may be under way).
    async fn bounded<T>(
        &self,
        op: &'static str,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(self.bound, work)
            .await
            .unwrap_or_else(|_| Err(Error::backend(op, GaveUp(self.bound))))
    }

    /// `now` inside pipelines: `$$NOW`, or the override.
    fn now_expr(&self) -> Bson {
        match &self.clock {
            Some(c) => pipeline::date(c.now()),
            None => Bson::String(pipeline::SERVER_NOW.to_string()),
        }
    }

    /// The fence floor inside pipelines: the one rule on the cluster time, or under the
    /// override on the engine's reading of it at the override's `now`.
    fn floor_expr(&self) -> Bson {
        let time = match &self.clock {
            Some(c) => pipeline::cluster_time_at(c.now()),
            None => Bson::String(pipeline::CLUSTER_TIME.to_owned()),
        };
        pipeline::cluster_time_floor(&time)
    }

    /// The tag of this store's places in queues (its cursor hears the wakes for them).
    fn tag(&self) -> &str {
        self.hints.tag()
    }

    /// Every clock a pipeline reads, and the grace.
    fn readings(&self) -> pipeline::Readings {
        pipeline::Readings {
            now: self.now_expr(),
            floor: self.floor_expr(),
            grace_ms: pipeline::ms(self.grace),
            nonce: mongodb::bson::oid::ObjectId::new().to_hex(),
        }
    }

    /// `now` as a value: the server's `hello.localTime`, or the override.
    async fn now_value(&self, op: &'static str) -> Result<Timestamp> {
        if let Some(c) = &self.clock {
            return Ok(c.now());
        }
        let hello = self.hello(op).await?;
        match hello.get("localTime") {
            Some(Bson::DateTime(dt)) => u64::try_from(dt.timestamp_millis())
                .map(Timestamp::from_millis)
                .map_err(|_| Error::backend(op, "the server's clock is before the Unix epoch")),
            _ => Err(Error::backend(
                op,
                "the server's hello reply has no localTime",
            )),
        }
    }
}

// Each operation opens its span here and runs in its module: `one_lock` (lock,
// renew_each of one, release of one lock: one `findAndModify` each), `group` (release of a
// group, renew, renew_each: a transaction over the group), `queue` (release of a place,
// waiters), `status`, `purge`, and `setup` (create_indexes, not part of the port).
impl LockStore for MongoStore {
    #[tracing::instrument(
        name = "mongo.lock",
        skip_all,
        fields(op = request.access.operation(), resource = %request.resource)
    )]
    async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
        let op = request.access.operation();
        self.bounded(op, one_lock::lock(self, request)).await
    }

    #[tracing::instrument(name = "mongo.release", skip_all)]
    async fn release(&self, what: Release<'_>) -> Result<Released> {
        match what {
            Release::Group(lock_id) => self
                .bounded("unlock", group::unlock(self, lock_id))
                .await
                .map(Released::locks),
            Release::Lock { resource, lock_id } => self
                .bounded("unlock", one_lock::unlock_one(self, resource, lock_id))
                .await
                .map(|l| Released::locks(l.into_iter().collect())),
            Release::Place { resource, ticket } => self
                .bounded("leave_queue", queue::leave_queue(self, resource, ticket))
                .await
                .map(Released::place),
        }
    }

    #[tracing::instrument(name = "mongo.renew", skip_all, fields(ttl_ms = ttl.as_millis()))]
    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.bounded("renew", group::renew(self, lock_id, ttl, margin))
            .await
    }

    /// One lock: one `findAndModify`. More: one transaction over their documents.
    #[tracing::instrument(name = "mongo.renew_each", skip_all, fields(locks = locks.len()))]
    async fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        match locks {
            [one] => Ok(vec![
                self.bounded("renew", one_lock::renew_one(self, one, margin))
                    .await,
            ]),
            _ => {
                self.bounded("renew", group::renew_many(self, locks, margin))
                    .await
            }
        }
    }

    #[tracing::instrument(name = "mongo.set_comment", skip_all, fields(resource = %resource))]
    async fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        self.bounded(
            "set_comment",
            one_lock::set_comment(self, resource, lock_id, comment),
        )
        .await
    }

    #[tracing::instrument(name = "mongo.read", skip_all)]
    async fn read(&self, query: Query<'_>) -> Result<Reading> {
        match query {
            Query::Locks(filter) => status::status(self, filter).await.map(Reading::Locks),
            Query::Waiters(resource) => self
                .bounded("waiters", queue::waiters(self, resource))
                .await
                .map(Reading::Waiters),
            Query::Summary => self
                .bounded("summary", status::summary(self))
                .await
                .map(Reading::Summary),
        }
    }

    #[tracing::instrument(name = "mongo.purge", skip_all)]
    async fn purge(&self) -> Result<Vec<LockStatus>> {
        purge::purge(self).await
    }

    /// Hints and news from tailable cursors on this store's capped collections: see
    /// [`Notices`] for `MongoStore`.
    fn notices(&self) -> Option<&dyn Notices> {
        Some(self)
    }
}

impl Notices for MongoStore {
    /// Hints from one tailable cursor on this store's wake collection, shared by every
    /// subscription of this store (see the modules `hints` and `wakes` in the source):
    /// [`Hint::First`](lockwright_engine::Hint::First) naming the place when a write handed
    /// the lock to a place of this store. `None` for a minute after the wakes turned out
    /// unreadable here (logged once; [`MongoStore::hints_unavailable`] says why).
    fn hints(&self) -> Option<HintStream> {
        self.hints.subscribe(&self.wakes)
    }

    /// From now on, each grant of `election`'s exclusive lock made here, and each
    /// hand-over of it that a write made here did, is news: one insert into the leaders'
    /// collection (`w: 1`, after the write's reply, not awaited by the operation).
    fn announce_leaders(&self, election: &Resource) {
        self.elections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(election.clone());
    }

    /// News from one tailable cursor on the leaders' collection, shared by every
    /// subscription of this store whatever the elections observed. `None` for a minute
    /// after the collection turned out unreadable here (logged once).
    fn leaders(&self) -> Option<LeaderStream> {
        self.leaders.subscribe(&self.wakes)
    }
}

impl MongoStore {
    /// Creates the unique index on `resource` with the Go library's options (`unique`,
    /// `sparse`), unless a unique index on `resource` that can be trusted is there already,
    /// and the four plain indexes both libraries use. Idempotent. The Go library's
    /// `CreateIndexes` succeeds on a collection set up here, and this on one set up by the
    /// Go library. A new collection gets its unique index on first use anyway.
    ///
    /// # Errors
    /// `Misconfigured` when an index on `resource` that cannot be trusted is in the way (say
    /// a partial or collated one); `Backend` otherwise.
    #[tracing::instrument(name = "mongo.create_indexes", skip_all)]
    pub async fn create_indexes(&self) -> Result<()> {
        self.bounded("create_indexes", setup::create_indexes(self))
            .await
    }
}

impl MongoStore {
    /// Announces those of `leaders` whose elections this store announces, in a task of
    /// their own (the operation that made them does not wait for it).
    fn announce(&self, leaders: impl IntoIterator<Item = (Resource, Leader, Option<Timestamp>)>) {
        let leaders: Vec<(Resource, Leader, Option<Timestamp>)> = {
            let elections = self
                .elections
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if elections.is_empty() {
                return;
            }
            leaders
                .into_iter()
                .filter(|(r, _, _)| elections.contains(r))
                .collect()
        };
        if !leaders.is_empty() {
            let wakes = Arc::clone(&self.wakes);
            tokio::spawn(async move { wakes.announce(leaders).await });
        }
    }
}
