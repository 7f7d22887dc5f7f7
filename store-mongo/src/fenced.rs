//! Fenced writes to the user's own collections: a write applies only if no higher fence has
//! written the document.
//!
//! A fence protects data only where the data is stored: the store must refuse a write that
//! carries a lower fence than one it has already accepted. [`FencedCollection`] makes that
//! check part of the user's own write, in the same single command:
//!
//! - every write it makes stamps the document with `{resource, fence}` in the fence field
//!   (`_fence` unless [`FencedCollection::with_field`] names another);
//! - every update, replacement and delete carries the condition "the document has no fence
//!   field, or its stamp names the same resource with a fence no higher than this one" in
//!   its filter, so the server applies it only then, atomically with its other conditions;
//! - when a write matched no document, one read with the caller's filter tells a refusal
//!   ([`Error::Fenced`], naming the stamp seen) from a filter that matched nothing (an
//!   ordinary result with `matched_count` 0), so a refused write is never a silent no-op.
//!
//! Equal fences pass: a holder may write the same document many times. Fences of different
//! resources cannot be compared, so a document stamped under one resource refuses writes
//! under another. A shared lock's holders have different fences: after one of them writes
//! a document, the holders with lower fences may no longer write it, although their locks
//! are live (fence exclusive locks' writes, or give each shared holder documents of its
//! own).
//!
//! What a fence field cannot protect: a deleted document leaves no stamp, so a stale
//! holder's insert after its successor's delete is accepted. Where that matters, mark
//! documents deleted with a fenced update instead.

use std::fmt;
use std::marker::PhantomData;

use mongodb::bson::{Document, doc};
use mongodb::options::UpdateModifications;
use mongodb::results::{DeleteResult, InsertOneResult, UpdateResult};
use mongodb::{ClientSession, Collection};
use serde::Serialize;

use lockwright_engine::error::Escaped;
use lockwright_engine::{Error, Resource};

use crate::failure;
use crate::setup::{DUPLICATE_KEY, command_code};

mod stamp;
#[cfg(test)]
mod tests;
mod write;

use stamp::names_id;
pub use write::{FencedDelete, FencedInsert, FencedReplace, FencedUpdate};

/// The field a [`FencedCollection`] stamps unless told otherwise.
pub const DEFAULT_FENCE_FIELD: &str = "_fence";

/// The user's collection, written under one lock's fence: each write applies only if no
/// higher fence of the same resource has written the document (see the
/// [module](crate::fenced) for the rules).
///
/// Build one from a guard (`LockGuard::fenced` in the `lockwright` crate) or from a
/// resource and fence with [`FencedCollection::new`]. Each write method returns the write,
/// which runs when awaited; `.session(&mut session)` before the `.await` runs it in the
/// caller's session, and so in its transaction if one is started.
///
/// ```no_run
/// # async fn f(orders: mongodb::Collection<mongodb::bson::Document>) -> Result<(), lockwright_engine::Error> {
/// use lockwright_engine::{Error, Resource};
/// use lockwright_store_mongo::FencedCollection;
/// use mongodb::bson::doc;
///
/// let fenced = FencedCollection::new(&orders, Resource::new("order-7")?, 42);
/// match fenced.update_one(doc! {"_id": 7}, doc! {"$set": {"state": "paid"}}).await {
///     Ok(done) => assert_eq!(done.matched_count, 1),
///     Err(Error::Fenced { seen_fence, .. }) => eprintln!("taken over: fence {seen_fence} wrote since"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
///
/// The same writes in a transaction, with the user's other writes:
///
/// ```no_run
/// # async fn f(orders: mongodb::Collection<mongodb::bson::Document>, fenced: lockwright_store_mongo::FencedCollection<mongodb::bson::Document>) -> Result<(), Box<dyn std::error::Error>> {
/// use mongodb::bson::doc;
///
/// let mut session = orders.client().start_session().await?;
/// session.start_transaction().await?;
/// fenced
///     .update_one(doc! {"_id": 7}, doc! {"$set": {"state": "paid"}})
///     .session(&mut session)
///     .await?;
/// fenced.delete_one(doc! {"_id": 8}).session(&mut session).await?;
/// session.commit_transaction().await?;
/// # Ok(()) }
/// ```
pub struct FencedCollection<T> {
    /// The user's collection, untyped: the writes add a field to the user's documents.
    docs: Collection<Document>,
    resource: Resource,
    fence: u64,
    field: String,
    /// The type of the user's documents, which `replace_one` and `insert_one` take.
    documents: PhantomData<fn(&T)>,
}

