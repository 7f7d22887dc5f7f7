//! CPU time, of this process and of a MongoDB server: what the harnesses divide by the
//! operations they count.

use std::time::Duration;

use mongodb::Client;
use mongodb::bson::{Bson, doc};

/// The CPU time this process has used (every thread: the clients, their driver, the
/// harness).
pub fn process_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).unwrap();
    Duration::new(
        u64::try_from(t.tv_sec()).unwrap(),
        u32::try_from(t.tv_nsec()).unwrap(),
    )
}

/// The CPU time the server behind `admin` has used: `serverStatus`' `extra_info`
/// `user_time_us` and `system_time_us` (reported on Linux); `None` where it does not say.
pub async fn server_cpu(admin: &Client) -> Option<Duration> {
    let status = admin
        .database("admin")
        .run_command(doc! { "serverStatus": 1 })
        .await
        .ok()?;
    let info = status.get_document("extra_info").ok()?;
    let us = |field: &str| match info.get(field)? {
        Bson::Int64(n) => u64::try_from(*n).ok(),
        Bson::Int32(n) => u64::try_from(*n).ok(),
        Bson::Double(n) => Some(*n as u64),
        _ => None,
    };
    Some(Duration::from_micros(
        us("user_time_us")? + us("system_time_us")?,
    ))
}
