//! The model's state: the store (the engine's own [`LockTable`]), real time and the store
//! clock's offset from it, every client's clock, lock id, beliefs and the fair request it
//! waits on (the queues' places are in the table), the fenced downstream store, an
//! in-flight purge, and the verdict on the last transition.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use lockwright_engine::{LockId, LockTable, Mode, QueueEntry, Resource, StoredLock};

use crate::config::{MAX_CLIENTS, MAX_RESOURCES, Rate};
pub use crate::verdict::Verdict;
use lockwright_engine::election::Observer;

/// A lock a client believes it holds (while it trusts its group, see
/// [`ClientState::trust_until`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Belief {
    /// Exclusive or shared.
    pub mode: Mode,
    /// The fence the grant carried.
    pub fence: u64,
}

/// A write a client sent to the fenced downstream store, not yet delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Write {
    /// The resource the write is about (its index).
    pub resource: usize,
    /// The fence the writer attached.
    pub fence: u64,
}

/// A fair request a client keeps making: the resource and mode it waits for and the
/// ticket that names its place across attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Wait {
    /// The resource (index).
    pub resource: usize,
    /// Exclusive or shared.
    pub mode: Mode,
    /// Which ticket: `q<client>.<ticket>` ([`ticket`]).
    pub ticket: u8,
    /// With [`Config::wakes`](crate::Config::wakes): the local instant (ms) it sent the
    /// request whose refusal last kept its place (`None` before one did, and without wakes).
    pub kept_at: Option<u64>,
    /// With wakes: the fence that refusal reported (the highest the resource had granted);
    /// 0 without wakes.
    pub fence: u64,
}

/// A wake in flight to a waiter: the store handed its place (ticket) a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WakeMsg {
    /// The ticket of the place handed the lock.
    pub ticket: u8,
    /// The handed lock's fence.
    pub fence: u64,
    /// The handed lock's creation (store ms).
    pub created_at: u64,
    /// The handed lock's end (store ms): the handoff plus the claim lease.
    pub expires_at: u64,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientState {
    /// How fast its clock runs (fixed for the run; part of the state so that permuting
    /// clients carries it along).
    pub rate: Rate,
    /// Which lock id it uses: `c<client>.<incarnation>`. A crash moves it to the smallest
    /// incarnation whose lock id has no lock in the store and no part in an in-flight purge,
    /// which is as good as a fresh random id and keeps equal situations equal states.
    pub incarnation: u8,
    /// What it believes it holds, per resource.
    pub beliefs: Vec<Option<Belief>>,
    /// The local instant (ms) from which it no longer trusts its group: the holding rule,
    /// `trust::trust_until(sent_local, ttl, drift_margin)` of the request that granted or
    /// last renewed it, taken as the earliest over the group's locks, because a purge
    /// removes the whole group once any one of its locks has expired. `None` with no beliefs.
    pub trust_until: Option<u64>,
    /// Stopped (a GC pause): it takes no action, but its clock runs and its beliefs stay.
    pub paused: bool,
    /// A downstream write it sent that has not arrived yet.
    pub write: Option<Write>,
    /// The fair request it is waiting on (refused at least once, not yet granted, left or
    /// given up): it asks again with the same ticket.
    pub wait: Option<Wait>,
    /// As a candidate of an election, the value it proclaims (its campaigns' comment,
    /// [`value_word`]): 0, or what its last proclaim that the
    /// store took set. Always 0 outside elections.
    pub value: u8,
    /// With [`Config::wakes`](crate::Config::wakes): the wakes in flight to it, for the
    /// places of the wait it is in (a wait that ends takes its wakes with it: the next one
    /// is another acquire, whose places a wake of this one never names). Sorted.
    pub wakes: Vec<WakeMsg>,
}

impl ClientState {
    /// Whether it believes anything at all.
    #[must_use]
    pub fn believes_anything(&self) -> bool {
        self.trust_until.is_some()
    }

