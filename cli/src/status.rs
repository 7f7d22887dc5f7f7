//! `lockwright status`: the locks as a table with counts, or as JSON lines.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::{Args, ValueEnum};
use comfy_table::{ContentArrangement, Table, presets};
use lockwright::{Client, Error, Filter, LockStatus, Mode, ResourceSummary, Timestamp, Waiter};
use lockwright_engine::error::Escaped;
use serde::Serialize;

use crate::connect::{ConnArgs, connect};
use crate::contention;
use crate::durations::format_ttl;
use crate::exit::{self, CliError};

/// `lockwright status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only locks on this resource.
    #[arg(long, value_name = "R")]
    resource: Option<String>,
    /// Only locks held by this owner.
    #[arg(long, value_name = "O")]
    owner: Option<String>,
    /// Only exclusive (x) or shared (s) locks.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Only locks whose remaining TTL is below DURATION.
    #[arg(long, value_name = "DURATION", value_parser = crate::durations::duration)]
    expiring_within: Option<Duration>,
    /// One JSON object per lock and line, without the counts.
    #[arg(long)]
    json: bool,
    /// Instead of the locks, a view of the resources, most contended first (most waiters,
    /// longest wait, most holders), refreshed every --every until SIGINT or SIGTERM.
    #[arg(long, group = "contention",
          conflicts_with_all = ["json", "resource", "owner", "mode", "expiring_within"])]
    watch: bool,
    /// With --watch: the time between refreshes.
    #[arg(long, value_name = "DURATION", default_value = "2s", requires = "watch",
          value_parser = crate::durations::duration)]
    every: Duration,
    /// Instead of the locks, the collection's state as Prometheus gauges in the text format
    /// (for a scrape job or a textfile collector): totals, and the --top most contended
    /// resources labelled by name.
    #[arg(long, group = "contention",
          conflicts_with_all = ["json", "resource", "owner", "mode", "expiring_within"])]
    prometheus: bool,
    /// With --watch or --prometheus: how many of the most contended resources to show.
    #[arg(long, value_name = "N", default_value_t = 20, requires = "contention")]
    top: usize,
}

/// A lock mode on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Exclusive.
    #[value(name = "x", alias = "exclusive")]
    Exclusive,
    /// Shared.
    #[value(name = "s", alias = "shared")]
    Shared,
}

/// Runs `lockwright status`.
pub async fn status(conn: &ConnArgs, args: &StatusArgs) -> Result<u8, CliError> {
    let client = Client::new(connect(conn).await?);
    if args.watch {
        return contention::watch(&client, conn, args.every, args.top).await;
    }
    if args.prometheus {
        return contention::prometheus(&client.summary().await?, conn, args.top);
    }
    let mut filter = Filter::new();
    if let Some(r) = &args.resource {
        filter = filter.resource(r.clone());
    }
    if let Some(o) = &args.owner {
        filter = filter.owner(o.clone());
    }
    if let Some(m) = args.mode {
        filter = filter.mode(match m {
            ModeArg::Exclusive => Mode::Exclusive,
            ModeArg::Shared => Mode::Shared,
        });
    }
    if let Some(d) = args.expiring_within {
        filter = filter.ttl_lt(d);
    }
    let (locks, problem) = match client.status(&filter).await {
        Ok(locks) => (locks, None),
        // The readable locks are shown; the malformed documents are named after them.
        Err(Error::Skipped { done, skipped }) => {
            let err = Error::Skipped {
                done: Vec::new(),
                skipped,
            };
            (done, Some(CliError::new(exit::FAILURE, exit::chain(&err))))
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        for lock in &locks {
            let line = serde_json::to_string(&JsonLock::from(lock))
                .map_err(|e| CliError::new(exit::FAILURE, format!("cannot write JSON: {e}")))?;
            println!("{line}");
        }
    } else {
        print_table(&locks);
        if let Some(r) = &args.resource {
            print_waiters(r, &client.waiters(r).await?);
        } else if args.owner.is_none() && args.mode.is_none() && args.expiring_within.is_none() {
            // The whole collection's waiters, under a listing of the whole collection (a
            // filtered listing would pair them with locks of other resources). Malformed
            // documents are already named by the listing's error.
            let summary = client.summary().await?;
            if let Some(line) = waiting_line(&summary.resources) {
                println!("{line}");
            }
        }
    }
    match problem {
        Some(p) => Err(p),
        None => Ok(exit::OK),
    }
}

/// One lock as a JSON line: never the lock id, only its tag.
#[derive(Serialize)]
struct JsonLock<'a> {
    resource: &'a str,
    mode: Mode,
    owner: Option<&'a str>,
    host: Option<&'a str>,
    comment: Option<&'a str>,
    created_at: String,
    renewed_at: Option<String>,
    expires_at: Option<String>,
    /// Remaining TTL in milliseconds; `null` without a TTL, 0 once expired.
    ttl_ms: Option<u64>,
    fence: u64,
    tag: String,
}

