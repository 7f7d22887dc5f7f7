//! The lease schedule: when to renew each held lock, and when to stop trusting it.
//!
//! Sans-IO: the schedule reads no clock. Its caller (the `Locker`'s background task, or the
//! simulator) passes the local monotonic time in milliseconds, performs the renewals the
//! schedule asks for, and reports how each ended. One schedule serves every lock a process
//! holds, ordered by a deadline index, so N held locks need one task.
//!
//! Validity follows the holding rule ([`crate::trust::trust_until`]): a lock is trusted
//! until `sent + ttl - drift_margin`, where `sent` is when the request that granted or last
//! renewed it was **sent**. A renewal is due at `sent + ttl * renew_fraction`. A transient
//! failure is retried after a short backoff, at most `max_attempts` times per renewal; a
//! refusal (the store says the lock is gone or not renewable) loses the lock at once; and
//! when the trusted validity runs out before a renewal succeeds, the lock is lost, before
//! the store's lease could have expired.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::Error;
use crate::names::LockId;
use crate::time::{LocalMs, Ttl, duration_millis};
use crate::trust::trust_until;

/// A caller-chosen handle for one held lock.
pub type LeaseKey = u64;

/// How the schedule renews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    renew_permille: u64,
    drift_margin_ms: u64,
    max_attempts: u32,
    retry_backoff_ms: u64,
    batch_permille: u64,
}

impl LeaseConfig {
    /// Renew at `renew_fraction` of the TTL (in (0, 1)), trust each lock until `ttl -
    /// drift_margin` after the request was sent, and try each renewal at most `max_attempts`
    /// times (at least 1), `retry_backoff` apart.
    ///
    /// # Errors
    /// `InvalidArgument` naming `renew_fraction`, `max_renew_attempts` or `renew_retry` (the
    /// Locker configuration's names for them).
    pub fn new(
        renew_fraction: f64,
        drift_margin: Duration,
        max_attempts: u32,
        retry_backoff: Duration,
    ) -> Result<Self, Error> {
        if !(renew_fraction > 0.0 && renew_fraction < 1.0) {
            return Err(Error::invalid(
                "renew_fraction",
                "must be strictly between 0 and 1",
            ));
        }
        if max_attempts == 0 {
            return Err(Error::invalid("max_renew_attempts", "must be at least 1"));
        }
        if retry_backoff.is_zero() {
            return Err(Error::invalid("renew_retry", "must be greater than zero"));
        }
        // In (0, 1) times 1000, rounded: fits easily.
        let renew_permille = ((renew_fraction * 1000.0).round() as u64).clamp(1, 999);
        Ok(LeaseConfig {
            renew_permille,
            drift_margin_ms: duration_millis(drift_margin),
            max_attempts,
            retry_backoff_ms: duration_millis(retry_backoff).max(1),
            batch_permille: 0,
        })
    }

    /// Lets renewals join a batch: whenever some renewal is due, every other lease whose
    /// renewal falls due within `batch_fraction` of its own TTL is renewed with it (early,
    /// which is always safe: validity counts from when the renewal is sent). In [0,
    /// `renew_fraction`]; 0 (the default) renews each lease on its own schedule.
    ///
    /// # Errors
    /// `InvalidArgument` naming `renew_batch_fraction`.
    pub fn with_batch_fraction(mut self, batch_fraction: f64) -> Result<Self, Error> {
        let permille = (batch_fraction * 1000.0).round();
        if !(0.0..=self.renew_permille as f64).contains(&permille) {
            return Err(Error::invalid(
                "renew_batch_fraction",
                "must be between 0 and renew_fraction",
            ));
        }
        // Checked above: between 0 and 999.
        self.batch_permille = permille as u64;
        Ok(self)
    }

    /// The drift margin.
    #[must_use]
    pub fn drift_margin(&self) -> Duration {
        Duration::from_millis(self.drift_margin_ms)
    }
}

/// What the caller must do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
    /// Send a renewal of `lock_id` for `ttl` now, then report it with
    /// [`LeaseSchedule::renewed`] or [`LeaseSchedule::renew_failed`].
    Renew {
        /// The lease.
        key: LeaseKey,
        /// The group to renew.
        lock_id: LockId,
        /// The TTL to renew for.
        ttl: Ttl,
    },
    /// The lock can no longer be trusted; the schedule has forgotten it.
    Lost {
        /// The lease.
        key: LeaseKey,
        /// Why.
        cause: LostCause,
    },
}

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostCause {
    /// The store refused the renewal: the lock expired, was purged or taken over.
    Refused,
    /// The trusted validity ran out before a renewal succeeded (the store was slow or
    /// unreachable, or every retry failed).
    Expired,
}

