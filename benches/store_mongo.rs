//! The MongoDB store on a real server (`MONGODB_URI`; `scripts/bench` starts a throwaway
//! one): every path of the targets in benches/README.md, each next to the number of commands it sent.
//!
//! Commands are counted with the driver's command monitoring (every `CommandStarted` event
//! of the client), over the timed part of every iteration: the report shows commands per
//! operation, not a number worked out by reading the code. One monitored probe run before
//! each benchmark also keeps the commands themselves, and each one that reads or writes
//! documents is `explain`ed, so the report shows the winning plan of every query the store
//! sent.
//!
//! Data sets (one fresh collection each; all writes with majority write concern):
//! - `baseline`: a bare `find_one_and_update` upsert (`$inc` of a counter) on one document
//!   of the collection `xlock` and `slock` use; the yardstick for both.
//! - `xlock`: an exclusive grant on an existing, free resource; the lock is released
//!   outside the timing. `xlock_unlock` times both.
//! - `acquire_release` / `acquire_renew_release`: the one-lock cycle, a grant (60 s TTL)
//!   then `unlock_one` of the lock it returned (with a `renew_one` between); `renew_one`: a
//!   held lock renewed; `unlock_one`: a lock granted (untimed) before each iteration,
//!   released.
//! - `slock_at_limit`: a shared grant with limit 4 on a resource holding 3 shared locks (the
//!   grant fills it), released outside the timing; `slock_refused_full`: the same request
//!   on a resource already holding 4.
//! - `renew/K`: a group of K locks with a 10 minute TTL, taken through the store once.
//! - `unlock/K`: a group of K locks, inserted with `insert_many` before every iteration.
//! - `purge/N`: N expired groups of one lock among N live ones, inserted with `insert_many`
//!   before every iteration; the store runs on a manual clock so they are expired at once.
//! - `status/<filter>`: 100,000 locks (20,000 with `--quick`) inserted once with
//!   `insert_many`, read by a store on a manual clock; each filter kind matches a few
//!   locks (the note says how many). `status_server_clock/<filter>` is the same query on
//!   the server's clock (resource, lock id, owner: one `aggregate` with the server's `now`;
//!   a TTL bound: `hello` for the time, then a `find`).
//! - `locker_renewals/N`: not a criterion benchmark. A `Locker` holds N guards (N = 1, 100,
//!   1,000; 1 and 10 in test mode) with a short TTL for a few renewal cycles; the commands
//!   the client starts meanwhile per renewal cycle (the Locker's renewals / N), and how late
//!   each renewal round reaches the store, are recorded for the report. Skipped when
//!   criterion's filter does not select its id.
//!
//! Diagnostics (rows whose note starts with "diagnostic"), to explain a missed target:
//! `baseline_noop` / `xlock_refused` (the same commands writing nothing, so no journal
//! wait), `baseline_w1` / `xlock_w1` (write concern w:1), `baseline_after_unlock` (the
//! baseline right after an unlock transaction, as `xlock` runs after its cleanup),
//! `baseline_twice` (two upserts back to back, as the acquire+release cycle's two writes),
//! and for renew of 100 locks the store's `update` alone outside a transaction
//! (`renew_update_alone`), the same change as one plain `$set` (`renew_update_set`) and a
//! `$set` of a field no index covers (`renew_update_unindexed`); slock's change (a fourth
//! shared lock appended) as a plain `$push` (`slock_push_modifier`) and as a one-stage update
//! pipeline (`slock_push_pipeline`); purge's expired documents deleted alone, with one
//! `delete_many` (`purge_delete_many`) and in one transaction per batch
//! (`purge_delete_batches`); `status_unmonitored` measures a status on a client without
//! command monitoring (what monitoring costs). `xlock`, `slock_at_limit`, the two one-lock
//! cycles (and the slock and two-write diagnostics) are also measured interleaved with the
//! baseline (the report's "interleaved" figures), which cancels drifts of the machine's load
//! between the two; those rounds run on a client without command monitoring.
//!
//! Inserted documents follow the store's schema; every set-up is checked by reading it back
//! through the store (the counts must match), so the store's own decoder vouches for them.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use lockwright::{Client as LockClient, DEFAULT_RENEW_MARGIN, LockOptions, Locker, LockerConfig};
use lockwright_benches::results::load_average;
use lockwright_benches::{Meta, Record, RunMode};
use lockwright_engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStatus, LockStore, ManualClock, Mode,
    Renewal, Resource, SharedLimit, Timestamp, Ttl,
};
use lockwright_store_mongo::test_support::{
    TEST_DATABASE, fresh_store_on, options, winning_stages,
};
use lockwright_store_mongo::{DEFAULT_PURGE_BATCH, MongoStore};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{
    Acknowledgment, CollectionOptions, ReturnDocument, UpdateModifications, WriteConcern,
};
use mongodb::{Client, Collection, Database};
use regex::Regex;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

const GROUP: &str = "store_mongo";
/// The manual clock's instant for the purge and status data sets.
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
const FENCES_PER_MS: i64 = 1024;

/// Every command the client starts is counted; during a probe it is also kept; during a
/// timed part its round-trip time is added up by command name.
#[derive(Default)]
struct Monitor {
    started: AtomicU64,
    capturing: AtomicBool,
    captured: Mutex<Vec<(String, Document)>>,
    timing: AtomicBool,
    times: Mutex<BTreeMap<String, Duration>>,
}

impl Monitor {
    fn count(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    fn on_event(&self, event: CommandEvent) {
        let (name, took) = match event {
            CommandEvent::Started(started) => {
                self.started.fetch_add(1, Ordering::SeqCst);
                if self.capturing.load(Ordering::SeqCst) {
                    let mut kept = self.captured.lock().unwrap();
                    kept.push((started.command_name, started.command));
                }
                return;
            }
            CommandEvent::Succeeded(done) => (done.command_name, done.duration),
            CommandEvent::Failed(failed) => (failed.command_name, failed.duration),
            _ => return,
        };
        if self.timing.load(Ordering::SeqCst) {
            *self.times.lock().unwrap().entry(name).or_default() += took;
        }
    }

    /// The round-trip times added up so far, by command name, and a fresh start.
    fn take_times(&self) -> BTreeMap<String, Duration> {
        std::mem::take(&mut *self.times.lock().unwrap())
    }

    /// Runs `f`, keeping every command it starts.
    async fn probe<T>(&self, f: impl Future<Output = T>) -> (T, Vec<(String, Document)>) {
        self.captured.lock().unwrap().clear();
        self.capturing.store(true, Ordering::SeqCst);
        let out = f.await;
        self.capturing.store(false, Ordering::SeqCst);
        (out, std::mem::take(&mut *self.captured.lock().unwrap()))
    }
}

/// Commands started and operations run inside the timed parts of one benchmark.
#[derive(Default)]
struct Tally {
    commands: AtomicU64,
    ops: AtomicU64,
}

impl Tally {
    fn per_op(&self) -> Option<f64> {
        let ops = self.ops.load(Ordering::SeqCst);
        (ops > 0).then(|| self.commands.load(Ordering::SeqCst) as f64 / ops as f64)
    }
}

/// The commands a probe run sent, and the plans of those that touch documents.
type Probe = (Vec<(String, Document)>, Vec<String>);

/// A unique number per iteration across the whole run (for fresh lock ids).
static SEQ: AtomicU64 = AtomicU64::new(0);

struct Bench<'a> {
    rt: &'a Runtime,
    monitor: &'a Monitor,
    db: Database,
    mode: RunMode,
}

