//! Distributed locks for Rust services, backed by MongoDB, with verified rules.
//!
//! Lockwright gives a fleet of workers "only one of us does this" (exclusive locks),
//! "at most N of us touch this" (shared locks with a limit) and groups of locks that are
//! renewed and released together under one secret lock id. Every time decision is made by
//! the store's clock (MongoDB's, never the clients'), and every grant carries a fencing
//! token that strictly increases per resource.
//!
//! - [`Client`] — `lock` (exclusive or shared, as [`LockOptions`] say), `unlock`, `renew`,
//!   `status`, `purge`, `create_indexes`;
//! - [`Locker`] — waiting acquire, renewal of every held lock by one task, the lost-lock
//!   signal and fencing tokens on each [`LockGuard`];
//! - [`Purger`] — removes expired lock groups at an interval;
//! - [`MemStore`] (feature `mem`, on by default) — the embedded in-memory backend;
//! - `MongoStore` (feature `mongo`) — the MongoDB backend;
//! - `FencedCollection` (feature `mongo`) — writes to the user's own MongoDB collections
//!   that the server refuses once a higher fence has written the document.
//!
//! The rules, and the `Locker`'s sans-IO state machine (`LockerCore`, for whoever drives it
//! in a runtime of their own), live in the crate `lockwright-engine`; this crate re-exports
//! what a user of the client, the `Locker` or a store of their own needs. SEMANTICS.md in
//! the repository states the rules in full.
//!
#![cfg_attr(feature = "mem", doc = "```")]
#![cfg_attr(not(feature = "mem"), doc = "```ignore")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockwright::Error> {
//! use std::time::Duration;
//! use lockwright::{Client, LockOptions, MemStore, SharedLimit, generate_lock_id};
//!
//! let client = Client::new(MemStore::new());
//! // At most two holders of "tenant-42" at once.
//! let two = LockOptions::shared(SharedLimit::new(2)?, Duration::from_secs(30));
//! client.lock("tenant-42", generate_lock_id(), &two).await?;
//! client.lock("tenant-42", generate_lock_id(), &two).await?;
//! let third = client.lock("tenant-42", generate_lock_id(), &two).await;
//! assert!(matches!(third, Err(lockwright::Error::AlreadyLocked { .. })));
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod client;
mod election;
mod hostname;
mod locker;
pub mod metrics;
mod purger;

pub use client::{Client, DEFAULT_RENEW_MARGIN, generate_lock_id};
pub use election::{Leader, Leadership};
pub use locker::{Ended, LockGuard, Locker, LockerConfig, LockerStats};
pub use purger::{Purger, PurgerHandle, PurgerReport};

pub use lockwright_engine::{
    Access, DEFAULT_TAKEOVER_GRACE, Error, Filter, Hint, HintStream, Holder, LockId, LockOptions,
    LockRequest, LockStatus, LockStore, MAX_TAKEOVER_GRACE, MalformedDocument, Mode, Notices,
    Outcome, Query, Reading, Release, Released, Renewal, Resource, ResourceSummary, SharedLimit,
    Summary, Ticket, Timestamp, Ttl, Waiter,
};

/// A clock that moves only when told to: hand it to `MemStore::with_clock` to drive expiry
/// in tests without sleeping (feature `test-util`).
#[cfg(feature = "test-util")]
pub use lockwright_engine::ManualClock;

/// The embedded in-memory backend.
#[cfg(feature = "mem")]
pub use lockwright_store_mem::{self as store_mem, MemStore};

/// The MongoDB backend.
#[cfg(feature = "mongo")]
pub use lockwright_store_mongo::{self as store_mongo, MongoStore};

/// Fenced writes to the user's own MongoDB collections: a write applies only if no higher
/// fence of its resource has written the document (see [`LockGuard::fenced`]). Each write
/// method returns the write, which runs when awaited (`.session(&mut session)` first runs it
/// in a session).
#[cfg(feature = "mongo")]
pub use lockwright_store_mongo::{
    DEFAULT_FENCE_FIELD, FencedCollection,
    fenced::{FencedDelete, FencedInsert, FencedReplace, FencedUpdate},
};

/// The README's examples, compiled and run as doc tests (they use every backend).
#[cfg(all(doctest, feature = "mem", feature = "mongo"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The fenced-write guide's examples, run as doc tests like the README's.
#[cfg(all(doctest, feature = "mem", feature = "mongo"))]
#[doc = include_str!("../../docs/fencing.md")]
struct FencingDoctests;
