//! `status` (the locks matching a filter) and `summary` (every resource's contention),
//! each read in one command.
//!
//! Reads that report who holds or leads read what is majority-committed (read concern
//! `majority`): a grant applied on a primary that a failover then rolls back is never
//! reported. It costs no command: the primary answers from its majority-committed
//! snapshot, which trails its newest writes by about one replication round trip (a lock
//! just granted with `w: 1`, or renewed, shows as of that snapshot until then).

use mongodb::bson::{RawDocumentBuf, doc};
use mongodb::options::ReadConcern;

use lockwright_engine::table;
use lockwright_engine::{Error, Filter, LockStatus, Summary, Timestamp};

use crate::read::{CURSOR_BATCH, Read, all_rows, lossy, unless_skipped};
use crate::{MongoStore, pipeline};

/// `status`: the locks matching `filter`.
pub(crate) async fn status(store: &MongoStore, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
    filter.validate()?;
    store.ready("status").await?;
    // One command: the documents and the server's `now` in one aggregation. A filter
    // with a TTL bound needs `now` before the query to use the expiry indexes: then the
    // server's time is asked for first (`hello`), and the query is a `find`.
    let ttl_bound = filter.ttl_lt.is_some() || filter.ttl_gte.is_some();
    let now = if ttl_bound {
        Some(store.now_value("status").await?)
    } else {
        None
    };
    let prefilter = pipeline::status_prefilter(filter, now);
    let raw = if ttl_bound {
        let coll = store.coll.clone_with_type::<RawDocumentBuf>();
        let find = coll
            .find(prefilter)
            .read_concern(ReadConcern::majority())
            .batch_size(CURSOR_BATCH);
        all_rows("status", find).await?
    } else {
        let aggregate = store
            .coll
            .aggregate(pipeline::read_with_now(prefilter, &store.now_expr()))
            .read_concern(ReadConcern::majority())
            .with_type::<RawDocumentBuf>()
            .batch_size(CURSOR_BATCH);
        all_rows("status", aggregate).await?
    };
    let docs = raw
        .iter()
        .map(|r| lossy("status", r))
        .collect::<Result<Vec<_>, _>>()?;
    // Status reports locks as they are; no rule with a grace is decided here.
    let read = Read::from_docs(&docs, std::time::Duration::ZERO);
    // No document, no lock (and no `now` needed).
    let Some(now) = now.or(read.now) else {
        return unless_skipped(Vec::new(), read.skipped);
    };
    unless_skipped(table::status(&[&read.table], filter, now), read.skipped)
}

/// `summary`: every document and the server's `now` in one aggregation, summarised by the
/// engine with the store's takeover grace (the rule its grants follow). Idle documents are
/// read too, so that a malformed one is reported rather than filtered out unseen.
pub(crate) async fn summary(store: &MongoStore) -> Result<Summary, Error> {
    let read = store.read_with_now("summary", doc! {}).await?;
    // Without a `now` no document was read, and the table is empty: any instant will do.
    let now = read.now.unwrap_or(Timestamp::from_millis(0));
    Ok(Summary::of(&[&read.table], now, read.skipped))
}
