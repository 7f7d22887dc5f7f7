//! The conformance suite against the in-memory backend.
#![cfg(feature = "mem")]

#[macro_use]
mod conformance;

conformance_suite!(lockwright_testkit::Mem);
