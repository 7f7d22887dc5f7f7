//! `lockwright elect`: campaign in an election, run CMD while leader, and `lockwright
//! leader`: who leads.

use std::time::Duration;

use clap::Args;
use futures_util::StreamExt;
use lockwright::{Client, Ended, Leader, LockOptions};
use lockwright_engine::error::Escaped;

use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};
use crate::progress;
use crate::signals::{self, Signals};
use crate::supervise::{CmdArgs, Supervised, locker_for, supervise};

/// `lockwright elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election (a resource name).
    election: String,
    /// The value to proclaim while leading (an address, a pod name), kept with the lock
    /// for `lockwright leader` to show [default: HOST:PID].
    #[arg(long, value_name = "VALUE")]
    value: Option<String>,
    /// The leader's lease: how long after its process died the next candidate leads (plus
    /// the takeover grace); renewed at half of it while CMD runs.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::durations::duration)]
    lease: Duration,
    /// Campaign once: exit with 76 when the leadership is lost (by default, campaign again).
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    cmd: CmdArgs,
}

/// How long resigning after CMD exits may take before lockwright gives up (the leadership
/// then passes on when its lease ends).
const RESIGN_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `lockwright elect`; returns CMD's exit code or one of lockwright's own.
pub async fn elect(conn: &ConnArgs, args: ElectArgs) -> Result<u8, CliError> {
    let value = args.value.clone().unwrap_or_else(default_value);
    let options = LockOptions::exclusive(args.lease);
    let options = match std::env::var("USER").ok().filter(|u| !u.is_empty()) {
        Some(owner) => options.owner(owner),
        None => options,
    };
    let (locker, kill_after) = locker_for(conn, &args.cmd, args.lease, "--lease").await?;
    let mut signals = Signals::catch()?;
    let election = Escaped(&args.election).to_string();
    loop {
        let spinner = progress::spinner(format!("campaigning in `{election}`"));
        let campaign = locker.campaign(&args.election, &value, &options);
        let leading = tokio::select! {
            leading = campaign => leading,
            signal = signals.recv() => {
                spinner.finish_and_clear();
                let _ = tokio::time::timeout(RESIGN_TIMEOUT, locker.closed()).await;
                return Err(CliError::new(
                    signals::exit_code(signal),
                    format!("{signal} while campaigning in `{election}`; not leading"),
                ));
            }
        };
        spinner.finish_and_clear();
        let leading = match leading {
            Ok(leading) => leading,
            Err(lockwright::Error::InvalidArgument {
                field: "ttl",
                reason,
            }) => {
                return Err(CliError::usage(format!(
                    "--lease {}: {reason}",
                    humantime::format_duration(args.lease)
                )));
            }
            Err(e) => return Err(e.into()),
        };
        eprintln!(
            "lockwright: leading `{election}` (fence {})",
            leading.fence()
        );
        let spec = Supervised {
            command: &args.cmd.command,
            env: vec![
                ("LOCKWRIGHT_FENCE", leading.fence().to_string()),
                ("LOCKWRIGHT_RESOURCE", args.election.clone()),
                ("LOCKWRIGHT_LEADER_VALUE", value.clone()),
            ],
            foreground: args.cmd.foreground,
            kill_after,
            ttl: args.lease,
            what: format!("the leadership of `{election}`"),
        };
        let code = supervise(&spec, leading.guard(), &mut signals).await;
        let lost = leading
            .guard()
            .ended()
            .is_some_and(|e| e != Ended::Released);
        if lost && !args.once {
            eprintln!("lockwright: campaigning in `{election}` again");
            continue;
        }
        if !lost
            && tokio::time::timeout(RESIGN_TIMEOUT, leading.resign())
                .await
                .is_err()
        {
            eprintln!(
                "lockwright: could not resign `{election}` within {RESIGN_TIMEOUT:?}; the \
                 next candidate leads when the lease ends"
            );
        }
        return code;
    }
}

/// `HOST:PID`.
fn default_value() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() {
        "unknown-host".to_owned()
    } else {
        host
    };
    format!("{host}:{}", std::process::id())
}

/// The shortest `leader --every`: a watching process reads the store at least once per
/// interval.
const MIN_EVERY: Duration = Duration::from_millis(100);

/// `lockwright leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election (a resource name).
    election: String,
    /// Print each new leader as it comes, until interrupted.
    #[arg(long)]
    watch: bool,
    /// With --watch: the longest it goes without reading who leads. The store tells it of
    /// each new leader as it comes (on MongoDB, one cursor on the collection's leaders'
    /// news); it reads at the start, when news may have been lost, and when this passes
    /// with no news of the election.
    #[arg(long, value_name = "DURATION", default_value = "10s", requires = "watch", value_parser = crate::durations::duration)]
    every: Duration,
    /// One JSON object per line: `{"election", "value", "fence", "since"}`, or `"leader":
    /// null` when nobody leads.
    #[arg(long)]
    json: bool,
}

/// Runs `lockwright leader`: exit 0 when somebody leads, 1 when nobody does (without
/// --watch).
pub async fn leader(conn: &ConnArgs, args: &LeaderArgs) -> Result<u8, CliError> {
    if args.every < MIN_EVERY {
        return Err(CliError::usage(format!(
            "--every {}: must be at least {} (every observer reads the store at least once per interval)",
            humantime::format_duration(args.every),
            humantime::format_duration(MIN_EVERY)
        )));
    }
    let client = Client::new(connect(conn).await?);
    if !args.watch {
        let leader = client.leader(&args.election).await?;
        println!("{}", line(&args.election, leader.as_ref(), args.json));
        return Ok(if leader.is_some() {
            exit::OK
        } else {
            exit::FAILURE
        });
    }
    let mut signals = Signals::catch()?;
    let mut changes = Box::pin(client.observe(&args.election, args.every));
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => println!("{}", line(&args.election, Some(&leader), args.json)),
                Some(Err(e)) => eprintln!("lockwright: {}", exit::chain(&e)),
                None => return Ok(exit::OK),
            },
            signal = signals.recv() => return Ok(signals::exit_code(signal)),
        }
    }
}

/// One leader (or none) as text or JSON.
fn line(election: &str, leader: Option<&Leader>, json: bool) -> String {
    let since = |l: &Leader| humantime::format_rfc3339_millis(l.since.to_system_time()).to_string();
    if json {
        let value = match leader {
            Some(l) => serde_json::json!({
                "election": election, "value": l.value, "fence": l.fence, "since": since(l),
            }),
            None => serde_json::json!({ "election": election, "leader": null }),
        };
        return value.to_string();
    }
    let election = Escaped(election);
    match leader {
        Some(l) => format!(
            "`{election}`: {} (fence {}, since {})",
            l.value
                .as_deref()
                .map_or_else(|| "(no value)".to_owned(), |v| Escaped(v).to_string()),
            l.fence,
            since(l)
        ),
        None => format!("`{election}`: no leader"),
    }
}
