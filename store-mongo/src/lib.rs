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
//!   replace it with a [`ManualClock`] through [`MongoStore::with_clock`]; the pipelines stay
//!   the same.
//! - **Group operations in constant round trips.** `unlock` and `renew` are one transaction
//!   (read the group, decide with the engine, one `updateMany`, commit): three commands
//!   whatever the group's size, all or nothing. `purge` reads the expired groups, then
//!   removes them in transactions of [`DEFAULT_PURGE_BATCH`] groups (a document left with
//!   no lock is deleted there, the others rewritten), then deletes any other document that
//!   holds no lock: its command count grows with the number of batches only.
//! - **Schema** shared with square/mongo-lock (one document per resource; the module
//!   `schema` in the source lists every field): the Go library pointed at the same
//!   collection keeps working.
//!
//! A replica set (or sharded cluster) is required, because transactions make the group
//! operations atomic and majority writes make grants survive a failover; a one-member
//! replica set is enough. The store also refuses to run without the unique index on
//! `resource` ([`LockStore::create_indexes`] makes it).
//!
//! **Fences across deletion.** Purge deletes an emptied document only once
//! `now_ms * 1024` exceeds its `lastFence`, and a new document starts its fences at that
//! floor; fences therefore keep increasing as long as the server's clock does not go
//! backwards, across failovers included.

mod pipeline;
mod schema;
#[doc(hidden)]
pub mod test_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{
    CollectionOptions, IndexOptions, ReadConcern, ReturnDocument, TransactionOptions, WriteConcern,
};
use mongodb::{Client, ClientSession, Collection, IndexModel};

use lockwright_engine::table::{self, sort_purged};
use lockwright_engine::{
    Error, Filter, LockId, LockRequest, LockStatus, LockStore, LockTable, ManualClock, Mode,
    Resource, SharedLimit, Timestamp, Ttl,
};

/// Lock groups removed per purge transaction unless [`MongoStore::with_purge_batch`] says
/// otherwise.
pub const DEFAULT_PURGE_BATCH: usize = 500;

/// Purge batch transactions run concurrently (batches touching one document conflict, and
/// the driver retries the loser).
const PURGE_BATCHES_IN_FLIGHT: usize = 4;

/// The server code of a duplicate-key error.
const DUPLICATE_KEY: i32 = 11000;

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
    ready: tokio::sync::OnceCell<()>,
}

impl MongoStore {
    /// Connects to `uri` (TLS, auth and timeouts as the URI says) and uses `collection` in
    /// `database`, with majority write concern.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty database or collection name; `Backend` when the URI
    /// cannot be parsed or resolved. The server itself is first contacted by the first
    /// operation.
    pub async fn connect(uri: &str, database: &str, collection: &str) -> Result<Self, Error> {
        if database.is_empty() {
            return Err(Error::invalid("database", "must not be empty"));
        }
        if collection.is_empty() {
            return Err(Error::invalid("collection", "must not be empty"));
        }
        let client = Client::with_uri_str(uri)
            .await
            .map_err(|e| Error::backend("connect", e))?;
        Ok(Self::from_collection(
            client.database(database).collection(collection),
        ))
    }

