//! What can happen in one step, and what the engine answered.

use std::collections::BTreeSet;
use std::fmt;

use lockwright_engine::{LockId, LockStatus, Mode};

use crate::state::{LockKey, mode_word, resource_index};

/// One step of the model: a client's operation, a network delivery, a fault, a purge phase
/// or the passing of one millisecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client asks for an exclusive lock on the resource.
    XLock {
        /// The client (index).
        client: usize,
        /// The resource (index).
        resource: usize,
    },
    /// The client asks for a shared lock on the resource, with the configured limit.
    SLock {
        /// The client (index).
        client: usize,
        /// The resource (index).
        resource: usize,
    },
    /// The client makes a fair exclusive request for the resource: with the ticket of the
    /// wait it is in (it waits for nothing else), or with a new one.
    FairXLock {
        /// The client (index).
        client: usize,
        /// The resource (index).
        resource: usize,
    },
    /// The client makes a fair shared request for the resource, with the configured limit:
    /// with the ticket of the wait it is in, or with a new one.
    FairSLock {
        /// The client (index).
        client: usize,
        /// The resource (index).
        resource: usize,
    },
    /// The waiting client stops waiting and removes its place (`LockTable::leave_queue`).
    Leave {
        /// The client (index).
        client: usize,
    },
    /// The waiting client dies while waiting: it stops asking and never removes its place,
    /// which lapses when its lease runs out.
    StopWaiting {
        /// The client (index).
        client: usize,
    },
    /// The client releases its whole group.
    Unlock {
        /// The client (index).
        client: usize,
    },
    /// The client renews its whole group.
    Renew {
        /// The client (index).
        client: usize,
    },
    /// The client, believing it holds the resource exclusively, sends a fenced write to the
    /// downstream store.
    Write {
        /// The client (index).
        client: usize,
        /// The resource (index).
        resource: usize,
    },
    /// The client's in-flight write reaches the downstream store.
    Deliver {
        /// The client (index).
        client: usize,
    },
    /// The client stops acting (a GC pause); its clock runs on and its beliefs stay.
    Pause {
        /// The client (index).
        client: usize,
    },
    /// The waiting client hears the wake in flight to it at `wake` (its index in
    /// [`ClientState::wakes`](crate::ClientState::wakes)): it trusts the lock the wake
    /// carries by the Locker's rule, or only wakes up. With `again`, a copy of the wake stays
    /// in flight (the network duplicated it).
    Hear {
        /// The client (index).
        client: usize,
        /// Which wake in flight.
        wake: usize,
        /// Whether a copy stays in flight.
        again: bool,
    },
    /// The paused client acts again.
    Resume {
        /// The client (index).
        client: usize,
    },
    /// The client crashes and restarts: beliefs lost, a new lock id.
    Crash {
        /// The client (index).
        client: usize,
    },
    /// A purger computes the expired groups at the current instant.
    PurgeBegin,
    /// The purger removes those groups' locks and deletes empty resources, as of the instant
    /// the purge began.
    PurgeFinish,
    /// One millisecond of real time passes; every client's clock advances at its rate.
    Tick,
    /// The store fails over to a member whose clock is `skew` ahead of, or behind, the old
    /// primary's: the store's clock jumps, the clients' clocks do not.
    Failover,
    /// The candidate proclaims its other value (`LockTable::set_comment` on `r0`): as a
    /// leader, or late, a proclaim it sent while it led that arrives after.
    Proclaim {
        /// The client (index).
        client: usize,
    },
    /// The observer reads who leads (`election::leader_of` of the store's status of `r0`);
    /// the answer comes back later.
    ObserveRead,
    /// The answer of the observer's read in `slot` comes back, to `election::Observer`.
    ObserveDeliver {
        /// Which read in flight.
        slot: usize,
    },
}

impl Action {
    /// The client acting, if any.
    #[must_use]
    pub fn client(self) -> Option<usize> {
        match self {
            Action::XLock { client, .. }
            | Action::SLock { client, .. }
            | Action::FairXLock { client, .. }
            | Action::FairSLock { client, .. }
            | Action::Leave { client }
            | Action::StopWaiting { client }
            | Action::Unlock { client }
            | Action::Renew { client }
            | Action::Write { client, .. }
            | Action::Deliver { client }
            | Action::Pause { client }
            | Action::Resume { client }
            | Action::Crash { client }
            | Action::Hear { client, .. }
            | Action::Proclaim { client } => Some(client),
            Action::PurgeBegin
            | Action::PurgeFinish
            | Action::Tick
            | Action::Failover
            | Action::ObserveRead
            | Action::ObserveDeliver { .. } => None,
        }
    }

