//! Purge of N expired groups among N live ones (`purge/N`).

use std::sync::Arc;
use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::{LockStore, ManualClock, Mode, Timestamp};
use lockwright_store_mongo::MongoStore;
use mongodb::Client;
use mongodb::bson::Document;

use crate::T0;
use crate::documents::{ready_store, refill, resource_doc};
use crate::harness::{Bench, Row};

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

/// `purge/N` for each of `ns` on a store of its own (on a manual clock at [`T0`]), which
/// it returns. The store removes the expired groups in batches of `DEFAULT_PURGE_BATCH`.
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
        bench.run(
            group,
            Row::sized("purge", n),
            async |_| refill(&purging, purge_set(n)).await,
            async |_| purging.purge().await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(n)),
        );
    }
    purging
}
