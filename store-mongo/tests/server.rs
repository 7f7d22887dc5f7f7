//! Tests of the MongoDB backend against a real server (`MONGODB_URI`), beyond the
//! conformance suite: round trips, races, the shared schema, bad documents, bad set-ups.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright_engine::{
    Error, Filter, LockDetails, LockRequest, LockStore, ManualClock, Mode, Renewal, SharedLimit,
    Timestamp,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    fresh_store, fresh_store_on, id, options, request, teardown, ttl, uri,
};
use mongodb::Client;
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::WriteConcern;

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Counts the commands a client starts, by name.
#[derive(Clone, Default)]
struct Commands(Arc<Mutex<Vec<String>>>);

impl Commands {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

async fn monitored_client() -> (Client, Commands) {
    let commands = Commands::default();
    let sink = commands.clone();
    let mut opts = options().await;
    opts.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
        if let CommandEvent::Started(s) = e {
            sink.0.lock().unwrap().push(s.command_name);
        }
    }));
    (Client::with_options(opts).unwrap(), commands)
}

#[tokio::test]
async fn round_trips_per_operation() {
    let (client, commands) = monitored_client().await;
    let store = fresh_store_on(&client, None).await;
    store.xlock(&request("warm-up", "w", None)).await.unwrap(); // checks set-up once
    commands.take();

    store
        .xlock(&request("x", "a", Some(Duration::from_secs(60))))
        .await
        .unwrap();
    assert_eq!(commands.take(), ["findAndModify"], "xlock is one command");
    store
        .slock(&request("s", "a", None), Some(SharedLimit::new(3).unwrap()))
        .await
        .unwrap();
    assert_eq!(commands.take(), ["findAndModify"], "slock is one command");
    let refused = store.xlock(&request("x", "b", None)).await;
    assert!(matches!(refused, Err(Error::AlreadyLocked { .. })));
    assert_eq!(
        commands.take(),
        ["findAndModify"],
        "a refusal is one command too"
    );

    let mut per_size = BTreeMap::new();
    for k in [1, 10, 100] {
        let group = format!("group-{k}");
        for i in 0..k {
            store
                .xlock(&request(
                    &format!("{group}/r{i}"),
                    &group,
                    Some(Duration::from_secs(60)),
                ))
                .await
                .unwrap();
        }
        commands.take();
        assert_eq!(
            store
                .renew(&id(&group), ttl(60), Duration::from_secs(1))
                .await
                .unwrap()
                .len(),
            k
        );
        let renew = commands.take();
        assert_eq!(store.unlock(&id(&group)).await.unwrap().len(), k);
        let unlock = commands.take();
        per_size.insert(k, (renew, unlock));
    }
    // A group that turns out to be one lock: a read, then the one-lock command.
    let (renew_1, unlock_1) = per_size[&1].clone();
    assert_eq!(renew_1, ["find", "findAndModify"]);
    assert_eq!(unlock_1, ["find", "findAndModify"]);
    // A bigger group: the read, then a transaction of the same three commands at any size.
    let (renew_10, unlock_10) = per_size[&10].clone();
    let transaction = ["find", "aggregate", "update", "commitTransaction"];
    assert_eq!(renew_10, transaction);
    assert_eq!(unlock_10, transaction);
    assert_eq!(per_size[&100], (renew_10, unlock_10), "100 locks as 10");
    // An unknown group: the read alone.
    assert!(store.unlock(&id("nobody")).await.unwrap().is_empty());
    assert_eq!(commands.take(), ["find"]);

    // Status: one command, or the server's time first when a TTL bound needs it.
    let all = store.status(&Filter::new()).await.unwrap();
    assert!(!all.is_empty());
    assert_eq!(commands.take(), ["aggregate"], "status is one command");
    store.status(&Filter::new().resource("x")).await.unwrap();
    assert_eq!(commands.take(), ["aggregate"], "status of a resource too");
    store
        .status(&Filter::new().ttl_lt(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(
        commands.take(),
        ["hello", "find"],
        "a TTL bound reads the server's time first, to use the expiry indexes"
    );

    // A batch of renewals: one transaction of three commands for 100 locks, each lock
    // decided on its own.
    let mut batch = Vec::new();
    for i in 0..100 {
        let lock = store
            .xlock(&request(
                &format!("batch/{i}"),
                &format!("b{i}"),
                Some(Duration::from_secs(60)),
            ))
            .await
            .unwrap();
        batch.push(Renewal {
            resource: lock.resource,
            lock_id: lock.lock_id,
            ttl: ttl(120),
        });
    }
    store.unlock(&id("b7")).await.unwrap();
    batch[9].ttl = ttl(1);
    commands.take();
    let outcomes = store
        .renew_many(&batch, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        commands.take(),
        ["aggregate", "update", "commitTransaction"],
        "renew_many of 100 locks"
    );
    assert_eq!(outcomes.len(), 100);
    for (i, outcome) in outcomes.iter().enumerate() {
        match (i, outcome) {
            (7, Err(Error::LockNotFound)) => {}
            (7, other) => panic!("a released lock: {other:?}"),
            (9, Ok(l)) => assert_eq!(l.ttl, Some(Duration::from_secs(1)), "its own TTL"),
            (_, Ok(l)) => assert_eq!(l.ttl, Some(Duration::from_secs(120)), "lock {i}"),
            (i, other) => panic!("lock {i}: {other:?}"),
        }
    }
    // As stored: each renewed lock with its own new expiry, the others as they were.
    let stored = |lock_id: &str| {
        let store = &store;
        let lock_id = lock_id.to_string();
        async move {
            let found = store.status(&Filter::new().lock_id(lock_id)).await.unwrap();
            found[0].ttl.unwrap()
        }
    };
    assert!(stored("b0").await > Duration::from_secs(100));
    assert!(stored("b9").await <= Duration::from_secs(1));
    assert!(stored("b99").await > Duration::from_secs(100));
    // Within a margin longer than what is left: refused, each on its own.
    let refused = store
        .renew_many(&batch[..3], Duration::from_secs(600))
        .await
        .unwrap();
    assert!(
        refused
            .iter()
            .all(|r| matches!(r, Err(Error::NotRenewable { .. }))),
        "{refused:?}"
    );
    commands.take();

    // One known lock: one command each, granted, refused or already gone.
    let lock = store
        .slock(
            &request("one", "single", Some(Duration::from_secs(60))),
            None,
        )
        .await
        .unwrap();
    commands.take();
    let renewed = store
        .renew_one(&lock.renewal(ttl(60)), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(renewed.fence, lock.fence);
    assert_eq!(
        commands.take(),
        ["findAndModify"],
        "renew_one is one command"
    );
    let refused = store
        .renew_one(&lock.renewal(ttl(60)), Duration::from_secs(120))
        .await;
    assert!(
        matches!(refused, Err(Error::NotRenewable { .. })),
        "{refused:?}"
    );
    assert_eq!(
        commands.take(),
        ["findAndModify"],
        "a refused renew_one too"
    );
    let released = store
        .unlock_one(&lock.resource, &lock.lock_id)
        .await
        .unwrap();
    assert_eq!(released.map(|l| l.fence), Some(lock.fence));
    assert_eq!(
        commands.take(),
        ["findAndModify"],
        "unlock_one is one command"
    );
    assert_eq!(
        store
            .unlock_one(&lock.resource, &lock.lock_id)
            .await
            .unwrap(),
        None
    );
    let gone = store
        .renew_one(&lock.renewal(ttl(60)), Duration::ZERO)
        .await;
    assert!(matches!(gone, Err(Error::LockNotFound)), "{gone:?}");
    assert_eq!(
        commands.take(),
        ["findAndModify", "findAndModify"],
        "a lock already gone: one command each"
    );
    teardown(&store).await;
}

#[tokio::test]
async fn purge_round_trips_grow_with_batches_only() {
    let (client, commands) = monitored_client().await;
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store_on(&client, Some(Arc::clone(&clock)))
        .await
        .with_purge_batch(10)
        .unwrap();
    store.status(&Filter::new()).await.unwrap(); // checks set-up once
    let mut counts = Vec::new();
    for n in [5_usize, 25] {
        for i in 0..n {
            store
                .xlock(&request(
                    &format!("n{n}-r{i}"),
                    &format!("n{n}-g{i}"),
                    Some(Duration::from_secs(1)),
                ))
                .await
                .unwrap();
        }
        clock.advance(Duration::from_secs(1));
        commands.take();
        assert_eq!(store.purge().await.unwrap().len(), n);
        counts.push(commands.take().len());
    }
    // One read of the expired groups, three commands per batch of 10 groups, one delete.
    assert_eq!(counts, [1 + 3 + 1, 1 + 3 * 3 + 1]);
    teardown(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_xlock_has_one_winner_per_round() {
    let store = Arc::new(fresh_store(None).await);
    for round in 0..25 {
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    store
                        .xlock(&request("hot", &format!("r{round}-t{i}"), None))
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(lock) => winners.push(lock),
                Err(Error::AlreadyLocked { .. }) => {}
                Err(other) => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}");
        assert_eq!(store.unlock(&winners[0].lock_id).await.unwrap().len(), 1);
    }
    teardown(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_slock_never_exceeds_limit() {
    let store = Arc::new(fresh_store(None).await);
    let limit = SharedLimit::new(5).unwrap();
    for round in 0..15 {
        let resource = format!("tenant-{round}"); // a fresh resource each round: insert races too
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (store, resource) = (Arc::clone(&store), resource.clone());
                tokio::spawn(async move {
                    store
                        .slock(&request(&resource, &format!("t{i}"), None), Some(limit))
                        .await
                })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => granted += 1,
                Err(Error::AlreadyLocked { .. }) => {}
                Err(other) => panic!("round {round}: {other:?}"),
            }
        }
        let held = store
            .status(&Filter::new().resource(resource.as_str()))
            .await
            .unwrap();
        assert_eq!(granted, 5, "round {round}");
        assert_eq!(held.len(), 5, "round {round}");
    }
    teardown(&store).await;
}

fn date(t: Timestamp) -> Bson {
    Bson::DateTime(DateTime::from_millis(i64::try_from(t.as_millis()).unwrap()))
}

/// Documents as the Go library writes them: no fences, no comment, no lastFence.
fn go_documents() -> Vec<Document> {
    let t = |s: u64| date(T0.saturating_add(Duration::from_secs(s)));
    vec![
        doc! {
            "resource": "go-exclusive",
            "exclusive": { "lockId": "go-1", "owner": "john", "host": "h1", "createdAt": t(0),
                           "renewedAt": Bson::Null, "expiresAt": t(10), "acquired": true },
            "shared": { "count": 0, "locks": [] },
        },
        doc! {
            "resource": "go-shared",
            "exclusive": { "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null,
                           "createdAt": Bson::Null, "renewedAt": Bson::Null, "expiresAt": Bson::Null,
                           "acquired": false },
            "shared": { "count": 2, "locks": [
                { "lockId": "go-1", "owner": "john", "host": "h1", "createdAt": t(1),
                  "renewedAt": Bson::Null, "expiresAt": Bson::Null, "acquired": true },
                { "lockId": "go-2", "owner": "jane", "host": "h2", "createdAt": t(2),
                  "renewedAt": Bson::Null, "expiresAt": t(3), "acquired": true },
            ] },
        },
    ]
}

#[tokio::test]
async fn reads_renews_unlocks_and_purges_go_documents() {
    let clock = Arc::new(ManualClock::new(T0.saturating_add(Duration::from_secs(2))));
    let store = fresh_store(Some(Arc::clone(&clock))).await;
    store
        .collection()
        .insert_many(go_documents())
        .await
        .unwrap();

    let all = store.status(&Filter::new()).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].resource.as_str(), "go-exclusive");
    assert_eq!(all[0].ttl, Some(Duration::from_secs(8)));
    assert_eq!(all[2].holder.owner.as_deref(), Some("jane"));

    // The Go locks block ours, and our grants carry on from Go's documents.
    assert!(matches!(
        store.xlock(&request("go-exclusive", "ours", None)).await,
        Err(Error::AlreadyLocked { .. })
    ));
    let limit = SharedLimit::new(2).unwrap();
    assert!(matches!(
        store
            .slock(&request("go-shared", "ours", None), Some(limit))
            .await,
        Err(Error::AlreadyLocked { .. })
    ));

    let renewed = store
        .renew(&id("go-1"), ttl(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(renewed.len(), 2);
    assert!(
        renewed
            .iter()
            .all(|l| l.ttl == Some(Duration::from_secs(30)))
    );

    clock.advance(Duration::from_secs(5)); // go-2 expired at 3 s
    let purged = store.purge().await.unwrap();
    assert_eq!(purged.len(), 1);
    assert_eq!(purged[0].lock_id.as_str(), "go-2");

    let released = store.unlock(&id("go-1")).await.unwrap();
    assert_eq!(released.len(), 2);
    assert!(store.status(&Filter::new()).await.unwrap().is_empty());
    teardown(&store).await;
}

#[tokio::test]
async fn our_documents_follow_the_go_schema() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(clock)).await;
    let mut details = LockDetails::new().owner("o").host("h").comment("c");
    details.ttl = Some(Duration::from_secs(9));
    store
        .xlock(&LockRequest::new("x", "id-x", &details).unwrap())
        .await
        .unwrap();
    store
        .slock(&request("s", "id-s1", None), None)
        .await
        .unwrap();
    store
        .slock(&request("s", "id-s2", None), None)
        .await
        .unwrap();
    store.unlock(&id("id-s1")).await.unwrap();

    let get = |r: &'static str| {
        let coll = store.collection().clone();
        async move {
            coll.find_one(doc! { "resource": r })
                .await
                .unwrap()
                .unwrap()
        }
    };
    let x = get("x").await;
    let ex = x.get_document("exclusive").unwrap();
    assert_eq!(ex.get_str("lockId").unwrap(), "id-x");
    assert_eq!(ex.get_str("owner").unwrap(), "o");
    assert_eq!(ex.get_str("host").unwrap(), "h");
    assert!(ex.get_bool("acquired").unwrap());
    assert_eq!(ex.get("createdAt"), Some(&date(T0)));
    assert_eq!(
        ex.get("expiresAt"),
        Some(&date(T0.saturating_add(Duration::from_secs(9))))
    );
    assert_eq!(ex.get("renewedAt"), Some(&Bson::Null));
    assert_eq!(
        x.get_document("shared").unwrap(),
        &doc! { "count": 0, "locks": [] }
    );

    let s = get("s").await;
    let ex = s.get_document("exclusive").unwrap();
    assert_eq!(ex.get_bool("acquired"), Ok(false));
    assert_eq!(ex.get("lockId"), Some(&Bson::Null));
    let shared = s.get_document("shared").unwrap();
    let locks = shared.get_array("locks").unwrap();
    assert_eq!(locks.len(), 1);
    assert_eq!(
        shared.get("count").and_then(Bson::as_i32),
        Some(1),
        "count is an int equal to the array length"
    );
    let l = locks[0].as_document().unwrap();
    assert_eq!(l.get_str("lockId").unwrap(), "id-s2");
    assert!(l.get_bool("acquired").unwrap());
    assert_eq!(l.get("expiresAt"), Some(&Bson::Null));
    assert!(matches!(l.get("createdAt"), Some(Bson::DateTime(_))));
    teardown(&store).await;
}

/// Every document of the collection, by resource, as stored.
async fn raw_docs(store: &MongoStore) -> BTreeMap<String, Document> {
    use futures_util::TryStreamExt;
    store
        .collection()
        .find(doc! {})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (format!("{:?}", d.get("resource")), d))
        .collect()
}

