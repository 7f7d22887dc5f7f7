//! The store's own retries against a real server (`MONGODB_URI`), driven deterministically
//! with MongoDB's `failCommand` fail point: grants retried with the same grant id, group
//! transactions retried on transient errors and unknown commit results, both bounded by
//! `RETRY_WINDOW`, and failures whose outcome may have been applied reported as such.
//!
//! The server must run with `--setParameter enableTestCommands=1` (`scripts/mongod.sh run`
//! and the test kit's replica set fixture start it so). A server has one `failCommand`
//! configuration at a time, so the tests here take turns (`FAIL_POINT`); each restricts the
//! fail point to its own client through a unique `appName`, so that other clients and test
//! binaries are unaffected, and always switches it off again, also when the test fails.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, TryStreamExt};
use lockwright_engine::{
    Error, Filter, LockStatus, LockStore, ManualClock, Mode, SharedLimit, Timestamp,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    CommandLog, fresh_store_on, id, options, request, teardown, ttl,
};
use mongodb::Client;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};

/// How long any one store call may take before the test calls it hung. Generous on
/// purpose: the store gives up after `RETRY_WINDOW` plus one attempt; no tighter wall time
/// is asserted.
const HANG_GUARD: Duration = Duration::from_secs(60);

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Held while a test may have the server's one `failCommand` configuration set.
static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Server codes used to make commands fail.
const SHUTDOWN_IN_PROGRESS: i32 = 91; // retryable write error
const MAX_TIME_MS_EXPIRED: i32 = 50; // an unknown commit result
const WRITE_CONFLICT: i32 = 112;
const OPERATION_FAILED: i32 = 96; // neither retryable nor transient
const WRITE_CONCERN_FAILED: i32 = 64; // a write concern timeout

mod fixture;
mod grants;
mod transactions;

use fixture::*;
