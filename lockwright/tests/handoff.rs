//! The store hands the lock to the head of the line, on a real MongoDB: a head whose
//! process was killed is handed the lock in the release and never claims it, so the next
//! live waiter is granted once the dead head's claim lease and the takeover grace are over,
//! by its own keep-place write, and never before (the store's own times say so, not the
//! test's clock).

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]
#![cfg(feature = "mongo")]

use std::time::Duration;

use lockwright::{
    Client, DEFAULT_TAKEOVER_GRACE, Error, Filter, LockId, LockOptions, LockRequest, LockStore,
    Locker, LockerConfig, Resource, Ticket,
};
use lockwright_testkit::mongo::fixture::{fresh_store, teardown};

/// The dead head's place lease, and so the claim lease of the lock it is handed.
const DEAD_LEASE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_killed_heads_lock_is_handed_on_after_its_claim_lease() {
    let client = Client::new(fresh_store(None).await);
    let store = client.store();
    let job = Resource::new("job").unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(30));
    store
        .lock(&LockRequest::new("job", "holder", &options).unwrap())
        .await
        .unwrap();
    // The head of the line: one fair request, refused, and then its process is gone.
    let dead = LockRequest::new("job", "dead", &options)
        .unwrap()
        .fair(Ticket::new(LockId::new("dead-place").unwrap(), DEAD_LEASE).unwrap());
    let refused = store.lock(&dead).await;
    assert!(
        matches!(
            &refused,
            Err(Error::AlreadyLocked {
                queued: Some(_),
                ..
            })
        ),
        "{refused:?}"
    );
    // A live fair waiter behind it, in a Locker of its own.
    let waiter = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let waiting = {
        let (waiter, options) = (waiter.clone(), options.clone().fair());
        tokio::spawn(async move { waiter.acquire("job", &options).await })
    };
    for _ in 0..6_000 {
        if store.waiters(&job).await.unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.waiters(&job).await.unwrap().len(), 2, "two places");

    // The release hands the lock to the dead head, with a claim lease from the handoff.
    store.unlock(&LockId::new("holder").unwrap()).await.unwrap();
    let handed = client.status(&Filter::new().resource("job")).await.unwrap();
    let [handed] = handed.as_slice() else {
        panic!("one lock on the resource: {handed:?}")
    };
    assert_eq!(handed.lock_id, LockId::new("dead").unwrap());
    assert_eq!(handed.renewed_at, None, "handed, not claimed");
    assert_eq!(
        handed.expires_at,
        Some(handed.created_at.saturating_add(DEAD_LEASE)),
        "the claim lease runs the place's lease from the handoff"
    );
    assert_eq!(store.waiters(&job).await.unwrap().len(), 1, "the head left");

    // Nobody claims it; the live waiter's own keep-place write takes it over once its claim
    // lease and the grace are over, and it is granted with a later fence.
    let guard = tokio::time::timeout(Duration::from_secs(120), waiting)
        .await
        .expect("the live waiter is granted after the dead head's claim lease")
        .unwrap()
        .unwrap();
    assert!(guard.fence() > handed.fence);
    let granted = client.status(&Filter::new().resource("job")).await.unwrap();
    let [granted] = granted.as_slice() else {
        panic!("one lock on the resource: {granted:?}")
    };
    assert_ne!(granted.lock_id, handed.lock_id);
    let abandoned = handed
        .expires_at
        .unwrap()
        .saturating_add(DEFAULT_TAKEOVER_GRACE);
    assert!(
        granted.created_at >= abandoned,
        "granted at {:?}, before the dead head's lock was abandoned at {abandoned:?}",
        granted.created_at
    );
    assert!(store.waiters(&job).await.unwrap().is_empty());
    guard.release().await.unwrap();
    teardown(client.store()).await;
}
