//! `lockwright-sim`: sweep seeds, or replay one with its timeline.
//!
//! ```text
//! lockwright-sim [--seeds N] [--start S]          sweep N seeds (default 1000) from S
//! lockwright-sim --seed S [--svg FILE]             replay one seed, print its timeline
//! options: --clients C --resources R --ttl MS --margin MS --drift-ppm P --duration MS --no-fencing
//!          --grace-ms MS --clock-jump-ms MS --calm --fair-seeds PCT --fair-clients PCT
//!          --queue-ttl MS --fair --election --late-hints MS
//! ```
//!
//! Run `lockwright-sim --help` for the options and their defaults.

use std::process::ExitCode;
use std::time::Instant;

use clap::{CommandFactory, Parser};
use indicatif::{ProgressBar, ProgressStyle};
use lockwright_sim::{Options, run_seed, sweep, timeline_svg};

/// Deterministic simulation of Lockwright's Locker under faults: sweep seeds and print a
/// summary table, or replay one seed and print its timeline.
///
/// Exit status: 0 when no invariant broke, 1 when one did (a sweep then prints the command
/// that replays each failing seed), 2 for bad arguments.
#[derive(Parser, Debug)]
#[command(name = "lockwright-sim", version)]
struct Args {
    /// Sweep N seeds.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    seeds: u64,
    /// The first seed of the sweep.
    #[arg(long, value_name = "S", default_value_t = 0)]
    start: u64,
    /// Replay this one seed and print its timeline, instead of sweeping.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Draw the replayed seed's timeline to this SVG file.
    #[arg(long, value_name = "FILE", requires = "seed")]
    svg: Option<String>,
    /// Clients contending (2-16).
    #[arg(long, value_name = "C", default_value_t = Options::default().clients)]
    clients: usize,
    /// Resources they lock (1-64).
    #[arg(long, value_name = "R", default_value_t = Options::default().resources)]
    resources: usize,
    /// The TTL of every lock, in ms (at least 20).
    #[arg(long, value_name = "MS", default_value_t = Options::default().ttl_ms)]
    ttl: u64,
    /// The holders' drift margin, in ms (below the TTL).
    #[arg(long, value_name = "MS", default_value_t = Options::default().drift_margin_ms)]
    margin: u64,
    /// The renew margin, in ms: the store refuses to renew a lock that expires within it
    /// (below half the TTL, where renewals fall due).
    #[arg(long, value_name = "MS", default_value_t = Options::default().renew_margin_ms)]
    renew_margin: u64,
    /// The largest clock-rate drift a seed may give a client, in parts per million (below
    /// 500000).
    #[arg(long, value_name = "P", default_value_t = Options::default().max_drift_ppm)]
    drift_ppm: i64,
    /// How long faults are injected, in ms of virtual time.
    #[arg(long, value_name = "MS", default_value_t = Options::default().duration_ms)]
    duration: u64,
    /// The downstream store accepts any fence (stale writes get through).
    #[arg(long)]
    no_fencing: bool,
    /// The store's takeover grace, in ms: an expired lock blocks other grants until it has
    /// been expired this long.
    #[arg(long, value_name = "MS", default_value_t = Options::default().grace_ms)]
    grace_ms: u64,
    /// How far apart the store members' clocks are, in ms (below the TTL): in half of the
    /// seeds the store fails over every one to five TTLs, and its clock jumps by up to this
    /// much, forward or back. 0: no failovers.
    #[arg(long, value_name = "MS", default_value_t = Options::default().clock_jump_ms)]
    clock_jump_ms: u64,
    /// Calm seeds only: a fast network that loses nothing, no pauses, no failovers and no
    /// dropped hint streams (crashes, clock drift and duplicated hints as each seed draws
    /// them), so that every seed is checked for handover liveness.
    #[arg(long)]
    calm: bool,
    /// The share of seeds, in percent, whose clients acquire fairly (waiting in the
    /// resource's queue).
    #[arg(long, value_name = "PCT", default_value_t = Options::default().fair_seeds_pct)]
    fair_seeds: u32,
    /// In a seed with fair clients, the share of its clients, in percent, that acquire
    /// fairly (at least one; the others obey the queue without a place in it).
    #[arg(long, value_name = "PCT", default_value_t = Options::default().fair_clients_pct)]
    fair_clients: u32,
    /// Every client of every seed acquires fairly (--fair-seeds 100 --fair-clients 100).
    #[arg(long, conflicts_with_all = ["fair_seeds", "fair_clients"])]
    fair: bool,
    /// An election on one resource: every client a candidate (fair) that proclaims values
    /// and resigns, and an observer that reads who leads (with --resources 1, and every
    /// client fair).
    #[arg(long)]
    election: bool,
    /// The lease of a fair waiter's place in a queue, in ms (100 to 600000).
    #[arg(long, value_name = "MS", default_value_t = Options::default().queue_ttl_ms)]
    queue_ttl: u64,
    /// Late hints: in half of the seeds, a share of the hints arrive up to MS later than the
    /// network's latency (0: none; at most 60000).
    #[arg(long, value_name = "MS", default_value_t = Options::default().late_hint_ms)]
    late_hints: u64,
}

