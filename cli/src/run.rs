//! `lockwright run`: take the lock, run CMD under it, renew while it runs, release after.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use lockwright::{
    Client, Error, Filter, LockGuard, LockOptions, LockStatus, Locker, LockerConfig, MongoStore,
    SharedLimit,
};
use lockwright_engine::error::Escaped;

use crate::connect::ConnArgs;
use crate::exit::{self, CliError};
use crate::progress;
use crate::signals::{self, Signals};
use crate::supervise::{CmdArgs, Supervised, locker_for, supervise};

/// `lockwright run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The resource to lock.
    resource: String,
    /// Take a shared lock instead of an exclusive one.
    #[arg(long)]
    shared: bool,
    /// With --shared: at most N holders at once.
    #[arg(long, value_name = "N", requires = "shared", value_parser = shared_limit)]
    limit: Option<SharedLimit>,
    /// How long the lock lives unless renewed (renewed at half of it while CMD runs).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::durations::duration)]
    ttl: Duration,
    /// Wait for the lock while it is held, for as long as it takes.
    #[arg(long, conflicts_with = "wait_until")]
    wait: bool,
    /// Wait for the lock at most DURATION, then exit with 75.
    #[arg(long, value_name = "DURATION", value_parser = crate::durations::duration)]
    wait_until: Option<Duration>,
    /// While waiting, keep a place in the resource's queue (the default): waiters are
    /// granted in the order they came, and a writer is not overtaken by readers that came
    /// after it.
    #[arg(long, conflicts_with = "race")]
    fair: bool,
    /// While waiting, race instead of queueing: poll, and take the lock whenever it is free
    /// at that moment, whoever came first.
    #[arg(long)]
    race: bool,
    /// Who holds the lock, as `status` shows it [default: $USER].
    #[arg(long, value_name = "NAME")]
    owner: Option<String>,
    /// Free text stored with the lock [default: CMD's program name].
    #[arg(long, value_name = "TEXT")]
    comment: Option<String>,
    #[command(flatten)]
    cmd: CmdArgs,
}

/// How long releasing the lock after CMD exits may take before lockwright gives up (the
/// lock then expires by its TTL).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `lockwright run`; returns CMD's exit code or one of lockwright's own.
pub async fn run(conn: &ConnArgs, args: RunArgs) -> Result<u8, CliError> {
    let options = lock_options(&args);
    let (locker, kill_after) = locker_for(conn, &args.cmd, args.ttl, "--ttl").await?;
    // Caught from here on: a signal while waiting ends the wait, and leaves no lock.
    let mut signals = Signals::catch()?;
    let guard = match acquire(&locker, &args, &options, &mut signals).await {
        Ok(guard) => guard,
        Err(e) => {
            // A wait that ended (a signal, a deadline) gives its place in the queue up
            // before the process exits, so that the store does not hand the lock to it.
            let _ = tokio::time::timeout(RELEASE_TIMEOUT, locker.closed()).await;
            return Err(e);
        }
    };
    let spec = Supervised {
        command: &args.cmd.command,
        env: vec![
            ("LOCKWRIGHT_FENCE", guard.fence().to_string()),
            ("LOCKWRIGHT_RESOURCE", args.resource.clone()),
        ],
        foreground: args.cmd.foreground,
        kill_after,
        ttl: args.ttl,
        what: format!("the lock on `{}`", Escaped(&args.resource)),
    };
    let code = supervise(&spec, &guard, &mut signals).await;
    let released = tokio::time::timeout(RELEASE_TIMEOUT, guard.release()).await;
    if guard
        .ended()
        .is_none_or(|e| e == lockwright::Ended::Released)
    {
        let problem = match released {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(exit::chain(&e)),
            Err(_) => Some(format!("no answer within {RELEASE_TIMEOUT:?}")),
        };
        if let Some(problem) = problem {
            eprintln!(
                "lockwright: could not release the lock on `{}` (it expires by its TTL): {problem}",
                Escaped(&args.resource)
            );
        }
    }
    code
}

/// `--limit`: a whole number of at least 1.
fn shared_limit(s: &str) -> Result<SharedLimit, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    SharedLimit::new(n).map_err(|e| e.reason)
}

