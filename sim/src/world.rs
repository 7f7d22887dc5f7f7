//! The simulated world: clients, network, store, downstream; one seeded PRNG, virtual time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use lockwright_engine::lease::{LeaseConfig, LeaseEvent, LeaseSchedule};
use lockwright_engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStore, ManualClock, Timestamp, Ttl,
};
use lockwright_store_mem::MemStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{FaultMix, Options, SeedReport, TimelineEntry, Violation, ViolationKind};

/// Real time zero of every run, as the store's clock shows it.
const EPOCH: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// Runs a store-mem future that never waits (store-mem does no IO).
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        // store-mem's operations take a mutex and return: they never suspend.
        Poll::Pending => unreachable!("a store-mem operation suspended"),
    }
}

#[derive(Clone, Debug)]
enum Request {
    Xlock { resource: usize, lock_id: LockId },
    Renew { key: u64, lock_id: LockId },
    Unlock { lock_id: LockId },
}

#[derive(Clone, Debug)]
enum Reply {
    Granted { fence: u64 },
    Refused,
    Renewed,
    RenewRefused,
    Failed,
    Unlocked,
}

#[derive(Debug)]
enum Event {
    Wake {
        client: usize,
        incarnation: u32,
    },
    AtStore {
        client: usize,
        incarnation: u32,
        req_id: u64,
        request: Request,
    },
    Reply {
        client: usize,
        incarnation: u32,
        req_id: u64,
        reply: Reply,
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

#[derive(Clone, Debug)]
enum Phase {
    Idle {
        next_attempt: u64,
    },
    Acquiring {
        resource: usize,
        lock_id: LockId,
        sent: u64,
        req_id: u64,
    },
    Holding {
        resource: usize,
        lock_id: LockId,
        fence: u64,
        key: u64,
        work_until: u64,
        next_write: u64,
    },
}

/// What a request in flight was for.
#[derive(Clone, Copy, Debug)]
enum Purpose {
    Acquire,
    Renew { key: u64 },
    Release,
}

struct Pending {
    sent: u64,
    deadline: u64,
    purpose: Purpose,
}

struct Client {
    drift_ppm: i64,
    offset: u64,
    phase: Phase,
    schedule: LeaseSchedule,
    pending: BTreeMap<u64, Pending>,
    paused_until: Option<u64>,
    /// A write decided before a pause, sent when the client resumes.
    queued_write: Option<(usize, u64)>,
    crashed: bool,
    incarnation: u32,
    next_key: u64,
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

    /// The resource this client believes it holds at real time `real`, by the holding rule.
    fn believes(&self, real: u64) -> Option<usize> {
        match &self.phase {
            Phase::Holding { resource, key, .. } if !self.crashed => {
                let until = self.schedule.trust_until(*key)?;
                (self.local(real) < until).then_some(*resource)
            }
            _ => None,
        }
    }
}

/// One simulated run.
pub(crate) struct World {
    opts: Options,
    mix: FaultMix,
    rng: StdRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Event>>,
    clock: Arc<ManualClock>,
    store: MemStore,
    clients: Vec<Client>,
    /// Highest fence the downstream accepted per resource, and the highest granted.
    accepted: Vec<u64>,
    granted: Vec<u64>,
    next_req: u64,
    pub(crate) report: SeedReport,
    record: bool,
}

impl World {
    pub(crate) fn new(opts: &Options, seed: u64, record: bool) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mix = FaultMix::from_rng(&mut rng, opts);
        let clock = Arc::new(ManualClock::new(EPOCH));
        let store = MemStore::with_clock_and_shards(Arc::clone(&clock), 1);
        let lease = LeaseConfig::new(
            0.5,
            Duration::from_millis(opts.drift_margin_ms),
            3,
            Duration::from_millis((opts.ttl_ms / 20).max(1)),
        )
        .unwrap_or_else(|e| panic!("invalid simulation options: {e}"));
        let clients = (0..opts.clients)
            .map(|_| {
                let drift_ppm = if mix.drift_ppm == 0 {
                    0
                } else {
                    rng.random_range(-mix.drift_ppm..=mix.drift_ppm)
                };
                Client {
                    drift_ppm,
                    offset: rng.random_range(0..1_000_000),
                    phase: Phase::Idle { next_attempt: 0 },
                    schedule: LeaseSchedule::new(lease),
                    pending: BTreeMap::new(),
                    paused_until: None,
                    queued_write: None,
                    crashed: false,
                    incarnation: 0,
                    next_key: 0,
                }
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
            clients,
            accepted: vec![0; opts.resources],
            granted: vec![0; opts.resources],
            next_req: 0,
            report,
            record,
        };
        for c in 0..opts.clients {
            let start = world.rng.random_range(0..opts.ttl_ms);
            world.push(
                start,
                Event::Wake {
                    client: c,
                    incarnation: 0,
                },
            );
        }
        world
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

    fn send(&mut self, client: usize, request: Request) -> u64 {
        self.next_req += 1;
        let req_id = self.next_req;
        let c = &self.clients[client];
        let sent = c.local(self.now);
        let deadline = sent + self.opts.ttl_ms / 4;
        let incarnation = c.incarnation;
        let purpose = match &request {
            Request::Xlock { .. } => Purpose::Acquire,
            Request::Renew { key, .. } => Purpose::Renew { key: *key },
            Request::Unlock { .. } => Purpose::Release,
        };
        self.clients[client].pending.insert(
            req_id,
            Pending {
                sent,
                deadline,
                purpose,
            },
        );
        let at = self.now + self.latency();
        self.push(
            at,
            Event::AtStore {
                client,
                incarnation,
                req_id,
                request,
            },
        );
        let wake_at = self.clients[client].real_at(deadline);
        self.push(
            wake_at,
            Event::Wake {
                client,
                incarnation,
            },
        );
        req_id
    }

    /// Runs until the end of the fault phase, then heals, stops the clients, lets every
    /// lease run out, purges, and checks that nothing is left locked.
    pub(crate) fn run(mut self) -> SeedReport {
        let end = self.opts.duration_ms;
        while let Some(Reverse((at, _, idx))) = self.queue.pop() {
            if at > end {
                break;
            }
            self.now = at;
            let Some(event) = self.events[idx].take() else {
                continue;
            };
            self.report.events += 1;
            self.handle(event);
            self.check_holders();
        }
        self.heal_and_check_liveness();
        self.report
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Wake {
                client,
                incarnation,
            } => {
                if self.clients[client].incarnation == incarnation {
                    self.step(client);
                }
            }
            Event::AtStore {
                client,
                incarnation,
                req_id,
                request,
            } => {
                let reply = self.apply(client, &request);
                if self.rng.random_range(0..100) < self.mix.lost_reply_pct {
                    self.report.faults.lost_replies += 1;
                    self.note(
                        Some(client),
                        format!("reply to {} lost", describe(&request)),
                    );
                } else {
                    let at = self.now + self.latency();
                    self.push(
                        at,
                        Event::Reply {
                            client,
                            incarnation,
                            req_id,
                            reply,
                        },
                    );
                }
            }
            Event::Reply {
                client,
                incarnation,
                req_id,
                reply,
            } => {
                if self.clients[client].incarnation == incarnation && !self.clients[client].crashed
                {
                    self.on_reply(client, req_id, reply);
                }
            }
            Event::AtDownstream {
                client,
                resource,
                fence,
            } => self.downstream(client, resource, fence),
            Event::Resume { client } => {
                self.clients[client].paused_until = None;
                self.note(Some(client), "resumes");
                if let Some((resource, fence)) = self.clients[client].queued_write.take()
                    && !self.clients[client].crashed
                {
                    self.send_write(client, resource, fence);
                }
                self.step(client);
            }
            Event::Restart { client } => {
                let c = &mut self.clients[client];
                c.crashed = false;
                c.phase = Phase::Idle { next_attempt: 0 };
                self.note(Some(client), "restarts");
                self.step(client);
            }
        }
    }

    fn apply(&mut self, client: usize, request: &Request) -> Reply {
        self.clock
            .set(EPOCH.saturating_add(Duration::from_millis(self.now)));
        let ttl = Ttl::new(Duration::from_millis(self.opts.ttl_ms))
            .unwrap_or_else(|e| panic!("ttl: {e}"));
        let margin = Duration::from_millis(self.opts.drift_margin_ms);
        match request {
            Request::Xlock { resource, lock_id } => {
                let details = LockDetails::new()
                    .owner(format!("client-{client}"))
                    .ttl(ttl.as_duration());
                let name = format!("r{resource}");
                let req = LockRequest::new(&name, lock_id.as_str(), &details)
                    .unwrap_or_else(|e| panic!("request: {e}"));
                match ready(self.store.xlock(&req)) {
                    Ok(status) => {
                        if status.fence <= self.granted[*resource] {
                            self.violation(
                                ViolationKind::FenceMonotonic,
                                format!(
                                    "r{resource} granted fence {} after {}",
                                    status.fence, self.granted[*resource]
                                ),
                            );
                        }
                        self.granted[*resource] = self.granted[*resource].max(status.fence);
                        self.note(
                            Some(client),
                            format!("store grants r{resource}, fence {}", status.fence),
                        );
                        Reply::Granted {
                            fence: status.fence,
                        }
                    }
                    Err(Error::AlreadyLocked { .. }) => Reply::Refused,
                    Err(e) => panic!("store-mem failed: {e}"),
                }
            }
            Request::Renew { lock_id, .. } => match ready(self.store.renew(lock_id, ttl, margin)) {
                Ok(_) => Reply::Renewed,
                Err(Error::NotRenewable { .. } | Error::LockNotFound) => Reply::RenewRefused,
                Err(e) => panic!("store-mem failed: {e}"),
            },
            Request::Unlock { lock_id } => {
                ready(self.store.unlock(lock_id))
                    .unwrap_or_else(|e| panic!("store-mem failed: {e}"));
                Reply::Unlocked
            }
        }
    }

    /// The client acts on its own clock: loses or renews leases, writes, releases, acquires.
    fn step(&mut self, client: usize) {
        if self.clients[client].crashed || self.clients[client].paused_until.is_some() {
            return;
        }
        self.maybe_fault(client);
        if self.clients[client].crashed || self.clients[client].paused_until.is_some() {
            return;
        }
        let local = self.clients[client].local(self.now);
        // Requests that timed out: unknown outcome.
        let expired: Vec<u64> = self.clients[client]
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= local)
            .map(|(id, _)| *id)
            .collect();
        for req_id in expired {
            if let Some(p) = self.clients[client].pending.remove(&req_id) {
                self.outcome(client, req_id, &p, Reply::Failed);
            }
        }
        let events = self.clients[client].schedule.poll(local);
        for event in events {
            match event {
                LeaseEvent::Renew { key, lock_id, .. } => {
                    self.send(client, Request::Renew { key, lock_id });
                }
                LeaseEvent::Lost { key, cause } => {
                    self.lose(client, key, &format!("{cause:?}"), local)
                }
            }
        }
        let phase = self.clients[client].phase.clone();
        match phase {
            Phase::Idle { next_attempt } if local >= next_attempt => {
                let resource = self.rng.random_range(0..self.opts.resources);
                let lock_id = LockId::from_random(self.rng.random());
                let req_id = self.send(
                    client,
                    Request::Xlock {
                        resource,
                        lock_id: lock_id.clone(),
                    },
                );
                self.clients[client].phase = Phase::Acquiring {
                    resource,
                    lock_id,
                    sent: local,
                    req_id,
                };
            }
            Phase::Holding {
                resource,
                lock_id,
                fence,
                key,
                work_until,
                next_write,
            } => {
                if local >= work_until {
                    self.clients[client].schedule.remove(key);
                    self.send(client, Request::Unlock { lock_id });
                    self.note(Some(client), format!("releases r{resource}"));
                    let pause = self.rng.random_range(0..self.opts.ttl_ms);
                    self.clients[client].phase = Phase::Idle {
                        next_attempt: local + pause,
                    };
                } else if local >= next_write
                    && self.clients[client].believes(self.now) == Some(resource)
                {
                    let gap = self.opts.ttl_ms / 5;
                    if let Phase::Holding { next_write, .. } = &mut self.clients[client].phase {
                        *next_write = local + gap.max(1);
                    }
                    if self.rng.random_range(0..1000) < u32::from(self.mix.pause_permille) * 5 {
                        // Checked the lock, then paused before the write left: it goes out on
                        // resume with a fence that may be stale by then (Kleppmann's case).
                        self.clients[client].queued_write = Some((resource, fence));
                        self.pause(client, " in the middle of a write");
                        return;
                    }
                    self.send_write(client, resource, fence);
                }
            }
            _ => {}
        }
        self.schedule_wake(client);
    }

    fn schedule_wake(&mut self, client: usize) {
        let c = &self.clients[client];
        let mut next = c.schedule.next_wakeup();
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        match &c.phase {
            Phase::Idle { next_attempt } => consider(*next_attempt),
            Phase::Holding {
                work_until,
                next_write,
                ..
            } => {
                consider(*work_until);
                consider(*next_write);
            }
            Phase::Acquiring { .. } => {}
        }
        for p in c.pending.values() {
            consider(p.deadline);
        }
        if let Some(local) = next {
            let at = c.real_at(local).max(self.now + 1);
            let incarnation = c.incarnation;
            self.push(
                at,
                Event::Wake {
                    client,
                    incarnation,
                },
            );
        }
    }

    fn on_reply(&mut self, client: usize, req_id: u64, reply: Reply) {
        // A late reply to a request already given up on is ignored, as a real client would.
        if let Some(p) = self.clients[client].pending.remove(&req_id) {
            self.outcome(client, req_id, &p, reply);
            self.schedule_wake(client);
        }
    }

    /// How a request ended for the client: a reply, or `Failed` when it timed out.
    fn outcome(&mut self, client: usize, req_id: u64, pending: &Pending, reply: Reply) {
        let local = self.clients[client].local(self.now);
        let phase = self.clients[client].phase.clone();
        match (pending.purpose, phase) {
            (
                Purpose::Acquire,
                Phase::Acquiring {
                    resource,
                    lock_id,
                    sent,
                    req_id: want,
                },
            ) if want == req_id => {
                match reply {
                    Reply::Granted { fence } => {
                        self.start_holding(client, resource, lock_id, fence, sent, local)
                    }
                    Reply::Failed => {
                        // Outcome unknown: release whatever may have been granted.
                        self.send(client, Request::Unlock { lock_id });
                        self.clients[client].phase = Phase::Idle {
                            next_attempt: local + self.opts.ttl_ms / 10,
                        };
                    }
                    _ => {
                        let backoff = self.rng.random_range(1..self.opts.ttl_ms / 2);
                        self.clients[client].phase = Phase::Idle {
                            next_attempt: local + backoff,
                        };
                    }
                }
            }
            (Purpose::Renew { key }, _) => match reply {
                Reply::Renewed => self.clients[client].schedule.renewed(key, pending.sent),
                other => {
                    let refused = matches!(other, Reply::RenewRefused);
                    let lost = self.clients[client]
                        .schedule
                        .renew_failed(key, refused, local);
                    if let Some(LeaseEvent::Lost { cause, .. }) = lost {
                        self.lose(client, key, &format!("{cause:?}"), local);
                    }
                }
            },
            _ => {}
        }
    }

    fn start_holding(
        &mut self,
        client: usize,
        resource: usize,
        lock_id: LockId,
        fence: u64,
        sent: u64,
        local: u64,
    ) {
        let ttl = Ttl::new(Duration::from_millis(self.opts.ttl_ms))
            .unwrap_or_else(|e| panic!("ttl: {e}"));
        let c = &mut self.clients[client];
        c.next_key += 1;
        let key = c.next_key;
        if c.schedule.insert(key, lock_id.clone(), ttl, sent).is_ok() {
            let work = self
                .rng
                .random_range(self.opts.ttl_ms / 2..self.opts.ttl_ms * 4);
            self.clients[client].phase = Phase::Holding {
                resource,
                lock_id,
                fence,
                key,
                work_until: local + work,
                next_write: local,
            };
            self.note(Some(client), format!("holds r{resource}, fence {fence}"));
        } else {
            // The margin leaves no validity: do not trust it; release it.
            self.send(client, Request::Unlock { lock_id });
            self.clients[client].phase = Phase::Idle {
                next_attempt: local,
            };
        }
    }

    fn lose(&mut self, client: usize, key: u64, cause: &str, local: u64) {
        if let Phase::Holding {
            key: held,
            resource,
            ..
        } = self.clients[client].phase
            && held == key
        {
            self.note(Some(client), format!("stops trusting r{resource}: {cause}"));
            self.report.losses += 1;
            self.clients[client].phase = Phase::Idle {
                next_attempt: local,
            };
        }
    }

    fn downstream(&mut self, client: usize, resource: usize, fence: u64) {
        let best = self.accepted[resource];
        let accept = !self.opts.fencing || fence >= best;
        if accept {
            if fence < best {
                self.violation(
                    ViolationKind::StaleWrite,
                    format!("downstream accepted fence {fence} on r{resource} after {best}"),
                );
            }
            self.accepted[resource] = best.max(fence);
            self.report.writes_accepted += 1;
            self.note(
                Some(client),
                format!("write r{resource} fence {fence} accepted"),
            );
        } else {
            self.report.writes_rejected += 1;
            self.note(
                Some(client),
                format!("write r{resource} fence {fence} rejected (saw {best})"),
            );
        }
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
            c.crashed = true;
            c.incarnation += 1;
            c.pending.clear();
            c.schedule = LeaseSchedule::new(*c.schedule.config());
            c.phase = Phase::Idle { next_attempt: 0 };
            self.report.faults.crashes += 1;
            self.note(Some(client), "crashes");
            let back = self.now + self.rng.random_range(1..self.opts.ttl_ms * 2);
            self.push(back, Event::Restart { client });
        }
    }

    /// holder_safety: at this real instant, no two clients both believe they hold one
    /// resource.
    fn check_holders(&mut self) {
        let mut holders: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, c) in self.clients.iter().enumerate() {
            if let Some(r) = c.believes(self.now) {
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

    fn heal_and_check_liveness(&mut self) {
        // Everyone stops; every lease runs out; the purger runs.
        let after = self.opts.duration_ms + self.opts.ttl_ms * 3;
        self.now = after;
        self.clock
            .set(EPOCH.saturating_add(Duration::from_millis(after)));
        ready(self.store.purge()).unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        let left = ready(self.store.status(&Filter::new()))
            .unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        if !left.is_empty() {
            let names: Vec<String> = left.iter().map(|l| l.resource.to_string()).collect();
            self.violation(
                ViolationKind::Stuck,
                format!("locks left after healing: {names:?}"),
            );
        }
    }
}

fn describe(r: &Request) -> String {
    match r {
        Request::Xlock { resource, .. } => format!("xlock r{resource}"),
        Request::Renew { .. } => "renew".into(),
        Request::Unlock { .. } => "unlock".into(),
    }
}
