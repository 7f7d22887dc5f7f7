//! With every member of the replica set down, each operation of the MongoDB store fails with
//! a `Backend` error within its documented bound (SEMANTICS.md, "Bounded failure"): a lock
//! operation within the server selection timeout plus `RETRY_WINDOW` in all, whatever its
//! steps (session, command, abort) wait for; `status` and `purge` within a selection timeout
//! per command they send.
//!
//! The set is a one-member replica set of its own (the test kit's fixture), killed with
//! SIGKILL after the locks are taken, and the client's `serverSelectionTimeoutMS` is 15 s, so
//! the bound is 25 s. It is asserted with a 5 s allowance for a loaded machine; without the
//! cap on the whole call, a group `unlock` or `renew` waited three selection timeouts (45 s).
#![cfg(feature = "mongo")]
// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright::Access;
use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use lockwright::store_mongo::RETRY_WINDOW;
use lockwright::{Client, Error, Filter, LockOptions, MongoStore, generate_lock_id};
use lockwright_testkit::replset::ReplSet;
use tokio::time::Instant;

/// The client's server selection timeout in this test: long enough that an operation
/// waiting out two or three of them (a session, a command, an abort) exceeds the bound.
const SELECTION: Duration = Duration::from_secs(15);
/// Allowance for a loaded machine on top of a documented bound.
const SLACK: Duration = Duration::from_secs(5);

type Outcome = (&'static str, Duration, Result<(), Error>);

async fn timed<T>(name: &'static str, op: impl Future<Output = Result<T, Error>>) -> Outcome {
    let started = Instant::now();
    // Far above the bound: a hanging operation fails the test instead of hanging it.
    let result = tokio::time::timeout(Duration::from_secs(300), op)
        .await
        .unwrap_or_else(|_| panic!("{name} did not return within 300 s"));
    (name, started.elapsed(), result.map(|_| ()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_fails_within_its_bound_with_every_member_down() {
    let set = ReplSet::start(1)
        .await
        .unwrap_or_else(|e| panic!("cannot start a replica set: {e}"));
    let uri = format!(
        "{}&serverSelectionTimeoutMS={}",
        set.uri(),
        SELECTION.as_millis()
    );
    let store = MongoStore::connect(&uri, "outage", "locks").await.unwrap();
    let client = Client::new(store);
    client.create_indexes().await.unwrap();
    let details = LockOptions::new().ttl(Duration::from_secs(60));
    let group = generate_lock_id();
    let held = client.lock("a", &group, &details).await.unwrap();
    client
        .lock(
            "b",
            &group,
            &details.clone().access(Access::shared(Some(3)).unwrap()),
        )
        .await
        .unwrap();

    set.kill(0).await.unwrap();

    let other = generate_lock_id();
    let outcomes: Vec<Outcome> = join_all([
        Box::pin(timed("xlock", client.lock("c", &other, &details)))
            as std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>,
        Box::pin(timed(
            "slock",
            client.lock("c", &other, &details.clone().access(Access::Shared(None))),
        )),
        Box::pin(timed("unlock", client.unlock(&group))),
        Box::pin(timed("unlock_one", client.unlock_one(&held))),
        Box::pin(timed(
            "renew",
            client.renew(&group, Duration::from_secs(60)),
        )),
        Box::pin(timed(
            "renew_one",
            client.renew_one(&held, Duration::from_secs(60)),
        )),
        Box::pin(timed("status", client.status(&Filter::new()))),
        Box::pin(timed("purge", client.purge())),
        Box::pin(timed("create_indexes", client.create_indexes())),
    ])
    .await;

    let lock_bound = SELECTION + RETRY_WINDOW + SLACK;
    for (name, took, result) in &outcomes {
        eprintln!("{name}: {took:?}: {result:?}");
        assert!(
            matches!(result, Err(Error::Backend { .. })),
            "{name} must fail with Backend, not {result:?}"
        );
        assert!(
            *took <= lock_bound,
            "{name} took {took:?}, over the selection timeout plus RETRY_WINDOW ({lock_bound:?} \
             with the allowance)"
        );
    }
}
