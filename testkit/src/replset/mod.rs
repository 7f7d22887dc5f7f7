//! A throwaway MongoDB replica set on 127.0.0.1, for tests (feature `replset`).
//!
//! [`ReplSet::start`] starts N mongods (1 or 3, usually) of a replica set named
//! [`SET_NAME`], each on a free loopback port and in a temporary directory of its own,
//! initiates the set and returns once one member is a writable primary and every other one
//! is SECONDARY. The set can then be failed over ([`ReplSet::step_down`],
//! [`ReplSet::kill`] and [`ReplSet::restart`]), have a member frozen
//! ([`ReplSet::pause`], [`ReplSet::resume`]), and start members whose wall clock is shifted
//! through libfaketime ([`Builder::skew_ms`]). Dropping it stops every mongod (SIGTERM,
//! then SIGKILL after [`STOP_GRACE`]) and removes its files, also when a test panics.
//!
//! Every member runs with `--setParameter enableTestCommands=1` (fail points), a 256 MB
//! WiredTiger cache, a 128 MB oplog and a snapshot history of 1 s; a set of more than one
//! member has `electionTimeoutMillis` 1000 and `heartbeatIntervalMillis` 500, every member
//! of priority 1. The mongod binary is [`find_mongod`]'s unless [`Builder::mongod`] names
//! one. Progress goes to stderr.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockwright_testkit::replset::Error> {
//! use lockwright_testkit::replset::ReplSet;
//!
//! let set = ReplSet::builder(3).skew_ms(2, 3_000).start().await?;
//! let client = mongodb::Client::with_uri_str(set.uri()).await.expect("the set's URI");
//! let old = set.step_down().await?; // the primary that stepped down
//! let new = set.primary().await?;
//! assert_ne!(old, new);
//! let killed = set.kill_primary().await?;
//! set.restart(killed).await?; // waits until the set is healthy again
//! # drop(client);
//! # Ok(()) }
//! ```

mod error;
mod locate;
mod member;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::{join_all, try_join_all};
use mongodb::bson::{Document, doc};
use mongodb::error::ErrorKind;
use nix::sys::signal::Signal;

pub use error::Error;
pub use locate::{
    LIBFAKETIME_ENV, MONGOD_ENV, find_libfaketime, find_mongod, mongod_path_file, workspace_root,
};
use member::{Launch, Member, POLL, stop_blocking};

/// The replica set's name.
pub const SET_NAME: &str = "rs0";

/// The environment variable that bounds, in seconds, each wait for the set (a mongod to
/// listen, a healthy set); 60 when unset.
pub const TIMEOUT_ENV: &str = "MONGOD_START_TIMEOUT";

/// How long a stop waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long one `hello` to a member may take before the member counts as unreachable (a
/// paused member never answers).
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) fn log(args: std::fmt::Arguments<'_>) {
    eprintln!("replset: {args}");
}

/// What a member says it is, by its own `hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberState {
    /// A writable primary.
    Primary,
    /// A secondary.
    Secondary,
    /// It answers, but is neither (starting up, recovering, not in the set yet...).
    Other(String),
    /// It does not answer (down, paused, or not listening yet).
    Unreachable(String),
}

/// How to start a [`ReplSet`]: see [`ReplSet::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct Builder {
    members: usize,
    mongod: Option<PathBuf>,
    skews: Vec<(usize, i64)>,
    timeout: Duration,
}

impl Builder {
    /// Use this mongod binary instead of [`find_mongod`]'s.
    pub fn mongod(mut self, path: impl Into<PathBuf>) -> Self {
        self.mongod = Some(path.into());
        self
    }

    /// Start member `member` (0-based) with its wall clock `offset_ms` milliseconds ahead
    /// (negative: behind), through libfaketime ([`find_libfaketime`]). Its monotonic clock
    /// is left alone.
    pub fn skew_ms(mut self, member: usize, offset_ms: i64) -> Self {
        self.skews.retain(|(m, _)| *m != member);
        self.skews.push((member, offset_ms));
        self
    }

