//! The report at the end of a run: the checks' verdict and the tables (grants, errors by
//! variant, each failover and how the clients came back).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::LockerTotals;
use crate::args::Args;
use crate::driver::{Action, Direction, Failover};
use crate::observer::{Holding, Kind, LostWhy, Observer, Op, Stop};

/// The checks over what was observed, and the tables.
pub(crate) struct Report<'a> {
    pub(crate) args: &'a Args,
    pub(crate) epoch: Instant,
    pub(crate) obs: &'a Observer,
    pub(crate) failovers: &'a [Failover],
    pub(crate) planned: usize,
    pub(crate) totals: &'a LockerTotals,
    pub(crate) panics: &'a [String],
    pub(crate) hangs: &'a [String],
    /// Each member's wall clock minus this host's at the start (its `hello` `localTime`).
    pub(crate) clock_offsets: &'a [Result<i64, String>],
}

/// `member 0: +0 ms, member 1: +1 ms, member 2: +3000 ms`.
pub(crate) fn offsets_line(offsets: &[Result<i64, String>]) -> String {
    offsets
        .iter()
        .enumerate()
        .map(|(m, o)| match o {
            Ok(ms) => format!("member {m}: {ms:+} ms"),
            Err(e) => format!("member {m}: ? ({e})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the clients came back after one failover.
#[derive(Clone, Copy, Default)]
pub(crate) struct Recovery {
    /// From the failover to the first grant of any client.
    pub(crate) first: Option<Duration>,
    /// From the failover until every client had made a grant (`None` if some client did not
    /// before the next failover).
    pub(crate) all: Option<Duration>,
    /// Clients with no grant between this failover and the next.
    pub(crate) late: usize,
}

impl Report<'_> {
    pub(crate) fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    pub(crate) fn describe(&self, h: &Holding) -> String {
        format!(
            "client {} ({:?}) {} fence {} trusted {:.3}..{:.3} s (sent {:.3} s, {})",
            h.client,
            h.kind,
            if h.exclusive { "exclusive" } else { "shared" },
            h.fence,
            self.secs(h.start),
            self.secs(h.end),
            self.secs(h.sent),
            h.stop.name()
        )
    }

    /// Prints the tables; whether every check passed.
    #[allow(clippy::too_many_lines)]
    pub(crate) fn print(&self) -> bool {
        let obs = self.obs;
        let overlaps = self.overlaps();
        let fences = self.fence_regressions();
        let (recovery, never) = self.recovery();
        let failed_failovers = self.failovers.iter().filter(|f| f.error.is_some()).count()
            + self.planned.saturating_sub(self.failovers.len());
        let count = |kind: Kind, exclusive: Option<bool>| {
            obs.holdings
                .iter()
                .filter(|h| h.kind == kind && exclusive.is_none_or(|e| h.exclusive == e))
                .count()
        };
        let grants = obs.holdings.len();
        let exclusive = obs.holdings.iter().filter(|h| h.exclusive).count();
        let passed = overlaps.count == 0
            && fences.count == 0
            && obs.lost.is_empty()
            && never.is_empty()
            && self.panics.is_empty()
            && self.hangs.is_empty()
            && failed_failovers == 0
            && grants > 0;
        let mark = |n: usize| {
            if n == 0 {
                "0".to_string()
            } else {
                format!("**{n}**")
            }
        };

        let a = self.args;
        println!();
        println!(
            "{} clients ({} Locker, {} Client), {} resources, TTL {} ms, drift margin {} ms, shared limit {}, {} s, {}{}",
            a.clients,
            a.clients.div_ceil(2),
            a.clients / 2,
            a.resources,
            a.ttl_ms,
            a.drift_margin_ms,
            a.shared_limit,
            a.seconds,
            if a.no_failover {
                "no failover".to_string()
            } else {
                format!("a failover every {} s", a.every)
            },
            if a.break_holding_rule {
                " (--break-holding-rule: Client holders break the holding rule on purpose)"
            } else {
                ""
            }
        );
        println!();
        println!(
            "Takeover grace {} ms{}; {:.0}% of holds long (1 to 3 s); {} member(s), wall clock minus this host's at the start: {}{}",
            a.grace().as_millis(),
            if a.grace_ms.is_none() {
                " (the library's default)"
            } else {
                ""
            },
            a.long_hold_share * 100.0,
            self.clock_offsets.len(),
            offsets_line(self.clock_offsets),
            match a.shifted() {
                Some((m, ms)) if !a.no_failover =>
                    format!("; failovers go to and away from member {m} (--skew {m}={ms})"),
                _ => String::new(),
            }
        );
        println!();
        println!("| measure | Locker | Client | total |");
        println!("|---|---|---|---|");
        println!(
            "| grants (exclusive / shared) | {} ({} / {}) | {} ({} / {}) | {grants} ({exclusive} / {}) |",
            count(Kind::Locker, None),
            count(Kind::Locker, Some(true)),
            count(Kind::Locker, Some(false)),
            count(Kind::Client, None),
            count(Kind::Client, Some(true)),
            count(Kind::Client, Some(false)),
            grants - exclusive
        );
        let own = |kind: Kind| {
            obs.holdings
                .iter()
                .filter(|h| h.kind == kind && h.resource >= a.resources)
                .count()
        };
        println!(
            "| of which on the client's own resource (after {} ms without a grant) | {} | {} | {} |",
            a.starve_ms,
            own(Kind::Locker),
            own(Kind::Client),
            own(Kind::Locker) + own(Kind::Client)
        );
        let mut stops: BTreeMap<Stop, (usize, usize)> = BTreeMap::new();
        for h in &obs.holdings {
            let e = stops.entry(h.stop).or_default();
            match h.kind {
                Kind::Locker => e.0 += 1,
                Kind::Client => e.1 += 1,
            }
        }
        for (stop, (l, c)) in &stops {
            println!(
                "| holdings ended: {} | {l} | {c} | {} |",
                stop.name(),
                l + c
            );
        }
        println!(
            "| renewals (the Locker's: ok / failed attempts / locks lost) | {} / {} / {} | {} | |",
            self.totals.renewals, self.totals.renew_failures, self.totals.lost, obs.renewals
        );
        let locker_lost = |why: LostWhy| {
            obs.holdings
                .iter()
                .filter(|h| h.kind == Kind::Locker && h.stop == Stop::Lost(Some(why)))
                .count()
        };
        let (expired, refused) = (locker_lost(LostWhy::Expired), locker_lost(LostWhy::Refused));
        let (not_renewable, not_found) = obs.renew_refused;
        println!(
            "| leases lost early (Locker: lost expired / refused; Client: renewal NotRenewable / LockNotFound once untrusted) | {expired} / {refused} | {not_renewable} / {not_found} | {} |",
            expired as u64 + refused as u64 + not_renewable + not_found
        );
        println!("| refusals | | | {} |", obs.refusals);
        println!(
            "| grant errors, outcome unknown (released, not counted as grants) | | | {} |",
            obs.unknown
        );
        println!(
            "| probes of held locks: found / inconclusive | | | {} / {} |",
            obs.found, obs.inconclusive
        );
        if a.purge_every_ms > 0 {
            println!(
                "| purges (every {} ms): done / locks removed | | | {} / {} |",
                a.purge_every_ms, obs.purges, obs.purged
            );
        }
        println!("| overlaps | | | {} |", mark(overlaps.count));
        if overlaps.count > 0 {
            println!(
                "| longest overlap (both holders trusted their locks) | | | {} ms |",
                overlaps.longest.as_millis()
            );
        }
        println!("| fence regressions | | | {} |", mark(fences.count));
        println!("| lost grants | | | {} |", mark(obs.lost.len()));
        println!(
            "| clients that never recovered | | | {} |",
            mark(never.len())
        );
        println!(
            "| panics / hangs | | | {} / {} |",
            mark(self.panics.len()),
            mark(self.hangs.len())
        );
        println!(
            "| failovers done / failed | | | {} / {} |",
            self.failovers.len() - self.failovers.iter().filter(|f| f.error.is_some()).count(),
            mark(failed_failovers)
        );
        println!(
            "| **result** | | | {} |",
            if passed { "PASS" } else { "**FAIL**" }
        );

        let mut variants: Vec<&'static str> =
            vec!["Backend", "Malformed", "Misconfigured", "Timeout"];
        for (_, v) in obs.errors.keys() {
            if !variants.contains(v) {
                variants.push(v);
            }
        }
        println!();
        println!("| errors by variant | {} |", variants.join(" | "));
        println!("|---|{}", "---|".repeat(variants.len()));
        let ops: Vec<Op> = {
            let mut ops: Vec<Op> = obs.errors.keys().map(|(op, _)| *op).collect();
            ops.dedup();
            ops
        };
        if ops.is_empty() {
            println!("| (none) |{}", " 0 |".repeat(variants.len()));
        }
        for op in ops {
            let cells: Vec<String> = variants
                .iter()
                .map(|v| obs.errors.get(&(op, v)).copied().unwrap_or(0).to_string())
                .collect();
            println!("| {} | {} |", op.name(), cells.join(" | "));
        }

        println!();
        println!(
            "| failover | at | action | primary was | command took | new primary | elected after | first grant after | every client granted again after | clients not back before the next | member restarted in |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        if self.failovers.is_empty() {
            println!("| (none) | | | | | | | | | | |");
        }
        let mut rows = recovery.iter();
        for f in self.failovers {
            let fmt =
                |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()));
            let Recovery { first, all, late } = if f.member.is_some() {
                rows.next().copied().unwrap_or_default()
            } else {
                Recovery::default()
            };
            let member = |m: Option<usize>| {
                m.map_or("?".into(), |m| {
                    let ms = self.clock_offsets.get(m).and_then(|o| o.as_ref().ok());
                    match (a.shifted(), ms) {
                        (Some(_), Some(ms)) => format!("member {m} ({ms:+} ms)"),
                        _ => format!("member {m}"),
                    }
                })
            };
            println!(
                "| {} | {:.1} s | {}{} | {} | {:.2} s | {} | {} | {} | {} | {} | {} |",
                f.n,
                self.secs(f.at),
                match f.action {
                    Action::StepDown => "replSetStepDown",
                    Action::StepUp => "replSetStepUp",
                    Action::Kill => "SIGKILL + restart",
                },
                match f.direction {
                    Direction::Any => "",
                    Direction::ToShifted => ", to the shifted member",
                    Direction::FromShifted => ", away from it",
                },
                member(f.member),
                f.took.as_secs_f64(),
                member(f.new_primary),
                fmt(f.elected),
                fmt(first),
                fmt(all),
                late,
                match (&f.error, f.restart) {
                    (Some(e), _) => format!("FAILED: {e}"),
                    (None, Some(d)) => format!("{:.2} s", d.as_secs_f64()),
                    (None, None) => "-".into(),
                }
            );
        }

        let section = |title: &str, items: &[String]| {
            if !items.is_empty() {
                println!();
                println!("{title}:");
                for i in items.iter().take(10) {
                    println!("  - {i}");
                }
                if items.len() > 10 {
                    println!("  - ... and {} more", items.len() - 10);
                }
            }
        };
        section("overlaps", &overlaps.examples);
        section("fence regressions", &fences.examples);
        section("lost grants", &obs.lost);
        section(
            "clients that made no grant after the last failover",
            &never
                .iter()
                .map(|c| format!("client {c}"))
                .collect::<Vec<_>>(),
        );
        section("panicked tasks", self.panics);
        section("hung tasks (aborted)", self.hangs);
        section(
            "failed failovers",
            &self
                .failovers
                .iter()
                .filter_map(|f| f.error.clone())
                .collect::<Vec<_>>(),
        );
        let firsts: Vec<String> = obs
            .first_error
            .iter()
            .map(|((op, v), m)| format!("{} {v}: {m}", op.name()))
            .collect();
        if !firsts.is_empty() {
            println!();
            println!("first error of each kind:");
            for f in firsts {
                println!("  - {f}");
            }
        }
        passed
    }
}
