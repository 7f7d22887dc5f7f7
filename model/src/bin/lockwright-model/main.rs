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

mod args;
mod check;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use lockwright_model::LockModel;
use stateright::Model;

use args::{Cli, Command, Search};
use check::{Args, Mode, check, describe};

/// The usage error for the subcommand `name`: clap's message format and exit status 2.
fn usage_error(name: &str, message: String) -> ! {
    let mut cli = Cli::command();
    cli.build();
    match cli.find_subcommand_mut(name) {
        Some(sub) => sub.error(ErrorKind::ValueValidation, message).exit(),
        None => cli.error(ErrorKind::ValueValidation, message).exit(),
    }
}

fn main() -> ExitCode {
    let (name, model, search, timeout, port) = match Cli::parse().command {
        Command::Check {
            model,
            search,
            timeout,
        } => ("check", model, Some(search), timeout, None),
        Command::Explore { model, port } => ("explore", model, None, None, Some(port)),
        Command::ListMutants => return list_mutants(),
    };
    let (config, threads) = match (model.config(), model.threads()) {
        (Ok(config), Ok(threads)) => (config, threads),
        (Err(e), _) | (_, Err(e)) => usage_error(name, e),
    };
    let mode = match search {
        Some(Search {
            simulate: Some(seed),
            ..
        }) => Mode::Simulate(seed),
        Some(Search { dfs: true, .. }) => Mode::Dfs,
        _ => Mode::Bfs,
    };
    let timeout = match mode {
        Mode::Simulate(_) => Some(timeout.unwrap_or(10)),
        Mode::Bfs | Mode::Dfs => timeout,
    }
    .map(Duration::from_secs);
    let mut args = Args {
        config,
        mode,
        threads,
        timeout,
    };
    #[cfg(lockwright_mutants)]
    if let Some(m) = lockwright_engine::mutants::activate_from_env() {
        println!("Engine mutant active: {}", m.name());
    }
    if port.is_some() {
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
    if args.config.has_failovers() && args.config.grace_ms() < args.config.skew {
        println!(
            "Note: the takeover grace is below the skew between the store's clocks; expect \
             holder_safety to fail."
        );
    }
    match port {
        Some(port) => {
            let addr = format!("127.0.0.1:{port}");
            println!(
                "Serving the stateright Explorer on http://{addr}/ (symmetry reduction off, so client numbers stay stable; Ctrl-C to stop)"
            );
            let _ = LockModel::new(args.config.clone())
                .checker()
                .threads(args.threads)
                .serve(addr);
            ExitCode::SUCCESS
        }
        None => {
            if check(&args) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// `list-mutants`: one line per mutant, or an error in a build without them.
#[cfg(not(lockwright_mutants))]
fn list_mutants() -> ExitCode {
    eprintln!(
        "this build has no mutants: build it with RUSTFLAGS=\"--cfg lockwright_mutants\" \
         (scripts/mutants does)"
    );
    ExitCode::FAILURE
}

/// `list-mutants`: one line per mutant, or an error in a build without them.
#[cfg(lockwright_mutants)]
fn list_mutants() -> ExitCode {
    // One line per mutant of the engine's catalogue: its name, what it breaks (the engine's
    // rules, the wake rule, the Locker's state machine, leader election's own rules, the queue of fair
    // requests, the holding rule, or the status filter's TTL bounds),
    // and whether the model checks that rule. The kill-matrix script requires the model
    // checker to kill the modelled ones and the simulator each Locker one; the MongoDB store
    // lists its own (`lockwright-mongod list-mutants`).
    for m in lockwright_engine::mutants::Mutant::ALL {
        let kind = if m.is_wake() {
            "wake"
        } else if m.is_locker() {
            "locker"
        } else if m.is_election() {
            "election"
        } else if m.is_queue() {
            "queue"
        } else if m.is_holding() {
            "holder"
        } else if m.is_status() {
            "status"
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
    ExitCode::SUCCESS
}