impl Bench<'_> {
    /// Benchmarks `op`: each iteration runs `prepare` (untimed), `op` (timed; its commands
    /// counted and their round trips added up) and `cleanup` (untimed). Before its first
    /// sample a probe iteration keeps the commands `op` sends and explains them; `check`
    /// looks at the probe's result (the set-up is what the bench assumes). Returns the
    /// probe's commands, or `None` when criterion's filter skipped the benchmark.
    #[allow(clippy::too_many_arguments)]
    fn run<I, T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        mut record: Record,
        id: BenchmarkId,
        prepare: impl AsyncFn(u64) -> I,
        op: impl AsyncFn(&I) -> T,
        cleanup: impl AsyncFn(I, T),
        check: impl Fn(&T),
    ) -> Option<Vec<(String, Document)>> {
        let monitor = self.monitor;
        let probed: RefCell<Option<Probe>> = RefCell::new(None);
        let tally = Tally::default();
        let (prepare, op, cleanup, tally_ref) = (&prepare, &op, &cleanup, &tally);
        group.throughput(Throughput::Elements(record.elements));
        group.bench_function(id, |b| {
            if probed.borrow().is_none() {
                let probe = self.rt.block_on(async {
                    let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                    let (out, captured) = monitor.probe(op(&input)).await;
                    check(&out);
                    cleanup(input, out).await;
                    let mut plans = Vec::new();
                    for (name, command) in &captured {
                        if let Some(plan) = explain(&self.db, name, command).await {
                            plans.push(plan);
                        }
                    }
                    (captured, plans)
                });
                *probed.borrow_mut() = Some(probe);
                monitor.take_times();
            }
            b.to_async(self.rt).iter_custom(|iters| async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                    let before = monitor.count();
                    monitor.timing.store(true, Ordering::SeqCst);
                    let start = Instant::now();
                    let out = op(&input).await;
                    timed += start.elapsed();
                    monitor.timing.store(false, Ordering::SeqCst);
                    tally_ref
                        .commands
                        .fetch_add(monitor.count() - before, Ordering::SeqCst);
                    tally_ref.ops.fetch_add(1, Ordering::SeqCst);
                    cleanup(input, out).await;
                }
                timed
            });
        });
        let (captured, plans) = probed.into_inner()?;
        record.command_names = captured.iter().map(|(name, _)| name.clone()).collect();
        record.plans = plans;
        record.commands = tally.per_op();
        let ops = tally.ops.load(Ordering::SeqCst).max(1) as f64;
        record.command_time_us = monitor
            .take_times()
            .into_iter()
            .map(|(name, total)| (name, total.as_secs_f64() * 1e6 / ops))
            .collect();
        record.save(self.mode).unwrap();
        Some(captured)
    }

    /// `rounds` interleaved pairs, `base` then `op` (with its untimed `prepare` and
    /// `cleanup`), so both see the same machine: the medians of each, and their ratio. A
    /// second measurement of a ratio that criterion takes seconds apart.
    fn paired<I, T, B>(
        &self,
        rounds: usize,
        base: impl AsyncFn() -> B,
        prepare: impl AsyncFn(u64) -> I,
        op: impl AsyncFn(&I) -> T,
        cleanup: impl AsyncFn(I, T),
    ) -> BTreeMap<String, f64> {
        let (mut bases, mut ops) = (Vec::new(), Vec::new());
        self.rt.block_on(async {
            for _ in 0..rounds {
                let start = Instant::now();
                std::hint::black_box(base().await);
                bases.push(start.elapsed());
                let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                let start = Instant::now();
                let out = op(&input).await;
                ops.push(start.elapsed());
                cleanup(input, out).await;
            }
        });
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
        };
        let (base_us, op_us) = (median(&mut bases), median(&mut ops));
        BTreeMap::from([
            ("paired_rounds".to_string(), rounds as f64),
            ("paired_baseline_us".to_string(), base_us),
            ("paired_us".to_string(), op_us),
            (
                "paired_ratio".to_string(),
                op_us / base_us.max(f64::MIN_POSITIVE),
            ),
        ])
    }
}

/// The winning plan of a captured command that reads or writes documents, as
/// `command: STAGE STAGE(index) ...`; `None` for other commands (`commitTransaction`, ...).
async fn explain(db: &Database, name: &str, command: &Document) -> Option<String> {
    let coll = command.get_str(name).ok()?;
    let mut inner = doc! { name: coll };
    let keep: &[&str] = match name {
        "find" => &["filter", "sort"],
        "aggregate" => &["pipeline"],
        "update" => &["updates"],
        "delete" => &["deletes"],
        "findAndModify" => &["query", "update", "upsert", "sort", "new"],
        _ => return None,
    };
    for key in keep {
        if let Some(v) = command.get(*key) {
            inner.insert(*key, v.clone());
        }
    }
    if name == "aggregate" {
        inner.insert("cursor", Document::new());
    }
    let explained = db
        .run_command(doc! { "explain": inner, "verbosity": "queryPlanner" })
        .await;
    Some(match explained {
        Ok(out) => format!("{name}: {}", plan_summary(&out)),
        Err(e) => format!("{name}: explain failed: {e}"),
    })
}

/// The stages of every winning plan in `explain` output, depth first, with index names.
fn plan_summary(explained: &Document) -> String {
    let mut out = winning_stages(explained);
    out.dedup();
    if out.is_empty() {
        "no winning plan in explain output".into()
    } else {
        out.join(" ")
    }
}

fn request(resource: &str, lock_id: &str, ttl: Option<Duration>) -> LockRequest {
    let mut details = LockDetails::new();
    details.ttl = ttl;
    LockRequest::new(resource, lock_id, &details).unwrap()
}

fn date(t: Timestamp) -> Bson {
    Bson::DateTime(DateTime::from_millis(i64::try_from(t.as_millis()).unwrap()))
}

fn opt_date(t: Option<Timestamp>) -> Bson {
    t.map_or(Bson::Null, date)
}

/// One lock as the store's schema keeps it.
fn lock_fields(
    lock_id: &str,
    owner: &str,
    created: Timestamp,
    expires: Option<Timestamp>,
) -> Document {
    doc! {
        "lockId": lock_id, "owner": owner, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": date(created), "renewedAt": Bson::Null, "expiresAt": opt_date(expires),
        "acquired": true, "fence": fence_at(created),
    }
}

/// The fence a grant at `t` gets on a fresh resource (the floor `t_ms * 1024`).
fn fence_at(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap() * FENCES_PER_MS
}

fn empty_exclusive() -> Document {
    doc! {
        "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": Bson::Null, "renewedAt": Bson::Null, "expiresAt": Bson::Null,
        "acquired": false, "fence": Bson::Null,
    }
}

/// A resource document holding one exclusive or one shared lock.
fn resource_doc(
    resource: &str,
    mode: Mode,
    lock_id: &str,
    owner: &str,
    created: Timestamp,
    expires: Option<Timestamp>,
) -> Document {
    let lock = lock_fields(lock_id, owner, created, expires);
    let (exclusive, shared) = match mode {
        Mode::Exclusive => (lock, doc! { "count": 0, "locks": [] }),
        Mode::Shared => (empty_exclusive(), doc! { "count": 1, "locks": [lock] }),
    };
    doc! {
        "resource": resource, "exclusive": exclusive, "shared": shared,
        "lastFence": fence_at(created), "lastGrant": ObjectId::new(),
    }
}

/// The baseline: a bare `find_one_and_update` upsert of one small document on `coll`.
async fn bump_baseline(coll: &Collection<Document>) -> Option<Document> {
    upsert(coll, "baseline", doc! { "$inc": { "n": 1_i64 } }).await
}

/// The baseline's command: a `find_one_and_update` upsert of `update` to the small document
/// of `resource`, returning the document after it.
async fn upsert(coll: &Collection<Document>, resource: &str, update: Document) -> Option<Document> {
    coll.find_one_and_update(doc! { "resource": resource }, update)
        .upsert(true)
        .return_document(ReturnDocument::After)
        .await
        .unwrap()
}

