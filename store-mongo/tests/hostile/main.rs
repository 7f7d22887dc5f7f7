//! Hostile stored documents against the MongoDB store (`MONGODB_URI`).
//!
//! Each input is a raw BSON document written straight into a fresh collection next to a
//! sentinel: a good document holding a live exclusive lock of another group. Every operation
//! that applies to the input (grants on its resource, unlock and renew of the lock ids it
//! names, status, purge) runs on the document as first written (the collection is restored
//! after each one), and its outcome is compared with what it must be:
//!
//! - for a document the decoder refuses (`decode_check` is `Err`): a grant on its resource is
//!   `Malformed` naming exactly what the decoder names; status, unlock and purge are `Skipped`
//!   naming it when they read it (else their ordinary result); renew of a group touching it
//!   is `Malformed`. The document is never written, whatever the operation.
//! - for every other document (and for the rest of the collection in every case): the
//!   engine's own rules applied to the collection as the store's decoder reads it, and the
//!   collection afterwards decodes to the engine's table.
//!
//! Never a panic, never `Backend`; after any error (other than `Skipped`, which finishes the
//! work on the other documents) every document is byte-for-byte as it was; the sentinel is
//! byte-for-byte unchanged throughout, and its group can still be renewed and unlocked. The
//! server-side validity test (`valid_expression`) agrees with the decoder on every input and
//! on every document the operations leave behind, and never raises a server error.
//!
//! The inputs: a wrong BSON type in every field the rules read; negative, double, NaN and
//! Decimal128 numbers where integers belong; `shared.count` disagreeing with the array; a
//! lock id twice in `shared.locks`; an exclusive lock held beside shared ones; `lastFence`
//! at `i64::MAX` and one below; an `_id` alone; 10,000 shared locks in one document (valid);
//! `$`-, dot- and NUL-containing names; look-alike names (Latin and Cyrillic `J`, composed and
//! decomposed `é`), which must stay distinct resources; what the Go library may write (empty
//! and 300-byte lock ids, a 5,000-byte owner, a 600-byte or empty resource, `exclusive:
//! {acquired: false}` alone, locks without `fence`, documents without `lastFence`); field
//! names the store's own pipelines use; strings that are not UTF-8; queues of fair waiters
//! that are not arrays, places that are not documents, a ticket, mode, `queuedAt` or
//! `expiresAt` missing or of the wrong type, an unknown mode, a ticket twice; and good
//! queues (null, empty, dead places only, live places on a free or held resource).
//!
//! All mismatches are collected and reported together at the end, after the one-line
//! summary; `HOSTILE_TRACE=1` prints every operation's outcome and each input's duration.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt, TryStreamExt};
use lockwright_engine::table;
use lockwright_engine::{
    Error, Filter, LockId, LockOptions, LockRequest, LockStatus, LockStore, LockTable,
    MalformedDocument, ManualClock, SharedLimit, Timestamp, Ttl,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    decode_check, fresh_store_on, options, snapshot, valid_expression,
};
use mongodb::bson::{Bson, DateTime, Document, RawDocumentBuf, doc};
use mongodb::{Client, Collection};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// How far the clock is moved before purge: past every `expiresAt` at `T0 + 60 s`, not past
/// the sentinel's.
const PURGE_AFTER: Duration = Duration::from_secs(120);
const SENTINEL: &str = "sentinel";
const SENTINEL_GROUP: &str = "sentinel-group";
const NEWCOMER: &str = "newcomer";
/// Cases run at once, each on its own collection.
const CONCURRENT_CASES: usize = 4;

mod cases;
mod documents;
mod lock_cases;
mod ops;
mod run;
mod stored;

use cases::*;
use documents::*;
use lock_cases::*;
use ops::*;
use run::*;
use stored::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_documents_are_refused_typed_and_isolated() {
    let client = Client::with_options(options().await).unwrap();
    let cases = cases();
    assert!(cases.len() >= 40, "{} inputs", cases.len());
    let mut reports: Vec<Report> = futures_util::stream::iter(&cases)
        .map(|c| run_case(&client, c))
        .buffer_unordered(CONCURRENT_CASES)
        .collect()
        .await;
    for field in ["exclusive.owner", "exclusive.lockId", "resource"] {
        reports.push(run_invalid_utf8_case(&client, field).await);
    }
    client.clone().shutdown().await;
    let inputs: usize = reports.iter().map(|r| r.inputs).sum();
    let operations: usize = reports.iter().map(|r| r.operations).sum();
    let failures: Vec<&String> = reports.iter().flat_map(|r| &r.failures).collect();
    println!("hostile: {inputs} inputs, {operations} operations checked");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| format!("- {f}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
