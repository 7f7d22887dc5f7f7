//! Exhaustive checks of the Lockwright model in CI-sized configurations: every property
//! holds and every non-vacuity witness is reached, the state counts are pinned, symmetry
//! reduction is sound where it applies and neutral where it does not, the holding rule
//! fails without its drift margin, and, across failovers whose store clocks disagree, holds
//! with a takeover grace at least the skew and fails with less; and the queue of fair
//! requests keeps its order (`fifo`), lets the waiter at its head in (`no_starvation`) and
//! holds the places the rules give (`queue_places`).
//!
//! The kill-matrix script runs the tests whose names contain `properties_hold_ci`
//! (`properties_hold_ci`, `properties_hold_ci_skew`, `properties_hold_ci_fair`,
//! `properties_hold_ci_wakes` and the others: cargo's filter is a substring) with
//! `LOCKWRIGHT_MUTANT=<name>` and the `mutants` feature: every mutant the model covers must
//! make one of them fail.
// A test fails by panicking; unwrapping the checker's own results is the plain way to say so.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lockwright_model::props::ALWAYS;
use lockwright_model::trace::{self, render, replay, until_first_violation};
use lockwright_model::{Action, Config, FenceClockKey, LockModel, LockState, Rate};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// The unique states of an exhaustive search of [`Config::ci`] (with symmetry reduction).
/// 120,418 before the engine's fence clock: a grant refused in a later millisecond than a
/// begun purge raises the fence clock, and with it what that purge's deletion removes, so
/// such states are told apart now (`LockState::fence_clock`).
const CI_UNIQUE_STATES: usize = 127_006;

/// The unique states of an exhaustive search of [`Config::ci_skew`].
const CI_SKEW_UNIQUE_STATES: usize = 20_894;

/// The unique states of an exhaustive search of [`Config::ci_fair`].
const CI_FAIR_UNIQUE_STATES: usize = 60_481;

/// The unique states of an exhaustive search of [`Config::ci_handoff`].
const CI_HANDOFF_UNIQUE_STATES: usize = 155_343;

/// The unique states of an exhaustive search of [`Config::ci_wakes`].
const CI_WAKES_UNIQUE_STATES: usize = 49_086;

/// The unique states of an exhaustive search of [`Config::ci_election`].
const CI_ELECTION_UNIQUE_STATES: usize = 43_071;

/// The unique states of an exhaustive search of [`Config::ci_observe`].
const CI_OBSERVE_UNIQUE_STATES: usize = 80_665;

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

/// Failovers between store members 1 ms apart, with a takeover grace of 1 ms: every
/// property holds. Run by the kill matrix too (its name contains `properties_hold_ci`): the
/// only configuration with a grace, so the one to kill `takeover_ignores_grace`.
#[test]
fn properties_hold_ci_skew() {
    setup();
    let config = Config::ci_skew();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_SKEW_UNIQUE_STATES);
}

/// The queue of fair requests: plain and fair requests, tickets kept across attempts,
/// leaving the queue and dying while waiting; `fifo`, `no_starvation` and `queue_places`
/// hold with every other property, and every queue witness is reached. Run by the kill
/// matrix too (its name contains `properties_hold_ci`): the only configuration with fair
/// requests, so the one to kill the queue mutants.
#[test]
fn properties_hold_ci_fair() {
    setup();
    let config = Config::ci_fair();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_FAIR_UNIQUE_STATES);
}

#[test]
fn properties_hold_ci_handoff() {
    setup();
    let config = Config::ci_handoff();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_HANDOFF_UNIQUE_STATES);
}

/// Wakes that hand a lock, heard late, twice or out of order, and trusted by the Locker's
/// own rule (`trust::trust_wake`): holder safety holds. The kill matrix runs it against the
/// rule's mutants (the wake trusted from its arrival, for the TTL, or with a fence its
/// place's refusal already accounted for), each of which breaks `holder_safety` here.
#[test]
fn properties_hold_ci_wakes() {
    setup();
    let config = Config::ci_wakes();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_WAKES_UNIQUE_STATES);
}

#[test]
fn properties_hold_ci_election() {
    setup();
    let config = Config::ci_election();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_ELECTION_UNIQUE_STATES);
}

#[test]
fn properties_hold_ci_observe() {
    setup();
    let config = Config::ci_observe();
    let outcome = bfs(&config);
    assert_all_hold(&config, &outcome);
    assert_eq!(outcome.unique, CI_OBSERVE_UNIQUE_STATES);
}

