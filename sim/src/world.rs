//! The simulated world: clients, network, store, downstream; one seeded PRNG, virtual time.
//!
//! Each client owns a [`LockerCore`], the engine's Locker state machine. The world is its
//! driver (it carries the core's requests to the store and the replies back over a faulty
//! network, and wakes the core when it asks) and runs the client's application on top of
//! it. Acquiring, renewing, losing and releasing are the core's business alone.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{
    Access, Ask, Ended, Event as CoreEvent, LockerConfig, LockerCore, Reply, Request, RequestId,
    Transmit, Wait, Who,
};
use lockwright_engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStore, ManualClock, Resource, SharedLimit,
    Timestamp, Ttl,
};
use lockwright_store_mem::MemStore;
use lockwright_testkit::{FencedStore, Verdict};
use rand::{Rng, SeedableRng};

use crate::SimRng;
use crate::{FaultMix, Options, SeedReport, TimelineEntry, Violation, ViolationKind};

/// Real time zero of every run, as the store's clock shows it.
const EPOCH: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// How long after the faults stop the healed world may take to settle, in TTLs. Releases
/// and cancelled acquires need a few round trips; pauses and restarts under way end within
/// three TTLs.
const SETTLE_TTLS: u64 = 20;

/// The most resources one job holds together.
const MAX_JOB: usize = 4;

/// The value of a store-mem call, which never waits (it takes a mutex and returns).
fn at_once<T>(f: impl Future<Output = T>) -> T {
    f.now_or_never().expect("a store-mem operation suspended")
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
        client: usize,
        incarnation: u32,
        id: RequestId,
        request: Request,
        deadline: u64,
    },
    Reply {
        client: usize,
        incarnation: u32,
        id: RequestId,
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
}

/// What the client's application is doing. Times are on the client's clock. The guards it
/// holds are the client's [`Hold`]s.
#[derive(Clone, Copy, Debug)]
enum App {
    /// Waits until `until`, then starts a job: acquires one resource, or sometimes several
    /// in a row (in increasing order, so that jobs never wait on each other in a cycle) to
    /// hold together.
    Idle { until: u64 },
    /// Waits for the core to acquire `resource` under `key` (the job's next resource; the
    /// ones before it are held, the ones after it wait their turn).
    Acquiring { key: LeaseKey, resource: usize },
    /// Holds the job's guards: works until `work_until`, writing to each resource every so
    /// often while its guard is held.
    Holding { work_until: u64, next_write: u64 },
    /// Stopped for good (the world is healing).
    Done,
}

/// A guard the application was handed and still holds (no `Ended` for it yet).
#[derive(Clone, Copy, Debug)]
struct Hold {
    key: LeaseKey,
    resource: usize,
    fence: u64,
    /// Local time.
    trust_until: u64,
}

/// A reply that reached a paused client, handled when it resumes.
type Buffered = (RequestId, Reply, Option<u64>);

struct Client {
    drift_ppm: i64,
    offset: u64,
    core: LockerCore<SimRng>,
    app: App,
    /// The guards the application holds, in the order it got them.
    holds: Vec<Hold>,
    /// The resources the job under way still has to acquire after the one it is acquiring.
    to_acquire: Vec<usize>,
    paused_until: Option<u64>,
    /// Replies that arrived during a pause.
    inbox: Vec<Buffered>,
    /// Writes (resource, fence) decided before a pause, sent when the client resumes.
    queued_writes: Vec<(usize, u64)>,
    crashed: bool,
    incarnation: u32,
    next_key: LeaseKey,
    /// The one wake that counts: its real instant and token (older wakes are stale).
    wake_at: Option<u64>,
    wake_token: u64,
    /// The leases already reported past their trust deadline (each reported once).
    reported_past: BTreeSet<LeaseKey>,
}

