//! Time as the engine sees it: millisecond instants and validated TTLs.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::invalid::InvalidArgument;

/// The longest TTL (and renew margin) accepted: 100 years of 365.25 days.
pub const MAX_TTL: Duration = Duration::from_secs(36_525 * 24 * 60 * 60);

/// An instant in milliseconds since the Unix epoch.
///
/// MongoDB dates have millisecond precision, so every backend works in whole milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The instant `ms` milliseconds after the Unix epoch.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Converts a wall-clock time, truncating to the millisecond.
    ///
    /// # Errors
    /// `InvalidArgument` for times before the Unix epoch.
    pub fn from_system_time(time: SystemTime) -> Result<Self, InvalidArgument> {
        let since = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| InvalidArgument::new("timestamp", "must not be before the Unix epoch"))?;
        let ms = u64::try_from(since.as_millis())
            .map_err(|_| InvalidArgument::new("timestamp", "is too far in the future"))?;
        Ok(Timestamp(ms))
    }

    /// The same instant as a [`SystemTime`].
    #[must_use]
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// `self + d`, saturating at the largest representable instant.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(d)))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// An instant of a client's own monotonic clock, in milliseconds since an epoch its driver
/// chooses (the `Locker`'s start, a simulation's start): the Locker core's time. It is
/// never compared with the store's [`Timestamp`]: the two clocks differ in origin and rate.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LocalMs(pub u64);

impl LocalMs {
    /// The driver's epoch.
    pub const ZERO: LocalMs = LocalMs(0);

    /// The instant `ms` milliseconds after the driver's epoch.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        LocalMs(ms)
    }

    /// Milliseconds since the driver's epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the largest representable instant.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        self.saturating_add_millis(duration_millis(d))
    }

    /// `self + ms` milliseconds, saturating.
    #[must_use]
    pub const fn saturating_add_millis(self, ms: u64) -> Self {
        LocalMs(self.0.saturating_add(ms))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(self, earlier: LocalMs) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for LocalMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "local {}ms", self.0)
    }
}

/// Whole milliseconds of `d`, saturating.
pub(crate) fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A validated time-to-live: at least one millisecond, at most [`MAX_TTL`], whole milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Duration", into = "Duration")]
pub struct Ttl(Duration);

impl Ttl {
    /// Validates a TTL. A sub-millisecond remainder is dropped (stores keep milliseconds).
    ///
    /// # Errors
    /// `InvalidArgument` naming `ttl` when it is under one millisecond or over [`MAX_TTL`].
    pub fn new(ttl: Duration) -> Result<Self, InvalidArgument> {
        Self::validated("ttl", ttl)
    }

    pub(crate) fn validated(field: &'static str, ttl: Duration) -> Result<Self, InvalidArgument> {
        if ttl > MAX_TTL {
            return Err(InvalidArgument::new(field, "must be at most 100 years"));
        }
        let ms = duration_millis(ttl);
        if ms == 0 {
            return Err(InvalidArgument::new(field, "must be at least 1 ms"));
        }
        Ok(Ttl(Duration::from_millis(ms)))
    }

    /// The TTL as a duration (whole milliseconds).
    #[must_use]
    pub fn as_duration(self) -> Duration {
        self.0
    }

    /// The TTL in milliseconds.
    #[must_use]
    pub fn as_millis(self) -> u64 {
        duration_millis(self.0)
    }
}

impl TryFrom<Duration> for Ttl {
    type Error = InvalidArgument;
    fn try_from(d: Duration) -> Result<Self, InvalidArgument> {
        Ttl::new(d)
    }
}

impl From<Ttl> for Duration {
    fn from(t: Ttl) -> Duration {
        t.0
    }
}

/// Validates a renew margin: any duration up to [`MAX_TTL`], truncated to milliseconds.
///
/// # Errors
/// `InvalidArgument` naming `renew_margin` when over [`MAX_TTL`].
pub fn validate_margin(margin: Duration) -> Result<Duration, InvalidArgument> {
    if margin > MAX_TTL {
        return Err(InvalidArgument::new(
            "renew_margin",
            "must be at most 100 years",
        ));
    }
    Ok(Duration::from_millis(duration_millis(margin)))
}

/// Where a store reads `now`: the one clock trait. A store that keeps its own time (the
/// in-memory store's system clock) or replaces the server's in tests (a [`ManualClock`])
/// takes one; the engine itself never reads a clock, it is handed the reading.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        ManualClock::now(self)
    }
}

/// A clock that moves only when told to: the time source for tests and the model.
///
/// Stores accept it in place of their real clock (the in-memory store's clock, MongoDB's
/// `$$NOW`), so one test can drive any backend through expiry boundaries without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock showing `start`.
    #[must_use]
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicU64::new(start.0))
    }

    /// The instant the clock shows.
    #[must_use]
    pub fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }

    /// Moves the clock forward by `d` and returns the new instant.
    pub fn advance(&self, d: Duration) -> Timestamp {
        let ms = duration_millis(d);
        Timestamp(self.0.fetch_add(ms, Ordering::SeqCst).saturating_add(ms))
    }

    /// Sets the clock to `t`, also backwards (tests use this to replay an operation "as of" an
    /// earlier instant, such as a purge that began before a lock was created).
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert!(Ttl::new(Duration::ZERO).is_err());
        assert!(Ttl::new(Duration::from_micros(999)).is_err());
        assert_eq!(
            Ttl::new(Duration::from_micros(1500))
                .map(Ttl::as_millis)
                .ok(),
            Some(1)
        );
        assert!(Ttl::new(MAX_TTL).is_ok());
        assert!(Ttl::new(MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn manual_clock_moves_both_ways() {
        let c = ManualClock::new(Timestamp::from_millis(10));
        assert_eq!(
            c.advance(Duration::from_millis(5)),
            Timestamp::from_millis(15)
        );
        c.set(Timestamp::from_millis(3));
        assert_eq!(c.now(), Timestamp::from_millis(3));
    }
}
