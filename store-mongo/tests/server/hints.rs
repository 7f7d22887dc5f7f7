//! Hints from the wakes, on the real server: a write that hands a lock over wakes the store
//! of the place it was handed to, through that store's tailable cursor, and nothing else
//! wakes anybody. Each silence is shown by the next hint being a marker's (a hand-over on
//! a resource of its own, which the store hears: its cursor keeps the order of inserts).

use futures_util::{StreamExt, TryStreamExt};
use lockwright_engine::{HandedLock, Hint, HintStream, Resource, Ticket};

use super::*;

/// The next hint, waiting as long as a loaded machine may need (never a timing assertion:
/// a hint that does not come fails the test).
async fn next(hints: &mut HintStream) -> Hint {
    tokio::time::timeout(Duration::from_secs(60), hints.next())
        .await
        .expect("a hint within a minute")
        .expect("the hints go on")
}

fn for_secs(secs: u64) -> Option<Duration> {
    Some(Duration::from_secs(secs))
}

/// A fair request on `resource` for `lock_id`, with the place `ticket` (30 s), as
/// `options` asks.
fn fair_as(resource: &str, lock_id: &str, ticket: &str, options: &LockOptions) -> LockRequest {
    let ticket = Ticket::new(id(ticket), Duration::from_secs(30)).unwrap();
    LockRequest::new(resource, lock_id, options)
        .unwrap()
        .fair(ticket)
}

/// An exclusive fair request (see [`fair_as`]).
fn fair(resource: &str, lock_id: &str, ticket: &str) -> LockRequest {
    fair_as(
        resource,
        lock_id,
        ticket,
        &LockOptions::exclusive(Duration::from_secs(30)),
    )
}

/// The hint that `ticket`'s place was handed `resource`'s lock, less what it says was
/// handed (see [`next_handed`]).
fn handed(resource: &str, ticket: &str) -> Hint {
    Hint::First {
        resource: Resource::new(resource).unwrap(),
        taken: false,
        place: Some(id(ticket).place_tag()),
        grant: None,
    }
}

/// The next hint, less what it says was handed, and that.
async fn next_handed(hints: &mut HintStream) -> (Hint, Option<HandedLock>) {
    match next(hints).await {
        Hint::First {
            resource,
            taken,
            place,
            grant,
        } => (
            Hint::First {
                resource,
                taken,
                place,
                grant: None,
            },
            grant,
        ),
        other => (other, None),
    }
}

/// Another process on `a`'s collection: its own client, its own store (and tag).
pub(crate) async fn process(a: &MongoStore) -> (Client, MongoStore) {
    let ns = a.collection().namespace();
    let client = Client::with_options(options().await).unwrap();
    let store = MongoStore::from_collection(client.database(&ns.db).collection(&ns.coll));
    (client, store)
}

/// Hands the lock of the marker resource `name` (held by `a`) to a fair waiter of `s`, and
/// checks that this is the next hint `hints` gives: nothing came before it.
async fn marked(a: &MongoStore, s: &MongoStore, hints: &mut HintStream, name: &str, what: &str) {
    a.lock(&request(name, "marker", for_secs(30)))
        .await
        .unwrap();
    s.lock(&fair(name, "marked", "marker-ticket"))
        .await
        .unwrap_err();
    a.unlock_one(&Resource::new(name).unwrap(), &id("marker"))
        .await
        .unwrap();
    assert_eq!(
        next_handed(hints).await.0,
        handed(name, "marker-ticket"),
        "{what}"
    );
}

