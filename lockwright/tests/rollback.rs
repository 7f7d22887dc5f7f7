//! A leader that a rollback erases is never reported. On a three-member set of its own: a
//! leads and resigns; with both secondaries' replication stopped, b's campaign is granted on the primary
//! alone (applied, never replicated); an observing process reads who leads and observes
//! meanwhile; the primary is killed (b's process with it), the secondaries replicate again, the set
//! fails over and c campaigns (the old primary, restarted, rolls b's grant back). No
//! `leader()` read and no `observe()` item names b, whose leadership never was; the
//! observed fences rise, and c is observed (its fence may be at or below the phantom's: the
//! new primary's clock decides it).
//!
//! Reads that name leaders read what is majority-committed: with the default read
//! concern, the reads while b's grant is the primary's alone name b with its phantom fence.
#![cfg(feature = "mongo")]
// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::StreamExt;
use lockwright::{Client, Leader, LockOptions, Locker, LockerConfig, MongoStore};
use lockwright_testkit::replset::ReplSet;
use mongodb::bson::{Document, doc};

const ELECTION: &str = "scheduler";

async fn client(set: &ReplSet) -> Client<MongoStore> {
    Client::new(
        MongoStore::connect(set.uri(), "rollback", "locks")
            .await
            .unwrap(),
    )
}

/// Lets member `member` fetch the primary's oplog, or stops it from doing so (the server's
/// `stopReplProducer` fail point; the fixture starts mongod with test commands enabled).
async fn replication(set: &ReplSet, member: usize, on: bool) {
    let mode = if on { "off" } else { "alwaysOn" };
    set.client(member)
        .database("admin")
        .run_command(doc! { "configureFailPoint": "stopReplProducer", "mode": mode })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_a_rollback_erases_is_never_reported() {
    let set = ReplSet::start(3)
        .await
        .unwrap_or_else(|e| panic!("cannot start a three-member replica set: {e}"));
    let primary = set.primary().await.unwrap();
    let secondaries: Vec<usize> = (0..3).filter(|&m| m != primary).collect();
    let candidates = client(&set).await;
    candidates.create_indexes().await.unwrap();
    // The observing process: a client of its own, reading and observing throughout.
    let observer = client(&set).await;
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel::<Leader>();
    let watching = observer.clone();
    let watch = tokio::spawn(async move {
        let mut changes = Box::pin(watching.observe(ELECTION, Duration::from_millis(50)));
        while let Some(change) = changes.next().await {
            if let Ok(leader) = change {
                let _ = seen.send(leader);
            }
        }
    });
    let mut read = Vec::new();
    let lease = LockOptions::exclusive(Duration::from_secs(10));

    // a leads and resigns: both are majority-committed.
    let a_locker = Locker::new(candidates.clone(), LockerConfig::default()).unwrap();
    let a = a_locker.campaign(ELECTION, "a", &lease).await.unwrap();
    let a_fence = a.fence();
    read.push(observer.leader(ELECTION).await.unwrap());
    a.resign().await.unwrap();

    // b's grant is applied on the primary alone: the secondaries stop fetching its oplog.
    // (Pausing them is not enough: what the primary already sent waits in their sockets,
    // and a resumed secondary applies it.)
    for &s in &secondaries {
        replication(&set, s, false).await;
    }
    // b is a process of its own (a runtime on a thread of its own), ended at the failover:
    // what it had in flight is never retried on the new primary.
    let (end_b, ended) = tokio::sync::oneshot::channel::<()>();
    let b =
        std::thread::spawn({
            let uri = set.uri().to_owned();
            let lease = lease.clone();
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let led = runtime.block_on(async move {
                let store = MongoStore::connect(&uri, "rollback", "locks").await.unwrap();
                let locker = Locker::new(Client::new(store), LockerConfig::default()).unwrap();
                tokio::select! {
                    led = locker.campaign(ELECTION, "b", &lease) => Some(led.map(|l| l.fence())),
                    _ = ended => None,
                }
            });
                runtime.shutdown_background();
                led
            }
        });
    let on_primary = set
        .client(primary)
        .database("rollback")
        .collection::<Document>("locks");
    let mut phantom = None;
    for _ in 0..400 {
        let doc = on_primary
            .find_one(doc! { "resource": ELECTION })
            .await
            .unwrap();
        let fence = doc.as_ref().and_then(|d| d.get_i64("lastFence").ok());
        let held = doc
            .as_ref()
            .and_then(|d| d.get_document("exclusive").ok())
            .and_then(|e| e.get_bool("acquired").ok())
            == Some(true);
        if let Some(fence) = fence.filter(|&f| held && u64::try_from(f).unwrap() > a_fence) {
            phantom = Some(u64::try_from(fence).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let phantom = phantom.expect("b's grant was not applied on the primary within 4 s");
    for _ in 0..10 {
        read.push(observer.leader(ELECTION).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The set fails over to a member that never had b's grant; b's process is gone (it
    // never heard of its grant), and c campaigns.
    let _ = end_b.send(());
    let led = b.join().unwrap();
    assert!(
        led.is_none(),
        "b's campaign ended before the failover: {led:?}"
    );
    set.kill(primary).await.unwrap();
    for &s in &secondaries {
        replication(&set, s, true).await;
    }
    let c_locker = Locker::new(candidates.clone(), LockerConfig::default()).unwrap();
    let c = tokio::time::timeout(
        Duration::from_secs(120),
        c_locker.campaign(ELECTION, "c", &lease),
    )
    .await
    .expect("c leads within two minutes of the failover")
    .unwrap();
    set.restart(primary).await.unwrap();
    set.wait_healthy().await.unwrap();
    for _ in 0..100 {
        let leader = observer.leader(ELECTION).await.unwrap();
        let done = leader.as_ref().is_some_and(|l| l.fence == c.fence());
        read.push(leader);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The observer hears of c, or reads it within its `every`.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The old primary rolls b's grant back once it syncs from the new one.
    let old = set
        .client(primary)
        .database("rollback")
        .collection::<Document>("locks");
    let mut rolled_back = false;
    for _ in 0..600 {
        let doc = old.find_one(doc! { "resource": ELECTION }).await;
        let kept = doc.ok().flatten().and_then(|d| {
            let e = d.get_document("exclusive").ok()?;
            e.get_str("comment").ok().map(str::to_owned)
        });
        if kept.is_some_and(|v| v != "b") {
            rolled_back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rolled_back,
        "the old primary kept b's grant for a minute: no rollback"
    );
    watch.abort();
    let mut observed_leaders = Vec::new();
    while let Ok(leader) = observed.try_recv() {
        observed_leaders.push(leader);
    }
    let fences: Vec<u64> = observed_leaders.iter().map(|l| l.fence).collect();
    let named_b = |l: &Leader| l.value.as_deref() == Some("b");
    assert!(
        !read.iter().flatten().any(named_b),
        "leader() named b, whose grant (fence {phantom}) was rolled back: {read:?}"
    );
    assert!(
        !observed_leaders.iter().any(named_b),
        "observe() named b, whose grant (fence {phantom}) was rolled back: {observed_leaders:?}"
    );
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "observed fences went back: {fences:?}"
    );
    assert!(
        fences.contains(&c.fence()),
        "observe() saw c lead (fence {}, the phantom's {phantom}): {observed_leaders:?}",
        c.fence()
    );
    c.resign().await.unwrap();
}
