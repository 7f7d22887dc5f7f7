//! `lockwright doctor`: check the deployment and say what to fix.
//!
//! The replica set and unique index verdicts are the store's own set-up check (the one
//! every lock operation runs first), reached through a `status` call; this module adds the
//! details around it: the server's version and members, the write concern the store will
//! use, and the server's clock against the local one.

use std::time::{Duration, Instant, SystemTime};

use lockwright::store_mongo::MongoFailure;
use lockwright::{Client, Error, Filter, MongoStore};
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::Acknowledgment;

use crate::DoctorArgs;
use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};

/// Local and server clocks further apart than this are reported.
const MAX_SKEW: Duration = Duration::from_secs(1);

/// The result of one check.
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// Prints the checks as they finish; remembers whether any failed.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, verdict: &Verdict, text: &str) {
        let tag = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => {
                self.failed = true;
                "FAIL"
            }
        };
        println!("{tag} {}", exit::one_line(text));
    }
}

/// Runs `lockwright doctor`.
pub async fn doctor(conn: &ConnArgs, args: &DoctorArgs) -> Result<u8, CliError> {
    let store = connect(conn).await?;
    let mut report = Report::default();
    let admin = store.client().database("admin");

    // Reachable, and the server's clock, from one `hello`.
    let sent = SystemTime::now();
    let started = Instant::now();
    let hello = match admin.run_command(doc! { "hello": 1 }).await {
        Ok(hello) => hello,
        Err(e) => {
            // As the store reports driver failures: code and short message, never the raw
            // reply.
            let err = CliError::from(Error::backend("hello", MongoFailure::new(&e)));
            report.line(&Verdict::Fail, &err.message);
            return Ok(exit::UNAVAILABLE);
        }
    };
    let round_trip = started.elapsed();
    let version = admin
        .run_command(doc! { "buildInfo": 1 })
        .await
        .ok()
        .and_then(|b| b.get_str("version").ok().map(str::to_owned))
        .unwrap_or_else(|| "of unknown version".to_owned());
    let me = hello.get_str("me").unwrap_or("the server");
    report.line(
        &Verdict::Ok,
        &format!(
            "server reachable: MongoDB {version} at {me} ({} ms round trip)",
            round_trip.as_millis()
        ),
    );

    deployment(&mut report, &hello);
    index(&mut report, &store, args.fix).await;
    write_concern(&mut report, &store);
    clock(&mut report, &hello, sent, round_trip);

    if report.failed {
        println!("problems found: fix the FAIL lines above");
        Ok(exit::CONFIG)
    } else {
        println!("no problems found");
        Ok(exit::OK)
    }
}

/// A replica set (or sharded cluster), and how many members it has.
fn deployment(report: &mut Report, hello: &Document) {
    if let Ok(set) = hello.get_str("setName") {
        let members = hello.get_array("hosts").map_or(0, Vec::len);
        report.line(
            &Verdict::Ok,
            &format!("replica set `{set}` with {members} voting member(s)"),
        );
        if members < 3 {
            report.line(
                &Verdict::Warn,
                "fewer than 3 members: locking is correct, but a failed member stops it; \
                 use 3 members in production",
            );
        }
    } else if hello.get_str("msg").is_ok_and(|m| m == "isdbgrid") {
        report.line(&Verdict::Ok, "sharded cluster (connected to mongos)");
    } else {
        report.line(
            &Verdict::Fail,
            "standalone server: lockwright needs a replica set (renew, unlock and purge run \
             in transactions); a one-member replica set is enough: start mongod with \
             --replSet rs0 and run rs.initiate()",
        );
    }
}

/// The unique index on `resource`, judged by the store itself; created with `--fix`.
async fn index(report: &mut Report, store: &MongoStore, fix: bool) {
    let ns = store.collection().namespace();
    let client = Client::new(store_clone(store));
    // Any operation runs the store's set-up check first; status on one name reads little.
    let probe = Filter::new().resource("lockwright-doctor-probe");
    let mut checked = client.status(&probe).await;
    if fix && matches!(checked, Err(Error::Misconfigured { .. })) {
        match client.create_indexes().await {
            Ok(()) => {
                report.line(
                    &Verdict::Ok,
                    &format!("created the unique index on `resource` in {ns}"),
                );
                checked = client.status(&probe).await;
            }
            Err(e) => report.line(
                &Verdict::Fail,
                &format!("creating the index: {}", exit::chain(&e)),
            ),
        }
    }
    match checked {
        Ok(_) | Err(Error::Skipped { .. }) => {
            let name = resource_index_name(store).await.unwrap_or_default();
            report.line(
                &Verdict::Ok,
                &format!("collection {ns} has a unique index on `resource` {name}"),
            );
        }
        // Not a replica set: already reported.
        Err(Error::Misconfigured { reason }) if reason.contains("replica set") => {}
        Err(Error::Misconfigured { reason }) => report.line(
            &Verdict::Fail,
            &format!("{reason}; or run `lockwright doctor --fix`"),
        ),
        Err(e) => report.line(&Verdict::Fail, &CliError::from(e).message),
    }
}