impl Args {
    /// The simulation options, or exits with a usage error (status 2) when the arguments
    /// are out of range or do not fit together.
    fn options(&self) -> Options {
        let d = Options::default();
        let problem = if self.clients < 2 || self.clients > 16 {
            Some("--clients must be between 2 and 16")
        } else if self.resources == 0 || self.resources > 64 {
            Some("--resources must be between 1 and 64")
        } else if self.ttl < 20 {
            Some("--ttl must be at least 20 ms")
        } else if self.margin >= self.ttl {
            Some("--margin must be below --ttl")
        } else if self.renew_margin.saturating_mul(2) >= self.ttl {
            Some("--renew-margin must be below half of --ttl (renewals fall due at half of it)")
        } else if !(0..500_000).contains(&self.drift_ppm) {
            Some("--drift-ppm must be below 500000")
        } else if self.clock_jump_ms >= self.ttl {
            Some("--clock-jump-ms must be below --ttl")
        } else if self.grace_ms > 3_600_000 {
            Some("--grace-ms must be at most 3600000 (an hour)")
        } else if self.fair_seeds > 100 || self.fair_clients > 100 {
            Some("--fair-seeds and --fair-clients are percentages (0-100)")
        } else if !(100..=600_000).contains(&self.queue_ttl) {
            Some("--queue-ttl must be between 100 and 600000 ms")
        } else if self.election && self.resources != 1 && self.resources != d.resources {
            Some("--election runs one resource: --resources must be 1")
        } else if self.late_hints > 60_000 {
            Some("--late-hints must be at most 60000 ms")
        } else if self.seeds == 0 {
            Some("--seeds must be at least 1")
        } else {
            None
        };
        if let Some(problem) = problem {
            Args::command()
                .error(clap::error::ErrorKind::ValueValidation, problem)
                .exit();
        }
        let fair = self.fair || self.election;
        Options {
            clients: self.clients,
            resources: if self.election { 1 } else { self.resources },
            ttl_ms: self.ttl,
            drift_margin_ms: self.margin,
            renew_margin_ms: self.renew_margin,
            max_drift_ppm: self.drift_ppm,
            fencing: !self.no_fencing,
            duration_ms: self.duration,
            grace_ms: self.grace_ms,
            clock_jump_ms: self.clock_jump_ms,
            calm: self.calm,
            fair_seeds_pct: if fair { 100 } else { self.fair_seeds },
            fair_clients_pct: if fair { 100 } else { self.fair_clients },
            queue_ttl_ms: self.queue_ttl,
            election: self.election,
            late_hint_ms: self.late_hints,
        }
    }
}

/// What an election's leaders and observer did.
fn election_line(f: &lockwright_sim::Faults, t: &lockwright_sim::Tally) -> String {
    format!(
        "election: {} partitions ({} messages lost to them); {} proclaims ({} refused, their sender deposed); the observer read {} times, \
         reported {} leaders and skipped {} reads overtaken by later ones",
        f.partitions,
        f.partitioned_messages,
        t.proclaims_sent,
        t.proclaims_refused,
        t.observer_reads,
        t.leaders_observed,
        t.stale_reads_skipped
    )
}

