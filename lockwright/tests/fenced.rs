//! Fenced writes to the user's own collections, on a real MongoDB server: a stale holder's
//! write is refused by the server, the simulator's stale writers replayed against the server
//! get the verdicts of the simulator's fenced store, and holders racing on the same
//! documents never leave one written by a lower fence after a higher one.
//!
//! This is the kill matrix's `fenced_mongo` harness: the mutant that drops the fence
//! condition (`fenced_write_unconditional`) must fail it.

#![cfg(feature = "mongo")]
// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright::Access;
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use lockwright::{
    Client, Error, FencedCollection, LockOptions, ManualClock, MongoStore, Resource, Timestamp,
    generate_lock_id,
};
use lockwright_testkit::mongo::fixture::{fresh_store, teardown};
use mongodb::Collection;
use mongodb::bson::{Bson, Document, doc};
use rand::{Rng, SeedableRng};

/// Switches on the mutant named by `LOCKWRIGHT_MUTANT`, if any.
fn activate_mutant() {
    #[cfg(lockwright_mutants)]
    lockwright_testkit::activate_mutant();
}

/// A user collection beside the store's lock collection, dropped by [`done`].
fn user_collection(store: &MongoStore) -> Collection<Document> {
    let ns = store.collection().namespace();
    store
        .client()
        .database(&ns.db)
        .collection(&format!("{}_orders", ns.coll))
}

async fn done(store: &MongoStore, orders: &Collection<Document>) {
    let _ = orders.drop().await;
    teardown(store).await;
}

async fn read(orders: &Collection<Document>, id: i64) -> Document {
    orders.find_one(doc! {"_id": id}).await.unwrap().unwrap()
}

fn fenced_by(e: &Error) -> Option<u64> {
    match e {
        Error::Fenced { seen_fence, .. } => Some(*seen_fence),
        _ => None,
    }
}

/// Kleppmann's case: A's lock expires while it is paused, B takes it over and writes;
/// every kind of write A then sends is refused by the server, naming B's fence, and the
/// document keeps B's write.
#[tokio::test]
async fn a_stale_holders_writes_are_refused_by_the_server() {
    activate_mutant();
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_900_000_000_000)));
    let store = fresh_store(Some(clock.clone()))
        .await
        .with_takeover_grace(Duration::ZERO)
        .unwrap();
    let orders = user_collection(&store);
    let client = Client::new(store);
    let store = client.store();
    let details = LockOptions::new().ttl(Duration::from_secs(10));
    let a = client
        .lock("order-7", generate_lock_id(), &details)
        .await
        .unwrap();
    let a_writes = FencedCollection::new(&orders, a.resource.clone(), a.fence);
    let first = a_writes
        .upsert_one(
            doc! {"_id": 7},
            doc! {"$set": {"state": "draft", "by": "A"}},
        )
        .await
        .unwrap();
    assert!(first.upserted_id.is_some(), "A's first write inserts");
    // A holder may write under its fence again.
    let again = a_writes
        .update_one(doc! {"_id": 7}, doc! {"$set": {"state": "checked"}})
        .await
        .unwrap();
    assert_eq!((again.matched_count, again.modified_count), (1, 1));

    // A pauses past its TTL; B takes the lock over and writes.
    clock.advance(Duration::from_secs(11));
    let b = client
        .lock("order-7", generate_lock_id(), &details)
        .await
        .unwrap();
    assert!(b.fence > a.fence);
    FencedCollection::new(&orders, b.resource.clone(), b.fence)
        .update_one(doc! {"_id": 7}, doc! {"$set": {"state": "paid", "by": "B"}})
        .await
        .unwrap();

    // A wakes up: each of its writes is refused, naming B's fence.
    let stale = [
        a_writes
            .update_one(
                doc! {"_id": 7},
                doc! {"$set": {"state": "draft", "by": "A"}},
            )
            .await,
        a_writes
            .update_one(doc! {"_id": 7}, vec![doc! {"$set": {"by": "A"}}])
            .await,
        a_writes
            .upsert_one(doc! {"_id": 7}, doc! {"$set": {"by": "A"}})
            .await,
        a_writes
            .replace_one(doc! {"_id": 7}, &doc! {"_id": 7, "by": "A"})
            .await,
    ];
    for (i, outcome) in stale.iter().enumerate() {
        let e = outcome.as_ref().expect_err("a stale write must be refused");
        assert_eq!(fenced_by(e), Some(b.fence), "write {i}: {e:?}");
    }
    let deleted = a_writes.delete_one(doc! {"_id": 7}).await;
    assert_eq!(
        fenced_by(&deleted.expect_err("a stale delete must be refused")),
        Some(b.fence)
    );
    let inserted = a_writes.insert_one(&doc! {"_id": 7, "by": "A"}).await;
    assert_eq!(
        fenced_by(&inserted.expect_err("a stale insert must be refused")),
        Some(b.fence)
    );
    let kept = read(&orders, 7).await;
    assert_eq!(kept.get_str("state").unwrap(), "paid");
    assert_eq!(kept.get_str("by").unwrap(), "B");
    assert_eq!(
        kept.get_document("_fence").unwrap(),
        &doc! {"resource": "order-7", "fence": i64::try_from(b.fence).unwrap()}
    );
    done(store, &orders).await;
}

