//! Queries over one run's results: a benchmark's record and median, the record a ratio is
//! taken against, and the diagnostic rows that stand beside a target's evidence.

use super::Run;
use super::format::fmt_opt_ns;
use crate::results::Record;

impl Run<'_> {
    /// Criterion's median of `r`, in ns per iteration.
    pub(crate) fn median(&self, r: &Record) -> Option<f64> {
        self.medians.get(&r.id()).copied()
    }

    /// The records of `group`/`function`, smallest size first.
    pub(crate) fn find(&self, group: &str, function: &str) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.group == group && r.function == function)
            .collect();
        v.sort_by_key(|r| r.size);
        v
    }

    /// The record of `group`/`function` (the smallest size when there are several).
    pub(crate) fn one(&self, group: &str, function: &str) -> Option<&Record> {
        self.find(group, function).into_iter().next()
    }

    /// The record of `group`/`function` at `size`.
    pub(crate) fn sized(&self, group: &str, function: &str, size: u64) -> Option<&Record> {
        self.find(group, function)
            .into_iter()
            .find(|r| r.size == Some(size))
    }

    /// The record a row's ratio is taken against: the baseline for single MongoDB paths,
    /// the smallest size of the same function for sized ones.
    pub(crate) fn reference(&self, r: &Record) -> Option<(&Record, String)> {
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
    pub(crate) fn against_baseline(&self, function: &str) -> Option<(&Record, &Record, f64, f64)> {
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

    /// `r`'s median over `to`'s.
    pub(crate) fn ratio(&self, r: &Record, to: &Record) -> Option<f64> {
        Some(self.median(r)? / self.median(to)?)
    }

    /// `; label: what (measure), what (measure)` for the diagnostic rows of `group` that ran,
    /// to stand beside a target's evidence; empty when none did.
    pub(crate) fn diagnostics(
        &self,
        group: &str,
        label: &str,
        rows: &[(&str, &str)],
        measure: impl Fn(&Record) -> Option<String>,
    ) -> String {
        let found: Vec<String> = rows
            .iter()
            .filter_map(|(what, function)| {
                let r = self.one(group, function)?;
                Some(format!("{what} {}", measure(r)?))
            })
            .collect();
        if found.is_empty() {
            return String::new();
        }
        format!("; {label}: {}", found.join(", "))
    }

    /// `; criterion medians A vs B = R x` when both ran.
    pub(crate) fn criterion_ratio(&self, r: &Record, b: &Record) -> String {
        self.ratio(r, b).map_or_else(String::new, |c| {
            format!(
                "; criterion medians {} vs {} = {c:.2}x",
                fmt_opt_ns(self.median(r)),
                fmt_opt_ns(self.median(b)),
            )
        })
    }

    /// Of `rows`, the one with the highest median per element, and that median.
    pub(crate) fn slowest<'r>(&self, rows: &[&'r Record]) -> Option<(&'r Record, f64)> {
        rows.iter()
            .filter_map(|r| Some((*r, self.median(r)? / r.elements as f64)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}