impl<T> Clone for FencedCollection<T> {
    fn clone(&self) -> Self {
        FencedCollection {
            docs: self.docs.clone(),
            resource: self.resource.clone(),
            fence: self.fence,
            field: self.field.clone(),
            documents: PhantomData,
        }
    }
}

impl<T> fmt::Debug for FencedCollection<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedCollection")
            .field("collection", &self.docs.namespace())
            .field("resource", &self.resource)
            .field("fence", &self.fence)
            .field("field", &self.field)
            .finish()
    }
}

impl<T> FencedCollection<T> {
    /// Writes to `collection` under `fence`, a fencing token of a grant on `resource`.
    pub fn new(collection: &Collection<T>, resource: Resource, fence: u64) -> Self
    where
        T: Send + Sync,
    {
        FencedCollection {
            docs: collection.clone_with_type(),
            resource,
            fence,
            field: DEFAULT_FENCE_FIELD.to_owned(),
            documents: PhantomData,
        }
    }

    /// Stamps `field` instead of [`DEFAULT_FENCE_FIELD`]: a top-level field name other than
    /// `_id`, not empty, without `.` and not starting with `$`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for any other name.
    pub fn with_field(mut self, field: &str) -> Result<Self, Error> {
        if field.is_empty()
            || field == "_id"
            || field.starts_with('$')
            || field.contains('.')
            || field.contains('\0')
        {
            return Err(Error::invalid(
                "fence field",
                format!(
                    "`{}` is not a top-level field name other than `_id` (not empty, no `.`, not \
                     starting with `$`)",
                    Escaped(field)
                ),
            ));
        }
        field.clone_into(&mut self.field);
        Ok(self)
    }

