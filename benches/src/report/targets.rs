//! The targets of benches/README.md that the benches measure: the thresholds, and one table
//! saying for each target which benchmarks it reads, how they are judged and the threshold
//! the report states.
//!
//! "Well under" a bound is read as at most half of it ([`WELL_UNDER`]); the report says so
//! next to each threshold.

use super::format::{fmt_ns, fmt_num};
use crate::waiting::{CONTENDED, CRASHED, CYCLE, HANDOVER};

/// "Well under a bound" means at most this fraction of it.
pub const WELL_UNDER: f64 = 0.5;
/// xlock / slock median over the bare upsert's median, at most.
pub const GRANT_RATIO: f64 = 1.3;
/// renew of K = 100 over renew of K = 1, at most.
pub const RENEW_RATIO: f64 = 3.0;
/// The one-lock cycle (xlock, then unlock_one of the returned lock) over the bare upsert,
/// interleaved, at most.
pub const CYCLE_RATIO: f64 = 2.3;
/// Commands of a group unlock or renew that turns out to be one lock (a `find`, then the
/// one-lock `findAndModify`), at most.
pub const GROUP_OF_ONE_COMMANDS: f64 = 2.0;
/// The status filter kinds (no TTL bound) judged at one command on the server's clock.
pub const ONE_COMMAND_FILTERS: [&str; 3] = ["resource", "lock_id", "owner"];
/// The number of guards at which the Locker's commands per renewal cycle are judged.
pub const LOCKER_JUDGED_N: u64 = 1_000;

/// The most store commands per renewal cycle for a Locker holding `n` guards: 2 + n / 100.
#[must_use]
pub fn locker_bound(n: u64) -> f64 {
    2.0 + n as f64 / 100.0
}
/// An engine transition's bound (well under it is the target), in ns.
pub const ENGINE_BOUND_NS: f64 = 1_000.0;
/// The purge size whose time is bounded, and the bound (well under it is the target), in ns.
pub const PURGE_TIMED_N: u64 = 10_000;
/// See [`PURGE_TIMED_N`].
pub const PURGE_BOUND_NS: f64 = 1e9;
/// Uncontended lock+unlock pairs per second the in-memory store must exceed.
pub const MEM_PAIRS_PER_SEC: f64 = 1e6;

/// Waiting Lockers with hints: the handover's median over one uncontended grant's, at most.
pub const HANDOVER_P50_RATIO: f64 = 2.0;
/// Waiting Lockers with hints: the handover's 99th percentile over one uncontended grant's
/// median, at most.
pub const HANDOVER_P99_RATIO: f64 = 10.0;
/// The numbers of waiting Lockers the handover is judged with.
pub const HANDOVER_JUDGED_WAITERS: [u64; 2] = [8, 64];
/// "A few round trips": a crashed holder's waiters are granted at most this many
/// uncontended grants after the lock's expiry + takeover grace (median over the rounds).
pub const CRASHED_ROUND_TRIPS: f64 = 3.0;
/// The number of contending Lockers at which the herd is judged.
pub const HERD_LOCKERS: u64 = 64;
/// Lock commands per grant with hints over those of polling (hints off), at most.
pub const HERD_RATIO: f64 = 2.0;
/// The numbers of contending Lockers whose throughput is judged.
pub const THROUGHPUT_LOCKERS: [u64; 2] = [8, 64];
/// The uncontended cycle's median with hints over its median without, at most.
pub const HINTS_CYCLE_RATIO: f64 = 1.1;

/// The engine transitions that touch one lock (or one resource), whatever the table size.
pub const ENGINE_SINGLE: [&str; 6] = [
    "xlock",
    "slock",
    "unlock",
    "renew",
    "status_resource",
    "status_lock_id",
];
/// The status filter kinds that must use an index.
pub const INDEXED_FILTERS: [&str; 4] = ["resource", "lock_id", "ttl_lt", "ttl_gte"];