#[tokio::test]
async fn a_hand_over_wakes_the_store_of_the_place_it_was_handed_to_and_no_other() {
    let a = fresh_store(None).await;
    let ((cb, b), (cc, c)) = (process(&a).await, process(&a).await);
    let r = Resource::new("r").unwrap();
    a.lock(&request("r", "holder", for_secs(30))).await.unwrap();
    b.lock(&fair("r", "wb", "tb")).await.unwrap_err();
    c.lock(&fair("r", "wc", "tc")).await.unwrap_err();
    let (mut hb, mut hc) = (b.hints().unwrap(), c.hints().unwrap());
    assert_eq!(
        next(&mut hb).await,
        Hint::Missed,
        "a subscription starts so"
    );
    assert_eq!(next(&mut hc).await, Hint::Missed);

    // The holder releases (`unlock_one`: the engine replays the reply, at the fence floor
    // the command ran at, to find the hand-over): b is handed the lock, and told what it
    // was handed; c hears nothing.
    a.unlock_one(&r, &id("holder")).await.unwrap();
    let (hint, grant) = next_handed(&mut hb).await;
    assert_eq!(hint, handed("r", "tb"), "b's turn");
    let grant = grant.expect("a release's wake says what it handed");
    let held = a.status(&Filter::new()).await.unwrap();
    let held = held
        .iter()
        .find(|l| l.lock_id == id("wb"))
        .expect("b's lock");
    assert_eq!(
        (grant.fence, grant.created_at, grant.expires_at),
        (held.fence, held.created_at, held.expires_at),
        "the wake says what the store holds"
    );
    marked(&a, &c, &mut hc, "m1", "c heard nothing of r").await;

    // b claims it (a grant hands nothing over: nobody hears), then releases by group: c
    // is handed the lock (a group's release does not replay at the command's floor: its
    // wake says only whom).
    b.lock(&fair("r", "wb", "tb")).await.unwrap();
    marked(&a, &c, &mut hc, "m2", "a claim wakes nobody").await;
    b.unlock(&id("wb")).await.unwrap();
    assert_eq!(next_handed(&mut hc).await.0, handed("r", "tc"), "c's turn");
    marked(&a, &b, &mut hb, "m3", "b heard nothing of r").await;

    drop((hb, hc));
    teardown(&a).await;
    cb.shutdown().await;
    cc.shutdown().await;
}

#[tokio::test]
async fn writes_that_hand_nothing_over_wake_nobody() {
    let a = fresh_store(None).await;
    let (cb, b) = process(&a).await;
    let r = Resource::new("r").unwrap();
    let mut hints = b.hints().unwrap();
    assert_eq!(next(&mut hints).await, Hint::Missed);
    // A grant, a refusal that is not fair, a renewal, a release with nobody waiting, a
    // fair waiter taking and keeping its place, and leaving it.
    a.lock(&request("r", "a", for_secs(30))).await.unwrap();
    b.lock(&request("r", "b", for_secs(30))).await.unwrap_err();
    let renewal = Renewal {
        resource: r.clone(),
        lock_id: id("a"),
        ttl: ttl(30),
    };
    a.renew_each(&[renewal], Duration::ZERO).await.unwrap();
    b.lock(&fair("r", "wb", "tb")).await.unwrap_err();
    b.lock(&fair("r", "wb", "tb")).await.unwrap_err();
    assert!(b.leave_queue(&r, &id("tb")).await.unwrap());
    a.unlock_one(&r, &id("a")).await.unwrap();
    a.purge().await.unwrap();
    marked(&a, &b, &mut hints, "m", "nothing before the marker").await;
    drop(hints);
    teardown(&a).await;
    cb.shutdown().await;
}

/// The other writes that hand over: a group released in a transaction (two documents), a
/// waiter leaving from the front of a line (a shared waiter behind it is handed the
/// lock), and a refusal whose write finds the holder gone (its lease and grace over).
#[tokio::test]
async fn group_releases_leaving_and_refusals_hand_over_and_wake() {
    let a = fresh_store(None)
        .await
        .with_takeover_grace(Duration::ZERO)
        .unwrap();
    let (cb, b) = process(&a).await;
    let b = b.with_takeover_grace(Duration::ZERO).unwrap();
    let mut hints = b.hints().unwrap();
    assert_eq!(next(&mut hints).await, Hint::Missed);

    a.lock(&request("g1", "group", for_secs(30))).await.unwrap();
    a.lock(&request("g2", "group", for_secs(30))).await.unwrap();
    b.lock(&fair("g1", "w1", "t1")).await.unwrap_err();
    b.lock(&fair("g2", "w2", "t2")).await.unwrap_err();
    assert_eq!(a.unlock(&id("group")).await.unwrap().len(), 2);
    let mut two = [
        next_handed(&mut hints).await.0,
        next_handed(&mut hints).await.0,
    ];
    two.sort_by_key(|h| format!("{h:?}"));
    assert_eq!(two, [handed("g1", "t1"), handed("g2", "t2")], "the group");

    let shared = LockOptions::shared(None, Duration::from_secs(30));
    a.lock(&LockRequest::new("s", "reader", &shared).unwrap())
        .await
        .unwrap();
    a.lock(&fair("s", "writer", "tw")).await.unwrap_err();
    b.lock(&fair_as("s", "reader2", "tr", &shared))
        .await
        .unwrap_err();
    assert!(
        a.leave_queue(&Resource::new("s").unwrap(), &id("tw"))
            .await
            .unwrap()
    );
    assert_eq!(
        next_handed(&mut hints).await.0,
        handed("s", "tr"),
        "after a leave"
    );

    a.lock(&request("x", "short", for_secs(1))).await.unwrap();
    b.lock(&fair("x", "wx", "tx")).await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.lock(&request("x", "racer", for_secs(30)))
        .await
        .unwrap_err();
    assert_eq!(
        next_handed(&mut hints).await.0,
        handed("x", "tx"),
        "after a refusal"
    );

    drop(hints);
    teardown(&a).await;
    cb.shutdown().await;
}

