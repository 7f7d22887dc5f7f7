//! What one lock operation costs on MongoDB, against a bare write: the wall time, the
//! server's CPU and the client's CPU of each path, as ratios to a bare majority
//! `find_one_and_update` upsert of a document of the same size, from one run.
//!
//! ```text
//! scripts/mongod.sh run -- cargo run -p lockwright-harness --release --example cost -- [--rounds N]
//! ```
//!
//! Each round runs every path in a block of [`BLOCK`] operations, in an order that rotates
//! from round to round (so that drifts of the machine's load fall on every path alike):
//! the wall time of every operation is kept (the medians are reported), and the server's
//! CPU time (`serverStatus`' `extra_info`, read before and after each block, outside the
//! timing) and the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`: the driver and the
//! store run on this one current-thread runtime) are summed per path. A path that takes
//! two commands (a grant and its release) is compared with two bare upserts. Commands are
//! counted with the driver's command monitoring.

// A harness that cannot set up has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

#[path = "../shared/cpu.rs"]
mod cpu;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use lockwright_engine::{
    LockId, LockOptions, LockRequest, LockStore, Renewal, Resource, SharedLimit, Ticket, Ttl,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{TEST_DATABASE, options, uri};
use mongodb::bson::{Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ReturnDocument;
use mongodb::{Client, Collection};

/// Operations of one path per block.
const BLOCK: usize = 50;
/// The lease of every lock taken (nothing expires while measured).
const TTL: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "What one lock operation costs on MongoDB, against a bare upsert")]
struct Args {
    /// Rounds (each runs every path in a block of 50 operations).
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Only the paths whose names contain one of these (comma-separated); the bare
    /// upserts always run.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

/// One path: its name, how many commands an operation of it is meant to take, and the
/// bare path it is compared with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Upsert,
    UpsertTwice,
    Xlock,
    XlockFair,
    Slock,
    RenewOne,
}

impl Path {
    const ALL: [Path; 6] = [
        Path::Upsert,
        Path::UpsertTwice,
        Path::Xlock,
        Path::XlockFair,
        Path::Slock,
        Path::RenewOne,
    ];

    fn name(self) -> &'static str {
        match self {
            Path::Upsert => "bare upsert",
            Path::UpsertTwice => "bare upsert, twice",
            Path::Xlock => "xlock + unlock_one",
            Path::XlockFair => "fair xlock + unlock_one",
            Path::Slock => "slock (limit 5) + unlock_one",
            Path::RenewOne => "renew_one",
        }
    }

    /// The bare path of the same number of writes.
    fn baseline(self) -> Path {
        match self {
            Path::Upsert | Path::RenewOne => Path::Upsert,
            _ => Path::UpsertTwice,
        }
    }
}

#[derive(Default)]
struct Tally {
    wall: Vec<Duration>,
    server: Duration,
    client: Duration,
    ops: u64,
}

impl Tally {
    fn median(&self) -> Duration {
        let mut w = self.wall.clone();
        w.sort_unstable();
        w.get(w.len() / 2).copied().unwrap_or_default()
    }
    fn per_op(&self, d: Duration) -> Duration {
        d / u32::try_from(self.ops.max(1)).unwrap()
    }
}

struct Setup {
    store: MongoStore,
    bare: Collection<Document>,
    admin: Client,
    commands: Arc<AtomicU64>,
    /// The padding that makes the bare document as big as a lock's.
    pad: String,
    held: Renewal,
    seq: u64,
}

async fn server_cpu(admin: &Client) -> Duration {
    cpu::server_cpu(admin)
        .await
        .expect("serverStatus reports no CPU time (not Linux?)")
}

