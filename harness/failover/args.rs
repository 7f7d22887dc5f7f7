//! What the run is told: the command line, checked, and the URI of its replica set, given
//! the harness's timeouts.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::Parser;
use lockwright::{DEFAULT_TAKEOVER_GRACE, MAX_TAKEOVER_GRACE};
use rand::Rng;
use rand::rngs::StdRng;

/// Contending lock clients on a three-member replica set while its primary fails over.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
pub(crate) struct Args {
    /// Contending clients: half through `Locker`, half through `Client`.
    #[arg(long, default_value_t = 32)]
    pub(crate) clients: usize,
    /// How long the clients contend, in seconds.
    #[arg(long, default_value_t = 60)]
    pub(crate) seconds: u64,
    /// Seconds between failovers, alternately a step-down and a SIGKILL + restart of the
    /// primary (with a shifted member: alternately to it and away from it, step-down,
    /// step-down, kill, kill). The first comes after this long; the last at least this long
    /// before the end.
    #[arg(long, default_value_t = 10)]
    pub(crate) every: u64,
    /// Resources the clients contend for.
    #[arg(long, default_value_t = 4)]
    pub(crate) resources: usize,
    /// TTL of every lock, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub(crate) ttl_ms: u64,
    /// The drift margin, in milliseconds: a holder trusts a lock until
    /// `sent + ttl - margin` (the `Locker`'s `drift_margin`, and the `Client` holders' rule).
    #[arg(long, default_value_t = 100)]
    pub(crate) drift_margin_ms: u64,
    /// The takeover grace of every store the run uses (clients, purger), in milliseconds:
    /// an expired lock blocks other lock ids until `expiresAt + grace` on the primary's
    /// clock. Default: the library's `DEFAULT_TAKEOVER_GRACE` (2000 ms).
    #[arg(long)]
    pub(crate) grace_ms: Option<u64>,
    /// Milliseconds between two purges by the run's purger (a client of its own that calls
    /// `purge`); 0: no purger.
    #[arg(long, default_value_t = 1000)]
    pub(crate) purge_every_ms: u64,
    /// The limit of every shared lock.
    #[arg(long, default_value_t = 2)]
    pub(crate) shared_limit: u32,
    /// The share of grants asked for as exclusive locks (the rest are shared).
    #[arg(long, default_value_t = 0.6)]
    pub(crate) exclusive_share: f64,
    /// The share of holds that last 1 to 3 s, across renewals (the others last 10 to 150 ms).
    /// More long holds put more trusted holders across each failover.
    #[arg(long, default_value_t = 0.15)]
    pub(crate) long_hold_share: f64,
    /// A client that has made no grant for this long (ms) asks next for a resource of its
    /// own, which no other client contends for, so that its recovery after a failover shows
    /// within this bound instead of hiding behind contention.
    #[arg(long, default_value_t = 2000)]
    pub(crate) starve_ms: u64,
    /// How long a `Locker` client waits in `acquire_until` for a contended resource (ms).
    #[arg(long, default_value_t = 2000)]
    pub(crate) acquire_wait_ms: u64,
    /// Bound on every single store call made by the harness, in seconds (a call that takes
    /// longer counts as a `Timeout` error).
    #[arg(long, default_value_t = 15)]
    pub(crate) op_timeout: u64,
    /// Seconds every task has, after the run ends, to finish before it counts as hung.
    #[arg(long, default_value_t = 60)]
    pub(crate) join_timeout: u64,
    /// The database to use; each run uses a fresh collection in it.
    #[arg(long, default_value = "lockwright_failover")]
    pub(crate) database: String,
    /// Contend without any failover (a baseline for the numbers).
    #[arg(long)]
    pub(crate) no_failover: bool,
    /// Members of the replica set the run starts (1 or 3): 3 by default, 1 with
    /// `--no-failover`. Failovers need 3.
    #[arg(long, value_parser = parse_members)]
    pub(crate) members: Option<usize>,
    /// Start member MEMBER (0-based) with its wall clock MS milliseconds ahead (negative:
    /// behind), through libfaketime. Repeatable; failovers then go to and away from the
    /// first member named with a non-zero offset (the shifted member).
    #[arg(long = "skew", value_name = "MEMBER=MS", value_parser = parse_skew)]
    pub(crate) skews: Vec<(usize, i64)>,
    /// Checks the observer: `Client` holders break the holding rule (they hold every lock
    /// for its TTL plus the takeover grace plus 2 s without renewing it, trusting it
    /// throughout, past the instant another client may take it over), so the run must FAIL
    /// with overlaps.
    #[arg(long)]
    pub(crate) break_holding_rule: bool,
}

