//! Symmetry reduction over clients.
//!
//! Clients with the same clock rate are interchangeable: renaming them (and their lock ids
//! and tickets, everywhere they occur: the store's locks and queues, an in-flight purge) maps behaviours to behaviours and
//! keeps every property's verdict. A state is reduced to a representative by sorting the
//! clients on what distinguishes them, rate first; the rate travels with the client, so
//! clients with different rates are never confused, only put in a fixed order.
//!
//! The representative is not always the least element of its class (two clients that tie on
//! the sort key may still differ in the order of shared locks in the store); that only costs
//! some reduction, never soundness, because every representative is a renaming of its state.

use lockwright_engine::{Handoff, LockId, LockTable, Mode, QueueEntry, ResourceState, StoredLock};
use stateright::util::DenseNatMap;
use stateright::{Representative, Rewrite, RewritePlan};

use crate::state::{
    ClientState, LockState, PendingPurge, lock_id, parse_lock_id, parse_ticket, resource_index,
    ticket,
};

/// A client's index, as stateright's rewrite plans name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub usize);

impl From<usize> for ClientId {
    fn from(i: usize) -> Self {
        ClientId(i)
    }
}

impl From<ClientId> for usize {
    fn from(c: ClientId) -> usize {
        c.0
    }
}

impl Rewrite<ClientId> for ClientState {
    /// A client's own state names no other client.
    fn rewrite<S>(&self, _: &RewritePlan<ClientId, S>) -> Self {
        self.clone()
    }
}

/// What tells a client apart, for sorting: its own state (rate first), then its locks in
/// the store and its part in an in-flight purge, by incarnation, then its places in the
/// queues (ticket number, resource, position, mode, queued at, lapses at).
type ClientKey<'a> = (
    &'a ClientState,
    Vec<(u8, usize, Mode, u64, Option<u64>, u64)>,
    Vec<u8>,
    Vec<(u8, usize, usize, Mode, u64, u64)>,
);

/// A plan that renames clients by sorting them.
type Plan = RewritePlan<ClientId, DenseNatMap<ClientId, ClientId>>;

fn rename_id<S>(id: &LockId, plan: &RewritePlan<ClientId, S>) -> LockId {
    match parse_lock_id(id) {
        Some((client, incarnation)) => {
            lock_id(plan.rewrite(&ClientId(client)).0, incarnation).clone()
        }
        None => id.clone(),
    }
}

fn rename_ticket<S>(id: &LockId, plan: &RewritePlan<ClientId, S>) -> LockId {
    match parse_ticket(id) {
        Some((client, n)) => ticket(plan.rewrite(&ClientId(client)).0, n).clone(),
        None => id.clone(),
    }
}

fn rename_place<S>(e: &QueueEntry, plan: &RewritePlan<ClientId, S>) -> QueueEntry {
    let handoff = e.handoff.as_ref().map(|h| {
        Handoff::new(
            rename_id(&h.lock_id, plan),
            h.holder.clone(),
            h.limit,
            h.lease,
        )
    });
    QueueEntry::new(
        rename_ticket(&e.ticket, plan),
        e.mode,
        e.queued_at,
        e.expires_at,
    )
    .with_fresh_until(e.fresh_until)
    .with_handoff(handoff)
}

fn rename_lock<S>(lock: &StoredLock, plan: &RewritePlan<ClientId, S>) -> StoredLock {
    let mut lock = lock.clone();
    lock.lock_id = rename_id(&lock.lock_id, plan);
    lock
}

impl Rewrite<ClientId> for LockState {
    /// Renames every client `c` to `plan.rewrite(c)`: moves its state to the new index and
    /// renames its lock ids in the store (rebuilt with `LockTable::from_resources`, keeping
    /// the takeover grace and the fence clock) and in an in-flight purge.
    fn rewrite<S>(&self, plan: &RewritePlan<ClientId, S>) -> Self {
        let mut clients = self.clients.clone();
        for (old, client) in self.clients.iter().enumerate() {
            clients[plan.rewrite(&ClientId(old)).0] = client.rewrite(plan);
        }
        let mut table =
            LockTable::from_resources(self.table.resources().iter().map(|(name, st)| {
                (
                    name.clone(),
                    ResourceState::from_parts(
                        st.last_fence,
                        st.exclusive.as_ref().map(|l| rename_lock(l, plan)),
                        st.shared.iter().map(|l| rename_lock(l, plan)).collect(),
                    )
                    .with_queue(st.queue.iter().map(|e| rename_place(e, plan)).collect()),
                )
            }))
            .with_takeover_grace(self.table.takeover_grace());
        // `from_resources` starts a table with no grace and its fence clock at zero: both
        // are carried over, or a renamed state would behave differently from its original.
        table.raise_fence_clock(self.table.fence_clock());
        LockState {
            now: self.now,
            offset: self.offset,
            failovers: self.failovers,
            table,
            fence_clock: self.fence_clock,
            clients,
            purge: self.purge.as_ref().map(|p| PendingPurge {
                at: p.at,
                groups: p.groups.iter().map(|g| rename_id(g, plan)).collect(),
            }),
            downstream: self.downstream.clone(),
            fence_history: self.fence_history.clone(),
            observing: self.observing.clone(),
            last: self.last,
        }
    }
}