impl Client {
    /// The client's monotonic clock at real time `real` (ms), running `drift_ppm` fast.
    fn local(&self, real: u64) -> u64 {
        let real = i128::from(real);
        let local = real + real * i128::from(self.drift_ppm) / 1_000_000;
        self.offset + u64::try_from(local.max(0)).unwrap_or(0)
    }

    /// The first real instant at which the local clock reads at least `local`.
    fn real_at(&self, local: u64) -> u64 {
        let want = i128::from(local.saturating_sub(self.offset));
        let real = want * 1_000_000 / (1_000_000 + i128::from(self.drift_ppm));
        let mut r = u64::try_from(real.max(0)).unwrap_or(u64::MAX);
        while self.local(r) < local {
            r += 1;
        }
        r
    }

    /// The resources this client believes it holds at real time `real`: each a guard it
    /// was handed that did not end, while its clock is before that guard's trust deadline
    /// (what `LockGuard::is_held` says).
    fn believes(&self, real: u64) -> impl Iterator<Item = usize> + '_ {
        let local = self.local(real);
        self.holds
            .iter()
            .filter(move |h| !self.crashed && local < h.trust_until)
            .map(|h| h.resource)
    }

    /// The index in `holds` of the guard of lease `key`.
    fn hold_of(&self, key: LeaseKey) -> Option<usize> {
        self.holds.iter().position(|h| h.key == key)
    }

    fn is_active(&self) -> bool {
        !self.crashed && self.paused_until.is_none()
    }
}

/// One simulated run.
pub(crate) struct World {
    opts: Options,
    mix: FaultMix,
    rng: SimRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Event>>,
    clock: Arc<ManualClock>,
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
    pub(crate) report: SeedReport,
    record: bool,
}

impl World {
    pub(crate) fn new(opts: &Options, seed: u64, record: bool) -> Self {
        let mut rng = SimRng::seed_from_u64(seed);
        let mix = FaultMix::from_rng(&mut rng, opts);
        let clock = Arc::new(ManualClock::new(EPOCH));
        let store = MemStore::with_clock_and_shards(Arc::clone(&clock), 1);
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
            clock,
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
                queued_writes: Vec::new(),
                crashed: false,
                incarnation: 0,
                next_key: 0,
                wake_at: None,
                wake_token: 0,
                reported_past: BTreeSet::new(),
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
        world
    }

    /// A fresh core, its generator seeded from the world's.
    fn new_core(&mut self) -> LockerCore<SimRng> {
        let rng = SimRng::seed_from_u64(self.rng.random());
        LockerCore::new(self.config.clone(), rng)
            .unwrap_or_else(|e| panic!("invalid simulation options: {e}"))
    }