impl<'a> From<&'a LockStatus> for JsonLock<'a> {
    fn from(lock: &'a LockStatus) -> Self {
        JsonLock {
            resource: lock.resource.as_str(),
            mode: lock.mode,
            owner: lock.holder.owner.as_deref(),
            host: lock.holder.host.as_deref(),
            comment: lock.holder.comment.as_deref(),
            created_at: rfc3339(lock.created_at),
            renewed_at: lock.renewed_at.map(rfc3339),
            expires_at: lock.expires_at.map(rfc3339),
            ttl_ms: lock
                .ttl
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            fence: lock.fence,
            tag: lock.lock_id.tag(),
        }
    }
}

fn rfc3339(t: Timestamp) -> String {
    humantime::format_rfc3339_millis(t.to_system_time()).to_string()
}

/// The table, then a line of counts.
fn print_table(locks: &[LockStatus]) {
    if !locks.is_empty() {
        let mut table = Table::new();
        table
            .load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header([
                "RESOURCE", "MODE", "OWNER", "HOST", "COMMENT", "CREATED", "TTL", "FENCE", "LOCK",
            ]);
        for lock in locks {
            let text = |s: &Option<String>| s.as_deref().map_or("-".to_owned(), escaped);
            table.add_row([
                escaped(lock.resource.as_str()),
                lock.mode.to_string(),
                text(&lock.holder.owner),
                text(&lock.holder.host),
                text(&lock.holder.comment),
                humantime::format_rfc3339_seconds(lock.created_at.to_system_time()).to_string(),
                lock.ttl.map_or_else(|| "none".to_owned(), format_ttl),
                lock.fence.to_string(),
                lock.lock_id.tag(),
            ]);
        }
        // comfy-table pads each line on the right; trim it for copying and diffing.
        for line in table.to_string().lines() {
            println!("{}", line.trim_end());
        }
    }
    println!("{}", counts(locks));
}

/// The fair waiters queued on `resource`, first come first, after its locks.
fn print_waiters(resource: &str, waiters: &[Waiter]) {
    if waiters.is_empty() {
        return;
    }
    println!("{} waiting for {}:", waiters.len(), escaped(resource));
    for (i, w) in waiters.iter().enumerate() {
        println!(
            "  {}. {} since {}",
            i + 1,
            w.mode,
            humantime::format_rfc3339_seconds(w.queued_at.to_system_time())
        );
    }
}

/// `waiting: 3 for `jobs` (longest 4.2s), 1 for `tenant-7` (longest 850ms)`, the five
/// resources with the most waiters named, or `None` when nobody waits.
fn waiting_line(resources: &[ResourceSummary]) -> Option<String> {
    let waited: Vec<&ResourceSummary> = resources.iter().filter(|r| r.waiting() > 0).collect();
    if waited.is_empty() {
        return None;
    }
    let named: Vec<String> = waited
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "{} for `{}` (longest {})",
                r.waiting(),
                escaped(r.resource.as_str()),
                r.longest_wait.map_or_else(|| "-".to_owned(), format_ttl)
            )
        })
        .collect();
    let more = waited.len().saturating_sub(5);
    let more = if more > 0 {
        format!(", and {more} more resource(s)")
    } else {
        String::new()
    };
    Some(format!("waiting: {}{more}", named.join(", ")))
}

/// A stored string as printed: control characters escaped, so it cannot forge a line.
fn escaped(s: &str) -> String {
    Escaped(s).to_string()
}

/// `3 locks on 2 resources: 2 exclusive, 1 shared, 1 expired`, or `no locks`.
fn counts(locks: &[LockStatus]) -> String {
    if locks.is_empty() {
        return "no locks".to_owned();
    }
    let resources: BTreeSet<&str> = locks.iter().map(|l| l.resource.as_str()).collect();
    let exclusive = locks.iter().filter(|l| l.mode == Mode::Exclusive).count();
    let expired = locks
        .iter()
        .filter(|l| l.ttl == Some(Duration::ZERO))
        .count();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} on {}: {exclusive} exclusive, {} shared, {expired} expired",
        plural(locks.len(), "lock", "locks"),
        plural(resources.len(), "resource", "resources"),
        locks.len() - exclusive
    )
}
