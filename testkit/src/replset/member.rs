//! One member's mongod process: how it is started, watched until it listens, signalled and
//! stopped.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Error, SET_NAME, STOP_GRACE, log};

/// How often a wait polls.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// What every member runs with, whatever it is asked to do.
pub(crate) struct Launch {
    pub(crate) mongod: PathBuf,
    pub(crate) start_timeout: Duration,
}

/// One member: its files, its port, and its mongod while one runs.
pub(crate) struct Member {
    pub(crate) index: usize,
    pub(crate) port: u16,
    /// The member's own temporary directory: `db/`, `mongod.log` (appended to across
    /// restarts) and `mongod.stderr`. Removed on drop, after the process is gone.
    pub(crate) dir: tempfile::TempDir,
    /// The mongod while it runs (or until it is found to have exited).
    child: Mutex<Option<Child>>,
    /// Its wall clock's offset, in milliseconds (0: none); applies from its next start.
    skew_ms: Mutex<i64>,
    /// Whether it was sent SIGSTOP and not SIGCONT since.
    paused: AtomicBool,
    /// A client that talks to this member alone (`directConnection=true`).
    pub(crate) client: mongodb::Client,
}

/// Why a start failed: the port was taken (try another), or anything else.
pub(crate) enum StartError {
    PortTaken,
    Other(Error),
}

impl From<Error> for StartError {
    fn from(e: Error) -> Self {
        Self::Other(e)
    }
}

