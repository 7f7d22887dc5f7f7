//! Doctor's clock check.
//!
//! A replica set judges expiry with its primary's wall clock, and a failover switches
//! clocks: the takeover grace (`MongoStore::with_takeover_grace`) must cover how far the
//! clock of a member that can be primary runs ahead of another's. Doctor connects to every
//! member the set lists (`hello`'s `hosts` and `passives`) directly, with the connection
//! string's credentials and TLS options, reads each one's clock (`hello`'s `localTime`, the
//! shortest of a few round trips) and estimates its offset against this machine as
//! `localTime - (sent + round trip / 2)`, give or take half the round trip and the
//! millisecond of `localTime`'s resolution. The largest disagreement between two members
//! that can be primary (`hosts`), less its uncertainty, fails the check above the grace and
//! is warned about above half of it. A member's offset against this machine only matters
//! for reading times, and is warned about above [`MAX_LOCAL_OFFSET`].

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use lockwright::store_mongo::MongoFailure;
use lockwright::{MAX_TAKEOVER_GRACE, MongoStore};
use mongodb::Database;
use mongodb::bson::{Bson, Document, doc};
use mongodb::error::ErrorKind;
use mongodb::options::{ClientOptions, ServerAddress};

use super::report::{Report, Verdict};
use crate::connect::ConnArgs;
use crate::durations::show;

/// A member's clock further than this from the local one is reported (a warning: locks
/// never use the local clock).
const MAX_LOCAL_OFFSET: Duration = Duration::from_secs(1);

/// How long doctor looks for one member (server selection and connecting) before it
/// reports it unmeasured; the whole reading of one member is bounded by this and a second.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(5);

/// `hello`s sent to each member; the one with the shortest round trip is kept.
const SAMPLES: usize = 3;

/// `localTime` is in whole milliseconds: an uncertainty the round trip does not show.
const RESOLUTION_US: i64 = 1_000;
/// One server's clock against this machine's.
struct Reading {
    /// Its clock minus this machine's, in microseconds.
    offset_us: i64,
    /// How far `offset_us` may be off either way, in microseconds: half the round trip and
    /// `localTime`'s millisecond.
    uncertainty_us: i64,
    /// The round trip of the `hello` it comes from.
    round_trip: Duration,
    /// What the server said it is.
    role: &'static str,
}

/// A member the set lists, and its clock (or why it could not be read).
struct Member {
    /// `host:port`, as the set lists it.
    host: String,
    /// Listed in `hosts` (it can be primary), not in `passives` (priority 0).
    electable: bool,
    reading: Result<Reading, String>,
}

/// The clocks: every member's against this machine's, and the members' against each other
/// and the takeover grace. A standalone server or a mongos is only read against this
/// machine.
pub(super) async fn clocks(
    report: &mut Report,
    hello: &Document,
    store: &MongoStore,
    conn: &ConnArgs,
    grace: Duration,
) {
    if hello.get_str("setName").is_err() {
        let mongos = hello.get_str("msg").is_ok_and(|m| m == "isdbgrid");
        let who = if mongos { "mongos" } else { "the server" };
        match read_clock(&store.client().database("admin")).await {
            Ok(reading) => local_offset(report, who, &reading),
            Err(e) => report.line(
                &Verdict::Warn,
                &format!("cannot read the clock of {who}: {e}"),
            ),
        }
        if mongos {
            report.line(
                &Verdict::Warn,
                &format!(
                    "the clocks of the shards' members are not compared through mongos: run \
                     `lockwright doctor --uri` with each shard's replica set to compare them \
                     with the takeover grace of {}",
                    show(grace)
                ),
            );
        }
        return;
    }
    // Credentials, TLS and timeouts as the connection string says: it parsed once already.
    let options = match ClientOptions::parse(&conn.uri).await {
        Ok(options) => options,
        Err(e) => {
            report.line(
                &Verdict::Warn,
                &format!(
                    "members' clocks not read: cannot connect to them one by one: {}",
                    MongoFailure::new(&e)
                ),
            );
            return;
        }
    };
    let listed: Vec<(String, bool)> = hosts(hello, "hosts")
        .into_iter()
        .map(|h| (h, true))
        .chain(hosts(hello, "passives").into_iter().map(|h| (h, false)))
        .collect();
    let readings = join_all(listed.iter().map(|(host, _)| read_member(&options, host))).await;
    let members: Vec<Member> = listed
        .into_iter()
        .zip(readings)
        .map(|((host, electable), reading)| Member {
            host,
            electable,
            reading,
        })
        .collect();
    for m in &members {
        match &m.reading {
            Ok(r) => {
                let passive = if m.electable {
                    ""
                } else {
                    ", priority 0: never primary, not compared"
                };
                local_offset(report, &format!("{} ({}{passive})", m.host, r.role), r);
            }
            Err(e) => report.line(
                &Verdict::Warn,
                &format!(
                    "cannot read the clock of member {} ({e}): it cannot be measured, so it is \
                     not compared with the others'",
                    m.host
                ),
            ),
        }
    }
    compare(report, &members, grace);
}

