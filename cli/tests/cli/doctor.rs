//! `doctor` without `--fix` or `--wakeups` only reads: the collection, its indexes and its
//! documents, and its wake collections, are as they were, whether the collection is
//! missing, exists but was never used, or holds locks; it counts the cursors and change
//! streams the collection's clients keep open; and it warns where the wakes cannot be read.

use std::future::IntoFuture as _;
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use lockwright::{
    Hint, LockOptions, LockRequest, LockStore as _, MongoStore, Ticket, generate_lock_id,
};
use mongodb::bson::{Document, doc};

use crate::support::{Coll, code, text};

/// What doctor could change: whether the collection exists, its indexes and its documents,
/// and the wake collections with their documents.
#[derive(Debug, PartialEq)]
struct ServerState {
    exists: bool,
    indexes: Vec<Document>,
    documents: Vec<Document>,
    wakes: Vec<(String, Vec<Document>)>,
}

fn server_state(c: &Coll) -> ServerState {
    let coll = c.client.store().collection();
    let ns = coll.namespace();
    let db = c.client.store().client().database(&ns.db);
    c.block_on(async {
        let exists = !db
            .list_collection_names()
            .filter(doc! {"name": &ns.coll})
            .await
            .expect("list collections")
            .is_empty();
        let mut indexes = Vec::new();
        let mut documents = Vec::new();
        if exists {
            let list = db
                .run_command(doc! {"listIndexes": &ns.coll})
                .await
                .expect("listIndexes");
            indexes = list
                .get_document("cursor")
                .and_then(|c| c.get_array("firstBatch"))
                .expect("a first batch")
                .iter()
                .filter_map(|i| i.as_document().cloned())
                .collect();
            documents = coll
                .find(doc! {})
                .sort(doc! {"_id": 1})
                .await
                .expect("find")
                .try_collect()
                .await
                .expect("documents");
        }
        let mut names = db
            .list_collection_names()
            .filter(doc! {"name": {"$in": c.client.store().wake_collections()}})
            .await
            .expect("list the wake collections");
        names.sort();
        let mut wakes = Vec::new();
        for name in names {
            let docs: Vec<Document> = db
                .collection::<Document>(&name)
                .find(doc! {})
                .await
                .expect("find wakes")
                .try_collect()
                .await
                .expect("wakes");
            wakes.push((name, docs));
        }
        ServerState {
            exists,
            indexes,
            documents,
            wakes,
        }
    })
}

/// The wake collections of a test's lock collection, dropped with the guard (the test's
/// [`Coll`] drops the lock collection only).
pub struct Wakes<'a>(&'a Coll);

impl<'a> Wakes<'a> {
    /// Drops `c`'s wake collections at the end of the test, whoever created them.
    pub fn dropped(c: &'a Coll) -> Self {
        Wakes(c)
    }

    /// Creates every wake collection of `c` as a store does on first use (capped, with one
    /// document no store listens for), so that doctor's read-only check finds its own.
    pub fn created(c: &'a Coll) -> Self {
        let store = c.client.store();
        let db = store.client().database(&store.collection().namespace().db);
        c.block_on(async {
            for name in store.wake_collections() {
                db.create_collection(&name)
                    .capped(true)
                    .size(64 * 1024)
                    .await
                    .expect("create a wake collection");
                db.collection::<Document>(&name)
                    .insert_one(doc! {"s": ""})
                    .await
                    .expect("seed a wake collection");
            }
        });
        Wakes(c)
    }
}

impl Drop for Wakes<'_> {
    fn drop(&mut self) {
        let store = self.0.client.store();
        let db = store.client().database(&store.collection().namespace().db);
        self.0.block_on(async {
            for name in store.wake_collections() {
                let _ = db.collection::<Document>(&name).drop().await;
            }
        });
    }
}

/// Runs `doctor` and asserts it passes and leaves the server as it found it.
fn doctor_reads_only(c: &Coll) -> String {
    let before = server_state(c);
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}{}", text(&out.stderr));
    assert_eq!(
        server_state(c),
        before,
        "doctor changed the server:\n{report}"
    );
    report
}

#[test]
fn doctor_without_fix_creates_no_missing_collection() {
    let c = Coll::missing();
    let report = doctor_reads_only(&c);
    assert!(report.contains("does not exist yet"), "{report}");
    for expected in [
        "ok   no cursor is open on the wakes of",
        "ok   no change stream is open on",
        "does not exist yet, which is fine: it is created on first use",
    ] {
        assert!(
            report.contains(expected),
            "{expected:?} missing from:\n{report}"
        );
    }
}

#[test]
fn doctor_without_fix_leaves_a_never_used_collection_without_its_index() {
    let c = Coll::missing();
    let ns = c.client.store().collection().namespace();
    let db = c.client.store().client().database(&ns.db);
    c.block_on(db.create_collection(&ns.coll).into_future())
        .expect("create the collection");
    let report = doctor_reads_only(&c);
    assert!(report.contains("never used"), "{report}");
}

