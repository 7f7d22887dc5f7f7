//! Grants of one resource against the bare upsert (the baseline): `baseline`, `xlock`,
//! `xlock_unlock`, `slock_at_limit` and `slock_refused_full`, and the stores and
//! collections every single-resource benchmark shares.

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use lockwright_engine::Access;
use lockwright_engine::{Error, LockRequest, LockStatus, LockStore, SharedLimit};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::request;
use mongodb::bson::{Document, doc};
use mongodb::options::ReturnDocument;
use mongodb::{Client, Collection};

use crate::harness::{Bench, Row, fresh_id};

/// The single-resource paths' set-up: a store on the monitored client and the collection
/// it shares with the baseline, and the same two on a client without command monitoring,
/// for the measurements interleaved with the baseline.
pub struct Single<'a> {
    /// The benches' runtime, monitor and mode.
    pub bench: &'a Bench<'a>,
    /// The store on the monitored client.
    pub latency: MongoStore,
    /// Its collection, where the baseline's document lives too.
    pub coll: Collection<Document>,
    /// The same collection on the client without command monitoring.
    pub plain_coll: Collection<Document>,
    /// A store on `plain_coll`.
    pub plain: MongoStore,
    /// Rounds of each interleaved measurement.
    pub paired_rounds: usize,
}

impl<'a> Single<'a> {
    /// The set-up around `latency` (already used by the baseline), with `plain_client` for
    /// the interleaved measurements.
    pub fn new(bench: &'a Bench<'a>, latency: MongoStore, plain_client: &Client) -> Self {
        let coll = latency.collection().clone();
        let plain_coll = plain_client
            .database(&coll.namespace().db)
            .collection::<Document>(&coll.namespace().coll);
        let plain = MongoStore::from_collection(plain_coll.clone());
        Single {
            bench,
            latency,
            coll,
            plain_coll,
            plain,
            paired_rounds: bench.mode.pick(3, 300, 1_000),
        }
    }

    /// The baseline on the client without command monitoring.
    pub async fn plain_baseline(&self) -> Option<Document> {
        bump_baseline(&self.plain_coll).await
    }

    /// A grant of a fresh lock on `resource` by `grant`, measured twice: interleaved with
    /// the baseline on the client without command monitoring (the medians and their
    /// ratio), then by criterion on the monitored client (latency and round trips). Each
    /// grant is released, untimed.
    fn grant_vs_baseline(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        row: Row,
        resource: &str,
        grant: impl AsyncFn(&MongoStore, &LockRequest) -> Result<LockStatus, Error>,
    ) {
        let prepare = async |seq| request(resource, &fresh_id(seq), None);
        self.bench.paired(
            &row.id(),
            self.paired_rounds,
            async || self.plain_baseline().await,
            prepare,
            async |req: &LockRequest| grant(&self.plain, req).await,
            async |req: LockRequest, _| self.plain_release(req).await,
        );
        self.bench.run(
            group,
            row,
            prepare,
            async |req: &LockRequest| grant(&self.latency, req).await,
            async |req: LockRequest, _| self.release(req).await,
            |r| assert!(r.is_ok(), "{r:?}"),
        );
    }

    /// Releases the group of `req` through the monitored store.
    pub async fn release(&self, req: LockRequest) {
        self.latency.unlock(&req.lock_id).await.unwrap();
    }

    /// Releases the group of `req` through the plain store.
    pub async fn plain_release(&self, req: LockRequest) {
        self.plain.unlock(&req.lock_id).await.unwrap();
    }
}

/// The baseline: a bare `find_one_and_update` upsert of one small document on `coll`.
pub async fn bump_baseline(coll: &Collection<Document>) -> Option<Document> {
    upsert(coll, "baseline", doc! { "$inc": { "n": 1_i64 } }).await
}

/// The baseline's command: a `find_one_and_update` upsert of `update` to the small document
/// of `resource`, returning the document after it.
pub async fn upsert(
    coll: &Collection<Document>,
    resource: &str,
    update: Document,
) -> Option<Document> {
    coll.find_one_and_update(doc! { "resource": resource }, update)
        .upsert(true)
        .return_document(ReturnDocument::After)
        .await
        .unwrap()
}

/// The shared limit of the slock benchmarks.
pub fn limit() -> Option<SharedLimit> {
    Some(SharedLimit::new(4).unwrap())
}

/// `baseline`: the bare upsert on `coll`, the yardstick of every grant.
pub fn baseline(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    coll: &Collection<Document>,
) {
    bench.measure(
        group,
        Row::new("baseline"),
        async || bump_baseline(coll).await,
        |d| assert!(d.is_some()),
    );
}

/// `xlock` (also interleaved with the baseline) and `xlock_unlock`.
pub fn xlock(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    s.grant_vs_baseline(group, Row::new("xlock"), "x", async |store, req| {
        store.lock(req).await
    });
    s.bench.run(
        group,
        Row::new("xlock_unlock"),
        async |seq| request("xu", &fresh_id(seq), None),
        async |req| {
            s.latency.lock(req).await.unwrap();
            s.latency.unlock(&req.lock_id).await
        },
        async |_, _| (),
        |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(1)),
    );
}

/// `slock_at_limit` (also interleaved with the baseline): sets up the resource it fills,
/// `s-limit` (3 shared locks of 4), and the one [`slock_refused_full`] is refused on,
/// `s-full` (4 of 4).
pub fn slock_at_limit(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let (bench, latency, limit) = (s.bench, &s.latency, limit());
    bench.rt.block_on(async {
        for j in 0..3 {
            latency
                .lock(
                    &request("s-limit", &format!("holder-{j}"), None)
                        .with_access(Access::Shared(limit)),
                )
                .await
                .unwrap();
        }
        for j in 0..4 {
            latency
                .lock(
                    &request("s-full", &format!("holder-{j}"), None)
                        .with_access(Access::Shared(limit)),
                )
                .await
                .unwrap();
        }
    });
    // Limit 4, 3 held: the grant fills the resource.
    s.grant_vs_baseline(
        group,
        Row::new("slock_at_limit"),
        "s-limit",
        async |store, req| {
            store
                .lock(&req.clone().with_access(Access::Shared(limit)))
                .await
        },
    );
}

/// `slock_refused_full`: the same request on a resource already holding 4 of 4.
pub fn slock_refused_full(s: &Single<'_>, group: &mut BenchmarkGroup<'_, WallTime>) {
    let limit = limit();
    s.bench.run(
        group,
        Row::new("slock_refused_full"),
        async |seq| request("s-full", &fresh_id(seq), None),
        async |req| {
            s.latency
                .lock(&req.clone().with_access(Access::Shared(limit)))
                .await
        },
        async |_, _| (),
        |r| assert!(matches!(r, Err(Error::AlreadyLocked { .. })), "{r:?}"),
    );
}