impl Setup {
    /// The set-up on a client with command monitoring (`monitored`: it counts commands, and
    /// the driver builds a document of each command for it) or without.
    async fn new(collection: &str, monitored: bool) -> Setup {
        let commands = Arc::new(AtomicU64::new(0));
        let mut opts = options().await;
        let counter = commands.clone();
        if monitored {
            opts.command_event_handler = Some(EventHandler::callback(move |e| {
                if let CommandEvent::Started(_) = e {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let client = Client::with_options(opts).unwrap();
        let coll = client.database(TEST_DATABASE).collection(collection);
        coll.drop().await.unwrap();
        let store = MongoStore::from_collection(coll.clone());
        store.create_indexes().await.unwrap();
        let bare = client
            .database(TEST_DATABASE)
            .collection::<Document>(&format!("{collection}_bare"));
        bare.drop().await.unwrap();
        let admin = Client::with_options(options().await).unwrap();
        // A held lock to renew, and the size of a lock's document.
        let held = Renewal {
            resource: Resource::new("cost/renewed").unwrap(),
            lock_id: LockId::new("cost-renewed-lock").unwrap(),
            ttl: Ttl::new(TTL).unwrap(),
        };
        let mut req = LockRequest::new(
            held.resource.as_str(),
            held.lock_id.as_str(),
            &LockOptions::exclusive(TTL).owner("cost").comment("renewed"),
        )
        .unwrap();
        req = req.with_access(lockwright_engine::Access::Exclusive);
        store.lock(&req).await.unwrap();
        let raw = coll
            .clone_with_type::<mongodb::bson::RawDocumentBuf>()
            .find_one(doc! { "resource": held.resource.as_str() })
            .await
            .unwrap()
            .unwrap();
        let size = raw.as_bytes().len();
        let pad = "x".repeat(size.saturating_sub(60));
        Setup {
            store,
            bare,
            admin,
            commands,
            pad,
            held,
            seq: 0,
        }
    }

    async fn upsert(&self) {
        self.bare
            .find_one_and_update(
                doc! { "_id": "cost/bare" },
                doc! { "$set": { "pad": &self.pad }, "$inc": { "n": 1_i64 } },
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await
            .unwrap()
            .unwrap();
    }

    fn request(&mut self, resource: &str, options: &LockOptions) -> LockRequest {
        self.seq += 1;
        LockRequest::new(resource, &format!("cost-lock-{:08}", self.seq), options).unwrap()
    }

    /// One operation of `path`.
    async fn run(&mut self, path: Path) {
        let options = LockOptions::exclusive(TTL)
            .owner("cost-worker")
            .host("cost-host")
            .comment("a measured lock");
        match path {
            Path::Upsert => self.upsert().await,
            Path::UpsertTwice => {
                self.upsert().await;
                self.upsert().await;
            }
            Path::Xlock | Path::XlockFair | Path::Slock => {
                let resource = match path {
                    Path::Xlock => "cost/x",
                    Path::XlockFair => "cost/fair",
                    _ => "cost/s",
                };
                let mut req = self.request(resource, &options);
                if path == Path::Slock {
                    req = req.with_access(lockwright_engine::Access::Shared(Some(
                        SharedLimit::new(5).unwrap(),
                    )));
                }
                if path == Path::XlockFair {
                    let ticket = Ticket::new(req.lock_id.clone(), Duration::from_secs(10)).unwrap();
                    req = req.fair(ticket);
                }
                let granted = self.store.lock(&req).await.unwrap();
                let released = self
                    .store
                    .unlock_one(&granted.resource, &req.lock_id)
                    .await
                    .unwrap();
                assert!(released.is_some(), "{path:?}: the grant was not released");
            }
            Path::RenewOne => {
                self.store
                    .renew_one(&self.held, Duration::from_secs(1))
                    .await
                    .unwrap();
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args = Args::parse();
    // Fails with the message that says how to get a server.
    let _ = uri();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(measure(&args));
}

async fn measure(args: &Args) {
    let paths: Vec<Path> = Path::ALL
        .into_iter()
        .filter(|p| {
            args.only.is_empty()
                || matches!(p, Path::Upsert | Path::UpsertTwice)
                || args.only.iter().any(|o| p.name().contains(o.as_str()))
        })
        .collect();
    // Commands per operation, counted on a client with command monitoring; the timed runs
    // are on one without (monitoring makes the driver build a document of each command).
    let mut counted = Setup::new("cost_counted", true).await;
    let mut commands = Vec::new();
    for &p in &paths {
        let before = counted.commands.load(Ordering::Relaxed);
        for _ in 0..BLOCK / 5 {
            counted.run(p).await;
        }
        let n = counted.commands.load(Ordering::Relaxed) - before;
        commands.push(n as f64 / (BLOCK / 5) as f64);
    }
    let mut setup = Setup::new("cost", false).await;
    let mut tallies: Vec<Tally> = paths.iter().map(|_| Tally::default()).collect();
    // One block of each, unmeasured: connections, caches, the documents.
    for &p in &paths {
        for _ in 0..BLOCK / 5 {
            setup.run(p).await;
        }
    }
    let started = Instant::now();
    for round in 0..args.rounds {
        for k in 0..paths.len() {
            let i = (round + k) % paths.len();
            let p = paths[i];
            let server_before = server_cpu(&setup.admin).await;
            let client_before = cpu::process_cpu();
            for _ in 0..BLOCK {
                let t = Instant::now();
                setup.run(p).await;
                tallies[i].wall.push(t.elapsed());
            }
            let client_after = cpu::process_cpu();
            let server_after = server_cpu(&setup.admin).await;
            let t = &mut tallies[i];
            t.client += client_after - client_before;
            t.server += server_after.saturating_sub(server_before);
            t.ops += BLOCK as u64;
        }
        eprintln!(
            "round {}/{} ({:.0} s)",
            round + 1,
            args.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "| path | commands | median | server CPU | client CPU | vs bare: median | server CPU | client CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (i, &p) in paths.iter().enumerate() {
        let t = &tallies[i];
        let b = &tallies[paths.iter().position(|&q| q == p.baseline()).unwrap()];
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
        println!(
            "| {} | {:.2} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2}x | {:.2}x | {:.2}x |",
            p.name(),
            commands[i],
            ms(t.median()),
            ms(t.per_op(t.server)),
            ms(t.per_op(t.client)),
            ratio(t.median(), b.median()),
            ratio(t.per_op(t.server), b.per_op(b.server)),
            ratio(t.per_op(t.client), b.per_op(b.client)),
        );
    }
    println!(
        "({} rounds of {BLOCK} operations per path; the bare document is padded to the size of a lock's; server CPU from serverStatus, client CPU of this process)",
        args.rounds
    );
}