/// A second store on the same collection (its set-up check is its own).
fn store_clone(store: &MongoStore) -> MongoStore {
    MongoStore::from_collection(store.collection().clone())
}

/// `(name)` of the unique index on `resource`, for the report.
async fn resource_index_name(store: &MongoStore) -> Option<String> {
    use futures_util::TryStreamExt;
    let indexes: Vec<_> = store
        .collection()
        .list_indexes()
        .await
        .ok()?
        .try_collect()
        .await
        .ok()?;
    indexes
        .into_iter()
        .find(|i| {
            i.keys.keys().map(String::as_str).eq(["resource"])
                && i.options.as_ref().and_then(|o| o.unique) == Some(true)
        })
        .and_then(|i| i.options.and_then(|o| o.name))
        .map(|n| format!("({n})"))
}

/// The write concern the store uses (majority, whatever the connection string says), and
/// what the connection string asks for other writes.
fn write_concern(report: &mut Report, store: &MongoStore) {
    match store
        .collection()
        .write_concern()
        .and_then(|wc| wc.w.as_ref())
    {
        None | Some(Acknowledgment::Majority) => {
            report.line(&Verdict::Ok, "lock writes use write concern majority");
        }
        Some(other) => report.line(
            &Verdict::Fail,
            &format!(
                "lock writes use write concern w={}: a grant acknowledged by fewer than a \
                 majority can be lost in a failover, and then two holders are possible",
                acknowledgment(other)
            ),
        ),
    }
    let ns = store.collection().namespace();
    let uri = store.client().database(&ns.db).write_concern().cloned();
    let Some(wc) = uri else { return };
    if let Some(w) =
        wc.w.as_ref()
            .filter(|w| !matches!(w, Acknowledgment::Majority))
    {
        report.line(
            &Verdict::Warn,
            &format!(
                "the connection string sets write concern w={}: Lockwright writes its locks \
                 with majority regardless, but other writes through this URI do not",
                acknowledgment(w)
            ),
        );
    }
    if wc.journal == Some(false) {
        report.line(
            &Verdict::Warn,
            "the connection string sets journal=false: Lockwright's lock writes do not use \
             it, but other writes through this URI may be lost if a member restarts",
        );
    }
}

fn acknowledgment(a: &Acknowledgment) -> String {
    match a {
        Acknowledgment::Nodes(n) => n.to_string(),
        Acknowledgment::Majority => "majority".to_owned(),
        Acknowledgment::Custom(tag) => tag.clone(),
        _ => "?".to_owned(),
    }
}

/// The server's clock (hello's `localTime`) against the local clock at the middle of the
/// round trip.
fn clock(report: &mut Report, hello: &Document, sent: SystemTime, round_trip: Duration) {
    let Some(Bson::DateTime(server)) = hello.get("localTime") else {
        report.line(
            &Verdict::Warn,
            "the server did not say its time (no localTime in hello)",
        );
        return;
    };
    let server = server.to_system_time();
    let local = sent + round_trip / 2;
    let (skew, ahead) = match server.duration_since(local) {
        Ok(d) => (d, "ahead of"),
        Err(e) => (e.duration(), "behind"),
    };
    let uncertainty = round_trip / 2;
    if skew.saturating_sub(uncertainty) <= MAX_SKEW {
        report.line(
            &Verdict::Ok,
            &format!(
                "server clock and local clock agree within {} ms (±{} ms)",
                skew.as_millis(),
                uncertainty.as_millis()
            ),
        );
    } else {
        report.line(
            &Verdict::Warn,
            &format!(
                "the server's clock is {} {ahead} this machine's: locks are decided by the \
                 server's clock alone, so locking stays correct, but times shown here and \
                 logged locally disagree with it; synchronise both with NTP",
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(skew.as_millis()).unwrap_or(u64::MAX)
                ))
            ),
        );
    }
}
