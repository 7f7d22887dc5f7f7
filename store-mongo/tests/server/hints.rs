//! Hints from the change stream: what a release, a renewal, a grant and a purge hint to a
//! store whose refusal read the document, on the real server.

use futures_util::StreamExt;
use lockwright_engine::Access;
use lockwright_engine::{Hint, HintStream, Resource};

use super::*;

/// The next hint, waiting as long as a loaded machine may need (never a timing assertion:
/// a hint that does not come fails the test).
async fn next(hints: &mut HintStream) -> Hint {
    tokio::time::timeout(Duration::from_secs(60), hints.next())
        .await
        .expect("a hint within a minute")
        .expect("the stream goes on")
}

fn for_secs(secs: u64) -> Option<Duration> {
    Some(Duration::from_secs(secs))
}

fn renewal(resource: &Resource, lock_id: &str) -> Renewal {
    Renewal {
        resource: resource.clone(),
        lock_id: id(lock_id),
        ttl: ttl(30),
    }
}

#[tokio::test]
async fn hints_name_releases_and_grants_of_documents_a_refusal_read() {
    let a = fresh_store(None).await;
    let ns = a.collection().namespace();
    // Another process: its own client, its own change stream.
    let other = Client::with_options(options().await).unwrap();
    let coll = other.database(&ns.db).collection(&ns.coll);
    let b = MongoStore::from_collection(coll.clone());
    let r = Resource::new("r").unwrap();
    a.lock(&request("r", "a", for_secs(30))).await.unwrap();
    a.lock(&request("unrelated", "a", for_secs(30)))
        .await
        .unwrap();
    let refused = b.lock(&request("r", "b", for_secs(30))).await.unwrap_err();
    assert!(
        matches!(refused, Error::AlreadyLocked { .. }),
        "{refused:?}"
    );
    let mut hints = b.hints().expect("a replica set has change streams");
    assert_eq!(
        next(&mut hints).await,
        Hint::Missed,
        "a subscription starts with Missed"
    );

    // A change to a document no refusal of `b` read hints nothing, and neither does a
    // renewal: the first hint is the release.
    let unrelated = Resource::new("unrelated").unwrap();
    a.unlock_one(&unrelated, &id("a")).await.unwrap();
    a.renew_many(&[renewal(&r, "a")], Duration::ZERO)
        .await
        .unwrap();
    a.renew_one(&renewal(&r, "a"), Duration::ZERO)
        .await
        .unwrap();
    a.unlock_one(&r, &id("a")).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Freed(r.clone()),
        "the release"
    );
    let g = b.lock(&request("r", "b", for_secs(30))).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Taken(r.clone(), Some(g.fence)),
        "the grant, with its fence"
    );
    b.unlock(&id("b")).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Freed(r.clone()),
        "a group's release"
    );

    // Shared locks: grants, a renewal, the release of one of two, then a purge.
    let s1 = a
        .lock(&request("r", "s1", for_secs(30)).with_access(Access::Shared(None)))
        .await
        .unwrap();
    let s2 = a
        .lock(&request("r", "s2", Some(Duration::from_millis(1))).with_access(Access::Shared(None)))
        .await
        .unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Taken(r.clone(), Some(s1.fence))
    );
    assert_eq!(
        next(&mut hints).await,
        Hint::Taken(r.clone(), Some(s2.fence))
    );
    a.renew_one(&renewal(&r, "s1"), Duration::ZERO)
        .await
        .unwrap();
    a.unlock_one(&r, &id("s1")).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Freed(r.clone()),
        "one of two released"
    );
    let purger = MongoStore::from_collection(coll)
        .with_takeover_grace(Duration::ZERO)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(purger.purge().await.unwrap().len(), 1, "s2 has expired");
    assert_eq!(next(&mut hints).await, Hint::Freed(r.clone()), "purged");

    drop(hints);
    teardown(&a).await;
    other.shutdown().await;
}

/// A fair request on `resource` for `lock_id`, whose place `ticket` lasts `lease`.
fn fair(resource: &str, lock_id: &str, ticket: &str, lease: Duration) -> LockRequest {
    let options = LockOptions::exclusive(Duration::from_secs(30));
    let ticket =
        lockwright_engine::Ticket::new(lockwright_engine::LockId::new(ticket).unwrap(), lease)
            .unwrap();
    LockRequest::new(resource, lock_id, &options)
        .unwrap()
        .fair(ticket)
}

