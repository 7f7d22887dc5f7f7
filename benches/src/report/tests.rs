//! The checks and the report on made-up records: each target's verdict turns on its
//! threshold, and the helpers write numbers and command lists as the report shows them.

use std::collections::BTreeMap;

use super::*;

fn rec(group: &str, function: &str, size: Option<u64>, commands: Option<f64>) -> Record {
    let mut r = Record::new(group, function, size.map(|s| s.to_string()), 1);
    r.size = size;
    r.commands = commands;
    r
}

fn checks_of(records: &[Record], medians: &[(&str, f64)]) -> Vec<Check> {
    let medians: BTreeMap<String, f64> = medians.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Run {
        records,
        medians: &medians,
        meta: &[],
    }
    .checks()
}

fn find<'c>(checks: &'c [Check], prefix: &str) -> &'c Check {
    checks
        .iter()
        .find(|c| c.target.starts_with(prefix))
        .unwrap()
}

#[test]
fn grant_ratio_and_command_count_decide_the_grant_targets() {
    let records = [
        rec("store_mongo", "baseline", None, Some(1.0)),
        rec("store_mongo", "xlock", None, Some(1.0)),
        rec("store_mongo", "slock_at_limit", None, Some(2.0)),
    ];
    let checks = checks_of(
        &records,
        &[
            ("store_mongo/baseline", 1000.0),
            ("store_mongo/xlock", 1250.0),
            ("store_mongo/slock_at_limit", 1100.0),
        ],
    );
    assert_eq!(find(&checks, "xlock").verdict, Verdict::Met);
    assert_eq!(
        find(&checks, "slock").verdict,
        Verdict::Missed,
        "2 commands"
    );
    let slow = checks_of(
        &records,
        &[
            ("store_mongo/baseline", 1000.0),
            ("store_mongo/xlock", 1400.0),
        ],
    );
    assert_eq!(find(&slow, "xlock").verdict, Verdict::Missed);
    assert_eq!(find(&slow, "slock").verdict, Verdict::NotMeasured);

    // The interleaved ratio, when measured, decides over criterion's medians.
    let mut records = records.clone();
    records[1].extra.insert("paired_ratio".into(), 1.2);
    let paired = checks_of(
        &records,
        &[
            ("store_mongo/baseline", 1000.0),
            ("store_mongo/xlock", 1400.0),
        ],
    );
    assert_eq!(find(&paired, "xlock").verdict, Verdict::Met);
}

#[test]
fn diagnostics_stand_beside_the_evidence_they_explain() {
    let mut pipeline = rec("store_mongo", "slock_push_pipeline", None, Some(1.0));
    pipeline.extra.insert("paired_ratio".into(), 1.45);
    let records = [
        rec("store_mongo", "baseline", None, Some(1.0)),
        rec("store_mongo", "slock_at_limit", None, Some(1.0)),
        pipeline,
        rec("store_mongo", "purge", Some(10_000), Some(62.0)),
        rec(
            "store_mongo",
            "purge_delete_batches",
            Some(10_000),
            Some(40.0),
        ),
    ];
    let checks = checks_of(
        &records,
        &[
            ("store_mongo/baseline", 1000.0),
            ("store_mongo/slock_at_limit", 1500.0),
            ("store_mongo/purge/10000", 600e6),
            ("store_mongo/purge_delete_batches/10000", 550e6),
        ],
    );
    let slock = &find(&checks, "slock").evidence;
    assert!(
        slock.ends_with("; the same change alone: as a one-stage pipeline 1.45x interleaved"),
        "{slock}"
    );
    let purge = &find(&checks, "purge of N=10,000").evidence;
    assert!(
        purge.ends_with(
            "; deleting its expired documents alone: in a transaction per batch 550.00 ms"
        ),
        "{purge}"
    );
    let xlock = &find(&checks, "xlock").evidence;
    assert!(
        !xlock.contains("alone"),
        "no diagnostics ran for xlock: {xlock}"
    );
}

#[test]
fn group_commands_one_lock_path_then_constant_for_k_of_two_and_more() {
    let shaped: Vec<Record> = [(1, 2.0), (10, 4.0), (100, 4.0), (1000, 4.0)]
        .iter()
        .map(|(k, c)| rec("store_mongo", "unlock", Some(*k), Some(*c)))
        .collect();
    let checks = checks_of(&shaped, &[]);
    assert_eq!(find(&checks, "unlock").verdict, Verdict::Met);
    assert!(
        find(&checks, "unlock")
            .evidence
            .starts_with("commands/op K=1: 2 ("),
        "{}",
        find(&checks, "unlock").evidence
    );
    let mut growing = shaped.clone();
    growing[3].commands = Some(5.0);
    assert_eq!(
        find(&checks_of(&growing, &[]), "unlock").verdict,
        Verdict::Missed
    );
    let mut one_too_many = shaped.clone();
    one_too_many[0].commands = Some(3.0);
    assert_eq!(
        find(&checks_of(&one_too_many, &[]), "unlock").verdict,
        Verdict::Missed,
        "a group of one lock takes the one-lock path"
    );
    // Test mode sizes only (K = 1 and 10): nothing wrong, but not every K.
    assert_eq!(
        find(&checks_of(&shaped[..2], &[]), "unlock").verdict,
        Verdict::NotMeasured
    );
}