#[derive(Clone, Debug)]
struct Lease {
    lock_id: LockId,
    ttl: Ttl,
    trust_until: LocalMs,
    due: LocalMs,
    attempts: u32,
    in_flight: bool,
}

/// Every held lock's renewal deadline and validity.
#[derive(Clone, Debug)]
pub struct LeaseSchedule {
    config: LeaseConfig,
    leases: BTreeMap<LeaseKey, Lease>,
    /// (instant, key) for each lease: its next renewal, or its validity end while a renewal
    /// is in flight.
    deadlines: BTreeSet<(LocalMs, LeaseKey)>,
    /// The longest a renewal may be brought forward to join a batch, over every lease.
    max_early_ms: u64,
}

impl LeaseSchedule {
    /// An empty schedule.
    #[must_use]
    pub fn new(config: LeaseConfig) -> Self {
        LeaseSchedule {
            config,
            leases: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            max_early_ms: 0,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The number of leases held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no lease is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    fn deadline_of(l: &Lease) -> LocalMs {
        if l.in_flight {
            l.trust_until
        } else {
            l.due.min(l.trust_until)
        }
    }

    fn reindex(&mut self, key: LeaseKey, old: Option<LocalMs>) {
        if let Some(old) = old {
            self.deadlines.remove(&(old, key));
        }
        if let Some(l) = self.leases.get(&key) {
            self.deadlines.insert((Self::deadline_of(l), key));
        }
    }

    /// How long before its due time a renewal may join a batch.
    fn early_ms(&self, ttl: Ttl) -> u64 {
        ttl.as_millis().saturating_mul(self.config.batch_permille) / 1000
    }

    fn renew_at(&self, sent: LocalMs, ttl: Ttl) -> LocalMs {
        if crate::mutants::active(crate::mutants::Mutant::LockerRenewAfterDeadline) {
            return sent.saturating_add_millis(ttl.as_millis());
        }
        sent.saturating_add_millis(
            ttl.as_millis().saturating_mul(self.config.renew_permille) / 1000,
        )
    }

    /// Starts tracking a lock granted by a request sent at local time `sent`.
    ///
    /// # Errors
    /// `InvalidArgument` naming `ttl` when the drift margin leaves no validity at all.
    pub fn insert(
        &mut self,
        key: LeaseKey,
        lock_id: LockId,
        ttl: Ttl,
        sent: LocalMs,
    ) -> Result<(), Error> {
        self.insert_handed(key, lock_id, ttl, ttl, sent)
    }

    /// Starts tracking a lock whose first lease is `lease`, not `ttl`, counted from local
    /// time `since`: one the store handed a waiter's place with a claim lease, trusted from
    /// when the waiter's last refusal was sent (the handoff came after it). It is trusted
    /// until `since + lease - drift_margin`, its first renewal (which claims it for `ttl`)
    /// is due at `renew_fraction` of `lease` after `since`, and every later one as for
    /// [`LeaseSchedule::insert`].
    ///
    /// # Errors
    /// `InvalidArgument` naming `ttl` when the drift margin leaves no validity at all.
    pub fn insert_handed(
        &mut self,
        key: LeaseKey,
        lock_id: LockId,
        ttl: Ttl,
        lease: Ttl,
        since: LocalMs,
    ) -> Result<(), Error> {
        let until = trust_until(since, lease, self.config.drift_margin())
            .ok_or_else(|| Error::invalid("ttl", "must be longer than the drift margin"))?;
        let old = self.leases.get(&key).map(Self::deadline_of);
        let due = self.renew_at(since, lease);
        self.max_early_ms = self.max_early_ms.max(self.early_ms(ttl));
        self.leases.insert(
            key,
            Lease {
                lock_id,
                ttl,
                trust_until: until,
                due,
                attempts: 0,
                in_flight: false,
            },
        );
        self.reindex(key, old);
        Ok(())
    }

    /// Stops tracking `key` (released or dropped). Returns whether it was tracked.
    pub fn remove(&mut self, key: LeaseKey) -> bool {
        match self.leases.remove(&key) {
            Some(l) => {
                self.deadlines.remove(&(Self::deadline_of(&l), key));
                true
            }
            None => false,
        }
    }

    /// The local instant until which `key` may be trusted.
    #[must_use]
    pub fn trust_until(&self, key: LeaseKey) -> Option<LocalMs> {
        self.leases.get(&key).map(|l| l.trust_until)
    }

    /// When the caller should next call [`LeaseSchedule::poll`].
    #[must_use]
    pub fn next_wakeup(&self) -> Option<LocalMs> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// The events due at local time `now`: renewals to send, and leases lost because their
    /// validity ran out (checked first: a lease is never renewed once it ran out).
    pub fn poll(&mut self, now: LocalMs) -> Vec<LeaseEvent> {
        let mut events = Vec::new();
        while let Some(&(t, key)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(lease) = self.leases.get_mut(&key) else {
                continue;
            };
            if now >= lease.trust_until {
                self.leases.remove(&key);
                events.push(LeaseEvent::Lost {
                    key,
                    cause: LostCause::Expired,
                });
                continue;
            }
            self.start_renewal(key, &mut events);
        }
        if self.config.batch_permille > 0
            && events.iter().any(|e| matches!(e, LeaseEvent::Renew { .. }))
        {
            self.join_batch(now, &mut events);
        }
        events
    }

    /// Renewals due soon enough join the batch that is going out at `now`.
    fn join_batch(&mut self, now: LocalMs, events: &mut Vec<LeaseEvent>) {
        let horizon = now.saturating_add_millis(self.max_early_ms);
        let candidates: Vec<(LocalMs, LeaseKey)> = self
            .deadlines
            .range((now.saturating_add_millis(1), 0)..=(horizon, LeaseKey::MAX))
            .copied()
            .collect();
        for (at, key) in candidates {
            let Some(lease) = self.leases.get(&key) else {
                continue;
            };
            let early = self.early_ms(lease.ttl);
            let joins_at = LocalMs::from_millis(lease.due.as_millis().saturating_sub(early));
            if lease.in_flight || joins_at > now || now >= lease.trust_until {
                continue;
            }
            self.deadlines.remove(&(at, key));
            self.start_renewal(key, events);
        }
    }

    /// Sends a renewal of `key` (already out of the deadline index): in flight until its
    /// outcome is reported, indexed by its validity end meanwhile.
    fn start_renewal(&mut self, key: LeaseKey, events: &mut Vec<LeaseEvent>) {
        if let Some(lease) = self.leases.get_mut(&key) {
            lease.in_flight = true;
            lease.attempts += 1;
            events.push(LeaseEvent::Renew {
                key,
                lock_id: lease.lock_id.clone(),
                ttl: lease.ttl,
            });
        }
        self.reindex(key, None);
    }

    /// A renewal of `key`, sent at local time `sent`, succeeded.
    pub fn renewed(&mut self, key: LeaseKey, sent: LocalMs) {
        let margin = self.config.drift_margin();
        let Some(lease) = self.leases.get(&key) else {
            return;
        };
        let old = Self::deadline_of(lease);
        let ttl = lease.ttl;
        let due = self.renew_at(sent, ttl);
        if let Some(lease) = self.leases.get_mut(&key) {
            // Never extend from a request older than the one that set the current validity.
            if let Some(until) = trust_until(sent, ttl, margin) {
                lease.trust_until = lease.trust_until.max(until);
            }
            lease.due = due;
            lease.attempts = 0;
            lease.in_flight = false;
        }
        self.reindex(key, Some(old));
    }

    /// A renewal of `key` failed at local time `now`: `refused` when the store said no (the
    /// lock is gone or not renewable), otherwise a transient error worth retrying. Returns
    /// the loss, if this ends the lease.
    pub fn renew_failed(
        &mut self,
        key: LeaseKey,
        refused: bool,
        now: LocalMs,
    ) -> Option<LeaseEvent> {
        let lease = self.leases.get(&key)?;
        let old = Self::deadline_of(lease);
        if refused {
            self.remove(key);
            return Some(LeaseEvent::Lost {
                key,
                cause: LostCause::Refused,
            });
        }
        if lease.attempts >= self.config.max_attempts || now >= lease.trust_until {
            self.remove(key);
            return Some(LeaseEvent::Lost {
                key,
                cause: LostCause::Expired,
            });
        }
        let retry = now.saturating_add_millis(self.config.retry_backoff_ms);
        if let Some(lease) = self.leases.get_mut(&key) {
            lease.in_flight = false;
            lease.due = retry;
        }
        self.reindex(key, Some(old));
        None
    }
}

#[cfg(test)]
mod tests;
