//! A sweep over many seeds, and its totals.

use crate::faults::Faults;
use crate::options::Options;
use crate::report::{SeedReport, Tally, ViolationKind};
use crate::run_seed;

/// Totals over a sweep.
#[derive(Clone, Debug, Default)]
pub struct SweepSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// Seeds that enabled each fault kind: lost replies, pauses, crashes, drift, lost
    /// requests, failovers, duplicated hints, dropped hint streams.
    pub seeds_with: [u64; 8],
    /// What the seeds counted, summed (`largest_batch`: the largest of any seed).
    pub tally: Tally,
    /// Seeds without faults that can cost a lease (checked for needless losses).
    pub seeds_without_lease_faults: u64,
    /// Seeds checked for handover liveness.
    pub seeds_checking_handovers: u64,
    /// Seeds with fair clients.
    pub seeds_with_fair_clients: u64,
    /// Of those, the ones checked for handover liveness and bounded waiting.
    pub fair_seeds_checking_waits: u64,
    /// Violations by kind.
    pub violations: std::collections::BTreeMap<ViolationKind, u64>,
    /// The first few failing seeds.
    pub failing_seeds: Vec<u64>,
    /// How many seeds failed.
    pub seeds_failing: u64,
}

impl SweepSummary {
    /// Adds one seed's report.
    pub fn add(&mut self, r: &SeedReport) {
        self.seeds += 1;
        self.events += r.events;
        self.faults.lost_replies += r.faults.lost_replies;
        self.faults.lost_requests += r.faults.lost_requests;
        self.faults.pauses += r.faults.pauses;
        self.faults.crashes += r.faults.crashes;
        self.faults.failovers += r.faults.failovers;
        self.faults.clock_jumps_forward += r.faults.clock_jumps_forward;
        self.faults.clock_jumps_back += r.faults.clock_jumps_back;
        self.faults.lost_hints += r.faults.lost_hints;
        self.faults.duplicated_hints += r.faults.duplicated_hints;
        self.faults.late_hints += r.faults.late_hints;
        self.faults.dropped_streams += r.faults.dropped_streams;
        self.faults.partitions += r.faults.partitions;
        self.faults.partitioned_messages += r.faults.partitioned_messages;
        for (i, on) in [
            r.mix.lost_reply_pct > 0,
            r.mix.pause_permille > 0,
            r.mix.crash_permille > 0,
            r.mix.drift_ppm > 0,
            r.mix.lost_request_pct > 0,
            r.mix.clock_jump_ms > 0,
            r.mix.hint_dup_pct > 0,
            r.mix.stream_drop_permille > 0,
        ]
        .into_iter()
        .enumerate()
        {
            self.seeds_with[i] += u64::from(on);
        }
        self.tally.add(&r.tally);
        self.seeds_without_lease_faults += u64::from(!r.mix.can_cost_a_lease());
        self.seeds_checking_handovers += u64::from(r.mix.checks_handovers());
        let fair = r.mix.fair_clients != 0;
        self.seeds_with_fair_clients += u64::from(fair);
        self.fair_seeds_checking_waits += u64::from(fair && r.mix.checks_handovers());
        for v in &r.violations {
            *self.violations.entry(v.kind).or_default() += 1;
        }
        if !r.violations.is_empty() {
            self.seeds_failing += 1;
            if self.failing_seeds.len() < 10 {
                self.failing_seeds.push(r.seed);
            }
        }
    }

    /// Total violations.
    #[must_use]
    pub fn violation_count(&self) -> u64 {
        self.violations.values().sum()
    }
}

/// Runs seeds `start..start + count`, calling `progress` after each.
pub fn sweep(
    opts: &Options,
    start: u64,
    count: u64,
    mut progress: impl FnMut(&SeedReport),
) -> SweepSummary {
    let mut summary = SweepSummary::default();
    for seed in start..start + count {
        let report = run_seed(opts, seed, false);
        summary.add(&report);
        progress(&report);
    }
    summary
}
