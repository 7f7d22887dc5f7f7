//! `handover_liveness`: in calm seeds (a fast network that loses nothing, no pauses, no
//! failovers, no dropped hint streams; crashes, clock drift and duplicated hints as each
//! seed draws them), a resource that clients wait for is granted again within a few
//! network latencies of its release, or of its crashed holder's lock being abandoned.
//!
//! The shipped Locker core meets it; in test builds with `--cfg lockwright_mutants`, a core
//! that ignores the store's hints (`locker_ignores_hints`) misses it after releases, and a
//! core that ignores when a refusal said the locks in the way end
//! (`locker_ignores_retry_in`) misses it after crashes, and a core whose waiters stop
//! listening even at the head of their lines (`locker_head_stops_listening`: a waiter the
//! store told it is next must keep its process listening) claims handed locks late. The
//! mutants are switched on for the
//! whole process, so every test here takes one lock first.
//!
//! Fair waiters too: in calm seeds where every client acquires fairly, no grant overtakes a
//! live place (`fifo`), every handoff goes to the first live place with its claim lease
//! from the handoff, and every fair wait stays within its bound (`bounded_waiting`). With
//! the handoff mutants on, handoffs to places that lapsed (`handoff_to_dead_place`,
//! `queue_dead_entry_blocks`) and claim leases from the queued time
//! (`claim_lease_from_queued_at`) are seen in calm and faulty seeds alike, and claims that
//! revive a lapsed handoff (`claim_revives_lapsed`) in calm ones. Grants that ignore the
//! queue (`queue_ignored`) and places left after a grant (`grant_leaves_entry`) change
//! nothing here: every place the Locker takes records a handoff, so the store hands a free
//! exclusive lock to the head before any request is decided, and a release gives up its
//! lock id's places; the model and the conformance cases kill those two.

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

/// Calm seeds in which every client acquires fairly.
fn calm_fair() -> Options {
    Options {
        fair_seeds_pct: 100,
        fair_clients_pct: 100,
        ..calm()
    }
}

#[test]
fn calm_fair_waiters_are_granted_in_turn_and_in_time() {
    let _serial = serial();
    let summary = sweep(&calm_fair(), 0, 300, |_| {});
    assert_eq!(
        summary.violation_count(),
        0,
        "{:?}; failing seeds {:?}",
        summary.violations,
        summary.failing_seeds
    );
    // Not vacuous: every seed checked fair waits, many behind others; the store handed
    // locks to places (most held on the wake that said so, the rest claimed: a grant at the
    // store) and made grants past live places; waiters crashed and their places lapsed.
    assert_eq!(summary.fair_seeds_checking_waits, 300);
    let t = &summary.tally;
    assert!(
        t.fair_waits_checked > 3_000 && t.fair_waits_behind > 500,
        "{} fair waits checked, {} behind others",
        t.fair_waits_checked,
        t.fair_waits_behind
    );
    assert!(
        t.places_handed > 3_000 && t.held_on_hint > 1_000 && t.grants_past_queue > 500,
        "{t:?}"
    );
    assert!(t.places_lapsed > 50 && summary.faults.crashes > 0, "{t:?}");
}

#[test]
fn a_calm_seed_replays_exactly() {
    let _serial = serial();
    // Every client fair, so that the timeline has the hints they hear.
    let first = run_seed(&calm_fair(), 77, true);
    assert!(first.mix.checks_handovers());
    assert!(first.timeline.iter().any(|e| e.what.starts_with("hears ")));
    assert_eq!(first, run_seed(&calm_fair(), 77, true));
}

/// The tests that switch a mutant on: they exist only in mutant builds (`--cfg
/// lockwright_mutants`), where the kill matrix (`scripts/mutants`) runs every test of this
/// binary once, with no mutant named in `LOCKWRIGHT_MUTANT`, and fails if any of them fails
/// or if it lists none in this module.
#[cfg(lockwright_mutants)]
mod mutant_build {
    use lockwright_engine::mutants::{self, Mutant};
    use lockwright_sim::{Options, Tally, Violation, ViolationKind, run_seed};

    use super::{calm, calm_fair, serial};

    /// The `handover_liveness` violations of seeds `0..seeds` of calm runs with `mutant` on,
    /// and the seeds' other violations.
    fn with_mutant(mutant: Mutant, seeds: u64) -> (Vec<Violation>, Vec<Violation>) {
        let (all, _) = with_mutant_in(&calm(), mutant, seeds);
        all.into_iter()
            .partition(|v| v.kind == ViolationKind::HandoverLiveness)
    }

    /// The violations of seeds `0..seeds` of `opts` with `mutant` on, and the summed tally.
    fn with_mutant_in(opts: &Options, mutant: Mutant, seeds: u64) -> (Vec<Violation>, Tally) {
        /// Switches the mutant off again, also when a seed panics.
        struct Off;
        impl Drop for Off {
            fn drop(&mut self) {
                mutants::activate(None);
            }
        }
        let _off = Off;
        mutants::activate(Some(mutant));
        let mut tally = Tally::default();
        let mut violations = Vec::new();
        for seed in 0..seeds {
            let r = run_seed(opts, seed, false);
            tally.add(&r.tally);
            violations.extend(r.violations);
        }
        (violations, tally)
    }

