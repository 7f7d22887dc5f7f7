//! Round trips per operation (counted with command monitoring), and racing grants.

use super::*;
use lockwright_engine::Access;

#[tokio::test]
async fn round_trips_per_operation() {
    let (client, commands) = monitored_client().await;
    let store = fresh_store_on(&client, None).await;
    store.lock(&request("warm-up", "w", None)).await.unwrap(); // checks set-up once
    commands.take();

    store
        .lock(&request("x", "a", Some(Duration::from_secs(60))))
        .await
        .unwrap();
    assert_eq!(commands.take(), ["findAndModify"], "xlock is one command");
    store
        .lock(
            &request("s", "a", None)
                .with_access(Access::Shared(Some(SharedLimit::new(3).unwrap()))),
        )
        .await
        .unwrap();
    assert_eq!(commands.take(), ["findAndModify"], "slock is one command");
    let refused = store.lock(&request("x", "b", None)).await;
    assert!(matches!(refused, Err(Error::AlreadyLocked { .. })));
    assert_eq!(
        commands.take(),
        ["findAndModify"],
        "a refusal is one command too"
    );

    let mut per_size = BTreeMap::new();
    for k in [1, 10, 100, 1_000] {
        let group = format!("group-{k}");
        // An hour: building a thousand locks one by one on a loaded machine must not outlast
        // the first ones (the test counts commands, not time).
        for i in 0..k {
            store
                .lock(&request(
                    &format!("{group}/r{i}"),
                    &group,
                    Some(Duration::from_secs(3_600)),
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
    assert_eq!(
        per_size[&100],
        (renew_10.clone(), unlock_10.clone()),
        "100 locks as 10"
    );
    assert_eq!(per_size[&1_000], (renew_10, unlock_10), "1,000 locks as 10");
    // An unknown group: the read alone.
    assert!(store.unlock(&id("nobody")).await.unwrap().is_empty());
    assert_eq!(commands.take(), ["find"]);

    // Status: one command, or the server's time first when a TTL bound needs it.
    let all = store.status(&Filter::new()).await.unwrap();
    assert!(!all.is_empty());
    assert_eq!(commands.take(), ["aggregate"], "status is one command");
    store.status(&Filter::new().resource("x")).await.unwrap();
    assert_eq!(commands.take(), ["aggregate"], "status of a resource too");
    let of_a = store.status(&Filter::new().lock_id("a")).await.unwrap();
    assert_eq!(of_a.len(), 2, "a holds x and s: {of_a:?}");
    assert_eq!(commands.take(), ["aggregate"], "status of a lock id too");
    store.status(&Filter::new().owner("nobody")).await.unwrap();
    assert_eq!(commands.take(), ["aggregate"], "status of an owner too");
    let summary = store.summary().await.unwrap();
    assert!(!summary.resources.is_empty());
    assert_eq!(commands.take(), ["aggregate"], "a summary is one command");
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
            .lock(&request(
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
        .renew_each(&batch, Duration::from_secs(30))
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
        .renew_each(&batch[..3], Duration::from_secs(600))
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
        .lock(
            &request("one", "single", Some(Duration::from_secs(60)))
                .with_access(Access::Shared(None)),
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
                .lock(&request(
                    &format!("n{n}-r{i}"),
                    &format!("n{n}-g{i}"),
                    Some(Duration::from_secs(1)),
                ))
                .await
                .unwrap();
        }
        clock.advance(Duration::from_secs(1) + lockwright_engine::DEFAULT_TAKEOVER_GRACE);
        commands.take();
        assert_eq!(store.purge().await.unwrap().len(), n);
        counts.push(commands.take().len());
    }
    // One read of the expired groups, three commands per batch of 10 groups, one delete,
    // one update dropping the queues' dead places.
    assert_eq!(counts, [1 + 3 + 1 + 1, 1 + 3 * 3 + 1 + 1]);
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
                        .lock(&request("hot", &format!("r{round}-t{i}"), None))
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
                        .lock(
                            &request(&resource, &format!("t{i}"), None)
                                .with_access(Access::Shared(Some(limit))),
                        )
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
