//! `lockwright status --watch` (a top-like view of the resources, most contended first) and
//! `status --prometheus` (the collection's state in Prometheus's text format), both from
//! one summary: one `aggregate` per refresh or scrape.

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime};

use comfy_table::{ContentArrangement, Table, presets};
use lockwright::{Client, MalformedDocument, MongoStore, ResourceSummary, Summary};
use lockwright_engine::error::Escaped;
use metrics::{Unit, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::connect::ConnArgs;
use crate::durations::format_ttl;
use crate::exit::{self, CliError};
use crate::signals::Signals;

/// Clears a terminal and puts the cursor at its top left.
const CLEAR: &str = "\x1b[2J\x1b[H";

/// Refreshes the view of the `top` most contended resources every `every` until SIGINT, SIGTERM or SIGHUP: on a terminal in
/// place, otherwise one frame after another, separated by a blank line. A failed refresh
/// is shown and retried at the next one.
pub async fn watch(
    client: &Client<MongoStore>,
    conn: &ConnArgs,
    every: Duration,
    top: usize,
) -> Result<u8, CliError> {
    let mut signals = Signals::catch()?;
    let terminal = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refreshes = 0u64;
    let stopped = |signal, refreshes| {
        println!("stopped by {signal} after {refreshes} refresh(es)");
        Ok(exit::OK)
    };
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            signal = signals.recv() => return stopped(signal, refreshes),
        }
        let result = tokio::select! {
            result = client.summary() => result,
            signal = signals.recv() => return stopped(signal, refreshes),
        };
        refreshes += 1;
        let mut frame = String::new();
        if terminal {
            frame.push_str(CLEAR);
        } else if refreshes > 1 {
            frame.push('\n');
        }
        let now = humantime::format_rfc3339_seconds(SystemTime::now());
        let ns = &conn.collection;
        match result {
            Ok(summary) => {
                frame.push_str(&format!(
                    "{now} {}.{}: {} (every {}; Ctrl-C stops)\n",
                    ns.db,
                    ns.coll,
                    totals(&summary.resources),
                    humantime::format_duration(every)
                ));
                frame.push_str(&view(&summary, top));
            }
            Err(e) => {
                frame.push_str(&format!(
                    "{now} {}.{}: refresh {refreshes} failed: {}\n",
                    ns.db,
                    ns.coll,
                    CliError::from(e).message
                ));
            }
        }
        let mut out = std::io::stdout().lock();
        // A closed pipe ends the watch like a signal would.
        if out
            .write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(exit::OK);
        }
    }
}

/// `3 resources held, 5 waiting, 1 abandoned lock`, or `no locks, nobody waiting`.
fn totals(resources: &[ResourceSummary]) -> String {
    let held = resources.iter().filter(|r| r.held() > 0).count();
    let waiting: u64 = resources.iter().map(|r| u64::from(r.waiting())).sum();
    let abandoned: u64 = resources.iter().map(|r| u64::from(r.abandoned)).sum();
    if held == 0 && waiting == 0 && abandoned == 0 {
        return "no locks, nobody waiting".to_owned();
    }
    let mut parts = vec![
        format!("{held} resource(s) held"),
        format!("{waiting} waiting"),
    ];
    if abandoned > 0 {
        parts.push(format!("{abandoned} abandoned lock(s)"));
    }
    parts.join(", ")
}

/// The `top` most contended resources as a table, a line for the rest, and a line naming
/// the documents that could not be read.
fn view(summary: &Summary, top: usize) -> String {
    let mut out = String::new();
    if !summary.resources.is_empty() {
        let mut table = Table::new();
        table
            .load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header([
                "RESOURCE",
                "HELD",
                "WAITING",
                "LONGEST WAIT",
                "NEXT EXPIRY",
                "ABANDONED",
                "FENCE",
            ]);
        for r in summary.resources.iter().take(top) {
            table.add_row([
                Escaped(r.resource.as_str()).to_string(),
                held(r),
                waiting(r),
                r.longest_wait.map_or_else(|| "-".to_owned(), format_ttl),
                r.next_expiry.map_or_else(|| "-".to_owned(), format_ttl),
                r.abandoned.to_string(),
                r.last_fence.to_string(),
            ]);
        }
        for line in table.to_string().lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let rest = summary.resources.len().saturating_sub(top);
        if rest > 0 {
            out.push_str(&format!("... and {rest} more resource(s) (see --top)\n"));
        }
    }
    if !summary.skipped.is_empty() {
        out.push_str(&format!("{}\n", skipped_line(&summary.skipped)));
    }
    out
}

/// `x` for an exclusive holder, `3 s` for three shared ones, `-` for none.
fn held(r: &ResourceSummary) -> String {
    match (r.held_exclusive, r.held_shared) {
        (0, 0) => "-".to_owned(),
        (x, 0) if x > 0 => "x".to_owned(),
        (0, s) => format!("{s} s"),
        // Never stored (the rules forbid it), but shown as it is if a document says so.
        (x, s) => format!("{x} x + {s} s"),
    }
}

/// `3 (2 x, 1 s)`, `1 x`, or `-`.
fn waiting(r: &ResourceSummary) -> String {
    match (r.waiting_exclusive, r.waiting_shared) {
        (0, 0) => "-".to_owned(),
        (x, 0) => format!("{x} x"),
        (0, s) => format!("{s} s"),
        (x, s) => format!("{} ({x} x, {s} s)", x + s),
    }
}

