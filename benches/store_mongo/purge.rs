//! Purge of N expired groups among N live ones (`purge/N`), and what the server alone takes
//! to delete the expired documents of the largest N (`purge_delete_many`,
//! `purge_delete_batches`).

use std::sync::Arc;
use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_benches::Record;
use lockwright_engine::{LockStore, ManualClock, Mode, Timestamp};
use lockwright_store_mongo::{DEFAULT_PURGE_BATCH, MongoStore};
use mongodb::Client;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::WriteConcern;

use crate::documents::{date, ready_store, refill, resource_doc};
use crate::harness::Bench;
use crate::{GROUP, T0};

/// The purge data set: `n` groups of one exclusive lock expired at `T0` - 1 s - the takeover
/// grace (resources `eNNNNN`) among `n` live for an hour more (`lNNNNN`), all created a
/// second before that.
fn purge_set(n: usize) -> Vec<Document> {
    // Expired a second before the store's takeover grace ended: abandoned, so purged.
    let grace = lockwright_engine::DEFAULT_TAKEOVER_GRACE.as_millis() as u64;
    let created = Timestamp::from_millis(T0.as_millis() - 2_000 - grace);
    let expired_at = Some(Timestamp::from_millis(T0.as_millis() - 1_000 - grace));
    let live_until = Some(T0.saturating_add(Duration::from_secs(3_600)));
    (0..n)
        .flat_map(|i| {
            [
                resource_doc(
                    &format!("e{i:05}"),
                    Mode::Exclusive,
                    &format!("ge{i:05}"),
                    "bench",
                    created,
                    expired_at,
                ),
                resource_doc(
                    &format!("l{i:05}"),
                    Mode::Exclusive,
                    &format!("gl{i:05}"),
                    "bench",
                    created,
                    live_until,
                ),
            ]
        })
        .collect()
}

/// `purge/N` for each of `ns`, then the deletes alone for the largest, on a store of its
/// own (on a manual clock at [`T0`]), which it returns.
pub fn purge(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
    ns: &[usize],
) -> MongoStore {
    let purging = bench
        .rt
        .block_on(ready_store(client, Some(Arc::new(ManualClock::new(T0)))));
    for &n in ns {
        let batches = n.div_ceil(DEFAULT_PURGE_BATCH);
        let mut record = Record::sized(GROUP, "purge", n as u64);
        record.extra.insert("batches".into(), batches as f64);
        record.note = Some(format!(
            "{n} expired groups among {n} live, {batches} batch(es) of at most {DEFAULT_PURGE_BATCH} groups"
        ));
        bench.run(
            group,
            record,
            async |_| refill(&purging, purge_set(n)).await,
            async |_| purging.purge().await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(n)),
        );
    }
    // What the server alone takes to delete the expired documents of the largest N: all
    // at once, and in transactions of one batch each as purge's batches do (no read, no
    // decision).
    let n = *ns.last().unwrap();
    let expired = doc! { "exclusive.expiresAt": { "$lte": date(T0) } };
    let record = Record::sized(GROUP, "purge_delete_many", n as u64).with_note(format!(
        "diagnostic: one delete_many of the {n} expired documents of purge/{n}, no transaction"
    ));
    bench.run(
        group,
        record,
        async |_| refill(&purging, purge_set(n)).await,
        async |_| {
            purging
                .collection()
                .delete_many(expired.clone())
                .await
                .unwrap()
        },
        async |_, _| (),
        |r| assert_eq!(r.deleted_count, n as u64),
    );
    let record = Record::sized(GROUP, "purge_delete_batches", n as u64).with_note(format!(
        "diagnostic: the same deletes by resource name in {batches} transactions of \
         {DEFAULT_PURGE_BATCH}, one after another",
        batches = n.div_ceil(DEFAULT_PURGE_BATCH)
    ));
    let names: Vec<Bson> = (0..n).map(|i| Bson::String(format!("e{i:05}"))).collect();
    bench.run(
        group,
        record,
        async |_| refill(&purging, purge_set(n)).await,
        async |_| {
            let mut deleted = 0;
            for batch in names.chunks(DEFAULT_PURGE_BATCH) {
                let mut session = client.start_session().await.unwrap();
                // The store's purge commits with majority write concern; so does this.
                session
                    .start_transaction()
                    .write_concern(WriteConcern::majority())
                    .await
                    .unwrap();
                deleted += purging
                    .collection()
                    .delete_many(doc! { "resource": { "$in": batch } })
                    .session(&mut session)
                    .await
                    .unwrap()
                    .deleted_count;
                session.commit_transaction().await.unwrap();
            }
            deleted
        },
        async |_, _| (),
        |deleted| assert_eq!(*deleted, n as u64),
    );
    purging
}
