//! What a step did, as the engine (or the downstream store) reported it, and how a trace
//! prints it.

use std::collections::BTreeSet;
use std::fmt;

use lockwright_engine::{LockId, LockStatus, Mode};

use crate::state::{LockKey, mode_word, resource_index};

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
