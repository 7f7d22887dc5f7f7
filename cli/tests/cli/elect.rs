//! `lockwright elect` and `lockwright leader`: the first candidate leads and runs CMD with
//! the fence and its value, a second waits in line and leads when the first's CMD exits
//! (it resigns), `leader` shows who leads (exit 1 when nobody does), and a leader killed
//! with SIGKILL is followed once its lease and the grace are over; on a three-member set of
//! its own, a leader killed across a failover of the set is followed too, and the writes
//! of its fence are refused once its successor has written.

use std::time::Duration;

use crate::support::{Coll, assert_no_lock_id, code, text, wait_for, wait_for_file};

/// A CMD that records its environment (written whole, then renamed: a reader never finds
/// the file empty), then runs until `stop-<name>` exists.
fn hold(name: &str) -> String {
    format!(
        "echo \"$LOCKWRIGHT_FENCE $LOCKWRIGHT_RESOURCE $LOCKWRIGHT_LEADER_VALUE\" > env-{name}.tmp; \
         mv env-{name}.tmp env-{name}; echo $$ > pid-{name}; \
         while [ ! -e stop-{name} ]; do sleep 0.1; done"
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

    // b is killed outright: its watchdog kills its CMD, and its lock stays until its
    // lease ends; the next candidate leads after the lease and the grace.
    let c_cmd = hold("c");
    let cand = c.spawn(&[
        "elect", "sched", "--value", "c:1", "--once", "--", "sh", "-c", &c_cmd,
    ]);
    std::thread::sleep(Duration::from_millis(500));
    b.signal(nix::sys::signal::Signal::SIGKILL);
    wait_for_file(&c.path("env-c"));
    std::fs::write(c.path("stop-c"), "").unwrap();
    let out = cand.finish(LONG);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    assert!(c.locks().is_empty(), "c resigned when its CMD exited");
}

/// The fence a CMD of `hold` wrote to the scratch file `name`, once it is there whole.
fn fence_in(c: &Coll, name: &str) -> u64 {
    let mut fence = None;
    let written = wait_for(LONG, || {
        let text = std::fs::read_to_string(c.path(name)).unwrap_or_default();
        fence = text.split_whitespace().next().and_then(|f| f.parse().ok());
        fence.is_some()
    });
    fence.unwrap_or_else(|| panic!("no fence in {name} within {LONG:?} ({written})"))
}

/// On a three-member replica set of its own: a leads; b waits in line; a's process (and its
/// CMD) is killed with SIGKILL and the primary is killed too, so the set fails over while
/// a's lock waits out its lease and the grace. b leads with a higher fence; once b has
/// written through `FencedCollection`, every write still carrying a's fence (one a sent
/// before it died, arriving late) is refused, naming b's fence.
#[test]
fn a_leader_killed_across_a_failover_is_fenced_out() {
    use lockwright::{FencedCollection, Resource};
    use mongodb::bson::{Document, doc};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let set = runtime
        .block_on(lockwright_testkit::replset::ReplSet::start(3))
        .unwrap_or_else(|e| panic!("cannot start a three-member replica set: {e}"));
    let c = Coll::on(set.uri());
    let a = c.spawn(&[
        "elect",
        "job",
        "--value",
        "a:1",
        "--lease",
        "3s",
        "--",
        "sh",
        "-c",
        &hold("a"),
    ]);
    let a_fence = fence_in(&c, "env-a");
    let b = c.spawn(&[
        "elect",
        "job",
        "--value",
        "b:1",
        "--lease",
        "3s",
        "--",
        "sh",
        "-c",
        &hold("b"),
    ]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!c.path("env-b").exists(), "b waits while a leads");
    // a dies (its watchdog kills its CMD), and the set loses its primary.
    let mut a = a;
    a.signal(nix::sys::signal::Signal::SIGKILL);
    assert!(wait_for(LONG, || !a.running()), "a was killed");
    let old_primary = runtime.block_on(set.kill_primary()).unwrap();
    let b_fence = fence_in(&c, "env-b");
    assert!(b_fence > a_fence, "b's fence {b_fence} after a's {a_fence}");
    let others: Vec<usize> = (0..3).filter(|&m| m != old_primary).collect();
    let failed_over = wait_for(LONG, || {
        others.iter().any(|&m| {
            let state = runtime.block_on(set.member_state(m));
            matches!(state, Ok(lockwright_testkit::replset::MemberState::Primary))
        })
    });
    assert!(failed_over, "another member became primary");

    // b's first write, then a's late one: refused, naming b's fence.
    let mongo = runtime
        .block_on(mongodb::Client::with_uri_str(set.uri()))
        .unwrap();
    let orders = mongo
        .database("lockwright_test")
        .collection::<Document>(&format!(
            "{}_orders",
            &c.namespace["lockwright_test.".len()..]
        ));
    let job = Resource::new("job").unwrap();
    let (b_writes, a_writes) = (
        FencedCollection::new(&orders, job.clone(), b_fence),
        FencedCollection::new(&orders, job, a_fence),
    );
    runtime
        .block_on(async {
            b_writes
                .upsert_one(doc! {"_id": 1}, doc! {"$set": {"by": "b"}})
                .await
        })
        .expect("b's write");
    let late = runtime.block_on(async {
        a_writes
            .upsert_one(doc! {"_id": 1}, doc! {"$set": {"by": "a"}})
            .await
    });
    match late {
        Err(lockwright::Error::Fenced { seen_fence, .. }) => assert_eq!(seen_fence, b_fence),
        other => panic!("a's late write must be refused, naming b's fence: {other:?}"),
    }
    std::fs::write(c.path("stop-b"), "").unwrap();
    let out = b.finish(LONG);
    assert_eq!(code(&out), 0, "stderr: {}", text(&out.stderr));
    runtime.block_on(async { orders.drop().await }).ok();
    drop(c);
    drop(set);
}
