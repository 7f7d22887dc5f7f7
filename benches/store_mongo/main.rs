//! The MongoDB store on a real server (`MONGODB_URI`; `scripts/bench` starts a throwaway
//! one): every path of the targets in benches/README.md, each next to the number of commands it sent.
//!
//! Commands are counted with the driver's command monitoring (every `CommandStarted` event
//! of the client), over the timed part of every iteration: the report shows commands per
//! operation, not a number worked out by reading the code. One monitored probe run before
//! each benchmark also keeps the commands themselves, and each one that reads or writes
//! documents is `explain`ed, so the report shows the winning plan of every query the store
//! sent.
//!
//! Data sets (one fresh collection each; all writes with majority write concern):
//! - `baseline`: a bare `find_one_and_update` upsert (`$inc` of a counter) on one document
//!   of the collection `xlock` and `slock` use; the yardstick for both.
//! - `xlock`: an exclusive grant on an existing, free resource; the lock is released
//!   outside the timing. `xlock_unlock` times both.
//! - `acquire_release` / `acquire_renew_release`: the one-lock cycle, a grant (60 s TTL)
//!   then `unlock_one` of the lock it returned (with a `renew_one` between); `renew_one`: a
//!   held lock renewed; `unlock_one`: a lock granted (untimed) before each iteration,
//!   released.
//! - `slock_at_limit`: a shared grant with limit 4 on a resource holding 3 shared locks (the
//!   grant fills it), released outside the timing; `slock_refused_full`: the same request
//!   on a resource already holding 4.
//! - `renew/K`: a group of K locks with a 10 minute TTL, taken through the store once.
//! - `unlock/K`: a group of K locks, inserted with `insert_many` before every iteration.
//! - `purge/N`: N expired groups of one lock among N live ones, inserted with `insert_many`
//!   before every iteration; the store runs on a manual clock so they are expired at once.
//! - `status/<filter>`: 100,000 locks (20,000 with `--quick`) inserted once with
//!   `insert_many`, read by a store on a manual clock; each filter kind matches a few
//!   locks (the note says how many). `status_server_clock/<filter>` is the same query on
//!   the server's clock (resource, lock id, owner: one `aggregate` with the server's `now`;
//!   a TTL bound: `hello` for the time, then a `find`).
//! - `locker_renewals/N`: not a criterion benchmark. A `Locker` holds N guards (N = 1, 100,
//!   1,000; 1 and 10 in test mode) with a short TTL for a few renewal cycles; the commands
//!   the client starts meanwhile per renewal cycle (the Locker's renewals / N), and how late
//!   each renewal round reaches the store, are recorded for the report. Skipped when
//!   criterion's filter does not select its id.
//! - `waiting_cycle/hints_{on,off}`, `handover/W/…`, `contended/N/…`, `crashed_holder/W/…`:
//!   not criterion benchmarks. Lockers waiting for one resource, each on a client of its own,
//!   with hints on and off (`benches/waiting` and `waiting.rs`; benches/README.md says what
//!   each measures). Skipped when criterion's filter selects neither setting's id.
//!
//! - `update_unfenced`, `update_fenced` (also interleaved with the unfenced one) and
//!   `update_fenced_refused`: a user's document updated without a fence, through
//!   `FencedCollection`, and by a stale fence (`fenced.rs`).
//!
//! Diagnostics (rows whose note starts with "diagnostic"), to explain a missed target:
//! `baseline_noop` / `xlock_refused` (the same commands writing nothing, so no journal
//! wait), `baseline_w1` / `xlock_w1` (write concern w:1), `baseline_after_unlock` (the
//! baseline right after an unlock transaction, as `xlock` runs after its cleanup),
//! `baseline_twice` (two upserts back to back, as the acquire+release cycle's two writes),
//! and for renew of 100 locks the store's `update` alone outside a transaction
//! (`renew_update_alone`), the same change as one plain `$set` (`renew_update_set`) and a
//! `$set` of a field no index covers (`renew_update_unindexed`); slock's change (a fourth
//! shared lock appended) as a plain `$push` (`slock_push_modifier`) and as a one-stage update
//! pipeline (`slock_push_pipeline`); purge's expired documents deleted alone, with one
//! `delete_many` (`purge_delete_many`) and in one transaction per batch
//! (`purge_delete_batches`); `status_unmonitored` measures a status on a client without
//! command monitoring (what monitoring costs). `xlock`, `slock_at_limit`, the two one-lock
//! cycles (and the slock and two-write diagnostics) are also measured interleaved with the
//! baseline (the report's "interleaved" figures), which cancels drifts of the machine's load
//! between the two; those rounds run on a client without command monitoring.
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
mod filter;
mod grants;
mod groups;
mod harness;
mod locker;
mod purge;
#[path = "../waiting/mod.rs"]
mod shared_waiting;
mod status;
mod waiting;
mod watched;

use std::sync::Arc;

use criterion::Criterion;
use lockwright_benches::results::load_average;
use lockwright_benches::{Meta, RunMode};
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
    Meta::save("load average when store_mongo began", &load_average(), mode).unwrap();
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
        let hello = bench.db.run_command(doc! { "hello": 1 }).await.unwrap();
        let set = hello.get_str("setName").unwrap_or("no replica set");
        let members = hello.get_array("hosts").map_or(0, Vec::len);
        Meta::save(
            "mongod",
            &format!(
                "MongoDB {version}, replica set {set} of {members} member(s), majority writes"
            ),
            mode,
        )
        .unwrap();
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
    diagnostics::baseline_after_unlock(&single, &mut group);
    grants::slock_refused_full(&single, &mut group);
    diagnostics::without_journal_wait(&single, &mut group, &client);
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
    stores.push(status::status(
        &bench,
        &mut group,
        &client,
        &plain_client,
        status_n,
    ));
    group.finish();

    // A Locker holding N guards on MongoDB: store commands per renewal cycle, and how late
    // each renewal round reaches the store. Not a criterion benchmark: one measurement per
    // N over a few renewal cycles, recorded for the report.
    locker::locker_renewals(&bench, &client);

    // Waiting Lockers (issue 25), hints on and off: the uncontended cycle, the handover to
    // one of W waiters, contended throughput, a crashed holder. Measured by the bench on a
    // runtime of their own, each Locker on a client of its own.
    waiting::waiting(&bench);

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
