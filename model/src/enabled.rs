//! The actions possible in a state: the clients' discipline, faults, the purger, time, and
//! the network's deliveries.

use lockwright_engine::Mode;
use lockwright_engine::Timestamp;
use lockwright_engine::table::fence_floor;

use crate::action::Action;
use crate::model::LockModel;
use crate::state::{LockState, resource};

impl LockModel {
    /// The actions possible in `state`, in a fixed order.
    ///
    /// Clients follow a discipline (the one `Locker` follows by taking a fresh lock id for
    /// every guard): they do not ask again for a resource they believe they hold; they add
    /// to their group only while they trust it, or once it holds nothing in the store (after
    /// losing trust they unlock first, or crash and restart with a new lock id); they renew
    /// only while they trust their group; they write downstream only for an exclusive lock
    /// they trust. A waiting client (refused a fair request) asks for nothing else: it asks
    /// again with its ticket, leaves the queue or dies while waiting (it may still unlock
    /// and renew its group); a client starts a fair wait only while it has no live place.
    pub fn possible_actions(&self, state: &LockState, actions: &mut Vec<Action>) {
        let config = self.config();
        // The floor the next grant's fence starts from: the fence clock, which the grant
        // first raises to the store's clock.
        let floor = state
            .table
            .fence_clock()
            .max(fence_floor(Timestamp::from_millis(state.store_now())));
        let may_grant: Vec<bool> = (0..config.resources)
            .map(|r| {
                state.table.resource(resource(r)).is_none_or(|st| {
                    st.last_fence < floor || st.last_fence - floor + 1 < config.grants_per_ms
                })
            })
            .collect();
        for (client, c) in state.clients.iter().enumerate() {
            let id = state.lock_id_of(client);
            let has_locks = state.has_locks_of(id);
            if c.paused {
                actions.push(Action::Resume { client });
            } else {
                let trusts = c.believes_anything();
                if let Some(w) = c.wait {
                    // A waiting client asks again for what it waits for, with its ticket,
                    // or stops waiting; a lock the store handed its place is one it may
                    // claim (its request renews it, adding nothing to its group).
                    let only_here = state
                        .locks()
                        .all(|(r, _, l)| &l.lock_id != id || r == w.resource);
                    if (trusts || !has_locks || only_here) && may_grant[w.resource] {
                        actions.push(match w.mode {
                            Mode::Exclusive => Action::FairXLock {
                                client,
                                resource: w.resource,
                            },
                            Mode::Shared => Action::FairSLock {
                                client,
                                resource: w.resource,
                            },
                        });
                    }
                    actions.push(Action::Leave { client });
                    actions.push(Action::StopWaiting { client });
                } else if trusts || !has_locks {
                    // A client that died while waiting starts a new wait only once its old
                    // place has lapsed (else dead places of one client would pile up).
                    let fair = config.fair && !state.has_live_place_of_client(client);
                    for (resource, &may) in may_grant.iter().enumerate() {
                        if may && c.beliefs[resource].is_none() {
                            // A candidate only campaigns: fair and exclusive.
                            if !config.election {
                                actions.push(Action::XLock { client, resource });
                                actions.push(Action::SLock { client, resource });
                            }
                            if fair {
                                actions.push(Action::FairXLock { client, resource });
                                if !config.election {
                                    actions.push(Action::FairSLock { client, resource });
                                }
                            }
                        }
                    }
                }
                if trusts || has_locks {
                    actions.push(Action::Unlock { client });
                }
                if trusts {
                    actions.push(Action::Renew { client });
                }
                if config.writes && c.write.is_none() {
                    for resource in 0..config.resources {
                        if state
                            .believed(client, resource)
                            .is_some_and(|b| b.mode == Mode::Exclusive)
                        {
                            actions.push(Action::Write { client, resource });
                        }
                    }
                }
                // A candidate proclaims its second value once, as the leader or late (a
                // proclaim it sent while it led may arrive at any time after).
                if config.proclaims && c.value == 0 {
                    actions.push(Action::Proclaim { client });
                }
                // Pausing matters only to a client that holds something.
                if config.pauses && trusts {
                    actions.push(Action::Pause { client });
                }
            }
            if !c.paused {
                for wake in 0..c.wakes.len() {
                    actions.push(Action::Hear {
                        client,
                        wake,
                        again: false,
                    });
                    actions.push(Action::Hear {
                        client,
                        wake,
                        again: true,
                    });
                }
            }
            if c.write.is_some() {
                actions.push(Action::Deliver { client });
            }
            if config.crashes && (c.believes_anything() || has_locks) {
                actions.push(Action::Crash { client });
            }
        }
        if state.purge.is_none() {
            actions.push(Action::PurgeBegin);
        } else {
            actions.push(Action::PurgeFinish);
        }
        if state.now < config.ticks {
            actions.push(Action::Tick);
        }
        if config.skew > 0 && state.failovers < config.failovers {
            actions.push(Action::Failover);
        }
        if config.observer_reads > 0 {
            state
                .observing
                .possible_actions(config.observer_reads, actions);
        }
    }
}
