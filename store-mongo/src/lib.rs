//! The MongoDB backend of Lockwright, on the official `mongodb` driver.
//!
//! - **One round trip per lock.** `xlock` and `slock` are each a single
//!   `findAndModify` with upsert on the resource, whose update pipeline evaluates the lock
//!   rule with the server's clock and applies the grant only where it allows, so the server
//!   decides atomically; the document returned says whether this request was granted.
//!   Concurrent first grants on a new resource race on the unique index, and the server
//!   retries the loser as an update.
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
//!   outcome is unknown is a `Backend` error that says so, never a refusal.
//!
//! A replica set (or sharded cluster) is required, because transactions make the group
//! operations atomic and majority writes make grants survive a failover; a one-member
//! replica set is enough. The store also refuses to run without a unique index on
//! `resource` that it can trust ([`LockStore::create_indexes`] makes one, compatible with
//! the Go library's), and names it as the `hint` of every grant, so that a grant fails
//! rather than inserts a second document for a resource once the index is gone.
//!
//! **Fences across deletion.** Purge deletes an emptied document only once
//! `now_ms * 1024` exceeds its `lastFence`, and a new document starts its fences at that
//! floor; fences therefore keep increasing as long as the server's clock does not go
//! backwards, across failovers included.

mod failure;
mod names;
mod pipeline;
mod schema;
#[cfg(feature = "test-util")]
pub mod test_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, RawDocumentBuf, doc};
use mongodb::error::{
    ErrorKind, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT, WriteFailure,
};
use mongodb::options::{
    CollectionOptions, Hint, IndexOptions, ReadConcern, ReturnDocument, TransactionOptions,
    WriteConcern,
};
use mongodb::{Client, ClientSession, Collection, IndexModel};
use tokio::time::Instant;

pub use failure::MongoFailure;
use failure::{outcome_unknown, retryable};
use lockwright_engine::table::{self, sort_purged};
use lockwright_engine::{
    Error, Filter, LockId, LockRequest, LockStatus, LockStore, LockTable, MalformedDocument,
    ManualClock, Mode, Renewal, Resource, ResourceState, SharedLimit, Timestamp, Ttl,
};

/// Lock groups removed per purge transaction unless [`MongoStore::with_purge_batch`] says
/// otherwise.
pub const DEFAULT_PURGE_BATCH: usize = 500;

/// Purge batch transactions run concurrently (batches touching one document conflict, and
/// the driver retries the loser).
const PURGE_BATCHES_IN_FLIGHT: usize = 4;

/// The server code of a duplicate-key error.
const DUPLICATE_KEY: i32 = 11000;

/// The server code of a command naming a collection that does not exist.
const NAMESPACE_NOT_FOUND: i32 = 26;

/// The server code of a bad value, such as a hint naming an index that does not exist.
const BAD_VALUE: i32 = 2;

/// The server codes of an index that conflicts with an existing one of the same name or keys.
const INDEX_CONFLICT: [i32; 2] = [85, 86];

/// How long after an operation began the store still starts a new attempt of it after a
/// failure that is safe to retry (a transient transaction error, an unknown commit result,
/// a retryable write error such as "not primary" during an election). Each attempt is
/// itself bounded by the driver's server selection timeout (`serverSelectionTimeoutMS`,
/// 30 s unless the URI says otherwise), so an operation against a deployment that is down
/// fails after at most that timeout plus this window.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// Documents asked for per cursor batch: group reads finish in one round trip up to the
/// server's 16 MB batch limit.
const CURSOR_BATCH: u32 = 100_000;

/// Lock documents in a MongoDB collection.
#[derive(Debug)]
pub struct MongoStore {
    client: Client,
    coll: Collection<Document>,
    write_concern: WriteConcern,
    clock: Option<Arc<ManualClock>>,
    purge_batch: usize,
    /// The name of the trusted unique index on `resource`, once the set-up was checked.
    ready: Mutex<Option<Arc<str>>>,
}

impl MongoStore {
    /// Connects to `uri` (TLS, auth and timeouts as the URI says) and uses `collection` in
    /// `database`, with majority write concern.
    ///
    /// # Errors
    /// `InvalidArgument` naming `database` or `collection` for a name MongoDB refuses
    /// (empty, `$` in a collection name, a `system.` collection, ...); `Backend` when the
    /// URI cannot be parsed or resolved. The server itself is first contacted by the first
    /// operation.
    pub async fn connect(uri: &str, database: &str, collection: &str) -> Result<Self, Error> {
        if let Some((field, why)) = names::refused(database, collection) {
            return Err(Error::invalid(field, why));
        }
        let client = Client::with_uri_str(uri)
            .await
            .map_err(|e| failure::backend("connect", &e))?;
        Ok(Self::from_collection(
            client.database(database).collection(collection),
        ))
    }

