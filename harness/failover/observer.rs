//! The independent observer: what the clients record about every grant, in plain data (none
//! of Lockwright's own checks), the store probes that look for lost grants, and the progress
//! line.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lockwright::{Client, Ended, Error, Filter, LockId, MongoStore};

use crate::args::Args;

/// Which API a client goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Locker,
    Client,
}

/// How a holder stopped trusting its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stop {
    /// It decided to release (and then sent the release).
    Released,
    /// `lost()` fired, or `is_held()` turned false, with this cause (`None`: `is_held()`
    /// turned false before `lost()` said why).
    Lost(Option<LostWhy>),
    /// A `Client` holder reached `sent + ttl - margin` without a renewal.
    Deadline,
    /// The store said the lock is gone while the holder trusted it (a lost grant).
    Gone,
    /// The grant came back too late to be trusted at all.
    NeverTrusted,
}

/// `Ended` minus `Released`, which is not a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LostWhy {
    Refused,
    Expired,
    Cancelled,
    Other,
}

pub(crate) fn lost_why(e: Ended) -> LostWhy {
    match e {
        Ended::Refused => LostWhy::Refused,
        Ended::Expired => LostWhy::Expired,
        Ended::Cancelled => LostWhy::Cancelled,
        _ => LostWhy::Other,
    }
}

impl Stop {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stop::Released => "released",
            Stop::Lost(Some(LostWhy::Refused)) => "lost: refused",
            Stop::Lost(Some(LostWhy::Expired)) => "lost: expired",
            Stop::Lost(Some(LostWhy::Cancelled)) => "lost: cancelled",
            Stop::Lost(Some(LostWhy::Other)) => "lost: other",
            Stop::Lost(None) => "is_held() false",
            Stop::Deadline => "trust deadline",
            Stop::Gone => "gone from the store",
            Stop::NeverTrusted => "returned too late to trust",
        }
    }
}

/// One grant as the observer saw it.
#[derive(Clone, Debug)]
pub(crate) struct Holding {
    pub(crate) client: usize,
    pub(crate) kind: Kind,
    pub(crate) resource: usize,
    pub(crate) exclusive: bool,
    pub(crate) fence: u64,
    /// When the request was sent (for a `Locker` grant, when `acquire` was called: an earlier
    /// instant, which keeps the real-time order check sound).
    pub(crate) sent: Instant,
    /// When the grant was returned: the trusted interval starts here.
    pub(crate) start: Instant,
    /// When the holder stopped trusting it (`end <= start`: never trusted).
    pub(crate) end: Instant,
    pub(crate) stop: Stop,
}

impl Holding {
    pub(crate) fn trusted(&self) -> bool {
        self.end > self.start
    }
}

/// What a store call or a wait came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    Xlock,
    Slock,
    Acquire,
    Renew,
    Status,
    Unlock,
    Release,
    Purge,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Xlock => "xlock",
            Op::Slock => "slock",
            Op::Acquire => "acquire (Locker)",
            Op::Renew => "renew",
            Op::Status => "status",
            Op::Unlock => "unlock",
            Op::Release => "release (Locker)",
            Op::Purge => "purge",
        }
    }
}

/// The variant of an error, or `Timeout` for the harness's own bound.
pub(crate) fn variant(e: Option<&Error>) -> &'static str {
    match e {
        None => "Timeout",
        Some(Error::InvalidArgument { .. }) => "InvalidArgument",
        Some(Error::AlreadyLocked { .. }) => "AlreadyLocked",
        Some(Error::LockNotFound) => "LockNotFound",
        Some(Error::NotRenewable { .. }) => "NotRenewable",
        Some(Error::Malformed { .. }) => "Malformed",
        Some(Error::Misconfigured { .. }) => "Misconfigured",
        Some(Error::Backend { .. }) => "Backend",
        Some(Error::PurgeIncomplete { .. }) => "PurgeIncomplete",
        Some(_) => "other",
    }
}

