//! Reading lock documents: text that is not UTF-8 read leniently, documents decoded into
//! a table the engine decides on, and the ones it cannot decide on named.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::TryStreamExt;
use mongodb::bson::{Bson, Document, RawDocumentBuf, doc};
use mongodb::{ClientSession, Collection, Cursor};

use lockwright_engine::{
    Error, LockStatus, LockTable, MalformedDocument, Resource, ResourceState, Timestamp,
};

use crate::{MongoStore, failure, pipeline, schema};

/// Documents asked for per cursor batch: group reads finish in one round trip up to the
/// server's 16 MB batch limit.
pub(crate) const CURSOR_BATCH: u32 = 100_000;

impl MongoStore {
    /// The document of `resource`, read with [`lossy_text`].
    pub(crate) async fn read_resource(
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
}

impl MongoStore {
    /// The documents `filter` matches and the server's `now`, in one aggregation outside a
    /// transaction, majority-committed (it reports who holds and waits: never what a
    /// rollback may erase), decoded with the store's takeover grace (after checking the
    /// collection is ready for `op`).
    pub(crate) async fn read_with_now(
        &self,
        op: &'static str,
        filter: Document,
    ) -> Result<Read, Error> {
        self.ready(op).await?;
        let aggregate = self
            .coll
            .aggregate(pipeline::read_with_now(filter, &self.now_expr()))
            .read_concern(mongodb::options::ReadConcern::majority())
            .with_type::<RawDocumentBuf>()
            .batch_size(CURSOR_BATCH);
        let docs = all_rows(op, aggregate)
            .await?
            .iter()
            .map(|raw| lossy(op, raw))
            .collect::<Result<Vec<Document>, _>>()?;
        Ok(Read::from_docs(&docs, self.grace))
    }
}

/// Every row of a `find` or `aggregate` run outside a transaction; a failure of the
/// command or of a later batch is a backend error of `op`.
pub(crate) async fn all_rows(
    op: &'static str,
    cursor: impl IntoFuture<Output = mongodb::error::Result<Cursor<RawDocumentBuf>>>,
) -> Result<Vec<RawDocumentBuf>, Error> {
    let cursor = cursor.await.map_err(|e| failure::backend(op, &e))?;
    cursor
        .try_collect()
        .await
        .map_err(|e| failure::backend(op, &e))
}

/// Reads every document an aggregation returns, inside the session's transaction.
pub(crate) async fn read_all(
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

pub(crate) fn lossy(op: &'static str, raw: &RawDocumentBuf) -> Result<Document, Error> {
    lossy_text(raw).map_err(|e| failure::backend(op, &e))
}

/// Documents read for one operation: the ones the rules can decide on as a table, the
/// others named.
pub(crate) struct Read {
    pub(crate) table: LockTable,
    /// The `now` the reading aggregation reported, if it ran over any document.
    pub(crate) now: Option<Timestamp>,
    /// The fence floor the reading aggregation reported ([`pipeline::FLOOR_FIELD`]), if it
    /// was asked for one and ran over any document: the least of them.
    pub(crate) floor: Option<u64>,
    /// The `_id` of each readable document.
    pub(crate) ids: BTreeMap<Resource, Bson>,
    /// The documents that could not be read.
    pub(crate) skipped: Vec<MalformedDocument>,
    /// The lock ids the unreadable documents name.
    pub(crate) unreadable_groups: BTreeSet<String>,
}

impl Read {
    /// Decodes `docs`. Two documents naming one resource (written while the unique index was
    /// missing) are both left unread: no rule can say which one holds the resource.
    pub(crate) fn from_docs(docs: &[Document], grace: Duration) -> Read {
        let floor = docs
            .iter()
            .filter_map(|d| match d.get(pipeline::FLOOR_FIELD) {
                Some(Bson::Int64(f)) => u64::try_from(*f).ok(),
                _ => None,
            })
            .min();
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
            table: LockTable::from_resources(resources).with_takeover_grace(grace),
            now,
            floor,
            ids,
            skipped,
            unreadable_groups,
        }
    }
}

/// `done` when nothing was skipped; otherwise a `Skipped` error carrying it.
pub(crate) fn unless_skipped(
    done: Vec<LockStatus>,
    skipped: Vec<MalformedDocument>,
) -> Result<Vec<LockStatus>, Error> {
    if skipped.is_empty() {
        Ok(done)
    } else {
        Err(Error::Skipped { done, skipped })
    }
}
