//! The waiting measurements (issue 25, waiters woken by the store) in the report: their
//! checks, each with hints on against one uncontended grant or against polling (hints
//! off) in the same run, and their tables.

use std::fmt::Write as _;

use super::format::{fmt_ns, fmt_num};
use super::{Run, Verdict};
use crate::results::Record;
use crate::waiting::{CONTENDED, CRASHED, CYCLE, FUNCTIONS, HANDOVER, key, parameter};

/// What a judgement found: the evidence and the verdict; `None` when nothing was measured.
type Judged = Option<(String, Verdict)>;

fn x(r: &Record, k: &str) -> f64 {
    r.extra.get(k).copied().unwrap_or(f64::NAN)
}

/// A time kept in ms, with a readable unit.
fn ms(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v < 0.0 {
        format!("-{}", fmt_ns(-v * 1e6))
    } else {
        fmt_ns(v * 1e6)
    }
}

/// ` (no hint subscription: these Lockers polled)` for hints-on records whose store gave
/// none.
fn polled_anyway(r: &Record) -> &'static str {
    if x(r, key::HINTS) > 0.0 && x(r, key::SUBSCRIPTIONS) == 0.0 {
        " (the store gave no hint subscription: these Lockers polled)"
    } else {
        ""
    }
}

/// The verdict of per-size judgements: missed if any missed, met once every size of
/// `judged` was judged, otherwise not measured.
fn combined(results: &[(u64, bool)], judged: &[u64]) -> Verdict {
    if results.iter().any(|(_, ok)| !ok) {
        Verdict::Missed
    } else if judged
        .iter()
        .all(|size| results.iter().any(|(s, _)| s == size))
    {
        Verdict::Met
    } else {
        Verdict::NotMeasured
    }
}