    /// Uses an existing collection handle (and its client), with majority write concern
    /// whatever the handle's own is: a grant acknowledged by fewer members can be rolled
    /// back by a failover and granted again. [`MongoStore::with_write_concern`] chooses
    /// another.
    #[must_use]
    pub fn from_collection(coll: Collection<Document>) -> Self {
        let write_concern = WriteConcern::majority();
        let client = coll.client().clone();
        let store = MongoStore {
            client,
            coll,
            write_concern: write_concern.clone(),
            clock: None,
            purge_batch: DEFAULT_PURGE_BATCH,
            ready: Mutex::new(None),
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
        self.write_concern = write_concern;
        self
    }

    /// Replaces the server's clock by `clock` in every pipeline and query: **for tests
    /// only** (feature `test-util`), so that expiry can be driven without sleeping. The
    /// pipelines are the same ones that run with the server's clock.
    #[cfg(feature = "test-util")]
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<ManualClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Removes at most `groups` lock groups per purge transaction.
    ///
    /// # Errors
    /// `InvalidArgument` naming `purge_batch` when zero.
    pub fn with_purge_batch(mut self, groups: usize) -> Result<Self, Error> {
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

    /// `now` inside pipelines: `$$NOW`, or the override.
    fn now_expr(&self) -> Bson {
        match &self.clock {
            Some(c) => pipeline::date(c.now()),
            None => Bson::String(pipeline::SERVER_NOW.to_string()),
        }
    }

    /// `now` as a value: the server's `hello.localTime`, or the override.
    async fn now_value(&self, op: &'static str) -> Result<Timestamp, Error> {
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

    async fn hello(&self, op: &'static str) -> Result<Document, Error> {
        self.client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| failure::backend(op, &e))
    }

    /// Checks that the deployment supports transactions and that a unique index on
    /// `resource` that can be trusted exists; returns that index's name. Checked once and
    /// remembered; forgotten again when a grant finds the index gone.
    async fn ready(&self, op: &'static str) -> Result<Arc<str>, Error> {
        if let Some(index) = self
            .ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Ok(index);
        }
        self.check_namespace()?;
        let hello = self.hello(op).await?;
        let replicated =
            hello.contains_key("setName") || hello.get_str("msg").is_ok_and(|m| m == "isdbgrid");
        if !replicated {
            return Err(Error::Misconfigured {
                reason: "the MongoDB backend needs a replica set or sharded cluster \
                         (renew, unlock and purge run in transactions); a one-member \
                         replica set is enough: start mongod with --replSet and run \
                         replSetInitiate"
                    .into(),
            });
        }
        let index: Arc<str> = self.trusted_resource_index(op).await?.into();
        *self.ready.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&index));
        Ok(index)
    }

    /// `Misconfigured` when MongoDB refuses the collection's name (a handle from
    /// [`MongoStore::from_collection`] was not checked when it was made).
    fn check_namespace(&self) -> Result<(), Error> {
        let ns = self.coll.namespace();
        match names::refused(&ns.db, &ns.coll) {
            Some((_, why)) => Err(Error::Misconfigured {
                reason: format!("the lock collection's {why}: MongoDB does not allow it"),
            }),
            None => Ok(()),
        }
    }

    /// Forgets the set-up check, so that the next operation checks again.
    fn forget_ready(&self) {
        *self.ready.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The collection's indexes; none when the collection does not exist.
    async fn indexes(&self, op: &'static str) -> Result<Vec<IndexModel>, Error> {
        let cursor = match self.coll.list_indexes().await {
            Ok(c) => c,
            Err(e) if command_code(&e) == Some(NAMESPACE_NOT_FOUND) => return Ok(Vec::new()),
            Err(e) => return Err(failure::backend(op, &e)),
        };
        cursor
            .try_collect()
            .await
            .map_err(|e| failure::backend(op, &e))
    }

    /// The name of a unique index on `resource` that keeps one document per resource name.
    async fn trusted_resource_index(&self, op: &'static str) -> Result<String, Error> {
        let indexes = self.indexes(op).await?;
        let mut untrusted = None;
        for index in &indexes {
            match judge_resource_index(index) {
                Some(Ok(name)) => return Ok(name),
                Some(Err(why)) => {
                    untrusted.get_or_insert(why);
                }
                None => {}
            }
        }
        let ns = self.coll.namespace();
        let fix = format!(
            "call create_indexes() once, or run db.{}.createIndex({{resource: 1}}, \
             {{unique: true, sparse: true}})",
            ns.coll
        );
        Err(Error::Misconfigured {
            reason: match untrusted {
                Some(why) => format!(
                    "collection {ns}: {why}, so two exclusive holders of one resource would be \
                     possible; drop that index, then {fix}"
                ),
                None => format!(
                    "collection {ns} has no unique index on `resource`, so two exclusive \
                     holders would be possible: {fix}"
                ),
            },
        })
    }

    fn transaction_options(&self) -> TransactionOptions {
        TransactionOptions::builder()
            .write_concern(self.write_concern.clone())
            // The latest data on the primary, not the majority snapshot, which may lag a
            // grant already acknowledged to its caller; conflicting writes still abort.
            .read_concern(ReadConcern::local())
            .build()
    }

    /// One grant: `findAndModify` with upsert, hinted to the trusted unique index so that
    /// it fails rather than inserts when that index is gone. `Ok(None)` means refused by
    /// the rule.
    ///
    /// A failure that is safe to retry is retried with the same request (`grant_id`)
    /// within [`RETRY_WINDOW`]: if an earlier attempt was applied, the retry finds its own
    /// grant in `lastGrant`. What cannot be told apart is reported as a `Backend` error whose
    /// outcome is unknown, never as a refusal.
    async fn grant(
        &self,
        op: &'static str,
        request: &LockRequest,
        mode: Mode,
        build: impl Fn(&Bson, &Bson) -> (Document, Vec<Document>),
    ) -> Result<Option<LockStatus>, Error> {
        let index = self.ready(op).await?;
        let grant_id = Bson::ObjectId(ObjectId::new());
        let (filter, update) = build(&grant_id, &self.now_expr());
        let started = Instant::now();
        // The failure of an earlier attempt that may have been applied.
        let mut unknown: Option<mongodb::error::Error> = None;
        let mut duplicates = 0;
        loop {
            let result = self
                .coll
                .clone_with_type::<RawDocumentBuf>()
                .find_one_and_update(filter.clone(), update.clone())
                .upsert(true)
                .return_document(ReturnDocument::After)
                .hint(Hint::Name(index.to_string()))
                .await;
            let e = match result {
                Ok(Some(raw)) => {
                    let doc = lossy(op, &raw)?;
                    return decide_grant(op, &doc, &grant_id, request, mode, unknown);
                }
                Ok(None) => return Err(Error::backend(op, "upsert returned no document")),
                Err(e) => e,
            };
            if matches!(e.kind.as_ref(), ErrorKind::InvalidResponse { .. }) {
                // The driver could not read the reply (say, text in the document that is not
                // UTF-8): the server decided, so read the document to see what it decided.
                return match self.read_resource(op, &request.resource).await? {
                    Some(doc) => decide_grant(op, &doc, &grant_id, request, mode, Some(e)),
                    None => Err(failure::unknown(op, &e)),
                };
            }
            let code = command_code(&e);
            // The server retries an insert race on the unique index as an update; should a
            // duplicate key still come back, the document exists now, so one more try
            // decides by the rule.
            if code == Some(DUPLICATE_KEY) && duplicates == 0 {
                duplicates += 1;
                continue;
            }
            let maybe_applied = outcome_unknown(&e);
            if retryable(&e) && started.elapsed() < RETRY_WINDOW {
                if maybe_applied {
                    unknown = Some(e);
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            if maybe_applied || unknown.is_some() {
                return Err(failure::unknown(op, &e));
            }
            if code == Some(DUPLICATE_KEY) {
                return Ok(None);
            }
            if code == Some(BAD_VALUE) || code == Some(NAMESPACE_NOT_FOUND) {
                // The hinted index (or the whole collection) is gone: nothing was applied.
                self.forget_ready();
                return Err(match self.ready(op).await {
                    Err(e) => e,
                    Ok(_) => failure::backend(op, &e),
                });
            }
            return Err(failure::backend(op, &e));
        }
    }

    /// One `findAndModify` of a one-lock operation on the document holding the lock (filter
    /// and pipeline from [`pipeline`]), returning the document before or after it with the `now`
    /// it ran at. Retried within [`RETRY_WINDOW`] when the error allows: both one-lock
    /// operations may be applied twice with the same effect as once.
    ///
    /// When the driver cannot read the reply (the document holds text that is not UTF-8),
    /// the server has decided: the document is read back as it is now, with the server's
    /// time, and returned as [`Modified::Reread`].
    async fn modify_one(
        &self,
        op: &'static str,
        resource: &Resource,
        filter: Document,
        update: Vec<Document>,
        returned: ReturnDocument,
    ) -> Result<Modified, Error> {
        // No hint: nothing is inserted, so uniqueness is not at stake, and a lock can still
        // be renewed and released after its unique index was dropped.
        self.ready(op).await?;
        let projection = pipeline::with_now(&self.now_expr());
        let started = Instant::now();
        loop {
            let result = self
                .coll
                .clone_with_type::<RawDocumentBuf>()
                .find_one_and_update(filter.clone(), update.clone())
                .projection(projection.clone())
                .return_document(returned.clone())
                .await;
            let e = match result {
                Ok(Some(raw)) => return lossy(op, &raw).map(Modified::Reply),
                Ok(None) => return Ok(Modified::Nothing),
                Err(e) => e,
            };
            if matches!(e.kind.as_ref(), ErrorKind::InvalidResponse { .. }) {
                let now = self.now_value(op).await?;
                return Ok(match self.read_resource(op, resource).await? {
                    Some(mut doc) => {
                        doc.insert(pipeline::NOW_FIELD, pipeline::date(now));
                        Modified::Reread(doc)
                    }
                    None => Modified::Nothing,
                });
            }
            if retryable(&e) && started.elapsed() < RETRY_WINDOW {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            if outcome_unknown(&e) {
                return Err(failure::unknown(op, &e));
            }
            return Err(failure::backend(op, &e));
        }
    }

    /// Where the group `lock_id` is, from one read outside any transaction: a group in one
    /// readable document is one lock (a document holds at most one lock per lock id), which
    /// the one-lock operations handle in one more command; a bigger group, or one with a
    /// document the rules cannot read, takes the transaction. The read is only a shortcut:
    /// if it fails, the transaction (which retries) decides.
    async fn group_shape(&self, lock_id: &LockId) -> GroupShape {
        let read = async {
            self.coll
                .clone_with_type::<RawDocumentBuf>()
                .find(pipeline::group_filter(lock_id))
                .limit(2)
                .await?
                .try_collect::<Vec<RawDocumentBuf>>()
                .await
        };
        match read.await.as_deref() {
            Ok([]) => GroupShape::Empty,
            // Text that is not UTF-8 would make the one-lock reply unreadable to the driver:
            // the transaction reads such documents as they are.
            Ok([one]) => match one.to_document().map(|d| schema::decode(&d)) {
                Ok(Ok((resource, _))) => GroupShape::One(resource),
                _ => GroupShape::More,
            },
            Ok(_) | Err(_) => GroupShape::More,
        }
    }

    /// Runs `body` in a transaction and commits what it returns; a rule's refusal
    /// (`Ok(Err(_))`) aborts it. Transient transaction errors and unknown commit results are
    /// retried within [`RETRY_WINDOW`]; a commit whose result stays unknown is a `Backend`
    /// error saying so.
    async fn transaction<R, C, F>(
        &self,
        op: &'static str,
        mut context: C,
        mut body: F,
    ) -> Result<R, Error>
    where
        R: Send,
        F: for<'b> FnMut(
            &'b mut ClientSession,
            &'b mut C,
        ) -> futures_util::future::BoxFuture<
            'b,
            mongodb::error::Result<Result<R, Error>>,
        >,
    {
        let started = Instant::now();
        let mut session = self
            .client
            .start_session()
            .await
            .map_err(|e| failure::backend(op, &e))?;
        'attempt: loop {
            session
                .start_transaction()
                .with_options(self.transaction_options())
                .await
                .map_err(|e| failure::backend(op, &e))?;
            let value = match body(&mut session, &mut context).await {
                Ok(Ok(value)) => value,
                Ok(Err(refusal)) => {
                    // Nothing was written; the abort only ends the transaction early.
                    let _ = session.abort_transaction().await;
                    return Err(refusal);
                }
                Err(e) => {
                    let _ = session.abort_transaction().await;
                    if e.contains_label(TRANSIENT_TRANSACTION_ERROR)
                        && started.elapsed() < RETRY_WINDOW
                    {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue 'attempt;
                    }
                    return Err(failure::backend(op, &e));
                }
            };
            loop {
                match session.commit_transaction().await {
                    Ok(()) => return Ok(value),
                    Err(e) if started.elapsed() >= RETRY_WINDOW => {
                        if !e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) {
                            return Err(failure::backend(op, &e));
                        }
                        // The driver will not abort a transaction whose commit it tried, and
                        // the server would keep it, and the documents it wrote, blocked for
                        // up to a minute: end the session's transaction on the server.
                        self.kill_session(&session).await;
                        return Err(failure::unknown(op, &e));
                    }
                    Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue 'attempt;
                    }
                    Err(e) => return Err(failure::backend(op, &e)),
                }
            }
        }
    }

    /// The document of `resource`, read with [`lossy_text`].
    async fn read_resource(
        &self,
        op: &'static str,
        resource: &Resource,
    ) -> Result<Option<Document>, Error> {
        let raw = self
            .coll
            .clone_with_type::<RawDocumentBuf>()
            .find_one(doc! { schema::RESOURCE: resource.as_str() })
            .await
            .map_err(|e| failure::backend(op, &e))?;
        raw.map(|r| lossy(op, &r)).transpose()
    }

    /// Best effort: ends `session` on the server (its open transaction is aborted, unless it
    /// committed), so that documents it wrote are not held until the transaction times out.
    async fn kill_session(&self, session: &ClientSession) {
        let id = session.id().clone();
        if let Err(e) = self
            .client
            .database("admin")
            .run_command(doc! { "killSessions": [ id ] })
            .await
        {
            tracing::warn!(error = %e, "could not end a session whose commit result is unknown");
        }
    }

    /// Removes the groups `ids` (found expired at `t`) in one transaction; returns what it
    /// removed and the documents it left alone because it could not read them (the groups
    /// they name are left whole).
    async fn purge_batch(&self, ids: &[LockId], t: Timestamp) -> Result<Swept, Error> {
        let filter = pipeline::batch_filter(ids);
        let candidates: BTreeSet<LockId> = ids.iter().cloned().collect();
        let context = (&self.coll, &filter, &candidates);
        self.transaction("purge", context, |s, (coll, filter, candidates)| {
            async move {
                let docs = read_all(coll, vec![doc! { "$match": (*filter).clone() }], s).await?;
                let mut read = Read::from_docs(&docs);
                // The groups were found expired before this transaction began; one may have
                // lost its expired lock since (taken over, or purged by another purger) and
                // gained a new one. Decide again on what this transaction reads, so only
                // groups that still hold an expired lock lose their locks; and none that
                // also holds a lock in a document that cannot be read.
                let still: BTreeSet<LockId> = table::expired_groups(&[&read.table], t)
                    .intersection(candidates)
                    .filter(|id| !read.unreadable_groups.contains(id.as_str()))
                    .cloned()
                    .collect();
                if still.is_empty() {
                    return Ok(Ok(Swept {
                        removed: Vec::new(),
                        skipped: read.skipped,
                    }));
                }
                let removed = table::purge_groups(&mut [&mut read.table], &still, t);
                // Documents the batch leaves with no lock, and that may be forgotten, are
                // deleted now rather than rewritten now and deleted later: one write each.
                let emptied: Vec<Resource> = read
                    .table
                    .resources()
                    .iter()
                    .filter(|(_, state)| state.is_empty())
                    .map(|(r, _)| r.clone())
                    .collect();
                table::delete_empty(&mut [&mut read.table], t);
                let mut gone = Vec::new();
                let mut kept = Vec::new();
                for (resource, id) in read.ids {
                    if emptied.contains(&resource)
                        && !read.table.resources().contains_key(&resource)
                    {
                        gone.push(id);
                    } else {
                        kept.push(id);
                    }
                }
                let still: Vec<LockId> = still.into_iter().collect();
                if !gone.is_empty() {
                    coll.delete_many(pipeline::ids_in(&gone))
                        .session(&mut *s)
                        .await?;
                }
                if !kept.is_empty() {
                    coll.update_many(pipeline::ids_in(&kept), pipeline::purge_batch(&still, t))
                        .session(&mut *s)
                        .await?;
                }
                Ok(Ok(Swept {
                    removed,
                    skipped: read.skipped,
                }))
            }
            .boxed()
        })
        .await
    }
}