/// One target of benches/README.md: the benchmarks it reads, how they are judged, and the
/// threshold as the report states it.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The target as benches/README.md states it.
    pub name: &'static str,
    /// The criterion group of its benchmarks.
    pub group: &'static str,
    /// The benchmark functions it reads.
    pub functions: &'static [&'static str],
    /// How they are judged.
    pub judge: Judge,
    /// The threshold this report applies, in words.
    pub threshold: String,
    /// Diagnostic rows shown beside the evidence, not judged.
    pub diagnostics: Option<Diagnostics>,
}

/// How a target's benchmarks are judged.
#[derive(Clone, Debug, PartialEq)]
pub enum Judge {
    /// Exactly `commands` commands per operation, and a median at most `ratio` times the
    /// baseline's (interleaved with it when the bench measured that, else criterion's two
    /// medians). `also` names a benchmark shown beside it, not judged: its label and function.
    AgainstBaseline {
        /// Commands per operation.
        commands: f64,
        /// The largest ratio to the baseline.
        ratio: f64,
        /// A benchmark shown beside it: its label and function.
        also: Option<(&'static str, &'static str)>,
    },
    /// One command per operation for each function, and for the `status` function with each
    /// filter kind of `judged`; the kinds of `shown` are shown, not judged.
    OneCommandEach {
        /// The status benchmark whose filter kinds are judged.
        status: &'static str,
        /// Filter kinds judged.
        judged: &'static [&'static str],
        /// Filter kinds shown.
        shown: &'static [&'static str],
    },
    /// A group of one lock (K = 1) in at most `one_at_most` commands, and the same number of
    /// commands for every larger K; met once every K of `ks` was measured.
    SameCommandsForEveryK {
        /// The most commands for K = 1.
        one_at_most: f64,
        /// The group sizes that must all be measured.
        ks: &'static [u64],
    },
    /// The median at size `large` at most `ratio` times the median at size `small`.
    SizeRatio {
        /// The smaller size.
        small: u64,
        /// The larger size.
        large: u64,
        /// The largest ratio.
        ratio: f64,
    },
    /// Commands per renewal cycle at `n` guards at most [`locker_bound`]`(n)`.
    LockerCommands {
        /// The number of guards judged.
        n: u64,
    },
    /// Commands a + b x batches, with a and b fitted on the two smallest sizes.
    LinearInBatches,
    /// The median at `size` at most `bound_ns`.
    MedianAtMost {
        /// The size judged.
        size: u64,
        /// The bound, in ns.
        bound_ns: f64,
    },
    /// Every query plan of the status benchmarks with the filter kinds `filters` uses an
    /// index (IXSCAN, no COLLSCAN).
    Indexed {
        /// The filter kinds.
        filters: &'static [&'static str],
    },
    /// The slowest median per element of all sizes of the functions at most `bound_ns`.
    SlowestAtMost {
        /// The bound, in ns.
        bound_ns: f64,
        /// How the evidence lists the benchmarks.
        listing: Listing,
    },
    /// 1e9 / median above `per_sec`.
    RateAbove {
        /// The rate to exceed, per second.
        per_sec: f64,
    },
    /// With hints, for each number of waiters: the handover's median at most `p50` and its
    /// 99th percentile at most `p99` times one uncontended grant (the bare xlock's median in
    /// the cycle's rounds).
    Handover {
        /// The numbers of waiters judged.
        waiters: &'static [u64],
        /// The largest median, in uncontended grants.
        p50: f64,
        /// The largest 99th percentile, in uncontended grants.
        p99: f64,
    },
    /// With hints and without, for every number of waiters measured: the median over the
    /// rounds of the first grant after a crashed lock's expiry + grace at most
    /// `round_trips` uncontended grants.
    CrashedHolder {
        /// The most uncontended grants.
        round_trips: f64,
    },
    /// Contended, at `lockers`: lock commands per grant with hints at most `ratio` times
    /// those of polling (hints off).
    NoHerd {
        /// The number of Lockers judged.
        lockers: u64,
        /// The largest ratio.
        ratio: f64,
    },
    /// Contended, for each number of Lockers: grants per second with hints at least those
    /// of polling.
    Throughput {
        /// The numbers of Lockers judged.
        lockers: &'static [u64],
    },
    /// The uncontended cycle's median with hints at most `ratio` times without.
    HintsCycle {
        /// The largest ratio.
        ratio: f64,
    },
}

