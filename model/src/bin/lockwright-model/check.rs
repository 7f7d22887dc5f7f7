//! The `check` command: runs the checker, reports progress and a verdict per property,
//! and prints the counterexamples.

use std::time::{Duration, Instant};

use lockwright_model::trace::{counterexample, render, replay, until_first_violation};
use lockwright_model::{Config, LockModel};
use stateright::{Checker, Expectation, Model, UniformChooser};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Bfs,
    Dfs,
    Simulate(u64),
}

/// What `check` runs.
#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) config: Config,
    pub(crate) mode: Mode,
    pub(crate) threads: usize,
    pub(crate) timeout: Option<Duration>,
}

pub(crate) fn describe(config: &Config) -> String {
    let rates: Vec<String> = config
        .rates
        .iter()
        .enumerate()
        .map(|(i, r)| format!("c{i} {r}"))
        .collect();
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "{} client(s) ({}), {} resource(s), real time 0..={} ms, TTL {} ms, shared limit {}, \
         renew margin {} ms, drift margin {} ms (these clocks need {} ms), pauses {}, \
         crashes {}, downstream writes {}, symmetry reduction {}, takeover grace {} ms, \
         {}, purge {}, {}",
        config.clients(),
        rates.join(", "),
        config.resources,
        config.ticks,
        config.ttl_ms(),
        config
            .shared_limit
            .map_or_else(|| "none".to_string(), |l| l.get().to_string()),
        config.renew_margin.as_millis(),
        config.drift_margin.as_millis(),
        config.required_drift_margin(),
        on(config.pauses),
        on(config.crashes),
        on(config.writes),
        on(config.symmetry),
        config.grace_ms(),
        if config.has_failovers() {
            format!(
                "store members' clocks {} ms apart, up to {} failover(s)",
                config.skew, config.failovers
            )
        } else {
            "one store clock (no failovers)".to_string()
        },
        if config.purge_rechecks {
            "checks its groups again as it finishes"
        } else {
            "removes the groups it found"
        },
        if config.fair {
            format!(
                "fair requests too (queue places live {} ms){}",
                config.queue_ttl_ms(),
                if config.wakes {
                    ", wakes (late, duplicated, reordered) trusted by the Locker's rule"
                } else {
                    ""
                }
            )
        } else {
            "no fair requests".to_string()
        },
    )
}

fn per_second(count: usize, elapsed: Duration) -> String {
    let rate = count as f64 / elapsed.as_secs_f64().max(1e-9);
    human_format::Formatter::new().with_decimals(1).format(rate)
}

pub(crate) fn check(args: &Args) -> bool {
    let model = LockModel::new(args.config.clone());
    let mut builder = model.clone().checker().threads(args.threads);
    if let Some(t) = args.timeout {
        builder = builder.timeout(t);
    }
    let (name, exhaustive) = match args.mode {
        Mode::Bfs => ("breadth-first search", true),
        Mode::Dfs => ("depth-first search", true),
        Mode::Simulate(_) => ("random simulation", false),
    };
    println!(
        "Checking with {name} on {} thread(s){}.",
        args.threads,
        match args.mode {
            Mode::Simulate(seed) => format!(", seed {seed}"),
            _ => String::new(),
        }
    );
    let start = Instant::now();
    let checker: Box<dyn Checker<LockModel>> = match args.mode {
        Mode::Bfs => Box::new(builder.spawn_bfs()),
        Mode::Dfs => Box::new(builder.spawn_dfs()),
        Mode::Simulate(seed) => Box::new(builder.spawn_simulation(seed, UniformChooser)),
    };
    let mut last_report = Instant::now();
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(50));
        if last_report.elapsed() >= Duration::from_secs(2) {
            last_report = Instant::now();
            let elapsed = start.elapsed();
            println!(
                "  ... {:.0} s: {} states, {} unique, depth {}, {} states/s",
                elapsed.as_secs_f64(),
                checker.state_count(),
                checker.unique_state_count(),
                checker.max_depth(),
                per_second(checker.state_count(), elapsed)
            );
        }
    }
    let elapsed = start.elapsed();
    let timed_out = args.timeout.is_some_and(|t| elapsed >= t);
    let complete = exhaustive && !timed_out;
    println!(
        "Done in {:.2} s: {} states generated, {} unique{}, depth {}; {} states/s, {} unique states/s.",
        elapsed.as_secs_f64(),
        checker.state_count(),
        checker.unique_state_count(),
        if exhaustive {
            ""
        } else {
            " (simulation: not deduplicated)"
        },
        checker.max_depth(),
        per_second(checker.state_count(), elapsed),
        per_second(checker.unique_state_count(), elapsed),
    );
    if !complete {
        println!("The search was not exhaustive: a property that holds here may still fail.");
    }
    let discoveries = checker.discoveries();
    let mut ok = true;
    let mut counterexamples = Vec::new();
    println!("\nProperties:");
    for p in model.properties() {
        let found = discoveries.get(p.name);
        let verdict = match (&p.expectation, found) {
            (Expectation::Always, Some(path)) => {
                ok = false;
                counterexamples.push((p.name, path.clone()));
                "VIOLATED (counterexample below)".to_string()
            }
            (Expectation::Always, None) if complete => "holds".to_string(),
            (Expectation::Always, None) => "no counterexample found".to_string(),
            (_, Some(_)) => "reached".to_string(),
            (_, None) if complete => {
                ok = false;
                "NOT REACHED (the corresponding check is vacuous here)".to_string()
            }
            (_, None) => "not reached".to_string(),
        };
        let kind = match p.expectation {
            Expectation::Always => "always",
            Expectation::Sometimes => "sometimes",
            Expectation::Eventually => "eventually",
        };
        println!("  {:<36} {kind:<9} {verdict}", p.name);
    }
    for (name, path) in counterexamples {
        // The search above went on after the first violation and reports the last one it
        // met; a search that stops at the first one gives a shorter trace.
        let found = || until_first_violation(&model, replay(&model, &path.into_actions()), name);
        let steps = match args.mode {
            Mode::Simulate(_) => found(),
            Mode::Bfs | Mode::Dfs => counterexample(&model, name).unwrap_or_else(found),
        };
        println!(
            "\nCounterexample for {name} ({} steps):",
            steps.len().saturating_sub(1)
        );
        print!("{}", render(&model, &steps));
    }
    println!(
        "\nVerdict: {}",
        if ok {
            if complete {
                "PASS (every always property holds, every sometimes property is reached)"
            } else {
                "no violation found"
            }
        } else {
            "FAIL"
        }
    );
    ok
}
