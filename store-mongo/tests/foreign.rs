//! The MongoDB store next to documents and indexes it did not write: the Go library's
//! (square/mongo-lock) documents and indexes, hand-made malformed documents, unique indexes
//! that cannot be trusted, and an index or collection dropped while clients race.
//!
//! The Go library's documents are written here as that library writes them (measured
//! against it on one collection): it accepts empty lock ids and lock ids, owners and
//! resources of any length; its `SLock` upsert on a new resource writes
//! `exclusive: {acquired: false}` and nothing else in the exclusive slot; its grants carry
//! no `fence` and its documents no `lastFence`; its `CreateIndexes` makes `resource_1`
//! `{unique: true, sparse: true}` and four plain indexes.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright_engine::Access;
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{Error, Filter, LockId, LockStore, ManualClock, Mode, Timestamp, Ttl};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{fresh_store, options, request, teardown};
use mongodb::Client;
use mongodb::bson::{Bson, DateTime, Document, doc};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

fn date(t: Timestamp) -> DateTime {
    DateTime::from_millis(i64::try_from(t.as_millis()).unwrap())
}

/// A lock entry as the Go library writes it (no fence).
fn go_lock(lock_id: &str, owner: &str, expires: Option<Timestamp>) -> Document {
    doc! {
        "lockId": lock_id, "owner": owner, "host": "go-host", "createdAt": date(T0),
        "renewedAt": Bson::Null, "expiresAt": expires.map_or(Bson::Null, |t| Bson::DateTime(date(t))),
        "acquired": true,
    }
}

/// The Go library's `SLock` document on a new resource.
fn go_shared(resource: &str, locks: Vec<Document>) -> Document {
    let count = i32::try_from(locks.len()).unwrap();
    doc! { "resource": resource, "exclusive": { "acquired": false },
    "shared": { "count": count, "locks": locks } }
}

/// The Go library's `XLock` document.
fn go_exclusive(resource: &str, lock: Document) -> Document {
    doc! { "resource": resource, "exclusive": lock, "shared": { "count": 0, "locks": [] } }
}

async fn insert(store: &MongoStore, d: Document) {
    store.collection().insert_one(d).await.unwrap();
}

fn ids(locks: &[lockwright_engine::LockStatus]) -> Vec<String> {
    locks
        .iter()
        .map(|l| l.lock_id.as_str().to_string())
        .collect()
}

/// Bug: a Go shared lock with a lock id over 256 bytes (or empty) next to ours made our
/// applied grant come back as `Malformed`, and our unlock, renew and status fail the same
/// way, so the lock stayed until its TTL.
#[tokio::test]
async fn go_locks_with_long_or_empty_lock_ids_do_not_break_ours() {
    let store = fresh_store(Some(Arc::new(ManualClock::new(T0)))).await;
    let long = "L".repeat(300);
    insert(
        &store,
        go_shared(
            "s",
            vec![
                go_lock(&long, &"o".repeat(5000), None),
                go_lock("", "empty", None),
            ],
        ),
    )
    .await;
    let mine = request("s", "mine", Some(Duration::from_secs(30)));
    let granted = store
        .lock(&mine.clone().with_access(Access::Shared(None)))
        .await
        .expect("the applied grant is a grant");
    assert_eq!(
        (granted.mode, granted.lock_id.as_str()),
        (Mode::Shared, "mine")
    );
    assert!(granted.fence > 0);

    let all = store.status(&Filter::new()).await.unwrap();
    assert_eq!(
        ids(&all),
        [long.as_str(), "", "mine"],
        "reported as they are"
    );
    assert_eq!(all[0].holder.owner.as_ref().map(String::len), Some(5000));
    let renewed = store
        .renew(
            &mine.lock_id,
            Ttl::new(Duration::from_secs(30)).unwrap(),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(ids(&renewed), ["mine"]);
    assert_eq!(ids(&store.unlock(&mine.lock_id).await.unwrap()), ["mine"]);
    // The Go library's locks are still there, and can be released by their ids.
    assert_eq!(store.status(&Filter::new()).await.unwrap().len(), 2);
    assert_eq!(ids(&store.unlock(&LockId::stored("")).await.unwrap()), [""]);
    teardown(&store).await;
}

/// Bug: one Go lock with an empty lock id made `purge()` and `status(all)` fail for the
/// whole collection, so nobody's expired groups were purged.
#[tokio::test]
async fn a_go_lock_with_an_empty_lock_id_does_not_stop_purge_or_status() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(Arc::clone(&clock))).await;
    let soon = T0.saturating_add(Duration::from_secs(1));
    insert(&store, go_exclusive("go-x", go_lock("", "go", Some(soon)))).await;
    store
        .lock(&request("ours", "ours", Some(Duration::from_secs(1))))
        .await
        .unwrap();
    store.lock(&request("live", "live", None)).await.unwrap();
    assert_eq!(store.status(&Filter::new()).await.unwrap().len(), 3);
    // Past both expiries and the store's takeover grace.
    clock.advance(Duration::from_secs(1) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);
    let purged = store.purge().await.unwrap();
    let mut purged = ids(&purged);
    purged.sort();
    assert_eq!(purged, ["", "ours"]);
    assert_eq!(ids(&store.status(&Filter::new()).await.unwrap()), ["live"]);
    teardown(&store).await;
}

