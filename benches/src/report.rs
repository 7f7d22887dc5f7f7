//! The Markdown report: every benchmark's median next to its ratio, the commands it issued
//! and their query plans, then each target (benches/README.md) with the threshold applied, the
//! measurement and the verdict.
//!
//! "Well under" a bound is read as at most half of it ([`WELL_UNDER`]); the report says so
//! next to each threshold.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::results::{Meta, Record};

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

/// Whether a target is met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Measured and within the threshold.
    Met,
    /// Measured and outside it.
    Missed,
    /// Not measured in this run (a bench or a size is missing).
    NotMeasured,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Met => "**met**",
            Verdict::Missed => "**MISSED**",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// One target and how this run fared against it.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The target as benches/README.md states it.
    pub target: String,
    /// The threshold this report applies.
    pub threshold: String,
    /// The numbers behind the verdict.
    pub evidence: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// The records of one run with their medians (ns per iteration, by [`Record::id`]).
#[derive(Debug)]
pub struct Run<'a> {
    /// What the benches recorded.
    pub records: &'a [Record],
    /// Criterion's median per iteration, in ns, by benchmark id.
    pub medians: &'a BTreeMap<String, f64>,
    /// Facts about the run.
    pub meta: &'a [Meta],
}

impl Run<'_> {
    fn median(&self, r: &Record) -> Option<f64> {
        self.medians.get(&r.id()).copied()
    }

    fn find(&self, group: &str, function: &str) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.group == group && r.function == function)
            .collect();
        v.sort_by_key(|r| r.size);
        v
    }

    fn one(&self, group: &str, function: &str) -> Option<&Record> {
        self.find(group, function).into_iter().next()
    }

    fn sized(&self, group: &str, function: &str, size: u64) -> Option<&Record> {
        self.find(group, function)
            .into_iter()
            .find(|r| r.size == Some(size))
    }

    /// The record a row's ratio is taken against: the baseline for single MongoDB paths,
    /// the smallest size of the same function for sized ones.
    fn reference(&self, r: &Record) -> Option<(&Record, String)> {
        if r.group == "store_mongo" && r.parameter.is_none() && r.function != "baseline" {
            return self
                .one("store_mongo", "baseline")
                .map(|b| (b, "baseline".to_string()));
        }
        r.size?;
        let smallest = self.find(&r.group, &r.function).into_iter().next()?;
        if smallest.id() == r.id() {
            return None;
        }
        let label = match (&smallest.parameter, smallest.size) {
            (Some(p), _) => p.clone(),
            (None, Some(s)) => s.to_string(),
            (None, None) => smallest.function.clone(),
        };
        Some((smallest, label))
    }

    /// A MongoDB benchmark judged against the baseline: its record, the baseline's, its
    /// commands per operation, and its ratio to the baseline (the interleaved one when the
    /// bench took it, else criterion's).
    fn against_baseline(&self, function: &str) -> Option<(&Record, &Record, f64, f64)> {
        let r = self.one("store_mongo", function)?;
        let b = self.one("store_mongo", "baseline")?;
        let cmds = r.commands?;
        let ratio = r
            .extra
            .get("paired_ratio")
            .copied()
            .or_else(|| self.ratio(r, b))?;
        Some((r, b, cmds, ratio))
    }

    fn ratio(&self, r: &Record, to: &Record) -> Option<f64> {
        Some(self.median(r)? / self.median(to)?)
    }

    /// Every target of benches/README.md that these benches measure.
    #[must_use]
    pub fn checks(&self) -> Vec<Check> {
        vec![
            self.grant_check("xlock", "xlock of one resource (MongoDB)"),
            self.grant_check("slock_at_limit", "slock of one resource (MongoDB)"),
            self.cycle_check(),
            self.one_command_check(),
            self.group_commands_check("unlock", "unlock of a group of K locks"),
            self.group_commands_check("renew", "renew of a group of K locks"),
            self.renew_ratio_check(),
            self.locker_check(),
            self.purge_commands_check(),
            self.purge_time_check(),
            self.status_index_check(),
            self.engine_check(),
            self.engine_warm_check(),
            self.engine_purge_check(),
            self.mem_check(),
        ]
    }

    fn grant_check(&self, function: &str, target: &str) -> Check {
        let threshold = format!(
            "1 command; median <= {GRANT_RATIO}x the baseline's (bare find_one_and_update \
             upsert), measured interleaved with it so both see the same machine; criterion's \
             two medians, taken seconds apart, are shown too"
        );
        let Some((r, b, cmds, ratio)) = self.against_baseline(function) else {
            return not_measured(target, threshold);
        };
        let ok = (cmds - 1.0).abs() < 1e-9 && ratio <= GRANT_RATIO;
        let criterion = self.ratio(r, b).map_or_else(String::new, |c| {
            format!(
                "; criterion medians {} vs {} = {c:.2}x",
                fmt_opt_ns(self.median(r)),
                fmt_opt_ns(self.median(b)),
            )
        });
        let mut evidence = format!(
            "{} command/op ({}){}{criterion}",
            fmt_num(cmds),
            r.command_names.join(", "),
            paired(r),
        );
        if function == "slock_at_limit" {
            evidence += &self.diagnostics(
                "the same change alone",
                &[
                    ("as a $push", "slock_push_modifier"),
                    ("as a one-stage pipeline", "slock_push_pipeline"),
                ],
                |d| {
                    let interleaved = d.extra.get("paired_ratio")?;
                    Some(format!("{interleaved:.2}x interleaved"))
                },
            );
        }
        Check {
            target: target.to_string(),
            threshold,
            evidence,
            verdict: verdict(ok),
        }
    }

    /// `; label: what (measure), what (measure)` for the diagnostic rows that ran, to stand
    /// beside a target's evidence; empty when none did.
    fn diagnostics(
        &self,
        label: &str,
        rows: &[(&str, &str)],
        measure: impl Fn(&Record) -> Option<String>,
    ) -> String {
        let found: Vec<String> = rows
            .iter()
            .filter_map(|(what, function)| {
                let r = self.one("store_mongo", function)?;
                Some(format!("{what} {}", measure(r)?))
            })
            .collect();
        if found.is_empty() {
            return String::new();
        }
        format!("; {label}: {}", found.join(", "))
    }

    fn cycle_check(&self) -> Check {
        let target = "acquire+release of one lock (MongoDB): xlock, then unlock_one of the \
                      lock it returned";
        let threshold = format!(
            "2 commands; median <= {CYCLE_RATIO}x the baseline's (bare find_one_and_update \
             upsert), measured interleaved with it so both see the same machine; criterion's \
             two medians are shown too"
        );
        let Some((r, b, cmds, ratio)) = self.against_baseline("acquire_release") else {
            return not_measured(target, threshold);
        };
        let ok = (cmds - 2.0).abs() < 1e-9 && ratio <= CYCLE_RATIO;
        let mut evidence = format!(
            "{} commands/op ({}){}{}",
            fmt_num(cmds),
            r.command_names.join(", "),
            paired(r),
            self.criterion_ratio(r, b),
        );
        evidence += &self.diagnostics(
            "two writes alone",
            &[("the baseline twice back to back", "baseline_twice")],
            |d| {
                let interleaved = d.extra.get("paired_ratio")?;
                Some(format!("{interleaved:.2}x interleaved"))
            },
        );
        if let Some(renewing) = self.one("store_mongo", "acquire_renew_release") {
            let interleaved = renewing
                .extra
                .get("paired_ratio")
                .map_or_else(String::new, |x| {
                    format!(", {x:.2}x the baseline interleaved")
                });
            let _ = write!(
                evidence,
                "; acquire+renew+release (not judged): {} commands ({}){interleaved}",
                renewing.commands.map_or_else(|| "-".into(), fmt_num),
                renewing.command_names.join(", "),
            );
        }
        Check {
            target: target.to_string(),
            threshold,
            evidence,
            verdict: verdict(ok),
        }
    }

    /// `; criterion medians A vs B = R x` when both ran.
    fn criterion_ratio(&self, r: &Record, b: &Record) -> String {
        self.ratio(r, b).map_or_else(String::new, |c| {
            format!(
                "; criterion medians {} vs {} = {c:.2}x",
                fmt_opt_ns(self.median(r)),
                fmt_opt_ns(self.median(b)),
            )
        })
    }

    fn one_command_check(&self) -> Check {
        let target = "renew_one, unlock_one and status (MongoDB): 1 round trip each";
        let threshold = "1 command each: renew_one, unlock_one, and status on the server's \
                         clock by resource, by lock id and by owner (filters without a TTL \
                         bound); a TTL bound asks the server's time first (hello, then find): \
                         shown, not judged"
            .to_string();
        let status = |kind: &str| {
            self.find("store_mongo", "status_server_clock")
                .into_iter()
                .find(|r| r.parameter.as_deref() == Some(kind))
        };
        let mut judged: Vec<(String, Option<&Record>)> = vec![
            ("renew_one".into(), self.one("store_mongo", "renew_one")),
            ("unlock_one".into(), self.one("store_mongo", "unlock_one")),
        ];
        for kind in ONE_COMMAND_FILTERS {
            judged.push((format!("status by {kind}"), status(kind)));
        }
        let described = |what: &str, r: &Record| {
            format!(
                "{what}: {} ({})",
                r.commands.map_or_else(|| "-".into(), fmt_num),
                fold_repeats(&r.command_names)
            )
        };
        let mut parts: Vec<String> = judged
            .iter()
            .filter_map(|(what, r)| Some(described(what, (*r)?)))
            .collect();
        for kind in ["ttl_lt", "ttl_gte"] {
            if let Some(r) = status(kind) {
                parts.push(described(
                    &format!("status with a TTL bound ({kind}, not judged)"),
                    r,
                ));
            }
        }
        if parts.is_empty() {
            return not_measured(target, threshold);
        }
        let counts: Vec<Option<f64>> = judged
            .iter()
            .map(|(_, r)| r.and_then(|r| r.commands))
            .collect();
        let verdict = if counts
            .iter()
            .any(|c| c.is_some_and(|c| (c - 1.0).abs() > 1e-9))
        {
            Verdict::Missed
        } else if counts.iter().all(Option::is_some) {
            Verdict::Met
        } else {
            Verdict::NotMeasured
        };
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!("commands/op {}", parts.join("; ")),
            verdict,
        }
    }

    fn group_commands_check(&self, function: &str, target: &str) -> Check {
        let threshold = format!(
            "K=1 (a group that turns out to be one lock): at most {} commands (find, then the \
             one-lock findAndModify); K >= 2: the same number of commands for every K (10, \
             100, 1000)",
            fmt_num(GROUP_OF_ONE_COMMANDS)
        );
        let rows = self.find("store_mongo", function);
        if rows.len() < 2 || rows.iter().any(|r| r.commands.is_none()) {
            return not_measured(target, threshold);
        }
        let (ones, many): (Vec<&Record>, Vec<&Record>) =
            rows.iter().partition(|r| r.size == Some(1));
        let one_ok = ones.iter().all(|r| {
            r.commands
                .is_some_and(|c| c <= GROUP_OF_ONE_COMMANDS + 1e-9)
        });
        let first_many = many.first().and_then(|r| r.commands).unwrap_or_default();
        let same = many
            .iter()
            .all(|r| r.commands.is_some_and(|c| (c - first_many).abs() < 1e-9));
        let all_k = [1, 10, 100, 1000]
            .iter()
            .all(|k| rows.iter().any(|r| r.size == Some(*k)));
        let counts = |rows: &[&Record]| {
            rows.iter()
                .map(|r| {
                    format!(
                        "K={}: {}",
                        r.size.unwrap_or_default(),
                        fmt_num(r.commands.unwrap_or_default())
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut evidence = Vec::new();
        if let Some(one) = ones.first() {
            evidence.push(format!(
                "{} ({})",
                counts(&ones),
                fold_repeats(&one.command_names)
            ));
        }
        if let Some(first) = many.first() {
            evidence.push(format!(
                "{} ({})",
                counts(&many),
                fold_repeats(&first.command_names)
            ));
        }
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!("commands/op {}", evidence.join("; ")),
            verdict: if !one_ok || !same {
                Verdict::Missed
            } else if all_k {
                Verdict::Met
            } else {
                Verdict::NotMeasured
            },
        }
    }

    fn locker_check(&self) -> Check {
        let n = LOCKER_JUDGED_N;
        let bound = locker_bound(n);
        let target = "a Locker holding N = 1,000 guards (MongoDB): at most 2 + N/100 store \
                      commands per renewal cycle";
        let threshold = format!(
            "commands per renewal cycle at N = {n} <= {}: the commands command monitoring \
             counted while the guards were held, over cycles = the Locker's renewals / N; the \
             renewal lag (how late each round reached the store after its earliest lock was \
             due) is shown, not judged",
            fmt_num(bound)
        );
        let rows: Vec<&Record> = self
            .find("store_mongo", "locker_renewals")
            .into_iter()
            .filter(|r| r.commands.is_some())
            .collect();
        if rows.is_empty() {
            return not_measured(target, threshold);
        }
        let x = |r: &Record, k: &str| r.extra.get(k).copied().unwrap_or(f64::NAN);
        let evidence = rows
            .iter()
            .map(|r| {
                let size = r.size.unwrap_or_default();
                let lost = x(r, "lost");
                let lost = if lost > 0.0 {
                    format!(", {} lost", fmt_num(lost))
                } else {
                    String::new()
                };
                format!(
                    "N={size}: {} per cycle ({}) over {:.1} cycles (2 + N/100 = {}); lag \
                     median {:.1} ms, max {:.1} ms{lost}",
                    fmt_num(r.commands.unwrap_or_default()),
                    fold_repeats(&r.command_names),
                    x(r, "cycles"),
                    fmt_num(locker_bound(size)),
                    x(r, "lag_median_ms"),
                    x(r, "lag_max_ms"),
                )
            })
            .collect::<Vec<_>>()
            .join("<br>");
        let verdict = match rows.iter().find(|r| r.size == Some(n)) {
            Some(r) => verdict(r.commands.is_some_and(|c| c <= bound + 1e-9)),
            None => Verdict::NotMeasured,
        };
        Check {
            target: target.to_string(),
            threshold,
            evidence,
            verdict,
        }
    }

    fn renew_ratio_check(&self) -> Check {
        let target = "renew of a group of K locks: K=100 within 3x of K=1";
        let threshold = format!("median(K=100) <= {RENEW_RATIO}x median(K=1)");
        let (Some(k1), Some(k100)) = (
            self.sized("store_mongo", "renew", 1),
            self.sized("store_mongo", "renew", 100),
        ) else {
            return not_measured(target, threshold);
        };
        let Some(ratio) = self.ratio(k100, k1) else {
            return not_measured(target, threshold);
        };
        let commands = |r: &Record| r.commands.map_or_else(|| "-".into(), fmt_num);
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!(
                "K=1 {} ({} commands), K=100 {} ({} commands) = {ratio:.2}x{}",
                fmt_opt_ns(self.median(k1)),
                commands(k1),
                fmt_opt_ns(self.median(k100)),
                commands(k100),
                self.diagnostics(
                    "renew's change to the 100 locks alone",
                    &[
                        ("as the store sends it", "renew_update_alone"),
                        ("as one $set", "renew_update_set"),
                    ],
                    |d| Some(format!("{:.2}x K=1", self.median(d)? / self.median(k1)?)),
                )
            ),
            verdict: verdict(ratio <= RENEW_RATIO),
        }
    }

    fn purge_commands_check(&self) -> Check {
        let target = "purge of N expired among N live: round trips grow with N / batch size only";
        let threshold =
            "commands(N) = a + b x ceil(N / batch), a and b fitted on the two smallest N".into();
        let rows: Vec<(u64, f64, f64)> = self
            .find("store_mongo", "purge")
            .into_iter()
            .filter_map(|r| Some((r.size?, r.extra.get("batches").copied()?, r.commands?)))
            .collect();
        if rows.len() < 3 {
            return not_measured(target, threshold);
        }
        let ((_, b0, c0), (_, b1, c1)) = (rows[0], rows[1]);
        if (b1 - b0).abs() < 1e-9 {
            return not_measured(target, threshold);
        }
        let per_batch = (c1 - c0) / (b1 - b0);
        let fixed = c0 - per_batch * b0;
        let fits = rows
            .iter()
            .all(|&(_, b, c)| (fixed + per_batch * b - c).abs() < 1e-6);
        let evidence = rows
            .iter()
            .map(|(n, b, c)| format!("N={n}: {} in {} batches", fmt_num(*c), fmt_num(*b)))
            .collect::<Vec<_>>()
            .join("; ");
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!(
                "{evidence}; fit: {} + {} per batch",
                fmt_num(fixed),
                fmt_num(per_batch)
            ),
            verdict: verdict(fits),
        }
    }

    fn purge_time_check(&self) -> Check {
        let target = "purge of N=10,000 expired among 10,000 live: well under a second";
        let threshold = format!(
            "median <= {} (well under = at most {WELL_UNDER} of 1 s)",
            fmt_ns(PURGE_BOUND_NS * WELL_UNDER)
        );
        let Some(r) = self.sized("store_mongo", "purge", PURGE_TIMED_N) else {
            return not_measured(target, threshold);
        };
        let Some(m) = self.median(r) else {
            return not_measured(target, threshold);
        };
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!(
                "median {}{}",
                fmt_ns(m),
                self.diagnostics(
                    "deleting its expired documents alone",
                    &[
                        ("at once", "purge_delete_many"),
                        ("in a transaction per batch", "purge_delete_batches"),
                    ],
                    |d| Some(fmt_ns(self.median(d)?)),
                )
            ),
            verdict: verdict(m <= PURGE_BOUND_NS * WELL_UNDER),
        }
    }

    fn status_index_check(&self) -> Check {
        let target = "status with a filter uses an index (resource, lockId, expiry)";
        let threshold = "every query the store sent: IXSCAN in the winning plan, no COLLSCAN \
                         (also asserted by store-mongo/tests/explain.rs)"
            .into();
        let rows: Vec<&Record> = self
            .find("store_mongo", "status")
            .into_iter()
            .filter(|r| {
                r.parameter
                    .as_deref()
                    .is_some_and(|p| INDEXED_FILTERS.contains(&p))
            })
            .collect();
        if rows.len() < INDEXED_FILTERS.len() || rows.iter().any(|r| r.plans.is_empty()) {
            return not_measured(target, threshold);
        }
        let indexed = |r: &&Record| {
            r.plans
                .iter()
                .all(|p| p.contains("IXSCAN") && !p.contains("COLLSCAN"))
        };
        let ok = rows.iter().all(indexed);
        let evidence = rows
            .iter()
            .map(|r| {
                format!(
                    "{}: {}",
                    r.parameter.as_deref().unwrap_or_default(),
                    r.plans.join("; ")
                )
            })
            .collect::<Vec<_>>()
            .join("<br>");
        Check {
            target: target.to_string(),
            threshold,
            evidence,
            verdict: verdict(ok),
        }
    }

    fn slowest<'r>(&self, rows: &[&'r Record]) -> Option<(&'r Record, f64)> {
        rows.iter()
            .filter_map(|r| Some((*r, self.median(r)? / r.elements as f64)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn engine_check(&self) -> Check {
        let target = "engine transition (pure): well under 1 µs per operation";
        let threshold = format!(
            "median <= {} for xlock, slock, unlock, renew, status (by resource, by lock id) on \
             every table size, each on the table in place (xlock_cold, a grant on a table \
             just cloned and out of the cache, is shown but not judged)",
            fmt_ns(ENGINE_BOUND_NS * WELL_UNDER)
        );
        let rows: Vec<&Record> = ENGINE_SINGLE
            .iter()
            .flat_map(|f| self.find("engine", f))
            .collect();
        let Some((worst, ns)) = self.slowest(&rows) else {
            return not_measured(target, threshold);
        };
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!(
                "{} benchmarks; slowest {} at {}",
                rows.len(),
                worst.id(),
                fmt_ns(ns)
            ),
            verdict: verdict(ns <= ENGINE_BOUND_NS * WELL_UNDER),
        }
    }

    fn engine_warm_check(&self) -> Check {
        let target = "engine transition (pure): well under 1 µs per operation, on a warm table";
        let threshold = format!(
            "median of an xlock+unlock pair in place (no clone) <= 2 x {} on every table size",
            fmt_ns(ENGINE_BOUND_NS * WELL_UNDER)
        );
        let rows = self.find("engine", "xlock_unlock_in_place");
        let Some((worst, ns)) = self.slowest(&rows) else {
            return not_measured(target, threshold);
        };
        let all = rows
            .iter()
            .filter_map(|r| Some(format!("{}: {}", r.size?, fmt_ns(self.median(r)?))))
            .collect::<Vec<_>>()
            .join(", ");
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!("pairs {all}; slowest {}", worst.id()),
            verdict: verdict(ns <= 2.0 * ENGINE_BOUND_NS * WELL_UNDER),
        }
    }

    fn engine_purge_check(&self) -> Check {
        let target = "engine transition (pure): purge, which scans the whole table";
        let threshold = format!(
            "median per lock in the table <= {}",
            fmt_ns(ENGINE_BOUND_NS * WELL_UNDER)
        );
        let rows = self.find("engine", "purge");
        let Some((worst, ns)) = self.slowest(&rows) else {
            return not_measured(target, threshold);
        };
        let all = rows
            .iter()
            .filter_map(|r| Some(format!("{}: {}", r.size?, fmt_ns(self.median(r)?))))
            .collect::<Vec<_>>()
            .join(", ");
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!(
                "medians {all}; worst per lock {} ({})",
                fmt_ns(ns),
                worst.id()
            ),
            verdict: verdict(ns <= ENGINE_BOUND_NS * WELL_UNDER),
        }
    }

    fn mem_check(&self) -> Check {
        let target =
            "store-mem: over 1 million uncontended lock+unlock pairs per second on one core";
        let threshold = "1e9 / median(lock+unlock) > 1,000,000".into();
        let Some(m) = self
            .one("store_mem", "lock_unlock")
            .and_then(|r| self.median(r))
        else {
            return not_measured(target, threshold);
        };
        let rate = 1e9 / m;
        Check {
            target: target.to_string(),
            threshold,
            evidence: format!("median {} per pair = {} pairs/s", fmt_ns(m), fmt_rate(rate)),
            verdict: verdict(rate > MEM_PAIRS_PER_SEC),
        }
    }

    /// The whole report in Markdown.
    #[must_use]
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Lockwright benchmark report\n");
        for m in self.meta {
            let _ = writeln!(out, "- {}: {}", m.key, m.value);
        }
        let _ = writeln!(
            out,
            "- medians: criterion's `median.point_estimate` per iteration; ratios are taken \
             within this run\n"
        );

        let checks = self.checks();
        let met = checks.iter().filter(|c| c.verdict == Verdict::Met).count();
        let missed = checks
            .iter()
            .filter(|c| c.verdict == Verdict::Missed)
            .count();
        let _ = writeln!(
            out,
            "## Targets ({met} met, {missed} missed, {} not measured)\n",
            checks.len() - met - missed
        );
        let _ = writeln!(
            out,
            "| target (benches/README.md) | threshold | measured | verdict |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for c in &checks {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                c.target,
                c.threshold,
                c.evidence,
                c.verdict.label()
            );
        }
        out.push('\n');

        let mut groups: Vec<&str> = Vec::new();
        for r in self.records {
            if !groups.contains(&r.group.as_str()) {
                groups.push(&r.group);
            }
        }
        for g in groups {
            self.group_table(&mut out, g);
            self.locker_table(&mut out, g);
        }
        out
    }

    /// The Locker measurements of `group` (records the bench measured itself), if any.
    fn locker_table(&self, out: &mut String, group: &str) {
        let mut rows: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.group == group && r.custom && r.function == "locker_renewals")
            .collect();
        if rows.is_empty() {
            return;
        }
        rows.sort_by_key(|r| r.size);
        let _ = writeln!(
            out,
            "### {group}: a Locker holding N guards\n\n\
             Measured by the bench, not criterion: the guards are taken (up to 100 acquires at \
             once), then held while the Locker renews them; every command the client started \
             meanwhile is counted, over cycles = the Locker's renewals / N. A round's lag is \
             how long after the earliest of its locks was due (its grant or last renewal + TTL \
             x renew_fraction) the round reached the store.\n"
        );
        let _ = writeln!(
            out,
            "| benchmark | TTL | acquired in | cycles | rounds | locks per round | commands per cycle | commands | round trip per cycle, by command | round (median) | lag median | lag max | held at end | plans | note |"
        );
        let _ = writeln!(
            out,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in rows {
            let x = |k: &str| r.extra.get(k).copied();
            let ms = |k: &str| x(k).map_or_else(|| "-".into(), |v| fmt_ns(v * 1e6));
            // A lag may be slightly negative (the Locker's timers count whole ms).
            let lag = |k: &str| x(k).map_or_else(|| "-".into(), |v| format!("{v:.1} ms"));
            let num = |k: &str| x(k).map_or_else(|| "-".into(), fmt_num);
            let times = r
                .command_time_us
                .iter()
                .map(|(c, us)| format!("{c} {}", fmt_us(*us)))
                .collect::<Vec<_>>()
                .join("<br>");
            let mut note = r.note.clone().unwrap_or_default();
            if x("settled") == Some(0.0) {
                note += "; no round renewed every guard together before the count began";
            }
            if x("complete") == Some(0.0) {
                note += "; the cycles asked for did not complete in time";
            }
            for (k, what) in [
                ("renew_failures", "failed renewal attempts"),
                ("lost", "lost"),
            ] {
                if let Some(v) = x(k).filter(|v| *v > 0.0) {
                    let _ = write!(note, "; {} {what}", fmt_num(v));
                }
            }
            let name = r.id().trim_start_matches(&format!("{group}/")).to_string();
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {times} | {} | {} | {} | {} of {} | {} | {note} |",
                ms("ttl_ms"),
                ms("acquire_ms"),
                x("cycles").map_or_else(|| "-".into(), |c| format!("{c:.1}")),
                num("rounds"),
                x("locks_per_round").map_or_else(|| "-".into(), |c| format!("{c:.1}")),
                r.commands.map(fmt_num).unwrap_or_default(),
                fold_repeats(&r.command_names),
                ms("round_median_ms"),
                lag("lag_median_ms"),
                lag("lag_max_ms"),
                num("held_at_end"),
                r.size.unwrap_or_default(),
                fold_duplicates(&r.plans).join("<br>"),
            );
        }
        out.push('\n');
    }

    fn group_table(&self, out: &mut String, group: &str) {
        let rows: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.group == group && !r.custom)
            .collect();
        let mongo = rows.iter().any(|r| r.commands.is_some());
        let _ = writeln!(out, "## {group}\n");
        if mongo {
            let _ = writeln!(
                out,
                "| benchmark | median | per element | rate | ratio | commands/op | commands | round trip per op, by command | plans | note |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
        } else {
            let _ = writeln!(
                out,
                "| benchmark | median | per element | rate | ratio | note |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|");
        }
        for r in rows {
            let median = self.median(r);
            let per = median.map(|m| m / r.elements as f64);
            let per_el = if r.elements > 1 {
                fmt_opt_ns(per)
            } else {
                String::new()
            };
            let rate = per.map_or_else(String::new, |p| format!("{}/s", fmt_rate(1e9 / p)));
            let mut ratio = self
                .reference(r)
                .and_then(|(to, label)| Some(format!("{:.2}x {label}", self.ratio(r, to)?)))
                .unwrap_or_default();
            if let Some(paired) = r.extra.get("paired_ratio") {
                let _ = write!(ratio, " ({paired:.2}x interleaved)");
            }
            let note = r.note.clone().unwrap_or_default();
            let name = r.id().trim_start_matches(&format!("{group}/")).to_string();
            if mongo {
                let times = r
                    .command_time_us
                    .iter()
                    .map(|(c, us)| format!("{c} {}", fmt_us(*us)))
                    .collect::<Vec<_>>()
                    .join("<br>");
                let _ = writeln!(
                    out,
                    "| {name} | {} | {per_el} | {rate} | {ratio} | {} | {} | {times} | {} | {note} |",
                    fmt_opt_ns(median),
                    r.commands.map(fmt_num).unwrap_or_default(),
                    fold_repeats(&r.command_names),
                    fold_duplicates(&r.plans).join("<br>"),
                );
            } else {
                let _ = writeln!(
                    out,
                    "| {name} | {} | {per_el} | {rate} | {ratio} | {note} |",
                    fmt_opt_ns(median)
                );
            }
        }
        out.push('\n');
    }
}