impl Run<'_> {
    /// The waiting record of `group`/`function` at `size`, hints on or off.
    pub(crate) fn waiting(
        &self,
        group: &str,
        function: &str,
        size: Option<u64>,
        hints: bool,
    ) -> Option<&Record> {
        let wanted = parameter(size, hints);
        self.records.iter().find(|r| {
            r.group == group && r.function == function && r.parameter.as_deref() == Some(&wanted)
        })
    }

    /// The sizes `function` of `group` was measured at (either setting), smallest first.
    fn waiting_sizes(&self, group: &str, function: &str) -> Vec<u64> {
        let mut sizes: Vec<u64> = self
            .find(group, function)
            .iter()
            .filter_map(|r| r.size)
            .collect();
        sizes.dedup();
        sizes
    }

    /// One uncontended grant, in ms: the bare xlock's median in the cycle's rounds.
    fn uncontended_grant_ms(&self, group: &str) -> Option<f64> {
        [true, false]
            .iter()
            .filter_map(|h| self.waiting(group, CYCLE, None, *h))
            .map(|r| x(r, key::XLOCK_P50_MS))
            .find(|v| !v.is_nan())
    }

    pub(crate) fn handover_check(&self, group: &str, judged: &[u64], p50: f64, p99: f64) -> Judged {
        let grant = self.uncontended_grant_ms(group)?;
        let mut parts = Vec::new();
        let mut results = Vec::new();
        for size in self.waiting_sizes(group, HANDOVER) {
            let mut part = format!("W={size}:");
            if let Some(on) = self.waiting(group, HANDOVER, Some(size), true) {
                let (a, b) = (x(on, key::P50_MS) / grant, x(on, key::P99_MS) / grant);
                if judged.contains(&size) {
                    results.push((size, a <= p50 && b <= p99));
                }
                let _ = write!(
                    part,
                    " hints on p50 {} ({a:.2}x), p99 {} ({b:.2}x), max {} over {} handovers{}",
                    ms(x(on, key::P50_MS)),
                    ms(x(on, key::P99_MS)),
                    ms(x(on, key::MAX_MS)),
                    fmt_num(x(on, key::SAMPLES)),
                    polled_anyway(on),
                );
            }
            if let Some(off) = self.waiting(group, HANDOVER, Some(size), false) {
                let _ = write!(
                    part,
                    "; polling p50 {} ({:.2}x), p99 {}, max {}",
                    ms(x(off, key::P50_MS)),
                    x(off, key::P50_MS) / grant,
                    ms(x(off, key::P99_MS)),
                    ms(x(off, key::MAX_MS)),
                );
            }
            parts.push(part);
        }
        if parts.is_empty() {
            return None;
        }
        let evidence = format!(
            "one uncontended grant {}<br>{}",
            ms(grant),
            parts.join("<br>")
        );
        Some((evidence, combined(&results, judged)))
    }

    pub(crate) fn crashed_check(&self, group: &str, round_trips: f64) -> Judged {
        let grant = self.uncontended_grant_ms(group)?;
        let rows = self.find(group, CRASHED);
        if rows.is_empty() {
            return None;
        }
        let mut ok = true;
        let parts: Vec<String> = rows
            .iter()
            .map(|r| {
                let median = x(r, key::P50_MS);
                ok &= median <= round_trips * grant;
                format!(
                    "W={} hints {}: median {} ({:.2} grants), max {} over {} round(s)",
                    r.size.unwrap_or_default(),
                    if x(r, key::HINTS) > 0.0 { "on" } else { "off" },
                    ms(median),
                    median / grant,
                    ms(x(r, key::MAX_MS)),
                    fmt_num(x(r, key::SAMPLES)),
                )
            })
            .collect();
        let first = rows[0];
        let evidence = format!(
            "one uncontended grant {}; TTL {}, grace {}, the crashed grant's round trip {} \
             (its expiry is placed at its middle)<br>{}",
            ms(grant),
            ms(x(first, key::TTL_MS)),
            ms(x(first, key::GRACE_MS)),
            ms(x(first, key::CRASH_RTT_MS)),
            parts.join("<br>")
        );
        Some((evidence, if ok { Verdict::Met } else { Verdict::Missed }))
    }

    pub(crate) fn herd_check(&self, group: &str, lockers: u64, ratio: f64) -> Judged {
        let mut parts = Vec::new();
        let mut results = Vec::new();
        for size in self.waiting_sizes(group, CONTENDED) {
            let (on, off) = (
                self.waiting(group, CONTENDED, Some(size), true),
                self.waiting(group, CONTENDED, Some(size), false),
            );
            let counts = |r: &Record| {
                format!(
                    "{} lock commands per grant ({}), {} attempts, {} change-stream \
                     commands, {} write conflicts",
                    fmt_num(x(r, key::LOCK_PER_GRANT)),
                    per_name(r, true),
                    fmt_num(x(r, key::ATTEMPTS_PER_GRANT)),
                    fmt_num(x(r, key::STREAM_PER_GRANT)),
                    conflicts(r),
                )
            };
            let mut part = format!("N={size}:");
            if let Some(on) = on {
                let _ = write!(part, " hints on {}{}", counts(on), polled_anyway(on));
            }
            if let Some(off) = off {
                let _ = write!(part, "; polling {}", counts(off));
            }
            if let (Some(on), Some(off)) = (on, off) {
                let r = x(on, key::LOCK_PER_GRANT) / x(off, key::LOCK_PER_GRANT);
                let _ = write!(part, "; lock commands {r:.2}x polling's");
                if size == lockers {
                    results.push((size, r <= ratio));
                }
            }
            parts.push(part);
        }
        if parts.is_empty() {
            return None;
        }
        Some((parts.join("<br>"), combined(&results, &[lockers])))
    }

    pub(crate) fn throughput_check(&self, group: &str, judged: &[u64]) -> Judged {
        let mut parts = Vec::new();
        let mut results = Vec::new();
        for size in self.waiting_sizes(group, CONTENDED) {
            let (on, off) = (
                self.waiting(group, CONTENDED, Some(size), true),
                self.waiting(group, CONTENDED, Some(size), false),
            );
            let line = |r: &Record| {
                format!(
                    "{:.1} grants/s, longest wait {}, grants per Locker {} to {}",
                    x(r, key::GRANTS_PER_S),
                    ms(x(r, key::LONGEST_WAIT_MS)),
                    fmt_num(x(r, key::GRANTS_MIN)),
                    fmt_num(x(r, key::GRANTS_MAX)),
                )
            };
            let mut part = format!("N={size}:");
            if let Some(on) = on {
                let _ = write!(part, " hints on {}{}", line(on), polled_anyway(on));
            }
            if let Some(off) = off {
                let _ = write!(part, "; polling {}", line(off));
            }
            if let (Some(on), Some(off)) = (on, off) {
                let r = x(on, key::GRANTS_PER_S) / x(off, key::GRANTS_PER_S);
                let _ = write!(part, "; {r:.2}x polling's grants/s");
                if judged.contains(&size) {
                    results.push((size, r >= 1.0));
                }
            }
            parts.push(part);
        }
        if parts.is_empty() {
            return None;
        }
        Some((parts.join("<br>"), combined(&results, judged)))
    }

    pub(crate) fn hints_cycle_check(&self, group: &str, ratio: f64) -> Judged {
        let on = self.waiting(group, CYCLE, None, true)?;
        let off = self.waiting(group, CYCLE, None, false)?;
        let r = x(on, key::P50_MS) / x(off, key::P50_MS);
        let evidence = format!(
            "median over {} interleaved rounds: hints on {} (acquire {}, release {}), off {} \
             (acquire {}, release {}) = {r:.2}x; with hints {} change-stream commands per \
             cycle{}; a bare xlock {}",
            fmt_num(x(on, key::SAMPLES)),
            ms(x(on, key::P50_MS)),
            ms(x(on, key::ACQUIRE_P50_MS)),
            ms(x(on, key::RELEASE_P50_MS)),
            ms(x(off, key::P50_MS)),
            ms(x(off, key::ACQUIRE_P50_MS)),
            ms(x(off, key::RELEASE_P50_MS)),
            fmt_num(x(on, key::STREAM_PER_GRANT)),
            polled_anyway(on),
            ms(x(on, key::XLOCK_P50_MS)),
        );
        Some((
            evidence,
            if r <= ratio {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ))
    }

    /// The waiting measurements of `group`, if any: one table per kind.
    pub(crate) fn waiting_tables(&self, out: &mut String, group: &str) {
        let rows = |function: &str| -> Vec<&Record> {
            self.find(group, function)
                .into_iter()
                .filter(|r| r.custom)
                .collect()
        };
        if FUNCTIONS.iter().all(|f| rows(f).is_empty()) {
            return;
        }
        let _ = writeln!(
            out,
            "### {group}: waiting Lockers, hints on and off\n\n\
             Measured by the bench, not criterion (benches/README.md says how). Every Locker \
             is on a store of its own; `subscriptions` counts the hint streams the stores \
             gave (0 with hints on: the store has none, and the Lockers polled). Counts are \
             per grant (per cycle, per crashed lock): lock commands (MongoDB's \
             findAndModify and update; in memory the store's lock calls), attempts (the \
             store's xlock calls), change-stream commands (aggregate, getMore, killCursors; \
             in memory hint subscriptions), and the server's write conflicts (concurrent \
             writes to the one document that the server retried; MongoDB only).\n"
        );
        let name = |r: &Record| r.id().trim_start_matches(&format!("{group}/")).to_string();
        let counts = |r: &Record| {
            format!(
                "{} | {} | {} | {} | {} | {}",
                fmt_num(x(r, key::SUBSCRIPTIONS)),
                fmt_num(x(r, key::LOCK_PER_GRANT)),
                fmt_num(x(r, key::ATTEMPTS_PER_GRANT)),
                fmt_num(x(r, key::STREAM_PER_GRANT)),
                conflicts(r),
                per_name(r, false),
            )
        };
        let head = "subscriptions | lock commands | attempts | stream commands | write conflicts | by name";
        let cycle = rows(CYCLE);
        if !cycle.is_empty() {
            let _ = writeln!(
                out,
                "| benchmark | rounds | p50 | p99 | acquire p50 | release p50 | bare xlock p50 | {head} |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for r in cycle {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    name(r),
                    fmt_num(x(r, key::SAMPLES)),
                    ms(x(r, key::P50_MS)),
                    ms(x(r, key::P99_MS)),
                    ms(x(r, key::ACQUIRE_P50_MS)),
                    ms(x(r, key::RELEASE_P50_MS)),
                    ms(x(r, key::XLOCK_P50_MS)),
                    counts(r),
                );
            }
            out.push('\n');
        }
        let handover = rows(HANDOVER);
        if !handover.is_empty() {
            let _ = writeln!(
                out,
                "| benchmark | hold | window | grants | handovers | p50 | p99 | max | early | {head} |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for r in handover {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} s | {} | {} | {} | {} | {} | {} | {} |",
                    name(r),
                    ms(x(r, key::HOLD_MS)),
                    x(r, key::SECONDS),
                    fmt_num(x(r, key::GRANTS)),
                    fmt_num(x(r, key::SAMPLES)),
                    ms(x(r, key::P50_MS)),
                    ms(x(r, key::P99_MS)),
                    ms(x(r, key::MAX_MS)),
                    fmt_num(x(r, key::EARLY)),
                    counts(r),
                );
            }
            out.push('\n');
        }
        let contended = rows(CONTENDED);
        if !contended.is_empty() {
            let _ = writeln!(
                out,
                "| benchmark | hold | window | grants | grants/s | longest wait | grants per Locker (min to max) | {head} |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for r in contended {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1} s | {} | {:.1} | {} | {} to {} | {} |",
                    name(r),
                    ms(x(r, key::HOLD_MS)),
                    x(r, key::SECONDS),
                    fmt_num(x(r, key::GRANTS)),
                    x(r, key::GRANTS_PER_S),
                    ms(x(r, key::LONGEST_WAIT_MS)),
                    fmt_num(x(r, key::GRANTS_MIN)),
                    fmt_num(x(r, key::GRANTS_MAX)),
                    counts(r),
                );
            }
            out.push('\n');
        }
        let crashed = rows(CRASHED);
        if !crashed.is_empty() {
            let _ = writeln!(
                out,
                "| benchmark | TTL | grace | rounds | first grant after expiry + grace: median | min | max | crashed grant's round trip | {head} |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for r in crashed {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    name(r),
                    ms(x(r, key::TTL_MS)),
                    ms(x(r, key::GRACE_MS)),
                    fmt_num(x(r, key::SAMPLES)),
                    ms(x(r, key::P50_MS)),
                    ms(x(r, key::MIN_MS)),
                    ms(x(r, key::MAX_MS)),
                    ms(x(r, key::CRASH_RTT_MS)),
                    counts(r),
                );
            }
            out.push('\n');
        }
    }
}

/// The server's write conflicts per grant, `-` where the server has no such counter.
fn conflicts(r: &Record) -> String {
    r.extra
        .get(key::WRITE_CONFLICTS)
        .map_or_else(|| "-".into(), |n| fmt_num(*n))
}

/// The record's commands per grant by name, most first (only the lock commands with
/// `lock_only`).
fn per_name(r: &Record, lock_only: bool) -> String {
    let parts: Vec<String> = r
        .command_names
        .iter()
        .filter(|name| !lock_only || crate::waiting::kind(name) == crate::waiting::Kind::Lock)
        .filter_map(|name| {
            let n = r.extra.get(&format!("{}{name}", key::PER_GRANT_PREFIX))?;
            Some(format!("{name} {}", fmt_num(*n)))
        })
        .collect();
    parts.join(", ")
}