#[test]
fn the_one_lock_cycle_is_judged_interleaved_with_the_baseline() {
    let mut cycle = rec("store_mongo", "acquire_release", None, Some(2.0));
    cycle.extra.insert("paired_ratio".into(), 2.1);
    let records = [rec("store_mongo", "baseline", None, Some(1.0)), cycle];
    let medians = [
        ("store_mongo/baseline", 1000.0),
        ("store_mongo/acquire_release", 2500.0),
    ];
    let checks = checks_of(&records, &medians);
    assert_eq!(find(&checks, "acquire+release").verdict, Verdict::Met);
    let mut slow = records.clone();
    slow[1].extra.insert("paired_ratio".into(), 2.4);
    assert_eq!(
        find(&checks_of(&slow, &medians), "acquire+release").verdict,
        Verdict::Missed
    );
    let mut three = records.clone();
    three[1].commands = Some(3.0);
    assert_eq!(
        find(&checks_of(&three, &medians), "acquire+release").verdict,
        Verdict::Missed
    );
}

#[test]
fn one_lock_operations_and_status_without_a_ttl_bound_take_one_command() {
    let status = |kind: &str, commands: f64| {
        let mut r = rec("store_mongo", "status_server_clock", None, Some(commands));
        r.parameter = Some(kind.into());
        r
    };
    let records = vec![
        rec("store_mongo", "renew_one", None, Some(1.0)),
        rec("store_mongo", "unlock_one", None, Some(1.0)),
        status("resource", 1.0),
        status("lock_id", 1.0),
        status("owner", 1.0),
        status("ttl_lt", 2.0),
    ];
    let check = find(&checks_of(&records, &[]), "renew_one").clone();
    assert_eq!(check.verdict, Verdict::Met, "a TTL bound is not judged");
    assert!(
        check.evidence.contains("ttl_lt, not judged): 2"),
        "{check:?}"
    );
    let mut two = records.clone();
    two[4].commands = Some(2.0);
    assert_eq!(
        find(&checks_of(&two, &[]), "renew_one").verdict,
        Verdict::Missed
    );
    assert_eq!(
        find(&checks_of(&records[..4], &[]), "renew_one").verdict,
        Verdict::NotMeasured,
        "status by owner is missing"
    );
}

#[test]
fn the_locker_is_judged_at_a_thousand_guards() {
    let held = |n: u64, commands: f64| {
        let mut r = rec("store_mongo", "locker_renewals", Some(n), Some(commands));
        r.custom = true;
        r.extra.insert("cycles".into(), 3.0);
        r
    };
    assert_eq!(locker_bound(1_000), 12.0);
    let records = [held(1, 1.0), held(100, 3.0), held(1_000, 12.0)];
    let checks = checks_of(&records, &[]);
    assert_eq!(find(&checks, "a Locker").verdict, Verdict::Met);
    let over = [held(1, 1.0), held(1_000, 12.5)];
    assert_eq!(
        find(&checks_of(&over, &[]), "a Locker").verdict,
        Verdict::Missed
    );
    assert_eq!(
        find(&checks_of(&records[..2], &[]), "a Locker").verdict,
        Verdict::NotMeasured
    );
    // Its own table, not a row of criterion medians.
    let medians = BTreeMap::new();
    let markdown = Run {
        records: &records,
        medians: &medians,
        meta: &[],
    }
    .markdown();
    assert!(markdown.contains("### store_mongo: a Locker holding N guards"));
    assert_eq!(
        markdown.matches("| locker_renewals/1000 | ").count(),
        1,
        "{markdown}"
    );
}

