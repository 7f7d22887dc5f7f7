//! The simulated world: clients, network, store, downstream; one seeded PRNG, virtual time.
//!
//! Each client owns a [`LockerCore`], the engine's Locker state machine. The world is its
//! driver (it carries the core's requests to the store and the replies back over a faulty
//! network, the store's hints too while the core waits, and wakes the core when it asks)
//! and runs the client's application on top of it. Acquiring, renewing, losing and
//! releasing are the core's business alone.

mod app;
mod apply;
mod checks;
mod client;
mod election;
mod hints;
mod liveness;
mod network;
mod queue;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use lockwright_engine::LocalMs;
use lockwright_engine::locker::{LockerConfig, LockerCore, Reply, Request, RequestId};
use lockwright_engine::{LockId, ManualClock, Resource, Timestamp, Ttl};
use lockwright_store_mem::MemStore;
use lockwright_testkit::FencedStore;
use rand::{Rng, SeedableRng};

use crate::SimRng;
use crate::faults::FaultMix;
use crate::options::Options;
use crate::report::{SeedReport, TimelineEntry, Violation, ViolationKind};
use app::App;
use client::Client;

/// Real time zero of every run, as the store's clock shows it.
const EPOCH: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// How long after the faults stop the healed world may take to settle, in TTLs. Releases
/// and cancelled acquires need a few round trips; pauses and restarts under way end within
/// three TTLs.
const SETTLE_TTLS: u64 = 20;

/// The value of a store-mem call, which never waits (it takes a mutex and returns).
fn at_once<T>(f: impl Future<Output = T>) -> T {
    f.now_or_never().expect("a store-mem operation suspended")
}

/// Where a request came from, and so where its reply goes.
#[derive(Clone, Copy, Debug)]
struct Route {
    client: usize,
    incarnation: u32,
    id: RequestId,
}

#[derive(Debug)]
enum Event {
    /// The client's core or application has something due.
    Wake {
        client: usize,
        incarnation: u32,
        token: u64,
    },
    AtStore {
        route: Route,
        request: Request,
        deadline: u64,
    },
    Reply {
        route: Route,
        reply: Reply,
        /// The request's deadline when it was a lock request (to count late grants).
        lock_deadline: Option<u64>,
    },
    AtDownstream {
        client: usize,
        resource: usize,
        fence: u64,
    },
    Resume {
        client: usize,
    },
    Restart {
        client: usize,
    },
    /// The store fails over to a member whose clock reads differently.
    Failover,
    /// A client's subscription to hints reaches the store.
    Subscribe {
        client: usize,
        incarnation: u32,
        sub: u64,
    },
    /// A hint (or, `None`, the end of its stream) reaches a client.
    Hint {
        client: usize,
        incarnation: u32,
        sub: u64,
        hint: hints::InFlightHint,
    },
    /// A leader's proclaim reaches the store (an election's).
    Proclaim {
        client: usize,
        lock_id: LockId,
        value: String,
    },
    /// The election's observer sends a read.
    ObserveTick,
    /// The observer's read reaches the store.
    ObserveAtStore,
    /// The answer of the observer's read reaches it.
    ObserveAnswer {
        leader: Option<lockwright_engine::election::Leader>,
    },
}

