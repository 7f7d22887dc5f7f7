//! A simulated client: its drifting clock, its core, the guards its application holds; and
//! how the world drives its core (hands it replies, takes its requests and events, wakes it
//! when it asks).

use std::collections::BTreeSet;

use lockwright_engine::LocalMs;
use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{LockerCore, Reply, RequestId};
use rand::Rng;

use super::app::{App, Hold};
use super::hints::{InFlightHint, Watch};
use super::{Event, World};
use crate::SimRng;

/// A reply that reached a paused client, handled when it resumes.
pub(super) type Buffered = (RequestId, Reply, Option<u64>);

/// A simulated client, across its incarnations: a crash keeps its clock, the restart gives
/// it a new core.
pub(super) struct Client {
    pub(super) drift_ppm: i64,
    pub(super) offset: u64,
    pub(super) core: LockerCore<SimRng>,
    pub(super) app: App,
    /// The guards the application holds, in the order it got them.
    pub(super) holds: Vec<Hold>,
    /// The resources the job under way still has to acquire after the one it is acquiring.
    pub(super) to_acquire: Vec<usize>,
    pub(super) paused_until: Option<u64>,
    /// Replies that arrived during a pause.
    pub(super) inbox: Vec<Buffered>,
    /// Hints (and ends of hint streams) that arrived during a pause, with their
    /// subscription.
    pub(super) hint_inbox: Vec<(u64, InFlightHint)>,
    /// The process's subscription to the store's hints.
    pub(super) watch: Watch,
    /// `Freed` hints for the resource being acquired, and `Missed` hints, that the core
    /// heard during the acquire under way. Each hint wakes at most one attempt, so this
    /// bounds how many hint-woken attempts were refused (the core's contention, which
    /// spreads out its next hint-woken attempt; see `handover_liveness`).
    pub(super) wake_hints: u32,
    /// How many places ahead of its waiter the store's last refusal of this incarnation
    /// said (`None` after a grant, or a refusal that gave no place): a waiter told it is
    /// near the head must be listening for the store's hints.
    pub(super) last_ahead: Option<u32>,
    /// Writes (resource, fence) decided before a pause, sent when the client resumes.
    pub(super) queued_writes: Vec<(usize, u64)>,
    pub(super) crashed: bool,
    pub(super) incarnation: u32,
    pub(super) next_key: LeaseKey,
    /// The one wake that counts: its real instant and token (older wakes are stale).
    pub(super) wake_at: Option<u64>,
    pub(super) wake_token: u64,
    /// The leases already reported past their trust deadline (each reported once).
    pub(super) reported_past: BTreeSet<LeaseKey>,
    /// Cut off from the store until this real instant (a partition, in elections).
    pub(super) cut_off_until: Option<u64>,
}

impl Client {
    /// The client's monotonic clock at real time `real` (ms), running `drift_ppm` fast.
    pub(super) fn local(&self, real: u64) -> u64 {
        if self.drift_ppm == 0 {
            return self.offset + real;
        }
        // In i64 where that cannot overflow (always, in a run), else in i128: the same
        // result, without i128 division (this runs for every client after every event).
        let local = match i64::try_from(real)
            .ok()
            .and_then(|r| r.checked_add(r.checked_mul(self.drift_ppm)? / 1_000_000))
        {
            Some(local) => i128::from(local),
            None => {
                let real = i128::from(real);
                real + real * i128::from(self.drift_ppm) / 1_000_000
            }
        };
        self.offset + u64::try_from(local.max(0)).unwrap_or(0)
    }

    /// The first real instant at which the local clock reads at least `local`.
    pub(super) fn real_at(&self, local: u64) -> u64 {
        let want = local.saturating_sub(self.offset);
        let real = match i64::try_from(want)
            .ok()
            .and_then(|w| w.checked_mul(1_000_000))
        {
            Some(w) => i128::from(w / (1_000_000 + self.drift_ppm)),
            None => i128::from(want) * 1_000_000 / (1_000_000 + i128::from(self.drift_ppm)),
        };
        let mut r = u64::try_from(real.max(0)).unwrap_or(u64::MAX);
        while self.local(r) < local {
            r += 1;
        }
        r
    }

    /// The resources this client believes it holds at real time `real`: each a guard it
    /// was handed that did not end, while its clock is before that guard's trust deadline
    /// (what `LockGuard::is_held` says).
    pub(super) fn believes(&self, real: u64) -> impl Iterator<Item = usize> + '_ {
        let local = self.local(real);
        self.holds
            .iter()
            .filter(move |h| !self.crashed && local < h.trust_until)
            .map(|h| h.resource)
    }

    /// The index in `holds` of the guard of lease `key`.
    pub(super) fn hold_of(&self, key: LeaseKey) -> Option<usize> {
        self.holds.iter().position(|h| h.key == key)
    }

    pub(super) fn is_active(&self) -> bool {
        !self.crashed && self.paused_until.is_none()
    }
}

impl World {
    /// Sends what the core asks for, acts on what it says, and runs the application until
    /// neither has anything left to do at this instant; then schedules the next wake.
    pub(super) fn settle(&mut self, client: usize) {
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
    pub(super) fn flush(&mut self, client: usize) -> bool {
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
    pub(super) fn schedule_wake(&mut self, client: usize) {
        if !self.clients[client].is_active() {
            return;
        }
        let watch = self.update_watch(client);
        let healing = self.healing;
        let now = self.now;
        let c = &mut self.clients[client];
        let mut next = c.core.poll_timeout().map(|t| t.0);
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        if let Some(t) = watch {
            consider(t);
        }
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

    /// Hands a reply to the client's core.
    pub(super) fn deliver(
        &mut self,
        client: usize,
        id: RequestId,
        reply: Reply,
        lock_deadline: Option<u64>,
    ) {
        let local = self.local(client);
        if matches!(reply, Reply::Granted(_)) && lock_deadline.is_some_and(|d| local >= d) {
            self.report.tally.late_grants += 1;
            self.note(Some(client), "a grant arrives after its trust deadline");
        }
        self.clients[client].last_ahead = match &reply {
            Reply::Refused(lockwright_engine::Error::AlreadyLocked {
                queued: Some(q), ..
            }) => Some(q.ahead),
            Reply::Refused(_) | Reply::Granted(_) => None,
            _ => self.clients[client].last_ahead,
        };
        self.clients[client]
            .core
            .handle_reply(id, reply, LocalMs(local));
    }

    /// The client wakes from a pause: the write it decided on before the pause leaves, and
    /// its core sees the replies that arrived meanwhile, then the hints, and the timeouts
    /// that passed before or after them (as a driver polling all of them after a stall
    /// may).
    pub(super) fn resume(&mut self, client: usize) {
        self.clients[client].paused_until = None;
        self.note(Some(client), "resumes");
        for (resource, fence) in std::mem::take(&mut self.clients[client].queued_writes) {
            self.send_write(client, resource, fence);
        }
        let inbox = std::mem::take(&mut self.clients[client].inbox);
        let timeouts_first = self.rng.random_bool(0.5);
        let local = self.local(client);
        if timeouts_first {
            self.clients[client].core.handle_timeout(LocalMs(local));
        }
        for (id, reply, lock_deadline) in inbox {
            self.deliver(client, id, reply, lock_deadline);
        }
        for (sub, hint) in std::mem::take(&mut self.clients[client].hint_inbox) {
            self.hear(client, sub, hint);
        }
        if !timeouts_first {
            self.clients[client].core.handle_timeout(LocalMs(local));
        }
        self.settle(client);
    }
}
