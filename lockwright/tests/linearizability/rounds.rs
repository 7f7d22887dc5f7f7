//! Rounds: random concurrent plans over a few resources and lock ids, run on a store and
//! recorded as histories.

use super::*;
use lockwright_testkit::seed;

/// Which lock ids the clients use, and which locks a round starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Any client uses any of [`IDS`]; the preloaded locks have any of them and any TTL.
    SharedIds,
    /// Client `i` alone uses lock id [`OWNED`]`[i]`, as a holder of a secret lock id does.
    /// Preloaded locks of those ids are live at [`NOW`]; expired preloaded locks belong to
    /// [`GHOSTS`], groups no client uses, all of whose locks are expired.
    ///
    /// This is what store-mongo is linearizable for: its group operations are not
    /// linearizable when they race grants of the same lock id (unlock and renew read the
    /// group in a snapshot-isolation transaction, which does not conflict with a concurrent
    /// grant on another document), nor is purge when the expired locks that put a group in
    /// its list vanish (taken over, purged) before its batch removes the group's other locks.
    #[cfg_attr(not(feature = "mongo"), allow(dead_code))] // only the MongoDB test uses it
    OwnedIds,
}

/// The lock ids of [`Workload::SharedIds`].
pub(crate) const IDS: [&str; 3] = ["k0", "k1", "k2"];
/// The lock id of each client in [`Workload::OwnedIds`].
pub(crate) const OWNED: [&str; CLIENTS] = ["k0", "k1", "k2", "k3"];
/// Groups of expired preloaded locks no client uses, in [`Workload::OwnedIds`].
pub(crate) const GHOSTS: [&str; 2] = ["g0", "g1"];

/// The operations of one round: the preload (grants at `NOW - 10 s`, refusals ignored) and
/// each client's operations.
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) workload: Workload,
    pub(crate) preload: Vec<Op>,
    pub(crate) clients: Vec<Vec<Op>>,
}

/// One of `choices`, uniformly.
pub(crate) fn pick<T: Copy>(rng: &mut StdRng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())]
}

/// A grant of `lock_id` on a random resource, exclusive or shared (limit: any of `limits`).
pub(crate) fn random_grant(
    rng: &mut StdRng,
    lock_id: &'static str,
    ttl_ms: Option<u64>,
    limits: &[Option<u32>],
) -> Op {
    let resource = pick(rng, &RESOURCES);
    if rng.random_bool(0.5) {
        Op::Xlock {
            resource,
            lock_id,
            ttl_ms,
        }
    } else {
        Op::Slock {
            resource,
            lock_id,
            ttl_ms,
            limit: pick(rng, limits),
        }
    }
}

/// One to three renewals of locks `lock_id()` gives on random resources, each for 20 or
/// 30 s, no (resource, lock id) twice: a batch naming a lock twice is legal, but
/// store-mongo stores the first TTL given for the lock while reporting the last (see the
/// conformance case `renew_many_names_one_lock_twice`), and that is not an atomicity
/// question.
pub(crate) fn renewal_batch(
    rng: &mut StdRng,
    mut lock_id: impl FnMut(&mut StdRng) -> &'static str,
) -> Vec<(&'static str, &'static str, u64)> {
    let mut locks: Vec<(&'static str, &'static str, u64)> = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let (resource, lock_id) = (pick(rng, &RESOURCES), lock_id(rng));
        let ttl_ms = pick(rng, &[20_000, 30_000]);
        if !locks.iter().any(|l| (l.0, l.1) == (resource, lock_id)) {
            locks.push((resource, lock_id, ttl_ms));
        }
    }
    locks
}