/// A command sequence with repeats folded: `aggregate, [aggregate, update] x2, delete`.
#[must_use]
pub fn fold_repeats(items: &[String]) -> String {
    // The block of 1 to 4 items starting at `i` whose back-to-back repeats cover the most.
    let best_at = |i: usize| {
        let mut best = (1, 1);
        for width in 1..=4.min(items.len().saturating_sub(i)) {
            let block = &items[i..i + width];
            let mut count = 1;
            while items[i + count * width..]
                .get(..width)
                .is_some_and(|next| next == block)
            {
                count += 1;
            }
            if count > 1 && width * count > best.0 * best.1 {
                best = (width, count);
            }
        }
        best
    };
    let mut parts = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (width, count) = best_at(i);
        let (w_next, c_next) = best_at(i + 1);
        if i + 1 < items.len() && c_next > 1 && w_next * c_next > width * count {
            // Folding from the next item covers more: keep this one as it is.
            parts.push(items[i].clone());
            i += 1;
            continue;
        }
        let block = items[i..i + width].join(", ");
        parts.push(match (width, count) {
            (_, 1) => block,
            (1, _) => format!("{block} x{count}"),
            _ => format!("[{block}] x{count}"),
        });
        i += width * count;
    }
    parts.join(", ")
}

/// Distinct lines in first-seen order, each with its count when above one.
#[must_use]
pub fn fold_duplicates(items: &[String]) -> Vec<String> {
    let mut seen: Vec<(&String, usize)> = Vec::new();
    for item in items {
        match seen.iter_mut().find(|(s, _)| *s == item) {
            Some((_, n)) => *n += 1,
            None => seen.push((item, 1)),
        }
    }
    seen.into_iter()
        .map(|(s, n)| {
            if n > 1 {
                format!("{s} (x{n})")
            } else {
                s.clone()
            }
        })
        .collect()
}

