//! `--help`, usage errors, `status`, `unlock`, `doctor` and `purge --watch`.

use lockwright::Access;
use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use lockwright::{LockOptions, generate_lock_id};
use lockwright_testkit::replset::ReplSet;
use nix::sys::signal::Signal;
use predicates::prelude::*;

use crate::support::{Coll, assert_no_lock_id, code, text, wait_for};

fn lockwright() -> Command {
    let mut cmd = Command::cargo_bin("lockwright").expect("the binary");
    cmd.env_remove("LOCKWRIGHT_URI")
        .env_remove("LOCKWRIGHT_COLLECTION");
    cmd
}

#[test]
fn help_of_every_subcommand_lists_its_documented_flags() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[],
            &[
                "run",
                "status",
                "purge",
                "unlock",
                "doctor",
                "--uri",
                "--collection",
                "LOCKWRIGHT_URI",
                "LOCKWRIGHT_COLLECTION",
                "Exit codes",
                "75",
                "76",
                "69",
                "78",
            ],
        ),
        (
            &["run"],
            &[
                "RESOURCE",
                "--shared",
                "--limit",
                "--ttl",
                "--wait",
                "--wait-until",
                "--owner",
                "--comment",
                "--kill-after",
                "CMD",
                "LOCKWRIGHT_FENCE",
                "LOCKWRIGHT_RESOURCE",
                "SIGTERM",
                "--uri",
                "--collection",
                "--takeover-grace",
                "75",
                "76",
            ],
        ),
        (
            &["status"],
            &[
                "--resource",
                "--owner",
                "--mode",
                "--expiring-within",
                "--json",
                "--watch",
                "--every",
                "--prometheus",
                "--top",
            ],
        ),
        (&["purge"], &["--watch", "--every"]),
        (&["unlock"], &["--lock-id-from-env", "--lock-id-stdin"]),
        (
            &["doctor"],
            &[
                "--fix",
                "--wakeups",
                "--takeover-grace",
                "replica set",
                "unique index",
            ],
        ),
    ];
    for (sub, flags) in cases {
        let out = lockwright()
            .args(*sub)
            .arg("--help")
            .output()
            .expect("help");
        assert!(out.status.success(), "{sub:?} --help");
        let help = text(&out.stdout);
        for flag in *flags {
            assert!(
                help.contains(flag),
                "`lockwright {sub:?} --help` lacks {flag}:\n{help}"
            );
        }
    }
}

#[test]
fn usage_errors_are_clear_and_exit_2() {
    for (args, message) in [
        (
            &["run", "--ttl", "0s", "r", "--", "true"][..],
            "must be greater than zero",
        ),
        (
            &["run", "--ttl", "abc", "r", "--", "true"],
            "not a duration",
        ),
        (
            &["run", "--wait-until", "5", "r", "--", "true"],
            "not a duration",
        ),
        (&["status", "--expiring-within", "soon"], "not a duration"),
        (&["status", "--top", "5"], "--watch"),
        (&["status", "--every", "1s"], "--watch"),
        (
            &["status", "--watch", "--every", "0s"],
            "must be greater than zero",
        ),
        (
            &["status", "--watch", "--prometheus"],
            "cannot be used with",
        ),
        (&["status", "--watch", "--json"], "cannot be used with"),
        (
            &["status", "--prometheus", "--resource", "r"],
            "cannot be used with",
        ),
        (
            &["status", "--prometheus", "--top", "-1"],
            "unexpected argument",
        ),
        (&["run", "--limit", "2", "r", "--", "true"], "--shared"),
        (
            &["run", "--wait", "--wait-until", "1s", "r", "--", "true"],
            "cannot be used with",
        ),
        (&["run", "r"], "CMD"),
        (
            &["run", "--ttl", "50ms", "r", "--", "true"],
            "--ttl 50ms: must be longer than",
        ),
        (&["unlock"], "--lock-id-from-env"),
        (&["unlock", "0123456789abcdef"], "unexpected argument"),
        (&["--collection", "nodot", "status"], "DATABASE.COLLECTION"),
        (&["doctor", "--takeover-grace", "soon"], "not a duration"),
        (
            &["doctor", "--takeover-grace", "2h"],
            "must be at most 3600 s",
        ),
    ] {
        lockwright()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(message));
    }
}

