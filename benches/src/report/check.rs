//! The one check: how a run fares against a target of the table ([`super::targets`]),
//! worked out the way its [`Judge`] says.

use std::fmt::Write as _;

use super::format::{fmt_ns, fmt_num, fmt_opt_ns, fmt_rate, fmt_us, fold_repeats};
use super::targets::{Judge, Listing, Measure, Target, locker_bound};
use super::{Check, Run, Verdict};
use crate::results::Record;

/// What a judgement found: the evidence and the verdict; `None` when nothing was measured.
type Judged = Option<(String, Verdict)>;

impl Run<'_> {
    /// How this run fares against `target`.
    #[must_use]
    pub fn check(&self, target: &Target) -> Check {
        let judged = match target.judge {
            Judge::AgainstBaseline {
                commands,
                ratio,
                also,
            } => self.against_baseline_check(target, commands, ratio, also),
            Judge::OneCommandEach {
                status,
                judged,
                shown,
            } => self.one_command_check(target, status, judged, shown),
            Judge::SameCommandsForEveryK { one_at_most, ks } => {
                self.group_commands_check(target, one_at_most, ks)
            }
            Judge::SizeRatio {
                small,
                large,
                ratio,
            } => self.size_ratio_check(target, small, large, ratio),
            Judge::LockerCommands { n } => self.locker_check(target, n),
            Judge::LinearInBatches => self.linear_in_batches_check(target),
            Judge::MedianAtMost { size, bound_ns } => self.median_check(target, size, bound_ns),
            Judge::Indexed { filters } => self.indexed_check(target, filters),
            Judge::SlowestAtMost { bound_ns, listing } => {
                self.slowest_check(target, bound_ns, listing)
            }
            Judge::RateAbove { per_sec } => self.rate_check(target, per_sec),
            Judge::Handover { waiters, p50, p99 } => {
                self.handover_check(target.group, waiters, p50, p99)
            }
            Judge::CrashedHolder { round_trips } => self.crashed_check(target.group, round_trips),
            Judge::NoHerd { lockers, ratio } => self.herd_check(target.group, lockers, ratio),
            Judge::Throughput { lockers } => self.throughput_check(target.group, lockers),
            Judge::HintsCycle { ratio } => self.hints_cycle_check(target.group, ratio),
        };
        let (evidence, verdict) =
            judged.unwrap_or_else(|| ("no measurement in this run".into(), Verdict::NotMeasured));
        Check {
            target: target.name.to_string(),
            threshold: target.threshold.clone(),
            evidence,
            verdict,
        }
    }

    /// The target's diagnostic rows as they stand beside its evidence (empty when it has
    /// none, or none ran); `small` is what [`Measure::TimesSmall`] divides by.
    fn beside(&self, t: &Target, small: Option<(&Record, String)>) -> String {
        let Some(d) = &t.diagnostics else {
            return String::new();
        };
        self.diagnostics(t.group, d.label, d.rows, |r| match d.measure {
            Measure::Interleaved => {
                let interleaved = r.extra.get("paired_ratio")?;
                Some(format!("{interleaved:.2}x interleaved"))
            }
            Measure::TimesSmall => {
                let (small, label) = small.as_ref()?;
                Some(format!(
                    "{:.2}x {label}",
                    self.median(r)? / self.median(small)?
                ))
            }
            Measure::Median => Some(fmt_ns(self.median(r)?)),
        })
    }

    fn against_baseline_check(
        &self,
        t: &Target,
        commands: f64,
        max_ratio: f64,
        also: Option<(&str, &str)>,
    ) -> Judged {
        let (r, b, cmds, ratio) = self.against_baseline(t.functions[0])?;
        let ok = (cmds - commands).abs() < 1e-9 && ratio <= max_ratio;
        let unit = if (commands - 1.0).abs() < 1e-9 {
            "command/op"
        } else {
            "commands/op"
        };
        let mut evidence = format!(
            "{} {unit} ({}){}{}",
            fmt_num(cmds),
            r.command_names.join(", "),
            paired(r),
            self.criterion_ratio(r, b),
        );
        evidence += &self.beside(t, None);
        if let Some((label, function)) = also
            && let Some(shown) = self.one(t.group, function)
        {
            let interleaved = shown
                .extra
                .get("paired_ratio")
                .map_or_else(String::new, |x| {
                    format!(", {x:.2}x the baseline interleaved")
                });
            let _ = write!(
                evidence,
                "; {label} (not judged): {} commands ({}){interleaved}",
                shown.commands.map_or_else(|| "-".into(), fmt_num),
                shown.command_names.join(", "),
            );
        }
        Some((evidence, verdict(ok)))
    }

    fn one_command_check(
        &self,
        t: &Target,
        status: &str,
        judged_filters: &[&str],
        shown_filters: &[&str],
    ) -> Judged {
        let status = |kind: &str| {
            self.find(t.group, status)
                .into_iter()
                .find(|r| r.parameter.as_deref() == Some(kind))
        };
        let mut judged: Vec<(String, Option<&Record>)> = t
            .functions
            .iter()
            .map(|f| ((*f).to_string(), self.one(t.group, f)))
            .collect();
        for kind in judged_filters {
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
        for kind in shown_filters {
            if let Some(r) = status(kind) {
                parts.push(described(
                    &format!("status with a TTL bound ({kind}, not judged)"),
                    r,
                ));
            }
        }
        if parts.is_empty() {
            return None;
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
        Some((format!("commands/op {}", parts.join("; ")), verdict))
    }

    fn group_commands_check(&self, t: &Target, one_at_most: f64, ks: &[u64]) -> Judged {
        let rows = self.find(t.group, t.functions[0]);
        if rows.len() < 2 || rows.iter().any(|r| r.commands.is_none()) {
            return None;
        }
        let (ones, many): (Vec<&Record>, Vec<&Record>) =
            rows.iter().partition(|r| r.size == Some(1));
        let one_ok = ones
            .iter()
            .all(|r| r.commands.is_some_and(|c| c <= one_at_most + 1e-9));
        let first_many = many.first().and_then(|r| r.commands).unwrap_or_default();
        let same = many
            .iter()
            .all(|r| r.commands.is_some_and(|c| (c - first_many).abs() < 1e-9));
        let all_k = ks.iter().all(|k| rows.iter().any(|r| r.size == Some(*k)));
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
        let verdict = if !one_ok || !same {
            Verdict::Missed
        } else if all_k {
            Verdict::Met
        } else {
            Verdict::NotMeasured
        };
        Some((format!("commands/op {}", evidence.join("; ")), verdict))
    }

    fn size_ratio_check(&self, t: &Target, small: u64, large: u64, max_ratio: f64) -> Judged {
        let function = t.functions[0];
        let lo = self.sized(t.group, function, small)?;
        let hi = self.sized(t.group, function, large)?;
        let ratio = self.ratio(hi, lo)?;
        let commands = |r: &Record| r.commands.map_or_else(|| "-".into(), fmt_num);
        let evidence = format!(
            "K={small} {} ({} commands), K={large} {} ({} commands) = {ratio:.2}x{}",
            fmt_opt_ns(self.median(lo)),
            commands(lo),
            fmt_opt_ns(self.median(hi)),
            commands(hi),
            self.beside(t, Some((lo, format!("K={small}")))),
        );
        Some((evidence, verdict(ratio <= max_ratio)))
    }

    fn locker_check(&self, t: &Target, n: u64) -> Judged {
        let bound = locker_bound(n);
        let rows: Vec<&Record> = self
            .find(t.group, t.functions[0])
            .into_iter()
            .filter(|r| r.commands.is_some())
            .collect();
        if rows.is_empty() {
            return None;
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
        Some((evidence, verdict))
    }

    fn linear_in_batches_check(&self, t: &Target) -> Judged {
        let rows: Vec<(u64, f64, f64)> = self
            .find(t.group, t.functions[0])
            .into_iter()
            .filter_map(|r| Some((r.size?, r.extra.get("batches").copied()?, r.commands?)))
            .collect();
        if rows.len() < 3 {
            return None;
        }
        let ((_, b0, c0), (_, b1, c1)) = (rows[0], rows[1]);
        if (b1 - b0).abs() < 1e-9 {
            return None;
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
        let evidence = format!(
            "{evidence}; fit: {} + {} per batch",
            fmt_num(fixed),
            fmt_num(per_batch)
        );
        Some((evidence, verdict(fits)))
    }

    fn median_check(&self, t: &Target, size: u64, bound_ns: f64) -> Judged {
        let r = self.sized(t.group, t.functions[0], size)?;
        let m = self.median(r)?;
        let evidence = format!("median {}{}", fmt_ns(m), self.beside(t, None));
        Some((evidence, verdict(m <= bound_ns)))
    }

    fn indexed_check(&self, t: &Target, filters: &[&str]) -> Judged {
        let rows: Vec<&Record> = self
            .find(t.group, t.functions[0])
            .into_iter()
            .filter(|r| r.parameter.as_deref().is_some_and(|p| filters.contains(&p)))
            .collect();
        if rows.len() < filters.len() || rows.iter().any(|r| r.plans.is_empty()) {
            return None;
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
        Some((evidence, verdict(ok)))
    }

    fn slowest_check(&self, t: &Target, bound_ns: f64, listing: Listing) -> Judged {
        let rows: Vec<&Record> = t
            .functions
            .iter()
            .flat_map(|f| self.find(t.group, f))
            .collect();
        let (worst, ns) = self.slowest(&rows)?;
        let all = || {
            rows.iter()
                .filter_map(|r| Some(format!("{}: {}", r.size?, fmt_ns(self.median(r)?))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let evidence = match listing {
            Listing::Count => format!(
                "{} benchmarks; slowest {} at {}",
                rows.len(),
                worst.id(),
                fmt_ns(ns)
            ),
            Listing::Pairs => format!("pairs {}; slowest {}", all(), worst.id()),
            Listing::PerLock => format!(
                "medians {}; worst per lock {} ({})",
                all(),
                fmt_ns(ns),
                worst.id()
            ),
        };
        Some((evidence, verdict(ns <= bound_ns)))
    }

    fn rate_check(&self, t: &Target, per_sec: f64) -> Judged {
        let m = self
            .one(t.group, t.functions[0])
            .and_then(|r| self.median(r))?;
        let rate = 1e9 / m;
        let evidence = format!("median {} per pair = {} pairs/s", fmt_ns(m), fmt_rate(rate));
        Some((evidence, verdict(rate > per_sec)))
    }
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