impl LockState {
    fn client_key(&self, client: usize) -> ClientKey<'_> {
        let mut locks: Vec<_> = self
            .locks()
            .filter_map(|(r, mode, l)| {
                let (c, g) = parse_lock_id(&l.lock_id)?;
                (c == client).then(|| {
                    (
                        g,
                        r,
                        mode,
                        l.created_at.as_millis(),
                        l.expires_at.map(|e| e.as_millis()),
                        l.fence,
                    )
                })
            })
            .collect();
        locks.sort();
        let purging: Vec<u8> = self
            .purge
            .iter()
            .flat_map(|p| p.groups.iter())
            .filter_map(parse_lock_id)
            .filter(|(c, _)| *c == client)
            .map(|(_, g)| g)
            .collect();
        let places: Vec<_> = self
            .table
            .resources()
            .iter()
            .flat_map(|(name, st)| {
                let r = resource_index(name).expect("model resources are named r<index>");
                st.queue.iter().enumerate().filter_map(move |(i, e)| {
                    let (c, n) = parse_ticket(&e.ticket)?;
                    (c == client).then(|| {
                        (
                            n,
                            r,
                            i,
                            e.mode,
                            e.queued_at.as_millis(),
                            e.expires_at.as_millis(),
                        )
                    })
                })
            })
            .collect();
        (&self.clients[client], locks, purging, places)
    }

    /// The permutation to this state's representative: `perm[i]` is the index in `self` of
    /// the client at index `i` of the representative; `None` for the identity. With it, the
    /// plan that renames clients.
    fn canonical_plan(&self) -> Option<(Plan, Vec<usize>)> {
        let keys: Vec<ClientKey<'_>> = (0..self.clients.len())
            .map(|c| self.client_key(c))
            .collect();
        if keys.is_sorted() {
            return None;
        }
        let plan = RewritePlan::<ClientId, _>::from_values_to_sort(&keys);
        let mut perm = vec![0; keys.len()];
        for old in 0..keys.len() {
            perm[plan.rewrite(&ClientId(old)).0] = old;
        }
        Some((plan, perm))
    }

    /// The representative of this state's class, and the permutation to it: `perm[i]` is
    /// the index in `self` of the client at index `i` of the representative.
    #[must_use]
    pub fn canonical(&self) -> (LockState, Vec<usize>) {
        match self.canonical_plan() {
            Some((plan, perm)) => (self.rewrite(&plan), perm),
            None => (self.clone(), (0..self.clients.len()).collect()),
        }
    }

    /// [`LockState::canonical`], without copying a state that is its own representative.
    #[must_use]
    pub fn into_canonical(self) -> (LockState, Vec<usize>) {
        match self.canonical_plan() {
            Some((plan, perm)) => (self.rewrite(&plan), perm),
            None => {
                let n = self.clients.len();
                (self, (0..n).collect())
            }
        }
    }
}

impl Representative for LockState {
    fn representative(&self) -> Self {
        self.canonical().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::config::Config;
    use crate::model::LockModel;

    #[test]
    fn swapped_clients_have_one_representative() {
        let mut config = Config::ci();
        config.symmetry = false;
        let model = LockModel::new(config);
        let s0 = model.raw_initial();
        let (a, _) = model.step(
            &s0,
            Action::XLock {
                client: 0,
                resource: 0,
            },
        );
        let (b, _) = model.step(
            &s0,
            Action::XLock {
                client: 1,
                resource: 0,
            },
        );
        assert_ne!(a, b);
        let (ca, pa) = a.canonical();
        let (cb, pb) = b.canonical();
        assert_eq!(ca, cb);
        assert_ne!(pa, pb);
        assert_eq!(
            ca.representative(),
            ca,
            "a representative represents itself"
        );
    }
}
