//! The replica set fixture itself, on real mongods: a three-member set whose member 2 runs
//! with its wall clock 3 s ahead (libfaketime); a step-down, a kill and a restart, a pause
//! and a resume; and nothing left behind once it is dropped.
//!
//! It needs the mongod that `scripts/mongod.sh install` installs (or `LOCKWRIGHT_MONGOD`) and
//! libfaketime (which the same script installs); without them it fails and says so.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use lockwright_testkit::replset::{MemberState, ReplSet};
use mongodb::bson::doc;
use mongodb::options::WriteConcern;

/// The skewed member and its offset.
const SKEWED: usize = 2;
const SKEW_MS: i64 = 3_000;

async fn start() -> ReplSet {
    let t = Instant::now();
    let set = match ReplSet::builder(3).skew_ms(SKEWED, SKEW_MS).start().await {
        Ok(set) => set,
        Err(e) => panic!("cannot start the replica set: {e}"),
    };
    eprintln!("set started in {:.1} s", t.elapsed().as_secs_f64());
    set
}

/// A majority write through the set's URI, which must find the primary whoever it is.
async fn write_through_uri(set: &ReplSet, n: i32) {
    let client = mongodb::Client::with_uri_str(set.uri()).await.unwrap();
    client
        .database("replset_fixture")
        .collection("docs")
        .insert_one(doc! { "n": n })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_fail_over_pause_and_keep_a_shifted_clock() {
    let set = start().await;
    assert_eq!(set.member_count(), 3);
    assert!(set.uri().starts_with("mongodb://127.0.0.1:"));
    assert!(set.uri().ends_with("/?replicaSet=rs0"));
    assert_eq!(set.skew_ms(SKEWED), SKEW_MS);
    write_through_uri(&set, 0).await;

    // The shifted member joined the set (start() waited for every member to be PRIMARY or
    // SECONDARY) and its clock reads about 3 s ahead of the others'.
    let mut offsets = Vec::new();
    for m in 0..3 {
        offsets.push(set.clock_offset_ms(m).await.unwrap());
    }
    eprintln!("clock offsets against this process: {offsets:?} ms");
    for m in [0, 1] {
        let ahead = offsets[SKEWED] - offsets[m];
        assert!(
            (2_000..=4_000).contains(&ahead),
            "member {SKEWED} reads {ahead} ms ahead of member {m}, not about {SKEW_MS}"
        );
    }

    // Step-down: the primary steps down and another member becomes primary (the old one
    // may not stand again for 5 s).
    let p0 = set.primary().await.unwrap();
    let t = Instant::now();
    assert_eq!(set.step_down().await.unwrap(), p0);
    let p1 = set.primary().await.unwrap();
    eprintln!(
        "step-down of member {p0}: member {p1} primary after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_ne!(p0, p1);
    write_through_uri(&set, 1).await;

    // Kill and restart the primary.
    let pid = set.pid(p1).unwrap();
    let t = Instant::now();
    assert_eq!(set.kill_primary().await.unwrap(), p1);
    assert!(!set.is_running(p1));
    assert!(set.pid(p1).is_none());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists after the kill"
    );
    assert!(matches!(
        set.member_state(p1).await.unwrap(),
        MemberState::Unreachable(_)
    ));
    assert!(
        set.kill(p1).await.is_err(),
        "killing a dead member must fail"
    );
    set.restart(p1).await.unwrap();
    assert!(set.is_running(p1));
    eprintln!(
        "kill + restart of member {p1}: healthy again after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        set.restart(p1).await.is_err(),
        "restarting a running member must fail"
    );
    write_through_uri(&set, 2).await;

    // Pause a secondary: it stops answering, the set is not healthy, the primary still
    // takes majority writes; after a resume it is healthy again.
    let p = set.primary().await.unwrap();
    let s = (p + 1) % 3;
    set.pause(s).unwrap();
    assert!(set.is_running(s));
    // SIGSTOP is delivered asynchronously: a `hello` racing it may still be answered, so
    // the member must stop answering within a few attempts (each waits 2 s for an answer).
    let mut states = Vec::new();
    for _ in 0..5 {
        let state = set.member_state(s).await.unwrap();
        let unreachable = matches!(state, MemberState::Unreachable(_));
        if !unreachable {
            eprintln!("member {s} answered after SIGSTOP: {state:?}");
        }
        states.push(state);
        if unreachable {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        matches!(states.last(), Some(MemberState::Unreachable(_))),
        "a paused member still answers: {states:?}"
    );
    write_through_uri(&set, 3).await;
    set.resume(s).unwrap();
    let t = Instant::now();
    set.wait_healthy().await.unwrap();
    eprintln!(
        "member {s} paused and resumed: healthy again after {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // After the kill, restart and pause, the skewed member still reads about 3 s ahead (a
    // restart keeps a member's offset).
    let ahead = set.clock_offset_ms(SKEWED).await.unwrap()
        - set.clock_offset_ms((SKEWED + 1) % 3).await.unwrap();
    assert!(
        (2_000..=4_000).contains(&ahead),
        "member {SKEWED} now reads {ahead} ms ahead"
    );

    // Pause one that stays paused: the drop must still stop it.
    set.pause(0).unwrap();
    let pids: Vec<u32> = (0..3).filter_map(|m| set.pid(m)).collect();
    let dirs: Vec<_> = (0..3).map(|m| set.dir(m).to_path_buf()).collect();
    assert_eq!(pids.len(), 3);
    let t = Instant::now();
    tokio::task::spawn_blocking(move || drop(set))
        .await
        .unwrap();
    eprintln!("set dropped in {:.1} s", t.elapsed().as_secs_f64());
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "mongod {pid} survived the drop"
        );
    }
    for d in dirs {
        assert!(!d.exists(), "{} survived the drop", d.display());
    }
}
