//! `handover_liveness`: in calm seeds (a fast network that loses nothing, no pauses, no
//! failovers, no dropped hint streams; crashes, clock drift and duplicated hints as each
//! seed draws them), a resource that clients wait for is granted again within a few
//! network latencies of its release, or of its crashed holder's lock being abandoned.
//!
//! The shipped Locker core meets it; in test builds with `--cfg lockwright_mutants`, a core
//! that ignores the store's hints (`locker_ignores_hints`) misses it after releases, and a
//! core that ignores when a refusal said the locks in the way end
//! (`locker_ignores_retry_in`) misses it after crashes. The mutants are switched on for the
//! whole process, so every test here takes one lock first.

use std::sync::{Mutex, MutexGuard};

use lockwright_sim::{Options, run_seed, sweep};

/// Serializes the tests of this binary (a mutant is switched on for the whole process).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn calm() -> Options {
    Options {
        calm: true,
        ..Options::default()
    }
}

#[test]
fn calm_seeds_hand_every_free_lock_over_in_time() {
    let _serial = serial();
    let summary = sweep(&calm(), 0, 300, |_| {});
    assert_eq!(
        summary.violation_count(),
        0,
        "{:?}; failing seeds {:?}",
        summary.violations,
        summary.failing_seeds
    );
    // Not vacuous: every seed was checked, handovers after releases and takeovers after
    // crashes were checked, and the waiters heard hints (some of them twice).
    assert_eq!(summary.seeds_checking_handovers, 300);
    assert!(
        summary.tally.handovers_checked > 1_000,
        "{} handovers checked",
        summary.tally.handovers_checked
    );
    assert!(
        summary.tally.takeovers_checked > 50,
        "{} takeovers checked",
        summary.tally.takeovers_checked
    );
    assert!(summary.faults.crashes > 0 && summary.faults.duplicated_hints > 0);
    assert!(summary.tally.hints_heard > 0 && summary.tally.subscriptions > 0);
    // Calm means calm: nothing lost, paused or failed over.
    assert_eq!(
        summary.faults.lost_replies
            + summary.faults.lost_requests
            + summary.faults.lost_hints
            + summary.faults.dropped_streams
            + summary.faults.pauses
            + summary.faults.failovers,
        0,
        "{:?}",
        summary.faults
    );
}

#[test]
fn a_calm_seed_replays_exactly() {
    let _serial = serial();
    let first = run_seed(&calm(), 77, true);
    assert!(first.mix.checks_handovers());
    assert!(
        first
            .timeline
            .iter()
            .any(|e| e.what.starts_with("hears Freed"))
    );
    assert_eq!(first, run_seed(&calm(), 77, true));
}

/// The `handover_liveness` violations of seeds `0..seeds` of calm runs with `mutant` on,
/// and the seeds' other violations.
#[cfg(lockwright_mutants)]
fn with_mutant(
    mutant: lockwright_engine::mutants::Mutant,
    seeds: u64,
) -> (
    Vec<lockwright_sim::Violation>,
    Vec<lockwright_sim::Violation>,
) {
    use lockwright_engine::mutants;
    /// Switches the mutant off again, also when a seed panics.
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            mutants::activate(None);
        }
    }
    let _off = Off;
    mutants::activate(Some(mutant));
    (0..seeds)
        .flat_map(|seed| run_seed(&calm(), seed, false).violations)
        .partition(|v| v.kind == lockwright_sim::ViolationKind::HandoverLiveness)
}

#[cfg(lockwright_mutants)]
#[test]
fn a_core_ignoring_hints_hands_released_locks_over_late() {
    let _serial = serial();
    let (late, other) = with_mutant(lockwright_engine::mutants::Mutant::LockerIgnoresHints, 100);
    assert!(other.is_empty(), "{other:?}");
    let releases = late
        .iter()
        .filter(|v| v.detail.contains("a release freed it"))
        .count();
    assert!(
        releases > 100,
        "ignoring hints must leave released locks free: {releases} late handovers"
    );
}

#[cfg(lockwright_mutants)]
#[test]
fn a_core_ignoring_retry_in_takes_crashed_holders_locks_over_late() {
    let _serial = serial();
    let (late, other) = with_mutant(
        lockwright_engine::mutants::Mutant::LockerIgnoresRetryIn,
        100,
    );
    assert!(other.is_empty(), "{other:?}");
    let takeovers = late
        .iter()
        .filter(|v| v.detail.contains("crashed holder's lock was abandoned"))
        .count();
    assert!(
        takeovers > 10,
        "ignoring retry_in must leave crashed holders' locks untaken: {takeovers} late takeovers"
    );
    // Releases are still handed over in time: the hints do that.
    assert_eq!(late.len(), takeovers, "{late:?}");
}