/// Bug: documents the rules cannot decide on were changed (xlock overwrote `exclusive:
/// "locked"` and `acquired: "true"`), reported as server errors (`shared.locks: "oops"`,
/// `lastFence: "7"`), deleted by purge (`shared.count: -1`), or granted past the last fence
/// (`lastFence: i64::MAX`). Each is now `Malformed`, naming resource and field, and left
/// exactly as it was (a resource whose fences are used up is still readable).
#[tokio::test]
async fn malformed_documents_are_refused_untouched() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(Arc::clone(&clock))).await;
    let cases = [
        (doc! { "resource": "a", "exclusive": "locked" }, "exclusive"),
        (
            doc! { "resource": "b", "exclusive": { "acquired": "true", "lockId": "x",
            "createdAt": date(T0), "expiresAt": date(T0) } },
            "exclusive.acquired",
        ),
        (
            doc! { "resource": "c", "shared": { "count": 1, "locks": "oops" } },
            "shared.locks",
        ),
        (doc! { "resource": "d", "lastFence": "7" }, "lastFence"),
        (doc! { "resource": "e", "lastFence": i64::MAX }, "lastFence"),
        (
            doc! { "resource": "f", "shared": { "count": -1, "locks": [] } },
            "shared.count",
        ),
        (
            go_shared(
                "g",
                vec![go_lock("twice", "o", None), go_lock("twice", "o", None)],
            ),
            "shared.locks.1.lockId",
        ),
    ];
    for (d, _) in &cases {
        insert(&store, d.clone()).await;
    }
    clock.advance(Duration::from_secs(1));
    for (d, field) in &cases {
        let resource = d.get_str("resource").unwrap();
        let before = store
            .collection()
            .find_one(doc! { "resource": resource })
            .await
            .unwrap();
        for outcome in [
            store.lock(&request(resource, "new", None)).await,
            store
                .lock(&request(resource, "new", None).with_access(Access::Shared(None)))
                .await,
        ] {
            match outcome {
                Err(Error::Malformed {
                    resource: r,
                    field: f,
                    ..
                }) => {
                    assert_eq!((r.as_str(), f.as_str()), (resource, *field));
                }
                other => panic!("{resource}: expected Malformed at {field}, got {other:?}"),
            }
        }
        match store.status(&Filter::new().resource(resource)).await {
            // Exhausted fences do not make the document unreadable, only ungrantable.
            Ok(locks) if resource == "e" => assert!(locks.is_empty()),
            Err(Error::Skipped { done, skipped }) => {
                assert!(done.is_empty());
                assert_eq!(skipped.len(), 1);
                assert_eq!(skipped[0].field, *field);
            }
            other => panic!("{resource}: expected Skipped, got {other:?}"),
        }
        // Purge neither deletes nor rewrites it.
        let _ = store.purge().await;
        let after = store
            .collection()
            .find_one(doc! { "resource": resource })
            .await
            .unwrap();
        assert_eq!(before, after, "{resource} was changed");
    }
    // The duplicated lock id is not released twice and reported once: it is not touched.
    assert!(matches!(
        store.unlock(&LockId::new("twice").unwrap()).await,
        Err(Error::Skipped { done, .. }) if done.is_empty()
    ));
    teardown(&store).await;
}