    /// How many of `violations` are of `kind`.
    fn of_kind(violations: &[Violation], kind: ViolationKind) -> usize {
        violations.iter().filter(|v| v.kind == kind).count()
    }

    /// Calm seeds where every client waits fairly, and faulty ones: the world's own copy of
    /// the queues judges every handoff, whatever the faults.
    fn fair_seeds() -> [Options; 2] {
        [
            calm_fair(),
            Options {
                fair_seeds_pct: 100,
                ..Options::default()
            },
        ]
    }

    #[test]
    fn handoffs_to_dead_places_are_seen() {
        let _serial = serial();
        for opts in fair_seeds() {
            let (v, _) = with_mutant_in(&opts, Mutant::HandoffToDeadPlace, 100);
            let handed = of_kind(&v, ViolationKind::Handoff);
            assert!(handed > 10, "{handed} handoffs to lapsed places: {v:?}");
            assert_eq!(of_kind(&v, ViolationKind::QueueOrder), 0, "{v:?}");
        }
    }

    #[test]
    fn places_that_never_lapse_are_handed_the_lock() {
        let _serial = serial();
        for opts in fair_seeds() {
            let (v, t) = with_mutant_in(&opts, Mutant::QueueDeadEntryBlocks, 100);
            let handed = of_kind(&v, ViolationKind::Handoff);
            assert!(
                handed > 10,
                "{handed} handoffs to lapsed places ({} places lapsed): {v:?}",
                t.places_lapsed
            );
        }
    }

    #[test]
    fn claim_leases_that_do_not_start_at_the_handoff_are_seen() {
        let _serial = serial();
        for opts in fair_seeds() {
            let (v, _) = with_mutant_in(&opts, Mutant::ClaimLeaseFromQueuedAt, 100);
            let leases = v
                .iter()
                .filter(|v| v.kind == ViolationKind::Handoff && v.detail.contains("claim lease"))
                .count();
            assert!(leases > 100, "{leases} claim leases from the queued time");
            // A waiter handed a lock that has run out already loses it to the next in line,
            // and takes a new place behind the waiters that were behind it.
            assert!(of_kind(&v, ViolationKind::QueueOrder) > 10, "{v:?}");
        }
    }

    #[test]
    fn claims_that_revive_lapsed_handoffs_are_seen() {
        let _serial = serial();
        // The claim comes before the handoff, so a waiter's own lapsed lock is revived
        // instead of the resource being handed to the place at the head: handoffs go wrong.
        let mut wrong = 0;
        for opts in fair_seeds() {
            let (v, _) = with_mutant_in(&opts, Mutant::ClaimRevivesLapsed, 100);
            wrong += of_kind(&v, ViolationKind::Handoff);
        }
        assert!(wrong > 10, "{wrong} handoffs gone wrong");
    }

    #[test]
    fn a_core_ignoring_hints_hands_released_locks_over_late() {
        let _serial = serial();
        let (late, other) = with_mutant(Mutant::LockerIgnoresHints, 100);
        // Fair waiters that wait on their backoff also wait past their bound.
        assert!(
            other
                .iter()
                .all(|v| v.kind == ViolationKind::BoundedWaiting),
            "{other:?}"
        );
        // A release hands the lock to a fair waiter's place, which claims it only when it
        // next asks; racing waiters poll whatever the hints, so they do not tell.
        let releases = late
            .iter()
            .filter(|v| {
                v.detail
                    .contains("handed it to a waiting place, not claimed")
            })
            .count();
        assert!(
            releases > 100,
            "ignoring hints must leave handed locks unclaimed: {releases} late handovers"
        );
    }

    #[test]
    fn a_core_that_stops_listening_at_the_head_claims_handed_locks_late() {
        let _serial = serial();
        let (v, t) = with_mutant_in(&calm_fair(), Mutant::LockerHeadStopsListening, 100);
        // A waiter told it is next, whose process no longer listens, claims the lock the
        // release handed it only when it next keeps its place.
        let unclaimed = v
            .iter()
            .filter(|v| {
                v.kind == ViolationKind::HandoverLiveness
                    && v.detail
                        .contains("handed it to a waiting place, not claimed")
            })
            .count();
        assert!(
            unclaimed > 10,
            "{unclaimed} handed locks claimed late ({} streams dropped while waiting): {v:?}",
            t.far_back_unsubscribed
        );
    }

    #[test]
    fn a_core_ignoring_retry_in_takes_crashed_holders_locks_over_late() {
        let _serial = serial();
        let (late, other) = with_mutant(Mutant::LockerIgnoresRetryIn, 100);
        // Fair waiters behind a crashed holder wait past their bound too.
        assert!(
            other
                .iter()
                .all(|v| v.kind == ViolationKind::BoundedWaiting),
            "{other:?}"
        );
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
}