    /// Forgets every belief.
    pub fn forget(&mut self) {
        self.beliefs.fill(None);
        self.trust_until = None;
    }
}

/// A purge between its first phase (expired groups at `at`) and the rest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PendingPurge {
    /// The purge instant `t` (real ms).
    pub at: u64,
    /// `table::expired_groups` at `at`: the lock ids with a lock abandoned at `at` (expired
    /// for at least the takeover grace).
    pub groups: BTreeSet<LockId>,
}

/// What of the store's fence clock can still change an outcome (see
/// [`LockModel::fence_clock_key`](crate::LockModel::fence_clock_key)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FenceClockKey {
    /// Nothing: no grant will see it and no purge is begun.
    #[default]
    Irrelevant,
    /// Only the deletion that finishes the begun purge will see it: it deletes the empty
    /// resources whose counter is below this.
    PurgeDeletesBelow(u64),
    /// A grant may still take its fence from it (the store's clock went back, or may).
    Exact(u64),
}

/// The state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockState {
    /// Real time in ms: what the clients' clocks run from (and the store's clock, less
    /// [`LockState::offset`]).
    pub now: u64,
    /// How far the clock of the store's current primary is ahead of real time, in ms: 0 or
    /// the configured skew. A failover switches it; the store's clock is
    /// [`LockState::store_now`].
    pub offset: u64,
    /// Failovers so far.
    pub failovers: u8,
    /// The store.
    pub table: LockTable,
    /// What of the table's fence clock ([`LockTable::fence_clock`]) can still change an
    /// outcome, which the table's own equality and hash leave out
    /// ([`LockModel::fence_clock_key`](crate::LockModel::fence_clock_key)). Set by the
    /// model after every step.
    pub fence_clock: FenceClockKey,
    /// The clients, by index.
    pub clients: Vec<ClientState>,
    /// A purge that has found its groups but not removed them yet.
    pub purge: Option<PendingPurge>,
    /// The fenced downstream store: per resource, the highest fence it accepted.
    pub downstream: Vec<Option<u64>>,
    /// Per resource, the highest fence ever granted. Kept by the model because the store
    /// forgets a resource when a purge deletes its empty document.
    pub fence_history: Vec<Option<u64>>,
    /// The election's observer (untouched outside elections).
    pub observing: Observing,
    /// Which properties the last transition broke, and which interesting situations it
    /// produced (empty and empty in most states, so equal situations stay equal states).
    pub last: Verdict,
}

/// How many reads the observer may have in flight at once: two, so that they may come back
/// in either order (a poll and a wake-up's read overlap; a member that lags answers late).
pub const READS: usize = 2;

/// The comment a candidate's lock carries for its value `value`: `v<value>`.
///
/// # Panics
/// For a value other than 0 or 1 (a candidate proclaims the other of two values).
#[must_use]
pub fn value_word(value: u8) -> &'static str {
    ["v0", "v1"][usize::from(value)]
}

/// The observer of the election on `r0`: the engine's [`Observer`], the reads it has in
/// flight (each what the store said at its instant: a leader or nobody) and, kept by the
/// model for the property, the highest fence it has reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Observing {
    /// What the observer has reported, as the engine keeps it.
    pub observer: Observer,
    /// The reads in flight: `Some(answer)` once sent, the answer (the leader's fence, or
    /// nobody) fixed at the store's instant. Only the fence is kept: what the observer
    /// reports depends on nothing else, and values and instants would multiply states.
    pub reads: [Option<Option<u64>>; READS],
    /// The highest fence reported so far (the property's own record).
    pub highest: Option<u64>,
    /// The reads made so far.
    pub sent: u8,
}

impl Observing {
    /// The first slot with no read in flight.
    #[must_use]
    pub fn free_slot(&self) -> Option<usize> {
        self.reads.iter().position(Option::is_none)
    }
}

/// The most incarnations of one client the model names (a client's lock ids in use at once
/// are bounded by the resources plus one, far below this).
pub const MAX_INCARNATIONS: usize = 64;

