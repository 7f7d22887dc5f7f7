//! `lockwright-mongod`: a throwaway MongoDB replica set on 127.0.0.1 for a command, or
//! until it is stopped (the fixture `lockwright_testkit::replset`).
//!
//! ```text
//! lockwright-mongod run [--members 1|3] -- CMD [ARG...]
//!     Start a set, run CMD with MONGODB_URI exported, stop the set and remove its files
//!     (also when CMD fails, and on SIGINT, SIGTERM or SIGHUP, which are passed on to CMD),
//!     and exit with CMD's status (128 + N when a signal N ended it).
//! lockwright-mongod start [--members 1|3]
//!     Start a set, print its URI on stdout, and keep it until SIGINT, SIGTERM or SIGHUP.
//! lockwright-mongod drop-database URI NAME
//!     Drop the database NAME on the deployment at URI (the kill matrix drops the test
//!     database after each run, since a failing test leaves its collections behind).
//! lockwright-mongod list-mutants
//!     The MongoDB store's mutants, one `name kind unmodelled` line each, as the model's
//!     `list-mutants` lists the engine's (builds with `--cfg lockwright_mutants` and the
//!     feature `mongo` only; scripts/mutants reads both).
//! ```
//!
//! The mongod binary is `LOCKWRIGHT_MONGOD`, else the one `scripts/mongod.sh install`
//! recorded. Exit status 125 when the set could not be started (or CMD not run).

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lockwright_testkit::replset::ReplSet;
use tokio::signal::unix::{SignalKind, signal};

/// A throwaway MongoDB replica set ("rs0") on 127.0.0.1.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a set, run CMD with MONGODB_URI exported, stop the set, exit with CMD's status.
    Run {
        /// Members of the set.
        #[arg(long, default_value_t = 1, value_parser = members)]
        members: usize,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Start a set, print its URI, and keep it until SIGINT, SIGTERM or SIGHUP.
    Start {
        /// Members of the set.
        #[arg(long, default_value_t = 1, value_parser = members)]
        members: usize,
    },
    /// Drop a database (exit 1 when it cannot be dropped).
    DropDatabase {
        /// The deployment's connection string.
        uri: String,
        /// The database.
        name: String,
    },
    /// List the MongoDB store's mutants (mutant builds with the feature `mongo` only).
    ListMutants,
}

fn members(s: &str) -> Result<usize, String> {
    match s {
        "1" => Ok(1),
        "3" => Ok(3),
        _ => Err(format!("1 or 3, not {s:?}")),
    }
}

/// The exit status when the set could not be started, or the command not run.
const SETUP_FAILED: u8 = 125;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockwright-mongod: cannot start the tokio runtime: {e}");
            return ExitCode::from(SETUP_FAILED);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run { members, cmd } => run(members, cmd).await,
            Command::Start { members } => start(members).await,
            Command::DropDatabase { uri, name } => drop_database(&uri, &name).await,
            Command::ListMutants => list_mutants(),
        }
    });
    ExitCode::from(code)
}

/// `list-mutants`: one line per mutant of the MongoDB store's catalogue. None of them is
/// modelled (the model runs the engine's rules, not the pipelines).
#[cfg(all(lockwright_mutants, feature = "mongo"))]
fn list_mutants() -> u8 {
    for m in lockwright_store_mongo::mutants::Mutant::ALL {
        println!("{} {} unmodelled", m.name(), m.kind());
    }
    0
}

/// `list-mutants` in a build without the store's mutants: an error, not an empty list.
#[cfg(not(all(lockwright_mutants, feature = "mongo")))]
fn list_mutants() -> u8 {
    eprintln!(
        "lockwright-mongod: this build has no store mutants: build it with the feature `mongo` \
         and RUSTFLAGS=\"--cfg lockwright_mutants\" (scripts/mutants does)"
    );
    1
}

async fn drop_database(uri: &str, name: &str) -> u8 {
    let dropped = async {
        let mut options = mongodb::options::ClientOptions::parse(uri).await?;
        options.server_selection_timeout = Some(std::time::Duration::from_secs(10));
        let client = mongodb::Client::with_options(options)?;
        client.database(name).drop().await
    };
    match dropped.await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lockwright-mongod: cannot drop database {name}: {e}");
            1
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, as streams.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of them to arrive.
    async fn recv(&mut self) -> nix::sys::signal::Signal {
        use nix::sys::signal::Signal;
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// Starts the set, or says why not. The signal handlers are installed first, so that a
/// signal during the start stops the set too (the start is abandoned, which stops the
/// members started so far).
async fn start_set(members: usize) -> Result<(ReplSet, Signals), u8> {
    let mut signals = Signals::new().map_err(|e| {
        eprintln!("lockwright-mongod: cannot handle signals: {e}");
        SETUP_FAILED
    })?;
    tokio::select! {
        set = ReplSet::start(members) => match set {
            Ok(set) => Ok((set, signals)),
            Err(e) => {
                eprintln!("lockwright-mongod: error: {e}");
                Err(SETUP_FAILED)
            }
        },
        sig = signals.recv() => {
            eprintln!("lockwright-mongod: {sig} during the start; stopping");
            Err(128 + exit_byte(sig as i32))
        }
    }
}

async fn run(members: usize, cmd: Vec<OsString>) -> u8 {
    let (set, mut signals) = match start_set(members).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    let code = run_command(&set, &cmd, &mut signals).await;
    stop(set).await;
    code
}

/// Runs `cmd` beside the set; its exit status as this process's.
async fn run_command(set: &ReplSet, cmd: &[OsString], signals: &mut Signals) -> u8 {
    let Some((program, args)) = cmd.split_first() else {
        return SETUP_FAILED;
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .env("MONGODB_URI", set.uri())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "lockwright-mongod: cannot run {}: {e}",
                program.to_string_lossy()
            );
            return SETUP_FAILED;
        }
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.recv() => {
                eprintln!("lockwright-mongod: {sig}: passing it on to the command");
                if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
                }
            }
        }
    };
    match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt as _;
            match (s.code(), s.signal()) {
                (Some(c), _) => exit_byte(c),
                (None, Some(sig)) => 128 + exit_byte(sig),
                (None, None) => 1,
            }
        }
        Err(e) => {
            eprintln!("lockwright-mongod: waiting for the command: {e}");
            1
        }
    }
}

async fn start(members: usize) -> u8 {
    let (set, mut signals) = match start_set(members).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    let mut out = std::io::stdout();
    if writeln!(out, "{}", set.uri())
        .and_then(|()| out.flush())
        .is_err()
    {
        eprintln!("lockwright-mongod: cannot write the URI on stdout; stopping");
        stop(set).await;
        return 1;
    }
    eprintln!("lockwright-mongod: running until SIGINT, SIGTERM or SIGHUP");
    let sig = signals.recv().await;
    eprintln!("lockwright-mongod: {sig}: stopping");
    stop(set).await;
    0
}

/// Stops the set and removes its files (a blocking wait, off the runtime's thread).
async fn stop(set: ReplSet) {
    if let Err(e) = tokio::task::spawn_blocking(move || drop(set)).await {
        eprintln!("lockwright-mongod: stopping the set failed: {e}");
    }
}

/// An exit status as the byte a process exits with.
fn exit_byte(code: i32) -> u8 {
    u8::try_from(code & 0xff).unwrap_or(1)
}
