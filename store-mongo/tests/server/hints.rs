//! Hints from the change stream: what a release, a renewal, a grant and a purge hint to a
//! store whose refusal read the document, on the real server.

use futures_util::StreamExt;
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
    a.xlock(&request("r", "a", for_secs(30))).await.unwrap();
    a.xlock(&request("unrelated", "a", for_secs(30)))
        .await
        .unwrap();
    let refused = b.xlock(&request("r", "b", for_secs(30))).await.unwrap_err();
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
    b.xlock(&request("r", "b", for_secs(30))).await.unwrap();
    assert_eq!(next(&mut hints).await, Hint::Taken(r.clone()), "the grant");
    b.unlock(&id("b")).await.unwrap();
    assert_eq!(
        next(&mut hints).await,
        Hint::Freed(r.clone()),
        "a group's release"
    );

    // Shared locks: grants, a renewal, the release of one of two, then a purge.
    a.slock(&request("r", "s1", for_secs(30)), None)
        .await
        .unwrap();
    a.slock(&request("r", "s2", Some(Duration::from_millis(1))), None)
        .await
        .unwrap();
    assert_eq!(next(&mut hints).await, Hint::Taken(r.clone()));
    assert_eq!(next(&mut hints).await, Hint::Taken(r.clone()));
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
