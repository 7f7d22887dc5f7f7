//! The waiting measurements (issue 25, waiters woken by the store): what the benches call
//! their records, the keys of the numbers they keep in [`Record::extra`](crate::Record), how
//! commands are sorted into lock writes and change-stream traffic, and the statistics.
//!
//! Every one of them is measured by the bench itself (not criterion) with hints on and off
//! in the same run: the Locker's `LockerConfig::wake_on_hints` is the switch, and the record's
//! parameter ends in `hints_on` or `hints_off` ([`parameter`]).

use std::collections::BTreeMap;

/// One Locker, acquire + release of one free lock, interleaved with a bare `xlock` of the
/// store (the reference the handover is judged against). Parameter: `hints_on` / `hints_off`.
pub const CYCLE: &str = "waiting_cycle";
/// A lock handed from a releasing Locker to one of `W` waiting Lockers: from the release
/// returning to the waiter's acquire returning. Parameter: `W/hints_on` / `W/hints_off`.
pub const HANDOVER: &str = "handover";
/// `N` Lockers taking one resource in turn with 5 ms holds: grants per second, the longest
/// wait, grants per Locker, commands per grant. Parameter: `N/hints_on` / `N/hints_off`.
pub const CONTENDED: &str = "contended";
/// A holder that stopped renewing: `W` waiting Lockers, the first granted how long after
/// the lock's expiry + takeover grace. Parameter: `W/hints_on` / `W/hints_off`.
pub const CRASHED: &str = "crashed_holder";
/// Every function above, in the order the report shows them.
pub const FUNCTIONS: [&str; 4] = [CYCLE, HANDOVER, CONTENDED, CRASHED];

/// The keys of [`Record::extra`](crate::Record) the waiting records share.
pub mod key {
    /// 1 with hints on (`wake_on_hints`), 0 with them off.
    pub const HINTS: &str = "hints";
    /// Hint subscriptions the Lockers' stores gave (`LockStore::hints` returned a stream);
    /// 0 with hints on means the store has none and the Lockers polled.
    pub const SUBSCRIPTIONS: &str = "subscriptions";
    /// Lockers that waited (handover, crashed holder) or took turns (contended).
    pub const LOCKERS: &str = "lockers";
    /// How long each grant was held (handover, contended), in ms.
    pub const HOLD_MS: &str = "hold_ms";
    /// Length of the counted window, in s.
    pub const SECONDS: &str = "seconds";
    /// Grants in the counted window.
    pub const GRANTS: &str = "grants";
    /// Samples the percentiles are taken over (cycles, handovers, rounds).
    pub const SAMPLES: &str = "samples";
    /// Median of the measured time, in ms.
    pub const P50_MS: &str = "p50_ms";
    /// 99th percentile (nearest rank) of the measured time, in ms.
    pub const P99_MS: &str = "p99_ms";
    /// Longest measured time, in ms.
    pub const MAX_MS: &str = "max_ms";
    /// Shortest measured time, in ms.
    pub const MIN_MS: &str = "min_ms";
    /// The cycle: median of the bare `xlock` measured interleaved with it, in ms; the "one
    /// uncontended grant" of the handover and crashed-holder targets.
    pub const XLOCK_P50_MS: &str = "xlock_p50_ms";
    /// The cycle: the acquire alone, median in ms.
    pub const ACQUIRE_P50_MS: &str = "acquire_p50_ms";
    /// The cycle: the release alone, median in ms.
    pub const RELEASE_P50_MS: &str = "release_p50_ms";
    /// Handover: grants that returned before the release that freed the lock did (the
    /// release's write concern wait outlasted the waiter's grant); counted as 0 ms.
    pub const EARLY: &str = "early";
    /// Contended: grants per second in the window.
    pub const GRANTS_PER_S: &str = "grants_per_s";
    /// Contended: the longest wait of an acquire (granted in the window, or still waiting
    /// at its end), in ms.
    pub const LONGEST_WAIT_MS: &str = "longest_wait_ms";
    /// Contended: grants of the Locker granted least often in the window.
    pub const GRANTS_MIN: &str = "grants_min";
    /// Contended: grants of the Locker granted most often in the window.
    pub const GRANTS_MAX: &str = "grants_max";
    /// Crashed holder: the crashed lock's TTL, in ms.
    pub const TTL_MS: &str = "ttl_ms";
    /// Crashed holder: the store's takeover grace, in ms.
    pub const GRACE_MS: &str = "grace_ms";
    /// Crashed holder: the round trip of the crashed grant, in ms (the lock's expiry is
    /// placed at its middle, so it is known to within half of it).
    pub const CRASH_RTT_MS: &str = "crash_rtt_ms";
    /// Lock commands (MongoDB: `findAndModify`, `update`, ...; memory: lock calls) per
    /// grant (per cycle for the cycle, per round for the crashed holder).
    pub const LOCK_PER_GRANT: &str = "lock_per_grant";
    /// Change-stream commands (`aggregate`, `getMore`, `killCursors`; memory: hint
    /// subscriptions) per grant.
    pub const STREAM_PER_GRANT: &str = "stream_per_grant";
    /// Other commands per grant.
    pub const OTHER_PER_GRANT: &str = "other_per_grant";
    /// Acquire attempts (the store's `xlock` calls) per grant.
    pub const ATTEMPTS_PER_GRANT: &str = "attempts_per_grant";
    /// Prefix of the per-name counts: `per_grant:findAndModify`.
    pub const PER_GRANT_PREFIX: &str = "per_grant:";
    /// Prefix of the server's own counters per grant: `server:writeConflicts` (MongoDB's
    /// `serverStatus().metrics.operation.writeConflicts`: writes to the one document that
    /// collided with another and were retried inside the server).
    pub const SERVER_PREFIX: &str = "server:";
    /// The server's write conflicts per grant (with [`SERVER_PREFIX`]).
    pub const WRITE_CONFLICTS: &str = "server:writeConflicts";
}