/// The error and its sources, on one line.
pub(crate) fn chain(e: &Error) -> String {
    let causes = std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source());
    causes
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Everything the clients report, in plain data.
#[derive(Default)]
pub(crate) struct Observer {
    pub(crate) holdings: Vec<Holding>,
    /// (operation, variant) -> count, for failed calls.
    pub(crate) errors: BTreeMap<(Op, &'static str), u64>,
    /// The first message seen of each (operation, variant).
    pub(crate) first_error: BTreeMap<(Op, &'static str), String>,
    /// Grant requests refused by the rules (`AlreadyLocked`; for the `Locker`, a wait that
    /// ran out).
    pub(crate) refusals: u64,
    /// Grant requests with an unknown outcome (an error other than a refusal), released.
    pub(crate) unknown: u64,
    /// Conclusive probes that found the lock in the store.
    pub(crate) found: u64,
    /// Probes whose answer came too late (or failed), so they say nothing.
    pub(crate) inconclusive: u64,
    /// Lost grants: descriptions.
    pub(crate) lost: Vec<String>,
    /// Renewals by `Client` holders that succeeded.
    pub(crate) renewals: u64,
    /// Renewals by `Client` holders that the store refused: `NotRenewable`, and
    /// `LockNotFound` once the holder no longer trusted the lock (a lease lost early; a
    /// `LockNotFound` while trusted is a lost grant).
    pub(crate) renew_refused: (u64, u64),
    /// Purges that succeeded, and the locks they removed.
    pub(crate) purges: u64,
    pub(crate) purged: u64,
}

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) args: Arc<Args>,
    pub(crate) epoch: Instant,
    pub(crate) obs: Arc<Mutex<Observer>>,
    pub(crate) stop_at: Instant,
}

impl Shared {
    pub(crate) fn obs(&self) -> MutexGuard<'_, Observer> {
        // A poisoned observer still holds good data: a panic elsewhere is reported by join.
        self.obs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    pub(crate) fn error(&self, op: Op, e: Option<&Error>) {
        let v = variant(e);
        let mut obs = self.obs();
        *obs.errors.entry((op, v)).or_default() += 1;
        obs.first_error.entry((op, v)).or_insert_with(|| {
            e.map_or_else(|| "no answer within the harness's bound".to_string(), chain)
        });
    }
    pub(crate) fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }
}

/// Resources `0..resources` are contended; `resources + id` is client `id`'s own.
pub(crate) fn resource_name(r: usize) -> String {
    format!("failover/{r}")
}

/// The outcome of a probe of one holding.
pub(crate) enum Probe {
    Found,
    Missing,
    Inconclusive,
}

/// Looks the lock up with `status`; conclusive when the answer arrives before `trust_end`
/// (the store then answered while the lock was live by the holding rule).
pub(crate) async fn probe(
    sh: &Shared,
    client: &Client<MongoStore>,
    lock_id: &LockId,
    resource: usize,
    fence: u64,
    still_trusted: impl Fn() -> bool,
) -> Probe {
    let filter = Filter::new().lock_id(lock_id.as_str());
    match tokio::time::timeout(sh.args.op_timeout(), client.status(&filter)).await {
        Ok(Ok(locks)) => {
            if !still_trusted() {
                return Probe::Inconclusive;
            }
            let name = resource_name(resource);
            if locks
                .iter()
                .any(|l| l.resource.as_str() == name && l.fence == fence)
            {
                Probe::Found
            } else {
                Probe::Missing
            }
        }
        Ok(Err(e)) => {
            sh.error(Op::Status, Some(&e));
            Probe::Inconclusive
        }
        Err(_) => {
            sh.error(Op::Status, None);
            Probe::Inconclusive
        }
    }
}

pub(crate) fn record_probe(sh: &Shared, p: &Probe, what: impl FnOnce() -> String) -> bool {
    let mut obs = sh.obs();
    match p {
        Probe::Found => obs.found += 1,
        Probe::Inconclusive => obs.inconclusive += 1,
        Probe::Missing => {
            obs.lost.push(what());
            return true;
        }
    }
    false
}

/// Prints a line of progress every 5 s until the run ends.
pub(crate) async fn progress(sh: Shared) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    while Instant::now() < sh.stop_at {
        tick.tick().await;
        let obs = sh.obs();
        let errors: u64 = obs.errors.values().sum();
        eprintln!(
            "failover: {:5.1} s: {} grants, {} refusals, {} errors, {} lost grants",
            sh.secs(Instant::now()),
            obs.holdings.len(),
            obs.refusals,
            errors,
            obs.lost.len()
        );
    }
}