/// One simulated run.
pub(crate) struct World {
    opts: Options,
    mix: FaultMix,
    rng: SimRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// The events under way, by slot (the queue holds their slots); `free_slots` lists
    /// the slots of events already handled, for reuse.
    events: Vec<Option<Event>>,
    free_slots: Vec<usize>,
    /// The store's clock: real time plus `store_offset`, set before every store operation.
    clock: Arc<ManualClock>,
    /// How far the clock of the store's current primary is ahead of real time, in ms,
    /// between 0 and the seed's clock jump bound (its members' clocks are within that of
    /// one another).
    store_offset: u64,
    /// The failovers' own random stream.
    failover_rng: SimRng,
    store: MemStore,
    config: LockerConfig,
    ttl: Ttl,
    resources: Vec<Resource>,
    clients: Vec<Client>,
    /// The downstream store (fenced, or not with fencing off), and the highest fence
    /// granted per resource.
    fenced: FencedStore<usize>,
    granted: Vec<u64>,
    /// The faults have stopped; clients stop acquiring and give back what they hold.
    healing: bool,
    /// Every lock id the store granted, with the client incarnation that asked.
    grants: BTreeMap<LockId, (usize, u32)>,
    /// Every lock id an unlock reached the store for.
    unlocked: BTreeSet<LockId>,
    /// Client incarnations that crashed.
    crashed: BTreeSet<(usize, u32)>,
    /// Granted lock ids whose reply was lost, and lock ids whose unlock request was lost
    /// (to count releases after unknown outcomes and release retries).
    lost_grants: BTreeSet<LockId>,
    lost_unlocks: BTreeSet<LockId>,
    /// The last subscription to hints handed out (each has its own number).
    next_sub: u64,
    /// Whether this seed is checked for `handover_liveness`, the resources left free
    /// while clients wait for them, and the locks of crashed holders not yet abandoned.
    liveness: bool,
    handovers: Vec<liveness::Handover>,
    abandoned: Vec<liveness::Abandoned>,
    /// The queues of fair waiters, as the specification has them (`fifo`,
    /// `bounded_waiting`).
    queues: queue::Queues,
    /// `holder_safety`'s buffer: the first client believing it holds each resource.
    believers: Vec<Option<usize>>,
    /// The election, in an election's seeds.
    election: election::Election,
    pub(crate) report: SeedReport,
    record: bool,
}

impl World {
    pub(crate) fn new(opts: &Options, seed: u64, record: bool) -> Self {
        let mut rng = SimRng::seed_from_u64(seed);
        let mut failover_rng = crate::faults::failover_rng(seed);
        let mut hint_rng = crate::faults::hint_rng(seed);
        let mix = FaultMix::from_rng(&mut rng, &mut failover_rng, &mut hint_rng, opts)
            .with_fair_clients(&mut crate::faults::fair_rng(seed), opts);
        let clock = Arc::new(ManualClock::new(EPOCH));
        let store = MemStore::with_clock_and_shards(Arc::clone(&clock), 1)
            .with_takeover_grace(Duration::from_millis(opts.grace_ms))
            .unwrap_or_else(|e| panic!("invalid simulation options: grace: {e}"));
        let ttl_ms = opts.ttl_ms;
        let mut config = LockerConfig::default();
        config.renew_fraction = 0.5;
        config.drift_margin = Duration::from_millis(opts.drift_margin_ms);
        config.max_renew_attempts = 3;
        config.renew_retry = Duration::from_millis((ttl_ms / 20).max(1));
        config.initial_backoff = Duration::from_millis((ttl_ms / 50).max(1));
        config.max_backoff = Duration::from_millis((ttl_ms / 2).max(1));
        // A release never legitimately gives up within a run.
        config.release_timeout = Duration::from_millis(ttl_ms.saturating_mul(100));
        // Nor does a waiting acquire give up on a store that a run's faults make unreachable.
        config.unavailable_timeout = Duration::from_millis(ttl_ms.saturating_mul(100));
        config.queue_ttl = Duration::from_millis(opts.queue_ttl_ms);
        let ttl = Ttl::new(Duration::from_millis(ttl_ms))
            .unwrap_or_else(|e| panic!("invalid simulation options: ttl: {e}"));
        let resources = (0..opts.resources)
            .map(|r| {
                Resource::new(format!("r{r}")).unwrap_or_else(|e| panic!("resource name: {e}"))
            })
            .collect();
        let report = SeedReport {
            seed,
            mix,
            ..SeedReport::default()
        };
        let mut world = World {
            opts: opts.clone(),
            mix,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            free_slots: Vec::new(),
            clock,
            store_offset: 0,
            failover_rng,
            store,
            config,
            ttl,
            resources,
            clients: Vec::new(),
            fenced: if opts.fencing {
                FencedStore::new()
            } else {
                FencedStore::unchecked()
            },
            granted: vec![0; opts.resources],
            healing: false,
            grants: BTreeMap::new(),
            unlocked: BTreeSet::new(),
            crashed: BTreeSet::new(),
            lost_grants: BTreeSet::new(),
            lost_unlocks: BTreeSet::new(),
            next_sub: 0,
            liveness: mix.checks_handovers(),
            handovers: Vec::new(),
            abandoned: Vec::new(),
            queues: queue::Queues::new(
                opts.resources,
                mix.checks_handovers() && mix.fair_clients != 0,
            ),
            believers: Vec::new(),
            election: election::Election::default(),
            report,
            record,
        };
        for _ in 0..opts.clients {
            let drift_ppm = if mix.drift_ppm == 0 {
                0
            } else {
                world.rng.random_range(-mix.drift_ppm..=mix.drift_ppm)
            };
            let offset = world.rng.random_range(0..1_000_000);
            let core = world.new_core();
            let mut client = Client {
                drift_ppm,
                offset,
                core,
                app: App::Idle { until: 0 },
                holds: Vec::new(),
                to_acquire: Vec::new(),
                paused_until: None,
                inbox: Vec::new(),
                hint_inbox: Vec::new(),
                watch: hints::Watch::default(),
                wake_hints: 0,
                queued_writes: Vec::new(),
                last_ahead: None,
                crashed: false,
                incarnation: 0,
                next_key: 0,
                wake_at: None,
                wake_token: 0,
                reported_past: BTreeSet::new(),
                cut_off_until: None,
            };
            let start = world.rng.random_range(0..opts.ttl_ms);
            client.app = App::Idle {
                until: client.local(start),
            };
            world.clients.push(client);
        }
        for c in 0..opts.clients {
            world.schedule_wake(c);
        }
        world.schedule_failover();
        world.start_election();
        world
    }

