//! The simulator's checks: a clean sweep, the negative runs (no drift margin, no fencing,
//! clock jumps beyond the takeover grace), failovers within the grace, exact replay.
//! (`handover_liveness` in calm seeds, and the mutants it kills: `tests/liveness.rs`.)
//!
//! The kill matrix (`scripts/mutants`) runs the sweep with each engine mutant switched on
//! (`LOCKWRIGHT_MUTANT`); the Locker mutants must each make it fail. The two that only cost
//! waiters time (`locker_ignores_hints`, `locker_ignores_retry_in`) fail its
//! `handover_liveness` check, in the seeds of the sweep that are calm enough to be checked
//! for it. Half of the seeds have fair clients, whose queues `fifo` checks in every seed and
//! `bounded_waiting` in calm ones. Of the queue mutants, `queue_dead_entry_blocks` makes the
//! sweep fail (`bounded_waiting`, and `handover_liveness`; `tests/liveness.rs` shows it);
//! `queue_ignored` and `grant_leaves_entry` change nothing the simulator's waiters do (the
//! model, the conformance suite and the MongoDB harnesses kill them).

use lockwright_sim::{Options, ViolationKind, run_seed, sweep, timeline_svg};

#[test]
fn sweep_of_2000_seeds_finds_no_violation() {
    #[cfg(lockwright_mutants)]
    lockwright_engine::mutants::activate_from_env();
    let summary = sweep(&Options::default(), 0, 2_000, |_| {});
    assert_eq!(
        summary.violation_count(),
        0,
        "{:?}; failing seeds {:?}",
        summary.violations,
        summary.failing_seeds
    );
    // Non-vacuity: the faults happened and fencing had stale writes to reject.
    assert!(
        summary.faults.lost_replies > 0
            && summary.faults.lost_requests > 0
            && summary.faults.pauses > 0
            && summary.faults.crashes > 0,
        "{:?}",
        summary.faults
    );
    // ... and what the Locker's core must get right under them happened too: grants whose
    // reply was lost were released, releases whose request was lost were retried, and
    // grants arrived too late to be trusted.
    assert!(
        summary.tally.unknown_grants_released > 0,
        "no grant with an unknown outcome was ever released"
    );
    assert!(
        summary.tally.releases_retried > 0,
        "no release was ever retried after a lost unlock"
    );
    assert!(
        summary.tally.late_grants > 0,
        "no grant ever arrived after its trust deadline"
    );
    assert!(
        summary.tally.held_on_hint > 0,
        "no lock was ever held on a hint that said what the store handed"
    );
    // Seeds without faults that can cost a lease exist, so needless losses can be seen.
    assert!(
        summary.seeds_without_lease_faults > 0,
        "no seed checked for needless losses"
    );
    assert!(
        summary.tally.writes_rejected > 0,
        "no stale write was ever rejected: the fencing check is vacuous"
    );
    assert!(summary.tally.losses > 0, "no lease was ever lost");
    // Clients held several locks at once, so their cores renewed them in batches.
    assert!(
        summary.tally.renew_batches > 0
            && summary.tally.batched_renewals >= 2 * summary.tally.renew_batches,
        "no batch of two renewals or more was ever sent: {} batches, {} renewals",
        summary.tally.renew_batches,
        summary.tally.batched_renewals
    );
    assert!(
        summary.tally.largest_batch >= 3,
        "no batch of three renewals or more: the largest had {}",
        summary.tally.largest_batch
    );
    // ... and the store refused some renewals of a batch, whose outcomes the cores had to
    // take lock by lock.
    assert!(
        summary.tally.batched_refusals > 0,
        "the store never refused a renewal of a batch"
    );
    // The store failed over, its clock jumping both ways, and grants after a jump back took
    // their fences from the fence clock (ahead of the store's clock) rather than going back.
    assert!(
        summary.faults.clock_jumps_forward > 0 && summary.faults.clock_jumps_back > 0,
        "{:?}",
        summary.faults
    );
    assert!(
        summary.tally.grants_behind_fence_clock > 0,
        "no grant after a jump back took its fence from the fence clock"
    );
    // Hints reached the waiters through the faults: lost, duplicated, streams dropped.
    assert!(
        summary.tally.hints_heard > 0
            && summary.faults.lost_hints > 0
            && summary.faults.duplicated_hints > 0
            && summary.faults.dropped_streams > 0,
        "{} hints heard, {:?}",
        summary.tally.hints_heard,
        summary.faults
    );
    // Some seeds were calm enough to be checked for handover liveness, and releases and
    // crashed holders' locks were handed over in them (what the two Locker mutants that
    // only cost waiters time are caught by).
    assert!(
        summary.seeds_checking_handovers > 0
            && summary.tally.handovers_checked > 0
            && summary.tally.takeovers_checked > 0,
        "{} seeds checked for handovers: {} handovers, {} takeovers",
        summary.seeds_checking_handovers,
        summary.tally.handovers_checked,
        summary.tally.takeovers_checked
    );
    // Half of the seeds had fair clients: their grants were checked for `fifo` against
    // queues with live places, places lapsed (crashed and paused waiters) and were given up
    // (`LeaveQueue`, over the faulty network), and the calm ones among them checked fair
    // waits for `bounded_waiting`, some of them behind others.
    assert!(
        summary.seeds_with_fair_clients > 0 && summary.fair_seeds_checking_waits > 0,
        "{} seeds with fair clients, {} of them checked for bounded waiting",
        summary.seeds_with_fair_clients,
        summary.fair_seeds_checking_waits
    );
    let t = &summary.tally;
    assert!(
        t.fair_grants > 0
            && t.grants_past_queue > 0
            && t.places_lapsed > 0
            && t.places_left > 0
            && t.places_handed > 0,
        "{t:?}"
    );
    assert!(
        t.fair_waits_checked > 0 && t.fair_waits_behind > 0,
        "{} fair waits checked, {} behind others",
        t.fair_waits_checked,
        t.fair_waits_behind
    );
}

