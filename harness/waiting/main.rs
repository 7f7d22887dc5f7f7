//! Waiting Lockers, in memory (`store_mem/…`) and on MongoDB (`store_mongo/…`, needs
//! `MONGODB_URI`): each measurement runs for a window (or a number of rounds), prints what
//! it saw in one line, and runs with hints on and off, or fair and not fair, in the same
//! run, on a fresh collection (a fresh store in memory). Hints on is the default Locker
//! (fair waiting, woken by the store); hints off is plain polling
//! (`LockerConfig::wake_on_hints` off and racing waiters, [`measures::waiting_options`]),
//! the yardstick of the targets.
//! Not criterion benchmarks: what they measure is a distribution over many Lockers (a
//! handover's p99, grants per Locker, the longest wait) within one window, which
//! criterion's samples of one timed routine do not give; so this load harness is a program
//! of its own, which takes the criterion benches' arguments (a filter regex on the ids,
//! `--exact`, `--list`) and their modes: with `--bench`, every size the targets are stated
//! for (`LOCKWRIGHT_BENCH_QUICK=1`: smaller), without it the smallest, as a smoke run
//! (scripts/test runs it so), e.g. `cargo run -p lockwright-harness --release --example
//! waiting -- --bench fair_contended/64`.
//!
//! Every Locker is a `lockwright::Locker` on a store of its own ([`fleets`]), its calls
//! and its client's commands counted ([`tally`]). Locks have a 30 s TTL ([`TTL`]; nothing is
//! renewed while measured).
//!
//! - `waiting_cycle/hints_{on,off}`: one Locker per setting takes and releases a free lock,
//!   interleaved with a bare `xlock` + (untimed) `unlock_one` of the store, the uncontended
//!   grant the handover and crashed-holder targets are stated in.
//! - `handover/W/…`: W + 1 Lockers take one resource in turn, each holding it
//!   [`HANDOVER_HOLD`]; a Locker that released asks again only once another was granted
//!   (no barging). A sample is the time from a release returning to the next grant's
//!   acquire returning.
//! - `contended/N/…`: N Lockers loop acquire, hold [`CONTENDED_HOLD`], release, acquire
//!   again at once (the releaser may take it again).
//! - `crashed_holder/W/…`: a lock taken by the store directly with a TTL of [`CRASH_TTL`]
//!   and never renewed or released, on stores with a takeover grace of [`CRASH_GRACE`]; W
//!   Lockers wait for it; the first grant is timed from the lock's expiry + grace.
//! - Fair waiting (`fair_writer`, `fair_contended`, `fair_one_process`, `fair_abandoned`):
//!   see [`fair`].
//! - `contended_spread/N/…`: N Lockers on 16 resources (Locker `i` on resource `i % 16`),
//!   otherwise as `contended/N`.
//! - `idle_processes/N/…`: 8 Lockers contend on one resource while N other processes hold
//!   locks or wait far back: see [`idle`].
//! - `keep_place/P`: one keep-place write with P places in a line that does not move: see
//!   [`keep`].
//! - Leader election (`election_resign`, `election_killed`, `election_observed`): see
//!   [`election`].
//!
//! Where the server reports its CPU time (MongoDB's `serverStatus` on Linux), the worker
//! loops (`contended`, `contended_spread`, `fair_contended`, `idle_processes`) give the
//! server's CPU time per grant over their window.
//!
//! In memory every window is half as long as on MongoDB.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

#[path = "../shared/cpu.rs"]
mod cpu;
mod election;
mod fair;
mod fleets;
mod idle;
mod keep;
mod loops;
mod measures;
mod plan;
mod tally;

use std::time::Duration;

use lockwright_benches::{RunMode, Selected};

use crate::fleets::{Fleet, MemFleet, MongoFleet};
use crate::plan::Plan;

/// The TTL of every Locker's grant: long enough that nothing is renewed or expires while
/// it is measured.
const TTL: Duration = Duration::from_secs(30);
/// How long each grant is held in `handover/W`: long enough that polling waiters have
/// backed off past their first few attempts (with 8 waiters taking turns, the longest has
/// waited some 400 ms at a release), short enough for a few hundred handovers in the full
/// window.
const HANDOVER_HOLD: Duration = Duration::from_millis(50);
/// How long each grant is held in `contended/N` (the 5 ms).
const CONTENDED_HOLD: Duration = Duration::from_millis(5);
/// The TTL of the crashed holder's lock.
const CRASH_TTL: Duration = Duration::from_millis(500);
/// The takeover grace of the stores in `crashed_holder/W` (MongoDB's default is 2 s).
const CRASH_GRACE: Duration = Duration::from_millis(200);

/// Which of one group's measurements run, and how they are printed.
struct Run<'a> {
    group: &'a str,
    mode: RunMode,
    selected: &'a Selected,
}

impl Run<'_> {
    fn id(&self, function: &str, size: Option<usize>, setting: &str) -> String {
        match size {
            Some(n) => format!("{}/{function}/{n}/{setting}", self.group),
            None => format!("{}/{function}/{setting}", self.group),
        }
    }

    /// Whether the filter selects `function` at `size` in either setting.
    fn wanted(&self, function: &str, size: Option<usize>, settings: [&str; 2]) -> bool {
        settings
            .iter()
            .any(|s| self.selected.selects(&self.id(function, size, s)))
    }

    fn report(&self, function: &str, size: Option<usize>, setting: &str, line: &str) {
        self.mode.report(&self.id(function, size, setting), line);
    }
}

const HINTS: [&str; 2] = ["hints_off", "hints_on"];
const FAIRNESS: [&str; 2] = ["fair", "unfair"];

