//! Contention from the command line: waiters under `status`, the `--watch` view sorted by
//! contention, and `--prometheus` gauges, each checked value by value.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lockwright::{Access, Error, LockOptions, LockRequest, LockStore, Ticket, generate_lock_id};
use nix::sys::signal::Signal;

use crate::support::{Coll, assert_no_lock_id, code, text, wait_for};

/// `hot`: one exclusive holder and two fair writers queued (the first one since `T`);
/// `readers`: two shared holders; `quiet`: one exclusive holder. Places last 10 minutes.
fn contended() -> Coll {
    let c = Coll::new();
    let held = LockOptions::new().ttl(Duration::from_secs(600));
    c.block_on(async {
        c.client.lock("hot", generate_lock_id(), &held).await?;
        for _ in 0..2 {
            // A Client call takes no place: the store's port does, given a ticket.
            let ticket = Ticket::new(generate_lock_id(), Duration::from_secs(600))?;
            let fair = LockRequest::new("hot", generate_lock_id().as_str(), &held)?.fair(ticket);
            match c.client.store().lock(&fair).await {
                Err(Error::AlreadyLocked {
                    queued: Some(_), ..
                }) => {}
                other => panic!("expected a queued refusal, got {other:?}"),
            }
        }
        c.client
            .lock(
                "readers",
                generate_lock_id(),
                &held.clone().access(Access::Shared(None)),
            )
            .await?;
        c.client
            .lock(
                "readers",
                generate_lock_id(),
                &held.clone().access(Access::Shared(None)),
            )
            .await?;
        c.client.lock("quiet", generate_lock_id(), &held).await
    })
    .expect("locks");
    c
}

/// The samples of a Prometheus text exposition: (name, labels) → value. Comments skipped.
fn samples(exposition: &str) -> BTreeMap<(String, BTreeSet<(String, String)>), f64> {
    exposition
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once("=\"").expect("a label");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            ((name.to_owned(), labels), value.parse().expect("a number"))
        })
        .collect()
}

