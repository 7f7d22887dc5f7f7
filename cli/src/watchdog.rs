//! CMD's watchdog: a small process that kills CMD's process group when lockwright can no
//! longer stand behind it.
//!
//! `run` and `elect` start it (this same binary, with [`ARG`]) before CMD. It leads the
//! process group that CMD then joins, holds the read end of a pipe whose write end only
//! lockwright holds, and kills the whole group with SIGKILL (itself included):
//!
//! - when the pipe reads end of file: lockwright exited, however it died (SIGKILL, the OOM
//!   killer, a panic), or it is done with CMD and clears up what CMD left in its group;
//! - when the lock's trust ends before lockwright told it of a renewal: lockwright is
//!   paused (SIGSTOP, a frozen VM) or starved, and nobody else is stopping CMD.
//!
//! Lockwright writes one line per renewal, `until MS`: the lock may be trusted MS more
//! milliseconds. The watchdog blocks every signal it can (the signals lockwright forwards to
//! CMD's group reach it too), says `ready` once it has, and is a member of the group for as
//! long as CMD's processes are, so the group's id cannot be reused while it may kill it.
//!
//! With `--foreground`, CMD runs in lockwright's group (the terminal's), which the watchdog
//! must not kill: it then leads a group of its own, reads CMD's pid as its first line, and
//! kills CMD alone (its children can outlive it; docs/cli.md says so).

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};

/// The first argument that makes this binary a watchdog.
pub const ARG: &str = "__lockwright-watchdog";

/// What the watchdog kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kills {
    /// Its own process group, which CMD joins.
    Group,
    /// CMD's process alone (`--foreground`), whose pid is its first line.
    Process,
}

impl Kills {
    /// Its argument after [`ARG`].
    pub fn arg(self) -> &'static str {
        match self {
            Kills::Group => "group",
            Kills::Process => "process",
        }
    }
}

/// A line from lockwright.
enum Line {
    /// CMD's pid (`--foreground`).
    Pid(i32),
    /// The lock may be trusted this much longer.
    Until(Duration),
    /// CMD has exited: kill what it left, quietly.
    Done,
}

/// Runs the watchdog (`args` after [`ARG`]) until it kills; returns only on a usage error
/// or when its group could not be killed.
pub fn main(args: &[OsString]) -> ExitCode {
    let kills = match args.first().and_then(|a| a.to_str()) {
        Some("group") => Kills::Group,
        Some("process") => Kills::Process,
        _ => {
            eprintln!("lockwright: {ARG} is internal: it expects `group` or `process`");
            return ExitCode::from(crate::exit::USAGE);
        }
    };
    // SIGKILL and SIGSTOP cannot be blocked; the rest stay pending until the end.
    if let Err(e) = SigSet::all().thread_block() {
        eprintln!("lockwright's watchdog: cannot block signals: {e}");
        return ExitCode::from(crate::exit::FAILURE);
    }
    // A thread reads the pipe (it inherits the blocked signals); this one keeps the time.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let parsed = match line.split_once(' ') {
                Some(("until", ms)) => ms
                    .parse()
                    .ok()
                    .map(|ms| Line::Until(Duration::from_millis(ms))),
                Some(("pid", pid)) => pid.parse().ok().map(Line::Pid),
                _ if line == "done" => Some(Line::Done),
                _ => None,
            };
            match parsed {
                Some(parsed) => {
                    if tx.send(parsed).is_err() {
                        break;
                    }
                }
                None => eprintln!("lockwright's watchdog: unexpected line `{line}`"),
            }
        }
        // Dropping the sender is end of file.
    });
    if writeln!(std::io::stdout(), "ready")
        .and_then(|()| std::io::stdout().flush())
        .is_err()
    {
        // Lockwright is gone before CMD started: there is nothing to kill but the group.
        return kill_now(kills, None, None);
    }
    let mut pid = None;
    let mut deadline: Option<Instant> = None;
    loop {
        let line = match deadline {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match line {
            Ok(Line::Pid(p)) => pid = Some(Pid::from_raw(p)),
            Ok(Line::Until(left)) => deadline = Some(Instant::now() + left),
            // CMD has exited and was reaped: its pid may be reused already.
            Ok(Line::Done) if kills == Kills::Process => return ExitCode::SUCCESS,
            Ok(Line::Done) => return kill_now(kills, pid, None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return kill_now(kills, pid, Some("lockwright exited while CMD ran"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return kill_now(
                    kills,
                    pid,
                    Some("the lock's trust ended and lockwright did not answer (paused?)"),
                );
            }
        }
    }
}

/// Kills CMD's group (this process with it) or CMD alone, saying why unless `why` is
/// `None`.
fn kill_now(kills: Kills, pid: Option<Pid>, why: Option<&str>) -> ExitCode {
    if let Some(why) = why {
        // Lockwright's standard error may be gone with it; nothing to do then.
        let _ = writeln!(
            std::io::stderr(),
            "lockwright's watchdog: {why}; killing CMD{} with SIGKILL",
            if kills == Kills::Group {
                "'s process group"
            } else {
                ""
            }
        );
    }
    let result = match (kills, pid) {
        (Kills::Group, _) => killpg(getpgrp(), Signal::SIGKILL),
        (Kills::Process, Some(pid)) => kill(pid, Signal::SIGKILL),
        (Kills::Process, None) => Ok(()),
    };
    match result {
        // Gone already (`--foreground`, CMD reaped), or (the group) never reached.
        Ok(()) | Err(nix::errno::Errno::ESRCH) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "lockwright's watchdog: cannot kill CMD: {e}"
            );
            ExitCode::from(crate::exit::FAILURE)
        }
    }
}

