//! Starting a set: the [`Builder`], and the replica-set initiation and URI check that
//! [`Builder::start`] runs once the mongods listen.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use mongodb::bson::{Document, doc};
use mongodb::error::ErrorKind;

use super::member::{self, Launch, Member};
use super::{Error, ReplSet, SET_NAME, TIMEOUT_ENV, find_libfaketime, find_mongod, log};

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