#[test]
fn purge_commands_fit_a_line_in_batches() {
    let purge = |n: u64, batches: f64, commands: f64| {
        let mut r = rec("store_mongo", "purge", Some(n), Some(commands));
        r.extra.insert("batches".into(), batches);
        r
    };
    let good = [
        purge(100, 1.0, 5.0),
        purge(1000, 2.0, 8.0),
        purge(10_000, 20.0, 62.0),
    ];
    let checks = checks_of(&good, &[("store_mongo/purge/10000", 300e6)]);
    assert_eq!(find(&checks, "purge of N expired").verdict, Verdict::Met);
    assert_eq!(find(&checks, "purge of N=10,000").verdict, Verdict::Met);
    let bad = [
        purge(100, 1.0, 5.0),
        purge(1000, 2.0, 8.0),
        purge(10_000, 20.0, 70.0),
    ];
    let checks = checks_of(&bad, &[("store_mongo/purge/10000", 700e6)]);
    assert_eq!(find(&checks, "purge of N expired").verdict, Verdict::Missed);
    assert_eq!(find(&checks, "purge of N=10,000").verdict, Verdict::Missed);
}

#[test]
fn engine_and_mem_thresholds() {
    let records = [
        rec("engine", "xlock", Some(1), None),
        rec("engine", "renew", Some(100_000), None),
        rec("store_mem", "lock_unlock", None, None),
    ];
    let checks = checks_of(
        &records,
        &[
            ("engine/xlock/1", 120.0),
            ("engine/renew/100000", 450.0),
            ("store_mem/lock_unlock", 900.0),
        ],
    );
    assert_eq!(
        find(&checks, "engine transition (pure): well").verdict,
        Verdict::Met
    );
    assert_eq!(find(&checks, "store-mem").verdict, Verdict::Met);
    let checks = checks_of(
        &records,
        &[
            ("engine/xlock/1", 120.0),
            ("engine/renew/100000", 650.0),
            ("store_mem/lock_unlock", 1100.0),
        ],
    );
    assert_eq!(
        find(&checks, "engine transition (pure): well").verdict,
        Verdict::Missed
    );
    assert_eq!(find(&checks, "store-mem").verdict, Verdict::Missed);
}

#[test]
fn repeats_fold() {
    let names: Vec<String> = ["aggregate", "aggregate", "update", "commit"]
        .iter()
        .chain(["aggregate", "update", "commit"].iter())
        .chain(["delete"].iter())
        .map(|s| (*s).to_string())
        .collect();
    assert_eq!(
        fold_repeats(&names),
        "aggregate, [aggregate, update, commit] x2, delete"
    );
    let same: Vec<String> = vec!["find".into(); 3];
    assert_eq!(fold_repeats(&same), "find x3");
    assert_eq!(fold_duplicates(&same), ["find (x3)"]);
}

#[test]
fn units() {
    assert_eq!(fmt_ns(412.0), "412 ns");
    assert_eq!(fmt_ns(1_500.0), "1.50 µs");
    assert_eq!(fmt_ns(2_500_000.0), "2.50 ms");
    assert_eq!(fmt_num(3.0), "3");
    assert_eq!(fmt_num(3.5), "3.50");
    assert_eq!(fmt_rate(2_500_000.0), "2.50 M");
}

/// A waiting record as the benches write it.
fn waiting(function: &str, size: Option<u64>, hints: bool, extra: &[(&str, f64)]) -> Record {
    use crate::waiting::{key, parameter};
    let mut r = Record::new("store_mongo", function, Some(parameter(size, hints)), 1);
    r.size = size;
    r.custom = true;
    r.extra
        .insert(key::HINTS.into(), f64::from(u8::from(hints)));
    r.extra
        .insert(key::SUBSCRIPTIONS.into(), f64::from(u8::from(hints)));
    for (k, v) in extra {
        r.extra.insert((*k).into(), *v);
    }
    r
}

fn cycles(on_p50: f64, off_p50: f64) -> [Record; 2] {
    use crate::waiting::{CYCLE, key};
    [(true, on_p50), (false, off_p50)].map(|(hints, p50)| {
        waiting(
            CYCLE,
            None,
            hints,
            &[(key::P50_MS, p50), (key::XLOCK_P50_MS, 1.0)],
        )
    })
}

