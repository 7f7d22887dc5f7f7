//! One step as the checker takes it: [`LockModel::step`] applies an action (the
//! transitions of [`crate::model`]) and judges the step against the step properties
//! ([`crate::props::judge`]), and [`stateright::Model`] for [`LockModel`] joins the
//! transitions, the step and the properties ([`crate::props::properties`]). Kept apart
//! from the transitions so that the properties, which read the model's configuration, and
//! the transitions do not import each other.

use stateright::{Model, Property};

use crate::action::{Action, Effect};
use crate::model::LockModel;
use crate::props::{self, Transition};
use crate::state::{LockState, Verdict};

impl LockModel {
    /// Applies `action` to `state` (no symmetry reduction), judges the transition against
    /// the transition properties, and returns the next state and what the engine answered.
    #[must_use]
    pub fn step(&self, state: &LockState, action: Action) -> (LockState, Effect) {
        let mut next = state.clone();
        next.last = Verdict::default();
        let effect = self.apply(&mut next, action);
        // The properties restate handoffs from the states; with wakes, each handoff is a
        // wake in flight to the waiter whose place it names (a waiter whose wait ended
        // drops its wakes: they name places of an acquire that is over).
        let handed = next.table.take_handed();
        if self.config().wakes {
            self.send_wakes(&mut next, handed);
        }
        next.fence_clock = self.fence_clock_key(&next);
        next.last = props::judge(&Transition {
            model: self,
            before: state,
            action,
            after: &next,
            effect: &effect,
        });
        (next, effect)
    }
}

impl Model for LockModel {
    type State = LockState;
    type Action = Action;

    fn init_states(&self) -> Vec<LockState> {
        vec![self.normalize(self.raw_initial()).0]
    }

    fn actions(&self, state: &LockState, actions: &mut Vec<Action>) {
        self.possible_actions(state, actions);
    }

    fn next_state(&self, last_state: &LockState, action: Action) -> Option<LockState> {
        let (next, _) = self.step(last_state, action);
        Some(self.normalize(next).0)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn format_step(&self, last_state: &LockState, action: Action) -> Option<String> {
        let (next, effect) = self.step(last_state, action);
        let broken = next.last.broken;
        let verdict = if broken.is_empty() {
            String::new()
        } else {
            format!("BREAKS: {broken}\n")
        };
        Some(format!(
            "{action}: {effect}\n{verdict}{}",
            self.normalize(next).0
        ))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        props::properties(self.config())
    }
}
