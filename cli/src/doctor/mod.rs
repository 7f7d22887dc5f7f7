//! `lockwright doctor`: check the deployment and say what to fix.
//!
//! The replica set and unique index verdicts are the store's own set-up check (the one
//! every lock operation runs first), reached through a `status` call ([`index`]); this
//! module adds the details around it: the server's version and members, the write concern
//! the store will use, the clocks ([`clocks`]), the wake cursors and change streams open
//! for the collection ([`streams`]) and the wakes ([`wakes`]).
//!
//! Doctor only reads unless told otherwise: `--fix` creates the unique index and
//! `--wakeups` takes and releases a probe lock (and hands it to a waiter of its own).

use std::time::Instant;

use clap::Args;
use lockwright::store_mongo::MongoFailure;
use lockwright::{Error, MongoStore};
use mongodb::bson::{Document, doc};
use mongodb::options::Acknowledgment;

use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};

mod clocks;
mod index;
mod report;
mod streams;
mod wakes;

use report::{Report, Verdict};

/// `lockwright doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Create the unique index on `resource` when it is missing.
    #[arg(long)]
    fix: bool,
    /// Also check that a hand-over wakes a waiter, by taking a probe lock on a resource of
    /// doctor's own, queueing a waiter for it and releasing it (writes: a collection or a
    /// wake collection that does not exist yet is created, as by any first use). Without
    /// it, doctor only checks, reading, that the wakes can be read.
    #[arg(long)]
    wakeups: bool,
}

/// Runs `lockwright doctor`.
pub async fn doctor(conn: &ConnArgs, args: &DoctorArgs) -> Result<u8, CliError> {
    let store = connect(conn).await?;
    let mut report = Report::default();
    let admin = store.client().database("admin");

    // Reachable, and the members, from one `hello`.
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
    index::index(&mut report, &store, args.fix).await;
    write_concern(&mut report, &store);
    clocks::clocks(&mut report, &hello, &store, conn, conn.takeover_grace.0).await;
    // Counted before doctor opens a cursor of its own.
    streams::streams(&mut report, &store).await;
    let wakeups = if args.wakeups {
        wakes::probe(&store, conn).await
    } else {
        wakes::wakes_readable(&store).await
    };
    match wakeups {
        Ok(worked) => report.line(&Verdict::Ok, &worked),
        Err(why) => report.line(
            &Verdict::Warn,
            &format!("{why}: waiting acquires will only poll (up to max_backoff apart)"),
        ),
    }

    if report.failed() {
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