/// The skipped documents of a `Skipped` error as (resource, field), and what was done.
fn skipped<T: std::fmt::Debug>(
    result: Result<T, Error>,
) -> (Vec<LockStatusKey>, Vec<(String, String)>) {
    match result {
        Err(Error::Skipped { done, skipped }) => (
            done.iter()
                .map(|l| {
                    (
                        l.resource.as_str().to_owned(),
                        l.lock_id.as_str().to_owned(),
                    )
                })
                .collect(),
            skipped.into_iter().map(|m| (m.resource, m.field)).collect(),
        ),
        other => panic!("expected Skipped, got {other:?}"),
    }
}

type LockStatusKey = (String, String);

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[tokio::test]
async fn malformed_documents_are_named_left_alone_and_isolated() {
    let store = fresh_store(Some(Arc::new(ManualClock::new(T0)))).await;
    store.xlock(&request("fine", "ok", None)).await.unwrap();
    store
        .collection()
        .insert_many([
            doc! { "resource": "bad-count", "shared": { "count": 3, "locks": [
            { "lockId": "victim", "createdAt": date(T0), "acquired": true } ] } },
            doc! { "resource": "bad-date", "exclusive": { "lockId": "dated", "acquired": true,
            "createdAt": "yesterday" } },
        ])
        .await
        .unwrap();
    let before = raw_docs(&store).await;

    let expect_malformed = |result: Result<Vec<_>, Error>, resource: &str, field: &str| match result
    {
        Err(Error::Malformed {
            resource: r,
            field: f,
            ..
        }) => {
            assert_eq!((r.as_str(), f.as_str()), (resource, field));
        }
        other => panic!("expected Malformed {resource}/{field}, got {other:?}"),
    };
    // Status reports every readable lock and names each unreadable document.
    assert_eq!(
        skipped(store.status(&Filter::new()).await),
        (
            vec![pair("fine", "ok")],
            vec![
                pair("bad-count", "shared.count"),
                pair("bad-date", "exclusive.createdAt")
            ]
        )
    );
    assert_eq!(
        skipped(store.status(&Filter::new().resource("bad-date")).await),
        (vec![], vec![pair("bad-date", "exclusive.createdAt")])
    );
    assert_eq!(
        skipped(store.unlock(&id("victim")).await),
        (vec![], vec![pair("bad-count", "shared.count")])
    );
    expect_malformed(
        store.renew(&id("dated"), ttl(5), Duration::ZERO).await,
        "bad-date",
        "exclusive.createdAt",
    );
    let grant = store
        .slock(&request("bad-count", "newcomer", None), None)
        .await;
    expect_malformed(grant.map(|l| vec![l]), "bad-count", "shared.count");
    let grant = store.xlock(&request("bad-date", "newcomer", None)).await;
    expect_malformed(grant.map(|l| vec![l]), "bad-date", "exclusive.createdAt");
    let bad_date = lockwright_engine::Resource::new("bad-date").unwrap();
    let one = store
        .renew_one(
            &Renewal {
                resource: bad_date.clone(),
                lock_id: id("dated"),
                ttl: ttl(5),
            },
            Duration::ZERO,
        )
        .await;
    expect_malformed(one.map(|l| vec![l]), "bad-date", "exclusive.createdAt");
    let one = store.unlock_one(&bad_date, &id("dated")).await;
    expect_malformed(
        one.map(|l| l.into_iter().collect()),
        "bad-date",
        "exclusive.createdAt",
    );
    // Nothing was written to them.
    assert_eq!(raw_docs(&store).await, before);
    // Other resources are unaffected.
    assert_eq!(store.unlock(&id("ok")).await.unwrap().len(), 1);
    teardown(&store).await;
}

