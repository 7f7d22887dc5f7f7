//! How `run` and `elect` run CMD under a lock: in a process group led by a watchdog
//! ([`crate::watchdog`]), with signals forwarded, and stopped before the lock's trust ends.
//!
//! CMD never outlives the lock's trust:
//! - lockwright dies (even by SIGKILL): the watchdog reads end of file and kills the group;
//! - lockwright is paused: the watchdog kills the group when the trust it was last told of
//!   ends;
//! - renewals fail: when `--kill-after` of the trust is left, CMD gets SIGTERM, and SIGKILL
//!   when the trust ends;
//! - the store refuses a renewal (the lock was removed or taken over): SIGTERM at once, and
//!   SIGKILL after `--kill-after` or when the trust the lock had ends, whichever is first;
//! - CMD exits: what it left running in its group is killed before the lock is released.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use lockwright::{Client, DEFAULT_RENEW_MARGIN, LockGuard, Locker, LockerConfig, MongoStore};
use lockwright_engine::error::Escaped;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};
use crate::signals::Signals;
use crate::watchdog::{Kills, Watchdog};

/// How CMD runs, for `run` and `elect`.
#[derive(Debug, Args)]
pub struct CmdArgs {
    /// How long CMD is given to stop after SIGTERM before SIGKILL. When renewals fail, CMD
    /// gets SIGTERM this long before the lock's trust ends, and SIGKILL when it ends; it may
    /// be at most half the time from a renewal to the end of trust (a quarter of the TTL,
    /// less 50 ms) [default: 10s, or that limit if lower].
    #[arg(long, value_name = "DURATION", value_parser = crate::durations::duration)]
    pub(crate) kill_after: Option<Duration>,
    /// Run CMD in lockwright's process group, so that it can read from the terminal; signals
    /// are then forwarded to CMD alone, not to its children, and only CMD itself is killed
    /// if lockwright dies.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD",
          value_parser = clap::value_parser!(OsString))]
    pub(crate) command: Vec<OsString>,
}

/// `--kill-after` when not given.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

impl CmdArgs {
    /// `--kill-after` for a lock of `ttl` renewed as `config` says: as given, or the
    /// default capped at the longest allowed.
    ///
    /// # Errors
    /// A usage error when the given one is longer than allowed (`flag` names the TTL's
    /// flag in the message).
    pub(crate) fn kill_after(
        &self,
        ttl: Duration,
        config: &LockerConfig,
        flag: &str,
    ) -> Result<Duration, CliError> {
        // A renewal is sent when `renew_fraction` of the TTL has passed, and the lock is
        // trusted until `ttl - drift_margin` after it was sent: half of what lies between
        // is the most SIGTERM may come early by, so that a renewal that is merely slow
        // never stops CMD.
        let room = ttl
            .mul_f64(1.0 - config.renew_fraction)
            .saturating_sub(config.drift_margin)
            / 2;
        match self.kill_after {
            None => Ok(DEFAULT_KILL_AFTER.min(room)),
            Some(given) if given <= room => Ok(given),
            Some(given) => Err(CliError::usage(format!(
                "--kill-after {}: at most {} with {flag} {} (CMD gets SIGTERM that long before \
                 the lock's trust ends when renewals fail, and a renewal leaves {} of trust); \
                 give a longer {flag}",
                humantime::format_duration(given),
                humantime::format_duration(room),
                humantime::format_duration(ttl),
                humantime::format_duration(room * 2),
            ))),
        }
    }
}

/// The Locker a command under a lock of `ttl` runs with, on the deployment `conn` names,
/// and the time CMD is given to stop ([`CmdArgs::kill_after`]; `flag` names the TTL's
/// flag in messages). Renewals are refused for locks expiring within the renew margin, so
/// the margin stays well inside a short TTL (a quarter of it), and TTLs of a second or two
/// work.
///
/// # Errors
/// The usage error of [`CmdArgs::kill_after`], or the deployment's.
pub(crate) async fn locker_for(
    conn: &ConnArgs,
    cmd: &CmdArgs,
    ttl: Duration,
    flag: &str,
) -> Result<(Locker<MongoStore>, Duration), CliError> {
    let config = LockerConfig::default();
    let kill_after = cmd.kill_after(ttl, &config, flag)?;
    let store = connect(conn).await?;
    let client = Client::with_renew_margin(store, DEFAULT_RENEW_MARGIN.min(ttl / 4))?;
    Ok((Locker::new(client, config)?, kill_after))
}

/// What [`supervise`] runs, and how.
pub(crate) struct Supervised<'a> {
    /// CMD and its arguments.
    pub(crate) command: &'a [OsString],
    /// What CMD finds in its environment besides lockwright's own.
    pub(crate) env: Vec<(&'static str, String)>,
    /// Run CMD in lockwright's process group; signals go to CMD alone.
    pub(crate) foreground: bool,
    /// The time CMD is given to stop ([`CmdArgs::kill_after`]).
    pub(crate) kill_after: Duration,
    /// The lock's TTL (how often the watchdog is told of renewals follows from it).
    pub(crate) ttl: Duration,
    /// What may be lost, for the message: "the lock on `R`".
    pub(crate) what: String,
}