/// The pause before another attempt of an operation.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What one purge batch did.
struct Swept {
    removed: Vec<LockStatus>,
    skipped: Vec<MalformedDocument>,
}

/// Whether `index` is a unique index on `resource`: `None` if it is not on `resource`
/// alone, `Some(Ok(name))` if it keeps one document per resource name, `Some(Err(why))`
/// if it is on `resource` but cannot be trusted to.
fn judge_resource_index(index: &IndexModel) -> Option<Result<String, String>> {
    let keys: Vec<(&String, &Bson)> = index.keys.iter().collect();
    let on_resource = matches!(
        keys.as_slice(),
        [(k, v)] if k.as_str() == schema::RESOURCE
            && matches!(v, Bson::Int32(1 | -1) | Bson::Int64(1 | -1) | Bson::Double(1.0 | -1.0))
    );
    if !on_resource {
        return None;
    }
    let options = index.options.clone().unwrap_or_default();
    let name = options.name.clone().unwrap_or_else(|| "resource_1".into());
    if options.unique != Some(true) {
        return Some(Err(format!(
            "the index `{name}` on `resource` is not unique"
        )));
    }
    if options.partial_filter_expression.is_some() {
        return Some(Err(format!(
            "the unique index `{name}` on `resource` is partial (partialFilterExpression): \
             documents outside its filter are not kept unique"
        )));
    }
    if let Some(c) = &options.collation
        && c.locale != "simple"
    {
        return Some(Err(format!(
            "the unique index `{name}` on `resource` has collation locale `{}`: names the \
                 collation treats as equal (such as `job` and `Job`) would share one document",
            c.locale
        )));
    }
    if options.hidden == Some(true) {
        return Some(Err(format!(
            "the unique index `{name}` on `resource` is hidden, so grants cannot be pinned to it"
        )));
    }
    // A sparse index (the Go library's) skips only documents without `resource`, which no
    // rule reads: every lock document names its resource.
    Some(Ok(name))
}

