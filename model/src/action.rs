//! What can happen in one step, and what the engine answered.

use std::fmt;

pub use crate::effect::{Effect, status_key, status_resource};

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