/// What is not a refusal stays an ordinary result or its own error: a filter that matches
/// nothing, a duplicate that no fence refuses, an upsert without an `_id`, a fence field
/// someone else wrote; and a document of another resource refuses the write.
#[tokio::test]
async fn refusals_are_told_from_everything_else() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    let resource = Resource::new("order-8").unwrap();
    let low = FencedCollection::new(&orders, resource.clone(), 5);
    let high = FencedCollection::new(&orders, resource, 9);

    let nothing = high
        .update_one(doc! {"_id": 404}, doc! {"$set": {"x": 1}})
        .await
        .unwrap();
    assert_eq!(nothing.matched_count, 0, "no document: no refusal");
    let nothing = high.delete_one(doc! {"_id": 404}).await.unwrap();
    assert_eq!(nothing.deleted_count, 0);

    high.insert_one(&doc! {"_id": 1, "n": 1}).await.unwrap();
    // The same fence inserting the same `_id` again: a duplicate, not a refusal.
    match high.insert_one(&doc! {"_id": 1}).await {
        Err(Error::Backend { .. }) => {}
        other => panic!("a duplicate key is the server's error: {other:?}"),
    }
    // A lower fence: refused, naming the higher one.
    let e = low.insert_one(&doc! {"_id": 1}).await.unwrap_err();
    assert_eq!(fenced_by(&e), Some(9), "{e:?}");

    // An upsert must name the `_id`.
    assert!(matches!(
        high.upsert_one(doc! {"n": 1}, doc! {"$set": {"x": 1}})
            .await,
        Err(Error::InvalidArgument {
            field: "filter",
            ..
        })
    ));

    // Another resource's fence, however high, may not write a document stamped by this
    // resource.
    let other = FencedCollection::new(&orders, Resource::new("elsewhere").unwrap(), 1_000);
    let e = other
        .update_one(doc! {"_id": 1}, doc! {"$set": {"x": 1}})
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Fenced { seen_resource, seen_fence: 9, .. } if seen_resource == "order-8"),
        "{e:?}"
    );

    // A fence field this library did not write: not overwritten, and named.
    orders
        .insert_one(doc! {"_id": 2, "_fence": "by hand"})
        .await
        .unwrap();
    let e = high
        .update_one(doc! {"_id": 2}, doc! {"$set": {"x": 1}})
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e:?}");
    assert_eq!(read(&orders, 2).await.get_str("_fence").unwrap(), "by hand");

    // A field of the caller's choosing.
    let owner = high.clone().with_field("owner").unwrap();
    owner
        .upsert_one(doc! {"_id": 3}, doc! {"$set": {"x": 1}})
        .await
        .unwrap();
    let doc3 = read(&orders, 3).await;
    assert!(doc3.get("_fence").is_none());
    assert_eq!(
        doc3.get_document("owner")
            .unwrap()
            .get_i64("fence")
            .unwrap(),
        9
    );
    done(&store, &orders).await;
}

/// Fenced writes join the caller's transaction: applied at commit, refused inside it.
#[tokio::test]
async fn fenced_writes_run_in_the_callers_transaction() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    orders.insert_one(doc! {"_id": 1, "n": 0}).await.unwrap();
    let resource = Resource::new("order-9").unwrap();
    let high = FencedCollection::new(&orders, resource.clone(), 20);
    let low = FencedCollection::new(&orders, resource, 10);

    let mut session = store.client().start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    high.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(
        read(&orders, 1).await.get_i32("n").unwrap(),
        0,
        "not visible before the commit"
    );
    session.commit_transaction().await.unwrap();
    assert_eq!(read(&orders, 1).await.get_i32("n").unwrap(), 1);

    session.start_transaction().await.unwrap();
    let refused = low
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
        .session(&mut session)
        .await;
    // Aborted before any assertion: a transaction left open (a failing run's) would hold
    // its document until the server's 60 s transaction limit, and the test database's drop
    // after the run would wait for it.
    session.abort_transaction().await.unwrap();
    let e = refused.unwrap_err();
    assert_eq!(fenced_by(&e), Some(20), "{e:?}");
    assert_eq!(read(&orders, 1).await.get_i32("n").unwrap(), 1);
    // The driver's shutdown waits for every session and cursor to be dropped.
    drop(session);
    done(&store, &orders).await;
}