impl Member {
    /// Starts member `index` in a new temporary directory, on a free port (another one when
    /// something takes the port first).
    pub(crate) async fn start(
        launch: &Launch,
        index: usize,
        skew_ms: i64,
        faketime: Option<&Path>,
    ) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("lockwright-{SET_NAME}-member{index}-"))
            .tempdir()
            .map_err(|e| Error::io("cannot create a temporary directory", e))?;
        let db = dir.path().join("db");
        std::fs::create_dir(&db)
            .map_err(|e| Error::io(format!("cannot create {}", db.display()), e))?;
        let mut attempt = 0;
        let (port, child) = loop {
            attempt += 1;
            let port = free_port()?;
            match spawn(launch, index, dir.path(), port, skew_ms, faketime).await {
                Ok(child) => break (port, child),
                Err(StartError::PortTaken) if attempt < 5 => {
                    log(format_args!(
                        "member {index}: port {port} was taken before mongod could bind it \
                         (attempt {attempt}); trying another"
                    ));
                }
                Err(StartError::PortTaken) => {
                    return Err(Error::Start {
                        what: format!(
                            "member {index}: could not bind a free port in {attempt} attempts"
                        ),
                        log_tail: log_tail(dir.path(), 0),
                    });
                }
                Err(StartError::Other(e)) => return Err(e),
            }
        };
        let client = direct_client(port)?;
        Ok(Self {
            index,
            port,
            dir,
            child: Mutex::new(Some(child)),
            skew_ms: Mutex::new(skew_ms),
            paused: AtomicBool::new(false),
            client,
        })
    }

    /// Starts this member's mongod again, on its port and dbpath.
    pub(crate) async fn restart(
        &self,
        launch: &Launch,
        skew_ms: i64,
        faketime: Option<&Path>,
    ) -> Result<(), Error> {
        if self.is_running() {
            return Err(Error::Usage(format!(
                "member {} is running; kill it before restarting it",
                self.index
            )));
        }
        let child = spawn(
            launch,
            self.index,
            self.dir.path(),
            self.port,
            skew_ms,
            faketime,
        )
        .await
        .map_err(|e| match e {
            StartError::PortTaken => Error::Start {
                what: format!(
                    "member {}: its port {} is taken by another process",
                    self.index, self.port
                ),
                log_tail: log_tail(self.dir.path(), 0),
            },
            StartError::Other(e) => e,
        })?;
        *lock(&self.skew_ms) = skew_ms;
        self.paused.store(false, Ordering::SeqCst);
        *lock(&self.child) = Some(child);
        Ok(())
    }

    pub(crate) fn skew_ms(&self) -> i64 {
        *lock(&self.skew_ms)
    }

    /// The process id while a mongod runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        let mut child = lock(&self.child);
        reap(&mut child);
        child.as_ref().map(Child::id)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Sends `signal` to the running mongod.
    pub(crate) fn signal(&self, signal: Signal) -> Result<(), Error> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Usage(format!("member {} is not running", self.index)))?;
        let raw =
            i32::try_from(pid).map_err(|_| Error::Usage(format!("pid {pid} out of range")))?;
        kill(Pid::from_raw(raw), signal).map_err(|error| Error::Signal {
            context: format!("{signal} to member {} (pid {pid})", self.index),
            error,
        })?;
        match signal {
            Signal::SIGSTOP => self.paused.store(true, Ordering::SeqCst),
            Signal::SIGCONT => self.paused.store(false, Ordering::SeqCst),
            _ => {}
        }
        Ok(())
    }

    /// SIGKILL, then waits until the process is gone (reaped).
    pub(crate) async fn kill(&self) -> Result<(), Error> {
        {
            let mut child = lock(&self.child);
            let Some(c) = child.as_mut() else {
                return Err(Error::Usage(format!(
                    "member {} is not running",
                    self.index
                )));
            };
            // Sends SIGKILL unless it has exited already.
            c.kill().map_err(|e| {
                Error::io(
                    format!("SIGKILL to member {} (pid {})", self.index, c.id()),
                    e,
                )
            })?;
        }
        let t = Instant::now();
        while self.is_running() {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(Error::Usage(format!(
                    "member {} survived SIGKILL for 10 s",
                    self.index
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Takes the child out for a stop; resumes it first if it was paused (a stopped process
    /// does not act on SIGTERM until it is continued).
    pub(crate) fn take_for_stop(&self) -> Option<Child> {
        let mut child = lock(&self.child);
        reap(&mut child);
        let c = child.take()?;
        if self.paused.swap(false, Ordering::SeqCst)
            && let Ok(raw) = i32::try_from(c.id())
        {
            let _ = kill(Pid::from_raw(raw), Signal::SIGCONT);
        }
        Some(c)
    }
}

impl Drop for Member {
    /// A safety net: a member dropped outside of a set's stop (a set whose start failed
    /// half-way) still stops its mongod before its directory goes.
    fn drop(&mut self) {
        if let Some(c) = self.take_for_stop() {
            stop_blocking(vec![(self.index, c)], STOP_GRACE);
        }
    }
}

/// A child killed (SIGKILL) and reaped on drop unless it is taken out: a start that fails or
/// is cancelled half-way leaves no mongod behind.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Stops `children` (index, process): SIGTERM (mongod shuts down cleanly), then SIGKILL
/// to those still running after `grace`. Blocks until all are gone.
pub(crate) fn stop_blocking(children: Vec<(usize, Child)>, grace: Duration) {
    let mut running = Vec::new();
    for (i, mut c) in children {
        if matches!(c.try_wait(), Ok(Some(_))) {
            continue;
        }
        if let Ok(raw) = i32::try_from(c.id()) {
            let _ = kill(Pid::from_raw(raw), Signal::SIGTERM);
        }
        running.push((i, c));
    }
    let t = Instant::now();
    while !running.is_empty() && t.elapsed() < grace {
        running.retain_mut(|(_, c)| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
        if !running.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for (i, mut c) in running {
        log(format_args!(
            "member {i} (pid {}) still running {:.0} s after SIGTERM; sending SIGKILL",
            c.id(),
            grace.as_secs_f64()
        ));
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Forgets the child once it has exited (and reaps it).
fn reap(child: &mut Option<Child>) {
    if let Some(c) = child.as_mut()
        && !matches!(c.try_wait(), Ok(None))
    {
        *child = None;
    }
}

/// A loopback port the operating system says is free (it may be taken again before
/// mongod binds it: the caller retries).
fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("cannot bind a loopback port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("cannot read a bound port", e))
}

/// A driver client that talks to one member directly.
pub(crate) fn direct_client(port: u16) -> Result<mongodb::Client, Error> {
    let options = mongodb::options::ClientOptions::builder()
        .hosts(vec![mongodb::options::ServerAddress::Tcp {
            host: "127.0.0.1".into(),
            port: Some(port),
        }])
        .direct_connection(true)
        .server_selection_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .heartbeat_freq(Duration::from_millis(500))
        .app_name("lockwright-replset".to_string())
        .build();
    mongodb::Client::with_options(options)
        .map_err(|e| Error::command(format!("a client for 127.0.0.1:{port}"), e))
}

/// The wall-clock offset in libfaketime's syntax: `+3.000`, `-0.250` (seconds).
pub(crate) fn faketime_spec(skew_ms: i64) -> String {
    let sign = if skew_ms < 0 { '-' } else { '+' };
    let abs = skew_ms.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

fn mongod_log(dir: &Path) -> PathBuf {
    dir.join("mongod.log")
}

fn mongod_stderr(dir: &Path) -> PathBuf {
    dir.join("mongod.stderr")
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// What `path` holds from byte `from` on (lossy UTF-8; empty when unreadable).
fn read_from(path: &Path, from: u64) -> String {
    let mut out = Vec::new();
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(from)).is_ok()
    {
        let _ = f.read_to_end(&mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The last 40 lines the member logged from byte `from` of its log on, and what its
/// mongod wrote on stderr, indented.
pub(crate) fn log_tail(dir: &Path, from: u64) -> String {
    let mut out = String::new();
    for (name, text) in [
        ("mongod.log", read_from(&mongod_log(dir), from)),
        ("mongod.stderr", read_from(&mongod_stderr(dir), 0)),
    ] {
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            continue;
        }
        let skip = lines.len().saturating_sub(40);
        out.push_str(&format!(
            "    last {} lines of {}:\n",
            lines.len() - skip,
            dir.join(name).display()
        ));
        for l in &lines[skip..] {
            out.push_str("      ");
            out.push_str(l);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("    (mongod logged nothing)\n");
    }
    out
}

/// Starts a mongod for member `index` in `dir` on `port` and waits until it listens.
async fn spawn(
    launch: &Launch,
    index: usize,
    dir: &Path,
    port: u16,
    skew_ms: i64,
    faketime: Option<&Path>,
) -> Result<Child, StartError> {
    let log_path = mongod_log(dir);
    // The log is appended to (it keeps a member's history across restarts): only what this
    // start writes tells how it went.
    let from = file_len(&log_path);
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(mongod_stderr(dir))
        .map_err(|e| Error::io(format!("cannot open {}", mongod_stderr(dir).display()), e))?;
    let mut cmd = Command::new(&launch.mongod);
    cmd.arg("--dbpath")
        .arg(dir.join("db"))
        .args(["--bind_ip", "127.0.0.1", "--port", &port.to_string()])
        .args(["--replSet", SET_NAME])
        .arg("--logpath")
        .arg(&log_path)
        .arg("--logappend")
        .arg("--nounixsocket")
        .args(["--wiredTigerCacheSizeGB", "0.25"])
        .args([
            "--wiredTigerEngineConfigString",
            "log=(prealloc=false,file_max=20MB)",
        ])
        .args(["--oplogSize", "128"])
        .args(["--setParameter", "diagnosticDataCollectionEnabled=false"])
        // Test commands: the retry tests use the failCommand fail point.
        .args(["--setParameter", "enableTestCommands=1"])
        // A snapshot history of 1 s instead of 300: a dropped collection's files are removed
        // once the history no longer needs them, and the test suite and the kill matrix
        // create and drop thousands of collections (20,000 open files would end mongod).
        .args(["--setParameter", "minSnapshotHistoryWindowInSeconds=1"])
        // SIGTERM shuts down at once instead of quiescing for 15 s (a primary would also wait
        // up to that long for a secondary to catch up before it steps down).
        .args([
            "--setParameter",
            "shutdownTimeoutMillisForSignaledShutdown=0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    if skew_ms != 0 {
        let lib = faketime.ok_or_else(|| {
            Error::Usage(format!(
                "member {index} has a clock offset but no libfaketime was given"
            ))
        })?;
        // A relative offset: the member's wall clock runs at the normal rate, `skew_ms`
        // ahead (or behind). Its monotonic clock, which its timers and elections use, is
        // left alone. The offset is read from the environment once; FAKETIME_NO_CACHE would
        // only matter for a spec that changes while mongod runs (a FAKETIME_TIMESTAMP_FILE).
        cmd.env("LD_PRELOAD", lib)
            .env("FAKETIME", faketime_spec(skew_ms))
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let child = cmd.spawn().map_err(|e| {
        Error::io(
            format!("member {index}: cannot run {}", launch.mongod.display()),
            e,
        )
    })?;
    let mut guard = KillOnDrop(Some(child));
    let t = Instant::now();
    loop {
        // The guard holds the child until the loop returns it.
        let Some(child) = guard.0.as_mut() else {
            return Err(Error::Usage(format!("member {index}: lost its mongod")).into());
        };
        let exited = child
            .try_wait()
            .map_err(|e| Error::io(format!("member {index}: waiting for mongod"), e))?;
        let logged = read_from(&log_path, from);
        if let Some(status) = exited {
            if logged.contains("Address already in use") {
                return Err(StartError::PortTaken);
            }
            return Err(Error::Start {
                what: format!(
                    "member {index}: mongod exited ({status}) before it listened on port {port}"
                ),
                log_tail: log_tail(dir, from),
            }
            .into());
        }
        if logged.contains("Waiting for connections")
            && let Some(child) = guard.0.take()
        {
            return Ok(child);
        }
        if t.elapsed() > launch.start_timeout {
            return Err(Error::Start {
                what: format!(
                    "member {index}: mongod did not listen on port {port} within {:.0} s",
                    launch.start_timeout.as_secs_f64()
                ),
                log_tail: log_tail(dir, from),
            }
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::faketime_spec;

    #[test]
    fn faketime_specs() {
        assert_eq!(faketime_spec(3000), "+3.000");
        assert_eq!(faketime_spec(-250), "-0.250");
        assert_eq!(faketime_spec(1), "+0.001");
        assert_eq!(faketime_spec(-61_500), "-61.500");
    }
}