/// Reads every document an aggregation returns, inside the session's transaction.
async fn read_all(
    coll: &Collection<Document>,
    pipeline: Vec<Document>,
    s: &mut ClientSession,
) -> mongodb::error::Result<Vec<Document>> {
    let mut cursor = coll
        .aggregate(pipeline)
        .with_type::<RawDocumentBuf>()
        .batch_size(CURSOR_BATCH)
        .session(&mut *s)
        .await?;
    let raw: Vec<RawDocumentBuf> = cursor.stream(s).try_collect().await?;
    raw.iter().map(lossy_text).collect()
}

/// A document as read, with text that is not valid UTF-8 (which the server stores as it
/// was sent: the Go library and hand edits may write it) replaced by U+FFFD, so that one
/// such string never makes a read fail. No rule reads text except to compare it with a
/// caller's name, which is valid UTF-8 and so never equal to it.
fn lossy_text(raw: &RawDocumentBuf) -> mongodb::error::Result<Document> {
    match raw.to_document() {
        Ok(doc) => Ok(doc),
        Err(_) => Ok(mongodb::bson::from_slice_utf8_lossy(raw.as_bytes())?),
    }
}

/// What a one-lock `findAndModify` returned.
enum Modified {
    /// The document (before or after, as asked), with the `now` it ran at.
    Reply(Document),
    /// The reply could not be read; the document as read back afterwards, with a later
    /// `now`.
    Reread(Document),
    /// No document matched.
    Nothing,
}

