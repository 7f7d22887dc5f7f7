//! The shared schema: the Go library's documents, ours, and malformed ones named and left alone.

use super::*;
use lockwright_engine::Access;

pub(crate) fn date(t: Timestamp) -> Bson {
    Bson::DateTime(DateTime::from_millis(i64::try_from(t.as_millis()).unwrap()))
}

/// Documents as the Go library writes them: no fences, no comment, no lastFence.
pub(crate) fn go_documents() -> Vec<Document> {
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
        store.lock(&request("go-exclusive", "ours", None)).await,
        Err(Error::AlreadyLocked { .. })
    ));
    let limit = SharedLimit::new(2).unwrap();
    assert!(matches!(
        store
            .lock(&request("go-shared", "ours", None).with_access(Access::Shared(Some(limit))))
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

    // go-2 expired at 3 s; abandoned once the takeover grace has passed too.
    clock.advance(Duration::from_secs(3) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);
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
    let mut details = LockOptions::new().owner("o").host("h").comment("c");
    details.ttl = Some(Duration::from_secs(9));
    store
        .lock(&LockRequest::new("x", "id-x", &details).unwrap())
        .await
        .unwrap();
    store
        .lock(&request("s", "id-s1", None).with_access(Access::Shared(None)))
        .await
        .unwrap();
    store
        .lock(&request("s", "id-s2", None).with_access(Access::Shared(None)))
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
pub(crate) async fn raw_docs(store: &MongoStore) -> BTreeMap<String, Document> {
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
pub(crate) fn skipped<T: std::fmt::Debug>(
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

pub(crate) type LockStatusKey = (String, String);

pub(crate) fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[tokio::test]
async fn malformed_documents_are_named_left_alone_and_isolated() {
    let store = fresh_store(Some(Arc::new(ManualClock::new(T0)))).await;
    store.lock(&request("fine", "ok", None)).await.unwrap();
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
    // The summary too: the readable resource summarised, each unreadable document named.
    let summary = store.summary().await.unwrap();
    let summarised: Vec<&str> = summary
        .resources
        .iter()
        .map(|s| s.resource.as_str())
        .collect();
    assert_eq!(summarised, ["fine"]);
    let named: Vec<(String, String)> = summary
        .skipped
        .into_iter()
        .map(|m| (m.resource, m.field))
        .collect();
    assert_eq!(
        named,
        [
            pair("bad-count", "shared.count"),
            pair("bad-date", "exclusive.createdAt")
        ]
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
        .lock(&request("bad-count", "newcomer", None).with_access(Access::Shared(None)))
        .await;
    expect_malformed(grant.map(|l| vec![l]), "bad-count", "shared.count");
    let grant = store.lock(&request("bad-date", "newcomer", None)).await;
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
            .lock(&request(resource, group, Some(Duration::from_secs(1))))
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
    clock.advance(Duration::from_secs(1) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);
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
