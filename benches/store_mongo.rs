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
//! - `slock_at_limit`: a shared grant with limit 4 on a resource holding 3 shared locks (the
//!   grant fills it), released outside the timing; `slock_refused_full`: the same request
//!   on a resource already holding 4.
//! - `renew/K`: a group of K locks with a 10 minute TTL, taken through the store once.
//! - `unlock/K`: a group of K locks, inserted with `insert_many` before every iteration.
//! - `purge/N`: N expired groups of one lock among N live ones, inserted with `insert_many`
//!   before every iteration; the store runs on a manual clock so they are expired at once.
//! - `status/<filter>`: 100,000 locks (20,000 with `--quick`) inserted once with
//!   `insert_many`, read by a store on a manual clock; each filter kind matches a few
//!   locks (the note says how many). `status_server_clock` is the same query on the
//!   server's clock, which costs a `hello` for the time.
//!
//! Diagnostics (rows whose note starts with "diagnostic"), to explain a missed target:
//! `baseline_noop` / `xlock_refused` (the same commands writing nothing, so no journal
//! wait), `baseline_w1` / `xlock_w1` (write concern w:1), `baseline_after_unlock` (the
//! baseline right after an unlock transaction, as `xlock` runs after its cleanup), and for
//! renew of 100 locks the store's `update` alone outside a transaction
//! (`renew_update_alone`), the same change as one plain `$set` (`renew_update_set`) and a
//! `$set` of a field no index covers (`renew_update_unindexed`); slock's change (a fourth
//! shared lock appended) as a plain `$push` (`slock_push_modifier`) and as a one-stage update
//! pipeline (`slock_push_pipeline`); purge's expired documents deleted alone, with one
//! `delete_many` (`purge_delete_many`) and in one transaction per batch
//! (`purge_delete_batches`); `status_unmonitored`
//! measures a status on a client without command monitoring (what monitoring costs). `xlock` and
//! `slock_at_limit` (and the slock diagnostics) are also measured interleaved with the
//! baseline (the report's "interleaved" figures), which cancels drifts of the machine's load
//! between the two; those rounds run on a client without command monitoring.
//!
//! Inserted documents follow the store's schema; every set-up is checked by reading it back
//! through the store (the counts must match), so the store's own decoder vouches for them.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use lockwright_benches::results::load_average;
use lockwright_benches::{Meta, Record, RunMode};
use lockwright_engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStore, ManualClock, Mode, SharedLimit,
    Timestamp, Ttl,
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
use tokio::runtime::Runtime;

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
    // The same collection on the server's clock: status then asks the server for the time.
    let on_server_clock = MongoStore::from_collection(reading.collection().clone());
    rt.block_on(async {
        on_server_clock
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
    });
    let (_, by_group, matches) = &filters[1];
    let mut record = Record::new(GROUP, "status_server_clock", Some("lock_id".into()), 1);
    record.note = Some(format!("{matches} of {n} locks match; the server's clock"));
    bench.run(
        &mut group,
        record,
        BenchmarkId::new("status_server_clock", "lock_id"),
        async |_| (),
        async |_| on_server_clock.status(by_group).await,
        async |_, _| (),
        |r| assert_eq!(r.as_ref().map(Vec::len).ok(), Some(*matches)),
    );
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

fn main() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    store_mongo(&mut criterion);
    criterion.final_summary();
}