/// Against a collection in use, no write at all, not even one undone before doctor exits:
/// a change stream opened before doctor sees nothing before the marker written after it.
/// Its wake collections exist, so doctor's read-only check tails its own, and reads only.
#[test]
fn doctor_without_fix_writes_nothing_to_a_collection_in_use() {
    let c = Coll::new();
    let _wakes = Wakes::created(&c);
    c.block_on(
        c.client
            .lock("held", generate_lock_id(), &LockOptions::new()),
    )
    .expect("lock");
    let coll = c.client.store().collection();
    let mut events = c.block_on(coll.watch().into_future()).expect("watch");
    let report = doctor_reads_only(&c);
    assert!(
        report.contains("has a unique index on `resource`"),
        "{report}"
    );
    assert!(
        report.contains("ok   the wakes can be read here (a tailable cursor opened on"),
        "{report}"
    );
    // The test's own stream is the one open on the collection: it is worth a warning.
    assert!(
        report.contains("warn 1 change stream is open on")
            && report.contains("upgrade or stop them"),
        "{report}"
    );
    c.block_on(coll.insert_one(doc! {"marker": true}).into_future())
        .expect("insert the marker");
    let first = c
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), events.next()).await })
        .expect("an event within 20 s")
        .expect("an event")
        .expect("a change");
    assert!(
        first
            .full_document
            .as_ref()
            .is_some_and(|d| d.get_bool("marker") == Ok(true)),
        "doctor wrote to the collection: {first:?}\n{report}"
    );
}

/// A process with a fair waiter near the head of a line keeps one tailable cursor on its
/// wake collection: doctor counts it (and no change stream), and reads only.
#[test]
fn doctor_counts_the_cursors_of_waiting_processes() {
    let c = Coll::new();
    let _wakes = Wakes::dropped(&c);
    let holder = c.client.store();
    // Another process, as far as the server can tell: a store of its own (its own tag).
    let waiter = MongoStore::from_collection(holder.collection().clone());
    let options = LockOptions::exclusive(Duration::from_secs(60));
    let mut hints = c.block_on(async {
        let held = LockRequest::new("r", generate_lock_id().as_str(), &options).expect("request");
        holder.lock(&held).await.expect("lock");
        let ticket = Ticket::new(generate_lock_id(), Duration::from_secs(60)).expect("ticket");
        let asking = LockRequest::new("r", generate_lock_id().as_str(), &options)
            .expect("request")
            .fair(ticket);
        waiter.lock(&asking).await.expect_err("refused: it queues");
        let mut hints = waiter.hints().expect("the wakes can be read");
        let first = tokio::time::timeout(Duration::from_secs(20), hints.next())
            .await
            .expect("the cursor opens within 20 s");
        assert_eq!(first, Some(Hint::Missed), "a subscription starts so");
        hints
    });
    let report = doctor_reads_only(&c);
    for expected in [
        "ok   1 cursor is open on the wakes of",
        "ok   no change stream is open on",
    ] {
        assert!(
            report.contains(expected),
            "{expected:?} missing from:\n{report}"
        );
    }
    // Still listening when doctor finished.
    c.block_on(async {
        let more = tokio::time::timeout(Duration::from_millis(100), hints.next()).await;
        assert!(!matches!(more, Ok(None)), "the hints ended: {more:?}");
    });
}

/// Where the wakes cannot be read (here a fail point answers the doctor's `getMore` with
/// Unauthorized, as for a user without the `find` privilege on them), doctor warns that
/// waiters will only poll, from its read-only check and from its probe lock
/// (`--wakeups`); locking itself is fine, so it still passes.
#[test]
fn doctor_warns_when_the_wakes_cannot_be_read() {
    let c = Coll::new();
    // They exist, so that the read-only check's cursor stays open and sends a `getMore`.
    let _wakes = Wakes::created(&c);
    let app = format!("lockwright-doctor-{}", &generate_lock_id().as_str()[..12]);
    let uri = crate::support::mongodb_uri();
    let sep = if uri.contains('?') {
        "&"
    } else if uri.ends_with('/') {
        "?"
    } else {
        "/?"
    };
    let named = format!("{uri}{sep}appName={app}");
    let admin = c.client.store().client().database("admin");
    let fail = doc! {
        "configureFailPoint": "failCommand", "mode": "alwaysOn",
        "data": { "failCommands": ["getMore"], "errorCode": 13, "appName": &app },
    };
    c.block_on(admin.run_command(fail).into_future())
        .expect("configureFailPoint");
    let outs = [
        c.run(&["doctor", "--uri", &named]),
        c.run(&["doctor", "--wakeups", "--uri", &named]),
    ];
    let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
    c.block_on(admin.run_command(off).into_future())
        .expect("configureFailPoint off");
    for out in outs {
        let report = text(&out.stdout);
        assert_eq!(code(&out), 0, "a warning, not a failure: {report}");
        assert!(
            report.contains("warn the wakes cannot be read here (server error 13")
                && report.contains("waiting acquires will only poll"),
            "{report}"
        );
    }
}
