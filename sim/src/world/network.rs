//! The network between the clients and the store: requests and replies travel with
//! latency and may be lost (the driver then sees silence or a connection error); and the
//! client faults, pauses longer than the TTL and crashes.

use lockwright_engine::Error;
use lockwright_engine::locker::{Reply, Request, Transmit};
use rand::Rng;

use super::app::App;
use super::hints::Watch;
use super::{Event, Route, World};

impl World {
    pub(super) fn describe(&self, request: &Request) -> String {
        match request {
            Request::Lock { request, .. } => format!("xlock {}", request.resource),
            Request::Renew { .. } => "renew".into(),
            Request::RenewMany { locks, .. } => format!("renew of {} locks", locks.len()),
            Request::Unlock { .. } => "unlock".into(),
            Request::LeaveQueue { resource, .. } => format!("leave the queue of {resource}"),
        }
    }

    /// Sends one request over the network: it may be lost on the way (the driver then sees
    /// silence or a connection error), or reach the store after latency.
    pub(super) fn transmit(&mut self, client: usize, t: Transmit) {
        let incarnation = self.clients[client].incarnation;
        if let Request::RenewMany { locks, .. } = &t.request {
            self.report.tally.renew_batches += 1;
            self.report.tally.batched_renewals += locks.len() as u64;
            self.report.tally.largest_batch =
                self.report.tally.largest_batch.max(locks.len() as u64);
            self.note(
                Some(client),
                format!("renews {} locks in one batch", locks.len()),
            );
        }
        let route = Route {
            client,
            incarnation,
            id: t.id,
        };
        let lock_deadline = matches!(t.request, Request::Lock { .. }).then_some(t.deadline.0);
        if self.partitioned(client) {
            let what = self.describe(&t.request);
            self.note(
                Some(client),
                format!("request {what} lost to the partition"),
            );
            if let Request::Unlock { lock_id, .. } = &t.request {
                self.lost_unlocks.insert(lock_id.clone());
            }
            self.maybe_connection_error(route, &t.request, lock_deadline);
            return;
        }
        if !self.healing && self.rng.random_range(0..100) < self.mix.lost_request_pct {
            self.report.faults.lost_requests += 1;
            let what = self.describe(&t.request);
            self.note(Some(client), format!("request {what} lost"));
            if let Request::Unlock { lock_id, .. } = &t.request {
                self.lost_unlocks.insert(lock_id.clone());
            }
            self.maybe_connection_error(route, &t.request, lock_deadline);
            return;
        }
        let at = self.now + self.latency();
        let (request, deadline) = (t.request, t.deadline.0);
        self.push(
            at,
            Event::AtStore {
                route,
                request,
                deadline,
            },
        );
    }

