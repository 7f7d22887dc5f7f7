//! Integration tests of the `lockwright` binary against the MongoDB at `MONGODB_URI`
//! (`scripts/test` starts one). Each test uses its own collection and drops it.

#[path = "cli/admin.rs"]
mod admin;
#[path = "cli/contention.rs"]
mod contention;
#[path = "cli/doctor.rs"]
mod doctor;
#[path = "cli/elect.rs"]
mod elect;
#[path = "cli/kill.rs"]
mod kill;
#[path = "cli/run.rs"]
mod run;
#[path = "cli/support.rs"]
mod support;