/// Runs `body` on a fresh collection with no indexes and drops it afterwards.
async fn bare_collection(name: &str) -> (Client, mongodb::Collection<Document>) {
    let client = Client::with_options(options().await).unwrap();
    let coll = client
        .database("lockwright_test")
        .collection(&format!("{name}_{}", mongodb::bson::oid::ObjectId::new()));
    coll.insert_one(doc! { "resource": "seed" }).await.unwrap();
    (client, coll)
}

async fn create_index(coll: &mongodb::Collection<Document>, spec: Document) {
    coll.client()
        .database(&coll.namespace().db)
        .run_command(doc! { "createIndexes": coll.name(), "indexes": [spec] })
        .await
        .unwrap();
}

/// Bug: the readiness check accepted a partial unique index on `resource` (two exclusive
/// holders in a race) and a collated one (`job` refused while only `Job` was held).
#[tokio::test]
async fn unique_indexes_that_cannot_be_trusted_are_refused() {
    let variants = [
        (
            doc! { "key": { "resource": 1 }, "name": "resource_1", "unique": true,
            "partialFilterExpression": { "resource": { "$exists": true } } },
            "partial",
        ),
        (
            doc! { "key": { "resource": 1 }, "name": "resource_1", "unique": true,
            "collation": { "locale": "en", "strength": 2 } },
            "collation",
        ),
        (
            doc! { "key": { "resource": 1 }, "name": "resource_1", "unique": true, "hidden": true },
            "hidden",
        ),
        (
            doc! { "key": { "resource": 1 }, "name": "resource_1" },
            "not unique",
        ),
    ];
    for (spec, word) in variants {
        let (client, coll) = bare_collection("untrusted").await;
        create_index(&coll, spec).await;
        let store = MongoStore::from_collection(coll.clone());
        for outcome in [
            store.lock(&request("job", "a", None)).await.map(|_| ()),
            store.create_indexes().await,
        ] {
            match outcome {
                Err(Error::Misconfigured { reason }) => {
                    assert!(reason.contains(word), "{word}: {reason}");
                }
                other => panic!("{word}: expected Misconfigured, got {other:?}"),
            }
        }
        coll.drop().await.unwrap();
        client.shutdown().await;
    }
}

/// The Go library's `CreateIndexes`, as the commands it sends.
async fn go_create_indexes(
    coll: &mongodb::Collection<Document>,
) -> mongodb::error::Result<Document> {
    let mut indexes = vec![doc! { "key": { "resource": 1 }, "name": "resource_1",
    "unique": true, "sparse": true }];
    for key in [
        "exclusive.lockId",
        "exclusive.expiresAt",
        "shared.locks.lockId",
        "shared.locks.expiresAt",
    ] {
        indexes.push(doc! { "key": { key: 1 }, "name": format!("{key}_1") });
    }
    coll.client()
        .database(&coll.namespace().db)
        .run_command(doc! { "createIndexes": coll.name(), "indexes": indexes })
        .await
}

/// Bug: `create_indexes` failed with `IndexKeySpecsConflict` on a collection the Go library
/// had indexed, and the Go library's `CreateIndexes` failed after ours.
#[tokio::test]
async fn create_indexes_and_the_go_librarys_indexes_coexist() {
    // Go first, then ours.
    let (client, coll) = bare_collection("go_first").await;
    go_create_indexes(&coll).await.unwrap();
    let store = MongoStore::from_collection(coll.clone());
    store.create_indexes().await.unwrap();
    store.lock(&request("r", "a", None)).await.unwrap();
    coll.drop().await.unwrap();
    // Ours first, then Go.
    let (_, coll) = bare_collection("ours_first").await;
    let store = MongoStore::from_collection(coll.clone());
    store.create_indexes().await.unwrap();
    go_create_indexes(&coll).await.unwrap();
    store.lock(&request("r", "a", None)).await.unwrap();
    coll.drop().await.unwrap();
    // An earlier Lockwright's index (unique, not sparse) is accepted as it is.
    let (_, coll) = bare_collection("older").await;
    create_index(
        &coll,
        doc! { "key": { "resource": 1 }, "name": "resource_1", "unique": true },
    )
    .await;
    let store = MongoStore::from_collection(coll.clone());
    store.create_indexes().await.unwrap();
    store.lock(&request("r", "a", None)).await.unwrap();
    coll.drop().await.unwrap();
    client.shutdown().await;
}

/// What to break in the middle of a race.
#[derive(Clone, Copy, Debug)]
enum Break {
    Index,
    Collection,
}