fn main() -> ExitCode {
    // A build with `--cfg lockwright_mutants` runs the mutant `LOCKWRIGHT_MUTANT` names.
    #[cfg(lockwright_mutants)]
    if let Some(m) = lockwright_engine::mutants::activate_from_env() {
        eprintln!("mutant {} on", m.name());
    }
    let args = Args::parse();
    let opts = args.options();
    let replay = |seed: u64| {
        format!(
            "cargo run -p lockwright-sim --release -- --seed {seed}{}",
            opts.flags()
        )
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&opts, seed, true);
        println!("seed {seed}: {}", report.mix);
        for e in &report.timeline {
            let who = e
                .client
                .map_or_else(|| "      ".to_string(), |c| format!("c{c:<5}"));
            println!("{:>8} ms  {who} {}", e.at, e.what);
        }
        println!(
            "{} events, {} lost replies, {} lost requests, {} pauses, {} crashes, {} failovers, {} leases lost, writes {} accepted / {} rejected",
            report.events,
            report.faults.lost_replies,
            report.faults.lost_requests,
            report.faults.pauses,
            report.faults.crashes,
            report.faults.failovers,
            report.tally.losses,
            report.tally.writes_accepted,
            report.tally.writes_rejected
        );
        println!(
            "{} renewal batches sent ({} renewals, at most {} in one)",
            report.tally.renew_batches, report.tally.batched_renewals, report.tally.largest_batch
        );
        println!(
            "{} hints sent, {} heard ({} locks held on one), {} lost, {} duplicated, {} hint streams dropped",
            report.tally.hints_sent,
            report.tally.hints_heard,
            report.tally.held_on_hint,
            report.faults.lost_hints,
            report.faults.duplicated_hints,
            report.faults.dropped_streams
        );
        if report.mix.checks_handovers() {
            println!(
                "handovers checked: {} after releases (slowest {} ms), {} after crashes (slowest {} ms)",
                report.tally.handovers_checked,
                report.tally.slowest_handover_ms,
                report.tally.takeovers_checked,
                report.tally.slowest_takeover_ms
            );
        }
        if report.mix.fair_clients != 0 {
            println!(
                "queues: {} places taken, {} lapsed, {} left, {} handed the lock; {} fair grants, {} grants past a queue checked for fifo",
                report.tally.places_taken,
                report.tally.places_lapsed,
                report.tally.places_left,
                report.tally.places_handed,
                report.tally.fair_grants,
                report.tally.grants_past_queue
            );
            if report.mix.checks_handovers() {
                println!(
                    "bounded waiting: {} fair waits checked ({} behind others), longest {} ms, most free time {} ms",
                    report.tally.fair_waits_checked,
                    report.tally.fair_waits_behind,
                    report.tally.longest_fair_wait_ms,
                    report.tally.most_free_wait_ms
                );
            }
        }
        if opts.election {
            println!("{}", election_line(&report.faults, &report.tally));
        }
        if let Some(path) = &args.svg {
            if let Err(e) = std::fs::write(path, timeline_svg(&opts, &report)) {
                eprintln!("error: cannot write {path}: {e}");
                return ExitCode::FAILURE;
            }
            println!("timeline drawn to {path}");
        }
        return if report.violations.is_empty() {
            println!("no violation");
            ExitCode::SUCCESS
        } else {
            for v in &report.violations {
                println!("VIOLATION at {} ms: {:?}: {}", v.at, v.kind, v.detail);
            }
            ExitCode::FAILURE
        };
    }

    let bar = ProgressBar::new(args.seeds);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds, {per_sec}, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut violations = 0;
    let summary = sweep(&opts, args.start, args.seeds, |r| {
        bar.inc(1);
        if !r.violations.is_empty() {
            violations += r.violations.len();
            bar.set_message(format!("{violations} violation(s)"));
        }
    });
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "options:{}",
        if opts.flags().is_empty() {
            " defaults".to_string()
        } else {
            opts.flags()
        }
    );
    println!(
        "| seeds | events | lost replies | lost requests | pauses | crashes | leases lost | writes accepted / rejected | violations | seeds/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} ({} seeds) | {} ({} seeds) | {} ({} seeds) | {} ({} seeds) | {} | {} / {} | {} | {:.0} |",
        summary.seeds,
        summary.events,
        summary.faults.lost_replies,
        summary.seeds_with[0],
        summary.faults.lost_requests,
        summary.seeds_with[4],
        summary.faults.pauses,
        summary.seeds_with[1],
        summary.faults.crashes,
        summary.seeds_with[2],
        summary.tally.losses,
        summary.tally.writes_accepted,
        summary.tally.writes_rejected,
        summary.violation_count(),
        summary.seeds as f64 / secs
    );
    println!("{} seeds had drifting clocks", summary.seeds_with[3]);
    println!(
        "{} failovers in {} seeds ({} moved the store's clock forward, {} back); {} grants took their fence from a fence clock ahead of the store's",
        summary.faults.failovers,
        summary.seeds_with[5],
        summary.faults.clock_jumps_forward,
        summary.faults.clock_jumps_back,
        summary.tally.grants_behind_fence_clock
    );
    println!(
        "{} grants with a lost reply released, {} releases retried after a lost unlock, {} grants arrived after their trust deadline",
        summary.tally.unknown_grants_released,
        summary.tally.releases_retried,
        summary.tally.late_grants
    );
    println!(
        "{} renewal batches sent ({} renewals, {:.2} a batch, at most {}; {} renewals of a batch refused by the store)",
        summary.tally.renew_batches,
        summary.tally.batched_renewals,
        summary.tally.batched_renewals as f64 / summary.tally.renew_batches.max(1) as f64,
        summary.tally.largest_batch,
        summary.tally.batched_refusals
    );
    println!(
        "{} hints sent, {} heard ({} locks held on one; {} lost, {} duplicated in {} seeds; {} hint streams dropped in {} seeds; {} late); {} subscriptions, {} dropped while waiting far back",
        summary.tally.hints_sent,
        summary.tally.hints_heard,
        summary.tally.held_on_hint,
        summary.faults.lost_hints,
        summary.faults.duplicated_hints,
        summary.seeds_with[6],
        summary.faults.dropped_streams,
        summary.seeds_with[7],
        summary.faults.late_hints,
        summary.tally.subscriptions,
        summary.tally.far_back_unsubscribed
    );
    println!(
        "{} seeds checked for handover liveness: {} handovers after releases (slowest {} ms), {} takeovers after crashes (slowest {} ms)",
        summary.seeds_checking_handovers,
        summary.tally.handovers_checked,
        summary.tally.slowest_handover_ms,
        summary.tally.takeovers_checked,
        summary.tally.slowest_takeover_ms
    );
    println!(
        "{} seeds with fair clients: {} places taken, {} kept far back, {} lapsed, {} left, {} handed the lock; {} fair grants; {} grants past a queue checked for fifo",
        summary.seeds_with_fair_clients,
        summary.tally.places_taken,
        summary.tally.far_keeps,
        summary.tally.places_lapsed,
        summary.tally.places_left,
        summary.tally.places_handed,
        summary.tally.fair_grants,
        summary.tally.grants_past_queue
    );
    println!(
        "{} of them checked for bounded waiting: {} fair waits ({} behind others), longest {} ms, most free time {} ms",
        summary.fair_seeds_checking_waits,
        summary.tally.fair_waits_checked,
        summary.tally.fair_waits_behind,
        summary.tally.longest_fair_wait_ms,
        summary.tally.most_free_wait_ms
    );
    if opts.election {
        println!("{}", election_line(&summary.faults, &summary.tally));
    }
    if summary.violation_count() == 0 {
        println!("no violation in {} seeds ({:.1} s)", summary.seeds, secs);
        ExitCode::SUCCESS
    } else {
        println!(
            "{} violation(s) in {} of {} seeds",
            summary.violation_count(),
            summary.seeds_failing,
            summary.seeds
        );
        for (kind, n) in &summary.violations {
            println!("{kind:?}: {n}");
        }
        for seed in &summary.failing_seeds {
            println!("replay: {}", replay(*seed));
        }
        ExitCode::FAILURE
    }
}