/// Every kind of fenced write takes the session it is given: in a transaction, none of them
/// is visible outside it before the commit, and all of them are after. A lower fence's
/// replacement and delete are refused in a transaction, which stays usable.
#[tokio::test]
async fn every_fenced_write_runs_in_the_session_it_is_given() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    orders
        .insert_many([doc! {"_id": 1, "n": 0}, doc! {"_id": 4, "n": 0}])
        .await
        .unwrap();
    let fenced = FencedCollection::new(&orders, Resource::new("order-10").unwrap(), 3);

    let mut session = store.client().start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    let writes = async {
        fenced
            .replace_one(doc! {"_id": 1}, &doc! {"_id": 1, "n": 5})
            .session(&mut session)
            .await?;
        fenced
            .insert_one(&doc! {"_id": 2, "n": 2})
            .session(&mut session)
            .await?;
        fenced
            .upsert_one(doc! {"_id": 3}, doc! {"$set": {"n": 3}})
            .session(&mut session)
            .await?;
        fenced
            .delete_one(doc! {"_id": 4})
            .session(&mut session)
            .await
    }
    .await;
    let outside: Vec<Document> = orders
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    // Ended before any assertion, so that a failing run leaves no transaction open.
    let committed = session.commit_transaction().await;
    writes.unwrap();
    committed.unwrap();
    assert_eq!(
        outside,
        vec![doc! {"_id": 1, "n": 0}, doc! {"_id": 4, "n": 0}],
        "no write is visible outside the transaction before its commit"
    );
    let after: Vec<(i32, i32)> = orders
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|d| (d.get_i32("_id").unwrap(), d.get_i32("n").unwrap()))
        .collect();
    assert_eq!(after, vec![(1, 5), (2, 2), (3, 3)]);

    let stale = FencedCollection::new(&orders, Resource::new("order-10").unwrap(), 2);
    session.start_transaction().await.unwrap();
    let replaced = stale
        .replace_one(doc! {"_id": 1}, &doc! {"_id": 1, "n": -1})
        .session(&mut session)
        .await;
    let deleted = stale
        .delete_one(doc! {"_id": 2})
        .session(&mut session)
        .await;
    let later = fenced
        .update_one(doc! {"_id": 3}, doc! {"$inc": {"n": 1}})
        .session(&mut session)
        .await;
    let committed = session.commit_transaction().await;
    for refused in [replaced.map(|_| ()), deleted.map(|_| ())] {
        let e = refused.unwrap_err();
        assert_eq!(fenced_by(&e), Some(3), "{e:?}");
    }
    later.unwrap();
    committed.unwrap();
    assert_eq!(read(&orders, 1).await.get_i32("n").unwrap(), 5);
    assert_eq!(read(&orders, 2).await.get_i32("n").unwrap(), 2);
    assert_eq!(read(&orders, 3).await.get_i32("n").unwrap(), 4);
    drop(session);
    done(&store, &orders).await;
}

/// The simulator's stale writers, replayed on the server: in seeds where paused holders
/// sent writes with fences that were stale by the time they arrived, every write the
/// simulator's fenced store accepted the server accepts, and every one it rejected the
/// server refuses, in the same order.
#[tokio::test]
async fn the_simulators_stale_writers_are_refused_by_the_server() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    let opts = lockwright_sim::Options::default();
    let (mut replayed, mut rejected, mut seeds) = (0, 0, 0);
    for seed in 0..200 {
        let report = lockwright_sim::run_seed(&opts, seed, false);
        if report.tally.writes_rejected == 0 {
            continue;
        }
        seeds += 1;
        for w in &report.writes {
            let id = format!("s{seed}-r{}", w.resource);
            let fenced = FencedCollection::new(
                &orders,
                Resource::new(format!("r{}", w.resource)).unwrap(),
                w.fence,
            );
            let fence = i64::try_from(w.fence).unwrap();
            let outcome = fenced
                .upsert_one(doc! {"_id": &id}, doc! {"$push": {"log": fence}})
                .await;
            match (&outcome, w.accepted) {
                (Ok(_), true) => {}
                (Err(Error::Fenced { seen_fence, .. }), false) => {
                    assert!(*seen_fence > w.fence);
                    rejected += 1;
                }
                _ => panic!(
                    "seed {seed}: client {} wrote r{} with fence {} at {} ms; the simulator's \
                     store {}, the server: {outcome:?}",
                    w.client,
                    w.resource,
                    w.fence,
                    w.at,
                    if w.accepted {
                        "accepted it"
                    } else {
                        "refused it"
                    }
                ),
            }
            replayed += 1;
        }
        if seeds == 3 {
            break;
        }
    }
    assert_eq!(
        seeds, 3,
        "three seeds with stale writes among the first 200"
    );
    assert!(
        rejected > 0 && replayed > rejected,
        "{rejected} of {replayed}"
    );
    println!("replayed {replayed} writes of 3 seeds, {rejected} of them stale and refused");
    // Each document's log is the fences accepted, in order: never a lower after a higher.
    let all: Vec<Document> = orders
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    for log in &all {
        assert_ascending(log);
    }
    done(&store, &orders).await;
}