/// A random operation of a client using `lock_id`; its batches name locks of
/// `batch_id()`.
pub(crate) fn random_op(
    rng: &mut StdRng,
    lock_id: &'static str,
    batch_id: impl FnMut(&mut StdRng) -> &'static str,
) -> Op {
    // Within the renew margin, long, or none: nothing granted at NOW is expired at NOW.
    let ttl_ms = pick(rng, &[Some(500), Some(60_000), None]);
    match rng.random_range(0..26) {
        0..10 => random_grant(rng, lock_id, ttl_ms, &[Some(1), Some(2), None]),
        10..13 => Op::Unlock { lock_id },
        13..15 => Op::Renew { lock_id },
        15..17 => Op::RenewOne {
            resource: pick(rng, &RESOURCES),
            lock_id,
        },
        17..19 => Op::UnlockOne {
            resource: pick(rng, &RESOURCES),
            lock_id,
        },
        19..22 => Op::Status {
            resource: pick(rng, &RESOURCES),
        },
        22..24 => Op::RenewMany {
            locks: renewal_batch(rng, batch_id),
        },
        _ => Op::Purge,
    }
}

impl Plan {
    /// The plan of seed `seed`: `ops` operations for each of [`CLIENTS`] clients.
    pub(crate) fn new(seed: u64, workload: Workload, ops: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        // TTLs seen from NOW: expired 5 s ago, expiring within the margin, or never.
        let (expired, within_margin) = (Some(5_000), Some(10_500));
        let preload = (0..rng.random_range(0..=4))
            .map(|_| match workload {
                Workload::SharedIds => {
                    let (lock_id, ttl) = (
                        pick(&mut rng, &IDS),
                        pick(&mut rng, &[expired, within_margin, None]),
                    );
                    random_grant(&mut rng, lock_id, ttl, &[None])
                }
                Workload::OwnedIds if rng.random_bool(0.5) => {
                    let lock_id = pick(&mut rng, &GHOSTS);
                    random_grant(&mut rng, lock_id, expired, &[None])
                }
                Workload::OwnedIds => {
                    let (lock_id, ttl) = (
                        pick(&mut rng, &OWNED),
                        pick(&mut rng, &[within_margin, None]),
                    );
                    random_grant(&mut rng, lock_id, ttl, &[None])
                }
            })
            .collect();
        let clients = (0..CLIENTS)
            .map(|client| {
                (0..ops)
                    .map(|_| {
                        let lock_id = match workload {
                            Workload::SharedIds => pick(&mut rng, &IDS),
                            Workload::OwnedIds => OWNED[client],
                        };
                        // A batch names any ids in the shared workload, its own otherwise.
                        random_op(&mut rng, lock_id, |rng| match workload {
                            Workload::SharedIds => pick(rng, &IDS),
                            Workload::OwnedIds => OWNED[client],
                        })
                    })
                    .collect()
            })
            .collect();
        Plan {
            seed,
            workload,
            preload,
            clients,
        }
    }

    /// Applies the preload to `store` at `NOW - 10 s`, then sets `clock` to [`NOW`].
    pub(crate) async fn preload<S: LockStore>(&self, store: &S, clock: &ManualClock) {
        clock.set(Timestamp::from_millis(
            NOW.as_millis() - PRELOAD_AGO.as_millis() as u64,
        ));
        for op in &self.preload {
            if let Ret::Failed(e) = apply(store, op).await {
                panic!("preloading {op:?} failed: {e}");
            }
        }
        clock.set(NOW);
    }
}

/// The seeds of the rounds of a test: `base`, `base + 1`, ... (`rounds` of them), or the
/// one seed `LINEARIZABILITY_SEED` gives. `LINEARIZABILITY_BASE_SEED` replaces `base`, and
/// `LOCKWRIGHT_RANDOM_SEED=1` draws a fresh one; the base in use is printed.
pub(crate) fn seeds(rounds: usize, base: u64) -> Vec<u64> {
    if let Some(seed) = seed::from_env("LINEARIZABILITY_SEED", seed::hex) {
        eprintln!("linearizability: the round of seed {seed:#x}");
        return vec![seed];
    }
    let base = seed::chosen("LINEARIZABILITY_BASE_SEED", base, seed::hex);
    eprintln!(
        "linearizability: {rounds} rounds of seeds {base:#x} and up (rerun with \
         LINEARIZABILITY_BASE_SEED={base:#x})"
    );
    (0..rounds as u64).map(|i| base.wrapping_add(i)).collect()
}

