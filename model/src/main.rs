//! `lockwright-model`: checks the Lockwright model from the command line, or serves the
//! stateright Explorer to browse it.
//!
//! ```text
//! lockwright-model check   [OPTIONS]   exhaustive BFS (default), DFS, or random simulation
//! lockwright-model explore [OPTIONS] [--port P]   the Explorer on http://127.0.0.1:P
//! lockwright-model list-mutants               the engine mutants, for scripts/mutants
//! ```
//!
//! Run `lockwright-model help` for the options.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockwright_engine::SharedLimit;
use lockwright_model::trace::{counterexample, render, replay, until_first_violation};
use lockwright_model::{Config, LockModel, Rate};
use stateright::{Checker, Expectation, Model, UniformChooser};

const USAGE: &str = "\
Usage:
  lockwright-model check   [OPTIONS] [--bfs | --dfs | --simulate SEED]
  lockwright-model explore [OPTIONS] [--port P]
  lockwright-model list-mutants   the engine's mutants: `name modelled|unmodelled`
  lockwright-model help

Options (defaults: the `faults` preset):
  --preset NAME        start from a configuration: `faults` (2 clients, 1 resource,
                       4 ticks, pauses, crashes and writes) or `ci` (2 clients, 2 resources,
                       4 ticks, no pauses, crashes or writes), both checked in CI, or
                       `three` (as `faults` with 3 clients: about 0.5 M unique states);
                       the options below change it
  --clients N          clients (1-8), all with slow clocks unless --rates
  --resources M        resources r0.. (1-8)
  --ticks T            real time runs 0..=T ms
  --ttl MS             TTL of every lock and renewal (default 3)
  --limit N|none       shared limit of every slock (default 1)
  --renew-margin MS    the store's renew margin (default 1)
  --margin MS          the holders' drift margin (default: what the clock rates need)
  --rates R,R,..       clock rate per client: slow (2/3), normal, fast (4/3) or NUM/DEN
                       (default: all slow); one rate is used for every client
  --grants-per-ms N    at most N grants per resource per ms (default 2)
  --[no-]pauses        clients may (not) pause
  --[no-]crashes       clients may (not) crash and restart with a new lock id
  --[no-]writes        holders do (not) write to the fenced downstream store
  --no-symmetry        no symmetry reduction over clients with equal clock rates
  --threads N          checker threads (default: available cores)
  --timeout SECS       stop after SECS (simulation default 10; exhaustive: none)
  --port P             explore: the Explorer's port on 127.0.0.1 (default 3000)

check prints progress, the unique state count, states per second and a verdict per
property; a violated property is shown as a numbered trace. Exit status: 0 when every
`always` property holds (and, exhaustively, every `sometimes` one is reached), 1 otherwise,
2 for bad arguments.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Bfs,
    Dfs,
    Simulate(u64),
}

#[derive(Debug)]
struct Args {
    command: String,
    config: Config,
    mode: Mode,
    threads: usize,
    timeout: Option<Duration>,
    port: u16,
}

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag}: `{value}` is not a valid value"))
}

