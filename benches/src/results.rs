//! The facts a bench records beside criterion's timings, and where they are kept.
//!
//! Criterion keeps the timings (`target/criterion/<group>/<function>[/<parameter>]/new/
//! estimates.json`); each bench appends one [`Record`] per benchmark to
//! `target/bench-results/records.jsonl` with what criterion does not know: the commands the
//! operation sent to MongoDB (counted by the driver's command monitoring during the timed
//! part), the query plans of those commands, and the sizes. `scripts/bench` empties that
//! folder before a run, so the report only ever sees one run's records.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The environment variable that selects the quick (CI smoke) configuration: `1` for quick.
pub const QUICK_ENV: &str = "LOCKWRIGHT_BENCH_QUICK";

/// How a bench binary was started, which decides the data sizes it uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// `cargo test --benches` (criterion runs each benchmark once): the smallest sizes, so
    /// the smoke run stays fast even in a debug build; nothing is recorded.
    Test,
    /// `scripts/bench --quick`: short criterion settings and smaller data sets.
    Quick,
    /// `scripts/bench` or `cargo bench`: every size the targets are stated for.
    Full,
}

impl RunMode {
    /// The mode of this process, decided from its arguments the way criterion decides
    /// between test and benchmark mode (`cargo bench` passes `--bench`; `cargo test
    /// --benches` does not), and from [`QUICK_ENV`].
    #[must_use]
    pub fn current() -> Self {
        let args: Vec<String> = std::env::args().collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        if !has("--bench") || has("--test") || has("--list") {
            RunMode::Test
        } else if std::env::var(QUICK_ENV).is_ok_and(|v| v == "1") {
            RunMode::Quick
        } else {
            RunMode::Full
        }
    }

    /// Picks the value for this mode.
    #[must_use]
    pub fn pick<T>(self, test: T, quick: T, full: T) -> T {
        match self {
            RunMode::Test => test,
            RunMode::Quick => quick,
            RunMode::Full => full,
        }
    }

    /// Whether results are written (not in test mode, which measures nothing).
    #[must_use]
    pub fn records(self) -> bool {
        self != RunMode::Test
    }

    /// The name shown in the report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Test => "test",
            RunMode::Quick => "quick",
            RunMode::Full => "full",
        }
    }
}

/// What one benchmark measured besides its time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The criterion group, e.g. `store_mongo`.
    pub group: String,
    /// The benchmark function, e.g. `renew`.
    pub function: String,
    /// The criterion parameter, e.g. `100` (K) or `resource` (a filter kind).
    pub parameter: Option<String>,
    /// The size the parameter stands for (table size, K, N), when it is a size.
    pub size: Option<u64>,
    /// Elements per iteration, as given to criterion's `Throughput::Elements`.
    pub elements: u64,
    /// MongoDB commands started per operation during the timed part, from command
    /// monitoring (total commands / operations timed).
    pub commands: Option<f64>,
    /// The names of the commands one operation sent, in order (from a monitored probe run).
    pub command_names: Vec<String>,
    /// Per command name, its round-trip time per operation in µs (the driver's
    /// `CommandSucceededEvent::duration`, summed over the timed parts / operations).
    pub command_time_us: BTreeMap<String, f64>,
    /// The winning plan of each command that reads or writes documents, from `explain`:
    /// `command: STAGE(index) ...`.
    pub plans: Vec<String>,
    /// Other numbers the report uses (e.g. `batches` for purge).
    pub extra: BTreeMap<String, f64>,
    /// A remark for the report.
    pub note: Option<String>,
    /// Measured by the bench itself rather than by criterion (e.g. a Locker holding its
    /// guards for a few renewal cycles): there is no criterion estimate, and the numbers are
    /// in `commands` and `extra`.
    #[serde(default)]
    pub custom: bool,
    /// When the benchmark began (ms since the Unix epoch): create the record before running
    /// it. The report ignores criterion estimates older than this (left by earlier runs).
    pub started_at_ms: u64,
}

impl Record {
    /// A record for `group`/`function`/`parameter` with `elements` per iteration, started
    /// now.
    #[must_use]
    pub fn new(group: &str, function: &str, parameter: Option<String>, elements: u64) -> Self {
        Record {
            group: group.to_string(),
            function: function.to_string(),
            parameter,
            elements: elements.max(1),
            started_at_ms: now_ms(),
            ..Record::default()
        }
    }

    /// A record for `group`/`function` whose parameter is a size (table size, K, N) and
    /// which handles `size` elements per iteration, started now.
    #[must_use]
    pub fn sized(group: &str, function: &str, size: u64) -> Self {
        Record {
            size: Some(size),
            ..Record::new(group, function, Some(size.to_string()), size)
        }
    }

    /// The record with `note` as its remark for the report.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The benchmark's id, which is also its folder under `target/criterion`.
    #[must_use]
    pub fn id(&self) -> String {
        match &self.parameter {
            Some(p) => format!("{}/{}/{p}", self.group, self.function),
            None => format!("{}/{}", self.group, self.function),
        }
    }

    /// Appends the record to the run's results, unless `mode` records nothing.
    ///
    /// # Errors
    /// When the results file cannot be written.
    pub fn save(&self, mode: RunMode) -> io::Result<()> {
        if !mode.records() {
            return Ok(());
        }
        append_line(RECORDS_FILE, &serde_json::to_string(self)?)
    }
}

/// A fact about the run (machine, server version, mode).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// What the fact is about, e.g. `mongod`.
    pub key: String,
    /// The fact.
    pub value: String,
}

impl Meta {
    /// Appends `key: value` to the run's facts, unless `mode` records nothing.
    ///
    /// # Errors
    /// When the results file cannot be written.
    pub fn save(key: &str, value: &str, mode: RunMode) -> io::Result<()> {
        if !mode.records() {
            return Ok(());
        }
        let meta = Meta {
            key: key.to_string(),
            value: value.to_string(),
        };
        append_line(META_FILE, &serde_json::to_string(&meta)?)
    }
}

/// The records file inside [`results_dir`].
pub const RECORDS_FILE: &str = "records.jsonl";
/// The facts file inside [`results_dir`].
pub const META_FILE: &str = "meta.jsonl";

/// Cargo's target folder: `CARGO_TARGET_DIR`, or the workspace's `target`.
#[must_use]
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")),
    }
}

/// Where criterion keeps its estimates: `CRITERION_HOME`, or `<target>/criterion`.
#[must_use]
pub fn criterion_dir() -> PathBuf {
    match std::env::var_os("CRITERION_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => target_dir().join("criterion"),
    }
}

/// Where the benches write their records: `<target>/bench-results`.
#[must_use]
pub fn results_dir() -> PathBuf {
    target_dir().join("bench-results")
}

fn append_line(file: &str, line: &str) -> io::Result<()> {
    let dir = results_dir();
    fs::create_dir_all(&dir)?;
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))?;
    writeln!(f, "{line}")
}

/// Milliseconds since the Unix epoch (0 on a clock set before it).
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The CPU model and the cores this process may use, for the report's header.
#[must_use]
pub fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!("{cpu}, {cores} cores available, {}", std::env::consts::OS)
}

/// The 1, 5 and 15 minute load averages (other work on the machine skews timings).
#[must_use]
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}