    /// The same action by client `f(client)`.
    #[must_use]
    pub fn map_client(self, f: impl Fn(usize) -> usize) -> Self {
        match self {
            Action::XLock { client, resource } => Action::XLock {
                client: f(client),
                resource,
            },
            Action::SLock { client, resource } => Action::SLock {
                client: f(client),
                resource,
            },
            Action::FairXLock { client, resource } => Action::FairXLock {
                client: f(client),
                resource,
            },
            Action::FairSLock { client, resource } => Action::FairSLock {
                client: f(client),
                resource,
            },
            Action::Leave { client } => Action::Leave { client: f(client) },
            Action::StopWaiting { client } => Action::StopWaiting { client: f(client) },
            Action::Unlock { client } => Action::Unlock { client: f(client) },
            Action::Renew { client } => Action::Renew { client: f(client) },
            Action::Write { client, resource } => Action::Write {
                client: f(client),
                resource,
            },
            Action::Deliver { client } => Action::Deliver { client: f(client) },
            Action::Pause { client } => Action::Pause { client: f(client) },
            Action::Resume { client } => Action::Resume { client: f(client) },
            Action::Crash { client } => Action::Crash { client: f(client) },
            Action::Proclaim { client } => Action::Proclaim { client: f(client) },
            Action::Hear {
                client,
                wake,
                again,
            } => Action::Hear {
                client: f(client),
                wake,
                again,
            },
            Action::PurgeBegin
            | Action::PurgeFinish
            | Action::Tick
            | Action::Failover
            | Action::ObserveRead
            | Action::ObserveDeliver { .. } => self,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::XLock { client, resource } => write!(f, "c{client} xlock r{resource}"),
            Action::SLock { client, resource } => write!(f, "c{client} slock r{resource}"),
            Action::FairXLock { client, resource } => {
                write!(f, "c{client} fair xlock r{resource}")
            }
            Action::FairSLock { client, resource } => {
                write!(f, "c{client} fair slock r{resource}")
            }
            Action::Leave { client } => write!(f, "c{client} leaves the queue"),
            Action::StopWaiting { client } => {
                write!(
                    f,
                    "c{client} dies while waiting (its place is left to lapse)"
                )
            }
            Action::Unlock { client } => write!(f, "c{client} unlock"),
            Action::Renew { client } => write!(f, "c{client} renew"),
            Action::Write { client, resource } => {
                write!(f, "c{client} sends a fenced write for r{resource}")
            }
            Action::Deliver { client } => write!(f, "c{client}'s write reaches downstream"),
            Action::Pause { client } => write!(f, "c{client} pauses"),
            Action::Resume { client } => write!(f, "c{client} resumes"),
            Action::Hear {
                client,
                wake,
                again,
            } => {
                let copy = if again {
                    " (a copy stays in flight)"
                } else {
                    ""
                };
                write!(f, "c{client} hears wake #{wake}{copy}")
            }
            Action::Crash { client } => write!(f, "c{client} crashes and restarts"),
            Action::PurgeBegin => f.write_str("purge begins"),
            Action::PurgeFinish => f.write_str("purge finishes"),
            Action::Tick => f.write_str("tick"),
            Action::Failover => f.write_str("failover"),
            Action::Proclaim { client } => write!(f, "c{client} proclaims"),
            Action::ObserveRead => f.write_str("the observer reads who leads"),
            Action::ObserveDeliver { slot } => write!(f, "the observer's read #{slot} answers"),
        }
    }
}

