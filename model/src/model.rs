//! The transitions: each one calls the engine (`LockTable::lock`, exclusive or shared, plain
//! or fair, `leave_queue`, `unlock`, `renew`, `table::expired_groups`, `purge_groups`,
//! `delete_empty`, `trust::trust_until`) on the model's copy of the store, at the store's
//! clock (real time plus the current primary's offset). The model adds only what is outside
//! the engine: real time, the store clock's offset, client clocks, beliefs and waits
//! (tickets), faults, and the fenced downstream store.

use lockwright_engine::Access;
use lockwright_engine::table::{delete_empty, expired_groups, fence_floor, purge_groups};
use lockwright_engine::{Error, LocalMs, LockOptions, LockRequest, Mode, Ticket, Timestamp, trust};

use crate::action::{Action, Effect};
use crate::config::Config;
use crate::state::value_word;
use crate::state::{
    Belief, FenceClockKey, LockKey, LockState, PendingPurge, Wait, Write, lock_id, resource, ticket,
};

/// The Lockwright model: a [`stateright::Model`] over [`LockState`] and [`Action`].
#[derive(Clone, Debug)]
pub struct LockModel {
    config: Config,
    /// The lock requests of every client, incarnation and resource, built once.
    requests: Vec<LockRequest>,
    incarnations: usize,
}

impl LockModel {
    /// The model of `config`.
    #[must_use]
    pub fn new(config: Config) -> Self {
        let details = LockOptions::new().ttl(config.ttl.as_duration());
        let incarnations = config.resources + 2;
        let mut requests = Vec::new();
        for c in 0..config.clients() {
            for g in 0..incarnations {
                for r in 0..config.resources {
                    let g = u8::try_from(g).expect("few incarnations");
                    requests.push(Self::request(c, g, r, &details));
                }
            }
        }
        LockModel {
            config,
            requests,
            incarnations,
        }
    }