    /// After a lost message, the driver sees either nothing (the core's deadline passes)
    /// or, half the time, a connection error after a network delay.
    pub(super) fn maybe_connection_error(
        &mut self,
        route: Route,
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
            Request::LeaveQueue { .. } => "leave_queue",
        };
        let reply = Reply::Failed(Error::backend(operation, "connection reset"));
        self.send_reply(route, reply, lock_deadline);
    }

    /// The store applies a request; the reply may be lost on the way back.
    pub(super) fn at_store(&mut self, route: Route, request: Request, deadline: u64) {
        let reply = self.apply(route.client, route.incarnation, &request);
        let lock_deadline = matches!(request, Request::Lock { .. }).then_some(deadline);
        let partitioned = self.partitioned(route.client);
        if partitioned || !self.healing && self.rng.random_range(0..100) < self.mix.lost_reply_pct {
            if partitioned {
                let what = self.describe(&request);
                self.note(
                    Some(route.client),
                    format!("reply to {what} lost to the partition"),
                );
                if let (Request::Lock { request, .. }, Reply::Granted(_)) = (&request, &reply) {
                    self.lost_grants.insert(request.lock_id.clone());
                }
                self.maybe_connection_error(route, &request, lock_deadline);
                return;
            }
            self.report.faults.lost_replies += 1;
            let what = self.describe(&request);
            self.note(Some(route.client), format!("reply to {what} lost"));
            if let (Request::Lock { request, .. }, Reply::Granted(_)) = (&request, &reply) {
                self.lost_grants.insert(request.lock_id.clone());
            }
            self.maybe_connection_error(route, &request, lock_deadline);
            return;
        }
        self.send_reply(route, reply, lock_deadline);
    }

    /// A reply travels back to its client after latency.
    fn send_reply(&mut self, route: Route, reply: Reply, lock_deadline: Option<u64>) {
        let at = self.now + self.latency();
        self.push(
            at,
            Event::Reply {
                route,
                reply,
                lock_deadline,
            },
        );
    }

    /// Pauses `client` for longer than a TTL (a garbage-collection pause): it stops acting
    /// while its clock keeps running.
    pub(super) fn pause(&mut self, client: usize, why: &str) {
        let length = self
            .rng
            .random_range(self.opts.ttl_ms..self.opts.ttl_ms * 3);
        self.clients[client].paused_until = Some(self.now + length);
        self.report.faults.pauses += 1;
        self.note(Some(client), format!("pauses for {length} ms{why}"));
        self.push(self.now + length, Event::Resume { client });
    }

    /// Schedules the next failover, in a seed that has them, one to five TTLs from now.
    pub(super) fn schedule_failover(&mut self) {
        if self.mix.clock_jump_ms == 0 || self.healing {
            return;
        }
        let ttl = self.opts.ttl_ms;
        let at = self.now + self.failover_rng.random_range(ttl..ttl * 5);
        self.push(at, Event::Failover);
    }

    /// The store fails over to another member, whose clock is at most the seed's bound away
    /// from every other member's: half the time the farthest one from the current primary
    /// (a jump of the whole bound), else any. Stops with the faults.
    pub(super) fn failover(&mut self) {
        if self.healing {
            return;
        }
        let bound = self.mix.clock_jump_ms;
        let old = self.store_offset;
        let new = if self.failover_rng.random_bool(0.5) {
            if old * 2 >= bound { 0 } else { bound }
        } else {
            self.failover_rng.random_range(0..=bound)
        };
        self.store_offset = new;
        self.report.faults.failovers += 1;
        if new > old {
            self.report.faults.clock_jumps_forward += 1;
        } else if new < old {
            self.report.faults.clock_jumps_back += 1;
        }
        let jump = i128::from(new) - i128::from(old);
        self.note(
            None,
            format!("failover: the store's clock jumps {jump:+} ms (to real time +{new} ms)"),
        );
        self.schedule_failover();
    }

    /// Whether `client` is cut off from the store now (faults on): a message of its is
    /// lost, counted as lost to the partition.
    pub(super) fn partitioned(&mut self, client: usize) -> bool {
        let cut = !self.healing
            && self.clients[client]
                .cut_off_until
                .is_some_and(|t| self.now < t);
        if cut {
            self.report.faults.partitioned_messages += 1;
        }
        cut
    }

    pub(super) fn maybe_fault(&mut self, client: usize) {
        let roll = self.rng.random_range(0..1000);
        let (pause, crash) = (
            u32::from(self.mix.pause_permille),
            u32::from(self.mix.crash_permille),
        );
        if self.opts.election && (pause + crash..2 * pause + crash).contains(&roll) {
            // Elections: as often as a pause, a partition cuts the client off from the
            // store, for half a TTL to two TTLs.
            let ttl = self.opts.ttl_ms;
            let until = self.now + self.rng.random_range(ttl / 2..ttl * 2);
            self.clients[client].cut_off_until = Some(until);
            self.report.faults.partitions += 1;
            self.note(
                Some(client),
                format!("is cut off from the store until {until}"),
            );
        }
        if roll < u32::from(self.mix.pause_permille) {
            self.pause(client, "");
        } else if roll < u32::from(self.mix.pause_permille) + u32::from(self.mix.crash_permille) {
            let c = &mut self.clients[client];
            let dead = c.incarnation;
            self.crashed.insert((client, dead));
            c.crashed = true;
            c.incarnation += 1;
            c.app = App::Idle { until: 0 };
            c.holds.clear();
            c.to_acquire.clear();
            c.inbox.clear();
            c.hint_inbox.clear();
            // The subscription dies with the process.
            c.watch = Watch::default();
            c.queued_writes.clear();
            c.last_ahead = None;
            c.wake_at = None;
            c.reported_past.clear();
            self.report.faults.crashes += 1;
            self.note(Some(client), "crashes");
            self.holder_crashed(client, dead);
            let back = self.now + self.rng.random_range(1..self.opts.ttl_ms * 2);
            self.push(back, Event::Restart { client });
        }
    }
}
