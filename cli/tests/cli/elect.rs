//! `lockwright elect` and `lockwright leader`: the first candidate leads and runs CMD with
//! the fence and its value, a second waits in line and leads when the first's CMD exits
//! (it resigns), `leader` shows who leads (exit 1 when nobody does), and a leader killed
//! with SIGKILL is followed once its lease and the grace are over.

use std::time::Duration;

use crate::support::{Coll, assert_no_lock_id, code, kill_group_in, text, wait_for_file};

/// A CMD that records its environment, then runs until `stop-<name>` exists.
fn hold(name: &str) -> String {
    format!(
        "echo \"$LOCKWRIGHT_FENCE $LOCKWRIGHT_RESOURCE $LOCKWRIGHT_LEADER_VALUE\" > env-{name}; \
         echo $$ > pid-{name}; while [ ! -e stop-{name} ]; do sleep 0.1; done"
    )
}

const LONG: Duration = Duration::from_secs(60);

#[test]
fn candidates_lead_in_turn_and_leader_says_who() {
    let c = Coll::new();
    let out = c.run(&["leader", "sched"]);
    assert_eq!(code(&out), 1, "nobody leads yet");
    assert!(
        text(&out.stdout).contains("no leader"),
        "{}",
        text(&out.stdout)
    );
    let out = c.run(&["leader", "sched", "--watch", "--every", "1ms"]);
    assert_eq!(
        code(&out),
        2,
        "an interval that would hammer the store is refused"
    );
    assert!(
        text(&out.stderr).contains("--every"),
        "{}",
        text(&out.stderr)
    );

    let a_cmd = hold("a");
    let a = c.spawn(&["elect", "sched", "--value", "a:1", "--", "sh", "-c", &a_cmd]);
    wait_for_file(&c.path("env-a"));
    let env = std::fs::read_to_string(c.path("env-a")).unwrap();
    let fields: Vec<&str> = env.split_whitespace().collect();
    let a_fence: u64 = fields[0].parse().expect("a fence");
    assert_eq!(&fields[1..], ["sched", "a:1"]);

    let out = c.run(&["leader", "sched", "--json"]);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(shown["value"], "a:1");
    assert_eq!(shown["fence"], a_fence);
    assert_no_lock_id(&c.locks(), &text(&out.stdout));

    // b waits in line; a's CMD exits, a resigns, b leads with a higher fence.
    let b_cmd = hold("b");
    let b = c.spawn(&[
        "elect", "sched", "--value", "b:1", "--lease", "3s", "--", "sh", "-c", &b_cmd,
    ]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!c.path("env-b").exists(), "b waits while a leads");
    std::fs::write(c.path("stop-a"), "").unwrap();
    let out = a.finish(LONG);
    assert_eq!(
        code(&out),
        0,
        "a exits with its CMD's code: {}",
        text(&out.stderr)
    );
    wait_for_file(&c.path("env-b"));
    let env = std::fs::read_to_string(c.path("env-b")).unwrap();
    let b_fence: u64 = env.split_whitespace().next().unwrap().parse().unwrap();
    assert!(b_fence > a_fence, "{b_fence} after {a_fence}");
    let out = c.run(&["leader", "sched"]);
    assert!(text(&out.stdout).contains("b:1"), "{}", text(&out.stdout));

    // b is killed outright: its CMD is left running (kill it too), and its lock stays
    // until its lease ends; the next candidate leads after the lease and the grace.
    let c_cmd = hold("c");
    let cand = c.spawn(&[
        "elect", "sched", "--value", "c:1", "--once", "--", "sh", "-c", &c_cmd,
    ]);
    std::thread::sleep(Duration::from_millis(500));
    b.signal(nix::sys::signal::Signal::SIGKILL);
    kill_group_in(&c.path("pid-b"));
    wait_for_file(&c.path("env-c"));
    std::fs::write(c.path("stop-c"), "").unwrap();
    let out = cand.finish(LONG);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    assert!(c.locks().is_empty(), "c resigned when its CMD exited");
}
