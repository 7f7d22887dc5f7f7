//! The rules of Lockwright distributed locks, with no IO and no clock.
//!
//! This crate reads no clock, touches no network or disk and draws no randomness: time
//! comes in as an argument (`now`), and every lock transition is a function of the lock
//! table, the request and `now` that returns the outcome and changes the table in place
//! (clone the table first to keep the old state). The in-memory store, the MongoDB store's
//! decoders, the model checker and the simulator all call these same functions, so there is
//! one copy of the rules.
//!
//! - [`LockTable::lock`] grants locks on one resource, exclusive or shared ([`Access`]);
//! - [`table::unlock`], [`table::renew`], [`table::status`] and [`table::purge`] work on a
//!   group of locks across one or more tables (shards), and [`Summary::of`] says how
//!   contended each resource is;
//! - [`LockStore`] is the port that backends implement.
//!
//! ```
//! use std::time::Duration;
//! use lockwright_engine::{LockOptions, LockRequest, LockTable, Timestamp};
//!
//! let grace = Duration::from_secs(2);
//! let mut table = LockTable::new().with_takeover_grace(grace);
//! let now = Timestamp::from_millis(1_000);
//! let a = LockRequest::new("report", "worker-a", &LockOptions::exclusive(Duration::from_secs(10)))?;
//! let b = LockRequest::new("report", "worker-b", &LockOptions::new())?;
//! let granted = table.lock(&a, now)?;
//! assert!(table.lock(&b, now).is_err()); // a live exclusive lock blocks
//! let expired = now.saturating_add(Duration::from_secs(10));
//! assert!(table.lock(&b, expired).is_err()); // expired, but held for the grace
//! let later = expired.saturating_add(grace);
//! let taken_over = table.lock(&b, later)?; // abandoned at `later`: taken over
//! assert!(taken_over.fence > granted.fence);
//! # Ok::<(), lockwright_engine::Error>(())
//! ```
#![forbid(unsafe_code)]

pub mod access;
pub mod election;
pub mod error;
pub mod filter;
pub mod invalid;
pub mod lease;
pub mod lock;
pub mod locker;
#[cfg(lockwright_mutants)]
pub mod mutants;
#[cfg(not(lockwright_mutants))]
mod mutants;
pub mod names;
pub mod notice;
pub mod options;
pub mod port;
pub mod queue;
pub mod resource;
pub mod status;
pub mod table;
pub mod time;
pub mod trust;

pub use access::{Access, Mode, SharedLimit};
pub use error::{BoxError, Error, MalformedDocument, Outcome, Result};
pub use filter::Filter;
pub use invalid::InvalidArgument;
pub use lock::{LockRequest, StoredLock};
pub use names::{LockId, Resource};
pub use notice::{HandedLock, Hint, HintStream, Notices};
pub use options::LockOptions;
pub use port::{LockStore, Query, Reading, Release, Released};
pub use queue::{Handoff, MAX_QUEUE_TTL, MIN_QUEUE_TTL, Queue, QueueEntry, Ticket, Waiter};
pub use resource::{
    ClusterTime, DEFAULT_TAKEOVER_GRACE, MAX_TAKEOVER_GRACE, ResourceState, check_takeover_grace,
};
pub use status::{Holder, LockStatus, Queued, Renewal};
pub use table::{LockTable, ResourceSummary, Summary};
pub use time::{Clock, LocalMs, ManualClock, Timestamp, Ttl};