/// Where a group's locks are, as far as a group operation cares.
enum GroupShape {
    /// No document holds a lock of it.
    Empty,
    /// One readable document, so one lock, on this resource.
    One(Resource),
    /// Several documents, or one the rules cannot read.
    More,
}

/// The `now` a one-lock operation ran at, from its projection.
fn now_of(op: &'static str, doc: &Document) -> Result<Timestamp, Error> {
    match doc.get(pipeline::NOW_FIELD) {
        Some(Bson::DateTime(dt)) => u64::try_from(dt.timestamp_millis())
            .map(Timestamp::from_millis)
            .map_err(|_| Error::backend(op, "the server's clock is before the Unix epoch")),
        _ => Err(Error::backend(op, "the reply carries no server time")),
    }
}

fn lossy(op: &'static str, raw: &RawDocumentBuf) -> Result<Document, Error> {
    lossy_text(raw).map_err(|e| failure::backend(op, &e))
}

/// Documents read for one operation: the ones the rules can decide on as a table, the
/// others named.
struct Read {
    table: LockTable,
    /// The `now` the reading aggregation reported, if it ran over any document.
    now: Option<Timestamp>,
    /// The `_id` of each readable document.
    ids: BTreeMap<Resource, Bson>,
    /// The documents that could not be read.
    skipped: Vec<MalformedDocument>,
    /// The lock ids the unreadable documents name.
    unreadable_groups: BTreeSet<String>,
}

impl Read {
    /// Decodes `docs`. Two documents naming one resource (written while the unique index was
    /// missing) are both left unread: no rule can say which one holds the resource.
    fn from_docs(docs: &[Document]) -> Read {
        let now = match docs.first().map(|d| d.get(pipeline::NOW_FIELD)) {
            Some(Some(Bson::DateTime(dt))) => Some(Timestamp::from_millis(
                u64::try_from(dt.timestamp_millis()).unwrap_or(0),
            )),
            _ => None,
        };
        let mut decoded: BTreeMap<Resource, Vec<(&Document, ResourceState)>> = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut unreadable_groups = BTreeSet::new();
        for doc in docs {
            match schema::decode(doc) {
                Ok((resource, state)) => decoded.entry(resource).or_default().push((doc, state)),
                Err(m) => {
                    unreadable_groups.extend(schema::raw_lock_ids(doc));
                    skipped.push(m);
                }
            }
        }
        let mut resources = Vec::with_capacity(decoded.len());
        let mut ids = BTreeMap::new();
        for (resource, mut copies) in decoded {
            if copies.len() == 1 {
                if let Some((doc, state)) = copies.pop() {
                    ids.insert(
                        resource.clone(),
                        doc.get("_id").cloned().unwrap_or(Bson::Null),
                    );
                    resources.push((resource, state));
                }
                continue;
            }
            for (doc, _) in &copies {
                unreadable_groups.extend(schema::raw_lock_ids(doc));
                skipped.push(MalformedDocument {
                    resource: resource.as_str().to_owned(),
                    field: format!("_id {}", doc.get("_id").unwrap_or(&Bson::Null)),
                    reason: format!(
                        "{} documents name this resource (written while the unique index on \
                         `resource` was missing): keep one, remove the others by hand",
                        copies.len()
                    ),
                });
            }
        }
        Read {
            table: LockTable::from_resources(resources),
            now,
            ids,
            skipped,
            unreadable_groups,
        }
    }
}

/// `done` when nothing was skipped; otherwise a `Skipped` error carrying it.
fn unless_skipped(
    done: Vec<LockStatus>,
    skipped: Vec<MalformedDocument>,
) -> Result<Vec<LockStatus>, Error> {
    if skipped.is_empty() {
        Ok(done)
    } else {
        Err(Error::Skipped { done, skipped })
    }
}