/// Bug: the readiness check ran once, so dropping the unique index or the whole collection
/// after first use went unnoticed and a 32-task race on a fresh resource had 2 or 3 winners.
/// Now every round has at most one winner, and a round without one ends in typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_index_or_collection_never_gives_two_winners() {
    for what in [Break::Index, Break::Collection] {
        let store = Arc::new(fresh_store(None).await);
        store.lock(&request("warm-up", "w", None)).await.unwrap();
        for round in 0..4 {
            let resource = format!("{what:?}-{round}");
            let barrier = Arc::new(tokio::sync::Barrier::new(33));
            let mut tasks = Vec::new();
            for i in 0..32 {
                let (store, barrier, resource) =
                    (Arc::clone(&store), Arc::clone(&barrier), resource.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .lock(&request(&resource, &format!("t{i}"), None))
                        .await
                }));
            }
            let breaker = {
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    if round == 1 {
                        match what {
                            Break::Index => {
                                store.collection().drop_index("resource_1").await.unwrap();
                            }
                            Break::Collection => store.collection().drop().await.unwrap(),
                        }
                    }
                })
            };
            let mut winners = 0;
            let mut errors = Vec::new();
            for t in tasks {
                match t.await.unwrap() {
                    Ok(_) => winners += 1,
                    Err(Error::AlreadyLocked { .. }) => {}
                    Err(e) => errors.push(e.to_string()),
                }
            }
            breaker.await.unwrap();
            assert!(winners <= 1, "{what:?} round {round}: {winners} winners");
            if winners == 0 {
                assert!(
                    !errors.is_empty(),
                    "{what:?} round {round}: no winner and no error"
                );
            }
            if round >= 2 {
                // From then on the index is gone: refused with a message that says so.
                assert_eq!(winners, 0, "{what:?} round {round}");
                assert!(
                    errors.iter().all(|e| e.contains("unique index")),
                    "{what:?} round {round}: {errors:?}"
                );
            }
        }
        // Re-creating the index brings the store back.
        store.create_indexes().await.unwrap();
        store.lock(&request("after", "a", None)).await.unwrap();
        teardown(&store).await;
    }
}

/// A Go client and a Lockwright client taking turns on one resource: the Go grant carries
/// no fence and leaves `lastFence` alone, and the next Lockwright grant still exceeds every
/// fence Lockwright gave out.
#[tokio::test]
async fn fences_keep_increasing_when_a_go_client_takes_turns() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(Arc::clone(&clock))).await;
    let first = store.lock(&request("turns", "ours-1", None)).await.unwrap();
    store.unlock(&first.lock_id).await.unwrap();
    // The Go library's XLock on the existing document: $set of the exclusive slot only.
    store
        .collection()
        .update_one(
            doc! { "resource": "turns" },
            doc! { "$set": { "exclusive": go_lock("go", "go", None) } },
        )
        .await
        .unwrap();
    let go = store
        .status(&Filter::new().resource("turns"))
        .await
        .unwrap();
    assert_eq!(
        (go.len(), go[0].fence),
        (1, 0),
        "a Go grant reads as fence 0"
    );
    // The Go library's Unlock.
    store
        .collection()
        .update_one(
            doc! { "resource": "turns" },
            doc! { "$set": { "exclusive": { "acquired": false, "lockId": Bson::Null } } },
        )
        .await
        .unwrap();
    let second = store.lock(&request("turns", "ours-2", None)).await.unwrap();
    assert!(second.fence > first.fence);
    teardown(&store).await;
}

/// Two documents for one resource (written while the unique index was missing, say by two
/// clients racing) are both left alone and named; the rest of the collection works.
#[tokio::test]
async fn two_documents_for_one_resource_are_both_left_alone() {
    let store = fresh_store(Some(Arc::new(ManualClock::new(T0)))).await;
    store.lock(&request("single", "fine", None)).await.unwrap();
    store.collection().drop_index("resource_1").await.unwrap();
    for owner in ["first", "second"] {
        insert(&store, go_exclusive("twice", go_lock("dup", owner, None))).await;
    }
    match store.status(&Filter::new()).await {
        Err(Error::Skipped { done, skipped }) => {
            assert_eq!(ids(&done), ["fine"]);
            assert_eq!(skipped.len(), 2);
            assert!(
                skipped
                    .iter()
                    .all(|m| m.resource == "twice" && m.reason.contains("2 documents"))
            );
        }
        other => panic!("expected Skipped, got {other:?}"),
    }
    assert!(matches!(
        store.unlock(&LockId::new("dup").unwrap()).await,
        Err(Error::Skipped { done, .. }) if done.is_empty()
    ));
    assert_eq!(
        store
            .collection()
            .count_documents(doc! { "resource": "twice" })
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        ids(&store.unlock(&LockId::new("fine").unwrap()).await.unwrap()),
        ["fine"]
    );
    teardown(&store).await;
}

