//! Group operations of K locks: `renew/K` (with, for one K, where renew's time per lock
//! goes) and `unlock/K`.

use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::{LockId, LockStore, Mode, Timestamp, Ttl};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::request;
use mongodb::Client;
use mongodb::bson::{Bson, DateTime, Document, doc};

use crate::documents::{date, ready_store, refill, resource_doc, server_now};
use crate::harness::{Bench, Row};

/// `renew/K` for each of `ks` on a store of its own, which it returns; the K it diagnoses
/// is the largest up to 100.
pub fn renew(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
    ks: &[usize],
) -> MongoStore {
    let renewing = bench.rt.block_on(ready_store(client, None));
    let diagnosed_k = ks.iter().copied().filter(|k| *k <= 100).max().unwrap_or(1);
    let ttl = Ttl::new(Duration::from_secs(600)).unwrap();
    for &k in ks {
        let lock_id = LockId::new(format!("renew-{k}")).unwrap();
        bench.rt.block_on(async {
            for i in 0..k {
                let req = request(
                    &format!("renew-{k}/r{i}"),
                    lock_id.as_str(),
                    Some(ttl.as_duration()),
                );
                renewing.lock(&req).await.unwrap();
            }
        });
        let sent = bench.measure(
            group,
            Row::sized("renew", k),
            async || renewing.renew(&lock_id, ttl, Duration::ZERO).await,
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(k)),
        );
        if k == diagnosed_k
            && let Some(sent) = sent
        {
            renew_update_diagnostics(bench, group, &renewing, &lock_id, k, &sent);
        }
    }
    renewing
}

/// `unlock/K` for each of `ks` on a store of its own, which it returns.
pub fn unlock(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
    ks: &[usize],
) -> MongoStore {
    let unlocking = bench.rt.block_on(ready_store(client, None));
    for &k in ks {
        let lock_id = LockId::new(format!("unlock-{k}")).unwrap();
        // The group is inserted again (insert_many) before each run.
        bench.run(
            group,
            Row::sized("unlock", k),
            async |_| {
                let created = server_now();
                let docs = (0..k)
                    .map(|i| {
                        let resource = format!("unlock-{k}/r{i}");
                        resource_doc(
                            &resource,
                            Mode::Exclusive,
                            lock_id.as_str(),
                            "bench",
                            created,
                            None,
                        )
                    })
                    .collect();
                refill(&unlocking, docs).await;
            },
            async |_| unlocking.unlock(&lock_id).await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(k)),
        );
    }
    unlocking
}

/// Where renew's time per lock goes: the `update` command the store sent for a group of
/// `k`, sent again alone (no transaction, same write concern; its dates moved on each time
/// so every run writes), next to the same change made with one `$set`.
fn renew_update_diagnostics(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    store: &MongoStore,
    lock_id: &LockId,
    k: usize,
    sent: &[(String, Document)],
) {
    let Some(updates) = sent
        .iter()
        .find(|(name, _)| name == "update")
        .and_then(|(_, c)| c.get("updates"))
        .cloned()
    else {
        panic!("renew sent no update: {sent:?}");
    };
    let coll = store.collection();
    let db = bench.db.client().database(&coll.namespace().db);
    bench.run(
        group,
        Row::sized("renew_update_alone", k),
        async |seq| {
            let mut u = updates.clone();
            shift_dates(&mut u, seq);
            u
        },
        async |u| {
            // A command run by hand takes no write concern from the collection: say it.
            db.run_command(doc! {
                "update": coll.name(),
                "updates": u.clone(),
                "writeConcern": { "w": "majority" },
            })
            .await
            .unwrap()
        },
        async |_, _| (),
        |reply| assert_eq!(reply.get_i32("nModified").ok(), Some(k as i32), "{reply:?}"),
    );
    // The same change for the k exclusive locks as a plain $set of two fields.
    let base = server_now();
    bench.run(
        group,
        Row::sized("renew_update_set", k),
        async |seq| Timestamp::from_millis(base.as_millis() + seq),
        async |now| {
            let expires = now.saturating_add(Duration::from_secs(600));
            coll.update_many(
                doc! { "exclusive.lockId": lock_id.as_str() },
                doc! { "$set": { "exclusive.expiresAt": date(expires), "exclusive.renewedAt": date(*now) } },
            )
            .await
            .unwrap()
        },
        async |_, _| (),
        |r| assert_eq!(r.modified_count, k as u64),
    );
}

/// Moves every date in `b` `ms` milliseconds on.
fn shift_dates(b: &mut Bson, ms: u64) {
    match b {
        Bson::DateTime(d) => {
            *d = DateTime::from_millis(d.timestamp_millis() + i64::try_from(ms).unwrap());
        }
        Bson::Document(d) => d.iter_mut().for_each(|(_, v)| shift_dates(v, ms)),
        Bson::Array(items) => items.iter_mut().for_each(|v| shift_dates(v, ms)),
        _ => {}
    }
}