/// The holder's counterexample for `property` in `config`, rendered; fails when there is none.
fn must_break(config: Config, property: &'static str, why: &str) -> String {
    let model = LockModel::new(config);
    let steps = trace::counterexample(&model, property)
        .unwrap_or_else(|| panic!("{why}: {property} must fail"));
    let trace = render(&model, &steps);
    assert!(trace.contains(&format!("breaks: {property}")), "{trace}");
    trace
}

#[test]
fn skew_beyond_the_grace_breaks_holder_safety() {
    setup();
    // No grace, members 1 ms apart: a failover to the member ahead expires a lease 1 ms
    // early, and another client takes it while its holder still trusts it.
    let mut config = Config::ci_skew();
    config.grace = Duration::ZERO;
    let trace = must_break(
        config,
        "holder_safety",
        "with no grace and a skewed store clock",
    );
    println!("holder_safety with a skew beyond the grace:\n{trace}");
    assert!(trace.contains("jumps 1 ms forward"), "{trace}");
    // Members 2 ms apart with a grace of 1 ms: the same, one millisecond further.
    let mut config = Config::ci_skew();
    config.skew = 2;
    config.ticks = 6;
    must_break(config, "holder_safety", "with a grace below the skew");
}

#[test]
fn skew_within_the_grace_keeps_every_property() {
    setup();
    // Members 2 ms apart with a grace of 2 ms (a larger jump than CI's configuration).
    let mut config = Config::ci_skew();
    config.skew = 2;
    config.grace = Duration::from_millis(2);
    config.ticks = 6;
    assert_all_hold(&config, &bfs(&config));
}

#[test]
fn purge_must_check_again_when_the_clock_can_go_back() {
    setup();
    // A purge that finds its groups on a primary whose clock is ahead, and removes them
    // after a failover took the clock back, also removes a lock one of those groups took in
    // between (its creation is before the purge's instant on the new primary's clock).
    // MongoDB's purge checks its groups again in each batch's transaction, as the skew
    // configuration does; without that, holder_safety fails even with the grace.
    let mut config = Config::ci_skew();
    config.purge_rechecks = false;
    let trace = must_break(config, "holder_safety", "a purge that does not check again");
    assert!(trace.contains("jumps 1 ms back"), "{trace}");
}

/// Explores `model` breadth-first with our own search, keeping the whole fence clock in each
/// state (`exact`) or the model's key of it.
fn reachable(model: &LockModel, exact: bool) -> HashSet<LockState> {
    let initial = model.init_states();
    let mut seen: HashSet<LockState> = initial.iter().cloned().collect();
    let mut queue: VecDeque<LockState> = initial.into_iter().collect();
    let mut actions = Vec::new();
    while let Some(state) = queue.pop_front() {
        actions.clear();
        model.actions(&state, &mut actions);
        for &action in &actions {
            let (mut next, _) = model.step(&state, action);
            if exact {
                next.fence_clock = FenceClockKey::Exact(next.table.fence_clock());
            }
            let (next, _) = model.normalize(next);
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
    }
    seen
}

#[test]
fn the_fence_clock_key_loses_no_state() {
    setup();
    // The model keeps of the table's fence clock only what can still change an outcome.
    // Keeping all of it must reach the same states, once each is cut down to that key.
    for config in [Config::ci_skew(), {
        let mut c = Config::ci_skew();
        c.purge_rechecks = false;
        c
    }] {
        let model = LockModel::new(config);
        let keyed = reachable(&model, false);
        let exact = reachable(&model, true);
        let cut: HashSet<LockState> = exact
            .iter()
            .map(|s| LockState {
                fence_clock: model.fence_clock_key(s),
                ..s.clone()
            })
            .collect();
        assert!(exact.len() > keyed.len(), "the key merges nothing");
        assert!(
            cut == keyed,
            "{} states cut down vs {} keyed",
            cut.len(),
            keyed.len()
        );
    }
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

/// The reduction renames tickets with their clients (in the queues and the clients'
/// waits): over the fair configuration (to 4 ms), stateright's own reduction over the
/// unreduced model keeps the same classes, and every property holds either way.
#[test]
fn symmetry_renames_tickets() {
    setup();
    let mut plain = Config::ci_fair();
    plain.ticks = 4;
    plain.symmetry = false;
    let full = bfs(&plain);
    let reduced_config = Config {
        symmetry: true,
        ..plain.clone()
    };
    let reduced = bfs(&reduced_config);
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
