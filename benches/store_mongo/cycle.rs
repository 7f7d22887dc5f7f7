//! The one-lock cycle as a holder runs it (`acquire_release`, `acquire_renew_release`) and
//! the one-lock operations alone (`renew_one`, `unlock_one`).

use std::time::Duration;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright::DEFAULT_RENEW_MARGIN;
use lockwright_engine::{Error, LockRequest, LockStatus, LockStore, Ttl};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::request;

use crate::grants::Single;
use crate::harness::{Row, fresh_id};

/// The TTL of the one-lock cycle's grant and renewal.
fn cycle_ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

/// A grant, then (with `renew`) a renewal for that TTL, then the one-lock release of the
/// lock the grant returned: what a holder of one lock sends.
async fn one_lock_cycle(
    store: &MongoStore,
    req: &LockRequest,
    renew: Option<Ttl>,
) -> Result<Option<LockStatus>, Error> {
    let lock = store.lock(req).await?;
    if let Some(ttl) = renew {
        store
            .renew_one(&lock.renewal(ttl), DEFAULT_RENEW_MARGIN)
            .await?;
    }
    store.unlock_one(&lock.resource, &lock.lock_id).await
}

/// `acquire_release` and `acquire_renew_release`, each also interleaved with the baseline.
pub fn cycles(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    // The one-lock cycle as a holder runs it: a grant, then the one-lock release of the
    // lock it returned (and a renewal between), each also interleaved with the baseline.
    let cycle_ttl = cycle_ttl();
    // One lock (60 s TTL) on an existing free resource: xlock, (renew_one for the same TTL
    // with a 1 s margin,) then unlock_one of the returned lock.
    for (name, renew) in [("acquire_release", false), ("acquire_renew_release", true)] {
        let prepare = async |seq| request("c", &fresh_id(seq), Some(cycle_ttl.as_duration()));
        let row = Row::new(name);
        s.bench.paired(
            &row.id(),
            s.paired_rounds,
            async || s.plain_baseline().await,
            prepare,
            async |req: &LockRequest| {
                one_lock_cycle(&s.plain, req, renew.then_some(cycle_ttl)).await
            },
            async |_, _| (),
        );
        s.bench.run(
            group,
            row,
            prepare,
            async |req| one_lock_cycle(&s.latency, req, renew.then_some(cycle_ttl)).await,
            async |_, _| (),
            |r| assert!(matches!(r, Ok(Some(_))), "{r:?}"),
        );
    }
}

/// `renew_one` and `unlock_one`.
pub fn one_lock_operations(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, latency, cycle_ttl) = (s.bench, &s.latency, cycle_ttl());
    // The one-lock operations alone: renew_one of a held lock, unlock_one of a lock granted
    // (untimed) just before.
    let renewed = bench.rt.block_on(async {
        latency
            .lock(&request(
                "r-one",
                "renew-one",
                Some(cycle_ttl.as_duration()),
            ))
            .await
            .unwrap()
    });
    // A held lock, renewed for 60 s with a 1 s margin.
    bench.measure(
        group,
        Row::new("renew_one"),
        async || {
            latency
                .renew_one(&renewed.renewal(cycle_ttl), DEFAULT_RENEW_MARGIN)
                .await
        },
        |r| assert!(r.is_ok(), "{r:?}"),
    );
    // A lock granted (untimed) just before, released.
    bench.run(
        group,
        Row::new("unlock_one"),
        async |seq| {
            let req = request("u-one", &fresh_id(seq), Some(cycle_ttl.as_duration()));
            latency.lock(&req).await.unwrap()
        },
        async |lock| latency.unlock_one(&lock.resource, &lock.lock_id).await,
        async |_, _| (),
        |r| assert!(matches!(r, Ok(Some(_))), "{r:?}"),
    );
}