/// Every measurement of `plan` that the filter selects, on fleets made by `fleet` (with the
/// takeover grace given, or the store's default); hints off and on in turn (which goes
/// first alternates between sizes).
async fn run_all<F: Fleet>(run: &Run<'_>, plan: &Plan, fleet: impl AsyncFn(Option<Duration>) -> F) {
    let mut order = [false, true];
    if run.wanted("waiting_cycle", None, HINTS) {
        let f = fleet(None).await;
        let [on, off] = measures::cycle(&f, plan.cycle_warm_up, plan.cycle_rounds).await;
        run.report("waiting_cycle", None, "hints_on", &on);
        run.report("waiting_cycle", None, "hints_off", &off);
        f.finish().await;
    }
    let sizes = [
        ("handover", plan.handover_waiters),
        ("contended", plan.contended_lockers),
        ("crashed_holder", plan.crashed_waiters),
    ];
    for (function, sizes) in sizes {
        for &n in sizes {
            if !run.wanted(function, Some(n), HINTS) {
                continue;
            }
            for hints in order {
                let grace = (function == "crashed_holder").then_some(CRASH_GRACE);
                let f = fleet(grace).await;
                let line = match function {
                    "handover" => loops::handover(&f, n, hints, &plan.handover).await,
                    "contended" => loops::contended(&f, n, hints, &plan.contended).await,
                    _ => measures::crashed(&f, n, hints, plan.crashed_rounds).await,
                };
                run.report(function, Some(n), HINTS[usize::from(hints)], &line);
                f.finish().await;
            }
            order.reverse();
        }
    }
    for &(n, resources) in plan.spread {
        if run.wanted("contended_spread", Some(n), HINTS) {
            for hints in [true, false] {
                let f = fleet(None).await;
                let line = loops::spread(&f, (n, resources), hints, &plan.contended).await;
                run.report(
                    "contended_spread",
                    Some(n),
                    HINTS[usize::from(hints)],
                    &line,
                );
                f.finish().await;
            }
        }
    }
    for &n in plan.idle_processes {
        if run.wanted("idle_processes", Some(n), HINTS) {
            for hints in [true, false] {
                let f = fleet(None).await;
                let line = idle::idle_processes(&f, n, hints, &plan.idle).await;
                run.report("idle_processes", Some(n), HINTS[usize::from(hints)], &line);
                f.finish().await;
            }
        }
    }
    for &p in plan.keep_places {
        if run.wanted("keep_place", Some(p), ["fair", "fair"]) {
            let f = fleet(None).await;
            let line = keep::keep_place(&f, p, plan.keep_rounds).await;
            run.report("keep_place", Some(p), "fair", &line);
            f.finish().await;
        }
    }
    for &r in plan.fair_readers {
        if run.wanted("fair_writer", Some(r), FAIRNESS) {
            for (fair, setting) in [(true, "fair"), (false, "unfair")] {
                let f = fleet(None).await;
                let window = &plan.fair_writer;
                let line = fair::writer(&f, r, fair, plan.fair_writer_rounds, window).await;
                run.report("fair_writer", Some(r), setting, &line);
                f.finish().await;
            }
        }
    }
    for (function, one_process) in [("fair_contended", false), ("fair_one_process", true)] {
        for &n in plan.fair_lockers {
            if run.wanted(function, Some(n), FAIRNESS) {
                for (fair, setting) in [(true, "fair"), (false, "unfair")] {
                    let f = fleet(None).await;
                    let window = &plan.fair_contended;
                    let line = fair::contended(&f, (n, one_process), fair, window).await;
                    run.report(function, Some(n), setting, &line);
                    f.finish().await;
                }
            }
        }
    }
    for &n in plan.candidates {
        if run.wanted("election_resign", Some(n), ["fair", "fair"]) {
            let f = fleet(None).await;
            let line = election::resign(&f, n, plan.election_changes).await;
            run.report("election_resign", Some(n), "fair", &line);
            f.finish().await;
        }
        if run.wanted("election_killed", Some(n), ["fair", "fair"]) {
            let f = fleet(Some(CRASH_GRACE)).await;
            let line = election::killed(&f, n, plan.election_killed_rounds).await;
            run.report("election_killed", Some(n), "fair", &line);
            f.finish().await;
        }
    }
    for &n in plan.observers {
        if run.wanted("election_observed", Some(n), ["fair", "fair"]) {
            let f = fleet(None).await;
            let line = election::observed(&f, n, plan.observed_changes).await;
            run.report("election_observed", Some(n), "fair", &line);
            f.finish().await;
        }
    }
    for &w in plan.fair_dead {
        if run.wanted("fair_abandoned", Some(w), ["fair", "fair"]) {
            let f = fleet(None).await;
            let line = fair::abandoned(&f, w, plan.fair_abandoned_rounds).await;
            run.report("fair_abandoned", Some(w), "fair", &line);
            f.finish().await;
        }
    }
}

fn main() {
    let mode = RunMode::current();
    let selected = Selected::from_args();
    // A runtime of several workers: the Lockers' tasks and the clients' connections are
    // spread over the cores, as the processes they stand for would be.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = |group| Run {
        group,
        mode,
        selected: &selected,
    };
    rt.block_on(async {
        let plan = Plan::of(mode, 0.5);
        run_all(&run("store_mem"), &plan, async |grace| MemFleet::new(grace)).await;
        let plan = Plan::of(mode, 1.0);
        run_all(&run("store_mongo"), &plan, MongoFleet::new).await;
    });
}