fn key(name: &str, labels: &[(&str, &str)]) -> (String, BTreeSet<(String, String)>) {
    (
        name.to_owned(),
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[test]
fn status_names_the_resources_with_waiters() {
    let c = contended();
    let out = c.run(&["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[lines.len() - 2],
        "4 locks on 3 resources: 2 exclusive, 2 shared, 0 expired"
    );
    let waiting = lines[lines.len() - 1];
    assert!(
        waiting.starts_with("waiting: 2 for `hot` (longest "),
        "{table}"
    );
    assert!(!waiting.contains("readers") && !waiting.contains("quiet"));
    assert_no_lock_id(&c.locks(), &table);
    // A filtered listing shows its locks alone.
    let mine = text(&c.run(&["status", "--mode", "s"]).stdout);
    assert!(
        mine.ends_with("2 locks on 1 resource: 0 exclusive, 2 shared, 0 expired\n"),
        "{mine}"
    );
    // Nobody waiting: no such line.
    let calm = Coll::new();
    calm.block_on(
        calm.client
            .lock("a", generate_lock_id(), &LockOptions::new()),
    )
    .expect("lock");
    let table = text(&calm.run(&["status"]).stdout);
    assert!(!table.contains("waiting"), "{table}");
}

#[test]
fn prometheus_exports_totals_and_the_most_contended_resources() {
    let c = contended();
    let out = c.run(&["status", "--prometheus", "--top", "2"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let exposition = text(&out.stdout);
    assert_no_lock_id(&c.locks(), &exposition);
    let got = samples(&exposition);
    let ns = c.namespace.as_str();
    let coll = ("collection", ns);
    let mut want = BTreeMap::new();
    for (name, labels, value) in [
        (
            "lockwright_collection_locks_held",
            vec![coll, ("mode", "exclusive")],
            2.0,
        ),
        (
            "lockwright_collection_locks_held",
            vec![coll, ("mode", "shared")],
            2.0,
        ),
        ("lockwright_collection_locks_abandoned", vec![coll], 0.0),
        ("lockwright_collection_resources_held", vec![coll], 3.0),
        (
            "lockwright_collection_waiters",
            vec![coll, ("mode", "exclusive")],
            2.0,
        ),
        (
            "lockwright_collection_waiters",
            vec![coll, ("mode", "shared")],
            0.0,
        ),
        ("lockwright_collection_malformed_documents", vec![coll], 0.0),
        // --top 2: `hot` (waiters), then `readers` (two holders); not `quiet`.
        (
            "lockwright_resource_locks_held",
            vec![coll, ("resource", "hot"), ("mode", "exclusive")],
            1.0,
        ),
        (
            "lockwright_resource_locks_held",
            vec![coll, ("resource", "hot"), ("mode", "shared")],
            0.0,
        ),
        (
            "lockwright_resource_waiters",
            vec![coll, ("resource", "hot"), ("mode", "exclusive")],
            2.0,
        ),
        (
            "lockwright_resource_waiters",
            vec![coll, ("resource", "hot"), ("mode", "shared")],
            0.0,
        ),
        (
            "lockwright_resource_locks_held",
            vec![coll, ("resource", "readers"), ("mode", "exclusive")],
            0.0,
        ),
        (
            "lockwright_resource_locks_held",
            vec![coll, ("resource", "readers"), ("mode", "shared")],
            2.0,
        ),
        (
            "lockwright_resource_waiters",
            vec![coll, ("resource", "readers"), ("mode", "exclusive")],
            0.0,
        ),
        (
            "lockwright_resource_waiters",
            vec![coll, ("resource", "readers"), ("mode", "shared")],
            0.0,
        ),
        (
            "lockwright_resource_longest_wait_seconds",
            vec![coll, ("resource", "readers")],
            0.0,
        ),
    ] {
        want.insert(key(name, &labels), value);
    }
    // The waits are the server's time since the first place was taken: positive, and
    // the same for the resource and the collection.
    let longest = key("lockwright_collection_longest_wait_seconds", &[coll]);
    let hot_wait = key(
        "lockwright_resource_longest_wait_seconds",
        &[coll, ("resource", "hot")],
    );
    assert!(got[&longest] > 0.0, "{exposition}");
    assert_eq!(got[&longest], got[&hot_wait], "{exposition}");
    let mut rest = got.clone();
    rest.remove(&longest);
    rest.remove(&hot_wait);
    assert_eq!(rest, want, "{exposition}");
    // Families and samples in name order: the same state prints the same text.
    let names: Vec<&str> = exposition
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut in_order = names.clone();
    in_order.sort_unstable();
    assert_eq!(names, in_order, "{exposition}");
    // Each gauge has its help and type lines.
    for name in [
        "lockwright_collection_locks_held",
        "lockwright_collection_longest_wait_seconds",
        "lockwright_resource_waiters",
    ] {
        assert!(
            exposition.contains(&format!("# TYPE {name} gauge")),
            "{exposition}"
        );
        assert!(
            exposition.contains(&format!("# HELP {name} ")),
            "{exposition}"
        );
    }
}

#[test]
fn prometheus_counts_and_names_malformed_documents_and_exports_the_rest() {
    let c = contended();
    c.block_on(async {
        c.client
            .store()
            .collection()
            .insert_one(mongodb::bson::doc! {
                "resource": "broken", "exclusive": { "lockId": "x", "acquired": true, "createdAt": "yesterday" }
            })
            .await
    })
    .expect("insert");
    let out = c.run(&["status", "--prometheus", "--top", "0"]);
    assert_eq!(code(&out), 1, "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("1 malformed document(s) left out") && err.contains("broken"),
        "{err}"
    );
    let got = samples(&text(&out.stdout));
    let coll = ("collection", c.namespace.as_str());
    assert_eq!(
        got[&key("lockwright_collection_malformed_documents", &[coll])],
        1.0
    );
    assert_eq!(
        got[&key("lockwright_collection_resources_held", &[coll])],
        3.0
    );
    assert!(
        !got.keys()
            .any(|(name, _)| name.starts_with("lockwright_resource_")),
        "--top 0 exports no resource series"
    );
}

#[test]
fn watch_refreshes_a_view_sorted_by_contention_until_stopped() {
    let c = contended();
    let watch = c.spawn_to_file(&["status", "--watch", "--every", "200ms"], "watch.out");
    let frames = || {
        std::fs::read_to_string(c.path("watch.out"))
            .unwrap_or_default()
            .matches("RESOURCE")
            .count()
    };
    assert!(
        wait_for(Duration::from_secs(60), || frames() >= 2),
        "no second frame"
    );
    // A release shows in a later frame.
    c.block_on(async {
        let quiet = c
            .client
            .status(&lockwright::Filter::new().resource("quiet"))
            .await?;
        c.client.unlock(&quiet[0].lock_id).await
    })
    .expect("release quiet");
    let before = frames();
    assert!(wait_for(Duration::from_secs(60), || frames() >= before + 2));
    watch.signal(Signal::SIGTERM);
    let out = watch.finish(Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let shown = std::fs::read_to_string(c.path("watch.out")).expect("output");
    assert_no_lock_id(&c.locks(), &shown);
    let frames: Vec<&str> = shown.split("\n\n").collect();
    let first = frames[0];
    let header = first.lines().next().expect("a header");
    assert!(
        header.ends_with(&format!(
            "{}: 3 resource(s) held, 2 waiting (every 200ms; Ctrl-C stops)",
            c.namespace
        )),
        "{header}"
    );
    let rows: Vec<Vec<&str>> = first
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{first}");
    // Most contended first: hot (2 waiters), readers (2 holders), quiet.
    assert_eq!(
        (rows[0][0], rows[0][1], rows[0][2], rows[0][3]),
        ("hot", "x", "2", "x")
    );
    assert_eq!(
        (rows[1][0], rows[1][1], rows[1][2], rows[1][3]),
        ("readers", "2", "s", "-")
    );
    assert_eq!((rows[2][0], rows[2][1], rows[2][2]), ("quiet", "x", "-"));
    let last = frames[frames.len() - 1];
    assert!(!last.contains("quiet"), "released: {last}");
    assert!(last.contains("2 resource(s) held, 2 waiting"), "{last}");
    assert!(
        last.trim_end().ends_with("refresh(es)") && last.contains("stopped by SIGTERM"),
        "{last}"
    );
}