/// The queue of fair waiters next to a Go client (square/mongo-lock, read at its source:
/// every write is an update operator on its own fields, `$set` of `resource`, `exclusive`
/// and `shared`, `$inc`/`$push`/`$pull` of `shared`, and it never deletes a document): a Go
/// grant and release of the resource, exclusive and shared, leave the places as they were
/// (and hand nothing over), and the next Lockwright write hands the lock to the first of
/// them. (The Go client itself ignores the queue: it does not wait behind the places.)
#[tokio::test]
async fn a_queue_survives_a_go_clients_lock_and_unlock() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(Arc::clone(&clock))).await;
    let r = lockwright_engine::Resource::new("turns").unwrap();
    let fair = |lock_id: &str, ticket: &str| {
        let options = lockwright_engine::LockOptions::exclusive(Duration::from_secs(60));
        let ticket = lockwright_engine::LockId::new(ticket).unwrap();
        let ticket = lockwright_engine::Ticket::new(ticket, Duration::from_secs(30)).unwrap();
        lockwright_engine::LockRequest::new("turns", lock_id, &options)
            .unwrap()
            .fair(ticket)
    };
    let coll = store.collection();
    let at = doc! { "resource": "turns" };
    // The Go library's XLock (an upsert of its fields), then two fair waiters behind it.
    let go_xlock = doc! { "$set": {
        "resource": "turns",
        "exclusive": go_lock("go", "go", None),
        "shared": { "count": 0, "locks": [] },
    } };
    coll.update_one(at.clone(), go_xlock)
        .upsert(true)
        .await
        .unwrap();
    store.lock(&fair("w1", "t1")).await.unwrap_err();
    store
        .lock(&fair("w2", "t2").with_access(Access::Shared(None)))
        .await
        .unwrap_err();
    let before = store.waiters(&r).await.unwrap();
    assert_eq!(before.len(), 2);
    let refused = store.lock(&fair("w1", "t1")).await.unwrap_err();
    assert!(
        matches!(
            refused,
            Error::AlreadyLocked {
                queued: Some(lockwright_engine::Queued { ahead: 0, .. }),
                ..
            }
        ),
        "{refused:?}"
    );
    let go_unlock = doc! { "$set": { "exclusive": {
        "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": Bson::Null, "renewedAt": Bson::Null, "expiresAt": Bson::Null,
        "acquired": false,
    } } };
    assert_eq!(
        coll.update_one(at.clone(), go_unlock)
            .await
            .unwrap()
            .modified_count,
        1
    );
    // The Go library's SLock and sUnlock.
    let go_slock = doc! {
        "$inc": { "shared.count": 1 },
        "$push": { "shared.locks": go_lock("go-s", "go", None) },
    };
    assert_eq!(
        coll.update_one(at.clone(), go_slock)
            .await
            .unwrap()
            .modified_count,
        1
    );
    let go_sunlock = doc! {
        "$inc": { "shared.count": -1 },
        "$pull": { "shared.locks": { "lockId": "go-s" } },
    };
    assert_eq!(
        coll.update_one(at.clone(), go_sunlock)
            .await
            .unwrap()
            .modified_count,
        1
    );
    assert_eq!(
        store.waiters(&r).await.unwrap(),
        before,
        "after a Go SLock and unlock"
    );
    // The Go library's writes hand nothing over; the next write of Lockwright's does: the
    // first waiter is handed the lock, so a request that is not fair is refused, and the
    // first waiter's request claims it.
    let plain = store
        .lock(&request("turns", "late", Some(Duration::from_secs(60))))
        .await
        .unwrap_err();
    assert!(
        matches!(plain, Error::AlreadyLocked { queued: None, .. }),
        "{plain:?}"
    );
    store.lock(&fair("w1", "t1")).await.unwrap();
    assert_eq!(store.waiters(&r).await.unwrap().len(), 1, "w2 still waits");
    teardown(&store).await;
}