/// What a step did, as the engine (or the downstream store) reported it.
// One effect per step, built, judged and dropped: never stored, so the size of its largest
// variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A lock was granted.
    Granted {
        /// The resource (index).
        resource: usize,
        /// The grant as the engine reported it.
        status: LockStatus,
        /// The locks the grant removed (expired ones, taken over).
        took_over: Vec<LockKey>,
        /// The client's new belief (`None`: the margin leaves nothing to trust).
        trust_until: Option<u64>,
        /// The ticket of a fair request (never printed).
        ticket: Option<LockId>,
    },
    /// The grant was refused (`AlreadyLocked`).
    Refused {
        /// The resource (index).
        resource: usize,
        /// The mode asked for.
        mode: Mode,
        /// The ticket of a fair request (never printed).
        ticket: Option<LockId>,
        /// What the refusal reported as the fair request's place: the live waiters ahead
        /// it must let go first.
        queued: Option<u32>,
    },
    /// A waiter left the queue.
    Left {
        /// The resource (index).
        resource: usize,
        /// Its ticket (never printed).
        ticket: LockId,
        /// Whether it still had a place.
        had: bool,
    },
    /// A waiter died: it will not ask again.
    StoppedWaiting {
        /// The resource (index).
        resource: usize,
    },
    /// A group was unlocked.
    Unlocked {
        /// The group.
        lock_id: LockId,
        /// What unlock returned.
        removed: Vec<LockStatus>,
    },
    /// A group was renewed.
    Renewed {
        /// The group.
        lock_id: LockId,
        /// What renew returned.
        renewed: Vec<LockStatus>,
    },
    /// Renew refused: some lock was expired or within the renew margin.
    NotRenewable {
        /// The group.
        lock_id: LockId,
        /// The locks that were not renewable.
        locks: Vec<LockStatus>,
    },
    /// Renew found no lock of the group.
    RenewNotFound {
        /// The group.
        lock_id: LockId,
    },
    /// A fenced write left the client.
    WriteSent {
        /// The resource (index).
        resource: usize,
        /// The fence attached.
        fence: u64,
    },
    /// A fenced write reached the downstream store.
    Delivered {
        /// The resource (index).
        resource: usize,
        /// The fence attached.
        fence: u64,
        /// The highest fence the downstream store had accepted before.
        highest_before: Option<u64>,
        /// Whether it accepted the write.
        accepted: bool,
        /// The other writes in flight (client, fence) that this one made stale: their fences
        /// are below the new highest, so they are rejected at once.
        doomed: Vec<(usize, u64)>,
    },
    /// A purge found its groups.
    PurgeBegun {
        /// The purge instant.
        at: u64,
        /// The groups with a lock expired at `at`.
        groups: BTreeSet<LockId>,
    },
    /// A purge removed its groups' locks.
    Purged {
        /// The purge instant.
        at: u64,
        /// The groups it purged.
        groups: BTreeSet<LockId>,
        /// What it removed.
        removed: Vec<LockStatus>,
    },
    /// The client crashed and restarted with a new lock id.
    Crashed {
        /// The lock id it had.
        old: LockId,
        /// The lock id it restarted with.
        new: LockId,
    },
    /// The store failed over: its clock jumped from one reading to another.
    FailedOver {
        /// The store's clock before, in ms.
        from: u64,
        /// The store's clock after, in ms.
        to: u64,
    },
    /// A proclaim: the value, and whether the store took it (else why not).
    Proclaimed {
        /// The value proclaimed.
        value: u8,
        /// What `set_comment` answered: the lock it changed, or the error's text.
        outcome: Result<LockStatus, String>,
    },
    /// The observer's read: who led at the store's instant.
    ObserveSent {
        /// The leader, if any.
        leader: Option<lockwright_engine::election::Leader>,
    },
    /// The answer of an observer's read arrived.
    Observed {
        /// The leader it named, if any.
        read: Option<lockwright_engine::election::Leader>,
        /// What the observer reported of it.
        reported: Option<lockwright_engine::election::Leader>,
        /// The highest fence reported before.
        highest_before: Option<u64>,
    },
    /// A waiter heard a wake: the store handed its place the lock with `fence`.
    HeardWake {
        /// The resource (index).
        resource: usize,
        /// The handed lock's fence.
        fence: u64,
        /// Until when (its clock) it trusts the lock now, or `None`: the rule does not let
        /// it, and the wake only wakes it.
        trust_until: Option<u64>,
    },
    /// A pause, a resume, or a tick: nothing for the store.
    Nothing,
}

