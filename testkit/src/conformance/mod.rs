//! The conformance suite: every rule of the lock semantics, written once against the port,
//! [`LockStore`], and run for every backend. Every [`LockStore`] must pass it.
//!
//! A test file anywhere runs it against a [`Backend`] with
//!
//! ```ignore
//! lockwright_testkit::conformance_suite!(lockwright_testkit::Mem);
//! ```
//!
//! which expands, in that file, to one `#[test]` per case, named after the case, each on a
//! fresh store of the backend and a two-worker multi-threaded tokio runtime
//! ([`run`]); the test kit's own `tests/conformance_mem.rs` and `tests/conformance_mongo.rs`
//! do so. Time is a [`ManualClock`] shared with the store, so no case sleeps. The cases
//! are also public functions generic over the backend, `cases::<file>::<case>::<B>(&cx)`,
//! for a test that wants to run one of them by hand.
//!
//! A case calls the store through its [`Ctx`], which takes names as strings and checks them
//! with the engine's own constructors before the store sees them, as the library's client
//! does: so the cases of refused input hold every store to the same fields.
//!
//! The cases live in `cases/`, one file per operation, each written inside `cases! { ... }`:
//! the macro both defines a case and enters it in the suite, so a case cannot be left out.
//! Each file's `cases!` starts with the name of the file's suite macro (exported at the
//! crate root, hidden from the docs: macros exported from one crate share one namespace),
//! and a new file is entered with that name in the `case_files!` list of `cases/mod.rs`.
//! rustfmt does not format inside `cases! { ... }`: lay a case out as rustfmt would, four
//! columns in.
//!
//! [`LockStore`]: lockwright_engine::LockStore

use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::time::validate_margin;
use lockwright_engine::{Error, ManualClock, Timestamp};

use crate::Backend;

mod calls;
pub use calls::Fair;

/// The instant every case starts at (2027-01-15), far from the epoch so that
/// "before"/"after" bounds have room on both sides.
pub const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Shards of an in-memory store: four, so that group operations span several shards even
/// in small cases.
pub const SHARDS: usize = 4;

/// The renew margin of the cases unless one asks for another: one second, the library
/// client's default.
pub const RENEW_MARGIN: Duration = Duration::from_secs(1);

/// What a case works with: a store of the backend, its clock, its takeover grace and the
/// renew margin the renewals pass. Its methods are the calls the cases make (see `calls`).
/// Cloning is cheap and shares the store (for cases that call it from several tasks).
#[derive(Debug)]
pub struct Ctx<B: Backend> {
    /// The store.
    pub store: Arc<B::Store>,
    /// The clock of the store.
    pub clock: Arc<ManualClock>,
    /// The store's takeover grace.
    pub grace: Duration,
    /// The renew margin that [`Ctx::renew`], [`Ctx::renew_one`] pass to the store.
    pub margin: Duration,
}

impl<B: Backend> Clone for Ctx<B> {
    fn clone(&self) -> Self {
        Ctx {
            store: Arc::clone(&self.store),
            clock: Arc::clone(&self.clock),
            grace: self.grace,
            margin: self.margin,
        }
    }
}

impl<B: Backend> Ctx<B> {
    /// A fresh store at [`T0`] with no takeover grace, so that the cases state each rule
    /// at the instant it turns (the cases of `grace` add one), and, in a build with
    /// `--cfg lockwright_mutants`, the mutant `LOCKWRIGHT_MUTANT` names switched on.
    pub async fn new() -> Self {
        Self::with_grace(Duration::ZERO).await
    }

    /// A fresh store at [`T0`] with takeover `grace`.
    pub async fn with_grace(grace: Duration) -> Self {
        Self::build(grace, RENEW_MARGIN).await
    }

    /// A fresh store at [`T0`] with no takeover grace, whose renewals pass `margin`
    /// (checked as the library's client checks it: before any store exists).
    ///
    /// # Errors
    /// `InvalidArgument` naming `renew_margin` when over 100 years.
    pub async fn with_renew_margin(margin: Duration) -> Result<Self, Error> {
        let margin = validate_margin(margin)?;
        Ok(Self::build(Duration::ZERO, margin).await)
    }

    async fn build(grace: Duration, margin: Duration) -> Self {
        #[cfg(lockwright_mutants)]
        crate::activate_mutant();
        let clock = Arc::new(ManualClock::new(T0));
        let store = B::store(Arc::clone(&clock), SHARDS, grace).await;
        Ctx {
            store: Arc::new(store),
            clock,
            grace,
            margin,
        }
    }

    /// Cleans up the backend.
    pub async fn teardown(self) {
        B::teardown(&self.store).await;
    }
}

/// Runs one case as the suite's tests do: on a fresh [`Ctx`] of `B`, on a multi-threaded
/// tokio runtime of two workers (the stores' own tasks need them), and tears the store down
/// after it (not after a failure: a failing case panics, and leaves its store behind).
///
/// # Panics
/// When the case fails, or the runtime cannot be built.
pub fn run<B: Backend>(case: impl AsyncFnOnce(&Ctx<B>)) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case")
        .block_on(async {
            let cx = Ctx::<B>::new().await;
            case(&cx).await;
            cx.teardown().await;
        });
}

/// Defines the cases of a file and enters them in the suite: each `async fn name(cx) { ... }`
/// becomes `pub async fn name<B: Backend>(cx: &Ctx<B>)`, and the file gets an exported macro
/// of the name given first (`cases! { __conformance_xlock; ... }`) that expands to one
/// `#[test]` per case for a backend (`conformance_suite!` calls it for every file of
/// `case_files!`).
macro_rules! cases {
    (@with_dollar ($d:tt) $suite:ident; $(
        $(#[$meta:meta])*
        async fn $name:ident($cx:ident) $body:block
    )*) => {
        $(
            #[doc = concat!("The conformance case `", stringify!($name), "`.")]
            $(#[$meta])*
            pub async fn $name<B: $crate::Backend>($cx: &$crate::conformance::Ctx<B>)
                $body
        )*

        /// One test per case of this file against the backend given (`$file` is this
        /// file's module).
        #[doc(hidden)]
        #[macro_export]
        macro_rules! $suite {
            ($d backend:ty, $d file:ident) => {
                $(
                    #[test]
                    fn $name() {
                        $d crate::conformance::run::<$d backend>(
                            $d crate::conformance::cases::$d file::$name::<$d backend>,
                        );
                    }
                )*
            };
        }
    };
    ($($cases:tt)*) => {
        cases!(@with_dollar ($) $($cases)*);
    };
}

/// Declares the files of cases, each with the name of its suite macro, and defines
/// `conformance_suite!(TheBackend)`, which expands to the tests of every file listed.
macro_rules! case_files {
    (@with_dollar ($d:tt) $($file:ident => $suite:ident),* $(,)?) => {
        $(pub mod $file;)*

        /// Expands to one `#[test]` per conformance case for the [`Backend`](crate::Backend)
        /// type given, each named after its case: see [`conformance`](crate::conformance).
        #[macro_export]
        macro_rules! conformance_suite {
            ($d backend:ty) => {
                $($d crate::$suite!($d backend, $file);)*
            };
        }
    };
    ($($files:tt)*) => {
        case_files!(@with_dollar ($) $($files)*);
    };
}

pub mod cases;
mod support;