/// The queue of fair waiters: a waiter taking its place, keeping it (a new lease, a new
/// mode), or taking one while dead places are dropped writes the queue alone and hints
/// nothing (it would wake every waiter at every attempt); a waiter leaving hints `Freed`
/// from the middle, and `First` to the store of the next place from the front. Each silence is shown by the next hint being one on another
/// resource (the stream keeps the order of writes).
#[tokio::test]
async fn queue_places_hint_only_when_a_waiter_leaves() {
    let a = fresh_store(None).await;
    let ns = a.collection().namespace();
    let other = Client::with_options(options().await).unwrap();
    let b = MongoStore::from_collection(other.database(&ns.db).collection(&ns.coll));
    let (r, r2) = (Resource::new("r").unwrap(), Resource::new("r2").unwrap());
    let long = Duration::from_secs(30);
    a.lock(&request("r", "holder", for_secs(30))).await.unwrap();
    a.lock(&request("r2", "x2", for_secs(30))).await.unwrap();
    let first = b.lock(&fair("r", "w1", "t1", long)).await.unwrap_err();
    assert!(
        matches!(
            first,
            Error::AlreadyLocked {
                queued: Some(lockwright_engine::Queued { ahead: 0, .. }),
                ..
            }
        ),
        "{first:?}"
    );
    b.lock(&request("r2", "y", for_secs(30))).await.unwrap_err();
    let mut hints = b.hints().expect("a replica set has change streams");
    assert_eq!(next(&mut hints).await, Hint::Missed);
    a.unlock_one(&r2, &id("x2")).await.unwrap();
    assert_eq!(next(&mut hints).await, Hint::Freed(r2.clone()));

    // A place appended, a place refreshed, a place refreshed with another mode.
    b.lock(&fair("r", "w2", "t2", long)).await.unwrap_err();
    b.lock(&fair("r", "w1", "t1", long)).await.unwrap_err();
    b.lock(&fair("r", "w1", "t1", long).with_access(Access::Shared(None)))
        .await
        .unwrap_err();
    let y = b.lock(&request("r2", "y", for_secs(30))).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Taken(r2.clone(), Some(y.fence)),
        "taking and keeping places hinted nothing"
    );

    // A place whose lease runs out, dropped by the next waiter's write.
    b.lock(&fair("r", "w3", "t3", Duration::from_millis(100)))
        .await
        .unwrap_err();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fourth = b.lock(&fair("r", "w4", "t4", long)).await.unwrap_err();
    assert!(
        matches!(
            fourth,
            Error::AlreadyLocked {
                queued: Some(lockwright_engine::Queued { ahead: 2, .. }),
                ..
            }
        ),
        "t1 and t2 ahead, t3 dropped: {fourth:?}"
    );
    b.unlock(&id("y")).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Freed(r2.clone()),
        "a place taken while a dead one was dropped hinted nothing"
    );

    // Leaving: from the middle, from the front, then a ticket without a place.
    assert!(b.leave_queue(&r, &id("t2")).await.unwrap());
    assert_eq!(next(&mut hints).await, Hint::Freed(r.clone()), "t2 left");
    assert!(b.leave_queue(&r, &id("t1")).await.unwrap());
    assert_eq!(
        next(&mut hints).await,
        Hint::First {
            resource: r.clone(),
            taken: false,
            place: Some(id("t4").tag()),
        },
        "t1 left from the front: the store of t4, now first, is woken, naming t4"
    );
    assert!(!b.leave_queue(&r, &id("t1")).await.unwrap());
    let x2 = a.lock(&request("r2", "x2", for_secs(30))).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Taken(r2.clone(), Some(x2.fence)),
        "leaving without a place hinted nothing"
    );
    assert_eq!(b.waiters(&r).await.unwrap().len(), 1, "t4 waits");

    drop(hints);
    teardown(&a).await;
    other.shutdown().await;
}

/// The next two hints are the marker's grant and release: nothing came before them.
async fn marked(hints: &mut HintStream, marker: &Resource, what: &str) {
    let h = next(hints).await;
    assert!(
        matches!(&h, Hint::Taken(r, _) if r == marker),
        "{what}: {h:?}"
    );
    assert_eq!(next(hints).await, Hint::Freed(marker.clone()), "{what}");
}

