//! Exhaustive checks of the Lockwright model in CI-sized configurations: every property
//! holds and every non-vacuity witness is reached, the state count is pinned, symmetry
//! reduction is sound where it applies and neutral where it does not, and the holding rule
//! fails without its drift margin.
//!
//! The kill-matrix script runs `properties_hold_ci` with `LOCKWRIGHT_MUTANT=<name>` and the
//! `mutants` feature: every mutant the model covers must make it fail.
// A test fails by panicking; unwrapping the checker's own results is the plain way to say so.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lockwright_model::props::ALWAYS;
use lockwright_model::trace::{self, render, replay, until_first_violation};
use lockwright_model::{Action, Config, LockModel, Rate};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// The unique states of an exhaustive search of [`Config::ci`] (with symmetry reduction).
const CI_UNIQUE_STATES: usize = 120_418;

/// Switches on the engine mutant named by `LOCKWRIGHT_MUTANT`, if any (kill-matrix runs).
fn setup() {
    #[cfg(lockwright_mutants)]
    if let Some(m) = lockwright_engine::mutants::activate_from_env() {
        eprintln!("engine mutant active: {}", m.name());
    }
}

/// What one search found.
struct Outcome {
    unique: usize,
    done: bool,
    /// Every discovery: property name and the actions of its path.
    found: Vec<(&'static str, Vec<Action>)>,
}

impl Outcome {
    fn path(&self, name: &str) -> Option<&Vec<Action>> {
        self.found.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
    }
}

fn search(config: &Config, finish: HasDiscoveries, dfs: bool, builtin_symmetry: bool) -> Outcome {
    let model = LockModel::new(config.clone());
    let start = Instant::now();
    let mut builder = model.checker().threads(2).finish_when(finish);
    if builtin_symmetry {
        builder = builder.symmetry();
    }
    let (unique, generated, done, found) = if dfs {
        let c = builder.spawn_dfs().join();
        (
            c.unique_state_count(),
            c.state_count(),
            c.is_done(),
            c.discoveries(),
        )
    } else {
        let c = builder.spawn_bfs().join();
        (
            c.unique_state_count(),
            c.state_count(),
            c.is_done(),
            c.discoveries(),
        )
    };
    eprintln!(
        "{} unique states ({generated} generated) in {:.2} s",
        unique,
        start.elapsed().as_secs_f64()
    );
    Outcome {
        unique,
        done,
        found: found
            .into_iter()
            .map(|(name, path)| (name, path.into_actions()))
            .collect(),
    }
}

fn bfs(config: &Config) -> Outcome {
    search(config, HasDiscoveries::AnyFailures, false, false)
}

/// The readable counterexample for `name`, cut back to where it first fails.
fn counterexample(config: &Config, outcome: &Outcome, name: &str) -> Option<String> {
    let model = LockModel::new(config.clone());
    let actions = outcome.path(name)?;
    let steps = until_first_violation(&model, replay(&model, actions), name);
    Some(render(&model, &steps))
}

fn assert_all_hold(config: &Config, outcome: &Outcome) {
    let failures: Vec<String> = ALWAYS
        .iter()
        .filter_map(|name| {
            counterexample(config, outcome, name).map(|t| format!("{name} is violated:\n{t}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(outcome.done, "the search did not finish");
    let reached: HashSet<&str> = outcome.found.iter().map(|(n, _)| *n).collect();
    let missing: Vec<&str> = LockModel::new(config.clone())
        .properties()
        .iter()
        .filter(|p| p.expectation == Expectation::Sometimes && !reached.contains(p.name))
        .map(|p| p.name)
        .collect();
    assert!(missing.is_empty(), "never reached: {missing:?}");
}

/// The search of the CI configuration, shared by the tests of this binary.
fn ci() -> &'static Outcome {
    static CI: OnceLock<Outcome> = OnceLock::new();
    CI.get_or_init(|| bfs(&Config::ci()))
}

/// Two clients, one resource, no faults: small enough to search several ways.
fn small(rates: [Rate; 2]) -> Config {
    let mut config = Config::ci();
    config.rates = rates.to_vec();
    config.resources = 1;
    config.drift_margin = Duration::from_millis(config.required_drift_margin());
    config
}

#[test]
fn properties_hold_ci() {
    setup();
    assert_all_hold(&Config::ci(), ci());
}

#[test]
fn properties_hold_with_faults_ci() {
    setup();
    let config = Config::ci_faults();
    assert_all_hold(&config, &bfs(&config));
}

#[test]
fn unique_state_count_ci() {
    setup();
    assert!(ci().done);
    assert_eq!(ci().unique, CI_UNIQUE_STATES);
}

#[test]
fn symmetry_reduces_clients_with_equal_rates() {
    setup();
    let mut plain = small([Rate::SLOW, Rate::SLOW]);
    plain.symmetry = false;
    let full = bfs(&plain);
    let reduced_config = Config {
        symmetry: true,
        ..plain.clone()
    };
    let reduced = bfs(&reduced_config);
    // stateright's own symmetry reduction (DFS, `Representative`) over the unreduced model
    // keeps the same classes as the model's reduction inside its transitions.
    let builtin = search(&plain, HasDiscoveries::AnyFailures, true, true);
    assert!(full.done && reduced.done && builtin.done);
    assert!(
        reduced.unique < full.unique,
        "{} reduced vs {} unreduced",
        reduced.unique,
        full.unique
    );
    assert_eq!(builtin.unique, reduced.unique);
    assert_all_hold(&plain, &full);
    assert_all_hold(&reduced_config, &reduced);
}

#[test]
fn symmetry_changes_nothing_between_different_rates() {
    setup();
    let mut plain = small([Rate::SLOW, Rate::NORMAL]);
    plain.symmetry = false;
    let full = bfs(&plain);
    let reduced = bfs(&Config {
        symmetry: true,
        ..plain.clone()
    });
    assert!(full.done && reduced.done);
    assert_eq!(reduced.unique, full.unique);
    assert_all_hold(&plain, &full);
}

#[test]
fn holder_safety_needs_the_margin() {
    setup();
    let mut config = Config::ci();
    config.drift_margin = Duration::ZERO;
    let model = LockModel::new(config);
    let steps = trace::counterexample(&model, "holder_safety")
        .expect("without the drift margin, holder_safety must fail");
    let trace = render(&model, &steps);
    println!("holder_safety without the drift margin:\n{trace}");
    assert!(trace.contains("breaks: holder_safety"), "{trace}");
}

#[test]
fn replayed_traces_keep_client_numbers_stable() {
    setup();
    // Clients with different rates, so that the reduction reorders them (by rate) in every
    // state the checker stores; the replay must undo that and stay a run of the model.
    let mut config = small([Rate::SLOW, Rate::NORMAL]);
    config.drift_margin = Duration::ZERO;
    let outcome = search(
        &config,
        HasDiscoveries::AnyOf(BTreeSet::from(["holder_safety"])),
        false,
        false,
    );
    let model = LockModel::new(config.clone());
    let actions = outcome.path("holder_safety").unwrap();
    let steps = replay(&model, actions);
    let mut unreduced = config;
    unreduced.symmetry = false;
    let plain = LockModel::new(unreduced);
    for pair in steps.windows(2) {
        let (next, _) = plain.step(&pair[0].state, pair[1].action.unwrap());
        assert_eq!(
            next, pair[1].state,
            "each replayed step is a step of the model"
        );
    }
    assert_eq!(
        steps[0].state.clients[0].rate,
        Rate::SLOW,
        "c0 keeps its rate"
    );
}