fn list(locks: &[LockStatus]) -> String {
    let items: Vec<String> = locks
        .iter()
        .map(|l| {
            format!(
                "{} {} on {} (fence {}, expires {})",
                mode_word(l.mode),
                l.lock_id.as_str(),
                l.resource,
                l.fence,
                l.expires_at
                    .map_or_else(|| "never".to_string(), |e| e.as_millis().to_string())
            )
        })
        .collect();
    if items.is_empty() {
        "nothing".to_string()
    } else {
        items.join(", ")
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Effect::Granted {
                status,
                took_over,
                trust_until,
                ..
            } => {
                write!(
                    f,
                    "granted {} {} with fence {}, expires {}",
                    mode_word(status.mode),
                    status.resource,
                    status.fence,
                    status
                        .expires_at
                        .map_or_else(|| "never".to_string(), |e| e.as_millis().to_string())
                )?;
                for k in took_over {
                    write!(
                        f,
                        "; took over {}'s expired lock (fence {})",
                        k.lock_id.as_str(),
                        k.fence
                    )?;
                }
                match trust_until {
                    Some(t) => write!(f, "; the client trusts it while its clock < {t}"),
                    None => write!(f, "; the drift margin leaves the client nothing to trust"),
                }
            }
            Effect::Refused {
                resource,
                mode,
                queued,
                ..
            } => {
                write!(
                    f,
                    "refused: r{resource} is already locked ({})",
                    mode_word(*mode)
                )?;
                match queued {
                    Some(n) => write!(f, "; queued with {n} waiter(s) ahead"),
                    None => Ok(()),
                }
            }
            Effect::Left { resource, had, .. } => {
                if *had {
                    write!(f, "its place in r{resource}'s queue removed")
                } else {
                    write!(f, "it had no place left in r{resource}'s queue")
                }
            }
            Effect::StoppedWaiting { resource } => {
                write!(f, "it stops asking for r{resource}")
            }
            Effect::Unlocked { lock_id, removed } => {
                write!(
                    f,
                    "unlocked {}: removed {}",
                    lock_id.as_str(),
                    list(removed)
                )
            }
            Effect::Renewed { lock_id, renewed } => {
                write!(f, "renewed {}: {}", lock_id.as_str(), list(renewed))
            }
            Effect::NotRenewable { lock_id, locks } => {
                write!(
                    f,
                    "renew of {} refused, not renewable: {}",
                    lock_id.as_str(),
                    list(locks)
                )
            }
            Effect::RenewNotFound { lock_id } => {
                write!(f, "renew of {} refused: no lock found", lock_id.as_str())
            }
            Effect::WriteSent { resource, fence } => {
                write!(f, "write for r{resource} with fence {fence} in flight")
            }
            Effect::Delivered {
                resource,
                fence,
                highest_before,
                accepted,
                doomed,
            } => {
                let verb = if *accepted { "accepted" } else { "REJECTED" };
                write!(f, "downstream {verb} fence {fence} for r{resource}")?;
                if let Some(h) = highest_before {
                    write!(f, " (highest accepted before: {h})")?;
                }
                for (client, stale) in doomed {
                    write!(
                        f,
                        "; c{client}'s write with fence {stale} is now stale: REJECTED on arrival"
                    )?;
                }
                Ok(())
            }
            Effect::PurgeBegun { at, groups } => {
                let g: Vec<&str> = groups.iter().map(LockId::as_str).collect();
                write!(
                    f,
                    "purge at {at} ms: groups with an expired lock: [{}]",
                    g.join(", ")
                )
            }
            Effect::Purged { at, removed, .. } => {
                write!(f, "purge at {at} ms removed {}", list(removed))
            }
            Effect::Crashed { old, new } => {
                write!(
                    f,
                    "beliefs lost; lock id {} abandoned, restarts as {}",
                    old.as_str(),
                    new.as_str()
                )
            }
            Effect::FailedOver { from, to } => {
                let way = if to > from { "forward" } else { "back" };
                write!(
                    f,
                    "the new primary's clock reads {to} ms where the old one read {from} ms \
                     (jumps {} ms {way})",
                    from.abs_diff(*to)
                )
            }
            Effect::Proclaimed { value, outcome } => match outcome {
                Ok(l) => write!(
                    f,
                    "{} on {} proclaims {} now",
                    l.lock_id.as_str(),
                    l.resource,
                    crate::state::value_word(*value)
                ),
                Err(e) => write!(f, "refused: {e}"),
            },
            Effect::ObserveSent { leader } => match leader {
                Some(l) => write!(f, "fence {} leads (value {:?})", l.fence, l.value),
                None => f.write_str("nobody leads"),
            },
            Effect::Observed { read, reported, .. } => write!(
                f,
                "read {:?}, reported {:?}",
                read.as_ref().map(|l| l.fence),
                reported.as_ref().map(|l| l.fence)
            ),
            Effect::HeardWake {
                resource,
                fence,
                trust_until,
            } => match trust_until {
                Some(t) => write!(
                    f,
                    "handed r{resource} with fence {fence}: trusts it while its clock < {t}"
                ),
                None => write!(
                    f,
                    "handed r{resource} with fence {fence}: not to be trusted, it only wakes"
                ),
            },
            Effect::Nothing => Ok(()),
        }
    }
}

/// The resource index of a status the engine returned for a model resource.
#[must_use]
pub fn status_resource(status: &LockStatus) -> usize {
    resource_index(&status.resource).expect("model resources are named r<index>")
}

/// The key of a status the engine returned.
#[must_use]
pub fn status_key(status: &LockStatus) -> LockKey {
    LockKey {
        resource: status_resource(status),
        lock_id: status.lock_id.clone(),
        mode: status.mode,
        created_at: status.created_at.as_millis(),
        fence: status.fence,
    }
}