fn fmt_us(us: f64) -> String {
    fmt_ns(us * 1e3)
}

/// The interleaved measurement of a grant against the baseline, when the bench took one.
fn paired(r: &Record) -> String {
    match (
        r.extra.get("paired_ratio"),
        r.extra.get("paired_us"),
        r.extra.get("paired_baseline_us"),
        r.extra.get("paired_rounds"),
    ) {
        (Some(ratio), Some(op), Some(base), Some(rounds)) => format!(
            "; interleaved with the baseline ({} rounds): medians {} vs {} = {ratio:.2}x",
            fmt_num(*rounds),
            fmt_us(*op),
            fmt_us(*base)
        ),
        _ => String::new(),
    }
}

fn verdict(ok: bool) -> Verdict {
    if ok { Verdict::Met } else { Verdict::Missed }
}

fn not_measured(target: &str, threshold: String) -> Check {
    Check {
        target: target.to_string(),
        threshold,
        evidence: "no measurement in this run".into(),
        verdict: Verdict::NotMeasured,
    }
}

/// A duration in ns with a readable unit.
#[must_use]
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn fmt_opt_ns(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".into(), fmt_ns)
}

/// A rate per second with a readable unit.
#[must_use]
pub fn fmt_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{per_sec:.1}")
    }
}