/// Panics unless the document's `log` of fences never goes down; returns its length.
fn assert_ascending(document: &Document) -> usize {
    let log: Vec<i64> = document
        .get_array("log")
        .map(|a| a.iter().filter_map(Bson::as_i64).collect())
        .unwrap_or_default();
    assert!(
        log.windows(2).all(|w| w[0] <= w[1]),
        "document {:?} was written by a lower fence after a higher one: {log:?}",
        document.get("_id")
    );
    log.len()
}

/// Eight holders race on three documents: each takes a shared lock of the resource (each
/// grant a new, higher fence), waits a seeded moment so that later grants write first, and
/// writes one of the documents, appending its fence to the document's log. Every write
/// the server accepted is in a log, every refusal named a higher fence, and no log ever
/// goes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_holders_never_write_behind_a_higher_fence() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    let client = Client::new(store);
    let seed = lockwright_testkit::seed::chosen(
        "FENCED_RACE_SEED",
        0x5eed_fe11,
        lockwright_testkit::seed::hex,
    );
    println!("race seed {seed:#x} (FENCED_RACE_SEED reruns it)");
    let mut tasks = Vec::new();
    for worker in 0..8_u64 {
        let (client, orders) = (client.clone(), orders.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ worker);
        tasks.push(tokio::spawn(async move {
            let (mut accepted, mut refused) = (0_usize, 0_usize);
            for _ in 0..25 {
                let id = generate_lock_id();
                let details = LockOptions::new().ttl(Duration::from_secs(30));
                let lock = client
                    .lock("race", &id, &details.clone().access(Access::Shared(None)))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
                let fenced = FencedCollection::new(&orders, lock.resource.clone(), lock.fence);
                let doc_id = rng.random_range(0..3_i64);
                let fence = i64::try_from(lock.fence).unwrap();
                match fenced
                    .upsert_one(doc! {"_id": doc_id}, doc! {"$push": {"log": fence}})
                    .await
                {
                    Ok(_) => accepted += 1,
                    Err(Error::Fenced { seen_fence, .. }) => {
                        assert!(seen_fence > lock.fence, "refused by {seen_fence}");
                        refused += 1;
                    }
                    Err(e) => panic!("{e:?}"),
                }
                client.unlock(&id).await.unwrap();
            }
            (accepted, refused)
        }));
    }
    let (mut accepted, mut refused) = (0, 0);
    for t in tasks {
        let (a, r) = t.await.unwrap();
        accepted += a;
        refused += r;
    }
    let all: Vec<Document> = orders
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let logged: usize = all.iter().map(assert_ascending).sum();
    assert_eq!(logged, accepted, "every accepted write is in a log, once");
    assert_eq!(accepted + refused, 200);
    assert!(
        refused > 0,
        "the race produced no stale write (seed {seed:#x}): it checked nothing"
    );
    done(client.store(), &orders).await;
}

/// The write README.md shows for scripts (`mongosh` enforcing `LOCKWRIGHT_FENCE`), sent as
/// written there: it agrees with the library's stamps both ways.
#[tokio::test]
async fn the_documented_script_write_agrees_with_the_library() {
    activate_mutant();
    let store = fresh_store(None).await;
    let orders = user_collection(&store);
    let script = async |fence: i64| {
        let (r, f) = ("invoice-42", fence);
        orders
            .update_one(
                doc! {"_id": 42, "$or": [{"_fence": {"$exists": false}}, {"_fence.resource": r, "_fence.fence": {"$lte": f}}]},
                doc! {"$set": {"state": "paid", "_fence": {"resource": r, "fence": f}}},
            )
            .await
            .unwrap()
            .matched_count
    };
    let library =
        |fence: u64| FencedCollection::new(&orders, Resource::new("invoice-42").unwrap(), fence);
    library(5)
        .upsert_one(doc! {"_id": 42}, doc! {"$set": {"state": "new"}})
        .await
        .unwrap();
    assert_eq!(
        script(4).await,
        0,
        "the script refuses a lower fence than the library's"
    );
    assert_eq!(script(6).await, 1, "and takes a higher one");
    let e = library(5)
        .update_one(doc! {"_id": 42}, doc! {"$set": {"state": "late"}})
        .await
        .unwrap_err();
    assert_eq!(
        fenced_by(&e),
        Some(6),
        "the library refuses a lower fence than the script's"
    );
    done(&store, &orders).await;
}