/// A wake sent while the store listened to nothing is read when it opens its cursor, after
/// `Missed`; one it passed on already is not passed on again when it reopens.
#[tokio::test]
async fn a_wake_sent_before_the_cursor_opened_is_read_once() {
    let a = fresh_store(None).await;
    let (cb, b) = process(&a).await;
    a.lock(&request("r", "holder", for_secs(30))).await.unwrap();
    b.lock(&fair("r", "wb", "tb")).await.unwrap_err();
    a.unlock_one(&Resource::new("r").unwrap(), &id("holder"))
        .await
        .unwrap();
    let mut hints = b.hints().unwrap();
    assert_eq!(next(&mut hints).await, Hint::Missed);
    assert_eq!(
        next_handed(&mut hints).await.0,
        handed("r", "tb"),
        "read on opening"
    );
    drop(hints);
    let mut hints = b.hints().unwrap();
    assert_eq!(next(&mut hints).await, Hint::Missed);
    marked(&a, &b, &mut hints, "m", "not passed on twice").await;
    drop(hints);
    teardown(&a).await;
    cb.shutdown().await;
}

/// A wake shard dropped while a store listens on it is made anew, plain, by the next write
/// to it; the listening store caps it again (a tailable cursor opens only on a capped
/// collection, and a plain one would grow without bound), and its waiters are woken again.
#[tokio::test]
async fn a_dropped_wake_shard_is_capped_again_and_wakes_go_on() {
    let a = fresh_store(None).await;
    let (cb, b) = process(&a).await;
    let mut hints = b.hints().unwrap();
    assert_eq!(next(&mut hints).await, Hint::Missed);
    // A hand-over first: the writer, a, now knows the shard exists, and after the drop its
    // next wake makes it anew, plain.
    marked(&a, &b, &mut hints, "before-drop", "the shard works").await;
    let ns = a.collection().namespace();
    let db = a.collection().client().database(&ns.db);
    let shard = b.wake_collection();
    db.collection::<mongodb::bson::Document>(&shard)
        .drop()
        .await
        .unwrap();
    // Hand-overs to b until one reaches it (the first ones may make the shard anew, plain,
    // while b's cursor reopens); every hint but those is `Missed`.
    let mut heard = false;
    for round in 0..20 {
        let name = format!("after-drop-{round}");
        a.lock(&request(&name, "holder", for_secs(30)))
            .await
            .unwrap();
        b.lock(&fair(&name, "waiter", &format!("ticket-{round}")))
            .await
            .unwrap_err();
        a.unlock_one(&Resource::new(&name).unwrap(), &id("holder"))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while let Ok(Some(hint)) = tokio::time::timeout_at(deadline, hints.next()).await {
            match hint {
                Hint::Missed => {}
                Hint::First { .. } => heard = true,
                other => panic!("{other:?}"),
            }
        }
        if heard {
            break;
        }
    }
    assert!(heard, "a hand-over reached b after its shard was dropped");
    let listed = db
        .list_collections()
        .filter(mongodb::bson::doc! { "name": &shard })
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0].options.capped,
        Some(true),
        "capped again: {listed:?}"
    );
    drop(hints);
    teardown(&a).await;
    cb.shutdown().await;
}