/// A count that is usually whole: `3`, or `3.50` when it is not.
#[must_use]
pub fn fmt_num(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(group: &str, function: &str, size: Option<u64>, commands: Option<f64>) -> Record {
        let mut r = Record::new(group, function, size.map(|s| s.to_string()), 1);
        r.size = size;
        r.commands = commands;
        r
    }

    fn checks_of(records: &[Record], medians: &[(&str, f64)]) -> Vec<Check> {
        let medians: BTreeMap<String, f64> =
            medians.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Run {
            records,
            medians: &medians,
            meta: &[],
        }
        .checks()
    }

    fn find<'c>(checks: &'c [Check], prefix: &str) -> &'c Check {
        checks
            .iter()
            .find(|c| c.target.starts_with(prefix))
            .unwrap()
    }

    #[test]
    fn grant_ratio_and_command_count_decide_the_grant_targets() {
        let records = [
            rec("store_mongo", "baseline", None, Some(1.0)),
            rec("store_mongo", "xlock", None, Some(1.0)),
            rec("store_mongo", "slock_at_limit", None, Some(2.0)),
        ];
        let checks = checks_of(
            &records,
            &[
                ("store_mongo/baseline", 1000.0),
                ("store_mongo/xlock", 1250.0),
                ("store_mongo/slock_at_limit", 1100.0),
            ],
        );
        assert_eq!(find(&checks, "xlock").verdict, Verdict::Met);
        assert_eq!(
            find(&checks, "slock").verdict,
            Verdict::Missed,
            "2 commands"
        );
        let slow = checks_of(
            &records,
            &[
                ("store_mongo/baseline", 1000.0),
                ("store_mongo/xlock", 1400.0),
            ],
        );
        assert_eq!(find(&slow, "xlock").verdict, Verdict::Missed);
        assert_eq!(find(&slow, "slock").verdict, Verdict::NotMeasured);

        // The interleaved ratio, when measured, decides over criterion's medians.
        let mut records = records.clone();
        records[1].extra.insert("paired_ratio".into(), 1.2);
        let paired = checks_of(
            &records,
            &[
                ("store_mongo/baseline", 1000.0),
                ("store_mongo/xlock", 1400.0),
            ],
        );
        assert_eq!(find(&paired, "xlock").verdict, Verdict::Met);
    }

    #[test]
    fn diagnostics_stand_beside_the_evidence_they_explain() {
        let mut pipeline = rec("store_mongo", "slock_push_pipeline", None, Some(1.0));
        pipeline.extra.insert("paired_ratio".into(), 1.45);
        let records = [
            rec("store_mongo", "baseline", None, Some(1.0)),
            rec("store_mongo", "slock_at_limit", None, Some(1.0)),
            pipeline,
            rec("store_mongo", "purge", Some(10_000), Some(62.0)),
            rec(
                "store_mongo",
                "purge_delete_batches",
                Some(10_000),
                Some(40.0),
            ),
        ];
        let checks = checks_of(
            &records,
            &[
                ("store_mongo/baseline", 1000.0),
                ("store_mongo/slock_at_limit", 1500.0),
                ("store_mongo/purge/10000", 600e6),
                ("store_mongo/purge_delete_batches/10000", 550e6),
            ],
        );
        let slock = &find(&checks, "slock").evidence;
        assert!(
            slock.ends_with("; the same change alone: as a one-stage pipeline 1.45x interleaved"),
            "{slock}"
        );
        let purge = &find(&checks, "purge of N=10,000").evidence;
        assert!(
            purge.ends_with(
                "; deleting its expired documents alone: in a transaction per batch 550.00 ms"
            ),
            "{purge}"
        );
        let xlock = &find(&checks, "xlock").evidence;
        assert!(
            !xlock.contains("alone"),
            "no diagnostics ran for xlock: {xlock}"
        );
    }

    #[test]
    fn group_commands_one_lock_path_then_constant_for_k_of_two_and_more() {
        let shaped: Vec<Record> = [(1, 2.0), (10, 4.0), (100, 4.0), (1000, 4.0)]
            .iter()
            .map(|(k, c)| rec("store_mongo", "unlock", Some(*k), Some(*c)))
            .collect();
        let checks = checks_of(&shaped, &[]);
        assert_eq!(find(&checks, "unlock").verdict, Verdict::Met);
        assert!(
            find(&checks, "unlock")
                .evidence
                .starts_with("commands/op K=1: 2 ("),
            "{}",
            find(&checks, "unlock").evidence
        );
        let mut growing = shaped.clone();
        growing[3].commands = Some(5.0);
        assert_eq!(
            find(&checks_of(&growing, &[]), "unlock").verdict,
            Verdict::Missed
        );
        let mut one_too_many = shaped.clone();
        one_too_many[0].commands = Some(3.0);
        assert_eq!(
            find(&checks_of(&one_too_many, &[]), "unlock").verdict,
            Verdict::Missed,
            "a group of one lock takes the one-lock path"
        );
        // Test mode sizes only (K = 1 and 10): nothing wrong, but not every K.
        assert_eq!(
            find(&checks_of(&shaped[..2], &[]), "unlock").verdict,
            Verdict::NotMeasured
        );
    }

    #[test]
    fn the_one_lock_cycle_is_judged_interleaved_with_the_baseline() {
        let mut cycle = rec("store_mongo", "acquire_release", None, Some(2.0));
        cycle.extra.insert("paired_ratio".into(), 2.1);
        let records = [rec("store_mongo", "baseline", None, Some(1.0)), cycle];
        let medians = [
            ("store_mongo/baseline", 1000.0),
            ("store_mongo/acquire_release", 2500.0),
        ];
        let checks = checks_of(&records, &medians);
        assert_eq!(find(&checks, "acquire+release").verdict, Verdict::Met);
        let mut slow = records.clone();
        slow[1].extra.insert("paired_ratio".into(), 2.4);
        assert_eq!(
            find(&checks_of(&slow, &medians), "acquire+release").verdict,
            Verdict::Missed
        );
        let mut three = records.clone();
        three[1].commands = Some(3.0);
        assert_eq!(
            find(&checks_of(&three, &medians), "acquire+release").verdict,
            Verdict::Missed
        );
    }

    #[test]
    fn one_lock_operations_and_status_without_a_ttl_bound_take_one_command() {
        let status = |kind: &str, commands: f64| {
            let mut r = rec("store_mongo", "status_server_clock", None, Some(commands));
            r.parameter = Some(kind.into());
            r
        };
        let records = vec![
            rec("store_mongo", "renew_one", None, Some(1.0)),
            rec("store_mongo", "unlock_one", None, Some(1.0)),
            status("resource", 1.0),
            status("lock_id", 1.0),
            status("owner", 1.0),
            status("ttl_lt", 2.0),
        ];
        let check = find(&checks_of(&records, &[]), "renew_one").clone();
        assert_eq!(check.verdict, Verdict::Met, "a TTL bound is not judged");
        assert!(
            check.evidence.contains("ttl_lt, not judged): 2"),
            "{check:?}"
        );
        let mut two = records.clone();
        two[4].commands = Some(2.0);
        assert_eq!(
            find(&checks_of(&two, &[]), "renew_one").verdict,
            Verdict::Missed
        );
        assert_eq!(
            find(&checks_of(&records[..4], &[]), "renew_one").verdict,
            Verdict::NotMeasured,
            "status by owner is missing"
        );
    }

    #[test]
    fn the_locker_is_judged_at_a_thousand_guards() {
        let held = |n: u64, commands: f64| {
            let mut r = rec("store_mongo", "locker_renewals", Some(n), Some(commands));
            r.custom = true;
            r.extra.insert("cycles".into(), 3.0);
            r
        };
        assert_eq!(locker_bound(1_000), 12.0);
        let records = [held(1, 1.0), held(100, 3.0), held(1_000, 12.0)];
        let checks = checks_of(&records, &[]);
        assert_eq!(find(&checks, "a Locker").verdict, Verdict::Met);
        let over = [held(1, 1.0), held(1_000, 12.5)];
        assert_eq!(
            find(&checks_of(&over, &[]), "a Locker").verdict,
            Verdict::Missed
        );
        assert_eq!(
            find(&checks_of(&records[..2], &[]), "a Locker").verdict,
            Verdict::NotMeasured
        );
        // Its own table, not a row of criterion medians.
        let medians = BTreeMap::new();
        let markdown = Run {
            records: &records,
            medians: &medians,
            meta: &[],
        }
        .markdown();
        assert!(markdown.contains("### store_mongo: a Locker holding N guards"));
        assert_eq!(
            markdown.matches("| locker_renewals/1000 | ").count(),
            1,
            "{markdown}"
        );
    }

    #[test]
    fn purge_commands_fit_a_line_in_batches() {
        let purge = |n: u64, batches: f64, commands: f64| {
            let mut r = rec("store_mongo", "purge", Some(n), Some(commands));
            r.extra.insert("batches".into(), batches);
            r
        };
        let good = [
            purge(100, 1.0, 5.0),
            purge(1000, 2.0, 8.0),
            purge(10_000, 20.0, 62.0),
        ];
        let checks = checks_of(&good, &[("store_mongo/purge/10000", 300e6)]);
        assert_eq!(find(&checks, "purge of N expired").verdict, Verdict::Met);
        assert_eq!(find(&checks, "purge of N=10,000").verdict, Verdict::Met);
        let bad = [
            purge(100, 1.0, 5.0),
            purge(1000, 2.0, 8.0),
            purge(10_000, 20.0, 70.0),
        ];
        let checks = checks_of(&bad, &[("store_mongo/purge/10000", 700e6)]);
        assert_eq!(find(&checks, "purge of N expired").verdict, Verdict::Missed);
        assert_eq!(find(&checks, "purge of N=10,000").verdict, Verdict::Missed);
    }

    #[test]
    fn engine_and_mem_thresholds() {
        let records = [
            rec("engine", "xlock", Some(1), None),
            rec("engine", "renew", Some(100_000), None),
            rec("store_mem", "lock_unlock", None, None),
        ];
        let checks = checks_of(
            &records,
            &[
                ("engine/xlock/1", 120.0),
                ("engine/renew/100000", 450.0),
                ("store_mem/lock_unlock", 900.0),
            ],
        );
        assert_eq!(
            find(&checks, "engine transition (pure): well").verdict,
            Verdict::Met
        );
        assert_eq!(find(&checks, "store-mem").verdict, Verdict::Met);
        let checks = checks_of(
            &records,
            &[
                ("engine/xlock/1", 120.0),
                ("engine/renew/100000", 650.0),
                ("store_mem/lock_unlock", 1100.0),
            ],
        );
        assert_eq!(
            find(&checks, "engine transition (pure): well").verdict,
            Verdict::Missed
        );
        assert_eq!(find(&checks, "store-mem").verdict, Verdict::Missed);
    }

    #[test]
    fn repeats_fold() {
        let names: Vec<String> = ["aggregate", "aggregate", "update", "commit"]
            .iter()
            .chain(["aggregate", "update", "commit"].iter())
            .chain(["delete"].iter())
            .map(|s| (*s).to_string())
            .collect();
        assert_eq!(
            fold_repeats(&names),
            "aggregate, [aggregate, update, commit] x2, delete"
        );
        let same: Vec<String> = vec!["find".into(); 3];
        assert_eq!(fold_repeats(&same), "find x3");
        assert_eq!(fold_duplicates(&same), ["find (x3)"]);
    }

    #[test]
    fn units() {
        assert_eq!(fmt_ns(412.0), "412 ns");
        assert_eq!(fmt_ns(1_500.0), "1.50 µs");
        assert_eq!(fmt_ns(2_500_000.0), "2.50 ms");
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(3.5), "3.50");
        assert_eq!(fmt_rate(2_500_000.0), "2.50 M");
    }
}