impl Args {
    /// How many members the replica set has.
    pub(crate) fn member_count(&self) -> usize {
        self.members.unwrap_or(if self.no_failover { 1 } else { 3 })
    }
    /// The takeover grace of every store.
    pub(crate) fn grace(&self) -> Duration {
        self.grace_ms
            .map_or(DEFAULT_TAKEOVER_GRACE, Duration::from_millis)
    }
    /// The member failovers go to and away from: the first with a non-zero clock offset.
    pub(crate) fn shifted(&self) -> Option<(usize, i64)> {
        self.skews.iter().copied().find(|(_, ms)| *ms != 0)
    }
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
    pub(crate) fn margin(&self) -> Duration {
        Duration::from_millis(self.drift_margin_ms)
    }
    pub(crate) fn op_timeout(&self) -> Duration {
        Duration::from_secs(self.op_timeout)
    }
    /// The next resource for client `id`: its own after `starve_ms` without a grant, else a
    /// contended one.
    pub(crate) fn pick_resource(&self, id: usize, last_grant: Instant, rng: &mut StdRng) -> usize {
        if last_grant.elapsed() >= Duration::from_millis(self.starve_ms) {
            self.resources + id
        } else {
            rng.random_range(0..self.resources)
        }
    }
}

fn parse_members(s: &str) -> Result<usize, String> {
    match s {
        "1" => Ok(1),
        "3" => Ok(3),
        _ => Err(format!("1 or 3, not {s:?}")),
    }
}

/// `MEMBER=MS`, e.g. `2=3000` or `1=-500`.
fn parse_skew(s: &str) -> Result<(usize, i64), String> {
    let (member, ms) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not MEMBER=MS"))?;
    let member = member
        .trim()
        .parse()
        .map_err(|e| format!("member {member:?}: {e}"))?;
    let ms = ms
        .trim()
        .parse()
        .map_err(|e| format!("milliseconds {ms:?}: {e}"))?;
    Ok((member, ms))
}

/// The renew margin of every client: below half the TTL, so that the `Locker`'s renewals (at
/// half the TTL) are allowed.
pub(crate) const RENEW_MARGIN: Duration = Duration::from_millis(200);

pub(crate) fn check_args(args: &Args) -> Result<(), String> {
    if args.clients < 2 {
        return Err("--clients must be at least 2 (half Locker, half Client)".into());
    }
    if args.resources == 0 || args.shared_limit == 0 || args.every == 0 || args.seconds == 0 {
        return Err("--resources, --shared-limit, --every and --seconds must be positive".into());
    }
    if !args.no_failover && args.member_count() < 3 {
        return Err("failovers need a three-member set: --members 3 (or --no-failover)".into());
    }
    if let Some((m, _)) = args.skews.iter().find(|(m, _)| *m >= args.member_count()) {
        return Err(format!(
            "--skew names member {m} of a set of {}",
            args.member_count()
        ));
    }
    if args.grace() > MAX_TAKEOVER_GRACE {
        return Err(format!(
            "--grace-ms must be at most {} ms",
            MAX_TAKEOVER_GRACE.as_millis()
        ));
    }
    if !(0.0..=1.0).contains(&args.exclusive_share) {
        return Err("--exclusive-share must be between 0 and 1".into());
    }
    if !(0.0..=1.0).contains(&args.long_hold_share) {
        return Err("--long-hold-share must be between 0 and 1".into());
    }
    if args.ttl() <= args.margin() || args.ttl() / 2 <= RENEW_MARGIN {
        return Err(format!(
            "--ttl-ms must be above --drift-margin-ms and above {} ms (twice the renew margin)",
            RENEW_MARGIN.as_millis() * 2
        ));
    }
    Ok(())
}

/// The set's URI with the harness's timeouts, after checking that it names 127.0.0.1 only.
pub(crate) fn harness_uri(uri: &str) -> Result<String, String> {
    let rest = uri.strip_prefix("mongodb://").ok_or(
        "the URI must start with mongodb:// and name 127.0.0.1 (this harness kills servers)",
    )?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let hosts = &rest[..end];
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    for h in hosts.split(',') {
        let host = h.rsplit_once(':').map_or(h, |(host, _)| host);
        if host != "127.0.0.1" {
            return Err(format!(
                "the URI names {h}: this harness kills and restarts servers, so it runs \
                 against 127.0.0.1 only"
            ));
        }
    }
    let tail = &rest[end..];
    let mut sep = if tail.contains('?') {
        if tail.ends_with(['?', '&']) { "" } else { "&" }
    } else if tail.is_empty() {
        "/?"
    } else {
        "?"
    };
    let mut out = uri.to_string();
    let lower = uri.to_ascii_lowercase();
    for (key, value) in [
        ("serverSelectionTimeoutMS", "5000"),
        ("connectTimeoutMS", "2000"),
    ] {
        if !lower.contains(&key.to_ascii_lowercase()) {
            let _ = write!(out, "{sep}{key}={value}");
            sep = "&";
        }
    }
    Ok(out)
}