/// How the evidence of [`Judge::SlowestAtMost`] lists the benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// How many there were and the slowest.
    Count,
    /// Each size's median as a pair, and the slowest.
    Pairs,
    /// Each size's median, and the worst per lock.
    PerLock,
}

/// Diagnostic rows that stand beside a target's evidence: `; label: what measure, ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostics {
    /// What the rows measure.
    pub label: &'static str,
    /// Each row: what it is, and its benchmark function (in the target's group).
    pub rows: &'static [(&'static str, &'static str)],
    /// What is shown of each row.
    pub measure: Measure,
}

/// What a diagnostic row shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Its ratio to the baseline, interleaved.
    Interleaved,
    /// Its median over the judged smaller size's (see [`Judge::SizeRatio`]).
    TimesSmall,
    /// Its median.
    Median,
}

/// Every target of benches/README.md that these benches measure, in the report's order.
#[must_use]
pub fn targets() -> Vec<Target> {
    let grant = |name: &'static str,
                 function: &'static [&'static str],
                 diagnostics: Option<Diagnostics>| Target {
        name,
        group: "store_mongo",
        functions: function,
        judge: Judge::AgainstBaseline {
            commands: 1.0,
            ratio: GRANT_RATIO,
            also: None,
        },
        threshold: format!(
            "1 command; median <= {GRANT_RATIO}x the baseline's (bare find_one_and_update \
             upsert), measured interleaved with it so both see the same machine; criterion's \
             two medians, taken seconds apart, are shown too"
        ),
        diagnostics,
    };
    let group_commands = |name: &'static str, function: &'static [&'static str]| Target {
        name,
        group: "store_mongo",
        functions: function,
        judge: Judge::SameCommandsForEveryK {
            one_at_most: GROUP_OF_ONE_COMMANDS,
            ks: &[1, 10, 100, 1000],
        },
        threshold: format!(
            "K=1 (a group that turns out to be one lock): at most {} commands (find, then the \
             one-lock findAndModify); K >= 2: the same number of commands for every K (10, \
             100, 1000)",
            fmt_num(GROUP_OF_ONE_COMMANDS)
        ),
        diagnostics: None,
    };
    let engine_bound = ENGINE_BOUND_NS * WELL_UNDER;
    let engine = |name: &'static str,
                  functions: &'static [&'static str],
                  bound_ns: f64,
                  listing: Listing,
                  threshold: String| Target {
        name,
        group: "engine",
        functions,
        judge: Judge::SlowestAtMost { bound_ns, listing },
        threshold,
        diagnostics: None,
    };
    vec![
        grant("xlock of one resource (MongoDB)", &["xlock"], None),
        grant(
            "slock of one resource (MongoDB)",
            &["slock_at_limit"],
            Some(Diagnostics {
                label: "the same change alone",
                rows: &[
                    ("as a $push", "slock_push_modifier"),
                    ("as a one-stage pipeline", "slock_push_pipeline"),
                ],
                measure: Measure::Interleaved,
            }),
        ),
        Target {
            name: "acquire+release of one lock (MongoDB): xlock, then unlock_one of the \
                   lock it returned",
            group: "store_mongo",
            functions: &["acquire_release"],
            judge: Judge::AgainstBaseline {
                commands: 2.0,
                ratio: CYCLE_RATIO,
                also: Some(("acquire+renew+release", "acquire_renew_release")),
            },
            threshold: format!(
                "2 commands; median <= {CYCLE_RATIO}x the baseline's (bare find_one_and_update \
                 upsert), measured interleaved with it so both see the same machine; criterion's \
                 two medians are shown too"
            ),
            diagnostics: Some(Diagnostics {
                label: "two writes alone",
                rows: &[("the baseline twice back to back", "baseline_twice")],
                measure: Measure::Interleaved,
            }),
        },
        Target {
            name: "renew_one, unlock_one and status (MongoDB): 1 round trip each",
            group: "store_mongo",
            functions: &["renew_one", "unlock_one"],
            judge: Judge::OneCommandEach {
                status: "status_server_clock",
                judged: &ONE_COMMAND_FILTERS,
                shown: &["ttl_lt", "ttl_gte"],
            },
            threshold: "1 command each: renew_one, unlock_one, and status on the server's \
                        clock by resource, by lock id and by owner (filters without a TTL \
                        bound); a TTL bound asks the server's time first (hello, then find): \
                        shown, not judged"
                .to_string(),
            diagnostics: None,
        },
        group_commands("unlock of a group of K locks", &["unlock"]),
        group_commands("renew of a group of K locks", &["renew"]),
        Target {
            name: "renew of a group of K locks: K=100 within 3x of K=1",
            group: "store_mongo",
            functions: &["renew"],
            judge: Judge::SizeRatio {
                small: 1,
                large: 100,
                ratio: RENEW_RATIO,
            },
            threshold: format!("median(K=100) <= {RENEW_RATIO}x median(K=1)"),
            diagnostics: Some(Diagnostics {
                label: "renew's change to the 100 locks alone",
                rows: &[
                    ("as the store sends it", "renew_update_alone"),
                    ("as one $set", "renew_update_set"),
                ],
                measure: Measure::TimesSmall,
            }),
        },
        Target {
            name: "a Locker holding N = 1,000 guards (MongoDB): at most 2 + N/100 store \
                   commands per renewal cycle",
            group: "store_mongo",
            functions: &["locker_renewals"],
            judge: Judge::LockerCommands { n: LOCKER_JUDGED_N },
            threshold: format!(
                "commands per renewal cycle at N = {LOCKER_JUDGED_N} <= {}: the commands command \
                 monitoring counted while the guards were held, over cycles = the Locker's \
                 renewals / N; the renewal lag (how late each round reached the store after its \
                 earliest lock was due) is shown, not judged",
                fmt_num(locker_bound(LOCKER_JUDGED_N))
            ),
            diagnostics: None,
        },
        Target {
            name: "purge of N expired among N live: round trips grow with N / batch size only",
            group: "store_mongo",
            functions: &["purge"],
            judge: Judge::LinearInBatches,
            threshold: "commands(N) = a + b x ceil(N / batch), a and b fitted on the two \
                        smallest N"
                .into(),
            diagnostics: None,
        },
        Target {
            name: "purge of N=10,000 expired among 10,000 live: well under a second",
            group: "store_mongo",
            functions: &["purge"],
            judge: Judge::MedianAtMost {
                size: PURGE_TIMED_N,
                bound_ns: PURGE_BOUND_NS * WELL_UNDER,
            },
            threshold: format!(
                "median <= {} (well under = at most {WELL_UNDER} of 1 s)",
                fmt_ns(PURGE_BOUND_NS * WELL_UNDER)
            ),
            diagnostics: Some(Diagnostics {
                label: "deleting its expired documents alone",
                rows: &[
                    ("at once", "purge_delete_many"),
                    ("in a transaction per batch", "purge_delete_batches"),
                ],
                measure: Measure::Median,
            }),
        },
        Target {
            name: "status with a filter uses an index (resource, lockId, expiry)",
            group: "store_mongo",
            functions: &["status"],
            judge: Judge::Indexed {
                filters: &INDEXED_FILTERS,
            },
            threshold: "every query the store sent: IXSCAN in the winning plan, no COLLSCAN \
                        (also asserted by store-mongo/tests/explain.rs)"
                .into(),
            diagnostics: None,
        },
        engine(
            "engine transition (pure): well under 1 µs per operation",
            &ENGINE_SINGLE,
            engine_bound,
            Listing::Count,
            format!(
                "median <= {} for xlock, slock, unlock, renew, status (by resource, by lock id) \
                 on every table size, each on the table in place (xlock_cold, a grant on a table \
                 just cloned and out of the cache, is shown but not judged)",
                fmt_ns(engine_bound)
            ),
        ),
        engine(
            "engine transition (pure): well under 1 µs per operation, on a warm table",
            &["xlock_unlock_in_place"],
            2.0 * engine_bound,
            Listing::Pairs,
            format!(
                "median of an xlock+unlock pair in place (no clone) <= 2 x {} on every table size",
                fmt_ns(engine_bound)
            ),
        ),
        engine(
            "engine transition (pure): purge, which scans the whole table",
            &["purge"],
            engine_bound,
            Listing::PerLock,
            format!("median per lock in the table <= {}", fmt_ns(engine_bound)),
        ),
        Target {
            name: "store-mem: over 1 million uncontended lock+unlock pairs per second on one \
                   core",
            group: "store_mem",
            functions: &["lock_unlock"],
            judge: Judge::RateAbove {
                per_sec: MEM_PAIRS_PER_SEC,
            },
            threshold: "1e9 / median(lock+unlock) > 1,000,000".into(),
            diagnostics: None,
        },
        Target {
            name: "waiters woken by hints (MongoDB): handover from a release to the next \
                   waiter's grant, with 8 and 64 waiting Lockers",
            group: "store_mongo",
            functions: &[HANDOVER],
            judge: Judge::Handover {
                waiters: &HANDOVER_JUDGED_WAITERS,
                p50: HANDOVER_P50_RATIO,
                p99: HANDOVER_P99_RATIO,
            },
            threshold: format!(
                "hints on: p50 <= {HANDOVER_P50_RATIO}x and p99 <= {HANDOVER_P99_RATIO}x one \
                 uncontended grant (the median of a bare xlock, measured in the cycle's \
                 rounds), for W = 8 and 64; polling (hints off) shown"
            ),
            diagnostics: None,
        },
        Target {
            name: "a crashed holder (MongoDB): its waiters are granted within a few round \
                   trips of its lock's expiry + takeover grace",
            group: "store_mongo",
            functions: &[CRASHED],
            judge: Judge::CrashedHolder {
                round_trips: CRASHED_ROUND_TRIPS,
            },
            threshold: format!(
                "median over the rounds of the first grant after expiry + grace <= \
                 {CRASHED_ROUND_TRIPS} uncontended grants (\"a few\" read as {CRASHED_ROUND_TRIPS}), \
                 hints on and off, every W measured; max shown"
            ),
            diagnostics: None,
        },
        Target {
            name: "no herd (MongoDB): lock commands per grant with 64 waiting Lockers at most \
                   2x polling's",
            group: "store_mongo",
            functions: &[CONTENDED],
            judge: Judge::NoHerd {
                lockers: HERD_LOCKERS,
                ratio: HERD_RATIO,
            },
            threshold: format!(
                "contended, N = {HERD_LOCKERS}: lock commands (findAndModify, update) per grant \
                 with hints <= {HERD_RATIO}x with hints off, same run; change-stream commands \
                 (aggregate, getMore, killCursors) shown"
            ),
            diagnostics: None,
        },
        Target {
            name: "contended throughput (MongoDB): with hints at least polling's",
            group: "store_mongo",
            functions: &[CONTENDED],
            judge: Judge::Throughput {
                lockers: &THROUGHPUT_LOCKERS,
            },
            threshold: "grants per second on one resource with 5 ms holds, hints on >= hints \
                        off, for N = 8 and 64 Lockers; longest wait and grants per Locker \
                        shown"
                .into(),
            diagnostics: None,
        },
        Target {
            name: "uncontended cycle (MongoDB): a Locker's acquire + release with hints within \
                   1.1x of without",
            group: "store_mongo",
            functions: &[CYCLE],
            judge: Judge::HintsCycle {
                ratio: HINTS_CYCLE_RATIO,
            },
            threshold: format!(
                "median(hints on) <= {HINTS_CYCLE_RATIO}x median(hints off), measured \
                 interleaved"
            ),
            diagnostics: None,
        },
    ]
}