/// The lock id of `client` in its `incarnation`: `c<client>.<incarnation>`.
///
/// # Panics
/// Beyond [`MAX_CLIENTS`] clients or [`MAX_INCARNATIONS`].
#[must_use]
pub fn lock_id(client: usize, incarnation: u8) -> &'static LockId {
    static IDS: OnceLock<Vec<Vec<LockId>>> = OnceLock::new();
    let ids = IDS.get_or_init(|| {
        (0..MAX_CLIENTS)
            .map(|c| {
                (0..MAX_INCARNATIONS)
                    .map(|g| LockId::new(format!("c{c}.{g}")).expect("model lock ids are valid"))
                    .collect()
            })
            .collect()
    });
    &ids[client][usize::from(incarnation)]
}

/// The ticket of `client`'s wait number `n`: `q<client>.<n>`. A new wait takes the
/// smallest number with no place in any queue, which is as good as a fresh random ticket
/// and keeps equal situations equal states.
///
/// # Panics
/// Beyond [`MAX_CLIENTS`] clients or [`MAX_INCARNATIONS`] tickets.
#[must_use]
pub fn ticket(client: usize, n: u8) -> &'static LockId {
    static IDS: OnceLock<Vec<Vec<LockId>>> = OnceLock::new();
    let ids = IDS.get_or_init(|| {
        (0..MAX_CLIENTS)
            .map(|c| {
                (0..MAX_INCARNATIONS)
                    .map(|g| LockId::new(format!("q{c}.{g}")).expect("model tickets are valid"))
                    .collect()
            })
            .collect()
    });
    &ids[client][usize::from(n)]
}

/// The client and number a model ticket names.
#[must_use]
pub fn parse_ticket(id: &LockId) -> Option<(usize, u8)> {
    let rest = id.as_str().strip_prefix('q')?;
    let (client, n) = rest.split_once('.')?;
    Some((client.parse().ok()?, n.parse().ok()?))
}

/// The client and incarnation a model lock id names.
#[must_use]
pub fn parse_lock_id(id: &LockId) -> Option<(usize, u8)> {
    let rest = id.as_str().strip_prefix('c')?;
    let (client, incarnation) = rest.split_once('.')?;
    Some((client.parse().ok()?, incarnation.parse().ok()?))
}

/// The name of resource `index`: `r<index>`.
///
/// # Panics
/// Beyond [`MAX_RESOURCES`] resources.
#[must_use]
pub fn resource(index: usize) -> &'static Resource {
    static NAMES: OnceLock<Vec<Resource>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..MAX_RESOURCES)
            .map(|r| Resource::new(format!("r{r}")).expect("model resource names are valid"))
            .collect()
    });
    &names[index]
}

/// The index of a model resource name.
#[must_use]
pub fn resource_index(name: &Resource) -> Option<usize> {
    match name.as_str().as_bytes() {
        [b'r', d] if d.is_ascii_digit() => Some(usize::from(d - b'0')),
        _ => None,
    }
}

/// One lock in the store, identified independently of its expiry (which renew changes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockKey {
    /// The resource (its index).
    pub resource: usize,
    /// The lock's group.
    pub lock_id: LockId,
    /// Exclusive or shared.
    pub mode: Mode,
    /// When it was granted (ms).
    pub created_at: u64,
    /// Its fence.
    pub fence: u64,
}

impl LockKey {
    /// The key of `lock`, held on resource `resource` in `mode`.
    #[must_use]
    pub fn of(resource: usize, mode: Mode, lock: &StoredLock) -> Self {
        LockKey {
            resource,
            lock_id: lock.lock_id.clone(),
            mode,
            created_at: lock.created_at.as_millis(),
            fence: lock.fence,
        }
    }
}

