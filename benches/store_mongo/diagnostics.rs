//! Diagnostics: rows that explain a missed grant or cycle target rather than measure one
//! (their notes start with "diagnostic"). What two writes back to back cost
//! (`baseline_twice`), where slock's time goes (`slock_push_modifier`,
//! `slock_push_pipeline`), the baseline right after an unlock (`baseline_after_unlock`),
//! and the same commands without the journal wait (`baseline_noop`, `xlock_refused`,
//! `baseline_w1`, `xlock_w1`).

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_benches::Record;
use lockwright_engine::{Error, Filter, LockStore};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::request;
use mongodb::bson::{Document, doc};
use mongodb::options::{
    Acknowledgment, CollectionOptions, ReturnDocument, UpdateModifications, WriteConcern,
};
use mongodb::{Client, Collection};

use crate::GROUP;
use crate::documents::{lock_fields, server_now};
use crate::grants::{Single, bump_baseline, upsert};
use crate::harness::fresh_id;

/// An update appending a lock document to `shared.locks` (a slock diagnostic).
type Append = fn(Document) -> UpdateModifications;

/// `baseline_twice`, also interleaved with the baseline.
pub fn baseline_twice(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, coll, plain_coll) = (s.bench, &s.coll, &s.plain_coll);
    // What two writes back to back cost on this server, next to the cycle's two: the bare
    // upsert twice (each majority write waits for its own journal commit).
    let mut record = Record::new(GROUP, "baseline_twice", None, 1).with_note(
        "diagnostic: the baseline twice back to back (two majority writes, as the \
         acquire+release cycle sends)",
    );
    let twice = async |on: &Collection<Document>| {
        bump_baseline(on).await;
        bump_baseline(on).await
    };
    record.extra = bench.paired(
        s.paired_rounds,
        async || s.plain_baseline().await,
        async |_| (),
        async |_: &()| twice(plain_coll).await,
        async |_, _| (),
    );
    bench.measure(
        group,
        record,
        async || twice(coll).await,
        |d| assert!(d.is_some()),
    );
}

/// `slock_push_modifier` and `slock_push_pipeline`, each also interleaved with the baseline.
pub fn slock_appends(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, latency, coll, plain_coll) = (s.bench, &s.latency, &s.coll, &s.plain_coll);
    // Where slock's time goes: the same change to a resource holding 3 shared locks (a
    // fourth appended, the count raised) as a plain `$push`, and as a one-stage update
    // pipeline, the form every grant evaluated on the server's clock must take.
    bench.rt.block_on(async {
        for j in 0..3 {
            let holder = request("s-diag", &format!("holder-{j}"), None);
            latency.slock(&holder, None).await.unwrap();
        }
    });
    let appends: [(&str, &str, Append); 2] = [
        (
            "slock_push_modifier",
            "a $push of the lock and a $inc of the count",
            |lock| {
                UpdateModifications::Document(doc! {
                    "$push": { "shared.locks": lock },
                    "$inc": { "shared.count": 1 },
                })
            },
        ),
        (
            "slock_push_pipeline",
            "a one-stage update pipeline ($concatArrays, $add)",
            |lock| {
                UpdateModifications::Pipeline(vec![doc! { "$set": {
                    "shared.locks": { "$concatArrays": [ "$shared.locks", [ { "$literal": lock } ] ] },
                    "shared.count": { "$add": [ "$shared.count", 1 ] },
                } }])
            },
        ),
    ];
    for (name, how, update) in appends {
        let append = async |on: &Collection<Document>, lock_id: &String| {
            on.find_one_and_update(
                doc! { "resource": "s-diag" },
                update(lock_fields(lock_id, "bench", server_now(), None)),
            )
            .return_document(ReturnDocument::After)
            .await
            .unwrap()
        };
        let remove = async |lock_id: String, _| {
            coll.update_one(
                doc! { "resource": "s-diag" },
                doc! {
                    "$pull": { "shared.locks": { "lockId": lock_id } },
                    "$inc": { "shared.count": -1 },
                },
            )
            .await
            .unwrap();
        };
        let mut record = Record::new(GROUP, name, None, 1).with_note(format!(
            "diagnostic: slock_at_limit's change to a resource holding 3 shared locks as {how}"
        ));
        record.extra = bench.paired(
            s.paired_rounds,
            async || s.plain_baseline().await,
            async |seq| fresh_id(seq),
            async |id: &String| append(plain_coll, id).await,
            remove,
        );
        bench.run(
            group,
            record,
            async |seq| fresh_id(seq),
            async |id: &String| append(coll, id).await,
            remove,
            |d| {
                // The append landed: three holders and the new lock, counted.
                let shared = d.as_ref().unwrap().get_document("shared").unwrap();
                assert_eq!(shared.get_array("locks").unwrap().len(), 4, "{d:?}");
                assert_eq!(shared.get_i32("count").ok(), Some(4), "{d:?}");
            },
        );
    }
}

