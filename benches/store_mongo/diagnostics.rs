//! Diagnostics: rows that explain a missed grant or cycle target (docs/performance.md)
//! rather than measure one. What two writes back to back cost (`baseline_twice`), and where
//! slock's time goes (`slock_push_modifier`, `slock_push_pipeline`).

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::Access;
use lockwright_engine::LockStore;
use lockwright_store_mongo::test_support::request;
use mongodb::Collection;
use mongodb::bson::{Document, doc};
use mongodb::options::{ReturnDocument, UpdateModifications};

use crate::documents::{lock_fields, server_now};
use crate::grants::{Single, bump_baseline};
use crate::harness::{Row, fresh_id};

/// An update appending a lock document to `shared.locks` (a slock diagnostic).
type Append = fn(Document) -> UpdateModifications;

/// `baseline_twice`, also interleaved with the baseline.
pub fn baseline_twice(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, coll, plain_coll) = (s.bench, &s.coll, &s.plain_coll);
    // What two writes back to back cost on this server, next to the cycle's two: the bare
    // upsert twice (each majority write waits for its own journal commit).
    let row = Row::new("baseline_twice");
    let twice = async |on: &Collection<Document>| {
        bump_baseline(on).await;
        bump_baseline(on).await
    };
    bench.paired(
        &row.id(),
        s.paired_rounds,
        async || s.plain_baseline().await,
        async |_| (),
        async |_: &()| twice(plain_coll).await,
        async |_, _| (),
    );
    bench.measure(
        group,
        row,
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
            latency
                .lock(&holder.clone().with_access(Access::Shared(None)))
                .await
                .unwrap();
        }
    });
    let appends: [(&str, Append); 2] = [
        (
            "slock_push_modifier", // a $push of the lock and a $inc of the count
            |lock| {
                UpdateModifications::Document(doc! {
                    "$push": { "shared.locks": lock },
                    "$inc": { "shared.count": 1 },
                })
            },
        ),
        (
            "slock_push_pipeline", // a one-stage update pipeline ($concatArrays, $add)
            |lock| {
                UpdateModifications::Pipeline(vec![doc! { "$set": {
                    "shared.locks": { "$concatArrays": [ "$shared.locks", [ { "$literal": lock } ] ] },
                    "shared.count": { "$add": [ "$shared.count", 1 ] },
                } }])
            },
        ),
    ];
    for (name, update) in appends {
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
        let row = Row::new(name);
        bench.paired(
            &row.id(),
            s.paired_rounds,
            async || s.plain_baseline().await,
            async |seq| fresh_id(seq),
            async |id: &String| append(plain_coll, id).await,
            remove,
        );
        bench.run(
            group,
            row,
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
