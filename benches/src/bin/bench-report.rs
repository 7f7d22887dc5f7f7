//! Turns one bench run into `target/bench-report.md` and prints it.
//!
//! Reads the records the benches wrote (`target/bench-results/*.jsonl`) and, for each, the
//! median criterion estimated (`target/criterion/<id>/new/estimates.json`); an estimate
//! older than its record belongs to an earlier run and is ignored. Run by `scripts/bench`.
//!
//! Usage: `bench-report [--out FILE]`

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::UNIX_EPOCH;

use clap::Parser;
use lockwright_benches::report::Run;
use lockwright_benches::results::{
    META_FILE, RECORDS_FILE, criterion_dir, machine, results_dir, target_dir,
};
use lockwright_benches::{Meta, Record};

/// Writes the Markdown report of the last bench run (scripts/bench) and prints it: every
/// benchmark's median, ratio, commands and query plans, and each target of benches/README.md
/// with its verdict.
///
/// Reads `<target>/bench-results/*.jsonl` and criterion's estimates (`CRITERION_HOME`, or
/// `<target>/criterion`); `<target>` is `CARGO_TARGET_DIR`, or the workspace's `target`.
#[derive(Debug, Parser)]
#[command(name = "bench-report")]
struct Args {
    /// Where to write the report (default: `<target>/bench-report.md`)
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let out = args
        .out
        .unwrap_or_else(|| target_dir().join("bench-report.md"));
    match run(&out) {
        Ok(markdown) => {
            print!("{markdown}");
            eprintln!("bench-report: wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-report: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(out: &Path) -> Result<String, String> {
    let records: Vec<Record> = read_lines(&results_dir().join(RECORDS_FILE))?;
    if records.is_empty() {
        return Err(format!(
            "no records in {}: run the benches first (scripts/bench)",
            results_dir().display()
        ));
    }
    let mut meta: Vec<Meta> = read_lines(&results_dir().join(META_FILE)).unwrap_or_default();
    meta.push(Meta {
        key: "machine".into(),
        value: machine(),
    });
    let mut medians = BTreeMap::new();
    let mut missing = Vec::new();
    for r in records.iter().filter(|r| !r.custom) {
        match median_of(r) {
            Some(m) => {
                medians.insert(r.id(), m);
            }
            None => missing.push(r.id()),
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "bench-report: no estimate from this run for: {}",
            missing.join(", ")
        );
    }
    let markdown = Run {
        records: &records,
        medians: &medians,
        meta: &meta,
    }
    .markdown();
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    fs::write(out, &markdown).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(markdown)
}

fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}: {l}", path.display())))
        .collect()
}

/// Criterion's median for the record's benchmark, if criterion wrote it after the benchmark
/// began (an older file is left from an earlier run).
fn median_of(r: &Record) -> Option<f64> {
    let path = criterion_dir()
        .join(r.id())
        .join("new")
        .join("estimates.json");
    let modified = fs::metadata(&path).ok()?.modified().ok()?;
    let modified_ms = u64::try_from(modified.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    // One second of slack for file systems with coarse modification times.
    if modified_ms + 1_000 < r.started_at_ms {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).ok()?).ok()?;
    json.get("median")?.get("point_estimate")?.as_f64()
}