    fn push(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.push(Some(event));
        self.queue
            .push(Reverse((at, self.seq, self.events.len() - 1)));
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

    fn describe(&self, request: &Request) -> String {
        match request {
            Request::Lock { resource, .. } => format!("xlock {resource}"),
            Request::Renew { .. } => "renew".into(),
            Request::RenewMany { locks } => format!("renew of {} locks", locks.len()),
            Request::Unlock { .. } => "unlock".into(),
        }
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
        self.check_leaks(limit);
        self.check_stuck();
        self.report
    }

    /// Processes events up to real time `until`, checking after each.
    fn run_until(&mut self, until: u64) {
        while let Some(&Reverse((at, _, idx))) = self.queue.peek() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            let Some(event) = self.events[idx].take() else {
                continue;
            };
            self.report.events += 1;
            self.handle(event);
            self.check_trust_deadlines();
            self.check_holders();
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Wake {
                client,
                incarnation,
                token,
            } => {
                let c = &mut self.clients[client];
                if c.incarnation != incarnation || c.wake_token != token || !c.is_active() {
                    return;
                }
                c.wake_at = None;
                if !self.healing {
                    self.maybe_fault(client);
                    if !self.clients[client].is_active() {
                        return;
                    }
                }
                let local = self.local(client);
                self.clients[client].core.handle_timeout(local);
                self.settle(client);
            }
            Event::AtStore {
                client,
                incarnation,
                id,
                request,
                deadline,
            } => self.at_store(client, incarnation, id, request, deadline),
            Event::Reply {
                client,
                incarnation,
                id,
                reply,
                lock_deadline,
            } => {
                let c = &self.clients[client];
                if c.incarnation != incarnation || c.crashed {
                    return;
                }
                // A pause or crash may also strike while a reply is on its way in.
                if c.paused_until.is_none() && !self.healing {
                    self.maybe_fault(client);
                }
                let c = &mut self.clients[client];
                if c.crashed {
                    return;
                }
                if c.paused_until.is_some() {
                    // The process is frozen: the reply waits in its socket.
                    c.inbox.push((id, reply, lock_deadline));
                    return;
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
    }

    /// Hands a reply to the client's core.
    fn deliver(&mut self, client: usize, id: RequestId, reply: Reply, lock_deadline: Option<u64>) {
        let local = self.local(client);
        if matches!(reply, Reply::Granted(_)) && lock_deadline.is_some_and(|d| local >= d) {
            self.report.late_grants += 1;
            self.note(Some(client), "a grant arrives after its trust deadline");
        }
        self.clients[client].core.handle_reply(id, reply, local);
    }

    /// The client wakes from a pause: the write it decided on before the pause leaves, and
    /// its core sees the replies that arrived meanwhile and the timeouts that passed, in
    /// either order (as a driver polling both after a stall may).
    fn resume(&mut self, client: usize) {
        self.clients[client].paused_until = None;
        self.note(Some(client), "resumes");
        for (resource, fence) in std::mem::take(&mut self.clients[client].queued_writes) {
            self.send_write(client, resource, fence);
        }
        let inbox = std::mem::take(&mut self.clients[client].inbox);
        let timeouts_first = self.rng.random_bool(0.5);
        let local = self.local(client);
        if timeouts_first {
            self.clients[client].core.handle_timeout(local);
        }
        for (id, reply, lock_deadline) in inbox {
            self.deliver(client, id, reply, lock_deadline);
        }
        if !timeouts_first {
            self.clients[client].core.handle_timeout(local);
        }
        self.settle(client);
    }

    /// Sends what the core asks for, acts on what it says, and runs the application until
    /// neither has anything left to do at this instant; then schedules the next wake.
    fn settle(&mut self, client: usize) {
        loop {
            if !self.clients[client].is_active() {
                return;
            }
            if self.flush(client) {
                continue;
            }
            if !self.app_step(client) {
                break;
            }
        }
        self.schedule_wake(client);
    }

    /// Takes the core's requests and events. Returns whether there were any.
    fn flush(&mut self, client: usize) -> bool {
        let mut any = false;
        loop {
            if let Some(t) = self.clients[client].core.poll_transmit() {
                self.transmit(client, t);
            } else if let Some(e) = self.clients[client].core.poll_event() {
                self.on_core_event(client, e);
            } else {
                return any;
            }
            any = true;
        }
    }

    /// Wakes the client when its core or its application next has something due.
    fn schedule_wake(&mut self, client: usize) {
        let healing = self.healing;
        let now = self.now;
        let c = &mut self.clients[client];
        if !c.is_active() {
            return;
        }
        let mut next = c.core.poll_timeout();
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        match c.app {
            App::Idle { until } if !healing => consider(until),
            App::Holding {
                work_until,
                next_write,
            } => {
                consider(work_until);
                consider(next_write);
            }
            _ => {}
        }
        let Some(local) = next else {
            c.wake_at = None;
            c.wake_token += 1;
            return;
        };
        let at = c.real_at(local).max(now);
        if c.wake_at == Some(at) {
            return;
        }
        c.wake_at = Some(at);
        c.wake_token += 1;
        let (incarnation, token) = (c.incarnation, c.wake_token);
        self.push(
            at,
            Event::Wake {
                client,
                incarnation,
                token,
            },
        );
    }

    /// Sends one request over the network: it may be lost on the way (the driver then sees
    /// silence or a connection error), or reach the store after latency.
    fn transmit(&mut self, client: usize, t: Transmit) {
        let incarnation = self.clients[client].incarnation;
        if let Request::RenewMany { locks } = &t.request {
            self.report.renew_batches += 1;
            self.report.batched_renewals += locks.len() as u64;
            self.report.largest_batch = self.report.largest_batch.max(locks.len() as u64);
            self.note(
                Some(client),
                format!("renews {} locks in one batch", locks.len()),
            );
        }
        let lock_deadline = matches!(t.request, Request::Lock { .. }).then_some(t.deadline);
        if !self.healing && self.rng.random_range(0..100) < self.mix.lost_request_pct {
            self.report.faults.lost_requests += 1;
            let what = self.describe(&t.request);
            self.note(Some(client), format!("request {what} lost"));
            if let Request::Unlock { lock_id, .. } = &t.request {
                self.lost_unlocks.insert(lock_id.clone());
            }
            self.maybe_connection_error(client, incarnation, t.id, &t.request, lock_deadline);
            return;
        }
        let at = self.now + self.latency();
        self.push(
            at,
            Event::AtStore {
                client,
                incarnation,
                id: t.id,
                request: t.request,
                deadline: t.deadline,
            },
        );
    }

    /// After a lost message, the driver sees either nothing (the core's deadline passes)
    /// or, half the time, a connection error after a network delay.
    fn maybe_connection_error(
        &mut self,
        client: usize,
        incarnation: u32,
        id: RequestId,
        request: &Request,
        lock_deadline: Option<u64>,
    ) {
        if !self.rng.random_bool(0.5) {
            return;
        }
        let operation = match request {
            Request::Lock { .. } => "lock",
            Request::Renew { .. } | Request::RenewMany { .. } => "renew",
            Request::Unlock { .. } => "unlock",
        };
        let at = self.now + self.latency();
        self.push(
            at,
            Event::Reply {
                client,
                incarnation,
                id,
                reply: Reply::Failed(Error::backend(operation, "connection reset")),
                lock_deadline,
            },
        );
    }

    /// The store applies a request; the reply may be lost on the way back.
    fn at_store(
        &mut self,
        client: usize,
        incarnation: u32,
        id: RequestId,
        request: Request,
        deadline: u64,
    ) {
        let reply = self.apply(client, incarnation, &request);
        let lock_deadline = matches!(request, Request::Lock { .. }).then_some(deadline);
        if !self.healing && self.rng.random_range(0..100) < self.mix.lost_reply_pct {
            self.report.faults.lost_replies += 1;
            let what = self.describe(&request);
            self.note(Some(client), format!("reply to {what} lost"));
            if let (Request::Lock { lock_id, .. }, Reply::Granted(_)) = (&request, &reply) {
                self.lost_grants.insert(lock_id.clone());
            }
            self.maybe_connection_error(client, incarnation, id, &request, lock_deadline);
            return;
        }
        let at = self.now + self.latency();
        self.push(
            at,
            Event::Reply {
                client,
                incarnation,
                id,
                reply,
                lock_deadline,
            },
        );
    }

    fn apply(&mut self, client: usize, incarnation: u32, request: &Request) -> Reply {
        self.clock
            .set(EPOCH.saturating_add(Duration::from_millis(self.now)));
        match request {
            Request::Lock {
                resource,
                access,
                lock_id,
                ttl,
                details,
            } => {
                let details = LockDetails::clone(details).ttl(ttl.as_duration());
                let req = LockRequest::new(resource.as_str(), lock_id.as_str(), &details)
                    .unwrap_or_else(|e| panic!("request: {e}"));
                let result = match access {
                    Access::Exclusive => at_once(self.store.xlock(&req)),
                    Access::Shared(limit) => {
                        let limit = limit.map(|l| {
                            SharedLimit::new(l).unwrap_or_else(|e| panic!("shared limit: {e}"))
                        });
                        at_once(self.store.slock(&req, limit))
                    }
                };
                match &result {
                    Ok(status) => {
                        let r = self.resource_index(resource);
                        if status.fence <= self.granted[r] {
                            self.violation(
                                ViolationKind::FenceMonotonic,
                                format!(
                                    "r{r} granted fence {} after {}",
                                    status.fence, self.granted[r]
                                ),
                            );
                        }
                        self.granted[r] = self.granted[r].max(status.fence);
                        self.grants.insert(lock_id.clone(), (client, incarnation));
                        self.note(
                            Some(client),
                            format!("store grants r{r}, fence {}", status.fence),
                        );
                    }
                    Err(Error::AlreadyLocked { .. }) => {}
                    Err(e) => panic!("store-mem failed: {e}"),
                }
                Reply::from_lock(result)
            }
            Request::Renew {
                resource,
                lock_id,
                ttl,
            } => {
                let margin = self.config.drift_margin;
                let result = at_once(self.store.renew_one(resource, lock_id, *ttl, margin));
                if let Err(e) = &result
                    && !matches!(e, Error::NotRenewable { .. } | Error::LockNotFound)
                {
                    panic!("store-mem failed: {e}");
                }
                Reply::from_done(result)
            }
            Request::RenewMany { locks } => {
                let margin = self.config.drift_margin;
                let result = at_once(self.store.renew_many(locks, margin));
                if let Ok(each) = &result {
                    for e in each.iter().filter_map(|r| r.as_ref().err()) {
                        if !matches!(e, Error::NotRenewable { .. } | Error::LockNotFound) {
                            panic!("store-mem failed: {e}");
                        }
                        self.report.batched_refusals += 1;
                    }
                }
                Reply::from_batch(result)
            }
            Request::Unlock { resource, lock_id } => {
                let result = at_once(self.store.unlock_one(resource, lock_id));
                if let Err(e) = &result {
                    panic!("store-mem failed: {e}");
                }
                self.unlocked.insert(lock_id.clone());
                if self.lost_grants.remove(lock_id) {
                    self.report.unknown_grants_released += 1;
                }
                if self.lost_unlocks.remove(lock_id) {
                    self.report.releases_retried += 1;
                }
                Reply::from_done(result)
            }
        }
    }

    /// The application's reaction to what its core says.
    fn on_core_event(&mut self, client: usize, event: CoreEvent) {
        let local = self.local(client);
        match event {
            CoreEvent::Acquired {
                key,
                status,
                trust_until,
            } => {
                let App::Acquiring { key: k, resource } = self.clients[client].app else {
                    panic!("client {client}: acquired {key}, which it no longer waits for");
                };
                assert_eq!(k, key, "client {client}: acquired a key it did not ask for");
                if trust_until <= local {
                    self.violation(
                        ViolationKind::PastTrustDeadline,
                        format!(
                            "client {client} was handed r{resource} (fence {}) trusted until \
                             {trust_until}, at local {local}",
                            status.fence
                        ),
                    );
                }
                self.clients[client].holds.push(Hold {
                    key,
                    resource,
                    fence: status.fence,
                    trust_until,
                });
                self.note(
                    Some(client),
                    format!("holds r{resource}, fence {}", status.fence),
                );
                if self.clients[client].to_acquire.is_empty() {
                    let work = self
                        .rng
                        .random_range(self.opts.ttl_ms / 2..self.opts.ttl_ms * 4);
                    self.clients[client].app = App::Holding {
                        work_until: local + work,
                        next_write: local,
                    };
                } else {
                    let next = self.clients[client].to_acquire.remove(0);
                    self.start_acquire(client, next, local);
                }
            }
            CoreEvent::AcquireFailed { key, error } => {
                if let App::Acquiring { key: k, resource } = self.clients[client].app
                    && k == key
                {
                    self.note(
                        Some(client),
                        format!("acquire of r{resource} failed: {error}"),
                    );
                    // The job is abandoned: its guards are dropped.
                    self.release_all(client, local);
                    let pause = self.rng.random_range(0..self.opts.ttl_ms / 2);
                    self.clients[client].app = App::Idle {
                        until: local + pause,
                    };
                }
            }
            CoreEvent::Renewed { key, trust_until } => {
                let c = &mut self.clients[client];
                if let Some(i) = c.hold_of(key) {
                    c.holds[i].trust_until = trust_until;
                }
            }
            CoreEvent::RenewFailed { error, .. } => {
                self.note(Some(client), format!("renewal failed: {error}"));
            }
            CoreEvent::Ended { key, how } => {
                let Some(i) = self.clients[client].hold_of(key) else {
                    return;
                };
                let Hold { resource, .. } = self.clients[client].holds.remove(i);
                if matches!(how, Ended::Refused | Ended::Expired) {
                    self.report.losses += 1;
                    if !self.mix.can_cost_a_lease() {
                        self.violation(
                            ViolationKind::NeedlessLoss,
                            format!("client {client} lost r{resource} without faults: {how}"),
                        );
                    }
                }
                self.note(Some(client), format!("stops trusting r{resource}: {how}"));
                // The application drops that guard and goes on with the others of its job.
                self.clients[client].core.release(key, local);
                let c = &mut self.clients[client];
                if matches!(c.app, App::Holding { .. }) && c.holds.is_empty() {
                    c.app = if self.healing {
                        App::Done
                    } else {
                        let pause = self.rng.random_range(0..self.opts.ttl_ms);
                        App::Idle {
                            until: local + pause,
                        }
                    };
                }
            }
            CoreEvent::Released { result, .. } => {
                if let Err(e) = result {
                    self.note(Some(client), format!("a release gave up: {e}"));
                }
            }
        }
    }

    /// Starts acquiring `resource` for the job under way.
    fn start_acquire(&mut self, client: usize, resource: usize, local: u64) {
        let c = &mut self.clients[client];
        c.next_key += 1;
        let key = c.next_key;
        let ask = Ask {
            resource: self.resources[resource].clone(),
            access: Access::Exclusive,
            ttl: self.ttl,
            who: Who::new(LockDetails::new().owner(format!("client-{client}"))),
        };
        c.core.acquire(key, ask, Wait::Forever, local);
        c.app = App::Acquiring { key, resource };
        self.note(Some(client), format!("acquires r{resource}"));
    }

    /// Drops every guard the application holds (each released by the core) and forgets
    /// what the job still had to acquire.
    fn release_all(&mut self, client: usize, local: u64) {
        self.clients[client].to_acquire.clear();
        for h in std::mem::take(&mut self.clients[client].holds) {
            self.clients[client].core.release(h.key, local);
            self.note(Some(client), format!("releases r{}", h.resource));
        }
    }

    /// The resources of a new job: one, or half the time (given enough resources) two to
    /// four distinct ones, in increasing order.
    fn job(&mut self) -> Vec<usize> {
        let n = self.opts.resources;
        let size = if n >= 2 && self.rng.random_bool(0.5) {
            self.rng.random_range(2..=n.min(MAX_JOB))
        } else {
            1
        };
        let mut picked = BTreeSet::new();
        while picked.len() < size {
            picked.insert(self.rng.random_range(0..n));
        }
        picked.into_iter().collect()
    }

    /// The application acts on its own clock: starts a job when idle, writes while it
    /// holds, releases when its work is done; once healing, it stops. Returns whether it
    /// acted.
    fn app_step(&mut self, client: usize) -> bool {
        let local = self.local(client);
        match self.clients[client].app {
            App::Done => false,
            App::Idle { .. } if self.healing => {
                self.clients[client].app = App::Done;
                true
            }
            App::Idle { until } => {
                if local < until {
                    return false;
                }
                let mut job = self.job();
                let first = job.remove(0);
                self.clients[client].to_acquire = job;
                self.start_acquire(client, first, local);
                true
            }
            App::Acquiring { key, resource } => {
                if !self.healing {
                    return false;
                }
                self.clients[client].core.cancel(key);
                self.note(Some(client), format!("gives up acquiring r{resource}"));
                self.release_all(client, local);
                self.clients[client].app = App::Done;
                true
            }
            App::Holding {
                work_until,
                next_write,
            } => {
                if self.healing || local >= work_until {
                    self.release_all(client, local);
                    self.clients[client].app = if self.healing {
                        App::Done
                    } else {
                        let pause = self.rng.random_range(0..self.opts.ttl_ms);
                        App::Idle {
                            until: local + pause,
                        }
                    };
                    return true;
                }
                if local < next_write {
                    return false;
                }
                let gap = (self.opts.ttl_ms / 5).max(1);
                if let App::Holding { next_write, .. } = &mut self.clients[client].app {
                    *next_write = local + gap;
                }
                let c = &self.clients[client];
                let writes: Vec<(usize, u64)> = c
                    .holds
                    .iter()
                    .filter(|h| !c.crashed && local < h.trust_until)
                    .map(|h| (h.resource, h.fence))
                    .collect();
                if writes.is_empty() {
                    return true;
                }
                if self.rng.random_range(0..1000) < u32::from(self.mix.pause_permille) * 5 {
                    // Checked the locks, then paused before the writes left: they go out on
                    // resume with fences that may be stale by then (Kleppmann's case).
                    self.clients[client].queued_writes = writes;
                    self.pause(client, " in the middle of a write");
                    return true;
                }
                for (resource, fence) in writes {
                    self.send_write(client, resource, fence);
                }
                true
            }
        }
    }

    fn downstream(&mut self, client: usize, resource: usize, fence: u64) {
        let verdict = self.fenced.write(resource, fence);
        if let Verdict::Rejected { highest } = verdict {
            self.report.writes_rejected += 1;
            self.note(
                Some(client),
                format!("write r{resource} fence {fence} rejected (saw {highest})"),
            );
            return;
        }
        if let Verdict::AcceptedStale { highest } = verdict {
            self.violation(
                ViolationKind::StaleWrite,
                format!("downstream accepted fence {fence} on r{resource} after {highest}"),
            );
        }
        self.report.writes_accepted += 1;
        self.note(
            Some(client),
            format!("write r{resource} fence {fence} accepted"),
        );
    }

    /// Sends a write to the downstream store, which it reaches after network latency.
    fn send_write(&mut self, client: usize, resource: usize, fence: u64) {
        let at = self.now + self.latency();
        self.push(
            at,
            Event::AtDownstream {
                client,
                resource,
                fence,
            },
        );
    }

    /// Pauses `client` for longer than a TTL (a garbage-collection pause): it stops acting
    /// while its clock keeps running.
    fn pause(&mut self, client: usize, why: &str) {
        let length = self
            .rng
            .random_range(self.opts.ttl_ms..self.opts.ttl_ms * 3);
        self.clients[client].paused_until = Some(self.now + length);
        self.report.faults.pauses += 1;
        self.note(Some(client), format!("pauses for {length} ms{why}"));
        self.push(self.now + length, Event::Resume { client });
    }

    fn maybe_fault(&mut self, client: usize) {
        let roll = self.rng.random_range(0..1000);
        if roll < u32::from(self.mix.pause_permille) {
            self.pause(client, "");
        } else if roll < u32::from(self.mix.pause_permille) + u32::from(self.mix.crash_permille) {
            let c = &mut self.clients[client];
            self.crashed.insert((client, c.incarnation));
            c.crashed = true;
            c.incarnation += 1;
            c.app = App::Idle { until: 0 };
            c.holds.clear();
            c.to_acquire.clear();
            c.inbox.clear();
            c.queued_writes.clear();
            c.wake_at = None;
            c.reported_past.clear();
            self.report.faults.crashes += 1;
            self.note(Some(client), "crashes");
            let back = self.now + self.rng.random_range(1..self.opts.ttl_ms * 2);
            self.push(back, Event::Restart { client });
        }
    }

    /// past_trust_deadline: every client that can act (neither paused nor crashed) has had
    /// its due timeouts handled at this instant, so a lease its application still holds
    /// must still be trusted on its clock.
    fn check_trust_deadlines(&mut self) {
        for client in 0..self.clients.len() {
            if !self.clients[client].is_active() {
                continue;
            }
            let local = self.local(client);
            if self.clients[client]
                .core
                .poll_timeout()
                .is_some_and(|t| t <= local)
            {
                self.clients[client].core.handle_timeout(local);
                self.flush(client);
                self.schedule_wake(client);
            }
            let c = &self.clients[client];
            let past: Vec<Hold> = c
                .holds
                .iter()
                .filter(|h| local >= h.trust_until && !c.reported_past.contains(&h.key))
                .copied()
                .collect();
            for Hold {
                key,
                resource,
                trust_until,
                ..
            } in past
            {
                self.clients[client].reported_past.insert(key);
                self.violation(
                    ViolationKind::PastTrustDeadline,
                    format!(
                        "client {client} still holds r{resource} at local {local}, past its \
                         trust deadline {trust_until}, without being told it ended"
                    ),
                );
            }
        }
    }

    /// holder_safety: at this real instant, no two clients both believe they hold one
    /// resource.
    fn check_holders(&mut self) {
        let mut holders: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, c) in self.clients.iter().enumerate() {
            for r in c.believes(self.now) {
                holders.entry(r).or_default().push(i);
            }
        }
        for (r, who) in holders {
            if who.len() > 1 {
                self.violation(
                    ViolationKind::HolderSafety,
                    format!("clients {who:?} all believe they hold r{r}"),
                );
            }
        }
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
                self.clients[client].core.handle_timeout(local);
                self.settle(client);
            }
        }
    }