/// The lock `args` ask for.
fn lock_options(args: &RunArgs) -> LockOptions {
    let mut options = if args.shared {
        LockOptions::shared(args.limit, args.ttl)
    } else {
        LockOptions::exclusive(args.ttl)
    };
    let owner = args
        .owner
        .clone()
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()));
    if let Some(owner) = owner {
        options = options.owner(owner);
    }
    let comment = args.comment.clone().or_else(|| {
        let program = Path::new(&args.cmd.command[0]).file_name()?;
        Some(program.to_string_lossy().into_owned())
    });
    if let Some(comment) = comment.filter(|c| !c.is_empty()) {
        options = options.comment(comment);
    }
    if args.race {
        options = options.racing();
    }
    options
}

/// Takes the lock as `args` say: at once, waiting, or waiting until a deadline.
async fn acquire(
    locker: &Locker<MongoStore>,
    args: &RunArgs,
    options: &LockOptions,
    signals: &mut Signals,
) -> Result<LockGuard<MongoStore>, CliError> {
    let resource = args.resource.as_str();
    let waits = args.wait || args.wait_until.is_some();
    let spinner = if waits {
        progress::spinner(format!("waiting for the lock on `{}`", Escaped(resource)))
    } else {
        indicatif::ProgressBar::hidden()
    };
    let attempt = async {
        if let Some(limit) = args.wait_until {
            let deadline = tokio::time::Instant::now() + limit;
            locker.acquire_until(resource, options, deadline).await
        } else if args.wait {
            locker.acquire(resource, options).await
        } else {
            locker.try_acquire(resource, options).await
        }
    };
    let result = tokio::select! {
        result = attempt => result,
        signal = signals.recv() => {
            spinner.finish_and_clear();
            return Err(CliError::new(
                signals::exit_code(signal),
                format!("{signal} while waiting for the lock on `{}`; no lock taken", Escaped(resource)),
            ));
        }
    };
    spinner.finish_and_clear();
    match result {
        Ok(guard) => Ok(guard),
        Err(err @ (Error::AlreadyLocked { .. } | Error::Timeout { .. })) => {
            let holders = holders(locker.client(), resource).await;
            let message = match &err {
                Error::Timeout { .. } => format!(
                    "gave up waiting for `{}` after {}{holders}",
                    Escaped(resource),
                    humantime::format_duration(args.wait_until.unwrap_or_default())
                ),
                _ => format!(
                    "`{}` is locked{holders}; not waiting (use --wait or --wait-until)",
                    Escaped(resource)
                ),
            };
            Err(CliError::new(exit::HELD, message))
        }
        Err(Error::InvalidArgument {
            field: "ttl",
            reason,
        }) => {
            let margin = if reason.contains("drift margin") {
                format!(" ({:?})", LockerConfig::default().drift_margin)
            } else {
                String::new()
            };
            Err(CliError::usage(format!(
                "--ttl {}: {reason}{margin}; a TTL of a few seconds or more is usual",
                humantime::format_duration(args.ttl)
            )))
        }
        Err(err) => Err(err.into()),
    }
}

/// Who holds `resource`, as ` by OWNER on HOST (MODE, fence F, TTL left, #tag)`, for the
/// message of a refused or timed-out acquire; empty when it cannot be told.
async fn holders(client: &Client<MongoStore>, resource: &str) -> String {
    let Ok(Ok(locks)) = tokio::time::timeout(
        Duration::from_secs(3),
        client.status(&Filter::new().resource(resource)),
    )
    .await
    else {
        return String::new();
    };
    let described: Vec<String> = locks.iter().take(3).map(describe).collect();
    if described.is_empty() {
        return String::new();
    }
    let more = locks.len().saturating_sub(3);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" by {}{more}", described.join(", "))
}

/// One holder: `OWNER on HOST (MODE, fence F, 12.0s left, #tag)`.
fn describe(lock: &LockStatus) -> String {
    let owner = lock
        .holder
        .owner
        .as_deref()
        .map_or_else(|| "an unnamed owner".to_owned(), |o| Escaped(o).to_string());
    let host = lock
        .holder
        .host
        .as_deref()
        .map(|h| format!(" on {}", Escaped(h)))
        .unwrap_or_default();
    let ttl = lock.ttl.map_or_else(
        || "no TTL".to_owned(),
        |t| format!("{} left", crate::durations::format_ttl(t)),
    );
    format!(
        "{owner}{host} ({}, fence {}, {ttl}, {})",
        lock.mode,
        lock.fence,
        lock.lock_id.tag()
    )
}