    /// The store's clock now: real time plus the current primary's offset.
    fn store_now(&self) -> Timestamp {
        EPOCH.saturating_add(Duration::from_millis(self.now + self.store_offset))
    }

    /// A fresh core, its generator seeded from the world's.
    fn new_core(&mut self) -> LockerCore<SimRng> {
        let rng = SimRng::seed_from_u64(self.rng.random());
        let renew_margin = Duration::from_millis(self.opts.renew_margin_ms);
        LockerCore::new(self.config.clone(), renew_margin, rng)
            .unwrap_or_else(|e| panic!("invalid simulation options: {e}"))
    }

    fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        let slot = if let Some(slot) = self.free_slots.pop() {
            self.events[slot] = Some(event);
            slot
        } else {
            self.events.push(Some(event));
            self.events.len() - 1
        };
        self.queue.push(Reverse((at, self.seq, slot)));
    }

    fn note(&mut self, client: Option<usize>, what: impl Into<String>) {
        if self.record {
            self.report.timeline.push(TimelineEntry {
                at: self.now,
                client,
                what: what.into(),
            });
        }
    }

    fn violation(&mut self, kind: ViolationKind, detail: String) {
        self.note(None, format!("VIOLATION {kind:?}: {detail}"));
        self.report.violations.push(Violation {
            at: self.now,
            kind,
            detail,
        });
    }

    fn latency(&mut self) -> u64 {
        let (lo, hi) = self.mix.latency_ms;
        self.rng.random_range(lo..=hi)
    }

    fn local(&self, client: usize) -> u64 {
        self.clients[client].local(self.now)
    }

    fn resource_index(&self, resource: &Resource) -> usize {
        self.resources
            .iter()
            .position(|r| r == resource)
            .unwrap_or_else(|| panic!("the core asked for an unknown resource {resource}"))
    }

    /// Runs until the end of the fault phase, heals, lets the world settle, and checks that
    /// nothing leaked and, once every lease has run out, that nothing is stuck.
    pub(crate) fn run(mut self) -> SeedReport {
        let end = self.opts.duration_ms;
        self.run_until(end);
        self.now = self.now.max(end);
        self.heal();
        let limit = end + self.opts.ttl_ms * SETTLE_TTLS;
        self.run_until(limit);
        self.advance_handovers(limit);
        self.check_leaks(limit);
        self.check_stuck();
        self.report
    }

    /// Processes events up to real time `until`, checking after each (but a hint nothing
    /// came of), and judging the handovers due.
    fn run_until(&mut self, until: u64) {
        while let Some(&Reverse((at, _, idx))) = self.queue.peek() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            self.advance_handovers(at);
            self.advance_waits(at);
            self.free_slots.push(idx);
            let Some(event) = self.events[idx].take() else {
                continue;
            };
            self.report.events += 1;
            if !self.handle(event) {
                // Nothing came of it (a hint the core ignored): nothing to check.
                continue;
            }
            self.check_trust_deadlines();
            self.check_holders();
        }
    }

    /// Whether `event` is a wake its client no longer counts on (another incarnation, or
    /// a later wake replaced it): handling it does nothing.
    fn stale_wake(&self, event: &Event) -> bool {
        match event {
            Event::Wake {
                client,
                incarnation,
                token,
            } => {
                let c = &self.clients[*client];
                c.incarnation != *incarnation || c.wake_token != *token
            }
            _ => false,
        }
    }

    /// Handles one event; returns whether the checks are due after it (always, but after a
    /// hint that nothing came of).
    fn handle(&mut self, event: Event) -> bool {
        match event {
            Event::Wake {
                client,
                incarnation,
                token,
            } => {
                let c = &mut self.clients[client];
                if c.incarnation != incarnation || c.wake_token != token || !c.is_active() {
                    return true;
                }
                c.wake_at = None;
                if !self.healing {
                    self.maybe_fault(client);
                    if !self.clients[client].is_active() {
                        return true;
                    }
                }
                let local = self.local(client);
                self.clients[client].core.handle_timeout(LocalMs(local));
                self.settle(client);
            }
            Event::AtStore {
                route,
                request,
                deadline,
            } => self.at_store(route, request, deadline),
            Event::Reply {
                route,
                reply,
                lock_deadline,
            } => {
                let Route {
                    client,
                    incarnation,
                    id,
                } = route;
                let c = &self.clients[client];
                if c.incarnation != incarnation || c.crashed {
                    return true;
                }
                // A pause or crash may also strike while a reply is on its way in.
                if c.paused_until.is_none() && !self.healing {
                    self.maybe_fault(client);
                }
                let c = &mut self.clients[client];
                if c.crashed {
                    return true;
                }
                if c.paused_until.is_some() {
                    // The process is frozen: the reply waits in its socket.
                    c.inbox.push((id, reply, lock_deadline));
                    return true;
                }
                self.deliver(client, id, reply, lock_deadline);
                self.settle(client);
            }
            Event::AtDownstream {
                client,
                resource,
                fence,
            } => self.downstream(client, resource, fence),
            Event::Resume { client } => self.resume(client),
            Event::Failover => self.failover(),
            Event::Subscribe {
                client,
                incarnation,
                sub,
            } => self.subscribed(client, incarnation, sub),
            Event::Hint {
                client,
                incarnation,
                sub,
                hint,
            } => return self.hint_arrives(client, incarnation, sub, hint),
            Event::Proclaim {
                client,
                lock_id,
                value,
            } => self.proclaim_at_store(client, &lock_id, &value),
            Event::ObserveTick => self.observe_tick(),
            Event::ObserveAtStore => self.observe_at_store(),
            Event::ObserveAnswer { leader } => self.observe_answer(leader),
            Event::Restart { client } => {
                let core = self.new_core();
                let until = self.rng.random_range(0..self.opts.ttl_ms);
                let c = &mut self.clients[client];
                c.crashed = false;
                c.core = core;
                c.app = App::Idle {
                    until: c.local(self.now) + until,
                };
                self.note(Some(client), "restarts");
                self.settle(client);
            }
        }
        true
    }

    /// The faults stop: no more losses, pauses or crashes; every client that can act stops
    /// acquiring, cancels its acquire and releases what it holds (paused and crashed ones
    /// do so when they resume or restart).
    fn heal(&mut self) {
        self.healing = true;
        self.note(None, "the faults stop; clients give back what they hold");
        for client in 0..self.clients.len() {
            if self.clients[client].is_active() {
                let local = self.local(client);
                self.clients[client].core.handle_timeout(LocalMs(local));
                self.settle(client);
            }
        }
    }
}
