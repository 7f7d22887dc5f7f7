//! Where the in-memory store gets `now`.

use std::time::SystemTime;

use lockwright_engine::{Clock, Timestamp};

use crate::sync::{AtomicU64, Ordering};

/// The system wall clock, made monotonic: it never reports an instant earlier than one it
/// reported before, so a step of the system clock backwards cannot reorder grants or break
/// fences.
#[derive(Debug, Default)]
pub struct SystemClock {
    last: AtomicU64,
}

impl SystemClock {
    /// A new system clock.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Before the Unix epoch only on a badly broken host; treat it as the epoch.
        let wall = Timestamp::from_system_time(SystemTime::now()).unwrap_or(Timestamp::EPOCH);
        let prev = self.last.fetch_max(wall.as_millis(), Ordering::SeqCst);
        Timestamp::from_millis(prev.max(wall.as_millis()))
    }
}
