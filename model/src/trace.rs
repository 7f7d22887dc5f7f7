//! Readable traces: a path the checker found, replayed step by step with client numbering
//! kept stable (under symmetry reduction the checker's own states may rename clients from
//! one step to the next; the replay undoes that).

use std::fmt::Write as _;

use std::collections::BTreeSet;

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::action::{Action, Effect};
use crate::model::LockModel;
use crate::state::LockState;

/// One step of a replayed trace.
#[derive(Clone, Debug)]
pub struct TraceStep {
    /// The action taken (`None` for the initial state).
    pub action: Option<Action>,
    /// What the engine answered.
    pub effect: Option<Effect>,
    /// The state after the step.
    pub state: LockState,
}

/// Replays `actions`, as the checker recorded them (each relative to the checker's own
/// previous state), from the initial state, and returns the steps with the clients numbered
/// as in the configuration.
#[must_use]
pub fn replay(model: &LockModel, actions: &[Action]) -> Vec<TraceStep> {
    let initial = model.raw_initial();
    let (mut checked, mut perm) = model.normalize(initial.clone());
    let mut real = initial;
    let mut steps = vec![TraceStep {
        action: None,
        effect: None,
        state: real.clone(),
    }];
    for &action in actions {
        // `perm[i]`: the index in `real` of the client at index `i` of `checked`.
        let real_action = action.map_client(|c| perm[c]);
        let (next_real, effect) = model.step(&real, real_action);
        let (next_checked, step_perm) = model.normalize(model.step(&checked, action).0);
        perm = step_perm.iter().map(|&k| perm[k]).collect();
        checked = next_checked;
        real = next_real;
        steps.push(TraceStep {
            action: Some(real_action),
            effect: Some(effect),
            state: real.clone(),
        });
    }
    steps
}

/// `steps` up to and including the first state that breaks `property` (all of them when
/// none does). The checker reports the last violating state it met, not the first, so a
/// counterexample is cut back to where the property first fails.
#[must_use]
pub fn until_first_violation(
    model: &LockModel,
    mut steps: Vec<TraceStep>,
    property: &str,
) -> Vec<TraceStep> {
    let Some(p) = model.properties().into_iter().find(|p| p.name == property) else {
        return steps;
    };
    if let Some(i) = steps.iter().position(|s| !(p.condition)(model, &s.state)) {
        steps.truncate(i + 1);
    }
    steps
}

/// A short counterexample for the `always` property `property`, replayed and cut back to
/// its first violation, or `None` when the property holds in the whole state space.
///
/// It runs its own breadth-first search on one thread that stops at the first violation of
/// `property`, so the path is as short as breadth-first order makes it (a search that goes on
/// after a violation reports the last violating state it met, often a much longer path).
#[must_use]
pub fn counterexample(model: &LockModel, property: &'static str) -> Option<Vec<TraceStep>> {
    let checker = model
        .clone()
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property)?;
    let steps = replay(model, &path.into_actions());
    Some(until_first_violation(model, steps, property))
}

/// The `always` properties `state` breaks.
#[must_use]
pub fn broken_properties(model: &LockModel, state: &LockState) -> Vec<&'static str> {
    model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Always && !(p.condition)(model, state))
        .map(|p| p.name)
        .collect()
}

/// A numbered, readable trace: per step the real time (and the store's clock, once a
/// failover may have moved it), who did what and what the engine
/// answered, then every client's clock, lock id and beliefs, the store and the downstream
/// store; the last step names the properties it breaks.
#[must_use]
pub fn render(model: &LockModel, steps: &[TraceStep]) -> String {
    let mut out = String::new();
    for (i, step) in steps.iter().enumerate() {
        let what = match (&step.action, &step.effect) {
            (Some(a), Some(Effect::Nothing)) | (Some(a), None) => a.to_string(),
            (Some(a), Some(e)) => format!("{a} -> {e}"),
            (None, _) => "initial state".to_string(),
        };
        let clock = if step.state.offset > 0 || step.state.failovers > 0 {
            format!(" (store {} ms)", step.state.store_now())
        } else {
            String::new()
        };
        let _ = writeln!(out, "{i:>3}. t={} ms{clock}: {what}", step.state.now);
        for line in step.state.to_string().lines().skip(1) {
            let _ = writeln!(out, "       {}", line.trim_start());
        }
        if i + 1 == steps.len() {
            let broken = broken_properties(model, &step.state);
            if !broken.is_empty() {
                let _ = writeln!(out, "       ==> breaks: {}", broken.join(", "));
            }
        }
    }
    out
}
