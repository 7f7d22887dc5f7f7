//! An election's own transitions: a proclaim, the observer's reads and their answers
//! (the state they act on, each candidate's value and the observer, is in
//! [`crate::state`]: [`value_word`], [`Observing`]).

use lockwright_engine::election::{Leader, leader_of};
use lockwright_engine::{Filter, Timestamp};

use crate::action::{Action, Effect};
use crate::model::LockModel;
use crate::state::{LockState, Observing, READS, resource, value_word};

impl Observing {
    /// The observer's possible actions: a read when a slot is free (the first free one:
    /// slots are alike), and the answer of each read in flight.
    pub(crate) fn possible_actions(&self, reads: u8, actions: &mut Vec<Action>) {
        if self.free_slot().is_some() && self.sent < reads {
            actions.push(Action::ObserveRead);
        }
        // An answer changes nothing but the observer, whose reports depend only on the
        // order the answers come in: they come once every read is sent (in any order), not
        // at every point in between, which would multiply states and add no behaviour.
        if self.sent == reads {
            for slot in (0..READS).filter(|&s| self.reads[s].is_some()) {
                actions.push(Action::ObserveDeliver { slot });
            }
        }
    }
}

impl LockModel {
    /// Applies an election's own action (a proclaim, the observer's read or its answer) to
    /// `next`, at the store's instant `now`.
    pub(crate) fn apply_election(
        &self,
        next: &mut LockState,
        action: Action,
        now: Timestamp,
    ) -> Effect {
        match action {
            Action::Proclaim { client } => {
                let value = 1 - next.clients[client].value;
                let outcome = next
                    .table
                    .set_comment(
                        resource(0),
                        next.lock_id_of(client),
                        Some(value_word(value).to_owned()),
                        now,
                    )
                    .map_err(|e| e.to_string());
                if outcome.is_ok() {
                    next.clients[client].value = value;
                }
                Effect::Proclaimed { value, outcome }
            }
            Action::ObserveRead => {
                let filter = Filter::new().resource(resource(0).as_str());
                let leader = leader_of(&next.table.status(&filter, now));
                let o = &mut next.observing;
                let slot = o.free_slot().expect("a read is sent only into a free slot");
                o.reads[slot] = Some(leader.as_ref().map(|l| l.fence));
                o.sent += 1;
                Effect::ObserveSent { leader }
            }
            Action::ObserveDeliver { slot } => {
                let o = &mut next.observing;
                let read = o.reads[slot].take().expect("only a read in flight answers");
                let read = read.map(|fence| Leader::new(None, fence, Timestamp::from_millis(0)));
                let reported = read.clone().and_then(|l| o.observer.see(l));
                let highest_before = o.highest;
                if let Some(l) = &reported {
                    o.highest = Some(o.highest.map_or(l.fence, |h| h.max(l.fence)));
                }
                Effect::Observed {
                    read,
                    reported,
                    highest_before,
                }
            }
            _ => unreachable!("not an election's action: {action}"),
        }
    }
}