fn parse_args(raw: Vec<String>) -> Result<Args, String> {
    let mut it = raw.into_iter();
    let command = it
        .next()
        .ok_or("missing command (check, explore, list-mutants or help)")?;
    if !matches!(
        command.as_str(),
        "check" | "explore" | "list-mutants" | "help" | "--help" | "-h"
    ) {
        return Err(format!(
            "unknown command `{command}` (expected check, explore, list-mutants or help)"
        ));
    }
    let mut preset: Option<String> = None;
    let mut clients: Option<usize> = None;
    let mut resources: Option<usize> = None;
    let mut ticks: Option<u64> = None;
    let mut ttl: Option<u64> = None;
    let mut limit: Option<Option<u32>> = None;
    let mut renew_margin: Option<u64> = None;
    let mut margin: Option<u64> = None;
    let mut grants: Option<u64> = None;
    let mut rates: Option<Vec<Rate>> = None;
    let (mut pauses, mut crashes, mut writes) = (None, None, None);
    let mut symmetry = true;
    let mut mode: Option<Mode> = None;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut timeout = None;
    let mut port = 3000u16;
    let set_mode = |m: Mode, mode: &mut Option<Mode>| {
        if mode.is_some_and(|old| old != m) {
            return Err("choose one of --bfs, --dfs and --simulate".to_string());
        }
        *mode = Some(m);
        Ok(())
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--preset" => preset = Some(parse(&flag, it.next())?),
            "--clients" => clients = Some(parse(&flag, it.next())?),
            "--resources" => resources = Some(parse(&flag, it.next())?),
            "--ticks" => ticks = Some(parse(&flag, it.next())?),
            "--ttl" => ttl = Some(parse(&flag, it.next())?),
            "--limit" => {
                let v: String = parse(&flag, it.next())?;
                limit = Some(if v == "none" {
                    None
                } else {
                    Some(parse(&flag, Some(v))?)
                });
            }
            "--renew-margin" => renew_margin = Some(parse(&flag, it.next())?),
            "--margin" => margin = Some(parse(&flag, it.next())?),
            "--rates" => {
                let v: String = parse(&flag, it.next())?;
                rates = Some(
                    v.split(',')
                        .map(|r| {
                            r.trim()
                                .parse::<Rate>()
                                .map_err(|e| format!("--rates: {e}"))
                        })
                        .collect::<Result<_, _>>()?,
                );
            }
            "--grants-per-ms" => grants = Some(parse(&flag, it.next())?),
            "--pauses" => pauses = Some(true),
            "--no-pauses" => pauses = Some(false),
            "--crashes" => crashes = Some(true),
            "--no-crashes" => crashes = Some(false),
            "--writes" => writes = Some(true),
            "--no-writes" => writes = Some(false),
            "--no-symmetry" => symmetry = false,
            "--bfs" => set_mode(Mode::Bfs, &mut mode)?,
            "--dfs" => set_mode(Mode::Dfs, &mut mode)?,
            "--simulate" => set_mode(Mode::Simulate(parse(&flag, it.next())?), &mut mode)?,
            "--threads" => {
                threads = parse(&flag, it.next())?;
                if threads == 0 {
                    return Err("--threads must be at least 1".into());
                }
            }
            "--timeout" => timeout = Some(Duration::from_secs(parse(&flag, it.next())?)),
            "--port" => port = parse(&flag, it.next())?,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    let mut config = match preset.as_deref() {
        None | Some("faults") => Config::ci_faults(),
        Some("ci") => Config::ci(),
        Some("three") => Config::three_clients(),
        Some(other) => {
            return Err(format!(
                "--preset: unknown preset `{other}` (ci, faults or three)"
            ));
        }
    };
    if let Some(n) = clients {
        config.rates = vec![Rate::SLOW; n];
    }
    if let Some(rates) = rates {
        let n = config.rates.len();
        config.rates = match rates.len() {
            1 => vec![rates[0]; n],
            k if k == n => rates,
            k => {
                return Err(format!(
                    "--rates: {k} rates given for {n} clients (give one, or one per client)"
                ));
            }
        };
    }
    if let Some(r) = resources {
        config.resources = r;
    }
    if let Some(t) = ticks {
        config.ticks = t;
    }
    if let Some(ttl) = ttl {
        config.ttl = lockwright_engine::Ttl::new(Duration::from_millis(ttl))
            .map_err(|e| format!("--ttl: {e}"))?;
    }
    if let Some(limit) = limit {
        config.shared_limit = limit
            .map(SharedLimit::new)
            .transpose()
            .map_err(|e| format!("--limit: {e}"))?;
    }
    if let Some(m) = renew_margin {
        config.renew_margin = Duration::from_millis(m);
    }
    config.drift_margin = Duration::from_millis(margin.unwrap_or(config.required_drift_margin()));
    if let Some(g) = grants {
        if g == 0 {
            return Err("--grants-per-ms must be at least 1".into());
        }
        config.grants_per_ms = g;
    }
    config.pauses = pauses.unwrap_or(config.pauses);
    config.crashes = crashes.unwrap_or(config.crashes);
    config.writes = writes.unwrap_or(config.writes);
    config.symmetry = symmetry;
    config.validate().map_err(|e| e.to_string())?;
    if command == "explore" && mode.is_some() {
        return Err("explore takes no --bfs, --dfs or --simulate".into());
    }
    if let Some(Mode::Simulate(_)) = mode {
        timeout = timeout.or(Some(Duration::from_secs(10)));
    }
    Ok(Args {
        command,
        config,
        mode: mode.unwrap_or(Mode::Bfs),
        threads,
        timeout,
        port,
    })
}

fn describe(config: &Config) -> String {
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
         crashes {}, downstream writes {}, symmetry reduction {}",
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
    )
}

fn per_second(count: usize, elapsed: Duration) -> String {
    let rate = count as f64 / elapsed.as_secs_f64().max(1e-9);
    if rate >= 1e6 {
        format!("{:.2}M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1}k", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

fn check(args: &Args) -> bool {
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

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut args = match parse_args(raw) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if matches!(args.command.as_str(), "help" | "--help" | "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    #[cfg(not(lockwright_mutants))]
    if args.command == "list-mutants" {
        eprintln!(
            "this build has no mutants: build it with RUSTFLAGS=\"--cfg lockwright_mutants\" \
             (scripts/mutants does)"
        );
        return ExitCode::FAILURE;
    }
    #[cfg(lockwright_mutants)]
    if args.command == "list-mutants" {
        // One line per mutant: its name, what it breaks (the engine's rules, MongoDB's
        // pipelines or the Locker's state machine), and whether the model checks that rule.
        // The kill-matrix script requires the model checker to kill the modelled ones, two
        // MongoDB harnesses each pipeline one, and the simulator each Locker one.
        for m in lockwright_engine::mutants::Mutant::ALL {
            let kind = if m.is_pipeline() {
                "pipeline"
            } else if m.is_locker() {
                "locker"
            } else {
                "engine"
            };
            let scope = if m.is_modelled() {
                "modelled"
            } else {
                "unmodelled"
            };
            println!("{} {kind} {scope}", m.name());
        }
        return ExitCode::SUCCESS;
    }
    #[cfg(lockwright_mutants)]
    if let Some(m) = lockwright_engine::mutants::activate_from_env() {
        println!("Engine mutant active: {}", m.name());
    }
    if args.command == "explore" {
        // The Explorer shows the checker's own states: without the reduction, client numbers
        // stay the same from one step to the next.
        args.config.symmetry = false;
    }
    println!("Lockwright model: {}", describe(&args.config));
    if args.config.drift_margin.as_millis() < u128::from(args.config.required_drift_margin()) {
        println!(
            "Note: the drift margin is below what these clocks need; expect holder_safety to fail."
        );
    }
    match args.command.as_str() {
        "explore" => {
            let addr = format!("127.0.0.1:{}", args.port);
            println!(
                "Serving the stateright Explorer on http://{addr}/ (symmetry reduction off, so client numbers stay stable; Ctrl-C to stop)"
            );
            let _ = LockModel::new(args.config.clone())
                .checker()
                .threads(args.threads)
                .serve(addr);
            ExitCode::SUCCESS
        }
        _ => {
            if check(&args) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}