    /// Uses an existing collection handle (and its client). Its write concern is kept if it
    /// has one; otherwise majority is used.
    #[must_use]
    pub fn from_collection(coll: Collection<Document>) -> Self {
        let write_concern = coll
            .write_concern()
            .cloned()
            .unwrap_or_else(WriteConcern::majority);
        let client = coll.client().clone();
        let store = MongoStore {
            client,
            coll,
            write_concern: write_concern.clone(),
            clock: None,
            purge_batch: DEFAULT_PURGE_BATCH,
            ready: tokio::sync::OnceCell::new(),
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
    /// only**, so that expiry can be driven without sleeping. The pipelines are the same
    /// ones that run with the server's clock.
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
            .map_err(|e| Error::backend(op, e))
    }

    /// Checks once that the deployment supports transactions and that the unique index on
    /// `resource` exists.
    async fn ready(&self, op: &'static str) -> Result<(), Error> {
        self.ready
            .get_or_try_init(|| async {
                let hello = self.hello(op).await?;
                let replicated = hello.contains_key("setName")
                    || hello.get_str("msg").is_ok_and(|m| m == "isdbgrid");
                if !replicated {
                    return Err(Error::Misconfigured {
                        reason: "the MongoDB backend needs a replica set or sharded cluster \
                                 (renew, unlock and purge run in transactions); a one-member \
                                 replica set is enough: start mongod with --replSet and run \
                                 replSetInitiate"
                            .into(),
                    });
                }
                if !self.has_unique_resource_index(op).await? {
                    let ns = self.coll.namespace();
                    return Err(Error::Misconfigured {
                        reason: format!(
                            "collection {ns} has no unique index on `resource`, so two exclusive \
                             holders would be possible: call create_indexes() once, or run \
                             db.{}.createIndex({{resource: 1}}, {{unique: true}})",
                            ns.coll
                        ),
                    });
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    async fn has_unique_resource_index(&self, op: &'static str) -> Result<bool, Error> {
        let cursor = match self.coll.list_indexes().await {
            Ok(c) => c,
            // NamespaceNotFound: the collection does not exist yet, so neither does the index.
            Err(e) if command_code(&e) == Some(26) => return Ok(false),
            Err(e) => return Err(Error::backend(op, e)),
        };
        let indexes: Vec<IndexModel> = cursor
            .try_collect()
            .await
            .map_err(|e| Error::backend(op, e))?;
        Ok(indexes.iter().any(|i| {
            i.keys == doc! { "resource": 1 }
                && i.options.as_ref().and_then(|o| o.unique) == Some(true)
        }))
    }

    fn transaction_options(&self) -> TransactionOptions {
        TransactionOptions::builder()
            .write_concern(self.write_concern.clone())
            // The latest data on the primary, not the majority snapshot, which may lag a
            // grant already acknowledged to its caller; conflicting writes still abort.
            .read_concern(ReadConcern::local())
            .build()
    }

    /// One grant: `findAndModify` with upsert. `Ok(None)` means refused by the rule.
    async fn grant(
        &self,
        op: &'static str,
        request: &LockRequest,
        mode: Mode,
        build: impl Fn(&Bson, &Bson) -> (Document, Vec<Document>),
    ) -> Result<Option<LockStatus>, Error> {
        // The server retries an insert race on the unique index as an update; should a
        // duplicate key still come back, the document exists now, so one more try decides by
        // the rule, and a second duplicate reads as a refusal.
        for attempt in 0..2 {
            let grant_id = Bson::ObjectId(ObjectId::new());
            let (filter, update) = build(&grant_id, &self.now_expr());
            let result = self
                .coll
                .find_one_and_update(filter, update)
                .upsert(true)
                .return_document(ReturnDocument::After)
                .await;
            match result {
                Ok(Some(doc)) => return granted_lock(op, &doc, &grant_id, request, mode),
                Ok(None) => return Err(Error::backend(op, "upsert returned no document")),
                Err(e) if command_code(&e) == Some(DUPLICATE_KEY) && attempt == 0 => continue,
                Err(e) if command_code(&e) == Some(DUPLICATE_KEY) => return Ok(None),
                Err(e) => return Err(Error::backend(op, e)),
            }
        }
        Ok(None)
    }

    /// Runs `body` in a transaction (retried by the driver on transient errors) and returns
    /// its outcome; outcomes that are errors of the rules commit nothing.
    async fn transaction<R, C, F>(&self, op: &'static str, context: C, body: F) -> Result<R, Error>
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
        let mut session = self
            .client
            .start_session()
            .await
            .map_err(|e| Error::backend(op, e))?;
        session
            .start_transaction()
            .with_options(self.transaction_options())
            .and_run(context, body)
            .await
            .map_err(|e| Error::backend(op, e))?
    }

    async fn purge_batch(&self, ids: &[LockId], t: Timestamp) -> Result<Vec<LockStatus>, Error> {
        let filter = pipeline::batch_filter(ids);
        let candidates: BTreeSet<LockId> = ids.iter().cloned().collect();
        let context = (&self.coll, &filter, &candidates);
        self.transaction("purge", context, |s, (coll, filter, candidates)| {
            async move {
                let docs = read_all(coll, vec![doc! { "$match": (*filter).clone() }], s).await?;
                let mut table = match decode_all(&docs) {
                    Ok((table, _)) => table,
                    Err(e) => return Ok(Err(e)),
                };
                // The groups were found expired before this transaction began; one may have
                // lost its expired lock since (taken over, or purged by another purger) and
                // gained a new one. Decide again on what this transaction reads, so only
                // groups that still hold an expired lock lose their locks.
                let still: BTreeSet<LockId> = table::expired_groups(&[&table], t)
                    .intersection(candidates)
                    .cloned()
                    .collect();
                if still.is_empty() {
                    return Ok(Ok(Vec::new()));
                }
                let removed = table::purge_groups(&mut [&mut table], &still, t);
                // Documents the batch leaves with no lock, and that may be forgotten, are
                // deleted now rather than rewritten now and deleted later: one write each.
                let read = table.resources().len();
                let emptied: Vec<Resource> = table
                    .resources()
                    .iter()
                    .filter(|(_, state)| state.is_empty())
                    .map(|(r, _)| r.clone())
                    .collect();
                table::delete_empty(&mut [&mut table], t);
                let gone: Vec<Resource> = emptied
                    .into_iter()
                    .filter(|r| !table.resources().contains_key(r))
                    .collect();
                let still: Vec<LockId> = still.into_iter().collect();
                if !gone.is_empty() {
                    coll.delete_many(pipeline::resources_in(&gone))
                        .session(&mut *s)
                        .await?;
                }
                if gone.len() < read {
                    coll.update_many(
                        pipeline::batch_filter_except(&still, &gone),
                        pipeline::purge_batch(&still, t),
                    )
                    .session(&mut *s)
                    .await?;
                }
                Ok(Ok(removed))
            }
            .boxed()
        })
        .await
    }
}

/// Reads every document an aggregation returns, inside the session's transaction.
async fn read_all(
    coll: &Collection<Document>,
    pipeline: Vec<Document>,
    s: &mut ClientSession,
) -> mongodb::error::Result<Vec<Document>> {
    let mut cursor = coll
        .aggregate(pipeline)
        .batch_size(CURSOR_BATCH)
        .session(&mut *s)
        .await?;
    cursor.stream(s).try_collect().await
}

/// Decodes documents into a table, with the `now` the reading aggregation reported.
fn decode_all(docs: &[Document]) -> Result<(LockTable, Option<Timestamp>), Error> {
    let now = match docs.first().map(|d| d.get(pipeline::NOW_FIELD)) {
        Some(Some(Bson::DateTime(dt))) => Some(Timestamp::from_millis(
            u64::try_from(dt.timestamp_millis()).unwrap_or(0),
        )),
        _ => None,
    };
    let resources = docs
        .iter()
        .map(schema::decode)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((LockTable::from_resources(resources), now))
}

/// The lock a grant installed, if the returned document says this request (`grant_id`)
/// made the last grant; `None` when the rule refused.
fn granted_lock(
    op: &'static str,
    doc: &Document,
    grant_id: &Bson,
    request: &LockRequest,
    mode: Mode,
) -> Result<Option<LockStatus>, Error> {
    let (resource, state) = schema::decode(doc)?;
    if doc.get(schema::LAST_GRANT) != Some(grant_id) {
        return Ok(None);
    }
    let lock = state
        .locks()
        .find(|(m, l)| *m == mode && l.lock_id == request.lock_id)
        .map(|(_, l)| l.clone())
        .ok_or_else(|| Error::backend(op, "the granted document does not hold the new lock"))?;
    Ok(Some(lock.status(&resource, mode, lock.created_at)))
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
        self.ready("xlock").await?;
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
        self.ready("slock").await?;
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
        let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &self.now_expr());
        let filter = pipeline::group_filter(lock_id);
        let update = pipeline::unlock(lock_id);
        let context = (&self.coll, lock_id, &read, &filter, &update);
        self.transaction(
            "unlock",
            context,
            |s, (coll, lock_id, read, filter, update)| {
                async move {
                    let docs = read_all(coll, (*read).clone(), s).await?;
                    let (mut table, now) = match decode_all(&docs) {
                        Ok(x) => x,
                        Err(e) => return Ok(Err(e)),
                    };
                    let Some(now) = now else {
                        return Ok(Ok(Vec::new()));
                    };
                    let released = table::unlock(&mut [&mut table], lock_id, now);
                    coll.update_many((*filter).clone(), (*update).clone())
                        .session(&mut *s)
                        .await?;
                    Ok(Ok(released))
                }
                .boxed()
            },
        )
        .await
    }

    #[tracing::instrument(name = "mongo.renew", skip_all, fields(ttl_ms = ttl.as_millis()))]
    async fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<Vec<LockStatus>, Error> {
        self.ready("renew").await?;
        let read = pipeline::read_with_now(pipeline::group_filter(lock_id), &self.now_expr());
        let filter = pipeline::group_filter(lock_id);
        let context = (&self.coll, lock_id, &read, &filter);
        self.transaction("renew", context, |s, (coll, lock_id, read, filter)| {
            async move {
                let docs = read_all(coll, (*read).clone(), s).await?;
                let (mut table, now) = match decode_all(&docs) {
                    Ok(x) => x,
                    Err(e) => return Ok(Err(e)),
                };
                let Some(now) = now else {
                    return Ok(Err(Error::LockNotFound));
                };
                let renewed = match table::renew(&mut [&mut table], lock_id, ttl, margin, now) {
                    Ok(r) => r,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                let expires_at = now.saturating_add(ttl.as_duration());
                coll.update_many((*filter).clone(), pipeline::renew(lock_id, expires_at, now))
                    .session(&mut *s)
                    .await?;
                Ok(Ok(renewed))
            }
            .boxed()
        })
        .await
    }

    #[tracing::instrument(name = "mongo.status", skip_all)]
    async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
        filter.validate()?;
        self.ready("status").await?;
        let now = self.now_value("status").await?;
        let docs: Vec<Document> = self
            .coll
            .find(pipeline::status_prefilter(filter, now))
            .batch_size(CURSOR_BATCH)
            .await
            .map_err(|e| Error::backend("status", e))?
            .try_collect()
            .await
            .map_err(|e| Error::backend("status", e))?;
        let (table, _) = decode_all(&docs)?;
        Ok(table::status(&[&table], filter, now))
    }

    #[tracing::instrument(name = "mongo.purge", skip_all)]
    async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.ready("purge").await?;
        let t = self.now_value("purge").await?;
        let found: Vec<Document> = self
            .coll
            .aggregate(pipeline::expired_groups(t))
            .batch_size(CURSOR_BATCH)
            .await
            .map_err(|e| Error::backend("purge", e))?
            .try_collect()
            .await
            .map_err(|e| Error::backend("purge", e))?;
        let ids = found
            .iter()
            .map(|d| match d.get("_id") {
                Some(Bson::String(s)) => LockId::new(s.as_str()).map_err(|e| Error::Malformed {
                    resource: "<unknown>".into(),
                    field: "lockId".into(),
                    reason: e.to_string(),
                }),
                other => Err(Error::Malformed {
                    resource: "<unknown>".into(),
                    field: "lockId".into(),
                    reason: format!("expected a string, got {other:?}"),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
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
                Ok(mut r) => removed.append(&mut r),
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
            return Err(incomplete(removed, Error::backend("purge", e)));
        }
        sort_purged(&mut removed);
        tracing::debug!(removed = removed.len(), groups = ids.len(), "purged");
        Ok(removed)
    }

    #[tracing::instrument(name = "mongo.create_indexes", skip_all)]
    async fn create_indexes(&self) -> Result<(), Error> {
        let unique = IndexOptions::builder().unique(true).build();
        let mut models = vec![
            IndexModel::builder()
                .keys(doc! { "resource": 1 })
                .options(unique)
                .build(),
        ];
        for key in [
            "exclusive.lockId",
            "exclusive.expiresAt",
            "shared.locks.lockId",
            "shared.locks.expiresAt",
        ] {
            models.push(IndexModel::builder().keys(doc! { key: 1 }).build());
        }
        self.coll
            .create_indexes(models)
            .await
            .map_err(|e| Error::backend("create_indexes", e))?;
        Ok(())
    }
}
