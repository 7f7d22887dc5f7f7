//! `lockwright run`: mutual exclusion between processes, waiting, takeover after a killed
//! holder, exit codes, environment, signal forwarding and lost-lock termination.

use std::future::IntoFuture as _;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::{Coll, assert_no_lock_id, code, text, wait_for, wait_for_file};

/// A CMD that writes `started` (and its pid to `pid`), then runs until `stop` exists.
const HOLD: &str =
    "echo $$ > pid; touch started; while [ ! -e stop ]; do sleep 0.1; done; echo done";

const LONG: Duration = Duration::from_secs(30);

#[test]
fn exit_code_and_environment_reach_through() {
    let c = Coll::new();
    let out = c.run(&[
        "run",
        "job/env",
        "--",
        "sh",
        "-c",
        "echo \"$LOCKWRIGHT_FENCE $LOCKWRIGHT_RESOURCE\" > env; exit 7",
    ]);
    assert_eq!(code(&out), 7, "stderr: {}", text(&out.stderr));
    let env = std::fs::read_to_string(c.path("env")).expect("env file");
    let (fence, resource) = env.trim().split_once(' ').expect("two fields");
    assert!(fence.parse::<u64>().is_ok_and(|f| f > 0), "fence: {env}");
    assert_eq!(resource, "job/env");
    assert!(c.locks().is_empty(), "released after CMD exits");

    // Death by a signal is 128 + its number.
    let out = c.run(&["run", "job/env", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&out), 128 + 9);
    // A missing program is 127.
    let out = c.run(&["run", "job/env", "--", "/nonexistent/program"]);
    assert_eq!(code(&out), 127);
    assert!(
        text(&out.stderr).contains("cannot run"),
        "{}",
        text(&out.stderr)
    );
    assert!(c.locks().is_empty(), "released when CMD cannot start");
}

