//! The invariants checked during a run (`past_trust_deadline`, `holder_safety`) and at its
//! end (`leaked`, `stuck`). `fence_monotonic` and `stale_write` are checked where grants and
//! writes happen (the store and the downstream), `needless_loss` where a lease ends,
//! `handover_liveness` in `liveness.rs`.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use lockwright_engine::LocalMs;
use lockwright_engine::{Filter, LockStore};

use super::app::Hold;
use super::{World, at_once};
use crate::report::ViolationKind;

impl World {
    /// past_trust_deadline: every client that can act (neither paused nor crashed) has had
    /// its due timeouts handled at this instant, so a lease its application still holds
    /// must still be trusted on its clock.
    pub(super) fn check_trust_deadlines(&mut self) {
        for client in 0..self.clients.len() {
            if !self.clients[client].is_active() {
                continue;
            }
            let local = self.local(client);
            if self.clients[client]
                .core
                .poll_timeout()
                .is_some_and(|t| t.0 <= local)
            {
                self.clients[client].core.handle_timeout(LocalMs(local));
                self.flush(client);
                self.schedule_wake(client);
            }
            let c = &self.clients[client];
            let past: Vec<Hold> = c
                .holds
                .iter()
                .filter(|h| local >= h.trust_until && !c.reported_past.contains(&h.key))
                .cloned()
                .collect();
            for Hold {
                key,
                resource,
                trust_until,
                ..
            } in past
            {
                self.clients[client].reported_past.insert(key);
                self.violation(
                    ViolationKind::PastTrustDeadline,
                    format!(
                        "client {client} still holds r{resource} at local {local}, past its \
                         trust deadline {trust_until}, without being told it ended"
                    ),
                );
            }
        }
    }

    /// holder_safety: at this real instant, no two clients both believe they hold one
    /// resource (each by its own clock: the store's clock, which failovers move, has no
    /// say).
    pub(super) fn check_holders(&mut self) {
        // The first believer of each resource, in a buffer kept across events (this runs
        // after every event).
        let mut first = std::mem::take(&mut self.believers);
        first.clear();
        first.resize(self.resources.len(), None);
        let mut clash: Option<BTreeSet<usize>> = None;
        for (i, c) in self.clients.iter().enumerate() {
            for r in c.believes(self.now) {
                match first[r] {
                    None => first[r] = Some(i),
                    Some(_) => {
                        clash.get_or_insert_with(BTreeSet::new).insert(r);
                    }
                }
            }
        }
        self.believers = first;
        for r in clash.into_iter().flatten() {
            let who: Vec<usize> = (0..self.clients.len())
                .filter(|&i| self.clients[i].believes(self.now).any(|b| b == r))
                .collect();
            self.violation(
                ViolationKind::HolderSafety,
                format!("clients {who:?} all believe they hold r{r}"),
            );
        }
    }

    /// leaked: every lock id granted to an incarnation that did not crash was unlocked at
    /// the store, the store holds no lock of a lock id whose unlock reached it, and the world
    /// settled.
    pub(super) fn check_leaks(&mut self, limit: u64) {
        // A wake its client no longer counts on (a later one replaced it, or the core
        // has nothing due any more) would only be skipped: it is not left to do.
        let next = self
            .queue
            .iter()
            .filter(|Reverse((_, _, slot))| {
                self.events[*slot]
                    .as_ref()
                    .is_some_and(|e| !self.stale_wake(e))
            })
            .map(|Reverse((at, _, _))| *at)
            .min();
        if let Some(at) = next {
            let busy: Vec<usize> = (0..self.clients.len())
                .filter(|&c| {
                    let c = &self.clients[c];
                    c.crashed || c.paused_until.is_some() || !c.core.is_idle()
                })
                .collect();
            self.violation(
                ViolationKind::Leaked,
                format!(
                    "the healed world did not settle by {limit} ms (next event at {at} ms; \
                     clients not idle: {busy:?})"
                ),
            );
        }
        let leaked: Vec<(usize, u32)> = self
            .grants
            .iter()
            .filter(|(id, who)| !self.unlocked.contains(*id) && !self.crashed.contains(who))
            .map(|(_, who)| *who)
            .collect();
        let still_held = at_once(self.store.status(&Filter::new()))
            .unwrap_or_else(|e| panic!("store-mem failed: {e}"))
            .iter()
            .filter(|l| self.unlocked.contains(&l.lock_id))
            .count();
        if still_held > 0 {
            self.violation(
                ViolationKind::Leaked,
                format!("{still_held} lock(s) still stored after their unlock reached the store"),
            );
        }
        if !leaked.is_empty() {
            let clients: BTreeSet<usize> = leaked.iter().map(|(c, _)| *c).collect();
            self.violation(
                ViolationKind::Leaked,
                format!(
                    "{} granted lock id(s) never unlocked, of clients {clients:?} (which did \
                     not crash)",
                    leaked.len()
                ),
            );
        }
    }

    /// stuck: once every lease has run out, and its takeover grace too on whichever
    /// member's clock, a purge leaves nothing.
    pub(super) fn check_stuck(&mut self) {
        let after = self.now + self.opts.ttl_ms * 3 + self.opts.grace_ms + self.mix.clock_jump_ms;
        self.now = after;
        self.clock.set(self.store_now());
        at_once(self.store.purge()).unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        let left = at_once(self.store.status(&Filter::new()))
            .unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        if !left.is_empty() {
            let names: Vec<String> = left
                .iter()
                .map(|l| l.resource.as_str().to_owned())
                .collect();
            self.violation(
                ViolationKind::Stuck,
                format!("locks left after healing: {names:?}"),
            );
        }
    }
}