#[test]
fn election_sweep_finds_no_violation() {
    #[cfg(lockwright_mutants)]
    lockwright_engine::mutants::activate_from_env();
    let summary = sweep(&Options::election(), 0, 300, |_| {});
    assert_eq!(
        summary.violation_count(),
        0,
        "{:?}; failing seeds {:?}",
        summary.violations,
        summary.failing_seeds
    );
    // Non-vacuity: leaders were crashed, paused and cut off (lost requests and replies)
    // and resigned, and the leadership was handed over and taken over within the bounds
    // of the calm seeds; proclaims arrived late and were refused; the observer's reads
    // overtook one another.
    let (f, t) = (&summary.faults, &summary.tally);
    assert!(
        f.crashes > 0
            && f.pauses > 0
            && f.lost_requests > 0
            && f.lost_replies > 0
            && f.partitions > 0
            && f.partitioned_messages > 0,
        "{f:?}"
    );
    assert!(
        summary.seeds_checking_handovers > 0 && t.handovers_checked > 0 && t.takeovers_checked > 0,
        "{} seeds checked for handovers: {} handovers, {} takeovers",
        summary.seeds_checking_handovers,
        t.handovers_checked,
        t.takeovers_checked
    );
    assert!(t.places_handed > 0 && t.held_on_hint > 0, "{t:?}");
    assert!(
        t.proclaims_sent > 0 && t.proclaims_refused > 0,
        "{} proclaims, {} refused",
        t.proclaims_sent,
        t.proclaims_refused
    );
    assert!(
        t.leaders_observed > 0 && t.stale_reads_skipped > 0,
        "{} leaders observed, {} stale reads skipped",
        t.leaders_observed,
        t.stale_reads_skipped
    );
    // Bounded failover: in calm elections (crashes, drift and duplicated hints only) every
    // seed is checked for it: a resigning leader's successor leads within the handover
    // bound, a crashed leader's once its lease and grace are over (`handover_liveness`),
    // and every candidate within its place's share of them (`bounded_waiting`).
    let calm = Options {
        calm: true,
        ..Options::election()
    };
    let summary = sweep(&calm, 0, 60, |_| {});
    assert_eq!(
        summary.violation_count(),
        0,
        "calm: {:?}; failing seeds {:?}",
        summary.violations,
        summary.failing_seeds
    );
    let t = &summary.tally;
    assert!(
        summary.seeds_checking_handovers == 60
            && t.handovers_checked > 0
            && t.takeovers_checked > 0
            && t.fair_waits_checked > 0,
        "{t:?}"
    );
}

/// Violations of `kind` in a sweep.
fn count(summary: &lockwright_sim::SweepSummary, kind: ViolationKind) -> u64 {
    summary.violations.get(&kind).copied().unwrap_or(0)
}