#[test]
fn cmd_gets_its_own_process_group_unless_foreground() {
    let c = Coll::new();
    // Field 5 of /proc/PID/stat is the process group; $PPID is lockwright.
    let groups = "echo $(cut -d' ' -f5 /proc/$$/stat) $(cut -d' ' -f5 /proc/$PPID/stat) > groups";
    let same = |extra: &[&str]| {
        let mut args = vec!["run", "job/pgrp"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", groups]);
        let out = c.run(&args);
        assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
        let groups = std::fs::read_to_string(c.path("groups")).expect("groups");
        let (cmd, lw) = groups.trim().split_once(' ').expect("two groups");
        cmd == lw
    };
    assert!(!same(&[]), "CMD leads a group of its own");
    assert!(
        same(&["--foreground"]),
        "--foreground keeps CMD in lockwright's group"
    );
}

#[test]
fn a_held_lock_exits_75_without_wait_and_is_shown_by_status() {
    let c = Coll::new();
    let holder = c.spawn(&[
        "run",
        "job/held",
        "--owner",
        "alice",
        "--comment",
        "nightly report",
        "--",
        "sh",
        "-c",
        HOLD,
    ]);
    wait_for_file(&c.path("started"));

    let out = c.run(&["run", "job/held", "--", "true"]);
    assert_eq!(code(&out), 75, "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("`job/held` is locked by alice"), "{err}");
    assert!(err.contains("--wait"), "{err}");

    // --wait-until gives up with the same code.
    let out = c.run(&["run", "job/held", "--wait-until", "1s", "--", "true"]);
    assert_eq!(code(&out), 75, "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("gave up waiting"),
        "{}",
        text(&out.stderr)
    );

    // SIGINT while waiting: 128 + 2, and no lock taken.
    let waiter = c.spawn(&["run", "job/held", "--wait", "--", "true"]);
    std::thread::sleep(Duration::from_millis(1500));
    waiter.signal(Signal::SIGINT);
    let out = waiter.finish(LONG);
    assert_eq!(code(&out), 130, "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("SIGINT while waiting"),
        "{}",
        text(&out.stderr)
    );

    // The table: owner, host, comment, tag; never the lock id.
    let locks = c.locks();
    assert_eq!(locks.len(), 1);
    let out = c.run(&["status"]);
    assert!(out.status.success());
    let table = text(&out.stdout);
    for expected in [
        "RESOURCE",
        "job/held",
        "exclusive",
        "alice",
        "nightly report",
        "FENCE",
        &locks[0].lock_id.tag(),
        &locks[0].fence.to_string(),
        locks[0]
            .holder
            .host
            .as_deref()
            .expect("host defaults to the hostname"),
        "1 lock on 1 resource: 1 exclusive, 0 shared, 0 expired",
    ] {
        assert!(
            table.contains(expected),
            "{expected:?} missing from:\n{table}"
        );
    }
    assert_no_lock_id(&locks, &(table.clone() + &err));
    let json = c.status_json(&[]);
    assert_eq!(json.len(), 1);
    assert_eq!(json[0]["owner"], "alice");
    assert_eq!(json[0]["tag"], locks[0].lock_id.tag());
    assert_no_lock_id(&locks, &json[0].to_string());

    std::fs::write(c.path("stop"), "").expect("stop");
    let out = holder.finish(LONG);
    assert_eq!(code(&out), 0);
    assert!(c.locks().is_empty());
}

#[test]
fn shared_runs_share_up_to_the_limit() {
    let c = Coll::new();
    let shared = |n: &str| {
        let script = format!("touch started{n}; while [ ! -e stop ]; do sleep 0.1; done");
        c.spawn(&[
            "run",
            "job/shared",
            "--shared",
            "--limit",
            "2",
            "--",
            "sh",
            "-c",
            &script,
        ])
    };
    let (one, two) = (shared("1"), shared("2"));
    wait_for_file(&c.path("started1"));
    wait_for_file(&c.path("started2"));
    let out = c.run(&[
        "run",
        "job/shared",
        "--shared",
        "--limit",
        "2",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 75, "the third holder: {}", text(&out.stderr));
    let out = c.run(&["run", "job/shared", "--", "true"]);
    assert_eq!(
        code(&out),
        75,
        "exclusive beside shared: {}",
        text(&out.stderr)
    );
    assert_eq!(c.status_json(&["--mode", "s"]).len(), 2);
    std::fs::write(c.path("stop"), "").expect("stop");
    for run in [one, two] {
        assert_eq!(code(&run.finish(LONG)), 0);
    }
    assert!(c.locks().is_empty());
}

#[test]
fn waiting_runs_never_overlap() {
    let c = Coll::new();
    let script =
        |name: &str| format!("echo \"start {name}\" >> log; sleep 0.5; echo \"end {name}\" >> log");
    let runs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            c.spawn(&[
                "run",
                "job/queue",
                "--wait",
                "--ttl",
                "5s",
                "--",
                "sh",
                "-c",
                &script(n),
            ])
        })
        .collect();
    for run in runs {
        let out = run.finish(LONG);
        assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    }
    let log = std::fs::read_to_string(c.path("log")).expect("log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 6, "{log}");
    for pair in lines.chunks(2) {
        let started = pair[0].strip_prefix("start ").expect(&log);
        assert_eq!(pair[1], format!("end {started}"), "overlap:\n{log}");
    }
}

#[test]
fn a_waiter_takes_over_after_the_holder_is_killed() {
    let c = Coll::new();
    let holder = c.spawn(&["run", "job/takeover", "--ttl", "2s", "--", "sh", "-c", HOLD]);
    wait_for_file(&c.path("started"));
    let mut waiter = c.spawn(&[
        "run",
        "job/takeover",
        "--wait",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        "touch took",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiter.running(),
        "the waiter waits while the lock is renewed"
    );

    holder.signal(Signal::SIGKILL);
    let killed = Instant::now();
    drop(holder);
    let out = waiter.finish(LONG);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    assert!(c.path("took").exists());
    // The killed holder's lock had between 1 s and 2 s left; it was waited out.
    assert!(
        killed.elapsed() >= Duration::from_millis(500),
        "took over after {:?}, before the TTL ran out",
        killed.elapsed()
    );
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let c = Coll::new();
    let lw = c.spawn(&[
        "run",
        "job/term",
        "--",
        "sh",
        "-c",
        "trap 'touch got_term; exit 3' TERM; touch started; while :; do sleep 0.1; done",
    ]);
    wait_for_file(&c.path("started"));
    assert_eq!(c.locks().len(), 1);
    lw.signal(Signal::SIGTERM);
    let out = lw.finish(LONG);
    assert_eq!(code(&out), 3, "CMD's code; stderr: {}", text(&out.stderr));
    assert!(c.path("got_term").exists(), "CMD got SIGTERM");
    assert!(c.status_json(&[]).is_empty(), "released");
}

/// Makes the lock of a `run` lost: removes its document from under it (as an operator's
/// unlock would), so that its next renewal is refused. Returns its output.
fn lose_the_lock(c: &Coll, script: &str) -> std::process::Output {
    let lw = c.spawn(&[
        "run",
        "job/lost",
        "--ttl",
        "6s",
        "--kill-after",
        "1s",
        "--",
        "sh",
        "-c",
        script,
    ]);
    wait_for_file(&c.path("started"));
    let removed = c
        .block_on(
            c.client
                .store()
                .collection()
                .delete_many(mongodb::bson::doc! {})
                .into_future(),
        )
        .expect("delete");
    assert_eq!(removed.deleted_count, 1);
    lw.finish(LONG)
}

#[test]
fn a_lost_lock_terminates_cmd_with_sigterm() {
    let c = Coll::new();
    let out = lose_the_lock(
        &c,
        "trap 'touch got_term; exit 0' TERM; touch started; while :; do sleep 0.1; done",
    );
    let err = text(&out.stderr);
    assert_eq!(code(&out), 76, "stderr: {err}");
    assert!(err.contains("was lost"), "{err}");
    assert!(
        !err.contains("still running"),
        "CMD exited on SIGTERM: {err}"
    );
    assert!(c.path("got_term").exists(), "CMD got SIGTERM");
}

#[test]
fn a_lost_lock_kills_cmd_that_ignores_sigterm() {
    let c = Coll::new();
    let out = lose_the_lock(
        &c,
        "trap '' TERM; echo $$ > pid; touch started; while :; do sleep 0.1; done",
    );
    let err = text(&out.stderr);
    assert_eq!(code(&out), 76, "stderr: {err}");
    assert!(err.contains("(SIGKILL in 1s)"), "{err}");
    assert!(err.contains("still running; sending SIGKILL"), "{err}");
}

#[test]
fn kill_after_must_leave_renewals_their_time() {
    let c = Coll::new();
    // A renewal at 1 s leaves 0.9 s of trust: SIGTERM may come at most 0.45 s early.
    let out = c.run(&[
        "run",
        "job/k",
        "--ttl",
        "2s",
        "--kill-after",
        "1s",
        "--",
        "true",
    ]);
    let err = text(&out.stderr);
    assert_eq!(code(&out), 2, "stderr: {err}");
    assert!(
        err.contains("--kill-after 1s: at most 450ms with --ttl 2s"),
        "{err}"
    );
    let out = c.run(&[
        "run",
        "job/k",
        "--ttl",
        "2s",
        "--kill-after",
        "450ms",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let out = c.run(&[
        "elect",
        "job/k",
        "--lease",
        "2s",
        "--kill-after",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 2, "stderr: {}", text(&out.stderr));
}

#[test]
fn waiting_runs_are_granted_in_the_order_they_came_and_shown_waiting() {
    let c = Coll::new();
    let holder = c.spawn(&["run", "job/fair", "--ttl", "10s", "--", "sh", "-c", HOLD]);
    wait_for_file(&c.path("started"));
    let mut waiters = Vec::new();
    for name in ["first", "second", "third"] {
        waiters.push(c.spawn(&[
            "run",
            "job/fair",
            "--wait",
            "--ttl",
            "10s",
            "--",
            "sh",
            "-c",
            &format!("echo {name} >> order"),
        ]));
        // Each has its place before the next one comes.
        let n = waiters.len();
        assert!(
            wait_for(LONG, || {
                let out = c.run(&["status", "--resource", "job/fair"]);
                text(&out.stdout).contains(&format!("{n} waiting for job/fair:"))
            }),
            "waiter {name} never took its place"
        );
    }
    let out = c.run(&["status", "--resource", "job/fair"]);
    let table = text(&out.stdout);
    assert!(table.contains("  1. exclusive since "), "{table}");
    assert!(table.contains("  3. exclusive since "), "{table}");
    assert_no_lock_id(&c.locks(), &table);
    holder.signal(Signal::SIGTERM);
    drop(holder);
    for w in waiters {
        let out = w.finish(LONG);
        assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    }
    let order = std::fs::read_to_string(c.path("order")).expect("order");
    assert_eq!(order, "first\nsecond\nthird\n");
    let out = c.run(&["status", "--resource", "job/fair"]);
    assert!(
        !text(&out.stdout).contains("waiting"),
        "{}",
        text(&out.stdout)
    );
}
