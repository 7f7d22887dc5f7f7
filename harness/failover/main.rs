//! Failover on a real replica set: contending clients while the primary steps down or dies.
//!
//! Half of the clients go through [`Locker`] (waiting acquire, background renewal, `lost()`),
//! half through [`Client`] (xlock or slock with a limit, renew by hand, unlock), all on a few
//! resources so that they really contend. A side task forces a failover every `--every`
//! seconds, alternately `replSetStepDown` on the primary and SIGKILL of the primary followed by
//! a restart of that member, through the test kit's replica set fixture
//! (`lockwright_testkit::replset`). With a member whose wall clock is shifted (`--skew`),
//! failovers go alternately to that member and away from it (the other secondaries are
//! frozen with `replSetFreeze` so that it wins), so each one switches the clock that judges
//! expiry. Every store (the clients', and a purger's that calls `purge` every
//! `--purge-every-ms`) has the takeover grace `--grace-ms` (default: the library's).
//!
//! An independent observer (plain data recorded by the clients, none of Lockwright's own
//! checks) keeps every holder's *trusted interval* on this process's monotonic clock: from
//! the instant the grant was returned until the holder stops trusting it (a `Locker` holder:
//! the last instant it found `is_held()` true before it sent the release or saw `lost()`
//! fire; a `Client` holder: the unlock sent, or `request_sent + ttl - drift_margin` of the
//! last successful grant or renewal). At the end it checks:
//!
//! - **overlaps**: no two exclusive holders' intervals on one resource overlap, an exclusive
//!   one overlaps no shared one, and shared holders never exceed the limit;
//! - **fence regressions**: fences are unique per resource and increase in grant order (a
//!   grant returned before another was sent has the lower fence; of two grants on a resource
//!   at least one of which is exclusive, the one whose trusted interval starts first has the
//!   lower fence);
//! - **lost grants**: a grant that was returned `Ok` is found in the store (by `status`, which
//!   lists expired locks too, or a renewal that is not `LockNotFound`) whenever the answer
//!   arrives while its holder still trusts it: a lock gone from the store while trusted was
//!   taken over, purged or rolled back;
//! - **recovery**: every client makes a successful grant again after the last failover;
//! - **panics and hangs**: nothing in the process panics, and every task joins within
//!   `--join-timeout` seconds of the end.
//!
//! Leases lost early (a `Locker` lock lost as `Expired` or `Refused`, a `Client` renewal
//! refused) are counted but fail nothing: they cost availability, not safety.
//!
//! A `Client` grant that failed with an error other than a refusal has an unknown outcome: it
//! is released (unlock with its lock id) and not counted as a grant.
//!
//! Run (starts a three-member replica set of its own on 127.0.0.1, one member with
//! `--no-failover`, with the mongod that `scripts/mongod.sh install` installs, and stops it at
//! the end; `MONGODB_URI` is not used):
//!
//! ```text
//! scripts/mongod.sh install
//! cargo run -p lockwright-harness --release --example failover -- --clients 32 --seconds 60
//! ```
//!
//! `--skew MEMBER=MS` starts a member with its wall clock shifted (libfaketime). Exit status:
//! 0 when every check passes, 1 when one fails, 2 when the run could not be set up.

mod args;
mod checks;
mod clients;
mod driver;
mod observer;
mod report;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use lockwright::{Client, Locker, LockerConfig, MongoStore};
use lockwright_testkit::replset::ReplSet;

use args::{Args, RENEW_MARGIN, check_args, harness_uri};
use clients::{client_task, locker_task, purger_task};
use driver::failover_task;
use observer::{Observer, Shared, chain, progress};
use report::Report;

/// Locker counters, added up over every `Locker`.
#[derive(Default)]
struct LockerTotals {
    renewals: u64,
    renew_failures: u64,
    lost: u64,
}

