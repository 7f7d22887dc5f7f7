//! Status with each filter kind over a data set inserted once (`status/<filter>`), the same
//! queries on the server's clock (`status_server_clock/<filter>`).

use std::sync::Arc;
use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::{Filter, LockStore, ManualClock, Mode, Timestamp};
use lockwright_store_mongo::MongoStore;
use mongodb::Client;
use mongodb::bson::Document;

use crate::T0;
use crate::documents::{ready_store, resource_doc};
use crate::harness::{Bench, Row};

/// The status benchmarks over `status_n` locks on a store of their own, which it returns.
/// Each filter kind matches between 1 and a few hundred locks (the count is checked).
pub fn status(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
    status_n: usize,
) -> MongoStore {
    // Status with each filter kind over `status_n` locks, inserted once.
    let status_clock = Arc::new(ManualClock::new(T0));
    let reading = bench.rt.block_on(ready_store(client, Some(status_clock)));
    bench.rt.block_on(populate_status(&reading, status_n));
    let n = status_n;
    let ms = |x: usize| Duration::from_millis(x as u64);
    let minus = |x: usize| Timestamp::from_millis(T0.as_millis() - x as u64);
    let filters: Vec<(&str, Filter, usize)> = vec![
        (
            "resource",
            Filter::new().resource(format!("s{:06}", n / 2)),
            1,
        ),
        (
            "lock_id",
            Filter::new().lock_id(format!("g{:05}", n / 20)),
            10,
        ),
        ("owner", Filter::new().owner("owner-7"), n / 1_000),
        ("mode", Filter::new().mode(Mode::Shared), n / 100),
        (
            "created_before",
            Filter::new().created_before(minus(n - 100)),
            100,
        ),
        ("created_after", Filter::new().created_after(minus(100)), 99),
        (
            "ttl_lt",
            Filter::new().ttl_lt(Duration::from_secs(60) + ms(100)),
            100,
        ),
        (
            "ttl_gte",
            Filter::new().ttl_gte(Duration::from_secs(60) + ms(n - 100)),
            100,
        ),
    ];
    for (kind, filter, matches) in &filters {
        bench.measure(
            group,
            Row::of("status", kind),
            async || reading.status(filter).await,
            |r| {
                assert_eq!(
                    r.as_ref().map(Vec::len).ok(),
                    Some(*matches),
                    "status by {kind}"
                )
            },
        );
    }
    // The same collection on the server's clock, as a deployment reads it: one aggregation
    // returning the documents with the server's `now`; a TTL bound asks the server's time
    // first (`hello`) so that the query (a `find`) can use the expiry indexes.
    let on_server_clock = MongoStore::from_collection(reading.collection().clone());
    bench.rt.block_on(async {
        on_server_clock
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    for (kind, filter, matches) in filters
        .iter()
        .filter(|(kind, _, _)| ["resource", "lock_id", "owner", "ttl_lt"].contains(kind))
    {
        let ttl_bound = kind.starts_with("ttl");
        // The data set's expiry times are set for the manual clock's instant `T0`: what a
        // TTL bound matches on the server's clock is not checked.
        bench.measure(
            group,
            Row::of("status_server_clock", kind),
            async || on_server_clock.status(filter).await,
            |r| {
                if ttl_bound {
                    assert!(r.is_ok(), "{r:?}");
                } else {
                    assert_eq!(
                        r.as_ref().map(Vec::len).ok(),
                        Some(*matches),
                        "status by {kind} on the server's clock"
                    );
                }
            },
        );
    }
    reading
}

/// `n` locks, one per resource `sNNNNNN`: groups of 10 (`gNNNNN`), owners `owner-0` to
/// `owner-999` in turn, every 100th lock shared, created 1 ms apart up to `T0`, all live
/// at `T0` with remaining TTLs of 60 s + i ms. Inserted once with `insert_many`.
async fn populate_status(store: &MongoStore, n: usize) {
    let t0 = T0.as_millis();
    let docs: Vec<Document> = (0..n)
        .map(|i| {
            let mode = if i % 100 == 0 {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            let created = Timestamp::from_millis(t0 - (n - i) as u64);
            let expires = Timestamp::from_millis(t0 + 60_000 + i as u64);
            resource_doc(
                &format!("s{i:06}"),
                mode,
                &format!("g{:05}", i / 10),
                &format!("owner-{}", i % 1_000),
                created,
                Some(expires),
            )
        })
        .collect();
    for chunk in docs.chunks(10_000) {
        store.collection().insert_many(chunk).await.unwrap();
    }
    let all = store.status(&Filter::new()).await.unwrap();
    assert_eq!(
        all.len(),
        n,
        "every inserted lock reads back through the store"
    );
}