/// The history of a round: the tester, and every event in the order recorded, for messages.
pub(crate) struct History {
    pub(crate) tester: LinearizabilityTester<usize, Spec>,
    pub(crate) events: Vec<String>,
}

impl History {
    /// `Ok` when linearizable; otherwise a readable account of the round.
    pub(crate) fn verdict(&self, plan: &Plan, init: &LockTable) -> Result<(), String> {
        if self.tester.serialized_history().is_some() {
            return Ok(());
        }
        let mut msg = format!(
            "round with seed {seed:#x}, workload {workload:?}, is NOT linearizable (rerun its \
             operations with LINEARIZABILITY_SEED={seed:#x})\ninitial locks at NOW:\n",
            seed = plan.seed,
            workload = plan.workload,
        );
        for (name, state) in init.resources() {
            let _ = writeln!(msg, "  {name}: {}", describe(state));
        }
        msg.push_str("history (client: invoke / return, in real-time order):\n");
        for (i, e) in self.events.iter().enumerate() {
            let _ = writeln!(msg, "  {:>3}. {e}", i + 1);
        }
        Err(msg)
    }
}

/// A resource's locks in a line.
pub(crate) fn describe(state: &ResourceState) -> String {
    let locks: Vec<String> = state
        .locks()
        .map(|(mode, l)| {
            format!(
                "{mode} {} fence {} expires {:?}",
                l.lock_id,
                l.fence,
                l.expires_at
                    .map(|e| e.as_millis() as i64 - NOW.as_millis() as i64)
            )
        })
        .collect();
    format!("counter {} [{}]", state.last_fence, locks.join("; "))
}

/// Runs the clients of `plan` concurrently against `store`, whose table is `init` and whose
/// clock reads [`NOW`], and returns their history. Each client is an OS thread that drives
/// its calls on `rt` (so the store's IO and timers run on the runtime) and starts at a
/// barrier with the others. Invocations and returns are recorded under one mutex, just
/// before a call starts and just after it ends, so the recorded real-time order is implied
/// by the real one.
pub(crate) fn run_round<S: LockStore>(
    rt: &Handle,
    store: &S,
    init: LockTable,
    plan: &Plan,
) -> History {
    let history = Mutex::new(History {
        tester: LinearizabilityTester::new(Spec(init)),
        events: Vec::new(),
    });
    let start = Barrier::new(plan.clients.len());
    std::thread::scope(|scope| {
        for (client, ops) in plan.clients.iter().enumerate() {
            let (history, start) = (&history, &start);
            scope.spawn(move || {
                start.wait();
                for op in ops {
                    {
                        let mut h = history.lock().unwrap();
                        h.events.push(format!("c{client}: {op:?}"));
                        h.tester.on_invoke(client, op.clone()).unwrap();
                    }
                    let ret = rt.block_on(apply(store, op));
                    if let Ret::Failed(e) = &ret {
                        panic!("client {client}: {op:?} failed: {e}");
                    }
                    {
                        let mut h = history.lock().unwrap();
                        h.events.push(format!("c{client}:   -> {ret:?}"));
                        h.tester.on_return(client, ret).unwrap();
                    }
                }
            });
        }
    });
    history.into_inner().unwrap()
}

/// Runs `rounds` rounds of `ops` operations per client, of the seeds [`seeds`] gives from
/// `base_seed`; `round` runs one plan on a fresh, preloaded store and returns the verdict. Returns the first non-linearizable round's
/// account, if any, and how many rounds ran.
pub(crate) fn rounds(
    rounds: usize,
    base_seed: u64,
    workload: Workload,
    ops: usize,
    mut round: impl FnMut(Plan) -> Result<(), String>,
) -> (Option<String>, usize) {
    let seeds = seeds(rounds, base_seed);
    for (i, seed) in seeds.iter().enumerate() {
        if let Err(account) = round(Plan::new(*seed, workload, ops)) {
            return (Some(account), i + 1);
        }
    }
    (None, seeds.len())
}

/// The runtime the stores' futures run on (its workers drive IO and timers).
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
