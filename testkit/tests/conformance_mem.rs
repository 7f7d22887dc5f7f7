//! The conformance suite (`lockwright_testkit::conformance`) against the in-memory backend:
//! one test per case.
#![cfg(feature = "mem")]

lockwright_testkit::conformance_suite!(lockwright_testkit::Mem);
