//! `lockwright-sim`: sweep seeds, or replay one with its timeline.
//!
//! ```text
//! lockwright-sim [--seeds N] [--start S]          sweep N seeds (default 1000) from S
//! lockwright-sim --seed S [--svg FILE]             replay one seed, print its timeline
//! options: --clients C --resources R --ttl MS --margin MS --drift-ppm P --duration MS --no-fencing
//! ```

use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use lockwright_sim::{Options, run_seed, sweep, timeline_svg};

struct Args {
    opts: Options,
    seeds: u64,
    start: u64,
    seed: Option<u64>,
    svg: Option<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        opts: Options::default(),
        seeds: 1_000,
        start: 0,
        seed: None,
        svg: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let number = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: `{v}` is not a number"))
        };
        match flag.as_str() {
            "--seeds" => a.seeds = number("--seeds", value("--seeds")?)?,
            "--start" => a.start = number("--start", value("--start")?)?,
            "--seed" => a.seed = Some(number("--seed", value("--seed")?)?),
            "--svg" => a.svg = Some(value("--svg")?),
            "--clients" => a.opts.clients = number("--clients", value("--clients")?)? as usize,
            "--resources" => {
                a.opts.resources = number("--resources", value("--resources")?)? as usize
            }
            "--ttl" => a.opts.ttl_ms = number("--ttl", value("--ttl")?)?,
            "--margin" => a.opts.drift_margin_ms = number("--margin", value("--margin")?)?,
            "--drift-ppm" => {
                a.opts.max_drift_ppm = number("--drift-ppm", value("--drift-ppm")?)? as i64
            }
            "--duration" => a.opts.duration_ms = number("--duration", value("--duration")?)?,
            "--no-fencing" => a.opts.fencing = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let o = &a.opts;
    if o.clients < 2 || o.clients > 16 {
        return Err("--clients must be between 2 and 16".into());
    }
    if o.resources == 0 || o.resources > 64 {
        return Err("--resources must be between 1 and 64".into());
    }
    if o.ttl_ms < 20 {
        return Err("--ttl must be at least 20 ms".into());
    }
    if o.drift_margin_ms >= o.ttl_ms {
        return Err("--margin must be below --ttl".into());
    }
    if !(0..500_000).contains(&o.max_drift_ppm) {
        return Err("--drift-ppm must be below 500000".into());
    }
    if a.seeds == 0 {
        return Err("--seeds must be at least 1".into());
    }
    if a.svg.is_some() && a.seed.is_none() {
        return Err("--svg draws one seed: give --seed too".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}\n");
            }
            eprintln!("usage: lockwright-sim [--seeds N] [--start S] | --seed S [--svg FILE]");
            eprintln!(
                "       [--clients C] [--resources R] [--ttl MS] [--margin MS] [--drift-ppm P] [--duration MS] [--no-fencing]"
            );
            return ExitCode::from(2);
        }
    };
    let replay = |seed: u64| {
        format!(
            "cargo run -p lockwright-sim --release -- --seed {seed}{}",
            args.opts.flags()
        )
    };
    if let Some(seed) = args.seed {
        let report = run_seed(&args.opts, seed, true);
        println!("seed {seed}: {}", report.mix);
        for e in &report.timeline {
            let who = e
                .client
                .map_or_else(|| "      ".to_string(), |c| format!("c{c:<5}"));
            println!("{:>8} ms  {who} {}", e.at, e.what);
        }
        println!(
            "{} events, {} lost replies, {} lost requests, {} pauses, {} crashes, {} leases lost, writes {} accepted / {} rejected",
            report.events,
            report.faults.lost_replies,
            report.faults.lost_requests,
            report.faults.pauses,
            report.faults.crashes,
            report.losses,
            report.writes_accepted,
            report.writes_rejected
        );
        println!(
            "{} renewal batches sent ({} renewals, at most {} in one)",
            report.renew_batches, report.batched_renewals, report.largest_batch
        );
        if let Some(path) = &args.svg {
            if let Err(e) = std::fs::write(path, timeline_svg(&args.opts, &report)) {
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
    let summary = sweep(&args.opts, args.start, args.seeds, |r| {
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
        if args.opts.flags().is_empty() {
            " defaults".to_string()
        } else {
            args.opts.flags()
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
        summary.losses,
        summary.writes.0,
        summary.writes.1,
        summary.violation_count(),
        summary.seeds as f64 / secs
    );
    println!("{} seeds had drifting clocks", summary.seeds_with[3]);
    println!(
        "{} grants with a lost reply released, {} releases retried after a lost unlock, {} grants arrived after their trust deadline",
        summary.unknown_grants_released, summary.releases_retried, summary.late_grants
    );
    println!(
        "{} renewal batches sent ({} renewals, {:.2} a batch, at most {}; {} renewals of a batch refused by the store)",
        summary.renew_batches,
        summary.batched_renewals,
        summary.batched_renewals as f64 / summary.renew_batches.max(1) as f64,
        summary.largest_batch,
        summary.batched_refusals
    );
    if summary.violation_count() == 0 {
        println!("no violation in {} seeds ({:.1} s)", summary.seeds, secs);
        ExitCode::SUCCESS
    } else {
        for (kind, n) in &summary.violations {
            println!("{kind:?}: {n}");
        }
        for seed in &summary.failing_seeds {
            println!("replay: {}", replay(*seed));
        }
        ExitCode::FAILURE
    }
}