    /// leaked: every lock id granted to an incarnation that did not crash was unlocked at
    /// the store, and the world settled.
    fn check_leaks(&mut self, limit: u64) {
        if let Some(&Reverse((at, _, _))) = self.queue.peek() {
            let busy: Vec<usize> = (0..self.clients.len())
                .filter(|&c| {
                    let c = &self.clients[c];
                    c.crashed || c.paused_until.is_some() || !c.core.is_idle()
                })
                .collect();
            self.violation(
                ViolationKind::Leaked,
                format!(
                    "the healed world did not settle by {limit} ms (next event at {at} ms; \
                     clients not idle: {busy:?})"
                ),
            );
        }
        let leaked: Vec<(usize, u32)> = self
            .grants
            .iter()
            .filter(|(id, who)| !self.unlocked.contains(*id) && !self.crashed.contains(who))
            .map(|(_, who)| *who)
            .collect();
        if !leaked.is_empty() {
            let clients: BTreeSet<usize> = leaked.iter().map(|(c, _)| *c).collect();
            self.violation(
                ViolationKind::Leaked,
                format!(
                    "{} granted lock id(s) never unlocked, of clients {clients:?} (which did \
                     not crash)",
                    leaked.len()
                ),
            );
        }
    }

    /// stuck: once every lease has run out, a purge leaves nothing.
    fn check_stuck(&mut self) {
        let after = self.now + self.opts.ttl_ms * 3;
        self.now = after;
        self.clock
            .set(EPOCH.saturating_add(Duration::from_millis(after)));
        at_once(self.store.purge()).unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        let left = at_once(self.store.status(&Filter::new()))
            .unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        if !left.is_empty() {
            let names: Vec<String> = left
                .iter()
                .map(|l| l.resource.as_str().to_owned())
                .collect();
            self.violation(
                ViolationKind::Stuck,
                format!("locks left after healing: {names:?}"),
            );
        }
    }
}
