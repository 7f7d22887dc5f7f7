//! Bad set-ups and hostile input: a missing index, an illegal collection name, no server,
//! `$` strings, write concerns, renew's transaction.

use super::*;
use lockwright_engine::Access;
use mongodb::bson::oid::ObjectId;

/// A collection someone already uses (it holds a document) without the unique index is
/// refused, and so is an empty one with an index of its own; nothing is created in either.
#[tokio::test]
async fn refuses_to_run_without_the_unique_index() {
    let client = Client::with_options(options().await).unwrap();
    let db = client.database(&lockwright_store_mongo::test_support::test_database());
    let used = db.collection::<Document>(&format!("noindex_{}", ObjectId::new()));
    used.insert_one(doc! {"note": "not a lock"}).await.unwrap();
    let indexed = db.collection::<Document>(&format!("otherindex_{}", ObjectId::new()));
    indexed
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! {"owner": 1})
                .build(),
        )
        .await
        .unwrap();
    for coll in [used, indexed] {
        let store = MongoStore::from_collection(coll.clone());
        match store.lock(&request("r", "a", None)).await {
            Err(Error::Misconfigured { reason }) => {
                assert!(reason.contains("create_indexes"), "{reason}")
            }
            other => panic!("expected Misconfigured, got {other:?}"),
        }
        let names = coll.list_index_names().await.unwrap();
        assert!(!names.iter().any(|n| n.contains("resource")), "{names:?}");
        let _ = coll.drop().await;
    }
    client.shutdown().await;
}

/// First use needs no set-up: a collection that does not exist yet, or that exists empty
/// with only its `_id` index, is given the trusted index by the first operation, which
/// then runs.
#[tokio::test]
async fn first_use_creates_the_collection_and_its_index() {
    let client = Client::with_options(options().await).unwrap();
    let db = client.database(&lockwright_store_mongo::test_support::test_database());
    let missing = db.collection::<Document>(&format!("firstuse_{}", ObjectId::new()));
    let empty = db.collection::<Document>(&format!("firstuse_empty_{}", ObjectId::new()));
    db.create_collection(empty.name()).await.unwrap();
    for coll in [missing, empty] {
        let store = MongoStore::from_collection(coll.clone());
        let granted = store.lock(&request("r", "a", None)).await.unwrap();
        assert_eq!(granted.resource.as_str(), "r");
        let names = coll.list_index_names().await.unwrap();
        assert!(names.iter().any(|n| n == "resource_1"), "{names:?}");
        let _ = coll.drop().await;
    }
    client.shutdown().await;
}

/// A collection name MongoDB refuses is reported as such, not as a missing index (whose
/// advice, `create_indexes`, would then fail too).
#[tokio::test]
async fn an_illegal_collection_name_is_named() {
    let client = Client::with_options(options().await).unwrap();
    for name in ["bad$name", "system.locks"] {
        let store =
            MongoStore::from_collection(client.database("lockwright_test").collection(name));
        for result in [
            store.lock(&request("r", "a", None)).await.map(|_| ()),
            store.create_indexes().await,
        ] {
            match result {
                Err(Error::Misconfigured { reason }) => assert!(
                    reason.contains(name) && !reason.contains("create_indexes"),
                    "{reason}"
                ),
                other => panic!("{name}: expected Misconfigured, got {other:?}"),
            }
        }
        let refused = MongoStore::connect(&uri(), "lockwright_test", name).await;
        assert!(
            matches!(
                refused,
                Err(Error::InvalidArgument {
                    field: "collection",
                    ..
                })
            ),
            "{name}: {refused:?}"
        );
    }
    client.shutdown().await;
}

#[tokio::test]
async fn unreachable_server_is_an_error_not_an_answer() {
    let store = MongoStore::connect(
        "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=200",
        "db",
        "locks",
    )
    .await
    .unwrap();
    assert!(
        matches!(store.unlock(&id("a")).await, Err(Error::Backend { .. })),
        "never an empty list"
    );
    assert!(matches!(
        store.renew(&id("a"), ttl(1), Duration::ZERO).await,
        Err(Error::Backend { .. })
    ));
    assert!(matches!(
        store.lock(&request("r", "a", None)).await,
        Err(Error::Backend { .. })
    ));
    assert!(matches!(
        MongoStore::connect("not a uri", "db", "c").await,
        Err(Error::Backend { .. })
    ));
    assert!(matches!(
        MongoStore::connect("mongodb://x", "", "c").await,
        Err(Error::InvalidArgument {
            field: "database",
            ..
        })
    ));
}