/// The store whose waiter is first in a queue hears its turn, and nobody else does: a
/// release, a grant and a waiter leaving each reach the first waiter's store alone (as
/// `First`), and the next hint of every other store is the marker's (a write on a resource
/// without a queue, which every store hears). A grant that empties the queue wakes
/// everybody again.
#[tokio::test]
async fn only_the_first_waiters_store_hears_its_turn() {
    let a = fresh_store(None).await;
    let ns = a.collection().namespace();
    let process =
        |client: &Client| MongoStore::from_collection(client.database(&ns.db).collection(&ns.coll));
    let (cb, cc) = (
        Client::with_options(options().await).unwrap(),
        Client::with_options(options().await).unwrap(),
    );
    let (b, c) = (process(&cb), process(&cc));
    let (r, marker) = (Resource::new("r").unwrap(), Resource::new("m").unwrap());
    let long = Duration::from_secs(30);
    a.lock(&request("r", "holder", for_secs(30))).await.unwrap();
    a.lock(&request("m", "m", for_secs(30))).await.unwrap();
    for s in [&a, &b, &c] {
        s.lock(&request("m", "other", for_secs(30)))
            .await
            .unwrap_err();
    }
    b.lock(&fair("r", "wb", "tb", long)).await.unwrap_err();
    c.lock(&fair("r", "wc", "tc", long)).await.unwrap_err();
    let (mut hb, mut hc) = (b.hints().unwrap(), c.hints().unwrap());
    assert_eq!(next(&mut hb).await, Hint::Missed);
    assert_eq!(next(&mut hc).await, Hint::Missed);
    a.unlock_one(&marker, &id("m")).await.unwrap();
    assert_eq!(next(&mut hb).await, Hint::Freed(marker.clone()));
    assert_eq!(next(&mut hc).await, Hint::Freed(marker.clone()));
    // The marker: a grant every store hears.
    let mark = || async {
        a.lock(&request("m", "m", for_secs(1))).await.unwrap();
        a.unlock_one(&marker, &id("m")).await.unwrap();
    };

    // The holder releases: b is handed the lock.
    a.unlock_one(&r, &id("holder")).await.unwrap();
    mark().await;
    let first = |taken, ticket: &str| Hint::First {
        resource: r.clone(),
        taken,
        place: Some(id(ticket).tag()),
    };
    assert_eq!(next(&mut hb).await, first(false, "tb"), "b's turn");
    marked(&mut hc, &marker, "c heard nothing of r").await;
    marked(&mut hb, &marker, "the marker").await;

    // b claims it: c is first now (and asks only if shared).
    b.lock(&fair("r", "wb", "tb", long)).await.unwrap();
    mark().await;
    assert_eq!(next(&mut hc).await, first(true, "tc"), "c is first");
    marked(&mut hb, &marker, "b heard nothing of r").await;
    marked(&mut hc, &marker, "the marker").await;

    // b releases by group: c is handed the lock.
    b.unlock(&id("wb")).await.unwrap();
    mark().await;
    assert_eq!(next(&mut hc).await, first(false, "tc"), "c's turn");
    marked(&mut hb, &marker, "b heard nothing of r").await;
    marked(&mut hc, &marker, "the marker").await;

    // c claims the lock it was handed, and the queue is empty: everybody hears the grant
    // (a claim moves no fence, so the hint carries none).
    c.lock(&fair("r", "wc", "tc", long)).await.unwrap();
    assert_eq!(next(&mut hb).await, Hint::Taken(r.clone(), None));
    assert_eq!(next(&mut hc).await, Hint::Taken(r.clone(), None));

    // b, then c, wait; b leaves from the front: c's turn, and b hears nothing.
    b.lock(&fair("r", "wb", "tb2", long)).await.unwrap_err();
    c.lock(&fair("r", "wc2", "tc2", long)).await.unwrap_err();
    assert!(b.leave_queue(&r, &id("tb2")).await.unwrap());
    mark().await;
    assert_eq!(
        next(&mut hc).await,
        first(false, "tc2"),
        "c is first after b left"
    );
    marked(&mut hb, &marker, "b heard nothing of r").await;

    drop((hb, hc));
    teardown(&a).await;
    cb.shutdown().await;
    cc.shutdown().await;
}
