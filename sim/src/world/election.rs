//! Elections (`Options::election`): every client is a candidate of the election on `r0`.
//! It campaigns (a fair exclusive acquire whose comment is its value), leads while it holds
//! the lock and proclaims new values now and then (`LockStore::set_comment`, over the faulty
//! network, so a proclaim may arrive after its sender was deposed), and resigns (releases)
//! when its work is done; crashes, pauses and lost messages depose leaders as they end any
//! lease. An observer, a process of its own, reads who leads (`election::leader_of` of the
//! store's status) every so often, its reads overlapping and coming back in any order, and
//! reports what the engine's `election::Observer` makes of them.
//!
//! Checked:
//! - `observer_went_back`: the observer never reports a leader whose fence is at or below
//!   one it reported;
//! - `leader_value`: at every read, the leader's value is one its own lock id proclaimed
//!   (the value it campaigned with, or one of the proclaims its holder sent): a late
//!   proclaim of a deposed leader never changes its successor's value.
//!
//! Failover is bounded by the checks every fair seed has: `handover_liveness` (a resign
//! hands the leadership over within a few network latencies, a crashed leader's lock is
//! taken over at the end of its grace) and `bounded_waiting`, in the seeds calm enough.

use std::collections::{BTreeMap, BTreeSet};

use lockwright_engine::election::{Leader, Observer, leader_of};
use lockwright_engine::{Filter, LockId, LockStore};
use rand::Rng;

use super::{Event, World, at_once};
use crate::report::ViolationKind;

/// What the world keeps of the election.
#[derive(Debug, Default)]
pub(super) struct Election {
    /// Every lock id's values: the comment of its lock requests and the proclaims its
    /// holder sent.
    values: BTreeMap<LockId, BTreeSet<String>>,
    /// The observer, and the highest fence it reported (the check's own record).
    observer: Observer,
    highest: Option<u64>,
    /// The observer reads every this many ms.
    every: u64,
    /// The last value number handed out.
    next_value: u64,
}

impl World {
    /// Starts the election's observer (a no-op outside elections).
    pub(super) fn start_election(&mut self) {
        if !self.opts.election {
            return;
        }
        // Reads every mean latency: a read's round trip takes two latencies, so reads
        // overlap, and come back out of order.
        let (lo, hi) = self.mix.latency_ms;
        self.election.every = ((lo + hi) / 2).max(1);
        self.push(self.election.every, Event::ObserveTick);
    }

    /// A new value for a campaign or a proclaim: `v<n>`, never used before.
    pub(super) fn new_value(&mut self) -> String {
        self.election.next_value += 1;
        format!("v{}", self.election.next_value)
    }

    /// Records that the lock id `lock_id` proclaims `value` (at a lock request that reached
    /// the store, or when its holder sends a proclaim).
    pub(super) fn record_value(&mut self, lock_id: &LockId, value: Option<&str>) {
        if let (true, Some(v)) = (self.opts.election, value) {
            let values = self.election.values.entry(lock_id.clone()).or_default();
            values.insert(v.to_owned());
        }
    }

    /// The leader `client` holding `lock_id` proclaims a new value, which reaches the store
    /// after latency (or is lost).
    pub(super) fn send_proclaim(&mut self, client: usize, lock_id: LockId) {
        let value = self.new_value();
        self.record_value(&lock_id, Some(&value));
        self.report.tally.proclaims_sent += 1;
        self.note(Some(client), format!("proclaims {value}"));
        if self.partitioned(client)
            || !self.healing && self.rng.random_range(0..100) < self.mix.lost_request_pct
        {
            return;
        }
        let at = self.now + self.latency();
        self.push(
            at,
            Event::Proclaim {
                client,
                lock_id,
                value,
            },
        );
    }

    /// A proclaim reaches the store.
    pub(super) fn proclaim_at_store(&mut self, client: usize, lock_id: &LockId, value: &str) {
        self.clock.set(self.store_now());
        let r0 = self.resources[0].clone();
        match at_once(self.store.set_comment(&r0, lock_id, Some(value))) {
            Ok(_) => self.note(Some(client), format!("the store takes {value}")),
            Err(e) => {
                self.report.tally.proclaims_refused += 1;
                self.note(Some(client), format!("the store refuses {value}: {e}"));
            }
        }
    }

    /// The observer's timer: a read leaves for the store, and the next one is due.
    pub(super) fn observe_tick(&mut self) {
        if self.healing {
            return;
        }
        let at = self.now + self.latency();
        self.push(at, Event::ObserveAtStore);
        self.push(self.now + self.election.every, Event::ObserveTick);
    }

    /// A read reaches the store: who leads now, checked for `leader_value`; the answer
    /// goes back after latency (or is lost).
    pub(super) fn observe_at_store(&mut self) {
        self.clock.set(self.store_now());
        let filter = Filter::new().resource(self.resources[0].as_str());
        let locks =
            at_once(self.store.status(&filter)).unwrap_or_else(|e| panic!("store-mem failed: {e}"));
        let leader = leader_of(&locks);
        self.report.tally.observer_reads += 1;
        if let Some(l) = &leader {
            let lock = locks.iter().find(|s| s.fence == l.fence);
            let own = lock.and_then(|s| self.election.values.get(&s.lock_id));
            if !own.is_some_and(|vs| l.value.as_ref().is_some_and(|v| vs.contains(v))) {
                self.violation(
                    ViolationKind::LeaderValue,
                    format!(
                        "the leader with fence {} has the value {:?}, which it never proclaimed",
                        l.fence, l.value
                    ),
                );
            }
        }
        if !self.healing && self.rng.random_range(0..100) < self.mix.lost_reply_pct {
            return;
        }
        let at = self.now + self.latency();
        self.push(at, Event::ObserveAnswer { leader });
    }

    /// A read's answer reaches the observer: what it reports, checked for
    /// `observer_went_back`.
    pub(super) fn observe_answer(&mut self, leader: Option<Leader>) {
        let Some(leader) = leader else { return };
        let e = &mut self.election;
        let (fence, highest) = (leader.fence, e.highest);
        if highest.is_some_and(|h| fence < h) {
            self.report.tally.stale_reads_skipped += 1;
        }
        let Some(reported) = self.election.observer.see(leader) else {
            return;
        };
        if highest.is_some_and(|h| reported.fence <= h) {
            self.violation(
                ViolationKind::ObserverWentBack,
                format!(
                    "the observer reported fence {} after fence {}",
                    reported.fence,
                    highest.unwrap_or_default()
                ),
            );
        }
        self.election.highest = Some(highest.map_or(fence, |h| h.max(fence)));
        self.report.tally.leaders_observed += 1;
        self.note(
            None,
            format!("the observer reports fence {fence} ({:?})", reported.value),
        );
    }
}