/// What a grant's returned document says: granted (this request, `grant_id`, made the last
/// grant, and the lock is decoded from its own entry alone, whatever else the document
/// holds), refused, or malformed. After an earlier attempt whose outcome is unknown
/// (`unknown`), a document holding a lock of this lock id that this request cannot be shown
/// to have made is reported as unknown, not as a refusal.
fn decide_grant(
    op: &'static str,
    doc: &Document,
    grant_id: &Bson,
    request: &LockRequest,
    mode: Mode,
    unknown: Option<mongodb::error::Error>,
) -> Result<Option<LockStatus>, Error> {
    let resource = Resource::stored(&schema::label(doc));
    if doc.get(schema::LAST_GRANT) == Some(grant_id) {
        return match schema::decode_own(doc, mode, &request.lock_id) {
            Some(Ok(lock)) => Ok(Some(lock.status(&resource, mode, lock.created_at))),
            Some(Err(m)) => Err(Error::backend(
                op,
                format!("the grant was applied but its own entry reads as malformed: {m}"),
            )),
            None => Err(Error::backend(
                op,
                "the grant was applied but the document does not hold the new lock",
            )),
        };
    }
    let (_, state) = schema::decode(doc).map_err(Error::from)?;
    if state.last_fence >= schema::FENCES_EXHAUSTED {
        return Err(Error::Malformed {
            resource: resource.as_str().to_owned(),
            field: schema::LAST_FENCE.into(),
            reason: format!(
                "is {}: every fence is used, so no grant is possible on this resource",
                state.last_fence
            ),
        });
    }
    if let Some(e) = unknown
        && state
            .lock_of(&request.lock_id)
            .is_some_and(|(m, _)| m == mode)
    {
        return Err(failure::unknown(op, &e));
    }
    Ok(None)
}

fn command_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

impl LockStore for MongoStore {
    #[tracing::instrument(name = "mongo.xlock", skip_all, fields(resource = %request.resource))]
    async fn xlock(&self, request: &LockRequest) -> Result<LockStatus, Error> {
        let build = |id: &Bson, now: &Bson| pipeline::xlock(request, id, now);
        match self.grant("xlock", request, Mode::Exclusive, build).await? {
            Some(status) => Ok(status),
            None => Err(Error::AlreadyLocked {
                resource: request.resource.clone(),
            }),
        }
    }

    #[tracing::instrument(name = "mongo.slock", skip_all, fields(resource = %request.resource))]
    async fn slock(
        &self,
        request: &LockRequest,
        limit: Option<SharedLimit>,
    ) -> Result<LockStatus, Error> {
        let build = |id: &Bson, now: &Bson| pipeline::slock(request, limit, id, now);
        match self.grant("slock", request, Mode::Shared, build).await? {
            Some(status) => Ok(status),
            None => Err(Error::AlreadyLocked {
                resource: request.resource.clone(),
            }),
        }
    }

