//! The MongoDB store on a real server (`MONGODB_URI`; `scripts/bench` starts a throwaway
//! one): every path of the targets in docs/performance.md, each measured by criterion
//! (`iter_custom`, with untimed set-up and clean-up around each operation) and printed with
//! the commands it sent and their query plans (shown, not judged: store-mongo's tests
//! assert both). benches/README.md describes each data set.
//!
//! xlock, slock_at_limit, the one-lock cycles, `baseline_twice`, the slock diagnostics and
//! the fenced writes are also measured interleaved with a reference write on a client
//! without command monitoring (`…/interleaved` lines), which cancels drifts of the
//! machine's load between the two. `locker_renewals/N` is measured by the bench itself.
//!
//! Inserted documents follow the store's schema; every set-up is checked by reading it back
//! through the store (the counts must match), so the store's own decoder vouches for them.

// A bench that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

mod cycle;
mod diagnostics;
mod documents;
mod explain;
mod fenced;
mod grants;
mod groups;
mod harness;
mod locker;
mod purge;
mod status;
mod watched;

use std::sync::Arc;

use criterion::Criterion;
use lockwright_benches::RunMode;
use lockwright_engine::Timestamp;
use lockwright_store_mongo::test_support::{TEST_DATABASE, options};
use mongodb::Client;
use mongodb::bson::doc;
use mongodb::event::EventHandler;

use crate::documents::ready_store;
use crate::grants::Single;
use crate::harness::{Bench, Monitor};

const GROUP: &str = "store_mongo";
/// The manual clock's instant for the purge and status data sets.
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

fn store_mongo(c: &mut Criterion) {
    if std::env::var("MONGODB_URI").map_or(true, |u| u.is_empty()) {
        eprintln!(
            "store_mongo: MONGODB_URI is not set. These benchmarks need a MongoDB replica set: \
             run `scripts/bench` (it starts a throwaway mongod via scripts/mongod.sh), or \
             `scripts/mongod.sh run -- cargo bench -p lockwright-benches --bench store_mongo`, \
             or set MONGODB_URI to your own deployment."
        );
        std::process::exit(2);
    }
    let mode = RunMode::current();
    let ks: &[usize] = mode.pick(&[1, 10], &[1, 10, 100, 1_000], &[1, 10, 100, 1_000]);
    let ns: &[usize] = mode.pick(&[10, 100], &[100, 1_000, 10_000], &[100, 1_000, 10_000]);
    let status_n: usize = mode.pick(1_000, 20_000, 100_000);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let monitor = Arc::new(Monitor::default());
    let client = rt.block_on(async {
        let mut opts = options().await;
        let sink = Arc::clone(&monitor);
        opts.command_event_handler = Some(EventHandler::callback(move |e| sink.on_event(e)));
        Client::with_options(opts).unwrap()
    });
    let bench = Bench {
        rt: &rt,
        monitor: &monitor,
        db: client.database(TEST_DATABASE),
        mode,
    };
    rt.block_on(async {
        let info = bench.db.run_command(doc! { "buildInfo": 1 }).await.unwrap();
        let version = info.get_str("version").unwrap_or("unknown");
        println!("store_mongo: MongoDB {version}, majority writes");
    });

    let mut group = c.benchmark_group(GROUP);
    let mut stores = Vec::new();

    // Single-resource paths, against the bare upsert on the same collection.
    let latency = rt.block_on(ready_store(&client, None));
    grants::baseline(&bench, &mut group, latency.collection());
    // The interleaved measurements run the same store and baseline on a client without
    // command monitoring: what a user's client does, and no event documents built for the
    // grant's larger command than for the baseline's.
    let plain_client = rt.block_on(async { Client::with_options(options().await).unwrap() });
    let single = Single::new(&bench, latency, &plain_client);
    grants::xlock(&single, &mut group);
    cycle::cycles(&single, &mut group);
    diagnostics::baseline_twice(&single, &mut group);
    cycle::one_lock_operations(&single, &mut group);
    grants::slock_at_limit(&single, &mut group);
    diagnostics::slock_appends(&single, &mut group);
    grants::slock_refused_full(&single, &mut group);
    stores.push(single.latency);

    // Fenced writes to a user's collection, against the same write without a fence.
    let fenced = fenced::fenced_writes(&bench, &mut group, &client, &plain_client);

    // Group operations of K locks.
    stores.push(groups::renew(&bench, &mut group, &client, ks));
    stores.push(groups::unlock(&bench, &mut group, &client, ks));

    // Purge of N expired groups among N live ones, on a manual clock; ten samples from here
    // on.
    group.sample_size(10);
    stores.push(purge::purge(&bench, &mut group, &client, ns));

    // Status with each filter kind over `status_n` locks, inserted once.
    stores.push(status::status(&bench, &mut group, &client, status_n));
    group.finish();

    // A Locker holding N guards on MongoDB: store commands per renewal cycle, and how late
    // each renewal round reaches the store. Not a criterion benchmark: one measurement per
    // N over a few renewal cycles. (Waiting Lockers are in the `waiting` bench.)
    locker::locker_renewals(&bench, &client);

    rt.block_on(async {
        // Best effort: a leftover collection in the test database harms nothing.
        for store in &stores {
            let _ = store.collection().drop().await;
        }
        let _ = bench
            .db
            .collection::<mongodb::bson::Document>(&fenced)
            .drop()
            .await;
        client.shutdown().await;
        plain_client.shutdown().await;
    });
}

fn main() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    store_mongo(&mut criterion);
    criterion.final_summary();
}
