//! Fenced writes to a user's collection against the same write without a fence:
//! `update_unfenced` (a plain `update_one` of one small document, `$inc` of a counter),
//! `update_fenced` (the same update through `FencedCollection`: the fence condition in the
//! filter, the stamp in `$set`), also interleaved with the unfenced one, and
//! `update_stamped` (a diagnostic: the plain update with the stamp, no condition), and
//! `update_fenced_refused` (a stale fence's update: refused by the server, then the read that
//! names the fence that refused it). All with majority write concern, on a collection of
//! their own.

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::{Error, Resource};
use lockwright_store_mongo::FencedCollection;
use mongodb::bson::{Document, doc, oid::ObjectId};
use mongodb::options::{CollectionOptions, WriteConcern};
use mongodb::{Client, Collection};

use crate::harness::{Bench, Row};

/// The update every row sends.
fn bump() -> Document {
    doc! {"$inc": {"n": 1_i64}}
}

/// The user's collection on `client`, majority writes (as the lock collection's).
fn orders(bench: &Bench<'_>, client: &Client, name: &str) -> Collection<Document> {
    client.database(bench.db.name()).collection_with_options(
        name,
        CollectionOptions::builder()
            .write_concern(WriteConcern::majority())
            .build(),
    )
}

/// The three rows; returns the collection's name, for the caller to drop.
pub fn fenced_writes(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    client: &Client,
    plain_client: &Client,
) -> String {
    let name = format!("fenced_{}", ObjectId::new().to_hex());
    let (coll, plain_coll) = (
        orders(bench, client, &name),
        orders(bench, plain_client, &name),
    );
    let resource = Resource::new("order").unwrap();
    let fenced = FencedCollection::new(&coll, resource.clone(), 10);
    let plain_fenced = FencedCollection::new(&plain_coll, resource.clone(), 10);
    let stale = FencedCollection::new(&coll, resource, 9);
    bench.rt.block_on(async {
        fenced.upsert_one(doc! {"_id": 1}, bump()).await.unwrap();
    });

    // A plain update_one of one document: the yardstick of fenced writes.
    bench.measure(
        group,
        Row::new("update_unfenced"),
        async || coll.update_one(doc! {"_id": 1}, bump()).await,
        |r| assert_eq!(r.as_ref().map(|u| u.modified_count).ok(), Some(1)),
    );
    // Where a fenced update's time goes: the stamp alone (the same `$set`, no condition).
    let stamped = || {
        doc! {"$inc": {"n": 1_i64}, "$set": {"_fence": {"resource": "order", "fence": 10_i64}}}
    };
    // A diagnostic: the plain update with the fenced write's stamp in $set but no fence
    // condition (the condition is what leaves the _id fast path).
    let rounds = bench.mode.pick(3, 300, 1_000);
    let row = Row::new("update_stamped");
    bench.paired(
        &row.id(),
        rounds,
        async || plain_coll.update_one(doc! {"_id": 1}, bump()).await.ok(),
        async |_| (),
        async |_: &()| plain_coll.update_one(doc! {"_id": 1}, stamped()).await.ok(),
        async |_, _| (),
    );
    bench.measure(
        group,
        row,
        async || coll.update_one(doc! {"_id": 1}, stamped()).await,
        |r| assert_eq!(r.as_ref().map(|u| u.matched_count).ok(), Some(1)),
    );
    // The same update through FencedCollection: the fence condition in the filter, the
    // stamp in $set.
    let row = Row::new("update_fenced");
    bench.paired(
        &row.id(),
        rounds,
        async || plain_coll.update_one(doc! {"_id": 1}, bump()).await.ok(),
        async |_| (),
        async |_: &()| plain_fenced.update_one(doc! {"_id": 1}, bump()).await.ok(),
        async |_, _| (),
    );
    bench.measure(
        group,
        row,
        async || fenced.update_one(doc! {"_id": 1}, bump()).await,
        |r| assert_eq!(r.as_ref().map(|u| u.modified_count).ok(), Some(1)),
    );
    // A stale fence's update: refused by the server, then one read names the fence that
    // refused it.
    bench.measure(
        group,
        Row::new("update_fenced_refused"),
        async || stale.update_one(doc! {"_id": 1}, bump()).await,
        |r| assert!(matches!(r, Err(Error::Fenced { .. })), "{r:?}"),
    );
    name
}
