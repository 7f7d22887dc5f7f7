//! What Lockwright's benchmarks share: how a run is configured, where each bench writes the
//! facts criterion does not keep (commands issued, query plans, sizes), and the report that
//! reads them back next to criterion's medians and judges them against the targets in `benches/README.md`.
//!
//! The benches themselves are the `[[bench]]` targets of this package (`engine.rs`,
//! `store_mem.rs`, `store_mongo/`); `scripts/bench` runs them and then the `bench-report`
//! binary, which writes `target/bench-report.md`.

pub mod report;
pub mod results;
pub mod waiting;

pub use results::{Meta, Record, RunMode};