    /// Bound each wait (a mongod to listen, the set to become healthy) by `timeout` instead
    /// of `MONGOD_START_TIMEOUT` seconds (60 by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts the members, initiates the set, and waits until it is healthy: one writable
    /// primary, every other member SECONDARY.
    ///
    /// # Errors
    ///
    /// No mongod (or libfaketime, for a skewed member); a mongod that does not start (with
    /// the tail of its log); a set that does not become healthy in time.
    pub async fn start(self) -> Result<ReplSet, Error> {
        let t0 = Instant::now();
        if !(1..=7).contains(&self.members) {
            return Err(Error::Usage(format!(
                "a replica set of {} members: 1 to 7 are supported",
                self.members
            )));
        }
        if let Some((m, _)) = self.skews.iter().find(|(m, _)| *m >= self.members) {
            return Err(Error::Usage(format!(
                "a clock offset for member {m} of a set of {}",
                self.members
            )));
        }
        let mongod = match self.mongod {
            Some(m) => m,
            None => find_mongod()?,
        };
        let faketime = if self.skews.iter().any(|(_, ms)| *ms != 0) {
            Some(find_libfaketime()?)
        } else {
            None
        };
        let launch = Launch {
            mongod,
            start_timeout: self.timeout,
        };
        let skew = |i: usize| {
            self.skews
                .iter()
                .find(|(m, _)| *m == i)
                .map_or(0, |(_, ms)| *ms)
        };
        log(format_args!(
            "starting {} member(s) of {SET_NAME} with {}",
            self.members,
            launch.mongod.display()
        ));
        let members = try_join_all(
            (0..self.members).map(|i| Member::start(&launch, i, skew(i), faketime.as_deref())),
        )
        .await?;
        for m in &members {
            let skewed = match m.skew_ms() {
                0 => String::new(),
                ms => format!(", wall clock {} s (libfaketime)", member::faketime_spec(ms)),
            };
            log(format_args!(
                "member {}: mongod pid {} on 127.0.0.1:{}{skewed}",
                m.index,
                m.pid().unwrap_or_default(),
                m.port
            ));
        }
        let hosts: Vec<String> = members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port))
            .collect();
        let uri = format!("mongodb://{}/?replicaSet={SET_NAME}", hosts.join(","));
        let set = ReplSet {
            members,
            uri,
            launch,
            faketime,
            timeout: self.timeout,
        };
        set.initiate().await?;
        set.wait_healthy_for("start").await?;
        set.check_uri().await?;
        log(format_args!(
            "primary and {} secondaries ready in {:.1} s: {}",
            set.members.len() - 1,
            t0.elapsed().as_secs_f64(),
            set.uri
        ));
        Ok(set)
    }
}

/// A running replica set of throwaway mongods on 127.0.0.1; stopped, and its files
/// removed, on drop. Members are numbered from 0 in the order of the set's config.
///
/// Every method takes `&self`, so an `Arc<ReplSet>` can be shared between tasks.
pub struct ReplSet {
    members: Vec<Member>,
    uri: String,
    launch: Launch,
    faketime: Option<PathBuf>,
    timeout: Duration,
}