    /// What is checked.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn request(client: usize, incarnation: u8, r: usize, details: &LockOptions) -> LockRequest {
        LockRequest::new(
            resource(r).as_str(),
            lock_id(client, incarnation).as_str(),
            details,
        )
        .expect("model lock requests are valid")
    }

    /// The initial state before symmetry reduction.
    #[must_use]
    pub fn raw_initial(&self) -> LockState {
        let mut state = LockState::initial(&self.config.rates, self.config.resources);
        state.table = std::mem::take(&mut state.table).with_takeover_grace(self.config.grace);
        state
    }

    /// The state as the checker stores it, with the permutation that got it there:
    /// `perm[i]` is the index, in `state`, of the client at index `i` of the result. Without
    /// symmetry reduction, `state` itself and the identity.
    #[must_use]
    pub fn normalize(&self, state: LockState) -> (LockState, Vec<usize>) {
        if self.config.symmetry {
            state.into_canonical()
        } else {
            let n = state.clients.len();
            (state, (0..n).collect())
        }
    }

    /// What of the table's fence clock a state keeps ([`LockState::fence_clock`]): a value
    /// that tells states apart exactly where the table's fence clock can still change an
    /// outcome (the table's own equality and hash leave its fence clock out).
    ///
    /// Every engine call that reads the fence clock first raises it to the fence floor of
    /// its own instant: a grant at the store's instant, a purge's deletion at the purge's
    /// instant. Let `g` be the lowest instant a grant may still be given (real time while a
    /// failover may still take the store's clock back to it, else the store's clock). A
    /// fence clock above the floor of `g` may still raise a fence, and is kept as it is.
    /// Otherwise no grant will see it, and it matters only to the deletion that finishes a
    /// begun purge at `at`, which deletes the empty resources whose counter is below
    /// `max(fence clock, floor(at))`; every resource granted from now on gets a counter at
    /// or above that. So the value kept is the least one at or above `floor(at)` that
    /// deletes the same resources, and with no purge begun, none.
    #[must_use]
    pub fn fence_clock_key(&self, state: &LockState) -> FenceClockKey {
        let may_go_back = self.config.skew > 0 && state.failovers < self.config.failovers;
        let lowest_grant = if may_go_back {
            state.now
        } else {
            state.store_now()
        };
        let clock = state.table.fence_clock();
        if clock > fence_floor(Timestamp::from_millis(lowest_grant)) {
            FenceClockKey::Exact(clock)
        } else if let Some(p) = &state.purge {
            let at = fence_floor(Timestamp::from_millis(p.at));
            let deletes_below = clock.max(at);
            FenceClockKey::PurgeDeletesBelow(
                state
                    .table
                    .resources()
                    .values()
                    .map(|st| st.last_fence)
                    .filter(|&f| f < deletes_below)
                    .max()
                    .map_or(at, |f| at.max(f + 1)),
            )
        } else {
            FenceClockKey::Irrelevant
        }
    }

    /// Applies `action` to `next` (a copy of the state before the step): the engine call and
    /// everything outside the engine that the action changes. Judging the step is
    /// [`LockModel::step`]'s part.
    pub(crate) fn apply(&self, next: &mut LockState, action: Action) -> Effect {
        let now = Timestamp::from_millis(next.store_now());
        match action {
            Action::XLock { client, resource } => {
                self.lock(next, client, resource, Mode::Exclusive, false)
            }
            Action::SLock { client, resource } => {
                self.lock(next, client, resource, Mode::Shared, false)
            }
            Action::FairXLock { client, resource } => {
                self.lock(next, client, resource, Mode::Exclusive, true)
            }
            Action::FairSLock { client, resource } => {
                self.lock(next, client, resource, Mode::Shared, true)
            }
            Action::Leave { client } => {
                let wait = next.clients[client]
                    .wait
                    .take()
                    .expect("only a waiting client leaves the queue");
                let ticket = ticket(client, wait.ticket);
                let had = next.table.leave_queue(resource(wait.resource), ticket, now);
                Effect::Left {
                    resource: wait.resource,
                    ticket: ticket.clone(),
                    had,
                }
            }
            Action::StopWaiting { client } => {
                let wait = next.clients[client]
                    .wait
                    .take()
                    .expect("only a waiting client stops waiting");
                Effect::StoppedWaiting {
                    resource: wait.resource,
                }
            }
            Action::Unlock { client } => {
                let id = next.lock_id_of(client);
                let removed = next.table.unlock(id, now);
                next.clients[client].forget();
                // With wakes, a waiter's lock id is its acquire's alone (as the Locker's
                // is): releasing it gives the acquire up, and no wake of it is trusted after.
                if self.config.wakes {
                    next.clients[client].wait = None;
                }
                Effect::Unlocked {
                    lock_id: id.clone(),
                    removed,
                }
            }
            Action::Renew { client } => {
                let id = next.lock_id_of(client);
                match next
                    .table
                    .renew(id, self.config.ttl, self.config.renew_margin, now)
                {
                    Ok(renewed) => {
                        // The renewal was sent at this local time: the whole group is
                        // trusted anew from it.
                        let local = next.local(client);
                        let c = &mut next.clients[client];
                        let local = LocalMs(local);
                        match trust::trust_until(local, self.config.ttl, self.config.drift_margin)
                            .map(|t| t.0)
                        {
                            Some(t) => c.trust_until = Some(t),
                            None => c.forget(),
                        }
                        Effect::Renewed {
                            lock_id: id.clone(),
                            renewed,
                        }
                    }
                    Err(Error::NotRenewable { locks }) => Effect::NotRenewable {
                        lock_id: id.clone(),
                        locks,
                    },
                    Err(Error::LockNotFound) => Effect::RenewNotFound {
                        lock_id: id.clone(),
                    },
                    Err(other) => panic!("renew failed unexpectedly: {other}"),
                }
            }
            Action::Write { client, resource } => {
                let belief = next.clients[client].beliefs[resource]
                    .expect("a client writes only for a lock it believes it holds");
                next.clients[client].write = Some(Write {
                    resource,
                    fence: belief.fence,
                });
                Effect::WriteSent {
                    resource,
                    fence: belief.fence,
                }
            }
            Action::Deliver { client } => {
                let write = next.clients[client]
                    .write
                    .take()
                    .expect("only a write in flight is delivered");
                let highest = &mut next.downstream[write.resource];
                let highest_before = *highest;
                let accepted = highest.is_none_or(|h| write.fence >= h);
                if accepted {
                    *highest = Some(write.fence);
                }
                // A write still in flight with a fence below the new highest can only be
                // rejected, whenever it arrives: the model rejects it now, so that doomed
                // writes do not multiply states.
                let mut doomed = Vec::new();
                for (other, c) in next.clients.iter_mut().enumerate() {
                    if let Some(w) = c.write
                        && w.resource == write.resource
                        && w.fence < write.fence
                        && accepted
                    {
                        doomed.push((other, w.fence));
                        c.write = None;
                    }
                }
                Effect::Delivered {
                    resource: write.resource,
                    fence: write.fence,
                    highest_before,
                    accepted,
                    doomed,
                }
            }
            Action::Pause { client } => {
                next.clients[client].paused = true;
                Effect::Nothing
            }
            Action::Resume { client } => {
                next.clients[client].paused = false;
                Effect::Nothing
            }
            Action::Crash { client } => {
                let old = next.lock_id_of(client);
                let in_use = |id: &_| {
                    next.has_locks_of(id)
                        || next.purge.as_ref().is_some_and(|p| p.groups.contains(id))
                };
                let incarnation = (0..=u8::MAX)
                    .find(|&g| !in_use(lock_id(client, g)))
                    .expect("fewer than 256 lock ids of one client are ever in use");
                let c = &mut next.clients[client];
                c.incarnation = incarnation;
                c.forget();
                c.paused = false;
                c.wait = None;
                Effect::Crashed {
                    old: old.clone(),
                    new: next.lock_id_of(client).clone(),
                }
            }
            Action::PurgeBegin => {
                let groups = expired_groups(&[&next.table], now);
                let at = next.store_now();
                next.purge = Some(PendingPurge {
                    at,
                    groups: groups.clone(),
                });
                Effect::PurgeBegun { at, groups }
            }
            Action::PurgeFinish => {
                let purge = next.purge.take().expect("only a begun purge finishes");
                let at = Timestamp::from_millis(purge.at);
                let groups = if self.config.purge_rechecks {
                    // As MongoDB's purge batch does in its transaction: only the groups that
                    // still hold a lock abandoned at the purge's instant lose their locks.
                    expired_groups(&[&next.table], at)
                        .intersection(&purge.groups)
                        .cloned()
                        .collect()
                } else {
                    purge.groups
                };
                let removed = purge_groups(&mut [&mut next.table], &groups, at);
                delete_empty(&mut [&mut next.table], at);
                Effect::Purged {
                    at: purge.at,
                    groups,
                    removed,
                }
            }
            Action::Tick => {
                next.now += 1;
                // A client whose trust ran out knows it: it forgets its beliefs.
                for i in 0..next.clients.len() {
                    let local = next.local(i);
                    let c = &mut next.clients[i];
                    if c.trust_until.is_some_and(|t| local >= t) {
                        c.forget();
                    }
                }
                Effect::Nothing
            }
            Action::Proclaim { .. } | Action::ObserveRead | Action::ObserveDeliver { .. } => {
                self.apply_election(next, action, now)
            }
            Action::Hear {
                client,
                wake,
                again,
            } => self.hear(next, client, wake, again),
            Action::Failover => {
                let from = next.store_now();
                next.offset = if next.offset == 0 {
                    self.config.skew
                } else {
                    0
                };
                next.failovers += 1;
                Effect::FailedOver {
                    from,
                    to: next.store_now(),
                }
            }
        }
    }

    fn lock(
        &self,
        next: &mut LockState,
        client: usize,
        r: usize,
        mode: Mode,
        fair: bool,
    ) -> Effect {
        let now = Timestamp::from_millis(next.store_now());
        // A fair request asks with the ticket of the client's wait, or a new one: the
        // smallest number that names no live place in any queue (a lapsed place counts
        // for nothing, and the engine drops it before it queues anyone).
        let wait = fair.then(|| {
            next.clients[client].wait.unwrap_or_else(|| Wait {
                resource: r,
                mode,
                ticket: (0..=u8::MAX)
                    .find(|&n| !next.has_live_place_of(ticket(client, n)))
                    .expect("fewer than 256 tickets of one client are ever in a queue"),
                kept_at: None,
                fence: 0,
            })
        });
        debug_assert!(wait.is_none_or(|w| w.resource == r && w.mode == mode));
        let incarnation = next.clients[client].incarnation;
        let built;
        let request = if usize::from(incarnation) < self.incarnations {
            let per_client = self.incarnations * self.config.resources;
            &self.requests
                [client * per_client + usize::from(incarnation) * self.config.resources + r]
        } else {
            let details = LockOptions::new().ttl(self.config.ttl.as_duration());
            built = Self::request(client, incarnation, r, &details);
            &built
        };
        let name = resource(r);
        let before: Vec<LockKey> = next
            .table
            .resource(name)
            .into_iter()
            .flat_map(|st| st.locks().map(|(m, l)| LockKey::of(r, m, l)))
            .collect();
        // The prebuilt requests are exclusive and not fair: a shared or fair one is a copy.
        let access = match mode {
            Mode::Exclusive => Access::Exclusive,
            Mode::Shared => Access::Shared(self.config.shared_limit),
        };
        let asked;
        let request = if access == request.access && wait.is_none() {
            request
        } else {
            let mut r = if self.config.election {
                // A candidate campaigns with its value as the lock's comment.
                let value = value_word(next.clients[client].value);
                let details = LockOptions::new()
                    .ttl(self.config.ttl.as_duration())
                    .comment(value);
                Self::request(client, incarnation, r, &details)
            } else {
                request.clone()
            }
            .with_access(access);
            if let Some(w) = wait {
                // The claim lease is the place's lease: every live place is fresh (places
                // kept rarely, with a shorter claim lease, are not modelled).
                r = r.fair(Ticket {
                    id: ticket(client, w.ticket).clone(),
                    ttl: self.config.queue_ttl,
                    claim: Some(self.config.queue_ttl),
                });
            }
            asked = r;
            &asked
        };
        let granted = next.table.lock(request, now);
        let ticket_id = wait.map(|w| ticket(client, w.ticket).clone());
        next.clients[client].wait = if granted.is_ok() { None } else { wait };
        match granted {
            Ok(status) => {
                let after = next.table.resource(name);
                let took_over = before
                    .into_iter()
                    .filter(|k| {
                        after.is_none_or(|st| !st.locks().any(|(m, l)| LockKey::of(r, m, l) == *k))
                    })
                    .collect();
                let history = &mut next.fence_history[r];
                *history = Some(history.map_or(status.fence, |h| h.max(status.fence)));
                // The request is answered in the same step, so it was sent at this local time.
                let sent = next.local(client);
                let trust_until =
                    trust::trust_until(LocalMs(sent), self.config.ttl, self.config.drift_margin)
                        .map(|t| t.0);
                if let Some(t) = trust_until {
                    let c = &mut next.clients[client];
                    c.beliefs[r] = Some(Belief {
                        mode,
                        fence: status.fence,
                    });
                    c.trust_until = Some(c.trust_until.map_or(t, |old| old.min(t)));
                }
                Effect::Granted {
                    resource: r,
                    status,
                    took_over,
                    trust_until,
                    ticket: ticket_id,
                }
            }
            Err(Error::AlreadyLocked { queued, .. }) => {
                // With wakes, the waiter keeps what the Locker keeps of the refusal that
                // kept its place: when it sent the request, and the fence it reported.
                let sent = next.local(client);
                if self.config.wakes
                    && let (Some(q), Some(w)) = (&queued, next.clients[client].wait.as_mut())
                {
                    w.kept_at = Some(sent);
                    w.fence = q.fence;
                }
                Effect::Refused {
                    resource: r,
                    mode,
                    ticket: ticket_id,
                    queued: queued.map(|q| q.ahead),
                }
            }
            Err(other) => panic!("lock failed unexpectedly: {other}"),
        }
    }
}