    #[tracing::instrument(name = "mongo.unlock", skip_all)]
    async fn unlock(&self, lock_id: &LockId) -> Result<Vec<LockStatus>, Error> {
        self.ready("unlock").await?;
        match self.group_shape(lock_id).await {
            GroupShape::Empty => return Ok(Vec::new()),
            GroupShape::One(resource) => {
                return Ok(self
                    .unlock_one(&resource, lock_id)
                    .await?
                    .into_iter()
                    .collect());
            }
            GroupShape::More => {}
        }
        let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &self.now_expr());
        let update = pipeline::unlock(lock_id);
        let context = (&self.coll, lock_id, &read, &update);
        let (released, skipped) = self
            .transaction("unlock", context, |s, (coll, lock_id, read, update)| {
                async move {
                    let docs = read_all(coll, (*read).clone(), s).await?;
                    let mut read = Read::from_docs(&docs);
                    let Some(now) = read.now else {
                        return Ok(Ok((Vec::new(), Vec::new())));
                    };
                    let released = table::unlock(&mut [&mut read.table], lock_id, now);
                    // Only the documents read and decided on are written; the others are
                    // reported and left as they are.
                    let ids: Vec<Bson> = read.ids.into_values().collect();
                    if !ids.is_empty() {
                        coll.update_many(pipeline::ids_in(&ids), (*update).clone())
                            .session(&mut *s)
                            .await?;
                    }
                    Ok(Ok((released, read.skipped)))
                }
                .boxed()
            })
            .await?;
        unless_skipped(released, skipped)
    }

    #[tracing::instrument(name = "mongo.renew", skip_all, fields(ttl_ms = ttl.as_millis()))]
    async fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<Vec<LockStatus>, Error> {
        self.ready("renew").await?;
        match self.group_shape(lock_id).await {
            GroupShape::Empty => return Err(Error::LockNotFound),
            GroupShape::One(resource) => {
                return Ok(vec![self.renew_one(&resource, lock_id, ttl, margin).await?]);
            }
            GroupShape::More => {}
        }
        let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &self.now_expr());
        let context = (&self.coll, lock_id, &read);
        self.transaction("renew", context, |s, (coll, lock_id, read)| {
            async move {
                let docs = read_all(coll, (*read).clone(), s).await?;
                let mut read = Read::from_docs(&docs);
                // All or nothing: a group with a lock in a document that cannot be read is
                // not renewed at all.
                if let Some(m) = read.skipped.into_iter().next() {
                    return Ok(Err(m.into()));
                }
                let Some(now) = read.now else {
                    return Ok(Err(Error::LockNotFound));
                };
                let renewed = match table::renew(&mut [&mut read.table], lock_id, ttl, margin, now)
                {
                    Ok(r) => r,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                let expires_at = now.saturating_add(ttl.as_duration());
                let ids: Vec<Bson> = read.ids.into_values().collect();
                coll.update_many(
                    pipeline::ids_in(&ids),
                    pipeline::renew(lock_id, expires_at, now),
                )
                .session(&mut *s)
                .await?;
                Ok(Ok(renewed))
            }
            .boxed()
        })
        .await
    }

    #[tracing::instrument(name = "mongo.renew_one", skip_all, fields(resource = %resource, ttl_ms = ttl.as_millis()))]
    async fn renew_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<LockStatus, Error> {
        let op = "renew";
        let margin_ms = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
        let update = pipeline::renew_one(lock_id, ttl.as_millis(), margin_ms, &self.now_expr());
        let filter = pipeline::one_lock_filter(resource.as_str(), lock_id);
        let (doc, reread) = match self
            .modify_one(op, resource, filter, update, ReturnDocument::Before)
            .await?
        {
            Modified::Reply(doc) => (doc, false),
            Modified::Reread(doc) => (doc, true),
            Modified::Nothing => return Err(Error::LockNotFound),
        };
        let now = now_of(op, &doc)?;
        let (name, state) = schema::decode(&doc)?;
        if reread {
            // Read back after the command, with a later `now`: a lock still renewable was
            // renewed (the pipeline renews every renewable lock), and is reported as it is.
            return match state.lock_of(lock_id) {
                Some((mode, lock))
                    if lock
                        .expires_at
                        .is_none_or(|e| e > now.saturating_add(margin)) =>
                {
                    Ok(lock.status(&name, mode, now))
                }
                _ => LockTable::from_resources([(name.clone(), state)])
                    .renew_one(&name, lock_id, ttl, margin, now),
            };
        }
        // The document as the pipeline found it, at the instant it ran: the pipeline renewed
        // iff the rules say so, and the engine says what that gave, or why not.
        LockTable::from_resources([(name.clone(), state)])
            .renew_one(&name, lock_id, ttl, margin, now)
    }

    #[tracing::instrument(name = "mongo.renew_many", skip_all, fields(locks = locks.len()))]
    async fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus, Error>>, Error> {
        if locks.is_empty() {
            return Ok(Vec::new());
        }
        self.ready("renew").await?;
        // One transaction for the batch: read the documents with the server's `now`, decide
        // each lock with the engine, write the renewed ones with that same `now`.
        let resources: BTreeSet<&str> = locks.iter().map(|r| r.resource.as_str()).collect();
        let filter =
            doc! { schema::RESOURCE: { "$in": resources.into_iter().collect::<Vec<_>>() } };
        let read = pipeline::read_with_now(filter, &self.now_expr());
        let context = (&self.coll, locks, margin, &read);
        self.transaction("renew", context, |s, (coll, locks, margin, read)| {
            async move {
                let docs = read_all(coll, (*read).clone(), s).await?;
                let mut read = Read::from_docs(&docs);
                let Some(now) = read.now else {
                    return Ok(Ok(locks.iter().map(|_| Err(Error::LockNotFound)).collect()));
                };
                let mut outcomes = Vec::with_capacity(locks.len());
                let mut renewed = Vec::new();
                let mut touched = BTreeSet::new();
                for r in locks.iter() {
                    if let Some(m) = read
                        .skipped
                        .iter()
                        .find(|m| m.resource == r.resource.as_str())
                    {
                        outcomes.push(Err(m.clone().into()));
                        continue;
                    }
                    let outcome =
                        read.table
                            .renew_one(&r.resource, &r.lock_id, r.ttl, *margin, now);
                    if outcome.is_ok() {
                        touched.insert(r.resource.clone());
                        renewed.push(doc! {
                            "r": r.resource.as_str(),
                            "l": r.lock_id.as_str(),
                            "e": pipeline::date(now.saturating_add(r.ttl.as_duration())),
                        });
                    }
                    outcomes.push(outcome);
                }
                if !renewed.is_empty() {
                    let ids: Vec<Bson> = touched
                        .iter()
                        .filter_map(|r| read.ids.get(r).cloned())
                        .collect();
                    coll.update_many(pipeline::ids_in(&ids), pipeline::renew_pairs(renewed, now))
                        .session(&mut *s)
                        .await?;
                }
                Ok(Ok(outcomes))
            }
            .boxed()
        })
        .await
    }

    #[tracing::instrument(name = "mongo.unlock_one", skip_all, fields(resource = %resource))]
    async fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> Result<Option<LockStatus>, Error> {
        let op = "unlock";
        let filter = pipeline::one_lock_filter(resource.as_str(), lock_id);
        let update = pipeline::unlock_one(lock_id);
        let doc = match self
            .modify_one(op, resource, filter, update, ReturnDocument::Before)
            .await?
        {
            Modified::Reply(doc) => doc,
            Modified::Reread(doc) => {
                // Read back after the removal: the lock is gone (its details with it), or the
                // document could not be decided on and is as it was.
                schema::decode(&doc)?;
                return Ok(None);
            }
            Modified::Nothing => return Ok(None),
        };
        let now = now_of(op, &doc)?;
        // A document the rules cannot decide on was left as it was: say so.
        let (name, state) = schema::decode(&doc)?;
        let mut table = LockTable::from_resources([(name.clone(), state)]);
        Ok(table.unlock_one(&name, lock_id, now))
    }

    #[tracing::instrument(name = "mongo.status", skip_all)]
    async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
        filter.validate()?;
        self.ready("status").await?;
        // One command: the documents and the server's `now` in one aggregation. A filter
        // with a TTL bound needs `now` before the query to use the expiry indexes: then the
        // server's time is asked for first (`hello`), and the query is a `find`.
        let ttl_bound = filter.ttl_lt.is_some() || filter.ttl_gte.is_some();
        let now = if ttl_bound {
            Some(self.now_value("status").await?)
        } else {
            None
        };
        let prefilter = pipeline::status_prefilter(filter, now);
        let raw: Vec<RawDocumentBuf> = if ttl_bound {
            self.coll
                .clone_with_type::<RawDocumentBuf>()
                .find(prefilter)
                .batch_size(CURSOR_BATCH)
                .await
                .map_err(|e| failure::backend("status", &e))?
                .try_collect()
                .await
        } else {
            self.coll
                .aggregate(pipeline::read_with_now(prefilter, &self.now_expr()))
                .with_type::<RawDocumentBuf>()
                .batch_size(CURSOR_BATCH)
                .await
                .map_err(|e| failure::backend("status", &e))?
                .try_collect()
                .await
        }
        .map_err(|e| failure::backend("status", &e))?;
        let docs = raw
            .iter()
            .map(|r| lossy("status", r))
            .collect::<Result<Vec<_>, _>>()?;
        let read = Read::from_docs(&docs);
        // No document, no lock (and no `now` needed).
        let Some(now) = now.or(read.now) else {
            return unless_skipped(Vec::new(), read.skipped);
        };
        unless_skipped(table::status(&[&read.table], filter, now), read.skipped)
    }

    #[tracing::instrument(name = "mongo.purge", skip_all)]
    async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.ready("purge").await?;
        let t = self.now_value("purge").await?;
        let rows: Vec<RawDocumentBuf> = self
            .coll
            .aggregate(pipeline::expired_groups(t))
            .with_type::<RawDocumentBuf>()
            .batch_size(CURSOR_BATCH)
            .await
            .map_err(|e| failure::backend("purge", &e))?
            .try_collect()
            .await
            .map_err(|e| failure::backend("purge", &e))?;
        let mut skipped: Vec<MalformedDocument> = Vec::new();
        let mut groups = BTreeSet::new();
        for raw in &rows {
            let row = lossy("purge", raw)?;
            if let Ok(bad) = row.get_document("bad") {
                skipped.push(
                    schema::decode(bad)
                        .err()
                        .unwrap_or_else(|| MalformedDocument {
                            resource: schema::label(bad),
                            field: "(document)".into(),
                            reason: "the server's validity test refused it".into(),
                        }),
                );
            }
            if let Ok(ids) = row.get_array("ids") {
                for id in ids.iter().filter_map(Bson::as_str) {
                    // A lock id read with U+FFFD in place of bytes that are not UTF-8 names
                    // no stored lock: its group cannot be addressed, so it is named instead.
                    if id.contains(char::REPLACEMENT_CHARACTER) && raw.to_document().is_err() {
                        let m = MalformedDocument {
                            resource: row.get_str(schema::RESOURCE).unwrap_or("").to_string(),
                            field: "lockId".into(),
                            reason: "an expired lock's lock id is not valid UTF-8, so its group \
                                     cannot be addressed: remove it by hand"
                                .into(),
                        };
                        if !skipped.contains(&m) {
                            skipped.push(m);
                        }
                    } else {
                        groups.insert(LockId::stored(id));
                    }
                }
            }
        }
        let ids: Vec<LockId> = groups.into_iter().collect();
        let mut removed = Vec::new();
        let incomplete = |mut removed: Vec<LockStatus>, e: Error| {
            if removed.is_empty() {
                return e;
            }
            sort_purged(&mut removed);
            Error::PurgeIncomplete {
                removed,
                source: Box::new(e),
            }
        };
        // Up to PURGE_BATCHES_IN_FLIGHT batch transactions at once. After a failure no new
        // batch starts, but those in flight finish: a batch that committed is reported.
        let mut batches = ids.chunks(self.purge_batch);
        let mut in_flight = FuturesUnordered::new();
        in_flight.extend(
            batches
                .by_ref()
                .take(PURGE_BATCHES_IN_FLIGHT)
                .map(|b| self.purge_batch(b, t)),
        );
        let mut failure = None;
        while let Some(outcome) = in_flight.next().await {
            match outcome {
                Ok(mut swept) => {
                    removed.append(&mut swept.removed);
                    for m in swept.skipped {
                        if !skipped.contains(&m) {
                            skipped.push(m);
                        }
                    }
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
            if failure.is_none() {
                in_flight.extend(batches.next().map(|b| self.purge_batch(b, t)));
            }
        }
        if let Some(e) = failure {
            return Err(incomplete(removed, e));
        }
        if let Err(e) = self.coll.delete_many(pipeline::deletable(t)).await {
            return Err(incomplete(removed, failure::backend("purge", &e)));
        }
        sort_purged(&mut removed);
        tracing::debug!(
            removed = removed.len(),
            groups = ids.len(),
            skipped = skipped.len(),
            "purged"
        );
        unless_skipped(removed, skipped)
    }

    /// Creates the unique index on `resource` with the Go library's options (`unique`,
    /// `sparse`), unless a unique index on `resource` that can be trusted is there already,
    /// and the four plain indexes both libraries use. The Go library's `CreateIndexes`
    /// succeeds on a collection set up here, and this on one set up by the Go library.
    ///
    /// # Errors
    /// `Misconfigured` when an index on `resource` that cannot be trusted is in the way (say
    /// a partial or collated one); `Backend` otherwise.
    #[tracing::instrument(name = "mongo.create_indexes", skip_all)]
    async fn create_indexes(&self) -> Result<(), Error> {
        let op = "create_indexes";
        self.check_namespace()?;
        let existing = self.indexes(op).await?;
        let trusted = existing
            .iter()
            .any(|i| matches!(judge_resource_index(i), Some(Ok(_))));
        let mut models = Vec::new();
        if !trusted {
            let unique = IndexOptions::builder().unique(true).sparse(true).build();
            models.push(
                IndexModel::builder()
                    .keys(doc! { "resource": 1 })
                    .options(unique)
                    .build(),
            );
        }
        for key in [
            "exclusive.lockId",
            "exclusive.expiresAt",
            "shared.locks.lockId",
            "shared.locks.expiresAt",
        ] {
            models.push(IndexModel::builder().keys(doc! { key: 1 }).build());
        }
        match self.coll.create_indexes(models).await {
            Ok(_) => {}
            Err(e) if command_code(&e).is_some_and(|c| INDEX_CONFLICT.contains(&c)) => {
                let why = existing
                    .iter()
                    .find_map(|i| judge_resource_index(i).and_then(Result::err))
                    .unwrap_or_else(|| {
                        format!("an existing index conflicts ({})", MongoFailure::new(&e))
                    });
                return Err(Error::Misconfigured {
                    reason: format!(
                        "collection {}: {why}; drop that index and call create_indexes() again",
                        self.coll.namespace()
                    ),
                });
            }
            Err(e) => return Err(failure::backend(op, &e)),
        }
        self.forget_ready();
        Ok(())
    }
}
