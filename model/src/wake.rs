//! Wakes ([`Config::wakes`](crate::Config::wakes)): a lock a step hands to a place is a
//! message in flight to the waiter whose place it names, which hears it at any later step,
//! once or twice, and trusts the lock by the Locker's own rule (`trust::trust_wake`).

use std::time::Duration;

use lockwright_engine::resource::Handed;
use lockwright_engine::{LocalMs, Timestamp, trust};

use crate::effect::Effect;
use crate::model::LockModel;
use crate::state::{Belief, LockState, WakeMsg, parse_ticket};

impl LockModel {
    /// After a step: each lock the step handed to a place becomes a wake in flight to the
    /// waiter whose place it is, and a client that waits no more drops its wakes.
    pub(crate) fn send_wakes(&self, next: &mut LockState, handed: Vec<Handed>) {
        for h in handed {
            let Some((client, n)) = parse_ticket(&h.ticket) else {
                continue;
            };
            let c = &mut next.clients[client];
            if c.wait.is_some_and(|w| w.ticket == n) {
                c.wakes.push(WakeMsg {
                    ticket: n,
                    fence: h.status.fence,
                    created_at: h.status.created_at.as_millis(),
                    expires_at: h
                        .status
                        .expires_at
                        .expect("a handed lock has a claim lease")
                        .as_millis(),
                });
                c.wakes.sort_unstable();
            }
        }
        for c in &mut next.clients {
            if c.wait.is_none() {
                c.wakes.clear();
            }
        }
    }

    /// Client `client` hears its wake in flight at `index`: the Locker's rule
    /// (`trust::trust_wake`) decides whether it trusts the lock the wake carries, measured
    /// from when it sent the request whose refusal last kept its place. Its requests are
    /// atomic, so none is in flight; its places are all near (places kept far back are not
    /// modelled). The rule's renew margin is 0 here: one model tick is TTL-sized, and the
    /// margin keeps a claim renewable (liveness), which the model does not judge.
    pub(crate) fn hear(
        &self,
        next: &mut LockState,
        client: usize,
        index: usize,
        again: bool,
    ) -> Effect {
        let c = &mut next.clients[client];
        let wake = if again {
            c.wakes[index]
        } else {
            c.wakes.remove(index)
        };
        let now = c.rate.local(next.now);
        let wait = c.wait.expect("only a waiting client has wakes in flight");
        let trusted = wait
            .kept_at
            .filter(|_| wait.ticket == wake.ticket)
            .and_then(|kept_at| {
                let heard = trust::Wake {
                    in_flight: false,
                    kept_far: false,
                    kept_at: LocalMs(kept_at),
                    place_fence: wait.fence,
                    fence: wake.fence,
                    created_at: Timestamp::from_millis(wake.created_at),
                    expires_at: Some(Timestamp::from_millis(wake.expires_at)),
                };
                let rule = trust::WakeRule {
                    queue_ttl: self.config().queue_ttl.as_duration(),
                    ttl: self.config().ttl,
                    renew_fraction: 0.5,
                    renew_margin: Duration::ZERO,
                    drift_margin: self.config().drift_margin,
                };
                trust::trust_wake(&heard, &rule, LocalMs(now)).map(|(_, _, until)| until.0)
            });
        if let Some(t) = trusted {
            c.beliefs[wait.resource] = Some(Belief {
                mode: wait.mode,
                fence: wake.fence,
            });
            c.trust_until = Some(c.trust_until.map_or(t, |old| old.min(t)));
            c.wait = None;
            c.wakes.clear();
        }
        Effect::HeardWake {
            resource: wait.resource,
            fence: wake.fence,
            trust_until: trusted,
        }
    }
}