impl LockState {
    /// The initial state for `rates` and `resources`: time 0, an empty store, clients with
    /// no beliefs in incarnation 0.
    #[must_use]
    pub fn initial(rates: &[Rate], resources: usize) -> Self {
        LockState {
            now: 0,
            offset: 0,
            failovers: 0,
            table: LockTable::new(),
            fence_clock: FenceClockKey::Irrelevant,
            clients: rates
                .iter()
                .map(|&rate| ClientState {
                    rate,
                    incarnation: 0,
                    beliefs: vec![None; resources],
                    trust_until: None,
                    paused: false,
                    write: None,
                    wait: None,
                    value: 0,
                    wakes: Vec::new(),
                })
                .collect(),
            purge: None,
            downstream: vec![None; resources],
            fence_history: vec![None; resources],
            observing: Observing::default(),
            last: Verdict::default(),
        }
    }

    /// The store's clock now, in ms: real time plus the current primary's offset. Every
    /// engine call is given this instant.
    #[must_use]
    pub fn store_now(&self) -> u64 {
        self.now + self.offset
    }

    /// Client `client`'s clock reading now.
    #[must_use]
    pub fn local(&self, client: usize) -> u64 {
        self.clients[client].rate.local(self.now)
    }

    /// Client `client`'s current lock id.
    #[must_use]
    pub fn lock_id_of(&self, client: usize) -> &'static LockId {
        lock_id(client, self.clients[client].incarnation)
    }

    /// What client `client`, by the holding rule on its own clock, believes now that it
    /// holds on `resource`.
    #[must_use]
    pub fn believed(&self, client: usize, resource: usize) -> Option<Belief> {
        let c = &self.clients[client];
        let local = self.local(client);
        c.beliefs[resource].filter(|_| c.trust_until.is_some_and(|t| local < t))
    }

    /// Every lock in the store, with its resource index and mode.
    pub fn locks(&self) -> impl Iterator<Item = (usize, Mode, &StoredLock)> {
        self.table.resources().iter().flat_map(|(name, state)| {
            let index = resource_index(name).expect("model resources are named r<index>");
            state.locks().map(move |(mode, lock)| (index, mode, lock))
        })
    }

    /// The keys of every lock in the store.
    #[must_use]
    pub fn lock_keys(&self) -> BTreeSet<LockKey> {
        self.locks()
            .map(|(r, mode, lock)| LockKey::of(r, mode, lock))
            .collect()
    }

    /// The queue of resource `r` (empty for a resource the store does not know).
    #[must_use]
    pub fn queue(&self, r: usize) -> &[QueueEntry] {
        self.table
            .resource(resource(r))
            .map_or(&[], |st| st.queue.as_slice())
    }

    /// Whether some queue holds a live place (`store_now < expires_at`) named by `ticket`.
    #[must_use]
    pub fn has_live_place_of(&self, ticket: &LockId) -> bool {
        self.live_places().any(|e| &e.ticket == ticket)
    }

    /// Whether some queue holds a live place of one of `client`'s tickets.
    #[must_use]
    pub fn has_live_place_of_client(&self, client: usize) -> bool {
        self.live_places()
            .any(|e| parse_ticket(&e.ticket).is_some_and(|(c, _)| c == client))
    }

    /// The live places of every queue.
    fn live_places(&self) -> impl Iterator<Item = &QueueEntry> {
        let now = self.store_now();
        self.table
            .resources()
            .values()
            .flat_map(|st| st.queue.iter())
            .filter(move |e| now < e.expires_at.as_millis())
    }

    /// Whether the store holds a lock of `id`.
    #[must_use]
    pub fn has_locks_of(&self, id: &LockId) -> bool {
        self.table
            .resources()
            .values()
            .any(|st| st.locks().any(|(_, l)| &l.lock_id == id))
    }
}

/// `exclusive` or `shared`.
#[must_use]
pub fn mode_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_lock_id(lock_id(3, 2)), Some((3, 2)));
        assert_eq!(resource_index(resource(5)), Some(5));
        assert_eq!(parse_ticket(ticket(2, 3)), Some((2, 3)));
        assert_eq!(parse_lock_id(ticket(2, 3)), None);
    }
}
