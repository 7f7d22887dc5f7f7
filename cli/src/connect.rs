//! The connection flags and the store they open.

use std::time::Duration;

use clap::Args;
use lockwright::{DEFAULT_TAKEOVER_GRACE, MAX_TAKEOVER_GRACE, MongoStore};
use mongodb::bson::Document;
use mongodb::options::ClientOptions;

use crate::durations::show;
use crate::exit::{self, CliError};

/// How long the driver looks for a usable server before an operation fails, unless the
/// URI says otherwise (`serverSelectionTimeoutMS`).
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the locks are.
#[derive(Debug, Args)]
pub struct ConnArgs {
    /// MongoDB connection string: a replica set or sharded cluster (TLS, credentials and
    /// timeouts as the URI says; servers are looked for 10 s unless serverSelectionTimeoutMS
    /// says otherwise).
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        env = "LOCKWRIGHT_URI",
        hide_env_values = true,
        default_value = "mongodb://127.0.0.1:27017/"
    )]
    pub uri: String,
    /// The lock collection, as DATABASE.COLLECTION.
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        value_name = "DB.COLL",
        env = "LOCKWRIGHT_COLLECTION",
        default_value = "lockwright.locks",
        value_parser = namespace
    )]
    pub collection: Namespace,
    /// The takeover grace of the store (`MongoStore::with_takeover_grace`): a lock that
    /// expired without being released blocks others this long more. Use the one the
    /// collection's clients and purgers use; `doctor` fails when members' clocks disagree by
    /// more. Milliseconds (2000) or a duration (2s).
    #[arg(
        long,
        global = true,
        help_heading = "Connection",
        value_name = "MS|DURATION",
        env = "LOCKWRIGHT_TAKEOVER_GRACE",
        default_value_t = Grace::DEFAULT,
        value_parser = grace
    )]
    pub takeover_grace: Grace,
}

/// `--takeover-grace`: the takeover grace the collection's clients and purgers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace(pub Duration);

impl Grace {
    /// The library's default, [`DEFAULT_TAKEOVER_GRACE`].
    pub const DEFAULT: Grace = Grace(DEFAULT_TAKEOVER_GRACE);
}

impl std::fmt::Display for Grace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// Parses a takeover grace: milliseconds (`2000`) or a duration (`2s`, `1500ms`), from zero
/// (the plain rule) to [`MAX_TAKEOVER_GRACE`].
pub fn grace(s: &str) -> Result<Grace, String> {
    let s = s.trim();
    let d = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("not a number of milliseconds ({e})"))?
    } else {
        humantime::parse_duration(s).map_err(|e| {
            format!(
                "not a duration ({e}); write milliseconds, such as 2000, or a number and a \
                 unit, such as 2s or 1500ms"
            )
        })?
    };
    if d > MAX_TAKEOVER_GRACE {
        return Err(format!(
            "must be at most {} (the longest takeover grace a store accepts)",
            show(MAX_TAKEOVER_GRACE)
        ));
    }
    Ok(Grace(d))
}

/// A database and collection name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// The database.
    pub db: String,
    /// The collection.
    pub coll: String,
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// Parses `DATABASE.COLLECTION` (the collection name may itself contain dots).
fn namespace(s: &str) -> Result<Namespace, String> {
    match s.split_once('.') {
        Some((db, coll)) if !db.is_empty() && !coll.is_empty() => Ok(Namespace {
            db: db.to_owned(),
            coll: coll.to_owned(),
        }),
        _ => Err("expected DATABASE.COLLECTION, such as lockwright.locks".to_owned()),
    }
}

/// Opens the store the flags name. The server is first contacted by the first operation.
///
/// # Errors
/// A usage error for a connection string the driver cannot parse.
pub async fn connect(args: &ConnArgs) -> Result<MongoStore, CliError> {
    let mut options = ClientOptions::parse(&args.uri).await.map_err(|e| {
        CliError::usage(format!(
            "--uri/LOCKWRIGHT_URI is not a usable MongoDB connection string: {}",
            exit::chain(&e)
        ))
    })?;
    options
        .server_selection_timeout
        .get_or_insert(SERVER_SELECTION_TIMEOUT);
    options
        .app_name
        .get_or_insert_with(|| "lockwright-cli".to_owned());
    let client = mongodb::Client::with_options(options).map_err(|e| {
        CliError::usage(format!(
            "cannot use the connection string: {}",
            exit::chain(&e)
        ))
    })?;
    let ns = &args.collection;
    let coll = client.database(&ns.db).collection::<Document>(&ns.coll);
    MongoStore::from_collection(coll)
        .with_takeover_grace(args.takeover_grace.0)
        .map_err(|e| CliError::usage(format!("--takeover-grace: {e}")))
}