/// `baseline_after_unlock`.
pub fn baseline_after_unlock(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, latency) = (s.bench, &s.latency);
    let record = Record::new(GROUP, "baseline_after_unlock", None, 1).with_note(
        "diagnostic: the baseline, each time right after an untimed xlock+unlock of another \
         resource (as xlock follows its own cleanup)",
    );
    bench.run(
        group,
        record,
        async |seq| {
            let req = request("y", &fresh_id(seq), None);
            latency.xlock(&req).await.unwrap();
            latency.unlock(&req.lock_id).await.unwrap();
        },
        async |_| s.baseline().await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
}

/// `baseline_noop` and `xlock_refused` (nothing written), `baseline_w1` and `xlock_w1`
/// (write concern w:1, through `client`, the monitored one).
pub fn without_journal_wait(
    s: &Single<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
) {
    let (bench, latency, coll) = (s.bench, &s.latency, &s.coll);
    // Diagnostics for the grant's ratio: the same commands without a write (so without the
    // wait for the journal that majority write concern implies), and with w:1.
    let mut record = Record::new(GROUP, "baseline_noop", None, 1);
    record.note =
        Some("diagnostic: the upsert sets a field to its value, so writes nothing".into());
    bench.measure(
        group,
        record,
        async || upsert(coll, "baseline-noop", doc! { "$set": { "n": 0_i64 } }).await,
        |d| assert!(d.is_some()),
    );
    bench.rt.block_on(async {
        latency
            .xlock(&request("x-held", "holder", None))
            .await
            .unwrap();
    });
    let record = Record::new(GROUP, "xlock_refused", None, 1)
        .with_note("diagnostic: the resource is held, so the pipeline writes nothing");
    bench.run(
        group,
        record,
        async |seq| request("x-held", &fresh_id(seq), None),
        async |req| latency.xlock(req).await,
        async |_, _| (),
        |r| assert!(matches!(r, Err(Error::AlreadyLocked { .. })), "{r:?}"),
    );
    let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
    let space = coll.namespace();
    let coll_w1 = client
        .database(&space.db)
        .collection_with_options::<Document>(
            &space.coll,
            CollectionOptions::builder().write_concern(w1).build(),
        );
    let latency_w1 = MongoStore::from_collection(coll_w1.clone());
    bench.rt.block_on(async {
        latency_w1
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    let record = Record::new(GROUP, "baseline_w1", None, 1)
        .with_note("diagnostic: baseline with write concern w:1 (no journal wait)");
    bench.measure(
        group,
        record,
        async || bump_baseline(&coll_w1).await,
        |d| assert!(d.is_some()),
    );
    let record = Record::new(GROUP, "xlock_w1", None, 1)
        .with_note("diagnostic: xlock with write concern w:1 (no journal wait)");
    bench.run(
        group,
        record,
        async |seq| request("x", &fresh_id(seq), None),
        async |req| latency_w1.xlock(req).await,
        async |req, _| {
            latency_w1.unlock(&req.lock_id).await.unwrap();
        },
        |r| assert!(r.is_ok(), "{r:?}"),
    );
}