#[test]
fn handover_with_hints_is_judged_against_one_uncontended_grant() {
    use crate::waiting::{HANDOVER, key};
    let handover = |w: u64, hints: bool, p50: f64, p99: f64| {
        waiting(
            HANDOVER,
            Some(w),
            hints,
            &[(key::P50_MS, p50), (key::P99_MS, p99), (key::MAX_MS, p99)],
        )
    };
    let mut records: Vec<Record> = cycles(2.5, 2.4).into();
    records.extend([
        handover(8, true, 1.8, 9.0),
        handover(8, false, 60.0, 400.0),
        handover(64, true, 2.0, 10.0),
        handover(64, false, 20.0, 300.0),
    ]);
    let check = find(&checks_of(&records, &[]), "waiters woken").clone();
    assert_eq!(check.verdict, Verdict::Met, "{check:?}");
    assert!(
        check.evidence.contains("W=8: hints on p50 1.80 ms (1.80x)"),
        "{check:?}"
    );
    assert!(check.evidence.contains("polling p50 60.00 ms"), "{check:?}");
    // Polling is shown, never judged; hints on over 2x the grant at W=64 misses.
    let mut slow = records.clone();
    slow[4].extra.insert(key::P50_MS.into(), 2.1);
    assert_eq!(
        find(&checks_of(&slow, &[]), "waiters woken").verdict,
        Verdict::Missed
    );
    let mut tail = records.clone();
    tail[2].extra.insert(key::P99_MS.into(), 10.5);
    assert_eq!(
        find(&checks_of(&tail, &[]), "waiters woken").verdict,
        Verdict::Missed
    );
    // Without W=64 (and without the grant) nothing is settled.
    assert_eq!(
        find(&checks_of(&records[..4], &[]), "waiters woken").verdict,
        Verdict::NotMeasured
    );
    assert_eq!(
        find(&checks_of(&records[2..], &[]), "waiters woken").verdict,
        Verdict::NotMeasured
    );
    // A store that gave no hints is named in the evidence.
    let mut none = records.clone();
    none[2].extra.insert(key::SUBSCRIPTIONS.into(), 0.0);
    assert!(
        find(&checks_of(&none, &[]), "waiters woken")
            .evidence
            .contains("these Lockers polled")
    );
}

#[test]
fn a_crashed_holders_waiters_within_a_few_round_trips() {
    use crate::waiting::{CRASHED, key};
    let crashed = |hints: bool, median: f64| {
        waiting(
            CRASHED,
            Some(8),
            hints,
            &[(key::P50_MS, median), (key::MAX_MS, median + 1.0)],
        )
    };
    let mut records: Vec<Record> = cycles(2.5, 2.4).into();
    records.extend([crashed(true, 2.9), crashed(false, 1.5)]);
    assert_eq!(
        find(&checks_of(&records, &[]), "a crashed holder").verdict,
        Verdict::Met
    );
    records[3].extra.insert(key::P50_MS.into(), 3.2);
    assert_eq!(
        find(&checks_of(&records, &[]), "a crashed holder").verdict,
        Verdict::Missed,
        "hints off is judged too"
    );
    assert_eq!(
        find(&checks_of(&records[..2], &[]), "a crashed holder").verdict,
        Verdict::NotMeasured
    );
}

#[test]
fn contended_hints_against_polling_in_the_same_run() {
    use crate::waiting::{CONTENDED, key};
    let contended = |n: u64, hints: bool, per_s: f64, lock: f64| {
        waiting(
            CONTENDED,
            Some(n),
            hints,
            &[(key::GRANTS_PER_S, per_s), (key::LOCK_PER_GRANT, lock)],
        )
    };
    let records = vec![
        contended(8, true, 120.0, 2.5),
        contended(8, false, 110.0, 2.4),
        contended(64, true, 100.0, 4.8),
        contended(64, false, 100.0, 2.5),
    ];
    let checks = checks_of(&records, &[]);
    assert_eq!(find(&checks, "no herd").verdict, Verdict::Met);
    assert_eq!(find(&checks, "contended throughput").verdict, Verdict::Met);
    let mut herd = records.clone();
    herd[2].extra.insert(key::LOCK_PER_GRANT.into(), 5.1);
    herd[2].extra.insert(key::GRANTS_PER_S.into(), 99.0);
    let checks = checks_of(&herd, &[]);
    assert_eq!(find(&checks, "no herd").verdict, Verdict::Missed);
    assert_eq!(
        find(&checks, "contended throughput").verdict,
        Verdict::Missed
    );
    // Quick runs without N = 64 judge nothing about the herd.
    let checks = checks_of(&records[..2], &[]);
    assert_eq!(find(&checks, "no herd").verdict, Verdict::NotMeasured);
    assert_eq!(
        find(&checks, "contended throughput").verdict,
        Verdict::NotMeasured
    );
}

#[test]
fn the_uncontended_cycle_with_hints_within_a_tenth_of_without() {
    let checks = checks_of(&cycles(2.6, 2.4), &[]);
    assert_eq!(find(&checks, "uncontended cycle").verdict, Verdict::Met);
    let checks = checks_of(&cycles(2.7, 2.4), &[]);
    assert_eq!(find(&checks, "uncontended cycle").verdict, Verdict::Missed);
    // Tables of their own, not rows of criterion medians.
    let records = cycles(2.6, 2.4);
    let medians = BTreeMap::new();
    let markdown = Run {
        records: &records,
        medians: &medians,
        meta: &[],
    }
    .markdown();
    assert!(markdown.contains("### store_mongo: waiting Lockers, hints on and off"));
    assert_eq!(
        markdown.matches("| waiting_cycle/hints_on | ").count(),
        1,
        "{markdown}"
    );
}