#[tokio::test]
async fn dollar_strings_are_data_not_expressions() {
    let store = fresh_store(Some(Arc::new(ManualClock::new(T0)))).await;
    let sneaky = "$exclusive.lockId";
    let mut details = LockOptions::new().owner("$$NOW");
    details.ttl = Some(Duration::from_secs(5));
    let granted = store
        .lock(&LockRequest::new("$r", sneaky, &details).unwrap())
        .await
        .unwrap();
    assert_eq!(granted.lock_id.as_str(), sneaky);
    assert_eq!(granted.holder.owner.as_deref(), Some("$$NOW"));
    store
        .lock(&request("plain", sneaky, None).with_access(Access::Shared(None)))
        .await
        .unwrap();
    assert!(matches!(
        store.lock(&request("$r", "$$ROOT", None)).await,
        Err(Error::AlreadyLocked { .. })
    ));
    assert_eq!(
        store
            .renew(&id(sneaky), ttl(5), Duration::ZERO)
            .await
            .unwrap()
            .len(),
        2
    );
    let released = store.unlock(&id(sneaky)).await.unwrap();
    assert_eq!(released.len(), 2);
    assert!(released.iter().all(|l| l.lock_id.as_str() == sneaky));
    teardown(&store).await;
}

#[tokio::test]
async fn majority_write_concern_by_default_and_configurable() {
    let store = fresh_store(None).await;
    assert_eq!(
        store.collection().write_concern(),
        Some(&WriteConcern::majority())
    );
    let store = store.with_write_concern(WriteConcern::nodes(1));
    assert_eq!(
        store.collection().write_concern(),
        Some(&WriteConcern::nodes(1))
    );
    // A handle's own write concern does not lower the default.
    let weak = store
        .client()
        .database(&store.collection().namespace().db)
        .collection_with_options::<Document>(
            &store.collection().namespace().coll,
            mongodb::options::CollectionOptions::builder()
                .write_concern(WriteConcern::nodes(1))
                .build(),
        );
    assert_eq!(
        MongoStore::from_collection(weak)
            .collection()
            .write_concern(),
        Some(&WriteConcern::majority())
    );
    store.lock(&request("r", "a", None)).await.unwrap();
    // Status reads what is majority-committed: a grant written with `w: 1` shows once it
    // is (about a replication round trip later; a minute at most here).
    let mut modes: Vec<Mode> = Vec::new();
    for _ in 0..6_000 {
        modes = store
            .status(&Filter::new())
            .await
            .unwrap()
            .iter()
            .map(|l| l.mode)
            .collect();
        if !modes.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(modes, [Mode::Exclusive]);
    teardown(&store).await;
}

/// Renew's write is one `update` command that belongs to the transaction that read the group
/// (otherwise a failure could leave it half renewed), and it renews exclusive and shared
/// locks of the group alike.
#[tokio::test]
async fn renew_updates_inside_its_transaction() {
    let (client, log) = monitored_client().await;
    let store = fresh_store_on(&client, None).await;
    let minute = Some(Duration::from_secs(60));
    store.lock(&request("x", "g", minute)).await.unwrap();
    store
        .lock(&request("s", "g", minute).with_access(Access::Shared(None)))
        .await
        .unwrap();
    store
        .lock(&request("s", "other", minute).with_access(Access::Shared(None)))
        .await
        .unwrap();
    log.take();

    let renewed = store
        .renew(&id("g"), ttl(3_600), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 2);
    let sent: Vec<Document> = log
        .take_commands()
        .into_iter()
        .filter_map(|(name, body)| (name == "update").then_some(body))
        .collect();
    assert_eq!(sent.len(), 1, "one update command: {sent:?}");
    assert_eq!(
        sent[0].get_bool("autocommit").ok(),
        Some(false),
        "{:?}",
        sent[0]
    );
    assert!(sent[0].contains_key("txnNumber"), "{:?}", sent[0]);

    // Both locks of the group carry the new expiry; the other group's lock does not.
    let hour = Duration::from_secs(3_000);
    let mine = store.status(&Filter::new().lock_id("g")).await.unwrap();
    assert_eq!(mine.len(), 2);
    assert!(mine.iter().all(|l| l.ttl.unwrap() > hour), "{mine:?}");
    let other = store.status(&Filter::new().lock_id("other")).await.unwrap();
    assert!(
        other[0].ttl.unwrap() <= Duration::from_secs(60),
        "{other:?}"
    );
    teardown(&store).await;
}
