//! `lockwright purge`: remove the expired locks, once or in a loop with a line per pass.

use std::time::{Duration, SystemTime};

use clap::Args;
use lockwright::{Client, Error, LockStatus, MongoStore};

use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};
use crate::progress;
use crate::signals::Signals;

/// `lockwright purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Keep purging, one line per pass, until SIGINT or SIGTERM.
    #[arg(long)]
    watch: bool,
    /// With --watch: the time between passes.
    #[arg(long, value_name = "DURATION", default_value = "30s", requires = "watch",
          value_parser = crate::durations::duration)]
    every: Duration,
}

/// Runs `lockwright purge`.
pub async fn purge(conn: &ConnArgs, args: &PurgeArgs) -> Result<u8, CliError> {
    let client = Client::new(connect(conn).await?);
    if !args.watch {
        let spinner = progress::spinner("purging expired locks".to_owned());
        let result = client.purge().await;
        spinner.finish_and_clear();
        let removed = result?;
        println!("{}", removed_line(&removed));
        return Ok(exit::OK);
    }
    watch(&client, args).await
}

/// Purges every `args.every` until SIGINT, SIGTERM or SIGHUP; one line per pass, then a
/// summary. Failed passes are reported and retried at the next one.
async fn watch(client: &Client<MongoStore>, args: &PurgeArgs) -> Result<u8, CliError> {
    let mut signals = Signals::catch()?;
    let mut ticks = tokio::time::interval(args.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut passes, mut removed_total, mut failures) = (0u64, 0usize, 0u64);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            signal = signals.recv() => {
                println!(
                    "stopped by {signal} after {passes} pass(es): removed {removed_total} \
                     lock(s), {failures} failed pass(es)"
                );
                return Ok(exit::OK);
            }
        }
        passes += 1;
        let now = humantime::format_rfc3339_seconds(SystemTime::now());
        let result = tokio::select! {
            result = client.purge() => result,
            signal = signals.recv() => {
                println!(
                    "stopped by {signal} during pass {passes}: removed {removed_total} \
                     lock(s), {failures} failed pass(es)"
                );
                return Ok(exit::OK);
            }
        };
        match result {
            Ok(removed) => {
                removed_total += removed.len();
                println!("{now} pass {passes}: {}", removed_line(&removed));
            }
            Err(err) => {
                failures += 1;
                if let Error::PurgeIncomplete { removed, .. } = &err {
                    removed_total += removed.len();
                }
                if let Error::Skipped { done, .. } = &err {
                    removed_total += done.len();
                }
                println!(
                    "{now} pass {passes}: failed: {}",
                    CliError::from(err).message
                );
            }
        }
    }
}

/// `removed 2 expired lock(s): `a` #1f2e, `b` #9c0d`, at most five named.
fn removed_line(removed: &[LockStatus]) -> String {
    if removed.is_empty() {
        return "removed 0 expired locks".to_owned();
    }
    let named: Vec<String> = removed
        .iter()
        .take(5)
        .map(|l| format!("`{}` {}", l.resource, l.lock_id.tag()))
        .collect();
    let more = removed.len().saturating_sub(5);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "removed {} expired lock(s): {}{more}",
        removed.len(),
        named.join(", ")
    )
}