/// Panics anywhere in the process (the `Locker`'s own renewal tasks included).
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn main() -> ExitCode {
    let args = Args::parse();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        default_hook(info);
    }));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("failover: cannot start the tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("failover: error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn connect(uri: &str, args: &Args, collection: &str) -> Result<Client<MongoStore>, String> {
    let store = MongoStore::connect(uri, &args.database, collection)
        .await
        .map_err(|e| chain(&e))?
        .with_takeover_grace(args.grace())
        .map_err(|e| chain(&e))?;
    Client::with_renew_margin(store, RENEW_MARGIN).map_err(|e| chain(&e))
}

async fn run(args: Args) -> Result<bool, String> {
    check_args(&args)?;
    let offsets: Vec<u64> = if args.no_failover {
        Vec::new()
    } else {
        (1..)
            .map(|k| k * args.every)
            .take_while(|t| t + args.every <= args.seconds)
            .collect()
    };
    if !args.no_failover && offsets.is_empty() {
        return Err("--seconds must be at least twice --every, for one failover".into());
    }
    let set = start_set(&args).await?;
    let result = tokio::select! {
        result = contend(args, &set, offsets) => result,
        _ = tokio::signal::ctrl_c() => Err("interrupted (SIGINT)".to_string()),
    };
    // Stops the mongods and removes their files (a blocking wait, off the runtime's
    // threads); a task that still holds the set (a hung one, aborted) lets it go when the
    // runtime drops it.
    let _ = tokio::task::spawn_blocking(move || drop(set)).await;
    result
}

/// The run's own replica set, with the members' clock offsets.
async fn start_set(args: &Args) -> Result<Arc<ReplSet>, String> {
    let mut builder = ReplSet::builder(args.member_count());
    for (member, ms) in &args.skews {
        builder = builder.skew_ms(*member, *ms);
    }
    let set = builder
        .start()
        .await
        .map_err(|e| format!("cannot start the replica set: {e}"))?;
    Ok(Arc::new(set))
}

/// The run proper, on `set`, with a failover at each of `offsets` (seconds from the start).
#[allow(clippy::too_many_lines)]
async fn contend(args: Args, set: &Arc<ReplSet>, offsets: Vec<u64>) -> Result<bool, String> {
    let uri = harness_uri(set.uri())?;
    // Each member's wall clock against this host's, as the member reports it.
    let mut clock_offsets = Vec::new();
    for m in 0..set.member_count() {
        clock_offsets.push(set.clock_offset_ms(m).await.map_err(|e| e.to_string()));
    }

    let collection = format!("run_{:016x}", rand::random::<u64>());
    let setup = connect(&uri, &args, &collection).await?;
    let t = Instant::now();
    loop {
        match setup.create_indexes().await {
            Ok(()) => break,
            Err(e) if t.elapsed() < Duration::from_secs(30) => {
                eprintln!("failover: create_indexes: {} (retrying)", chain(&e));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(format!("create_indexes: {}", chain(&e))),
        }
    }
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(connect(&uri, &args, &collection).await?);
    }
    let purger = if args.purge_every_ms > 0 {
        Some(connect(&uri, &args, &collection).await?)
    } else {
        None
    };
    let mut locker_config = LockerConfig::default();
    locker_config.drift_margin = args.margin();

    let args = Arc::new(args);
    let epoch = Instant::now();
    let sh = Shared {
        args: Arc::clone(&args),
        epoch,
        obs: Arc::new(Mutex::new(Observer::default())),
        stop_at: epoch + Duration::from_secs(args.seconds),
    };
    eprintln!(
        "failover: {} clients ({} Locker, {} Client) on {} resources, TTL {} ms, {} s, failovers at {:?} s; collection {}.{}",
        args.clients,
        args.clients.div_ceil(2),
        args.clients / 2,
        args.resources,
        args.ttl_ms,
        args.seconds,
        offsets,
        args.database,
        collection
    );
    if !args.skews.is_empty() {
        let skews: Vec<String> = args
            .skews
            .iter()
            .map(|(m, ms)| format!("member {m}: {ms:+} ms"))
            .collect();
        eprintln!("failover: shifted wall clocks: {}", skews.join(", "));
    }
    eprintln!(
        "failover: takeover grace {} ms; measured clock offsets: {}",
        args.grace().as_millis(),
        report::offsets_line(&clock_offsets)
    );

    let totals = Arc::new(Mutex::new(LockerTotals::default()));
    let mut tasks: Vec<(String, tokio::task::JoinHandle<()>)> = Vec::new();
    for (id, client) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        if id % 2 == 0 {
            let locker = Locker::new(client, locker_config.clone()).map_err(|e| chain(&e))?;
            let totals = Arc::clone(&totals);
            tasks.push((
                format!("client {id} (Locker)"),
                tokio::spawn(async move {
                    locker_task(id, sh, locker.clone()).await;
                    let s = locker.stats();
                    let mut t = totals
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    t.renewals += s.renewals;
                    t.renew_failures += s.renew_failures;
                    t.lost += s.lost;
                }),
            ));
        } else {
            tasks.push((
                format!("client {id} (Client)"),
                tokio::spawn(client_task(id, sh, client)),
            ));
        }
    }
    if let Some(purger) = purger {
        tasks.push((
            "purger".into(),
            tokio::spawn(purger_task(sh.clone(), purger)),
        ));
    }
    let failovers = Arc::new(Mutex::new(Vec::new()));
    let plan: Vec<Instant> = offsets
        .iter()
        .map(|s| epoch + Duration::from_secs(*s))
        .collect();
    if !plan.is_empty() {
        tasks.push((
            "failover".into(),
            tokio::spawn(failover_task(
                sh.clone(),
                Arc::clone(set),
                plan,
                args.shifted().map(|(m, _)| m),
                Arc::clone(&failovers),
            )),
        ));
    }
    let reporter = tokio::spawn(progress(sh.clone()));

    let join_deadline = sh.stop_at + Duration::from_secs(args.join_timeout);
    let (mut panics, mut hangs) = (Vec::new(), Vec::new());
    for (name, handle) in tasks {
        let abort = handle.abort_handle();
        match tokio::time::timeout_at(join_deadline.into(), handle).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_panic() => panics.push(name),
            Ok(Err(e)) => panics.push(format!("{name}: {e}")),
            Err(_) => {
                abort.abort();
                hangs.push(name);
            }
        }
    }
    reporter.abort();
    let hooked = PANICS.load(std::sync::atomic::Ordering::SeqCst);
    if hooked > panics.len() {
        panics.push(format!(
            "{} panic(s) outside the joined tasks (e.g. a Locker's renewal task): see stderr",
            hooked - panics.len()
        ));
    }
    let _ = setup.store().collection().drop().await;

    let obs = std::mem::take(&mut *sh.obs());
    let failovers = std::mem::take(
        &mut *failovers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let totals = std::mem::take(
        &mut *totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let report = Report {
        args: &args,
        epoch,
        obs: &obs,
        failovers: &failovers,
        planned: offsets.len(),
        totals: &totals,
        panics: &panics,
        hangs: &hangs,
        clock_offsets: &clock_offsets,
    };
    Ok(report.print())
}
