//! How a MongoDB benchmark is run: the command monitor every client command passes, the
//! timed loop (criterion's `iter_custom`, with an untimed set-up and clean-up around each
//! operation) that counts commands per operation, one probe run whose commands are
//! `explain`ed, and the interleaved measurement against a reference operation.
//!
//! Each benchmark prints one line beside criterion's: the commands per operation and their
//! winning query plans. They are shown, not judged: the counts and the index use are
//! asserted by store-mongo's tests (`tests/server/round_trips.rs`, `tests/explain.rs`).

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use lockwright_benches::{RunMode, quantile};
use mongodb::Database;
use mongodb::bson::Document;
use mongodb::event::command::CommandEvent;
use tokio::runtime::Runtime;

use crate::GROUP;
use crate::explain::explain;

/// Every command the client starts is counted; while capturing it is also kept.
#[derive(Default)]
pub struct Monitor {
    started: AtomicU64,
    pub capturing: AtomicBool,
    pub captured: Mutex<Vec<(String, Document)>>,
}

impl Monitor {
    pub fn count(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    pub fn on_event(&self, event: CommandEvent) {
        if let CommandEvent::Started(started) = event {
            self.started.fetch_add(1, Ordering::SeqCst);
            if self.capturing.load(Ordering::SeqCst) {
                let mut kept = self.captured.lock().unwrap();
                kept.push((started.command_name, started.command));
            }
        }
    }

    /// Runs `f`, keeping every command it starts.
    pub async fn probe<T>(&self, f: impl Future<Output = T>) -> (T, Vec<(String, Document)>) {
        self.captured.lock().unwrap().clear();
        self.capturing.store(true, Ordering::SeqCst);
        let out = f.await;
        self.capturing.store(false, Ordering::SeqCst);
        (out, std::mem::take(&mut *self.captured.lock().unwrap()))
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

/// A benchmark's criterion id in the group: its function, a parameter (a size or a filter
/// kind) and the elements one operation handles.
pub struct Row {
    pub function: String,
    pub parameter: Option<String>,
    pub elements: u64,
}

impl Row {
    pub fn new(function: &str) -> Self {
        Row {
            function: function.to_string(),
            parameter: None,
            elements: 1,
        }
    }

    /// A row whose parameter is a size (K, N) that many elements are handled at.
    pub fn sized(function: &str, size: usize) -> Self {
        Row {
            parameter: Some(size.to_string()),
            elements: size as u64,
            ..Row::new(function)
        }
    }

    /// A row whose parameter is a kind (a status filter).
    pub fn of(function: &str, kind: &str) -> Self {
        Row {
            parameter: Some(kind.to_string()),
            ..Row::new(function)
        }
    }

    pub fn id(&self) -> String {
        match &self.parameter {
            Some(p) => format!("{GROUP}/{}/{p}", self.function),
            None => format!("{GROUP}/{}", self.function),
        }
    }
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
    /// Benchmarks `op`: each iteration runs `prepare` (untimed), `op` (timed, its commands
    /// counted) and `cleanup` (untimed). Before its first sample a probe iteration keeps
    /// the commands `op` sends and explains them; `check` looks at the probe's result (the
    /// set-up is what the bench assumes). Returns the probe's commands, or `None` when
    /// criterion's filter skipped the benchmark.
    pub fn run<I, T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        row: Row,
        prepare: impl AsyncFn(u64) -> I,
        op: impl AsyncFn(&I) -> T,
        cleanup: impl AsyncFn(I, T),
        check: impl Fn(&T),
    ) -> Option<Vec<(String, Document)>> {
        let monitor = self.monitor;
        let mut probed: Option<Probe> = None;
        let (commands, ops) = (AtomicU64::new(0), AtomicU64::new(0));
        let (prepare, op, cleanup, commands_ref, ops_ref) =
            (&prepare, &op, &cleanup, &commands, &ops);
        let id = match &row.parameter {
            Some(p) => BenchmarkId::new(row.function.clone(), p),
            None => BenchmarkId::from_parameter(&row.function),
        };
        group.throughput(Throughput::Elements(row.elements));
        group.bench_function(id, |b| {
            if probed.is_none() {
                probed = Some(self.rt.block_on(async {
                    let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                    let (out, captured) = monitor.probe(op(&input)).await;
                    check(&out);
                    cleanup(input, out).await;
                    let mut plans = Vec::new();
                    for (name, command) in &captured {
                        plans.extend(explain(&self.db, name, command).await);
                    }
                    (captured, plans)
                }));
            }
            b.to_async(self.rt).iter_custom(|iters| async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                    let before = monitor.count();
                    let start = Instant::now();
                    let out = op(&input).await;
                    timed += start.elapsed();
                    commands_ref.fetch_add(monitor.count() - before, Ordering::SeqCst);
                    ops_ref.fetch_add(1, Ordering::SeqCst);
                    cleanup(input, out).await;
                }
                timed
            });
        });
        let (captured, plans) = probed?;
        let names: Vec<&str> = captured.iter().map(|(name, _)| name.as_str()).collect();
        let per_op = commands.into_inner() as f64 / ops.into_inner().max(1) as f64;
        println!(
            "{}: {per_op:.2} commands per operation ({}); plans: {}",
            row.id(),
            names.join(", "),
            if plans.is_empty() {
                "none".into()
            } else {
                plans.join("; ")
            },
        );
        Some(captured)
    }

    /// [`Bench::run`] for an operation with no set-up or clean-up of its own.
    pub fn measure<T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        row: Row,
        op: impl AsyncFn() -> T,
        check: impl Fn(&T),
    ) -> Option<Vec<(String, Document)>> {
        self.run(
            group,
            row,
            async |_| (),
            async |()| op().await,
            async |(), _| (),
            check,
        )
    }

    /// `rounds` interleaved pairs, `base` then `op` (with its untimed `prepare` and
    /// `cleanup`), so both see the same machine; prints the medians of each and their
    /// ratio under `id`. A second measurement of a ratio that criterion takes seconds apart.
    pub fn paired<I, T, B>(
        &self,
        id: &str,
        rounds: usize,
        base: impl AsyncFn() -> B,
        prepare: impl AsyncFn(u64) -> I,
        op: impl AsyncFn(&I) -> T,
        cleanup: impl AsyncFn(I, T),
    ) {
        if !lockwright_benches::Selected::from_args().selects(id) {
            return;
        }
        let (mut bases, mut ops) = (Vec::new(), Vec::new());
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        self.rt.block_on(async {
            for _ in 0..rounds {
                let start = Instant::now();
                std::hint::black_box(base().await);
                bases.push(ms(start.elapsed()));
                let input = prepare(SEQ.fetch_add(1, Ordering::SeqCst)).await;
                let start = Instant::now();
                let out = op(&input).await;
                ops.push(ms(start.elapsed()));
                cleanup(input, out).await;
            }
        });
        let (base, op) = (quantile(&bases, 0.5), quantile(&ops, 0.5));
        self.mode.report(
            &format!("{id}/interleaved"),
            &format!(
                "median {op:.3} ms against the reference's {base:.3} ms over {rounds} \
                 interleaved rounds: {:.2}x",
                op / base.max(f64::MIN_POSITIVE)
            ),
        );
    }
}
