//! The set-up check every operation makes once: a replica set (or sharded cluster), a
//! collection name MongoDB allows, and a unique index on `resource` that can be trusted
//! (made on first use when the collection does not exist yet, or is empty with no index);
//! and `create_indexes`, which makes that index.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use futures_util::TryStreamExt;
use mongodb::IndexModel;
use mongodb::bson::{Bson, Document, doc};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::IndexOptions;

use lockwright_engine::Error;

use crate::{MongoFailure, MongoStore, failure, names, schema};

/// The server code of a command naming a collection that does not exist.
pub(crate) const NAMESPACE_NOT_FOUND: i32 = 26;

/// The server code of a command the user is not allowed to run.
const UNAUTHORIZED: i32 = 13;

/// The server code of a duplicate-key error.
pub(crate) const DUPLICATE_KEY: i32 = 11000;

/// The server codes of an index that conflicts with an existing one of the same name or keys.
const INDEX_CONFLICT: [i32; 2] = [85, 86];

impl MongoStore {
    pub(crate) async fn hello(&self, op: &'static str) -> Result<Document, Error> {
        self.client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| failure::backend(op, &e))
    }

    /// Checks that the deployment supports transactions and that a unique index on
    /// `resource` that can be trusted exists; returns that index's name. Checked once and
    /// remembered; forgotten again when a grant finds the index gone.
    pub(crate) async fn ready(&self, op: &'static str) -> Result<Arc<str>, Error> {
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
        self.was_ready.store(true, Ordering::SeqCst);
        Ok(index)
    }

    /// `Misconfigured` when MongoDB refuses the collection's name (a handle from
    /// [`MongoStore::from_collection`] was not checked when it was made).
    pub(crate) fn check_namespace(&self) -> Result<(), Error> {
        let ns = self.coll.namespace();
        match names::refused(&ns.db, &ns.coll) {
            Some((_, why)) => Err(Error::Misconfigured {
                reason: format!("the lock collection's {why}: MongoDB does not allow it"),
            }),
            None => Ok(()),
        }
    }

    /// Forgets the set-up check, so that the next operation checks again.
    pub(crate) fn forget_ready(&self) {
        *self.ready.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The collection's indexes; none when the collection does not exist.
    pub(crate) async fn indexes(&self, op: &'static str) -> Result<Vec<IndexModel>, Error> {
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
    /// A collection that does not exist yet, or that is empty and has no index but `_id`'s,
    /// is first made ready with [`create_indexes`] (first use needs no set-up); any other
    /// collection without a trusted index is refused.
    async fn trusted_resource_index(&self, op: &'static str) -> Result<String, Error> {
        let mut indexes = self.indexes(op).await?;
        if self.unused(op, &indexes).await? {
            match create_indexes(self).await {
                Ok(()) => {
                    tracing::info!(
                        collection = %self.coll.namespace(),
                        "first use: created the lock collection's indexes"
                    );
                    indexes = self.indexes(op).await?;
                }
                // Not allowed to (a user with read-only rights, say): refused as any
                // collection without the index is, below, with the same advice.
                Err(Error::Backend { source, .. })
                    if source
                        .downcast_ref::<MongoFailure>()
                        .is_some_and(|f| f.code() == Some(UNAUTHORIZED)) => {}
                Err(e) => return Err(e),
            }
        }
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
}

impl MongoStore {
    /// Whether the lock collection was never used ([`never_used`]), and this store never
    /// found it ready (one that did and finds it gone was dropped while in use, and is
    /// refused).
    async fn unused(&self, op: &'static str, indexes: &[IndexModel]) -> Result<bool, Error> {
        if self.was_ready.load(Ordering::SeqCst) {
            return Ok(false);
        }
        never_used(&self.coll, indexes)
            .await
            .map_err(|e| failure::backend(op, &e))
    }

    /// Whether the lock collection is missing, was never used, or is in use, by reading
    /// it (its name in the database, its indexes, whether it holds a document): what the
    /// set-up check of a first operation decides on, told without writing anything (a
    /// missing or never-used collection is made ready by that check). `lockwright doctor`
    /// reports it.
    ///
    /// # Errors
    /// A backend error when the collection cannot be read.
    pub async fn collection_use(&self) -> Result<CollectionUse, Error> {
        let op = "collection_use";
        let ns = self.coll.namespace();
        let names = self
            .client
            .database(&ns.db)
            .list_collection_names()
            .filter(doc! {"name": &ns.coll})
            .await
            .map_err(|e| failure::backend(op, &e))?;
        if names.is_empty() {
            return Ok(CollectionUse::Missing);
        }
        let indexes = self.indexes(op).await?;
        let never = never_used(&self.coll, &indexes)
            .await
            .map_err(|e| failure::backend(op, &e))?;
        Ok(if never {
            CollectionUse::NeverUsed
        } else {
            CollectionUse::InUse
        })
    }
}

/// What [`MongoStore::collection_use`] finds of the lock collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectionUse {
    /// It does not exist yet.
    Missing,
    /// It exists with no document and no index but `_id`'s.
    NeverUsed,
    /// Anything else: the set-up check only reads it.
    InUse,
}

/// Whether a collection with `indexes` was never used: it has no index at all (it does not
/// exist), or only the `_id` index and no document.
async fn never_used(
    coll: &mongodb::Collection<Document>,
    indexes: &[IndexModel],
) -> Result<bool, mongodb::error::Error> {
    let only_id = indexes.iter().all(|i| {
        i.options
            .as_ref()
            .and_then(|o| o.name.as_deref())
            .is_some_and(|n| n == "_id_")
    });
    if !only_id {
        return Ok(false);
    }
    if indexes.is_empty() {
        return Ok(true);
    }
    let any = coll.find_one(doc! {}).projection(doc! {"_id": 1}).await?;
    Ok(any.is_none())
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

pub(crate) fn command_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        _ => None,
    }
}

/// `create_indexes`: makes the unique index on `resource` and the plain ones.
pub(crate) async fn create_indexes(store: &MongoStore) -> Result<(), Error> {
    let op = "create_indexes";
    store.check_namespace()?;
    let existing = store.indexes(op).await?;
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
    match store.coll.create_indexes(models).await {
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
                    store.coll.namespace()
                ),
            });
        }
        Err(e) => return Err(failure::backend(op, &e)),
    }
    store.forget_ready();
    Ok(())
}