#[tokio::test]
async fn purge_skips_unreadable_documents_and_purges_the_rest() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store(Some(Arc::clone(&clock)))
        .await
        .with_purge_batch(1)
        .unwrap();
    for (resource, group) in [("good", "a-group"), ("b-elsewhere", "b-group")] {
        store
            .xlock(&request(resource, group, Some(Duration::from_secs(1))))
            .await
            .unwrap();
    }
    store
        .collection()
        .insert_one(
            doc! { "resource": "bad", "exclusive": { "lockId": "b-group", "acquired": true,
            "createdAt": date(T0), "expiresAt": date(T0), "renewedAt": "soon", "owner": 42 } },
        )
        .await
        .unwrap();
    let bad_before = store
        .collection()
        .find_one(doc! { "resource": "bad" })
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    // a-group is purged; b-group touches the unreadable document, so it is left whole.
    assert_eq!(
        skipped(store.purge().await),
        (
            vec![pair("good", "a-group")],
            vec![pair("bad", "exclusive.renewedAt")]
        )
    );
    let left = skipped(store.status(&Filter::new()).await).0;
    assert_eq!(left, vec![pair("b-elsewhere", "b-group")]);
    let bad_after = store
        .collection()
        .find_one(doc! { "resource": "bad" })
        .await
        .unwrap();
    assert_eq!(bad_before, bad_after);
    teardown(&store).await;
}