/// Runs CMD under `guard` until it exits, or until the lock runs out or is lost (CMD is
/// then stopped: exit 76); returns the exit code. Signals caught meanwhile are forwarded to
/// CMD.
pub(crate) async fn supervise(
    spec: &Supervised<'_>,
    guard: &LockGuard<MongoStore>,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let kills = if spec.foreground {
        Kills::Process
    } else {
        Kills::Group
    };
    let mut watchdog = Watchdog::start(kills)
        .await
        .map_err(|e| CliError::new(exit::FAILURE, format!("cannot start CMD's watchdog: {e}")))?;
    let program = &spec.command[0];
    let mut command = tokio::process::Command::new(program);
    command.args(&spec.command[1..]);
    for (name, value) in &spec.env {
        command.env(name, value);
    }
    if !spec.foreground {
        // The watchdog's group, so that signals reach CMD's children too, and the watchdog
        // kills them all.
        command.process_group(watchdog.pid().as_raw());
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            watchdog.finish().await;
            return Err(spawn_error(program, &e));
        }
    };
    let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        return Err(CliError::new(exit::FAILURE, "CMD has no process id"));
    };
    let target = if spec.foreground {
        watchdog.watch_process(pid).await;
        Target { pid, group: false }
    } else {
        Target {
            pid: watchdog.pid(),
            group: true,
        }
    };
    // The watchdog hears of each renewal within an eighth of the TTL: long before the trust
    // it last heard of (at least a third of the TTL after a renewal) ends.
    let mut tell = tokio::time::interval((spec.ttl / 8).max(Duration::from_millis(10)));
    tell.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut trusted = guard.trusted_until();
    loop {
        if let Some(until) = guard.trusted_until() {
            trusted = Some(until);
            watchdog.trust_until(until).await;
        }
        tokio::select! {
            // CMD's exit first: a CMD the watchdog killed while lockwright was paused has
            // exited by the time lockwright sees its trust end.
            biased;
            status = child.wait() => {
                let status = status
                    .map_err(|e| CliError::new(exit::FAILURE, format!("cannot wait for CMD: {e}")))?;
                return Ok(exited(spec, guard, status, watchdog).await);
            }
            end = guard.running_out(spec.kill_after) => {
                // Its exit may not have been seen yet (lockwright was paused).
                if let Ok(Some(status)) = child.try_wait() {
                    return Ok(exited(spec, guard, status, watchdog).await);
                }
                let now = Instant::now();
                let kill_at = match guard.ended() {
                    // No more than the time it is given, nor than the trust the lock had.
                    Some(ended) => {
                        let kill_at = (now + spec.kill_after).min(trusted.unwrap_or(now));
                        eprintln!(
                            "lockwright: {} was {ended}; sending SIGTERM to CMD (SIGKILL in {})",
                            spec.what,
                            humantime::format_duration(round_ms(kill_at - now))
                        );
                        kill_at
                    }
                    None => {
                        eprintln!(
                            "lockwright: renewals of {} are failing and its trust ends in {}; \
                             sending SIGTERM to CMD (SIGKILL then)",
                            spec.what,
                            humantime::format_duration(round_ms(end - now))
                        );
                        end
                    }
                };
                terminate(&mut child, &target, kill_at, signals).await;
                watchdog.finish().await;
                return Ok(exit::LOST);
            }
            () = watchdog.exited() => {
                // Nothing would stop CMD if lockwright died now: stop it.
                target.send(Signal::SIGKILL);
                let _ = child.wait().await;
                return Err(CliError::new(
                    exit::FAILURE,
                    "CMD's watchdog exited (was it killed?); CMD was killed",
                ));
            }
            _ = tell.tick() => {}
            signal = signals.recv() => target.send(signal),
        }
    }
}

/// CMD exited with `status`: the watchdog kills what it left in its group; CMD's exit code,
/// or 76 when the watchdog killed it because the lock's trust ended.
async fn exited(
    spec: &Supervised<'_>,
    guard: &LockGuard<MongoStore>,
    status: ExitStatus,
    watchdog: Watchdog,
) -> u8 {
    watchdog.finish().await;
    if status.signal() == Some(Signal::SIGKILL as i32) && !guard.is_held() {
        eprintln!(
            "lockwright: the trust in {} ended while lockwright was paused or starved; CMD \
             was killed by its watchdog",
            spec.what
        );
        return exit::LOST;
    }
    exit_code(status)
}

/// Sends CMD SIGTERM, then SIGKILL if it is still running at `kill_at`; signals caught
/// meanwhile are still forwarded. Returns once CMD has exited.
async fn terminate(
    child: &mut tokio::process::Child,
    target: &Target,
    kill_at: Instant,
    signals: &mut Signals,
) {
    target.send(Signal::SIGTERM);
    let deadline = tokio::time::sleep_until(kill_at);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = child.wait() => return,
            () = &mut deadline => break,
            signal = signals.recv() => target.send(signal),
        }
    }
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    eprintln!("lockwright: CMD still running; sending SIGKILL");
    target.send(Signal::SIGKILL);
    let _ = child.wait().await;
}

/// `d` to the millisecond, for messages.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where signals for CMD go: its process group, or with `--foreground` CMD alone.
struct Target {
    pid: Pid,
    group: bool,
}

impl Target {
    /// Sends `signal`; CMD may be gone already.
    fn send(&self, signal: Signal) {
        let _ = if self.group {
            killpg(self.pid, signal)
        } else {
            kill(self.pid, signal)
        };
    }
}

/// The exit code of CMD: its own, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::FAILURE),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}

/// The failure to start `program`: 127 when not found, 126 otherwise (as shells do).
fn spawn_error(program: &OsStr, err: &std::io::Error) -> CliError {
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    };
    CliError::new(
        code,
        format!(
            "cannot run `{}`: {err}",
            Escaped(&program.to_string_lossy())
        ),
    )
}
