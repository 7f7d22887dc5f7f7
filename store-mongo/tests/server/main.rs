//! Tests of the MongoDB backend against a real server (`MONGODB_URI`), beyond the
//! conformance suite: round trips, races, the shared schema, bad documents, bad set-ups.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use lockwright_engine::{
    Error, Filter, LockOptions, LockRequest, LockStore, ManualClock, Mode, Renewal, SharedLimit,
    Timestamp,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    fresh_store, fresh_store_on, id, monitored_client, options, request, teardown, ttl, uri,
};
use mongodb::Client;
use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::options::WriteConcern;

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

mod fenced;
mod hints;
mod news;
mod round_trips;
mod schema;
mod setup;
