//! How a Locker is configured, and the counters it keeps.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::lease::LeaseConfig;

/// Counters for health checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockerStats {
    /// Locks held now.
    pub held: u64,
    /// Successful renewals.
    pub renewals: u64,
    /// Failed renewal attempts (transient errors, refusals and renewals without a reply).
    pub renew_failures: u64,
    /// Locks lost (refused or expired).
    pub lost: u64,
    /// Acquire attempts that failed or got no reply (the store was unreachable, slow or
    /// failing).
    pub acquire_failures: u64,
    /// Locks the store handed a waiter's place and said so in a hint, which the waiter
    /// held at once, without asking (see [`crate::Hint::First`]).
    #[serde(default)]
    pub handed_by_hint: u64,
}

/// How a Locker behaves. Start from [`LockerConfig::default`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LockerConfig {
    /// Renew when this fraction of the TTL has passed since the last request was sent.
    pub renew_fraction: f64,
    /// How much earlier than `sent + ttl` a lock stops being trusted, to cover the local
    /// clock running slower than the store's. Must be shorter than every TTL used.
    pub drift_margin: Duration,
    /// Attempts per renewal before the lock is given up.
    pub max_renew_attempts: u32,
    /// The wait between attempts of one renewal, and between attempts of one release.
    pub renew_retry: Duration,
    /// The first wait between attempts of a waiting acquire; it doubles up to
    /// `max_backoff`, with full jitter.
    pub initial_backoff: Duration,
    /// The longest wait between attempts of a waiting acquire.
    pub max_backoff: Duration,
    /// How long a release keeps trying before it gives up (the lock then expires by its
    /// TTL). One attempt waits at most this long, or the lock's TTL if shorter.
    pub release_timeout: Duration,
    /// Whenever a renewal is due, the other locks whose renewal falls due within this
    /// fraction of their TTL are renewed with it, in one batch (in [0, `renew_fraction`];
    /// 0 renews every lock on its own).
    pub renew_batch_fraction: f64,
    /// How long a waiting acquire keeps asking while every attempt fails or goes
    /// unanswered (the store is down or unreachable): it then ends with the last attempt's
    /// error. Counted from the first such attempt; any answer of the store (a refusal
    /// included) starts it again. The default is the MongoDB driver's default server
    /// selection timeout.
    pub unavailable_timeout: Duration,
    /// Whether a waiting acquire listens to the store's hints that a lock came free
    /// ([`crate::LockStore::hints`]) and asks again at once. Off, waiters only poll on their
    /// backoff; on, they poll too, as a safety net.
    pub wake_on_hints: bool,
    /// The first range of the random delay before a waiter acts on a hint, once its
    /// attempts woken by hints have been refused (others were woken too); it doubles with
    /// each such refusal, up to `max_backoff`. The first hint is acted on at once.
    pub hint_spread: Duration,
    /// The lease of a fair acquire's place in a queue: a waiter that dies delays the
    /// others by at most this. A waiting fair acquire asks again (which keeps its place)
    /// at `renew_fraction` of it.
    pub queue_ttl: Duration,
}

impl Default for LockerConfig {
    fn default() -> Self {
        LockerConfig {
            renew_fraction: 0.5,
            drift_margin: Duration::from_millis(100),
            max_renew_attempts: 3,
            renew_retry: Duration::from_millis(100),
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_secs(1),
            release_timeout: Duration::from_secs(5),
            renew_batch_fraction: 0.1,
            unavailable_timeout: Duration::from_secs(30),
            wake_on_hints: true,
            hint_spread: Duration::from_millis(2),
            queue_ttl: Duration::from_secs(3),
        }
    }
}

impl LockerConfig {
    /// Checks the configuration and derives the lease schedule's.
    ///
    /// # Errors
    /// `InvalidArgument` for `renew_fraction` outside (0, 1), zero `max_renew_attempts`,
    /// zero `renew_retry`, `initial_backoff`, `release_timeout`, `unavailable_timeout` or
    /// `hint_spread`, `max_backoff` below `initial_backoff` or `hint_spread`, or
    /// `queue_ttl` outside 100 ms to 10 minutes.
    pub fn lease_config(&self) -> Result<LeaseConfig, Error> {
        let lease = LeaseConfig::new(
            self.renew_fraction,
            self.drift_margin,
            self.max_renew_attempts,
            self.renew_retry,
        )?
        .with_batch_fraction(self.renew_batch_fraction)?;
        if self.initial_backoff.is_zero() {
            return Err(Error::invalid(
                "initial_backoff",
                "must be greater than zero",
            ));
        }
        if self.max_backoff < self.initial_backoff {
            return Err(Error::invalid(
                "max_backoff",
                "must be at least initial_backoff",
            ));
        }
        if self.hint_spread.is_zero() {
            return Err(Error::invalid("hint_spread", "must be greater than zero"));
        }
        if self.max_backoff < self.hint_spread {
            return Err(Error::invalid(
                "max_backoff",
                "must be at least hint_spread",
            ));
        }
        if !(crate::queue::MIN_QUEUE_TTL..=crate::queue::MAX_QUEUE_TTL).contains(&self.queue_ttl) {
            return Err(Error::invalid(
                "queue_ttl",
                format!(
                    "must be between {} ms and {} s",
                    crate::queue::MIN_QUEUE_TTL.as_millis(),
                    crate::queue::MAX_QUEUE_TTL.as_secs()
                ),
            ));
        }
        if self.unavailable_timeout.is_zero() {
            return Err(Error::invalid(
                "unavailable_timeout",
                "must be greater than zero",
            ));
        }
        if self.release_timeout.is_zero() {
            return Err(Error::invalid(
                "release_timeout",
                "must be greater than zero",
            ));
        }
        Ok(lease)
    }
}