/// The `host:port` strings of `hello`'s array `key`.
fn hosts(hello: &Document, key: &str) -> Vec<String> {
    hello
        .get_array(key)
        .map(|hosts| {
            hosts
                .iter()
                .filter_map(Bson::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the clock of the member at `host` through a direct connection with the connection
/// string's options (credentials, TLS), giving up after about [`MEMBER_TIMEOUT`].
async fn read_member(base: &ClientOptions, host: &str) -> Result<Reading, String> {
    let address = ServerAddress::parse(host).map_err(|e| member_failure(&e))?;
    let mut options = base.clone();
    options.hosts = vec![address];
    options.direct_connection = Some(true);
    options.repl_set_name = None;
    options.load_balanced = None;
    options.srv_max_hosts = None;
    options.server_selection_timeout = Some(
        options
            .server_selection_timeout
            .map_or(MEMBER_TIMEOUT, |t| t.min(MEMBER_TIMEOUT)),
    );
    options.connect_timeout = Some(
        options
            .connect_timeout
            .map_or(MEMBER_TIMEOUT, |t| t.min(MEMBER_TIMEOUT)),
    );
    options
        .app_name
        .get_or_insert_with(|| "lockwright-cli".to_owned());
    let client = mongodb::Client::with_options(options).map_err(|e| member_failure(&e))?;
    let limit = MEMBER_TIMEOUT + Duration::from_secs(1);
    match tokio::time::timeout(limit, read_clock(&client.database("admin"))).await {
        Ok(reading) => reading,
        Err(_) => Err(format!("no answer within {}", show(limit))),
    }
}

/// The server's clock (`hello`'s `localTime`) against this machine's at the middle of the
/// round trip, from the fastest of [`SAMPLES`] `hello`s.
async fn read_clock(admin: &Database) -> Result<Reading, String> {
    let failure = |e: mongodb::error::Error| member_failure(&e);
    // The first command may open a connection (and authenticate): no round trip to measure.
    admin
        .run_command(doc! { "ping": 1 })
        .await
        .map_err(failure)?;
    let mut fastest: Option<(Duration, SystemTime, Document)> = None;
    for _ in 0..SAMPLES {
        let sent = SystemTime::now();
        let started = Instant::now();
        let hello = admin
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(failure)?;
        let round_trip = started.elapsed();
        if fastest.as_ref().is_none_or(|(best, ..)| round_trip < *best) {
            fastest = Some((round_trip, sent, hello));
        }
    }
    let Some((round_trip, sent, hello)) = fastest else {
        return Err("no reading".to_owned());
    };
    let Some(Bson::DateTime(server)) = hello.get("localTime") else {
        return Err("it does not say its time (no localTime in hello)".to_owned());
    };
    let local_us = since_epoch_us(sent + round_trip / 2);
    Ok(Reading {
        offset_us: server
            .timestamp_millis()
            .saturating_mul(1_000)
            .saturating_sub(local_us),
        uncertainty_us: micros(round_trip / 2).saturating_add(RESOLUTION_US),
        round_trip,
        role: role(&hello),
    })
}

/// Why a server's clock could not be read, short: a server that cannot be selected is
/// described by the one error of its connection attempt, not the driver's whole topology.
fn member_failure(e: &mongodb::error::Error) -> String {
    if let ErrorKind::ServerSelection { message, .. } = e.kind.as_ref() {
        let why = message
            .split_once("Error: Kind: ")
            .and_then(|(_, why)| why.split(", labels:").next())
            .unwrap_or("no answer");
        return format!("not reachable within {}: {why}", show(MEMBER_TIMEOUT));
    }
    MongoFailure::new(e).to_string()
}

/// What a server's `hello` says it is.
fn role(hello: &Document) -> &'static str {
    if hello.get_bool("isWritablePrimary") == Ok(true) {
        "primary"
    } else if hello.get_bool("secondary") == Ok(true) {
        "secondary"
    } else if hello.get_bool("arbiterOnly") == Ok(true) {
        "arbiter"
    } else if hello.get_str("msg") == Ok("isdbgrid") {
        "mongos"
    } else if hello.get_str("setName").is_ok() {
        "neither primary nor secondary"
    } else {
        "standalone"
    }
}

/// One server's clock against this machine's: only times read across the two disagree, so
/// a large offset is a warning, never a failure.
fn local_offset(report: &mut Report, who: &str, r: &Reading) {
    let direction = if r.offset_us < 0 {
        "behind"
    } else {
        "ahead of"
    };
    let measured = format!(
        "clock of {who} is {} {direction} this machine's ({}, {:.1} ms round trip)",
        show_us(r.offset_us),
        show_pm(r.uncertainty_us),
        r.round_trip.as_secs_f64() * 1e3,
    );
    if r.offset_us
        .saturating_abs()
        .saturating_sub(r.uncertainty_us)
        > micros(MAX_LOCAL_OFFSET)
    {
        report.line(
            &Verdict::Warn,
            &format!(
                "{measured}: locks never use this machine's clock, so this only matters when \
                 times the server stores (created, expires) are read against this machine's \
                 (its logs); synchronise the clocks with NTP"
            ),
        );
    } else {
        report.line(&Verdict::Ok, &measured);
    }
}

/// Two members' clocks: `ahead` runs `by_us` (± `uncertainty_us`) ahead of `behind`.
struct Disagreement<'a> {
    ahead: &'a str,
    behind: &'a str,
    by_us: i64,
    uncertainty_us: i64,
}

impl Disagreement<'_> {
    /// The least it can be.
    fn least_us(&self) -> i64 {
        self.by_us - self.uncertainty_us
    }
}

/// The members that can be primary, against each other and the takeover grace: after a
/// failover from a member to one whose clock runs ahead by more than the grace, a lock can
/// be taken while its holder still trusts it.
fn compare(report: &mut Report, members: &[Member], grace: Duration) {
    let listed = members.iter().filter(|m| m.electable).count();
    let read: Vec<(&str, &Reading)> = members
        .iter()
        .filter(|m| m.electable)
        .filter_map(|m| m.reading.as_ref().ok().map(|r| (m.host.as_str(), r)))
        .collect();
    let g = show(grace);
    if listed <= 1 {
        report.line(
            &Verdict::Ok,
            "members' clocks: only one member can be primary, so a failover never judges a \
             lock by another member's clock",
        );
        return;
    }
    if read.len() < 2 {
        report.line(
            &Verdict::Warn,
            &format!(
                "members' clocks not compared: only {} of the {listed} members that can be \
                 primary could be read, so whether the takeover grace of {g} covers them is \
                 unknown",
                read.len()
            ),
        );
        return;
    }
    // The pair that surely disagrees most (the least its disagreement can be), and the most
    // any pair can disagree.
    let mut worst: Option<Disagreement<'_>> = None;
    let mut most_us = 0;
    for (i, (ahead, a)) in read.iter().enumerate() {
        for (j, (behind, b)) in read.iter().enumerate() {
            if i == j {
                continue;
            }
            let pair = Disagreement {
                ahead,
                behind,
                by_us: a.offset_us - b.offset_us,
                uncertainty_us: a.uncertainty_us + b.uncertainty_us,
            };
            most_us = most_us.max(pair.by_us + pair.uncertainty_us);
            if worst
                .as_ref()
                .is_none_or(|w| pair.least_us() > w.least_us())
            {
                worst = Some(pair);
            }
        }
    }
    let Some(w) = worst else { return };
    let partial = if read.len() < listed {
        format!(
            " (only {} of the {listed} members could be read)",
            read.len()
        )
    } else {
        String::new()
    };
    let by = format!("{} ({})", show_us(w.by_us), show_pm(w.uncertainty_us));
    let grace_us = micros(grace);
    // A grace that covers the most they can disagree, to the next 100 ms.
    let enough = Duration::from_millis(u64::try_from(most_us).unwrap_or(0).div_ceil(100_000) * 100);
    let raise = if enough > MAX_TAKEOVER_GRACE {
        format!(
            "no takeover grace covers that (at most {}): fix their clocks (NTP)",
            show(MAX_TAKEOVER_GRACE)
        )
    } else {
        format!(
            "fix their clocks (NTP) or raise the grace to at least {} (every client and \
             purger of the collection, and --takeover-grace here)",
            show(enough)
        )
    };
    if w.least_us() > grace_us {
        report.line(
            &Verdict::Fail,
            &format!(
                "members' clocks disagree by {by}, more than the takeover grace of {g}: {} \
                 runs ahead of {}, so after a failover from {} to {} a lock can be taken up to \
                 {} before its holder stops trusting it; {raise}{partial}",
                w.ahead,
                w.behind,
                w.behind,
                w.ahead,
                show_us(most_us - grace_us),
            ),
        );
    } else if most_us > grace_us {
        report.line(
            &Verdict::Warn,
            &format!(
                "members' clocks disagree by {by}, which may be more than the takeover grace \
                 of {g}: {} runs ahead of {}; measure again from closer to the members \
                 (a shorter round trip), or {raise}{partial}",
                w.ahead, w.behind,
            ),
        );
    } else if w.least_us().saturating_mul(2) > grace_us {
        report.line(
            &Verdict::Warn,
            &format!(
                "members' clocks disagree by {by}, within the takeover grace of {g} but by more \
                 than half of it: {} runs ahead of {}; check their clocks (NTP) before they \
                 drift past the grace{partial}",
                w.ahead, w.behind,
            ),
        );
    } else {
        report.line(
            &Verdict::Ok,
            &format!(
                "members' clocks agree within {} ({}; {} ahead of {}), well within the \
                 takeover grace of {g}{partial}",
                show_us(w.by_us),
                show_pm(w.uncertainty_us),
                w.ahead,
                w.behind,
            ),
        );
    }
}

/// Microseconds since the Unix epoch (negative before it).
fn since_epoch_us(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => micros(d),
        Err(e) => -micros(e.duration()),
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A measured length of time, in microseconds, as people read it: `850 ms`, `3.0 s`.
fn show_us(us: i64) -> String {
    let us = us.unsigned_abs();
    if us < 999_500 {
        format!("{} ms", (us + 500) / 1_000)
    } else {
        #[allow(clippy::cast_precision_loss)] // shown to a tenth of a second
        let secs = us as f64 / 1e6;
        format!("{secs:.1} s")
    }
}

/// An uncertainty, rounded up to the millisecond: `±2 ms`.
fn show_pm(us: i64) -> String {
    format!("±{} ms", us.unsigned_abs().div_ceil(1_000))
}