#[test]
fn status_filters_and_json_lines_show_tags_never_lock_ids() {
    let c = Coll::new();
    let (a, b, d) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let alice = LockOptions::new()
        .owner("alice")
        .host("db-1")
        .comment("line\nbreak")
        .ttl(Duration::from_secs(60));
    let bob = LockOptions::new()
        .owner("bob")
        .ttl(Duration::from_secs(600));
    c.block_on(async {
        c.client.lock("reports", &a, &alice).await?;
        c.client
            .lock(
                "tenant-7",
                &b,
                &bob.clone().access(Access::shared(Some(2)).unwrap()),
            )
            .await?;
        c.client
            .lock(
                "tenant-7",
                &d,
                &bob.clone().access(Access::shared(Some(2)).unwrap()),
            )
            .await
    })
    .expect("locks");
    let locks = c.locks();

    let out = c.run(&["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("line\\nbreak"), "escaped comment:\n{table}");
    assert!(table.contains("db-1") && table.contains("bob"), "{table}");
    assert!(
        table.ends_with("3 locks on 2 resources: 1 exclusive, 2 shared, 0 expired\n"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 5, "header, 3 rows, counts:\n{table}");
    assert_no_lock_id(&locks, &table);

    let all = c.status_json(&[]);
    assert_eq!(all.len(), 3);
    assert_no_lock_id(&locks, &format!("{all:?}"));
    let reports = &all
        .iter()
        .find(|l| l["resource"] == "reports")
        .expect("reports");
    assert_eq!(reports["comment"], "line\nbreak");
    assert_eq!(reports["host"], "db-1");
    assert_eq!(reports["mode"], "exclusive");
    assert_eq!(reports["tag"], a.tag());

    assert_eq!(c.status_json(&["--owner", "bob"]).len(), 2);
    assert_eq!(c.status_json(&["--mode", "s"]).len(), 2);
    assert_eq!(c.status_json(&["--mode", "x"]).len(), 1);
    assert_eq!(c.status_json(&["--resource", "reports"]).len(), 1);
    let soon = c.status_json(&["--expiring-within", "2m"]);
    assert_eq!(soon.len(), 1, "only alice's 60 s lock: {soon:?}");
    let out = c.run(&["status", "--owner", "nobody"]);
    assert_eq!(text(&out.stdout), "no locks\n");
}

#[test]
fn unlock_reads_the_lock_id_from_env_or_stdin_only() {
    let c = Coll::new();
    let details = LockOptions::new().ttl(Duration::from_secs(60));
    let (a, b) = (generate_lock_id(), generate_lock_id());
    c.block_on(async {
        c.client.lock("one", &a, &details).await?;
        c.client.lock("two", &a, &details).await?;
        c.client.lock("three", &b, &details).await
    })
    .expect("locks");
    let locks = c.locks();

    let out = c
        .lw()
        .args(["unlock", "--lock-id-from-env", "MY_LOCK_ID"])
        .env("MY_LOCK_ID", a.as_str())
        .output()
        .expect("unlock");
    let shown = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(code(&out), 0, "{shown}");
    assert!(
        shown.contains(&format!("released 2 lock(s) of lock id {}", a.tag())),
        "{shown}"
    );
    assert_no_lock_id(&locks, &shown);
    assert_eq!(c.locks().len(), 1);

    // Again: nothing held under it.
    let out = c
        .lw()
        .args(["unlock", "--lock-id-from-env", "MY_LOCK_ID"])
        .env("MY_LOCK_ID", a.as_str())
        .output()
        .expect("unlock");
    assert_eq!(code(&out), 1);
    assert!(
        text(&out.stderr).contains("no lock is held"),
        "{}",
        text(&out.stderr)
    );
    assert_no_lock_id(&locks, &text(&out.stderr));

    // A missing variable is a usage error.
    let out = c.run(&["unlock", "--lock-id-from-env", "LOCKWRIGHT_TEST_UNSET"]);
    assert_eq!(code(&out), 2);

    let mut child = c
        .lw()
        .args(["unlock", "--lock-id-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unlock");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{}\n", b.as_str()).as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let shown = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(code(&out), 0, "{shown}");
    assert!(
        shown.contains("released 1 lock(s)") && shown.contains("`three`"),
        "{shown}"
    );
    assert_no_lock_id(&locks, &shown);
    assert!(c.locks().is_empty());
}

#[test]
fn doctor_passes_on_the_test_set_and_names_a_missing_index() {
    use std::future::IntoFuture as _;

    let c = Coll::new();
    let _wakes = crate::doctor::Wakes::dropped(&c);
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}{}", text(&out.stderr));
    for expected in [
        "server reachable",
        "replica set",
        "unique index on `resource`",
        "write concern majority",
        "clock",
        "ok   no cursor is open on the wakes of",
        "ok   no change stream is open on",
        "ok   the wake collection",
        "does not exist yet, which is fine",
        "run `lockwright doctor --wakeups`",
        "no problems found",
    ] {
        assert!(
            report.contains(expected),
            "{expected:?} missing from:\n{report}"
        );
    }
    // --wakeups takes a probe lock, queues a waiter for it and releases it: the hand-over
    // must wake the waiter. Nothing is left behind: no lock, no place, no document.
    let out = c.run(&["doctor", "--wakeups"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}{}", text(&out.stderr));
    assert!(
        report.contains("ok   wake-ups work: a release handed the probe lock to a waiting process"),
        "{report}"
    );
    assert!(c.locks().is_empty(), "{:?}", c.locks());
    let left = c
        .block_on(
            c.client
                .store()
                .collection()
                .count_documents(mongodb::bson::doc! {})
                .into_future(),
        )
        .expect("count");
    assert_eq!(left, 0, "the probe left its document behind");
    // Nor the waiter's cursor on the wakes: its client closed it before doctor exited.
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert!(
        report.contains("ok   no cursor is open on the wakes of"),
        "{report}"
    );

    let fresh = Coll::used_without_index();
    let out = fresh.run(&["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 78, "{report}");
    assert!(
        report.contains("FAIL") && report.contains("no unique index"),
        "{report}"
    );
    // run and status refuse it with the same clear message.
    for args in [&["run", "r", "--", "true"][..], &["status"]] {
        let out = fresh.run(args);
        assert_eq!(code(&out), 78, "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("no unique index") && err.contains("doctor --fix"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // A connection string that lowers the write concern is pointed out; lock writes stay at
    // majority, so the check passes.
    let uri = crate::support::mongodb_uri();
    let weak = if uri.ends_with('/') {
        format!("{uri}?w=1")
    } else if uri.contains('?') {
        format!("{uri}&w=1")
    } else {
        format!("{uri}/?w=1")
    };
    let out = c.run(&["doctor", "--uri", &weak]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}");
    assert!(
        report.contains("ok   lock writes use write concern majority")
            && report.contains("warn the connection string sets write concern w=1"),
        "{report}"
    );

    // --fix creates it.
    let out = fresh.run(&["doctor", "--fix"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("created the unique index"));
    assert_eq!(code(&fresh.run(&["run", "r", "--", "true"])), 0);
}

/// First use needs no set-up: against a collection that does not exist yet, doctor says
/// so (and creates nothing), and `run` works at once, making the unique index.
#[test]
fn first_run_needs_no_set_up() {
    let c = Coll::missing();
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(code(&out), 0, "{report}{}", text(&out.stderr));
    assert!(report.contains("does not exist yet"), "{report}");
    let out = c.run(&["run", "r", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let out = c.run(&["doctor"]);
    let report = text(&out.stdout);
    assert!(
        report.contains("has a unique index on `resource`"),
        "{report}"
    );
}

/// Doctor reads every member's clock: on a three-member set of its own whose member 2 runs
/// 3 s ahead (libfaketime), it fails with the default takeover grace of 2 s and names the
/// members, warns with a grace of 4 s (more than half of it), passes with 7 s, names a
/// member it cannot reach without waiting long for it, and never prints the URI's password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_compares_every_members_clock_with_the_takeover_grace() {
    const SKEWED: usize = 2;
    let set = match ReplSet::builder(3).skew_ms(SKEWED, 3_000).start().await {
        Ok(set) => set,
        Err(e) => panic!("cannot start the replica set: {e}"),
    };
    let host = |m: usize| format!("127.0.0.1:{}", set.port(m));
    let doctor = |uri: &str, extra: &[&str]| {
        let out = lockwright()
            .args(["doctor", "--uri", uri])
            .args(["--collection", "lockwright_test.doctor_clocks"])
            .args(extra)
            .output()
            .expect("doctor");
        let report = text(&out.stdout) + &text(&out.stderr);
        eprintln!("doctor {extra:?}:\n{report}");
        (code(&out), report)
    };

    // The default grace: FAIL, naming the member ahead and one behind.
    let (status, report) = doctor(set.uri(), &["--fix"]);
    assert_eq!(status, 78, "{report}");
    let fail: Vec<&str> = report.lines().filter(|l| l.starts_with("FAIL")).collect();
    let [fail] = fail[..] else {
        panic!("one FAIL line expected:\n{report}")
    };
    assert!(
        fail.contains("members' clocks disagree by 3.0 s")
            && fail.contains("more than the takeover grace of 2 s")
            && fail.contains(&format!("{} runs ahead of 127.0.0.1:", host(SKEWED)))
            && fail.contains("raise the grace to at least 3.1 s"),
        "{fail}"
    );
    assert!(report.contains("created the unique index"), "{report}");
    for m in 0..3 {
        assert!(
            report.contains(&format!("clock of {} (", host(m))),
            "member {m}'s clock missing:\n{report}"
        );
    }
    assert!(
        report.contains(&format!("warn clock of {} (", host(SKEWED))),
        "the skewed member's offset against this machine is a warning:\n{report}"
    );
    assert!(!report.contains("stays correct"), "{report}");

    // 3 s is within 4 s but more than half of it; well within 7 s (given in milliseconds).
    let (status, report) = doctor(set.uri(), &["--takeover-grace", "4s"]);
    assert_eq!(status, 0, "{report}");
    assert!(
        report.contains("warn members' clocks disagree by 3.0 s")
            && report.contains("within the takeover grace of 4 s but by more than half"),
        "{report}"
    );
    let (status, report) = doctor(set.uri(), &["--takeover-grace", "7000"]);
    assert_eq!(status, 0, "{report}");
    assert!(
        report.contains("ok   members' clocks agree within 3.0 s")
            && report.contains("well within the takeover grace of 7 s"),
        "{report}"
    );

    // A URI's password never shows, even when it is refused.
    let secret = set
        .uri()
        .replacen("mongodb://", "mongodb://lw-doctor:s3cret-pw@", 1);
    let (status, report) = doctor(&secret, &["--takeover-grace", "7s"]);
    assert_ne!(status, 0, "{report}");
    assert!(!report.contains("s3cret-pw"), "{report}");

    // A member that does not answer is named, after a short wait.
    let primary = set.primary().await.expect("a primary");
    let down = (primary + 1) % 3;
    set.kill(down).await.expect("kill a secondary");
    let t = Instant::now();
    let (status, report) = doctor(set.uri(), &["--takeover-grace", "7s"]);
    assert_eq!(status, 0, "{report}");
    assert!(
        report.contains(&format!(
            "warn cannot read the clock of member {}",
            host(down)
        )),
        "{report}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "doctor took {:?} with a member down",
        t.elapsed()
    );
}

#[test]
fn an_unreachable_server_is_a_clear_69() {
    // Nothing listens on port 1.
    let out = lockwright()
        .args([
            "status",
            "--uri",
            "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500",
        ])
        .output()
        .expect("status");
    assert_eq!(code(&out), 69);
    let err = text(&out.stderr);
    assert!(
        err.starts_with("lockwright: cannot reach the MongoDB server"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn purge_watch_prints_a_line_per_pass_until_stopped() {
    let c = Coll::new();
    let short = LockOptions::new().ttl(Duration::from_millis(50));
    c.block_on(c.client.lock("stale", generate_lock_id(), &short))
        .expect("lock");
    std::thread::sleep(Duration::from_millis(200));
    // No takeover grace: the lock is abandoned at once (with the default 2 s it would be
    // purged a few passes later).
    let watch = c.spawn(&[
        "purge",
        "--watch",
        "--every",
        "300ms",
        "--takeover-grace",
        "0",
    ]);
    // Passes are printed line by line; wait until the lock is gone and a few passes ran.
    assert!(wait_for(Duration::from_secs(20), || c.locks().is_empty()));
    std::thread::sleep(Duration::from_millis(800));
    watch.signal(Signal::SIGINT);
    let out = watch.finish(Duration::from_secs(20));
    let lines = text(&out.stdout);
    assert_eq!(code(&out), 0, "{lines}{}", text(&out.stderr));
    assert!(
        lines.contains("pass 1: removed 1 expired lock(s): `stale`"),
        "{lines}"
    );
    assert!(lines.contains("pass 2: removed 0 expired locks"), "{lines}");
    assert!(lines.contains("stopped by SIGINT"), "{lines}");
}