/// A grant, then (with `renew`) a renewal for that TTL, then the one-lock release of the
/// lock the grant returned: what a holder of one lock sends.
async fn one_lock_cycle(
    store: &MongoStore,
    req: &LockRequest,
    renew: Option<Ttl>,
) -> Result<Option<LockStatus>, Error> {
    let lock = store.xlock(req).await?;
    if let Some(ttl) = renew {
        store
            .renew_one(&lock.resource, &lock.lock_id, ttl, DEFAULT_RENEW_MARGIN)
            .await?;
    }
    store.unlock_one(&lock.resource, &lock.lock_id).await
}

/// An update appending a lock document to `shared.locks` (a slock diagnostic).
type Append = fn(Document) -> UpdateModifications;

/// The purge data set: `n` groups of one exclusive lock expired at `T0` - 1 s (resources
/// `eNNNNN`) among `n` live for an hour more (`lNNNNN`), all created at `T0` - 2 s.
fn purge_set(n: usize) -> Vec<Document> {
    let created = Timestamp::from_millis(T0.as_millis() - 2_000);
    let expired_at = Some(Timestamp::from_millis(T0.as_millis() - 1_000));
    let live_until = Some(T0.saturating_add(Duration::from_secs(3_600)));
    (0..n)
        .flat_map(|i| {
            [
                resource_doc(
                    &format!("e{i:05}"),
                    Mode::Exclusive,
                    &format!("ge{i:05}"),
                    "bench",
                    created,
                    expired_at,
                ),
                resource_doc(
                    &format!("l{i:05}"),
                    Mode::Exclusive,
                    &format!("gl{i:05}"),
                    "bench",
                    created,
                    live_until,
                ),
            ]
        })
        .collect()
}

/// Empties the store's collection and inserts `docs` (untimed set-up).
async fn refill(store: &MongoStore, docs: Vec<Document>) {
    let coll = store.collection();
    coll.delete_many(doc! {}).await.unwrap();
    if !docs.is_empty() {
        coll.insert_many(docs).await.unwrap();
    }
}

/// A store on a fresh collection whose set-up check (hello, listIndexes) has run, so that
/// it is not counted in any benchmark.
async fn ready_store(client: &Client, clock: Option<Arc<ManualClock>>) -> MongoStore {
    let store = fresh_store_on(client, clock).await;
    store
        .status(&Filter::new().resource("warm-up"))
        .await
        .unwrap();
    store
}

fn server_now() -> Timestamp {
    Timestamp::from_system_time(std::time::SystemTime::now()).unwrap()
}

