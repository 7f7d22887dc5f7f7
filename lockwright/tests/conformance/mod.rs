//! The conformance suite: every rule of the lock semantics, written once against the public
//! [`Client`] API and run for every backend.
//!
//! A backend test file calls `conformance_suite!(TheBackend)` with a
//! [`lockwright_testkit::Backend`], which expands to one `#[tokio::test]` per case. Time is
//! a [`ManualClock`] shared with the store, so no case sleeps.
//!
//! The cases live in `cases/`, one file per operation, each written inside `cases! { ... }`:
//! the macro both defines a case and enters it in the suite, so a case cannot be left out.
//! A new file of cases is entered in the `case_files!` list of `cases/mod.rs`. rustfmt does
//! not format inside `cases! { ... }`: lay a case out as rustfmt would, four columns in.

use std::sync::Arc;

use lockwright::{Client, ManualClock, Timestamp};
use lockwright_testkit::Backend;

/// The instant every case starts at (2027-01-15), far from the epoch so that
/// "before"/"after" bounds have room on both sides.
pub const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Shards of an in-memory store: four, so that group operations span several shards even
/// in small cases.
pub const SHARDS: usize = 4;

/// What a case works with.
pub struct Ctx<B: Backend> {
    /// A client with the default renew margin.
    pub client: Client<B::Store>,
    /// The clock of the store.
    pub clock: Arc<ManualClock>,
}

impl<B: Backend> Ctx<B> {
    /// A fresh store at [`T0`].
    pub async fn new() -> Self {
        #[cfg(lockwright_mutants)]
        lockwright::engine::mutants::activate_from_env();
        let clock = Arc::new(ManualClock::new(T0));
        let client = Client::new(B::store(Arc::clone(&clock), SHARDS).await);
        Ctx { client, clock }
    }

    /// Cleans up the backend.
    pub async fn teardown(self) {
        B::teardown(self.client.store()).await;
    }
}

/// Defines the cases of a file and enters them in the suite: each `async fn name(cx) { ... }`
/// becomes `pub async fn name<B: Backend>(cx: &Ctx<B>)`, and the file gets a `suite!` macro
/// that expands to one `#[tokio::test]` per case for a backend (`conformance_suite!` calls
/// it for every file of `case_files!`).
macro_rules! cases {
    (@with_dollar ($d:tt) $(
        $(#[$meta:meta])*
        async fn $name:ident($cx:ident) $body:block
    )*) => {
        $(
            $(#[$meta])*
            pub async fn $name<B: lockwright_testkit::Backend>($cx: &$crate::conformance::Ctx<B>)
                $body
        )*

        /// One test per case of this file against the backend given (`$file` is this
        /// file's module).
        macro_rules! suite {
            ($d backend:ty, $d file:ident) => {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let cx = conformance::Ctx::<$d backend>::new().await;
                        conformance::cases::$d file::$name(&cx).await;
                        cx.teardown().await;
                    }
                )*
            };
        }
        pub(crate) use suite;
    };
    ($($cases:tt)*) => {
        cases!(@with_dollar ($) $($cases)*);
    };
}

/// Declares the files of cases and defines `conformance_suite!(TheBackend)`, which expands
/// to the tests of every file listed.
macro_rules! case_files {
    (@with_dollar ($d:tt) $($file:ident),* $(,)?) => {
        $(pub mod $file;)*

        /// Expands to one test per conformance case for the backend type given.
        macro_rules! conformance_suite {
            ($d backend:ty) => {
                $(conformance::cases::$file::suite!($d backend, $file);)*
            };
        }
    };
    ($($files:tt)*) => {
        case_files!(@with_dollar ($) $($files)*);
    };
}

#[macro_use]
pub mod cases;
mod support;
