//! The conformance suite against MongoDB (a real server from `MONGODB_URI`), with the
//! server's `$$NOW` replaced by the suite's manual clock inside the shipped pipelines.
#![cfg(feature = "mongo")]

#[macro_use]
mod conformance;

conformance_suite!(lockwright_testkit::Mongo);