impl std::fmt::Debug for ReplSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplSet")
            .field("uri", &self.uri)
            .field(
                "ports",
                &self.members.iter().map(|m| m.port).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ReplSet {
    /// How to start a set of `members` members (1 or 3, usually).
    pub fn builder(members: usize) -> Builder {
        let timeout = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(60), Duration::from_secs);
        Builder {
            members,
            mongod: None,
            skews: Vec::new(),
            timeout,
        }
    }

    /// Starts a set of `members` members with the defaults: see [`Builder::start`].
    ///
    /// # Errors
    ///
    /// As [`Builder::start`].
    pub async fn start(members: usize) -> Result<Self, Error> {
        Self::builder(members).start().await
    }

    /// The set's URI: `mongodb://127.0.0.1:P0,.../?replicaSet=rs0`.
    #[must_use]
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// How many members the set has.
    #[must_use]
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    fn member(&self, member: usize) -> Result<&Member, Error> {
        self.members.get(member).ok_or_else(|| {
            Error::Usage(format!(
                "no member {member} in a set of {}",
                self.members.len()
            ))
        })
    }

    /// Member `member`'s port.
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn port(&self, member: usize) -> u16 {
        self.members[member].port
    }

    /// A URI of member `member` alone (`directConnection=true`).
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn member_uri(&self, member: usize) -> String {
        format!(
            "mongodb://127.0.0.1:{}/?directConnection=true",
            self.port(member)
        )
    }

    /// A driver client connected to member `member` alone.
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn client(&self, member: usize) -> &mongodb::Client {
        &self.members[member].client
    }

    /// Member `member`'s temporary directory (`db/`, `mongod.log`, `mongod.stderr`).
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn dir(&self, member: usize) -> &Path {
        self.members[member].dir.path()
    }

    /// The process id of member `member`'s mongod, while it runs.
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn pid(&self, member: usize) -> Option<u32> {
        self.members[member].pid()
    }

    /// Whether member `member`'s mongod runs (a paused one does).
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn is_running(&self, member: usize) -> bool {
        self.members[member].is_running()
    }

    /// Member `member`'s wall-clock offset in milliseconds (0: none).
    ///
    /// # Panics
    ///
    /// When there is no such member.
    #[must_use]
    pub fn skew_ms(&self, member: usize) -> i64 {
        self.members[member].skew_ms()
    }

    /// What member `member` says it is.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when there is no such member.
    pub async fn member_state(&self, member: usize) -> Result<MemberState, Error> {
        Ok(state(self.member(member)?).await)
    }

    /// Waits until the set is healthy (one writable primary, every other member SECONDARY,
    /// by each one's `hello` and by the primary's `replSetGetStatus`); the primary.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when it is not within the set's timeout.
    pub async fn primary(&self) -> Result<usize, Error> {
        self.wait_healthy_for("primary").await
    }

    /// Waits for a healthy set ([`ReplSet::primary`]), makes its primary step down
    /// (`replSetStepDown`: 5 s before it may stand again, up to 5 s for a secondary to catch
    /// up), and waits until it no longer says it is primary; the member that stepped down.
    ///
    /// # Errors
    ///
    /// No healthy set, the command refused, or a primary that does not step down in time.
    pub async fn step_down(&self) -> Result<usize, Error> {
        let p = self.wait_healthy_for("step-down").await?;
        let m = &self.members[p];
        let cmd = doc! { "replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 5 };
        match tokio::time::timeout(
            Duration::from_secs(30),
            m.client.database("admin").run_command(cmd),
        )
        .await
        {
            Ok(Err(e)) if matches!(*e.kind, ErrorKind::Command(_)) => {
                return Err(Error::command(format!("replSetStepDown on member {p}"), e));
            }
            // Done, or the connection closed as it stepped down: the wait below tells.
            _ => {}
        }
        let t = Instant::now();
        while state(m).await == MemberState::Primary {
            if t.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    what: format!("member {p} to step down"),
                    secs: t.elapsed().as_secs_f64(),
                    last: "still primary".into(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
        log(format_args!("member {p} (port {}) stepped down", m.port));
        Ok(p)
    }

    /// SIGKILLs member `member`'s mongod and waits until the process is gone.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub async fn kill(&self, member: usize) -> Result<(), Error> {
        let m = self.member(member)?;
        let pid = m.pid().unwrap_or_default();
        m.kill().await?;
        log(format_args!(
            "killed member {member} (pid {pid}, port {}) with SIGKILL",
            m.port
        ));
        Ok(())
    }

    /// Waits for a healthy set and SIGKILLs its primary ([`ReplSet::kill`]); the member that
    /// was primary.
    ///
    /// # Errors
    ///
    /// No healthy set, or as [`ReplSet::kill`].
    pub async fn kill_primary(&self) -> Result<usize, Error> {
        let p = self.wait_healthy_for("kill-primary").await?;
        self.kill(p).await?;
        Ok(p)
    }

    /// Starts member `member` again (after [`ReplSet::kill`], or after it died), on its
    /// port and dbpath with its clock offset, and waits until the set is healthy again.
    ///
    /// # Errors
    ///
    /// No such member, it is running, its mongod does not start, or the set does not become
    /// healthy in time.
    pub async fn restart(&self, member: usize) -> Result<(), Error> {
        let skew = self.member(member)?.skew_ms();
        self.restart_with_skew_ms(member, skew).await
    }

    /// As [`ReplSet::restart`], with the member's wall clock now `offset_ms` milliseconds
    /// ahead (negative: behind; 0: not shifted).
    ///
    /// # Errors
    ///
    /// As [`ReplSet::restart`], and no libfaketime for a non-zero offset.
    pub async fn restart_with_skew_ms(&self, member: usize, offset_ms: i64) -> Result<(), Error> {
        let m = self.member(member)?;
        let t = Instant::now();
        let found;
        let faketime = match (offset_ms, &self.faketime) {
            (0, _) => None,
            (_, Some(f)) => Some(f.as_path()),
            (_, None) => {
                found = find_libfaketime()?;
                Some(found.as_path())
            }
        };
        m.restart(&self.launch, offset_ms, faketime).await?;
        log(format_args!(
            "member {member}: mongod pid {} on port {} again; waiting for a healthy set",
            m.pid().unwrap_or_default(),
            m.port
        ));
        self.wait_healthy_for("restart").await?;
        log(format_args!(
            "member {member} back and the set healthy in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// Freezes member `member`'s mongod (SIGSTOP): it answers nobody until
    /// [`ReplSet::resume`]. A set with a paused member is not healthy.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub fn pause(&self, member: usize) -> Result<(), Error> {
        self.member(member)?.signal(Signal::SIGSTOP)?;
        log(format_args!("paused member {member} (SIGSTOP)"));
        Ok(())
    }

    /// Lets a paused member run again (SIGCONT). It does not wait for a healthy set.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub fn resume(&self, member: usize) -> Result<(), Error> {
        self.member(member)?.signal(Signal::SIGCONT)?;
        log(format_args!("resumed member {member} (SIGCONT)"));
        Ok(())
    }

    /// How far member `member`'s wall clock is ahead of this process's, in milliseconds (its
    /// `hello` `localTime` against the middle of the round trip; about ±1 ms on loopback
    /// plus the clock's millisecond resolution).
    ///
    /// # Errors
    ///
    /// No such member, or it does not answer.
    pub async fn clock_offset_ms(&self, member: usize) -> Result<i64, Error> {
        let m = self.member(member)?;
        let before = SystemTime::now();
        let hello = m
            .client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| Error::command(format!("hello to member {member}"), e))?;
        let after = SystemTime::now();
        let local = hello
            .get_datetime("localTime")
            .map_err(|e| Error::Usage(format!("member {member}'s hello has no localTime: {e}")))?;
        let mid = before + after.duration_since(before).unwrap_or_default() / 2;
        let mid_ms = match mid.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Ok(local.timestamp_millis() - mid_ms)
    }

    /// Waits until the set is healthy: see [`ReplSet::primary`].
    ///
    /// # Errors
    ///
    /// As [`ReplSet::primary`].
    pub async fn wait_healthy(&self) -> Result<usize, Error> {
        self.wait_healthy_for("a healthy set").await
    }

    async fn wait_healthy_for(&self, what: &str) -> Result<usize, Error> {
        let t = Instant::now();
        loop {
            let last = match self.healthy().await {
                Ok(p) => return Ok(p),
                Err(last) => last,
            };
            if t.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    what: format!("{what}: a healthy set"),
                    secs: t.elapsed().as_secs_f64(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The primary when the set is healthy, else what is wrong.
    async fn healthy(&self) -> Result<usize, String> {
        let states = join_all(self.members.iter().map(state)).await;
        let primaries: Vec<usize> = (0..states.len())
            .filter(|i| states[*i] == MemberState::Primary)
            .collect();
        let all_up = states
            .iter()
            .all(|s| matches!(s, MemberState::Primary | MemberState::Secondary));
        let [p] = primaries[..] else {
            return Err(describe(&states));
        };
        if !all_up {
            return Err(describe(&states));
        }
        let status = tokio::time::timeout(
            HELLO_TIMEOUT,
            self.members[p]
                .client
                .database("admin")
                .run_command(doc! { "replSetGetStatus": 1 }),
        )
        .await
        .map_err(|_| format!("replSetGetStatus on member {p}: no answer"))?
        .map_err(|e| format!("replSetGetStatus on member {p}: {e}"))?;
        let listed = status.get_array("members").map_err(|e| e.to_string())?;
        let mut seen: Vec<&str> = Vec::new();
        let mut all_healthy = true;
        for entry in listed {
            let Some(d) = entry.as_document() else {
                return Err("replSetGetStatus: a member is not a document".into());
            };
            seen.push(d.get_str("stateStr").unwrap_or("?"));
            all_healthy &= number(d, "health") == Some(1.0);
        }
        seen.sort_unstable();
        let mut want = vec!["PRIMARY"];
        want.extend(std::iter::repeat_n("SECONDARY", self.members.len() - 1));
        if seen != want || !all_healthy {
            return Err(format!("member {p} (primary) sees {seen:?}"));
        }
        Ok(p)
    }

    async fn initiate(&self) -> Result<(), Error> {
        let members: Vec<Document> = self
            .members
            .iter()
            .map(|m| {
                doc! {
                    "_id": i32::try_from(m.index).unwrap_or_default(),
                    "host": format!("127.0.0.1:{}", m.port),
                    "priority": 1,
                }
            })
            .collect();
        let mut config = doc! { "_id": SET_NAME, "members": members };
        if self.members.len() > 1 {
            config.insert(
                "settings",
                doc! { "electionTimeoutMillis": 1000, "heartbeatIntervalMillis": 500 },
            );
        }
        let admin = self.members[0].client.database("admin");
        let t = Instant::now();
        log(format_args!(
            "initiating replica set {SET_NAME} with {} member(s)",
            self.members.len()
        ));
        loop {
            let result = tokio::time::timeout(
                Duration::from_secs(30),
                admin.run_command(doc! { "replSetInitiate": config.clone() }),
            )
            .await;
            let last = match result {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => match *e.kind {
                    // AlreadyInitialized: an earlier attempt went through.
                    ErrorKind::Command(ref c) if c.code == 23 => return Ok(()),
                    ErrorKind::Command(_) => {
                        return Err(Error::command("replSetInitiate", e));
                    }
                    _ => e.to_string(),
                },
                Err(_) => "no answer within 30 s".to_string(),
            };
            if t.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    what: "replSetInitiate on member 0".into(),
                    secs: t.elapsed().as_secs_f64(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The set's URI works (replica-set discovery, not a direct connection).
    async fn check_uri(&self) -> Result<(), Error> {
        let mut options = mongodb::options::ClientOptions::parse(&self.uri)
            .await
            .map_err(|e| Error::command(format!("parsing {}", self.uri), e))?;
        options.server_selection_timeout = Some(self.timeout);
        let client = mongodb::Client::with_options(options)
            .map_err(|e| Error::command(format!("a client for {}", self.uri), e))?;
        client
            .database("admin")
            .run_command(doc! { "ping": 1 })
            .await
            .map_err(|e| Error::command(format!("ping through {}", self.uri), e))?;
        Ok(())
    }
}

impl Drop for ReplSet {
    fn drop(&mut self) {
        let children: Vec<_> = self
            .members
            .iter()
            .filter_map(|m| m.take_for_stop().map(|c| (m.index, c)))
            .collect();
        let t = Instant::now();
        let n = children.len();
        stop_blocking(children, STOP_GRACE);
        log(format_args!(
            "stopped {n} running member(s) in {:.1} s; removing their directories",
            t.elapsed().as_secs_f64()
        ));
    }
}

/// What member `m` says it is.
async fn state(m: &Member) -> MemberState {
    let hello = tokio::time::timeout(
        HELLO_TIMEOUT,
        m.client.database("admin").run_command(doc! { "hello": 1 }),
    )
    .await;
    let h = match hello {
        Err(_) => return MemberState::Unreachable("no answer".into()),
        Ok(Err(e)) => return MemberState::Unreachable(short(&e)),
        Ok(Ok(h)) => h,
    };
    if h.get_str("setName") != Ok(SET_NAME) {
        MemberState::Other(format!("not in {SET_NAME} yet"))
    } else if h.get_bool("isWritablePrimary") == Ok(true) {
        MemberState::Primary
    } else if h.get_bool("secondary") == Ok(true) {
        MemberState::Secondary
    } else {
        MemberState::Other("neither primary nor secondary".into())
    }
}

fn short(e: &mongodb::error::Error) -> String {
    match *e.kind {
        ErrorKind::ServerSelection { .. } => "down".into(),
        _ => e.to_string(),
    }
}

fn describe(states: &[MemberState]) -> String {
    let parts: Vec<String> = states
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            MemberState::Primary => format!("{i}: PRIMARY"),
            MemberState::Secondary => format!("{i}: SECONDARY"),
            MemberState::Other(w) | MemberState::Unreachable(w) => format!("{i}: {w}"),
        })
        .collect();
    format!("members say {}", parts.join(", "))
}

/// A numeric field as f64, whatever its BSON number type.
fn number(d: &Document, key: &str) -> Option<f64> {
    match d.get(key)? {
        mongodb::bson::Bson::Double(x) => Some(*x),
        mongodb::bson::Bson::Int32(x) => Some(f64::from(*x)),
        #[allow(clippy::cast_precision_loss)]
        mongodb::bson::Bson::Int64(x) => Some(*x as f64),
        _ => None,
    }
}
