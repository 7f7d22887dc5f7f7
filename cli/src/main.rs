//! `lockwright`: run a command under a distributed lock held in MongoDB, list, purge and
//! release locks, and check a deployment.
//!
//! Every subcommand connects with `--uri` (or `LOCKWRIGHT_URI`) to the collection named by
//! `--collection DATABASE.COLLECTION` (or `LOCKWRIGHT_COLLECTION`). Lock ids are secrets:
//! nothing this tool prints shows one, only its short tag (such as `#3f9a`), and `unlock`
//! reads one only from an environment variable or standard input, never from the command
//! line. The exit codes are listed in [`exit`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod connect;
mod contention;
mod doctor;
mod durations;
mod elect;
mod exit;
mod progress;
mod purge;
mod run;
mod signals;
mod status;
mod supervise;
mod unlock;
mod watchdog;

use connect::ConnArgs;
use doctor::DoctorArgs;
use elect::{ElectArgs, LeaderArgs};
use exit::CliError;
use purge::PurgeArgs;
use run::RunArgs;
use status::StatusArgs;
use unlock::UnlockArgs;

/// The exit codes, as `--help` shows them.
const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    failure (unlock: no lock held under the lock id; leader: nobody leads; a malformed
       stored lock)
  2    usage error (bad flag, bad duration, bad argument)
  69   MongoDB unreachable or failing (EX_UNAVAILABLE)
  75   lock held and not waiting, or --wait-until gave up (EX_TEMPFAIL)
  76   run: the lock was lost while CMD ran (elect --once: the leadership); CMD was
       terminated
  78   deployment misconfigured: no unique index, not a replica set (EX_CONFIG)
  126  run, elect: CMD could not be executed; 127: CMD not found
  N    run, elect: CMD's own exit code; 128+S when CMD died of signal S";

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
    /// and SIGHUP sent to lockwright are forwarded to that group; when CMD exits, what it
    /// left in its group is killed, the lock is released, and lockwright exits with CMD's
    /// code. CMD never outlives the lock's trust: if renewals fail, the group gets SIGTERM
    /// --kill-after before the trust ends and SIGKILL when it ends; if the lock is lost,
    /// SIGTERM at once; lockwright then exits with 76. If lockwright itself dies (even by
    /// SIGKILL) or is paused past the trust, a watchdog process kills CMD's group.
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
    /// Check the deployment (replica set, unique index, write concern, clocks, the wakes
    /// and their cursors) and say what to fix.
    ///
    /// Doctor only reads unless told otherwise: --fix creates the unique index, and
    /// --wakeups takes and releases a probe lock.
    #[command(after_help = EXIT_CODES)]
    Doctor(DoctorArgs),
    /// Campaign in ELECTION and run CMD while leading; campaign again when the leadership
    /// is lost (unless --once).
    ///
    /// Candidates lead in the order they campaigned; the leader's --value is kept with its
    /// lock for `lockwright leader`. CMD gets LOCKWRIGHT_FENCE, LOCKWRIGHT_RESOURCE (the
    /// election) and LOCKWRIGHT_LEADER_VALUE, and is supervised as by `run`: signals are
    /// forwarded, and a lost leadership sends SIGTERM, then SIGKILL after --kill-after. When
    /// CMD exits, lockwright resigns (the next candidate leads) and exits with CMD's code.
    #[command(after_help = EXIT_CODES)]
    Elect(ElectArgs),
    /// Who leads ELECTION: its value, fence and since when (exit 1 when nobody leads), or
    /// each new leader as it comes with --watch.
    #[command(after_help = EXIT_CODES)]
    Leader(LeaderArgs),
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == watchdog::ARG) {
        return watchdog::main(&args[2..]);
    }
    let cli = Cli::parse_from(args);
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
        Command::Elect(args) => elect::elect(&cli.conn, args).await,
        Command::Leader(args) => elect::leader(&cli.conn, &args).await,
    }
}
