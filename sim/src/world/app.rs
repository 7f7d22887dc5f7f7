//! The client's application on top of its core: idle, then a job (acquire one resource or
//! several in increasing order, hold them together writing to the fenced downstream store,
//! release them), and its reaction to what the core says.

use std::collections::BTreeSet;

use lockwright_engine::Access;
use lockwright_engine::LocalMs;
use lockwright_engine::lease::LeaseKey;
use lockwright_engine::locker::{Ask, Ended, Event as CoreEvent, Wait, Who};
use lockwright_engine::{LockId, LockOptions};
use lockwright_testkit::Verdict;
use rand::Rng;

use super::{Event, World};
use crate::report::ViolationKind;

/// The most resources one job holds together.
const MAX_JOB: usize = 4;

/// What the client's application is doing. Times are on the client's clock. The guards it
/// holds are its client's [`Hold`]s.
#[derive(Clone, Copy, Debug)]
pub(super) enum App {
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
#[derive(Clone, Debug)]
pub(super) struct Hold {
    pub(super) key: LeaseKey,
    /// The lock id of its lock (an election's leader proclaims with it).
    pub(super) lock_id: LockId,
    pub(super) resource: usize,
    pub(super) fence: u64,
    /// Local time.
    pub(super) trust_until: u64,
}

impl World {
    /// The application's reaction to what its core says.
    pub(super) fn on_core_event(&mut self, client: usize, event: CoreEvent) {
        let local = self.local(client);
        match event {
            CoreEvent::Acquired {
                key,
                status,
                trust_until: LocalMs(trust_until),
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
                    lock_id: status.lock_id.clone(),
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
            CoreEvent::Renewed {
                key,
                trust_until: LocalMs(trust_until),
            } => {
                let c = &mut self.clients[client];
                if let Some(i) = c.hold_of(key) {
                    c.holds[i].trust_until = trust_until;
                }
            }
            CoreEvent::RenewFailed { error, .. } => {
                self.note(Some(client), format!("renewal failed: {error}"));
            }
            CoreEvent::AttemptFailed { error, .. } => {
                self.note(Some(client), format!("acquire attempt failed: {error}"));
            }
            CoreEvent::Ended { key, how } => {
                let Some(i) = self.clients[client].hold_of(key) else {
                    return;
                };
                let Hold { resource, .. } = self.clients[client].holds.remove(i);
                if matches!(how, Ended::Refused | Ended::Expired) {
                    self.report.tally.losses += 1;
                    if !self.mix.can_cost_a_lease() {
                        self.violation(
                            ViolationKind::NeedlessLoss,
                            format!("client {client} lost r{resource} without faults: {how}"),
                        );
                    }
                }
                self.note(Some(client), format!("stops trusting r{resource}: {how}"));
                // The application drops that guard and goes on with the others of its job.
                self.clients[client].core.release(key, LocalMs(local));
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
    pub(super) fn start_acquire(&mut self, client: usize, resource: usize, local: u64) {
        let who = Who::new(self.campaign_options(client).holder);
        let c = &mut self.clients[client];
        c.next_key += 1;
        c.wake_hints = 0;
        let key = c.next_key;
        let ask = Ask {
            resource: self.resources[resource].clone(),
            access: Access::Exclusive,
            ttl: self.ttl,
            who,
            fair: self.mix.is_fair(client),
        };
        c.core.acquire(key, ask, Wait::Forever, LocalMs(local));
        c.app = App::Acquiring { key, resource };
        let how = if self.mix.is_fair(client) {
            " fairly"
        } else {
            ""
        };
        self.note(Some(client), format!("acquires r{resource}{how}"));
    }

    /// The holder details of `client`'s requests: its name and, in an election, the value
    /// it campaigns with (a new one each time).
    fn campaign_options(&mut self, client: usize) -> LockOptions {
        let options = LockOptions::new().owner(format!("client-{client}"));
        if self.opts.election {
            options.comment(self.new_value())
        } else {
            options
        }
    }

    /// Drops every guard the application holds (each released by the core) and forgets
    /// what the job still had to acquire.
    pub(super) fn release_all(&mut self, client: usize, local: u64) {
        self.clients[client].to_acquire.clear();
        for h in std::mem::take(&mut self.clients[client].holds) {
            self.clients[client].core.release(h.key, LocalMs(local));
            self.note(Some(client), format!("releases r{}", h.resource));
        }
    }

    /// The resources of a new job: one, or half the time (given enough resources) two to
    /// four distinct ones, in increasing order.
    pub(super) fn job(&mut self) -> Vec<usize> {
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
    pub(super) fn app_step(&mut self, client: usize) -> bool {
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
                if self.opts.election {
                    // A leader proclaims a new value now and then (while it trusts its
                    // leadership, as `Leadership::proclaim` does).
                    let c = &self.clients[client];
                    let leading: Vec<LockId> = (c.holds.iter())
                        .filter(|h| !c.crashed && local < h.trust_until)
                        .map(|h| h.lock_id.clone())
                        .collect();
                    for lock_id in leading {
                        if self.rng.random_bool(0.3) {
                            self.send_proclaim(client, lock_id);
                        }
                    }
                }
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

    pub(super) fn downstream(&mut self, client: usize, resource: usize, fence: u64) {
        let verdict = self.fenced.write(resource, fence);
        self.report.writes.push(crate::report::DownstreamWrite {
            at: self.now,
            client,
            resource,
            fence,
            accepted: !matches!(verdict, Verdict::Rejected { .. }),
        });
        if let Verdict::Rejected { highest } = verdict {
            self.report.tally.writes_rejected += 1;
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
        self.report.tally.writes_accepted += 1;
        self.note(
            Some(client),
            format!("write r{resource} fence {fence} accepted"),
        );
    }

    /// Sends a write to the downstream store, which it reaches after network latency.
    pub(super) fn send_write(&mut self, client: usize, resource: usize, fence: u64) {
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
}