fn store_mongo(c: &mut Criterion) {
    if std::env::var("MONGODB_URI").map_or(true, |u| u.is_empty()) {
        eprintln!(
            "store_mongo: MONGODB_URI is not set. These benchmarks need a MongoDB replica set: \
             run `scripts/bench` (it starts a throwaway mongod via scripts/mongod.sh), or \
             `scripts/mongod.sh run -- cargo bench -p lockwright-benches --bench store_mongo`, \
             or set MONGODB_URI to your own deployment."
        );
        std::process::exit(2);
    }
    let mode = RunMode::current();
    Meta::save("load average when store_mongo began", &load_average(), mode).unwrap();
    let ks: &[usize] = mode.pick(&[1, 10], &[1, 10, 100, 1_000], &[1, 10, 100, 1_000]);
    let ns: &[usize] = mode.pick(&[10, 100], &[100, 1_000, 10_000], &[100, 1_000, 10_000]);
    let status_n: usize = mode.pick(1_000, 20_000, 100_000);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let monitor = Arc::new(Monitor::default());
    let client = rt.block_on(async {
        let mut opts = options().await;
        let sink = Arc::clone(&monitor);
        opts.command_event_handler = Some(EventHandler::callback(move |e| sink.on_event(e)));
        Client::with_options(opts).unwrap()
    });
    let bench = Bench {
        rt: &rt,
        monitor: &monitor,
        db: client.database(TEST_DATABASE),
        mode,
    };
    rt.block_on(async {
        let info = bench.db.run_command(doc! { "buildInfo": 1 }).await.unwrap();
        let version = info.get_str("version").unwrap_or("unknown");
        let hello = bench.db.run_command(doc! { "hello": 1 }).await.unwrap();
        let set = hello.get_str("setName").unwrap_or("no replica set");
        let members = hello.get_array("hosts").map_or(0, Vec::len);
        Meta::save(
            "mongod",
            &format!(
                "MongoDB {version}, replica set {set} of {members} member(s), majority writes"
            ),
            mode,
        )
        .unwrap();
    });

    let mut group = c.benchmark_group(GROUP);
    let mut stores = Vec::new();

    // Single-resource paths, against the bare upsert on the same collection.
    let latency = rt.block_on(ready_store(&client, None));
    let coll = latency.collection().clone();
    let baseline = async || bump_baseline(&coll).await;
    bench.run(
        &mut group,
        Record::new(GROUP, "baseline", None, 1),
        BenchmarkId::from_parameter("baseline"),
        async |_| (),
        async |_| baseline().await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
    // The interleaved measurements run the same store and baseline on a client without
    // command monitoring: what a user's client does, and no event documents built for the
    // grant's larger command than for the baseline's.
    let plain_client = rt.block_on(async { Client::with_options(options().await).unwrap() });
    let plain_coll = plain_client
        .database(&coll.namespace().db)
        .collection::<Document>(&coll.namespace().coll);
    let plain = MongoStore::from_collection(plain_coll.clone());
    let plain_baseline = async || bump_baseline(&plain_coll).await;
    let plain_release = async |req: LockRequest, _| {
        plain.unlock(&req.lock_id).await.unwrap();
    };
    let fresh_id = |seq: u64| format!("b{seq}");
    let paired_rounds = mode.pick(3, 300, 1_000);
    let xlock_prepare = async |seq| request("x", &fresh_id(seq), None);
    let xlock_op = async |req: &LockRequest| latency.xlock(req).await;
    let release = async |req: LockRequest, _| {
        latency.unlock(&req.lock_id).await.unwrap();
    };
    let mut record = Record::new(GROUP, "xlock", None, 1);
    record.extra = bench.paired(
        paired_rounds,
        plain_baseline,
        xlock_prepare,
        async |req: &LockRequest| plain.xlock(req).await,
        plain_release,
    );
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("xlock"),
        xlock_prepare,
        xlock_op,
        release,
        |r| assert!(r.is_ok(), "{r:?}"),
    );
    bench.run(
        &mut group,
        Record::new(GROUP, "xlock_unlock", None, 1),
        BenchmarkId::from_parameter("xlock_unlock"),
        async |seq| request("xu", &fresh_id(seq), None),
        async |req| {
            latency.xlock(req).await.unwrap();
            latency.unlock(&req.lock_id).await
        },
        async |_, _| (),
        |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(1)),
    );
    // The one-lock cycle as a holder runs it: a grant, then the one-lock release of the
    // lock it returned (and a renewal between), each also interleaved with the baseline.
    let cycle_ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    for (name, renew, note) in [
        (
            "acquire_release",
            false,
            "xlock, then unlock_one of the returned lock",
        ),
        (
            "acquire_renew_release",
            true,
            "xlock, renew_one (same TTL, 1 s margin), then unlock_one",
        ),
    ] {
        let prepare = async |seq| request("c", &fresh_id(seq), Some(cycle_ttl.as_duration()));
        let mut record = Record::new(GROUP, name, None, 1);
        record.note = Some(format!(
            "one lock (60 s TTL) on an existing free resource: {note}"
        ));
        record.extra = bench.paired(
            paired_rounds,
            plain_baseline,
            prepare,
            async |req: &LockRequest| one_lock_cycle(&plain, req, renew.then_some(cycle_ttl)).await,
            async |_, _| (),
        );
        bench.run(
            &mut group,
            record,
            BenchmarkId::from_parameter(name),
            prepare,
            async |req| one_lock_cycle(&latency, req, renew.then_some(cycle_ttl)).await,
            async |_, _| (),
            |r| assert!(matches!(r, Ok(Some(_))), "{r:?}"),
        );
    }
    // What two writes back to back cost on this server, next to the cycle's two: the bare
    // upsert twice (each majority write waits for its own journal commit).
    let mut record = Record::new(GROUP, "baseline_twice", None, 1);
    record.note = Some(
        "diagnostic: the baseline twice back to back (two majority writes, as the \
         acquire+release cycle sends)"
            .into(),
    );
    let twice = async |on: &Collection<Document>| {
        bump_baseline(on).await;
        bump_baseline(on).await
    };
    record.extra = bench.paired(
        paired_rounds,
        plain_baseline,
        async |_| (),
        async |_: &()| twice(&plain_coll).await,
        async |_, _| (),
    );
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("baseline_twice"),
        async |_| (),
        async |_| twice(&coll).await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
    // The one-lock operations alone: renew_one of a held lock, unlock_one of a lock granted
    // (untimed) just before.
    let renewed = rt.block_on(async {
        latency
            .xlock(&request(
                "r-one",
                "renew-one",
                Some(cycle_ttl.as_duration()),
            ))
            .await
            .unwrap()
    });
    let mut record = Record::new(GROUP, "renew_one", None, 1);
    record.note = Some("a held lock, renewed for 60 s with a 1 s margin".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("renew_one"),
        async |_| (),
        async |_| {
            latency
                .renew_one(
                    &renewed.resource,
                    &renewed.lock_id,
                    cycle_ttl,
                    DEFAULT_RENEW_MARGIN,
                )
                .await
        },
        async |_, _| (),
        |r| assert!(r.is_ok(), "{r:?}"),
    );
    let mut record = Record::new(GROUP, "unlock_one", None, 1);
    record.note = Some("a lock granted (untimed) just before, released".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("unlock_one"),
        async |seq| {
            let req = request("u-one", &fresh_id(seq), Some(cycle_ttl.as_duration()));
            latency.xlock(&req).await.unwrap()
        },
        async |lock| latency.unlock_one(&lock.resource, &lock.lock_id).await,
        async |_, _| (),
        |r| assert!(matches!(r, Ok(Some(_))), "{r:?}"),
    );
    let limit = Some(SharedLimit::new(4).unwrap());
    rt.block_on(async {
        for j in 0..3 {
            latency
                .slock(&request("s-limit", &format!("holder-{j}"), None), limit)
                .await
                .unwrap();
        }
        for j in 0..4 {
            latency
                .slock(&request("s-full", &format!("holder-{j}"), None), limit)
                .await
                .unwrap();
        }
    });
    let slock_prepare = async |seq| request("s-limit", &fresh_id(seq), None);
    let slock_op = async |req: &LockRequest| latency.slock(req, limit).await;
    let mut record = Record::new(GROUP, "slock_at_limit", None, 1);
    record.note = Some("limit 4, 3 held: the grant fills the resource".into());
    record.extra = bench.paired(
        paired_rounds,
        plain_baseline,
        slock_prepare,
        async |req: &LockRequest| plain.slock(req, limit).await,
        plain_release,
    );
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("slock_at_limit"),
        slock_prepare,
        slock_op,
        release,
        |r| assert!(r.is_ok(), "{r:?}"),
    );
    // Where slock's time goes: the same change to a resource holding 3 shared locks (a
    // fourth appended, the count raised) as a plain `$push`, and as a one-stage update
    // pipeline, the form every grant evaluated on the server's clock must take.
    rt.block_on(async {
        for j in 0..3 {
            let holder = request("s-diag", &format!("holder-{j}"), None);
            latency.slock(&holder, None).await.unwrap();
        }
    });
    let appends: [(&str, &str, Append); 2] = [
        (
            "slock_push_modifier",
            "a $push of the lock and a $inc of the count",
            |lock| {
                UpdateModifications::Document(doc! {
                    "$push": { "shared.locks": lock },
                    "$inc": { "shared.count": 1 },
                })
            },
        ),
        (
            "slock_push_pipeline",
            "a one-stage update pipeline ($concatArrays, $add)",
            |lock| {
                UpdateModifications::Pipeline(vec![doc! { "$set": {
                    "shared.locks": { "$concatArrays": [ "$shared.locks", [ { "$literal": lock } ] ] },
                    "shared.count": { "$add": [ "$shared.count", 1 ] },
                } }])
            },
        ),
    ];
    for (name, how, update) in appends {
        let append = async |on: &Collection<Document>, lock_id: &String| {
            on.find_one_and_update(
                doc! { "resource": "s-diag" },
                update(lock_fields(lock_id, "bench", server_now(), None)),
            )
            .return_document(ReturnDocument::After)
            .await
            .unwrap()
        };
        let remove = async |lock_id: String, _| {
            coll.update_one(
                doc! { "resource": "s-diag" },
                doc! {
                    "$pull": { "shared.locks": { "lockId": lock_id } },
                    "$inc": { "shared.count": -1 },
                },
            )
            .await
            .unwrap();
        };
        let mut record = Record::new(GROUP, name, None, 1);
        record.note = Some(format!(
            "diagnostic: slock_at_limit's change to a resource holding 3 shared locks as {how}"
        ));
        record.extra = bench.paired(
            paired_rounds,
            plain_baseline,
            async |seq| fresh_id(seq),
            async |id: &String| append(&plain_coll, id).await,
            remove,
        );
        bench.run(
            &mut group,
            record,
            BenchmarkId::from_parameter(name),
            async |seq| fresh_id(seq),
            async |id: &String| append(&coll, id).await,
            remove,
            |d| {
                // The append landed: three holders and the new lock, counted.
                let shared = d.as_ref().unwrap().get_document("shared").unwrap();
                assert_eq!(shared.get_array("locks").unwrap().len(), 4, "{d:?}");
                assert_eq!(shared.get_i32("count").ok(), Some(4), "{d:?}");
            },
        );
    }
    let mut record = Record::new(GROUP, "baseline_after_unlock", None, 1);
    record.note = Some(
        "diagnostic: the baseline, each time right after an untimed xlock+unlock of another \
         resource (as xlock follows its own cleanup)"
            .into(),
    );
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("baseline_after_unlock"),
        async |seq| {
            let req = request("y", &fresh_id(seq), None);
            latency.xlock(&req).await.unwrap();
            latency.unlock(&req.lock_id).await.unwrap();
        },
        async |_| baseline().await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
    let mut record = Record::new(GROUP, "slock_refused_full", None, 1);
    record.note = Some("limit 4, 4 held: refused".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("slock_refused_full"),
        async |seq| request("s-full", &fresh_id(seq), None),
        async |req| latency.slock(req, limit).await,
        async |_, _| (),
        |r| assert!(matches!(r, Err(Error::AlreadyLocked { .. })), "{r:?}"),
    );

    // Diagnostics for the grant's ratio: the same commands without a write (so without the
    // wait for the journal that majority write concern implies), and with w:1.
    let mut record = Record::new(GROUP, "baseline_noop", None, 1);
    record.note =
        Some("diagnostic: the upsert sets a field to its value, so writes nothing".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("baseline_noop"),
        async |_| (),
        async |_| upsert(&coll, "baseline-noop", doc! { "$set": { "n": 0_i64 } }).await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
    rt.block_on(async {
        latency
            .xlock(&request("x-held", "holder", None))
            .await
            .unwrap();
    });
    let mut record = Record::new(GROUP, "xlock_refused", None, 1);
    record.note = Some("diagnostic: the resource is held, so the pipeline writes nothing".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("xlock_refused"),
        async |seq| request("x-held", &fresh_id(seq), None),
        async |req| latency.xlock(req).await,
        async |_, _| (),
        |r| assert!(matches!(r, Err(Error::AlreadyLocked { .. })), "{r:?}"),
    );
    let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
    let space = coll.namespace();
    let coll_w1 = client
        .database(&space.db)
        .collection_with_options::<Document>(
            &space.coll,
            CollectionOptions::builder().write_concern(w1).build(),
        );
    let latency_w1 = MongoStore::from_collection(coll_w1.clone());
    rt.block_on(async {
        latency_w1
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    let mut record = Record::new(GROUP, "baseline_w1", None, 1);
    record.note = Some("diagnostic: baseline with write concern w:1 (no journal wait)".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("baseline_w1"),
        async |_| (),
        async |_| bump_baseline(&coll_w1).await,
        async |_, _| (),
        |d| assert!(d.is_some()),
    );
    let mut record = Record::new(GROUP, "xlock_w1", None, 1);
    record.note = Some("diagnostic: xlock with write concern w:1 (no journal wait)".into());
    bench.run(
        &mut group,
        record,
        BenchmarkId::from_parameter("xlock_w1"),
        async |seq| request("x", &fresh_id(seq), None),
        async |req| latency_w1.xlock(req).await,
        async |req, _| {
            latency_w1.unlock(&req.lock_id).await.unwrap();
        },
        |r| assert!(r.is_ok(), "{r:?}"),
    );
    stores.push(latency);

    // Group operations of K locks.
    let renewing = rt.block_on(ready_store(&client, None));
    let diagnosed_k = ks.iter().copied().filter(|k| *k <= 100).max().unwrap_or(1);
    let ttl = Ttl::new(Duration::from_secs(600)).unwrap();
    for &k in ks {
        let lock_id = LockId::new(format!("renew-{k}")).unwrap();
        rt.block_on(async {
            for i in 0..k {
                let req = request(
                    &format!("renew-{k}/r{i}"),
                    lock_id.as_str(),
                    Some(ttl.as_duration()),
                );
                renewing.xlock(&req).await.unwrap();
            }
        });
        let mut record = Record::new(GROUP, "renew", Some(k.to_string()), k as u64);
        record.size = Some(k as u64);
        let sent = bench.run(
            &mut group,
            record,
            BenchmarkId::new("renew", k),
            async |_| (),
            async |_| renewing.renew(&lock_id, ttl, Duration::ZERO).await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(k)),
        );
        if k == diagnosed_k
            && let Some(sent) = sent
        {
            renew_update_diagnostics(&bench, &mut group, &renewing, &lock_id, k, &sent);
        }
    }
    stores.push(renewing);

    let unlocking = rt.block_on(ready_store(&client, None));
    for &k in ks {
        let lock_id = LockId::new(format!("unlock-{k}")).unwrap();
        let mut record = Record::new(GROUP, "unlock", Some(k.to_string()), k as u64);
        record.size = Some(k as u64);
        record.note = Some("the group is inserted again (insert_many) before each run".into());
        bench.run(
            &mut group,
            record,
            BenchmarkId::new("unlock", k),
            async |_| {
                let created = server_now();
                let docs = (0..k)
                    .map(|i| {
                        let resource = format!("unlock-{k}/r{i}");
                        resource_doc(
                            &resource,
                            Mode::Exclusive,
                            lock_id.as_str(),
                            "bench",
                            created,
                            None,
                        )
                    })
                    .collect();
                refill(&unlocking, docs).await;
            },
            async |_| unlocking.unlock(&lock_id).await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(k)),
        );
    }
    stores.push(unlocking);

    // Purge of N expired groups among N live ones, on a manual clock.
    let purging = rt.block_on(ready_store(&client, Some(Arc::new(ManualClock::new(T0)))));
    group.sample_size(10);
    for &n in ns {
        let batches = n.div_ceil(DEFAULT_PURGE_BATCH);
        let mut record = Record::new(GROUP, "purge", Some(n.to_string()), n as u64);
        record.size = Some(n as u64);
        record.extra.insert("batches".into(), batches as f64);
        record.note = Some(format!(
            "{n} expired groups among {n} live, {batches} batch(es) of at most {DEFAULT_PURGE_BATCH} groups"
        ));
        bench.run(
            &mut group,
            record,
            BenchmarkId::new("purge", n),
            async |_| refill(&purging, purge_set(n)).await,
            async |_| purging.purge().await,
            async |_, _| (),
            |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(n)),
        );
    }
    // What the server alone takes to delete the expired documents of the largest N: all
    // at once, and in transactions of one batch each as purge's batches do (no read, no
    // decision).
    let n = *ns.last().unwrap();
    let expired = doc! { "exclusive.expiresAt": { "$lte": date(T0) } };
    let mut record = Record::new(GROUP, "purge_delete_many", Some(n.to_string()), n as u64);
    record.size = Some(n as u64);
    record.note = Some(format!(
        "diagnostic: one delete_many of the {n} expired documents of purge/{n}, no transaction"
    ));
    bench.run(
        &mut group,
        record,
        BenchmarkId::new("purge_delete_many", n),
        async |_| refill(&purging, purge_set(n)).await,
        async |_| {
            purging
                .collection()
                .delete_many(expired.clone())
                .await
                .unwrap()
        },
        async |_, _| (),
        |r| assert_eq!(r.deleted_count, n as u64),
    );
    let mut record = Record::new(GROUP, "purge_delete_batches", Some(n.to_string()), n as u64);
    record.size = Some(n as u64);
    record.note = Some(format!(
        "diagnostic: the same deletes by resource name in {batches} transactions of \
         {DEFAULT_PURGE_BATCH}, one after another",
        batches = n.div_ceil(DEFAULT_PURGE_BATCH)
    ));
    let names: Vec<Bson> = (0..n).map(|i| Bson::String(format!("e{i:05}"))).collect();
    bench.run(
        &mut group,
        record,
        BenchmarkId::new("purge_delete_batches", n),
        async |_| refill(&purging, purge_set(n)).await,
        async |_| {
            let mut deleted = 0;
            for batch in names.chunks(DEFAULT_PURGE_BATCH) {
                let mut session = client.start_session().await.unwrap();
                // The store's purge commits with majority write concern; so does this.
                session
                    .start_transaction()
                    .write_concern(WriteConcern::majority())
                    .await
                    .unwrap();
                deleted += purging
                    .collection()
                    .delete_many(doc! { "resource": { "$in": batch } })
                    .session(&mut session)
                    .await
                    .unwrap()
                    .deleted_count;
                session.commit_transaction().await.unwrap();
            }
            deleted
        },
        async |_, _| (),
        |deleted| assert_eq!(*deleted, n as u64),
    );
    stores.push(purging);

    // Status with each filter kind over `status_n` locks, inserted once.
    let status_clock = Arc::new(ManualClock::new(T0));
    let reading = rt.block_on(ready_store(&client, Some(status_clock)));
    rt.block_on(populate_status(&reading, status_n));
    let n = status_n;
    let ms = |x: usize| Duration::from_millis(x as u64);
    let minus = |x: usize| Timestamp::from_millis(T0.as_millis() - x as u64);
    let filters: Vec<(&str, Filter, usize)> = vec![
        (
            "resource",
            Filter::new().resource(format!("s{:06}", n / 2)),
            1,
        ),
        (
            "lock_id",
            Filter::new().lock_id(format!("g{:05}", n / 20)),
            10,
        ),
        ("owner", Filter::new().owner("owner-7"), n / 1_000),
        ("mode", Filter::new().mode(Mode::Shared), n / 100),
        (
            "created_before",
            Filter::new().created_before(minus(n - 100)),
            100,
        ),
        ("created_after", Filter::new().created_after(minus(100)), 99),
        (
            "ttl_lt",
            Filter::new().ttl_lt(Duration::from_secs(60) + ms(100)),
            100,
        ),
        (
            "ttl_gte",
            Filter::new().ttl_gte(Duration::from_secs(60) + ms(n - 100)),
            100,
        ),
    ];
    for (kind, filter, matches) in &filters {
        let mut record = Record::new(GROUP, "status", Some((*kind).to_string()), 1);
        record.note = Some(format!("{matches} of {n} locks match"));
        bench.run(
            &mut group,
            record,
            BenchmarkId::new("status", kind),
            async |_| (),
            async |_| reading.status(filter).await,
            async |_, _| (),
            |r| {
                assert_eq!(
                    r.as_ref().map(Vec::len).ok(),
                    Some(*matches),
                    "status by {kind}"
                )
            },
        );
    }
    // The same collection on the server's clock, as a deployment reads it: one aggregation
    // returning the documents with the server's `now`; a TTL bound asks the server's time
    // first (`hello`) so that the query (a `find`) can use the expiry indexes.
    let on_server_clock = MongoStore::from_collection(reading.collection().clone());
    rt.block_on(async {
        on_server_clock
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    for (kind, filter, matches) in filters
        .iter()
        .filter(|(kind, _, _)| ["resource", "lock_id", "owner", "ttl_lt"].contains(kind))
    {
        let ttl_bound = kind.starts_with("ttl");
        let mut record = Record::new(GROUP, "status_server_clock", Some((*kind).to_string()), 1);
        record.note = Some(if ttl_bound {
            // The data set's expiry times are set for the manual clock's instant `T0`.
            "the server's clock; a TTL bound, so the server's time is asked first; what \
             matches depends on the server's time (not checked)"
                .into()
        } else {
            format!("{matches} of {n} locks match; the server's clock")
        });
        bench.run(
            &mut group,
            record,
            BenchmarkId::new("status_server_clock", kind),
            async |_| (),
            async |_| on_server_clock.status(filter).await,
            async |_, _| (),
            |r| {
                if ttl_bound {
                    assert!(r.is_ok(), "{r:?}");
                } else {
                    assert_eq!(
                        r.as_ref().map(Vec::len).ok(),
                        Some(*matches),
                        "status by {kind} on the server's clock"
                    );
                }
            },
        );
    }
    // The same status on a client without command monitoring: what the event handler
    // itself costs (the driver builds a document of every command and reply for it).
    let space = reading.collection().namespace();
    let unmonitored =
        MongoStore::from_collection(plain_client.database(&space.db).collection(&space.coll))
            .with_clock(Arc::new(ManualClock::new(T0)));
    rt.block_on(async {
        unmonitored
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    let (_, by_ttl, matches) = &filters[6];
    let mut record = Record::new(GROUP, "status_unmonitored", Some("ttl_lt".into()), 1);
    record.note = Some(format!(
        "diagnostic: status/ttl_lt on a client without command monitoring; {matches} of {n} locks match"
    ));
    group.throughput(Throughput::Elements(1));
    let mut ran = false;
    group.bench_function(BenchmarkId::new("status_unmonitored", "ttl_lt"), |b| {
        ran = true;
        b.to_async(&rt).iter(|| async {
            let found = unmonitored.status(by_ttl).await.unwrap();
            assert_eq!(found.len(), *matches);
            found
        });
    });
    if ran {
        record.save(mode).unwrap();
    }
    stores.push(reading);
    group.finish();

    // A Locker holding N guards on MongoDB: store commands per renewal cycle, and how late
    // each renewal round reaches the store. Not a criterion benchmark: one measurement per
    // N over a few renewal cycles, recorded for the report.
    let selected = Selected::from_args();
    let holding = mode.pick(
        Hold {
            ttl: Duration::from_secs(1),
            cycles: 1,
            settle: false,
        },
        Hold {
            ttl: Duration::from_secs(2),
            cycles: 3,
            settle: true,
        },
        Hold {
            ttl: Duration::from_secs(2),
            cycles: 5,
            settle: true,
        },
    );
    let guard_counts: &[usize] = mode.pick(&[1, 10], &[1, 100, 1_000], &[1, 100, 1_000]);
    for &n in guard_counts {
        let mut record = Record::new(GROUP, "locker_renewals", Some(n.to_string()), n as u64);
        record.size = Some(n as u64);
        if !selected.selects(&record.id()) {
            continue;
        }
        let id = record.id();
        if mode == RunMode::Test {
            println!("Testing {id}");
        }
        let store = rt.block_on(ready_store(&client, None));
        let record = rt.block_on(hold_guards(&bench, store, record, n, &holding));
        let x = |k: &str| record.extra.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "{id}: {:.2} commands per renewal cycle over {:.1} cycles ({} rounds of {:.0} locks); \
             renewal lag median {:.1} ms, max {:.1} ms; {} of {n} guards held",
            record.commands.unwrap_or(f64::NAN),
            x("cycles"),
            x("rounds"),
            x("locks_per_round"),
            x("lag_median_ms"),
            x("lag_max_ms"),
            x("held_at_end"),
        );
        if mode == RunMode::Test {
            println!("Success");
        }
        record.save(mode).unwrap();
    }

    rt.block_on(async {
        for store in &stores {
            // Best effort: a leftover collection in the test database harms nothing.
            let _ = store.collection().drop().await;
        }
        client.shutdown().await;
        plain_client.shutdown().await;
    });
}

/// Where renew's time per lock goes: the `update` command the store sent for a group of
/// `k`, sent again alone (no transaction, same write concern; its dates moved on each time
/// so every run writes), next to the same change made with one `$set`, and with a `$set` of
/// one field no index covers.
fn renew_update_diagnostics(
    bench: &Bench<'_>,
    group: &mut BenchmarkGroup<'_, WallTime>,
    store: &MongoStore,
    lock_id: &LockId,
    k: usize,
    sent: &[(String, Document)],
) {
    let Some(updates) = sent
        .iter()
        .find(|(name, _)| name == "update")
        .and_then(|(_, c)| c.get("updates"))
        .cloned()
    else {
        panic!("renew sent no update: {sent:?}");
    };
    let coll = store.collection();
    let db = bench.db.client().database(&coll.namespace().db);
    let mut record = Record::new(GROUP, "renew_update_alone", Some(k.to_string()), k as u64);
    record.size = Some(k as u64);
    record.note = Some(format!(
        "diagnostic: renew's update command for {k} locks alone, outside a transaction"
    ));
    bench.run(
        group,
        record,
        BenchmarkId::new("renew_update_alone", k),
        async |seq| {
            let mut u = updates.clone();
            shift_dates(&mut u, seq);
            u
        },
        async |u| {
            // A command run by hand takes no write concern from the collection: say it.
            db.run_command(doc! {
                "update": coll.name(),
                "updates": u.clone(),
                "writeConcern": { "w": "majority" },
            })
            .await
            .unwrap()
        },
        async |_, _| (),
        |reply| assert_eq!(reply.get_i32("nModified").ok(), Some(k as i32), "{reply:?}"),
    );
    let mut record = Record::new(GROUP, "renew_update_set", Some(k.to_string()), k as u64);
    record.size = Some(k as u64);
    record.note = Some(format!(
        "diagnostic: the same change for {k} exclusive locks as a plain $set of two fields"
    ));
    let base = server_now();
    bench.run(
        group,
        record,
        BenchmarkId::new("renew_update_set", k),
        async |seq| Timestamp::from_millis(base.as_millis() + seq),
        async |now| {
            let expires = now.saturating_add(Duration::from_secs(600));
            coll.update_many(
                doc! { "exclusive.lockId": lock_id.as_str() },
                doc! { "$set": { "exclusive.expiresAt": date(expires), "exclusive.renewedAt": date(*now) } },
            )
            .await
            .unwrap()
        },
        async |_, _| (),
        |r| assert_eq!(r.modified_count, k as u64),
    );
    let mut record = Record::new(
        GROUP,
        "renew_update_unindexed",
        Some(k.to_string()),
        k as u64,
    );
    record.size = Some(k as u64);
    record.note = Some(format!(
        "diagnostic: a $set of one field no index covers (renewedAt) on the same {k} locks"
    ));
    bench.run(
        group,
        record,
        BenchmarkId::new("renew_update_unindexed", k),
        async |seq| Timestamp::from_millis(base.as_millis() + seq),
        async |now| {
            coll.update_many(
                doc! { "exclusive.lockId": lock_id.as_str() },
                doc! { "$set": { "exclusive.renewedAt": date(*now) } },
            )
            .await
            .unwrap()
        },
        async |_, _| (),
        |r| assert_eq!(r.modified_count, k as u64),
    );
}

/// Moves every date in `b` `ms` milliseconds on.
fn shift_dates(b: &mut Bson, ms: u64) {
    match b {
        Bson::DateTime(d) => {
            *d = DateTime::from_millis(d.timestamp_millis() + i64::try_from(ms).unwrap());
        }
        Bson::Document(d) => d.iter_mut().for_each(|(_, v)| shift_dates(v, ms)),
        Bson::Array(items) => items.iter_mut().for_each(|v| shift_dates(v, ms)),
        _ => {}
    }
}

/// `n` locks, one per resource `sNNNNNN`: groups of 10 (`gNNNNN`), owners `owner-0` to
/// `owner-999` in turn, every 100th lock shared, created 1 ms apart up to `T0`, all live
/// at `T0` with remaining TTLs of 60 s + i ms. Inserted once with `insert_many`.
async fn populate_status(store: &MongoStore, n: usize) {
    let t0 = T0.as_millis();
    let docs: Vec<Document> = (0..n)
        .map(|i| {
            let mode = if i % 100 == 0 {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            let created = Timestamp::from_millis(t0 - (n - i) as u64);
            let expires = Timestamp::from_millis(t0 + 60_000 + i as u64);
            resource_doc(
                &format!("s{i:06}"),
                mode,
                &format!("g{:05}", i / 10),
                &format!("owner-{}", i % 1_000),
                created,
                Some(expires),
            )
        })
        .collect();
    for chunk in docs.chunks(10_000) {
        store.collection().insert_many(chunk).await.unwrap();
    }
    let all = store.status(&Filter::new()).await.unwrap();
    assert_eq!(
        all.len(),
        n,
        "every inserted lock reads back through the store"
    );
}

/// Criterion's benchmark filter, read from the arguments as criterion reads them (the first
/// positional argument; a regex unless `--exact`), for the measurements criterion does not
/// run itself.
enum Selected {
    All,
    Nothing,
    Exact(String),
    Matching(Regex),
}

impl Selected {
    fn from_args() -> Self {
        // Criterion's options that take a value.
        const WITH_VALUE: [&str; 19] = [
            "-c",
            "--color",
            "-s",
            "--save-baseline",
            "-b",
            "--baseline",
            "--baseline-lenient",
            "--format",
            "--profile-time",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--output-format",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        if has("--list") || has("--ignored") {
            return Selected::Nothing;
        }
        let mut filter = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if WITH_VALUE.contains(&arg.as_str()) {
                rest.next();
            } else if !arg.starts_with('-') {
                filter = Some(arg.clone());
                break;
            }
        }
        match filter {
            None => Selected::All,
            Some(f) if has("--exact") => Selected::Exact(f),
            Some(f) => Selected::Matching(
                Regex::new(&f).unwrap_or_else(|e| panic!("filter {f:?} is not a regex: {e}")),
            ),
        }
    }

    fn selects(&self, id: &str) -> bool {
        match self {
            Selected::All => true,
            Selected::Nothing => false,
            Selected::Exact(exact) => id == exact,
            Selected::Matching(re) => re.is_match(id),
        }
    }
}

/// The Locker's renewal schedule in the measurement: renew at half the TTL, and let every
/// renewal due within 0.3 of its TTL join one that is due, so that guards taken within that
/// window are renewed as one batch.
const RENEW_FRACTION: f64 = 0.5;
/// See [`RENEW_FRACTION`].
const BATCH_FRACTION: f64 = 0.3;
/// Acquires in flight at once while the guards are taken.
const ACQUIRES_IN_FLIGHT: usize = 100;

/// How long the guards are held: their TTL, the renewal cycles measured, and whether the
/// measurement waits first for a round that renews every guard together.
struct Hold {
    ttl: Duration,
    cycles: u64,
    settle: bool,
}

/// One renewal round as it reached the store.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// Locks in the request (1: `renew_one`; more: `renew_many`).
    locks: usize,
    /// Locks it renewed.
    renewed: usize,
    /// How long after the earliest of its locks was due it reached the store, in ms
    /// (negative: early).
    lag_ms: f64,
    /// The store call's duration.
    took: Duration,
}

#[derive(Default)]
struct RenewLog {
    /// When each lock's grant or last successful renewal reached the store.
    sent: HashMap<Resource, Instant>,
    rounds: Vec<Round>,
}

/// The store under the measured Locker, noting when each grant and renewal reaches it. A
/// lock is due for renewal at `sent + TTL x renew_fraction`, `sent` being when its grant or
/// last successful renewal reached the store (the Locker counts from when it sent the
/// request, a few µs earlier); a round's lag is how long after the earliest due lock in it
/// the round reached the store.
struct Watched {
    inner: MongoStore,
    log: Mutex<RenewLog>,
}

impl Watched {
    /// The instant a round reaches the store, and its lag.
    fn begin<'a>(&self, locks: impl Iterator<Item = (&'a Resource, Ttl)>) -> (Instant, f64) {
        let at = Instant::now();
        let log = self.log.lock().unwrap();
        let due = locks
            .filter_map(|(r, ttl)| {
                Some(*log.sent.get(r)? + ttl.as_duration().mul_f64(RENEW_FRACTION))
            })
            .min();
        let lag_ms = due.map_or(0.0, |due| {
            if at >= due {
                (at - due).as_secs_f64() * 1e3
            } else {
                -(due - at).as_secs_f64() * 1e3
            }
        });
        (at, lag_ms)
    }

    fn end<'a>(
        &self,
        at: Instant,
        lag_ms: f64,
        locks: usize,
        renewed: impl Iterator<Item = &'a Resource>,
    ) {
        let took = at.elapsed();
        let mut log = self.log.lock().unwrap();
        let mut count = 0;
        for r in renewed {
            log.sent.insert(r.clone(), at);
            count += 1;
        }
        log.rounds.push(Round {
            locks,
            renewed: count,
            lag_ms,
            took,
        });
    }

    fn rounds(&self) -> Vec<Round> {
        self.log.lock().unwrap().rounds.clone()
    }
}

