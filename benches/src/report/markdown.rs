//! The report in Markdown: the run's facts, the targets table, then one table per group
//! of benchmarks (and the Locker's measurements, which criterion did not take).

use std::fmt::Write as _;

use super::format::{fmt_ns, fmt_num, fmt_opt_ns, fmt_rate, fmt_us, fold_duplicates, fold_repeats};
use super::{Run, Verdict};
use crate::results::Record;

impl Verdict {
    /// How the targets table shows the verdict.
    fn label(self) -> &'static str {
        match self {
            Verdict::Met => "**met**",
            Verdict::Missed => "**MISSED**",
            Verdict::NotMeasured => "not measured",
        }
    }
}

impl Run<'_> {
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
            self.waiting_tables(&mut out, g);
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
            let times = round_trips(r);
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
        if rows.is_empty() {
            // Only measurements of the bench's own ran (criterion's filter chose them).
            return;
        }
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
                let times = round_trips(r);
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

/// The record's round-trip time per command name, one per line.
fn round_trips(r: &Record) -> String {
    r.command_time_us
        .iter()
        .map(|(c, us)| format!("{c} {}", fmt_us(*us)))
        .collect::<Vec<_>>()
        .join("<br>")
}
