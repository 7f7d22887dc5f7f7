//! The conformance suite (`lockwright_testkit::conformance`) against MongoDB (a real server
//! from `MONGODB_URI`), with the server's `$$NOW` replaced by the suite's manual clock inside
//! the shipped pipelines: one test per case.
#![cfg(feature = "mongo")]

lockwright_testkit::conformance_suite!(lockwright_testkit::Mongo);