/// Lockwright's end of a running watchdog.
pub struct Watchdog {
    child: tokio::process::Child,
    pid: Pid,
    pipe: Option<tokio::process::ChildStdin>,
    /// The last `until` written, as an instant.
    told: Option<tokio::time::Instant>,
}

impl Watchdog {
    /// Starts a watchdog that kills `kills`, and waits until it blocks signals.
    ///
    /// # Errors
    /// It cannot be started, or exited before it was ready.
    pub async fn start(kills: Kills) -> std::io::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        // This very binary, also when its file was replaced or removed since it started.
        let exe = std::path::Path::new("/proc/self/exe");
        let program = if exe.exists() {
            exe.to_path_buf()
        } else {
            std::env::current_exe()?
        };
        let mut child = tokio::process::Command::new(program)
            .arg(ARG)
            .arg(kills.arg())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            // Leads a group: CMD's, or (`--foreground`) one away from the terminal's signals.
            .process_group(0)
            .spawn()?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| std::io::Error::other("the watchdog has no process id"))?;
        let pipe = child.stdin.take();
        let mut ready = String::new();
        if let Some(out) = child.stdout.take() {
            tokio::io::BufReader::new(out).read_line(&mut ready).await?;
        }
        if ready.trim_end() != "ready" {
            let _ = child.kill().await;
            return Err(std::io::Error::other(
                "the watchdog exited before it was ready",
            ));
        }
        Ok(Watchdog {
            child,
            pid,
            pipe,
            told: None,
        })
    }

    /// Its pid: the id of the process group it leads.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Tells it CMD's pid (`--foreground`).
    pub async fn watch_process(&mut self, cmd: Pid) {
        self.write(&format!("pid {cmd}\n")).await;
    }

    /// Tells it the lock may be trusted until `until`, if that is news to it.
    pub async fn trust_until(&mut self, until: tokio::time::Instant) {
        if self.told == Some(until) {
            return;
        }
        self.told = Some(until);
        // Rounded down: it kills no later than lockwright would stop trusting the lock.
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        self.write(&format!("until {}\n", left.as_millis())).await;
    }

    /// Resolves if it exits while CMD runs (somebody killed it).
    pub async fn exited(&mut self) {
        let _ = self.child.wait().await;
    }

    /// CMD has exited: the watchdog kills what CMD left in its group (nothing with
    /// `--foreground`) and exits; returns once it has.
    pub async fn finish(mut self) {
        self.write("done\n").await;
        self.pipe = None;
        let _ = self.child.wait().await;
    }

    async fn write(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        if let Some(pipe) = &mut self.pipe {
            // A watchdog that is gone is seen by `exited`.
            let _ = pipe.write_all(line.as_bytes()).await;
        }
    }
}