    /// The field this collection stamps.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The resource whose fence the writes carry.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The fence the writes carry.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Updates one document that matches `filter` and that no higher fence has written,
    /// with `update` (update operators, or a pipeline), and stamps it with this fence.
    /// `matched_count` 0 means no document matched `filter`. Runs when awaited; add
    /// [`.session(&mut session)`](FencedUpdate::session) first to run it in a session.
    ///
    /// # Errors
    /// [`Error::Fenced`] when documents match `filter` but a fence this one may not
    /// overtake has written them; [`Error::InvalidArgument`] for an update that is a
    /// replacement document or that changes the fence field itself; [`Error::Backend`] for
    /// a failure of the server or the connection (its outcome says whether the update may
    /// have been applied); [`Error::Malformed`] for a fence field this library did not write.
    pub fn update_one(
        &self,
        filter: Document,
        update: impl Into<UpdateModifications>,
    ) -> FencedUpdate<'_, T> {
        FencedUpdate::new(self, filter, update.into(), false)
    }

    /// As [`update_one`](Self::update_one), inserting the document when none matches
    /// `filter`. The filter must name the document's `_id` (an equality), so that an
    /// existing document the fence refuses is not mistaken for a missing one: the server
    /// then tries to insert a second document with that `_id`, fails, and the failure is
    /// reported as [`Error::Fenced`]. In a session's transaction, that failure aborts the
    /// transaction, as any duplicate key in a transaction does.
    ///
    /// # Errors
    /// As [`update_one`](Self::update_one), and [`Error::InvalidArgument`] for a filter
    /// without an `_id` equality.
    pub fn upsert_one(
        &self,
        filter: Document,
        update: impl Into<UpdateModifications>,
    ) -> FencedUpdate<'_, T> {
        FencedUpdate::new(self, filter, update.into(), true)
    }

    /// Replaces one document that matches `filter` and that no higher fence has written
    /// with `replacement`, stamped with this fence (a fence field in `replacement`, such as
    /// one read back with the document, is overwritten).
    ///
    /// # Errors
    /// As [`update_one`](Self::update_one).
    pub fn replace_one<'a>(&'a self, filter: Document, replacement: &'a T) -> FencedReplace<'a, T>
    where
        T: Serialize,
    {
        FencedReplace::new(self, filter, replacement)
    }

    /// Inserts `document`, stamped with this fence. When a document with its `_id` exists
    /// already and a fence this one may not overtake wrote it, the error is
    /// [`Error::Fenced`]; any other duplicate is the server's duplicate-key error. In a
    /// session's transaction, a duplicate aborts the transaction.
    ///
    /// # Errors
    /// [`Error::Fenced`], or [`Error::Backend`] (a duplicate key among them).
    pub fn insert_one<'a>(&'a self, document: &'a T) -> FencedInsert<'a, T>
    where
        T: Serialize,
    {
        FencedInsert::new(self, document)
    }

    /// Deletes one document that matches `filter` and that no higher fence has written.
    /// `deleted_count` 0 means no document matched `filter`.
    ///
    /// # Errors
    /// As [`update_one`](Self::update_one).
    pub fn delete_one(&self, filter: Document) -> FencedDelete<'_, T> {
        FencedDelete::new(self, filter)
    }

    /// The fence as BSON stores it.
    fn fence_i64(&self, op: &'static str) -> Result<i64, Error> {
        i64::try_from(self.fence).map_err(|_| {
            Error::invalid(
                "fence",
                format!(
                    "{op}: fence {} does not fit a BSON 64-bit integer",
                    self.fence
                ),
            )
        })
    }

    /// The stamp a write leaves: `{resource, fence}`.
    fn stamp(&self, op: &'static str) -> Result<Document, Error> {
        Ok(doc! {"resource": self.resource.as_str(), "fence": self.fence_i64(op)?})
    }

    /// `filter`, and "no fence this one may not overtake has written the document".
    fn guarded(&self, op: &'static str, filter: Document) -> Result<Document, Error> {
        let fence = self.fence_i64(op)?;
        #[cfg(lockwright_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::FencedWriteUnconditional) {
            let _ = fence;
            return Ok(filter);
        }
        let field = &self.field;
        let condition = doc! {"$or": [
            {field.as_str(): {"$exists": false}},
            {format!("{field}.resource"): self.resource.as_str(), format!("{field}.fence"): {"$lte": fence}},
        ]};
        Ok(doc! {"$and": [filter, condition]})
    }

    #[tracing::instrument(name = "mongo.fenced.update", skip_all, fields(resource = %self.resource, fence = self.fence))]
    async fn update(
        &self,
        session: Option<&mut ClientSession>,
        filter: Document,
        update: UpdateModifications,
        upsert: bool,
    ) -> Result<UpdateResult, Error> {
        let op = if upsert {
            "fenced upsert_one"
        } else {
            "fenced update_one"
        };
        if upsert && !names_id(&filter) {
            return Err(Error::invalid(
                "filter",
                "a fenced upsert's filter must name the document's `_id` (an equality), so \
                 that a document the fence refuses is not taken for a missing one",
            ));
        }
        let update = self.stamped_update(op, update)?;
        let guarded = self.guarded(op, filter.clone())?;
        let mut session = session;
        let mut duplicates = 0;
        loop {
            let action = self
                .docs
                .update_one(guarded.clone(), update.clone())
                .upsert(upsert);
            let result = match session.as_deref_mut() {
                Some(s) => action.session(s).await,
                None => action.await,
            };
            return match result {
                Ok(done) if done.matched_count == 0 && done.upserted_id.is_none() => {
                    self.refused_or(op, session, &filter, done).await
                }
                Ok(done) => Ok(done),
                Err(e) if upsert && command_code(&e) == Some(DUPLICATE_KEY) => {
                    // The document exists, and either the fence condition did not match it
                    // or a concurrent upsert inserted it first. In a transaction the error
                    // has aborted it, so read outside the session.
                    match self.find_stamp(op, None, &filter).await? {
                        Some(stamp) => Err(self.refusal(op, stamp)?),
                        // Inserted by a concurrent upsert whose stamp lets this one through:
                        // once more, now as an update (not in an aborted transaction).
                        None if duplicates == 0 && session.is_none() => {
                            duplicates += 1;
                            continue;
                        }
                        None => Err(failure::backend(op, &e)),
                    }
                }
                Err(e) => Err(failure::write_failed(op, &e)),
            };
        }
    }

    #[tracing::instrument(name = "mongo.fenced.replace", skip_all, fields(resource = %self.resource, fence = self.fence))]
    async fn replace(
        &self,
        session: Option<&mut ClientSession>,
        filter: Document,
        replacement: &T,
    ) -> Result<UpdateResult, Error>
    where
        T: Serialize,
    {
        let op = "fenced replace_one";
        let replacement = self.stamped_document(op, replacement)?;
        let guarded = self.guarded(op, filter.clone())?;
        let action = self.docs.replace_one(guarded, replacement);
        let mut session = session;
        let result = match session.as_deref_mut() {
            Some(s) => action.session(s).await,
            None => action.await,
        };
        match result {
            Ok(done) if done.matched_count == 0 => {
                self.refused_or(op, session, &filter, done).await
            }
            Ok(done) => Ok(done),
            Err(e) => Err(failure::write_failed(op, &e)),
        }
    }

    #[tracing::instrument(name = "mongo.fenced.insert", skip_all, fields(resource = %self.resource, fence = self.fence))]
    async fn insert(
        &self,
        session: Option<&mut ClientSession>,
        document: &T,
    ) -> Result<InsertOneResult, Error>
    where
        T: Serialize,
    {
        let op = "fenced insert_one";
        let document = self.stamped_document(op, document)?;
        let id = document.get("_id").cloned();
        let action = self.docs.insert_one(document);
        let result = match session {
            Some(s) => action.session(s).await,
            None => action.await,
        };
        match result {
            Ok(done) => Ok(done),
            Err(e) if command_code(&e) == Some(DUPLICATE_KEY) => match id {
                Some(id) => self.duplicate(op, &doc! {"_id": id}, &e).await,
                None => Err(failure::backend(op, &e)),
            },
            Err(e) => Err(failure::write_failed(op, &e)),
        }
    }

    #[tracing::instrument(name = "mongo.fenced.delete", skip_all, fields(resource = %self.resource, fence = self.fence))]
    async fn delete(
        &self,
        session: Option<&mut ClientSession>,
        filter: Document,
    ) -> Result<DeleteResult, Error> {
        let op = "fenced delete_one";
        let guarded = self.guarded(op, filter.clone())?;
        let action = self.docs.delete_one(guarded);
        let mut session = session;
        let result = match session.as_deref_mut() {
            Some(s) => action.session(s).await,
            None => action.await,
        };
        match result {
            Ok(done) if done.deleted_count == 0 => {
                self.refused_or(op, session, &filter, done).await
            }
            Ok(done) => Ok(done),
            Err(e) => Err(failure::write_failed(op, &e)),
        }
    }

    /// After a write that matched nothing: [`Error::Fenced`] if a document matches `filter`
    /// under a stamp this fence may not overtake, else the write's own result.
    async fn refused_or<R>(
        &self,
        op: &'static str,
        session: Option<&mut ClientSession>,
        filter: &Document,
        done: R,
    ) -> Result<R, Error> {
        let found = self.find_stamp(op, session, filter).await?;
        match found {
            Some(stamp) => Err(self.refusal(op, stamp)?),
            None => Ok(done),
        }
    }

    /// After a duplicate key from an insert: [`Error::Fenced`] if the existing document's
    /// stamp refuses this fence, else the duplicate-key error itself.
    async fn duplicate<R>(
        &self,
        op: &'static str,
        filter: &Document,
        e: &mongodb::error::Error,
    ) -> Result<R, Error> {
        match self.find_stamp(op, None, filter).await? {
            Some(stamp) => Err(self.refusal(op, stamp)?),
            None => Err(failure::backend(op, e)),
        }
    }

    /// The fence field of a document that matches `filter` and whose stamp refuses this
    /// fence, if there is one.
    async fn find_stamp(
        &self,
        op: &'static str,
        session: Option<&mut ClientSession>,
        filter: &Document,
    ) -> Result<Option<Document>, Error> {
        let fence = self.fence_i64(op)?;
        let field = self.field.as_str();
        let refusing = doc! {"$and": [filter.clone(), {"$nor": [
            {field: {"$exists": false}},
            {format!("{field}.resource"): self.resource.as_str(), format!("{field}.fence"): {"$lte": fence}},
        ]}]};
        let action = self
            .docs
            .find_one(refusing)
            .projection(doc! {"_id": 1, field: 1});
        let found = match session {
            Some(s) => action.session(s).await,
            None => action.await,
        }
        .map_err(|e| failure::backend(op, &e))?;
        Ok(found)
    }
}