/// The documents a summary left out, named (at most three) after a count.
pub fn skipped_line(skipped: &[MalformedDocument]) -> String {
    let named: Vec<String> = skipped.iter().take(3).map(ToString::to_string).collect();
    let more = skipped.len().saturating_sub(3);
    format!(
        "{} malformed document(s) left out: {}{}",
        skipped.len(),
        named.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )
}

/// Prints the summary in Prometheus's text format: totals over the collection, and the
/// `top` most contended resources labelled by name. Malformed documents are counted in a
/// gauge and named on standard error, and the exit code is then 1.
pub fn prometheus(summary: &Summary, conn: &ConnArgs, top: usize) -> Result<u8, CliError> {
    let ns = &conn.collection;
    let recorder = PrometheusBuilder::new()
        .add_global_label("collection", format!("{}.{}", ns.db, ns.coll))
        .build_recorder();
    metrics::with_local_recorder(&recorder, || record(summary, top));
    print!("{}", sorted(&recorder.handle().render()));
    if summary.skipped.is_empty() {
        Ok(exit::OK)
    } else {
        Err(CliError::new(exit::FAILURE, skipped_line(&summary.skipped)))
    }
}

/// The exposition with its metric families in name order, and each family's samples in
/// order (the recorder renders them in hash order): the same state prints the same text,
/// which a textfile collector's diffs and a reader's eyes both want.
fn sorted(exposition: &str) -> String {
    let mut families: Vec<(Vec<&str>, Vec<&str>)> = exposition
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let (comments, mut samples): (Vec<&str>, Vec<&str>) =
                block.lines().partition(|l| l.starts_with('#'));
            samples.sort_unstable();
            (comments, samples)
        })
        .collect();
    families.sort_by(|a, b| a.1.first().cmp(&b.1.first()));
    let mut out = String::new();
    for (comments, samples) in families {
        for line in comments.into_iter().chain(samples) {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// The gauges of [`prometheus`]; their names and meaning are listed in the README.
fn record(summary: &Summary, top: usize) {
    describe_gauge!(
        "lockwright_collection_locks_held",
        "Held locks in the collection, by mode."
    );
    describe_gauge!(
        "lockwright_collection_locks_abandoned",
        "Locks expired past the takeover grace and not yet taken over or purged."
    );
    describe_gauge!(
        "lockwright_collection_resources_held",
        "Resources with at least one held lock."
    );
    describe_gauge!(
        "lockwright_collection_waiters",
        "Live places of fair waiters, by the mode they ask for."
    );
    describe_gauge!(
        "lockwright_collection_longest_wait_seconds",
        Unit::Seconds,
        "How long the longest-waiting fair waiter of any resource has been queued."
    );
    describe_gauge!(
        "lockwright_collection_malformed_documents",
        "Stored documents that cannot be read (named on standard error)."
    );
    describe_gauge!(
        "lockwright_resource_locks_held",
        "Held locks of one of the most contended resources, by mode."
    );
    describe_gauge!(
        "lockwright_resource_waiters",
        "Fair waiters of one of the most contended resources, by mode."
    );
    describe_gauge!(
        "lockwright_resource_longest_wait_seconds",
        Unit::Seconds,
        "How long the first fair waiter of one of the most contended resources has waited."
    );
    let rs = &summary.resources;
    let sum = |f: fn(&ResourceSummary) -> u32| rs.iter().map(|r| f64::from(f(r))).sum::<f64>();
    let longest = rs
        .iter()
        .filter_map(|r| r.longest_wait)
        .max()
        .unwrap_or(Duration::ZERO);
    for (mode, count) in [
        ("exclusive", sum(|r| r.held_exclusive)),
        ("shared", sum(|r| r.held_shared)),
    ] {
        gauge!("lockwright_collection_locks_held", "mode" => mode).set(count);
    }
    gauge!("lockwright_collection_locks_abandoned").set(sum(|r| r.abandoned));
    gauge!("lockwright_collection_resources_held").set(sum(|r| u32::from(r.held() > 0)));
    for (mode, count) in [
        ("exclusive", sum(|r| r.waiting_exclusive)),
        ("shared", sum(|r| r.waiting_shared)),
    ] {
        gauge!("lockwright_collection_waiters", "mode" => mode).set(count);
    }
    gauge!("lockwright_collection_longest_wait_seconds").set(longest.as_secs_f64());
    #[allow(clippy::cast_precision_loss)]
    gauge!("lockwright_collection_malformed_documents").set(summary.skipped.len() as f64);
    for r in rs.iter().take(top) {
        let name = r.resource.as_str().to_owned();
        for (mode, count) in [("exclusive", r.held_exclusive), ("shared", r.held_shared)] {
            gauge!("lockwright_resource_locks_held", "resource" => name.clone(), "mode" => mode)
                .set(f64::from(count));
        }
        for (mode, count) in [
            ("exclusive", r.waiting_exclusive),
            ("shared", r.waiting_shared),
        ] {
            gauge!("lockwright_resource_waiters", "resource" => name.clone(), "mode" => mode)
                .set(f64::from(count));
        }
        gauge!("lockwright_resource_longest_wait_seconds", "resource" => name)
            .set(r.longest_wait.unwrap_or_default().as_secs_f64());
    }
}
