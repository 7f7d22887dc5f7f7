//! Time across failovers, on a real three-member replica set whose member 2 runs 3 s behind
//! the others (libfaketime), with faults injected by failing over to and from that member:
//!
//! - fences keep increasing across the deletion of a resource's document and a failover to
//!   the member behind: they come from the cluster time, not from the primary's wall clock
//!   (with `now_ms * 1024`, the second fence was 3 s of fences below the first);
//! - a lock written under the member behind, after a failover to a member 3 s ahead of it, is not
//!   taken before its holder stops trusting it when the takeover grace covers the skew (4 s),
//!   and is taken seconds before that by a store with no grace: the check can fail.
//!
//! Each statement is timed on this machine's monotonic clock from the instant the holder sent
//! its request (its trust ends `ttl - drift margin` later) to the instants the taker sent and
//! got its grant, so a slow election or a loaded machine only makes the taker later.
#![cfg(feature = "mongo")]
// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lockwright::{Client, Error, Filter, LockOptions, MongoStore, generate_lock_id};
use lockwright_testkit::replset::ReplSet;
use mongodb::bson::doc;
use tokio::time::Instant;

/// Member 2's clock against the others'.
const SKEW_MS: i64 = -3_000;
/// The TTL of the probed locks.
const TTL: Duration = Duration::from_secs(10);
/// The Locker's default drift margin: a holder trusts its lock until `sent + TTL - this`.
const DRIFT_MARGIN: Duration = Duration::from_millis(100);
/// A grace that covers the skew.
const GRACE: Duration = Duration::from_secs(4);

/// Makes `member` the primary (`replSetStepUp` on it) and waits until it is.
async fn step_up(set: &ReplSet, member: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Refused while it is not caught up or an election is under way: asked again.
        let _ = set
            .client(member)
            .database("admin")
            .run_command(doc! { "replSetStepUp": 1 })
            .await;
        for _ in 0..20 {
            if set.primary().await.unwrap() == member {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            Instant::now() < deadline,
            "member {member} did not become primary"
        );
    }
}

async fn store(set: &ReplSet, grace: Duration) -> Client<MongoStore> {
    let store = MongoStore::connect(set.uri(), "clocks", "locks")
        .await
        .unwrap()
        .with_takeover_grace(grace)
        .unwrap();
    Client::new(store)
}

/// Asks for `resource` with a fresh lock id every 50 ms until granted or `until`; the
/// instants the granted request was sent and answered.
async fn take(client: &Client<MongoStore>, resource: &str, until: Instant) -> (Instant, Instant) {
    loop {
        let sent = Instant::now();
        match client
            .lock(resource, generate_lock_id(), &LockOptions::new())
            .await
        {
            Ok(_) => return (sent, Instant::now()),
            Err(Error::AlreadyLocked { .. }) => {}
            // A failover may still be settling (not primary, a retry window given up).
            Err(e) => eprintln!("xlock {resource}: {e}"),
        }
        assert!(Instant::now() < until, "{resource} was never taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_leases_survive_failovers_to_and_from_a_skewed_member() {
    let set = ReplSet::builder(3)
        .skew_ms(2, SKEW_MS)
        .start()
        .await
        .unwrap_or_else(|e| panic!("cannot start a replica set: {e}"));
    let offset = set.clock_offset_ms(2).await.unwrap() - set.clock_offset_ms(0).await.unwrap();
    assert!(
        (offset - SKEW_MS).abs() < 500,
        "member 2 runs {offset} ms from member 0, not {SKEW_MS}"
    );
    if set.primary().await.unwrap() == 2 {
        step_up(&set, 0).await;
    }
    let graced = store(&set, GRACE).await;
    let plain = store(&set, Duration::ZERO).await;
    graced.create_indexes().await.unwrap();

    // Fences: grant, release and purge (the document is deleted), fail over to the member
    // behind, grant again.
    let a = generate_lock_id();
    let first = graced.lock("r", &a, &LockOptions::new()).await.unwrap();
    graced.unlock(&a).await.unwrap();
    graced.purge().await.unwrap();
    let left = graced
        .store()
        .collection()
        .count_documents(doc! { "resource": "r" })
        .await
        .unwrap();
    assert_eq!(left, 0, "purge deleted the emptied document");
    step_up(&set, 2).await;
    let second = graced
        .lock("r", generate_lock_id(), &LockOptions::new())
        .await
        .unwrap();
    assert!(
        second.fence > first.fence,
        "fence {} after {} across the deletion and a failover to a clock 3 s behind",
        second.fence,
        first.fence
    );

    // Leases: two locks written under the member behind, then a failover to member 1 (member
    // 0 stepped down a moment ago and would wait out its freeze before standing again).
    let sent = Instant::now();
    let ttl = LockOptions::new().ttl(TTL);
    graced
        .lock("covered", generate_lock_id(), &ttl)
        .await
        .unwrap();
    plain
        .lock("uncovered", generate_lock_id(), &ttl)
        .await
        .unwrap();
    let trusted_until = sent + TTL - DRIFT_MARGIN;
    step_up(&set, 1).await;
    eprintln!(
        "member 1 primary {} ms after the grants",
        sent.elapsed().as_millis()
    );
    let until = sent + TTL + GRACE + Duration::from_secs(30);
    let (uncovered, covered) = tokio::join!(
        take(&plain, "uncovered", until),
        take(&graced, "covered", until)
    );
    let ms = |t: Instant| {
        i128::try_from(t.duration_since(sent).as_millis()).unwrap()
            - i128::try_from(trusted_until.duration_since(sent).as_millis()).unwrap()
    };
    assert!(
        covered.0 >= trusted_until,
        "with a {GRACE:?} grace the lock was taken {} ms before its holder stopped trusting it",
        -ms(covered.0)
    );
    assert!(
        uncovered.1 < trusted_until,
        "with no grace the lock was taken only {} ms after its holder stopped trusting it: \
         the skew did not show, so this test cannot tell the grace works",
        ms(uncovered.1)
    );
    eprintln!(
        "fences {} then {}; taken {} ms after the holder's trust ended with a {GRACE:?} grace, \
         {} ms before it with none",
        first.fence,
        second.fence,
        ms(covered.0),
        -ms(uncovered.1)
    );
    assert!(graced.status(&Filter::new()).await.is_ok());
}
