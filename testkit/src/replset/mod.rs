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

mod builder;
mod error;
mod faults;
mod health;
mod locate;
mod member;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use builder::Builder;
pub use error::Error;
pub use health::MemberState;
pub use locate::{
    LIBFAKETIME_ENV, MONGOD_ENV, find_libfaketime, find_mongod, mongod_path_file, workspace_root,
};
use member::{Launch, Member, stop_blocking};

/// The replica set's name.
pub const SET_NAME: &str = "rs0";

/// The environment variable that bounds, in seconds, each wait for the set (a mongod to
/// listen, a healthy set); 60 when unset.
pub const TIMEOUT_ENV: &str = "MONGOD_START_TIMEOUT";

/// How long a stop waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

pub(crate) fn log(args: std::fmt::Arguments<'_>) {
    eprintln!("replset: {args}");
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
