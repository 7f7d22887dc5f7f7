//! The Markdown report: every benchmark's median next to its ratio, the commands it issued
//! and their query plans, then each target (benches/README.md) with the threshold applied, the
//! measurement and the verdict.
//!
//! "Well under" a bound is read as at most half of it ([`WELL_UNDER`]); the report says so
//! next to each threshold.
//!
//! The targets are one table ([`targets`]: the benchmarks each reads, how they are judged,
//! the threshold), judged by one check ([`Run::check`]); `queries` finds a run's records
//! and medians, `markdown` writes the report and `format` its numbers.

use std::collections::BTreeMap;

use crate::results::{Meta, Record};

mod check;
mod format;
mod hints;
mod markdown;
mod queries;
mod targets;
#[cfg(test)]
mod tests;

pub use format::{fmt_ns, fmt_num, fmt_rate, fold_duplicates, fold_repeats};
pub use targets::{
    CRASHED_ROUND_TRIPS, CYCLE_RATIO, Diagnostics, ENGINE_BOUND_NS, ENGINE_SINGLE, GRANT_RATIO,
    GROUP_OF_ONE_COMMANDS, HANDOVER_JUDGED_WAITERS, HANDOVER_P50_RATIO, HANDOVER_P99_RATIO,
    HERD_LOCKERS, HERD_RATIO, HINTS_CYCLE_RATIO, INDEXED_FILTERS, Judge, LOCKER_JUDGED_N, Listing,
    MEM_PAIRS_PER_SEC, Measure, ONE_COMMAND_FILTERS, PURGE_BOUND_NS, PURGE_TIMED_N, RENEW_RATIO,
    THROUGHPUT_LOCKERS, Target, WELL_UNDER, locker_bound, targets,
};

/// Whether a target is met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Measured and within the threshold.
    Met,
    /// Measured and outside it.
    Missed,
    /// Not measured in this run (a bench or a size is missing).
    NotMeasured,
}

/// One target and how this run fared against it.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The target as benches/README.md states it.
    pub target: String,
    /// The threshold this report applies.
    pub threshold: String,
    /// The numbers behind the verdict.
    pub evidence: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// The records of one run with their medians (ns per iteration, by [`Record::id`]).
#[derive(Debug)]
pub struct Run<'a> {
    /// What the benches recorded.
    pub records: &'a [Record],
    /// Criterion's median per iteration, in ns, by benchmark id.
    pub medians: &'a BTreeMap<String, f64>,
    /// Facts about the run.
    pub meta: &'a [Meta],
}

impl Run<'_> {
    /// Every target of benches/README.md that these benches measure.
    #[must_use]
    pub fn checks(&self) -> Vec<Check> {
        targets().iter().map(|t| self.check(t)).collect()
    }
}