#[test]
fn clock_jumps_beyond_the_grace_break_holder_safety() {
    // No takeover grace, store members 200 ms apart: a failover to a member ahead expires
    // leases early, and a waiting client takes one its holder still trusts.
    let opts = Options {
        grace_ms: 0,
        ..Options::default()
    };
    let summary = sweep(&opts, 0, 500, |_| {});
    assert!(
        count(&summary, ViolationKind::HolderSafety) > 0,
        "a clock jump beyond the grace must be caught: {:?}",
        summary.violations
    );
    // Fences stay in order all the same: the fence clock never goes back with the store's.
    assert_eq!(count(&summary, ViolationKind::FenceMonotonic), 0);
    assert_eq!(count(&summary, ViolationKind::StaleWrite), 0);
    // The same seeds without failovers are clean: the jumps did it.
    let still = Options {
        clock_jump_ms: 0,
        ..opts
    };
    let summary = sweep(&still, 0, 500, |_| {});
    assert_eq!(summary.violation_count(), 0, "{:?}", summary.violations);
    // A grace below the jump is not enough either (jumps of 300 ms against 100: with
    // jumps only a little above the grace, few seeds get a waiter in the gap).
    let short = Options {
        grace_ms: 100,
        clock_jump_ms: 300,
        ..Options::default()
    };
    let summary = sweep(&short, 0, 500, |_| {});
    assert!(
        count(&summary, ViolationKind::HolderSafety) > 0,
        "a grace of 100 ms against jumps of 300 ms must be caught: {:?}",
        summary.violations
    );
}

#[test]
fn clock_jumps_within_the_grace_keep_every_invariant() {
    // Jumps as large as the grace, at other sizes than the default sweep's.
    for (grace_ms, clock_jump_ms) in [(50, 50), (400, 400), (300, 100)] {
        let opts = Options {
            grace_ms,
            clock_jump_ms,
            ..Options::default()
        };
        let summary = sweep(&opts, 0, 500, |_| {});
        assert_eq!(
            summary.violation_count(),
            0,
            "grace {grace_ms} ms, jumps up to {clock_jump_ms} ms: {:?}; failing seeds {:?}",
            summary.violations,
            summary.failing_seeds
        );
        assert!(summary.faults.failovers > 0);
    }
}

#[test]
fn zero_margin_breaks_holder_safety() {
    let opts = Options {
        drift_margin_ms: 0,
        ..Options::default()
    };
    let summary = sweep(&opts, 0, 500, |_| {});
    assert!(
        summary
            .violations
            .get(&ViolationKind::HolderSafety)
            .copied()
            .unwrap_or(0)
            > 0,
        "a holder without the drift margin must be caught: {:?}",
        summary.violations
    );
}

#[test]
fn disabled_fencing_accepts_stale_writes() {
    let opts = Options {
        fencing: false,
        ..Options::default()
    };
    let summary = sweep(&opts, 0, 500, |_| {});
    assert!(
        summary
            .violations
            .get(&ViolationKind::StaleWrite)
            .copied()
            .unwrap_or(0)
            > 0,
        "a downstream without fencing must accept a stale write: {:?}",
        summary.violations
    );
}

#[test]
fn a_seed_replays_exactly() {
    let opts = Options::default();
    let first = run_seed(&opts, 4242, true);
    let second = run_seed(&opts, 4242, true);
    assert!(first.timeline.len() > 100);
    assert_eq!(first, second);
    assert_ne!(first.timeline, run_seed(&opts, 4243, true).timeline);
    let svg = timeline_svg(&opts, &first);
    assert!(svg.starts_with("<svg") && svg.contains("client 2"));
}

/// The wakes that hand a lock: 8, 12 and 16 fair clients on two resources (long lines,
/// places kept far back), a claim lease shorter than the TTL, hints up to 1.5 s late (past a claim
/// lease) and failovers that step the store's clock back as often as forward. A waiter
/// trusts a wake's grant only within its guards (no request in flight, a near place, a
/// fence above what its refusal accounted for, trust from its last keep for the claim
/// lease): holder safety holds in every seed. The kill matrix runs it (`no_violation`)
/// against the Locker's mutants, which break those guards one at a time.
#[test]
fn wake_sweep_finds_no_violation() {
    #[cfg(lockwright_mutants)]
    lockwright_engine::mutants::activate_from_env();
    for clients in [8, 12, 16] {
        let opts = Options {
            clients,
            ..Options::wakes()
        };
        let summary = sweep(&opts, 0, 100, |_| {});
        assert_eq!(
            summary.violation_count(),
            0,
            "{clients} clients: {:?}; failing seeds {:?}",
            summary.violations,
            summary.failing_seeds
        );
        // Non-vacuity: late hints arrived, clocks stepped back, places were kept far back
        // and handed over, and locks were held on a wake.
        let (f, t) = (&summary.faults, &summary.tally);
        assert!(
            f.late_hints > 0 && f.clock_jumps_back > 0,
            "{clients} clients: {f:?}"
        );
        assert!(
            t.far_keeps > 0 && t.places_handed > 0 && t.held_on_hint > 0,
            "{clients} clients: {t:?}"
        );
    }
}