/// The record's parameter: `[size/]hints_on` or `[size/]hints_off`.
#[must_use]
pub fn parameter(size: Option<u64>, hints: bool) -> String {
    let switch = if hints { "hints_on" } else { "hints_off" };
    match size {
        Some(n) => format!("{n}/{switch}"),
        None => switch.to_string(),
    }
}

/// How a command (MongoDB) or a store call (memory) counts towards the herd target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A write to the locks: a grant attempt, a release, a renewal.
    Lock,
    /// The change stream behind the hints (or, in memory, a hint subscription).
    Stream,
    /// Anything else (set-up, sessions, status).
    Other,
}

/// The kind of a MongoDB command or of a store call (named as the `LockStore` method).
#[must_use]
pub fn kind(name: &str) -> Kind {
    match name {
        "findAndModify" | "update" | "delete" | "insert" | "commitTransaction"
        | "abortTransaction" | "xlock" | "slock" | "unlock" | "unlock_one" | "renew"
        | "renew_one" | "renew_many" | "purge" => Kind::Lock,
        "aggregate" | "getMore" | "killCursors" | "hints" => Kind::Stream,
        _ => Kind::Other,
    }
}

/// Counts by name, summed by [`Kind`]: (lock, stream, other).
#[must_use]
pub fn by_kind(counts: &BTreeMap<String, u64>) -> (u64, u64, u64) {
    counts
        .iter()
        .fold((0, 0, 0), |(l, s, o), (name, n)| match kind(name) {
            Kind::Lock => (l + n, s, o),
            Kind::Stream => (l, s + n, o),
            Kind::Other => (l, s, o + n),
        })
}

/// `after - before`, name by name (names only in `after` count from zero).
#[must_use]
pub fn difference(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, n)| {
            (
                name.clone(),
                n.saturating_sub(before.get(name).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The `q` quantile of `samples` by nearest rank (the smallest sample with at least `q` of
/// them at or below it); 0 when there are none.
#[must_use]
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median, 99th percentile, max and min of `samples` (ms), under the keys of [`key`].
#[must_use]
pub fn spread(samples: &[f64]) -> [(&'static str, f64); 5] {
    let extreme = |pick: fn(f64, f64) -> f64| samples.iter().copied().reduce(pick).unwrap_or(0.0);
    [
        (key::SAMPLES, samples.len() as f64),
        (key::P50_MS, quantile(samples, 0.5)),
        (key::P99_MS, quantile(samples, 0.99)),
        (key::MAX_MS, extreme(f64::max)),
        (key::MIN_MS, extreme(f64::min)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        let s = spread(&[-0.5, 2.0, 1.0]);
        assert_eq!(s[3], (key::MAX_MS, 2.0));
        assert_eq!(s[4], (key::MIN_MS, -0.5));
        assert_eq!(spread(&[])[3], (key::MAX_MS, 0.0));
    }

    #[test]
    fn commands_sorted_by_kind() {
        let counts: BTreeMap<String, u64> = [
            ("findAndModify", 10),
            ("getMore", 4),
            ("aggregate", 1),
            ("endSessions", 1),
            ("xlock", 3),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_string(), *v))
        .collect();
        assert_eq!(by_kind(&counts), (13, 5, 1));
        let later: BTreeMap<String, u64> = [("findAndModify", 12), ("killCursors", 1)]
            .iter()
            .map(|(k, v)| ((*k).to_string(), *v))
            .collect();
        let d = difference(&counts, &later);
        assert_eq!(d.get("findAndModify"), Some(&2));
        assert_eq!(d.get("killCursors"), Some(&1));
        assert_eq!(d.len(), 2);
        assert_eq!(parameter(Some(8), true), "8/hints_on");
        assert_eq!(parameter(None, false), "hints_off");
    }
}
