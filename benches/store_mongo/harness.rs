//! How a MongoDB benchmark is run: the command monitor every client command passes, the
//! timed loop that counts commands per operation and probes (and explains) the commands of
//! one run, and the interleaved measurement against the baseline.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use lockwright_benches::{Record, RunMode};
use mongodb::Database;
use mongodb::bson::Document;
use mongodb::event::command::CommandEvent;
use tokio::runtime::Runtime;

use crate::explain::explain;
/// Every command the client starts is counted; during a probe it is also kept; during a
/// timed part its round-trip time is added up by command name.
#[derive(Default)]
pub struct Monitor {
    started: AtomicU64,
    pub capturing: AtomicBool,
    pub captured: Mutex<Vec<(String, Document)>>,
    pub timing: AtomicBool,
    times: Mutex<BTreeMap<String, Duration>>,
}

impl Monitor {
    pub fn count(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    pub fn on_event(&self, event: CommandEvent) {
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
    pub fn take_times(&self) -> BTreeMap<String, Duration> {
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

/// A lock id of its own for iteration `seq`.
pub fn fresh_id(seq: u64) -> String {
    format!("b{seq}")
}

/// What every benchmark runs on: the runtime, the monitor of the client, that client's test
/// database and the run's mode.
pub struct Bench<'a> {
    pub rt: &'a Runtime,
    pub monitor: &'a Monitor,
    pub db: Database,
    pub mode: RunMode,
}

impl Bench<'_> {
    /// Benchmarks `op`: each iteration runs `prepare` (untimed), `op` (timed; its commands
    /// counted and their round trips added up) and `cleanup` (untimed). Before its first
    /// sample a probe iteration keeps the commands `op` sends and explains them; `check`
    /// looks at the probe's result (the set-up is what the bench assumes). Returns the
    /// probe's commands, or `None` when criterion's filter skipped the benchmark. The
    /// benchmark's criterion id is the record's function and parameter, so the report
    /// finds its estimate under [`Record::id`].
    pub fn run<I, T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        mut record: Record,
        prepare: impl AsyncFn(u64) -> I,
        op: impl AsyncFn(&I) -> T,
        cleanup: impl AsyncFn(I, T),
        check: impl Fn(&T),
    ) -> Option<Vec<(String, Document)>> {
        let monitor = self.monitor;
        let probed: RefCell<Option<Probe>> = RefCell::new(None);
        let tally = Tally::default();
        let (prepare, op, cleanup, tally_ref) = (&prepare, &op, &cleanup, &tally);
        let id = match &record.parameter {
            Some(p) => BenchmarkId::new(record.function.clone(), p),
            None => BenchmarkId::from_parameter(&record.function),
        };
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

    /// [`Bench::run`] for an operation with no set-up or clean-up of its own.
    pub fn measure<T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        record: Record,
        op: impl AsyncFn() -> T,
        check: impl Fn(&T),
    ) -> Option<Vec<(String, Document)>> {
        self.run(
            group,
            record,
            async |_| (),
            async |()| op().await,
            async |(), _| (),
            check,
        )
    }

    /// `rounds` interleaved pairs, `base` then `op` (with its untimed `prepare` and
    /// `cleanup`), so both see the same machine: the medians of each, and their ratio. A
    /// second measurement of a ratio that criterion takes seconds apart.
    pub fn paired<I, T, B>(
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