impl LockStore for Watched {
    async fn xlock(&self, request: &LockRequest) -> Result<LockStatus, Error> {
        let at = Instant::now();
        let granted = self.inner.xlock(request).await;
        if granted.is_ok() {
            let mut log = self.log.lock().unwrap();
            log.sent.insert(request.resource.clone(), at);
        }
        granted
    }

    async fn slock(
        &self,
        request: &LockRequest,
        limit: Option<SharedLimit>,
    ) -> Result<LockStatus, Error> {
        self.inner.slock(request, limit).await
    }

    async fn unlock(&self, lock_id: &LockId) -> Result<Vec<LockStatus>, Error> {
        self.inner.unlock(lock_id).await
    }

    async fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<Vec<LockStatus>, Error> {
        self.inner.renew(lock_id, ttl, margin).await
    }

    async fn renew_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<LockStatus, Error> {
        let (at, lag_ms) = self.begin(std::iter::once((resource, ttl)));
        let renewed = self.inner.renew_one(resource, lock_id, ttl, margin).await;
        self.end(
            at,
            lag_ms,
            1,
            renewed.is_ok().then_some(resource).into_iter(),
        );
        renewed
    }

    async fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus, Error>>, Error> {
        let (at, lag_ms) = self.begin(locks.iter().map(|r| (&r.resource, r.ttl)));
        let outcomes = self.inner.renew_many(locks, margin).await;
        let renewed: Vec<&Resource> = match &outcomes {
            Ok(each) => locks
                .iter()
                .zip(each)
                .filter(|(_, outcome)| outcome.is_ok())
                .map(|(r, _)| &r.resource)
                .collect(),
            Err(_) => Vec::new(),
        };
        self.end(at, lag_ms, locks.len(), renewed.into_iter());
        outcomes
    }

