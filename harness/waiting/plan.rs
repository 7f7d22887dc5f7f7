//! How long each waiting measurement runs, and on which sizes, in each mode.

use std::time::{Duration, Instant};

use lockwright_benches::RunMode;

/// How long a windowed measurement runs.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Before the count starts (every Locker has waited once, subscriptions are open).
    pub warm_up: Duration,
    /// The counted window.
    pub measure: Duration,
    /// Ends the window early once this many samples were taken (test mode).
    pub max_samples: Option<usize>,
}

impl Window {
    /// Sleeps through the window, or until `samples()` reaches `max_samples`.
    pub async fn pass(&self, samples: impl Fn() -> usize) {
        let start = Instant::now();
        while start.elapsed() < self.measure {
            if self.max_samples.is_some_and(|m| samples() >= m) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn scaled(self, by: f64) -> Window {
        Window {
            warm_up: self.warm_up.mul_f64(by),
            measure: self.measure.mul_f64(by),
            max_samples: self.max_samples,
        }
    }
}

/// What each measurement runs in a mode: sizes, rounds and windows.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Untimed cycles before the timed ones.
    pub cycle_warm_up: usize,
    /// Timed rounds of the cycle (each: a bare xlock, a cycle with hints on, one off).
    pub cycle_rounds: usize,
    /// Waiting Lockers of `handover/W`.
    pub handover_waiters: &'static [usize],
    /// The window of each `handover/W`.
    pub handover: Window,
    /// Lockers of `contended/N`.
    pub contended_lockers: &'static [usize],
    /// The window of each `contended/N`.
    pub contended: Window,
    /// Waiting Lockers of `crashed_holder/W`.
    pub crashed_waiters: &'static [usize],
    /// Crashed locks waited out per `crashed_holder/W`.
    pub crashed_rounds: usize,
    /// Readers of `fair_writer/R`.
    pub fair_readers: &'static [usize],
    /// Rounds of `fair_writer/R`; its window's `measure` is how long the writer waits.
    pub fair_writer_rounds: usize,
    /// The window of `fair_writer/R`.
    pub fair_writer: Window,
    /// Lockers of `fair_contended/N`.
    pub fair_lockers: &'static [usize],
    /// The window of `fair_contended/N`.
    pub fair_contended: Window,
    /// Dead waiters of `fair_abandoned/W`.
    pub fair_dead: &'static [usize],
    /// Rounds of `fair_abandoned/W`.
    pub fair_abandoned_rounds: usize,
    /// Lockers and resources of `contended_spread/N/R` (its window is `contended`'s).
    pub spread: &'static [(usize, usize)],
    /// Idle processes of `idle_processes/N`.
    pub idle_processes: &'static [usize],
    /// The window of `idle_processes/N`; the idle processes settle for its warm-up before
    /// the worker loop's own.
    pub idle: Window,
    /// Places of `keep_place/P`.
    pub keep_places: &'static [usize],
    /// Keep-place writes timed per `keep_place/P`.
    pub keep_rounds: usize,
    /// Candidates of `election_resign/N` and `election_killed/N`.
    pub candidates: &'static [usize],
    /// Leadership changes timed per `election_resign/N`.
    pub election_changes: usize,
    /// Dead leaders waited out per `election_killed/N`.
    pub election_killed_rounds: usize,
    /// Observing processes of `election_observed/N`.
    pub observers: &'static [usize],
    /// Leadership changes measured per `election_observed/N`.
    pub observed_changes: usize,
}

impl Plan {
    /// The plan of `mode`: test mode runs each measurement once on the smallest sizes (a
    /// few samples), quick mode (CI) 2 or 3 s each, full mode 10 or 15 s each; every
    /// window (not the test mode's) `scale` times as long.
    pub fn of(mode: RunMode, scale: f64) -> Plan {
        let scale = if mode == RunMode::Test { 1.0 } else { scale };
        let window = |warm_up: u64, measure: u64, max_samples: Option<usize>| {
            Window {
                warm_up: Duration::from_millis(warm_up),
                measure: Duration::from_millis(measure),
                max_samples,
            }
            .scaled(scale)
        };
        mode.pick(
            Plan {
                cycle_warm_up: 1,
                cycle_rounds: 3,
                handover_waiters: &[1],
                handover: window(0, 5_000, Some(3)),
                contended_lockers: &[2],
                contended: window(50, 300, None),
                crashed_waiters: &[1],
                crashed_rounds: 1,
                fair_readers: &[2],
                fair_writer_rounds: 1,
                fair_writer: window(0, 1_000, None),
                fair_lockers: &[2],
                fair_contended: window(50, 300, None),
                fair_dead: &[1],
                fair_abandoned_rounds: 1,
                spread: &[(4, 2)],
                idle_processes: &[0, 2],
                idle: window(50, 300, None),
                keep_places: &[2],
                keep_rounds: 4,
                candidates: &[2],
                election_changes: 3,
                election_killed_rounds: 1,
                observers: &[1],
                observed_changes: 2,
            },
            Plan {
                cycle_warm_up: 20,
                cycle_rounds: 300,
                handover_waiters: &[8, 64],
                handover: window(500, 3_000, None),
                contended_lockers: &[8, 64],
                contended: window(500, 2_000, None),
                crashed_waiters: &[8],
                crashed_rounds: 2,
                fair_readers: &[8],
                fair_writer_rounds: 3,
                fair_writer: window(300, 2_000, None),
                fair_lockers: &[64],
                fair_contended: window(500, 3_000, None),
                fair_dead: &[8],
                fair_abandoned_rounds: 1,
                spread: &[(64, 16)],
                idle_processes: &[0, 64],
                idle: window(3_000, 2_000, None),
                keep_places: &[1, 128],
                keep_rounds: 200,
                candidates: &[8, 64],
                election_changes: 100,
                election_killed_rounds: 2,
                observers: &[1, 10, 100],
                observed_changes: 10,
            },
            Plan {
                cycle_warm_up: 50,
                cycle_rounds: 1_000,
                handover_waiters: &[1, 8, 64],
                handover: window(1_000, 15_000, None),
                contended_lockers: &[8, 64],
                contended: window(1_000, 10_000, None),
                crashed_waiters: &[8, 64],
                crashed_rounds: 5,
                fair_readers: &[8],
                fair_writer_rounds: 10,
                fair_writer: window(500, 5_000, None),
                fair_lockers: &[8, 64],
                fair_contended: window(1_000, 10_000, None),
                fair_dead: &[8],
                fair_abandoned_rounds: 3,
                spread: &[(64, 16)],
                idle_processes: &[0, 64, 256],
                idle: window(3_000, 10_000, None),
                keep_places: &[1, 16, 128],
                keep_rounds: 1_000,
                candidates: &[8, 64, 100],
                election_changes: 300,
                election_killed_rounds: 5,
                observers: &[1, 10, 100],
                observed_changes: 30,
            },
        )
    }
}
