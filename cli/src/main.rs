//! `lockwright`: run a command under a distributed lock held in MongoDB, list, purge and
//! release locks, and check a deployment.
//!
//! Every subcommand connects with `--uri` (or `LOCKWRIGHT_URI`) to the collection named by
//! `--collection DATABASE.COLLECTION` (or `LOCKWRIGHT_COLLECTION`). Lock ids are secrets:
//! nothing this tool prints shows one, only its short tag (such as `#3f9a`), and `unlock`
//! reads one only from an environment variable or standard input, never from the command
//! line. The exit codes are listed in [`exit`].

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod connect;
mod contention;
mod doctor;
mod durations;
mod exit;
mod progress;
mod purge;
mod run;
mod signals;
mod status;
mod unlock;
mod wakeups;

use connect::ConnArgs;
use exit::CliError;

/// The exit codes, as `--help` shows them.
const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    failure (unlock: no lock held under the lock id; a malformed stored lock)
  2    usage error (bad flag, bad duration, bad argument)
  69   MongoDB unreachable or failing (EX_UNAVAILABLE)
  75   lock held and not waiting, or --wait-until gave up (EX_TEMPFAIL)
  76   run: the lock was lost while CMD ran; CMD was terminated
  78   deployment misconfigured: no unique index, not a replica set (EX_CONFIG)
  126  run: CMD could not be executed; 127: CMD not found
  N    run: CMD's own exit code; 128+S when CMD died of signal S";

/// Distributed locks in MongoDB from the command line.
#[derive(Debug, Parser)]
#[command(name = "lockwright", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run CMD while holding a lock on RESOURCE, renewing it until CMD exits.
    ///
    /// CMD gets LOCKWRIGHT_FENCE (the grant's fencing token) and LOCKWRIGHT_RESOURCE in its
    /// environment and runs in its own process group (unless --foreground). SIGINT, SIGTERM
    /// and SIGHUP sent to lockwright are forwarded to that group; the lock is released when CMD exits, and
    /// lockwright exits with CMD's code. If the lock is lost while CMD runs, the group gets
    /// SIGTERM, then SIGKILL after --kill-after, and lockwright exits with 76. If lockwright
    /// itself is killed with SIGKILL, CMD keeps running and the lock expires after --ttl.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// List locks: a table with counts and waiters at the bottom, or JSON lines with --json;
    /// or watch the most contended resources (--watch), or export gauges (--prometheus).
    #[command(after_help = EXIT_CODES)]
    Status(StatusArgs),
    /// Remove the expired locks, once or every --every with --watch.
    #[command(after_help = EXIT_CODES)]
    Purge(PurgeArgs),
    /// Release every lock of a lock id read from an environment variable or standard input.
    ///
    /// The lock id is a secret, so it is never taken from the command line (where `ps`
    /// would show it).
    #[command(after_help = EXIT_CODES)]
    Unlock(UnlockArgs),
    /// Check the deployment (replica set, unique index, write concern, clocks, change
    /// streams) and say what to fix.
    ///
    /// Doctor only reads unless told otherwise: --fix creates the unique index, and
    /// --wakeups takes and releases a probe lock.
    #[command(after_help = EXIT_CODES)]
    Doctor(DoctorArgs),
}

/// `lockwright run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// The resource to lock.
    resource: String,
    /// Take a shared lock instead of an exclusive one.
    #[arg(long)]
    shared: bool,
    /// With --shared: at most N holders at once.
    #[arg(long, value_name = "N", requires = "shared",
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// How long the lock lives unless renewed (renewed at half of it while CMD runs).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = durations::duration)]
    ttl: Duration,
    /// Wait for the lock while it is held, for as long as it takes.
    #[arg(long, conflicts_with = "wait_until")]
    wait: bool,
    /// Wait for the lock at most DURATION, then exit with 75.
    #[arg(long, value_name = "DURATION", value_parser = durations::duration)]
    wait_until: Option<Duration>,
    /// While waiting, keep a place in the resource's queue: waiters are granted in the
    /// order they came, and a writer is not overtaken by readers that came after it.
    #[arg(long)]
    fair: bool,
    /// Who holds the lock, as `status` shows it [default: $USER].
    #[arg(long, value_name = "NAME")]
    owner: Option<String>,
    /// Free text stored with the lock [default: CMD's program name].
    #[arg(long, value_name = "TEXT")]
    comment: Option<String>,
    /// After SIGTERM on a lost lock, how long CMD has to exit before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = durations::duration)]
    kill_after: Duration,
    /// Run CMD in lockwright's process group, so that it can read from the terminal; signals
    /// are then forwarded to CMD alone, not to its children.
    #[arg(long)]
    foreground: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD",
          value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

/// `lockwright status`.
#[derive(Debug, Args)]
struct StatusArgs {
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
    #[arg(long, value_name = "DURATION", value_parser = durations::duration)]
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
          value_parser = durations::duration)]
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
enum ModeArg {
    /// Exclusive.
    #[value(name = "x", alias = "exclusive")]
    Exclusive,
    /// Shared.
    #[value(name = "s", alias = "shared")]
    Shared,
}

/// `lockwright purge`.
#[derive(Debug, Args)]
struct PurgeArgs {
    /// Keep purging, one line per pass, until SIGINT or SIGTERM.
    #[arg(long)]
    watch: bool,
    /// With --watch: the time between passes.
    #[arg(long, value_name = "DURATION", default_value = "30s", requires = "watch",
          value_parser = durations::duration)]
    every: Duration,
}

/// `lockwright unlock`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "source")]
struct UnlockArgs {
    /// Read the lock id from the environment variable VAR.
    #[arg(long, value_name = "VAR", group = "source")]
    lock_id_from_env: Option<String>,
    /// Read the lock id from the first line of standard input.
    #[arg(long, group = "source")]
    lock_id_stdin: bool,
}

/// `lockwright doctor`.
#[derive(Debug, Args)]
struct DoctorArgs {
    /// Create the unique index on `resource` when it is missing.
    #[arg(long)]
    fix: bool,
    /// Also check that a release reaches a waiter, by taking and releasing a probe lock on
    /// a resource of doctor's own (a write: a collection that does not exist yet is created
    /// with its index, as by any first lock operation). Without it, doctor only checks,
    /// reading, that change streams open.
    #[arg(long)]
    wakeups: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockwright: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Do not wait for the driver's background tasks.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("lockwright: {}", err.message);
            ExitCode::from(err.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => run::run(&cli.conn, args).await,
        Command::Status(args) => status::status(&cli.conn, &args).await,
        Command::Purge(args) => purge::purge(&cli.conn, &args).await,
        Command::Unlock(args) => unlock::unlock(&cli.conn, &args).await,
        Command::Doctor(args) => doctor::doctor(&cli.conn, &args).await,
    }
}