    async fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> Result<Option<LockStatus>, Error> {
        self.inner.unlock_one(resource, lock_id).await
    }

    async fn status(&self, filter: &Filter) -> Result<Vec<LockStatus>, Error> {
        self.inner.status(filter).await
    }

    async fn purge(&self) -> Result<Vec<LockStatus>, Error> {
        self.inner.purge().await
    }

    async fn create_indexes(&self) -> Result<(), Error> {
        self.inner.create_indexes().await
    }
}

/// Polls `done` every 2 ms until it holds or `limit` has passed; whether it held.
async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A Locker on `store` (server clock, monitored client) takes `n` exclusive guards (up to
/// [`ACQUIRES_IN_FLIGHT`] acquires at once) with `hold.ttl`, then holds them for
/// `hold.cycles` renewal cycles: the commands the client starts meanwhile (only the
/// Locker's renewals run) over the cycles the Locker's `stats().renewals` went up by / n,
/// and each round's lag. With `hold.settle` the count starts once a round has renewed all
/// n together (guards taken over longer than the batch window join up in a later round).
async fn hold_guards(
    bench: &Bench<'_>,
    store: MongoStore,
    mut record: Record,
    n: usize,
    hold: &Hold,
) -> Record {
    let monitor = bench.monitor;
    let coll = store.collection().clone();
    let mut config = LockerConfig::default();
    config.renew_fraction = RENEW_FRACTION;
    config.renew_batch_fraction = BATCH_FRACTION;
    let watched = Watched {
        inner: store,
        log: Mutex::default(),
    };
    let client = LockClient::with_renew_margin(watched, hold.ttl / 10).unwrap();
    let locker = Locker::new(client, config).unwrap();
    let watched = locker.client().store();

    let start = Instant::now();
    let mut guards = Vec::with_capacity(n);
    let mut acquiring = JoinSet::new();
    for i in 0..n {
        if acquiring.len() >= ACQUIRES_IN_FLIGHT
            && let Some(done) = acquiring.join_next().await
        {
            guards.push(done.unwrap());
        }
        let (locker, ttl) = (locker.clone(), hold.ttl);
        acquiring.spawn(async move {
            locker
                .try_acquire(&format!("held/{i:04}"), &LockOptions::exclusive(ttl))
                .await
                .unwrap()
        });
    }
    while let Some(done) = acquiring.join_next().await {
        guards.push(done.unwrap());
    }
    let acquired_in = start.elapsed();

    let cycle = hold.ttl.mul_f64(RENEW_FRACTION);
    let settled = !hold.settle
        || wait_until(cycle * 6, || {
            watched.rounds().iter().any(|r| r.renewed == n)
        })
        .await;
    // The window: from here until the Locker has renewed every guard `cycles` times more.
    monitor.take_times();
    monitor.captured.lock().unwrap().clear();
    monitor.capturing.store(true, Ordering::SeqCst);
    monitor.timing.store(true, Ordering::SeqCst);
    let (commands_0, renewals_0, rounds_0) = (
        monitor.count(),
        locker.stats().renewals,
        watched.rounds().len(),
    );
    let wanted = renewals_0 + hold.cycles * n as u64;
    let limit = cycle * (u32::try_from(hold.cycles).unwrap() + 4);
    let complete = wait_until(limit, || locker.stats().renewals >= wanted).await;
    let (commands_1, stats) = (monitor.count(), locker.stats());
    monitor.capturing.store(false, Ordering::SeqCst);
    monitor.timing.store(false, Ordering::SeqCst);
    let captured = std::mem::take(&mut *monitor.captured.lock().unwrap());
    let times = monitor.take_times();
    let renewals = stats.renewals - renewals_0;
    assert!(
        renewals > 0,
        "no renewal of {n} guards within {limit:?} ({stats:?})"
    );
    let cycles = renewals as f64 / n as f64;
    let held = guards.iter().filter(|g| g.is_held()).count();
    let rounds: Vec<Round> = watched.rounds().split_off(rounds_0);

    record.commands = Some((commands_1 - commands_0) as f64 / cycles);
    record.command_names = captured.iter().map(|(name, _)| name.clone()).collect();
    record.command_time_us = times
        .into_iter()
        .map(|(name, total)| (name, total.as_secs_f64() * 1e6 / cycles))
        .collect();
    let mut explained = Vec::new();
    for (name, command) in &captured {
        if !explained.contains(name) {
            explained.push(name.clone());
            if let Some(plan) = explain(&bench.db, name, command).await {
                record.plans.push(plan);
            }
        }
    }
    let lags: Vec<f64> = rounds.iter().map(|r| r.lag_ms).collect();
    let extra = [
        ("ttl_ms", hold.ttl.as_secs_f64() * 1e3),
        ("renew_fraction", RENEW_FRACTION),
        ("batch_fraction", BATCH_FRACTION),
        ("acquire_ms", acquired_in.as_secs_f64() * 1e3),
        ("settled", f64::from(u8::from(settled))),
        ("complete", f64::from(u8::from(complete))),
        ("renewals", renewals as f64),
        ("cycles", cycles),
        ("rounds", rounds.len() as f64),
        (
            "locks_per_round",
            rounds.iter().map(|r| r.locks).sum::<usize>() as f64 / rounds.len().max(1) as f64,
        ),
        ("lag_median_ms", median_of(lags.clone())),
        ("lag_max_ms", lags.iter().copied().fold(f64::MIN, f64::max)),
        (
            "round_median_ms",
            median_of(rounds.iter().map(|r| r.took.as_secs_f64() * 1e3).collect()),
        ),
        ("renew_failures", stats.renew_failures as f64),
        ("lost", stats.lost as f64),
        ("held_at_end", held as f64),
    ];
    record.extra = extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    record.custom = true;
    record.note = Some(format!(
        "a Locker holding {n} exclusive guard(s), TTL {:?}, renew_fraction {RENEW_FRACTION}, \
         renew_batch_fraction {BATCH_FRACTION}; commands per renewal cycle",
        hold.ttl
    ));

    let mut releasing = JoinSet::new();
    for guard in guards {
        releasing.spawn(async move { guard.release().await });
    }
    while let Some(released) = releasing.join_next().await {
        released.unwrap().unwrap();
    }
    locker.shutdown();
    // Best effort: a leftover collection in the test database harms nothing.
    let _ = coll.drop().await;
    record
}

fn main() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    store_mongo(&mut criterion);
    criterion.final_summary();
}