#[tokio::test]
async fn refuses_to_run_without_the_unique_index() {
    let client = Client::with_options(options().await).unwrap();
    let coll = client
        .database("lockwright_test")
        .collection(&format!("noindex_{}", mongodb::bson::oid::ObjectId::new()));
    let store = MongoStore::from_collection(coll);
    match store.xlock(&request("r", "a", None)).await {
        Err(Error::Misconfigured { reason }) => {
            assert!(reason.contains("create_indexes"), "{reason}")
        }
        other => panic!("expected Misconfigured, got {other:?}"),
    }
    teardown(&store).await;
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
            store.xlock(&request("r", "a", None)).await.map(|_| ()),
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
        store.xlock(&request("r", "a", None)).await,
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
    let mut details = LockDetails::new().owner("$$NOW");
    details.ttl = Some(Duration::from_secs(5));
    let granted = store
        .xlock(&LockRequest::new("$r", sneaky, &details).unwrap())
        .await
        .unwrap();
    assert_eq!(granted.lock_id.as_str(), sneaky);
    assert_eq!(granted.holder.owner.as_deref(), Some("$$NOW"));
    store
        .slock(&request("plain", sneaky, None), None)
        .await
        .unwrap();
    assert!(matches!(
        store.xlock(&request("$r", "$$ROOT", None)).await,
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
    store.xlock(&request("r", "a", None)).await.unwrap();
    let modes: Vec<Mode> = store
        .status(&Filter::new())
        .await
        .unwrap()
        .iter()
        .map(|l| l.mode)
        .collect();
    assert_eq!(modes, [Mode::Exclusive]);
    teardown(&store).await;
}

/// Renew's write is one `update` command that belongs to the transaction that read the group
/// (otherwise a failure could leave it half renewed), and it renews exclusive and shared
/// locks of the group alike.
#[tokio::test]
async fn renew_updates_inside_its_transaction() {
    let updates: Arc<Mutex<Vec<Document>>> = Arc::default();
    let sink = Arc::clone(&updates);
    let mut opts = options().await;
    opts.command_event_handler = Some(EventHandler::callback(move |e: CommandEvent| {
        if let CommandEvent::Started(s) = e
            && s.command_name == "update"
        {
            sink.lock().unwrap().push(s.command);
        }
    }));
    let client = Client::with_options(opts).unwrap();
    let store = fresh_store_on(&client, None).await;
    let minute = Some(Duration::from_secs(60));
    store.xlock(&request("x", "g", minute)).await.unwrap();
    store.slock(&request("s", "g", minute), None).await.unwrap();
    store
        .slock(&request("s", "other", minute), None)
        .await
        .unwrap();
    updates.lock().unwrap().clear();

    let renewed = store
        .renew(&id("g"), ttl(3_600), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 2);
    let sent = std::mem::take(&mut *updates.lock().unwrap());
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
