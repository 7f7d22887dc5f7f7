//! What a lock grants: exclusive or shared access, and the limit of a shared one.

use std::fmt;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::invalid::InvalidArgument;

/// Exclusive or shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// At most one holder, and no shared holders beside it.
    Exclusive,
    /// Any number of holders (up to a limit the caller gives), and no exclusive holder.
    Shared,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        })
    }
}

/// The most shared locks a resource may hold at once, as asked by one `slock` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct SharedLimit(NonZeroU32);

impl SharedLimit {
    /// Validates a limit.
    ///
    /// # Errors
    /// `InvalidArgument` naming `limit` for zero (use `None` for "unlimited").
    pub fn new(limit: u32) -> Result<Self, InvalidArgument> {
        NonZeroU32::new(limit).map(SharedLimit).ok_or_else(|| {
            InvalidArgument::new("limit", "must be at least 1 (use None for no limit)")
        })
    }

    /// The limit.
    #[must_use]
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl TryFrom<u32> for SharedLimit {
    type Error = InvalidArgument;
    fn try_from(v: u32) -> Result<Self, InvalidArgument> {
        SharedLimit::new(v)
    }
}

impl From<SharedLimit> for u32 {
    fn from(l: SharedLimit) -> u32 {
        l.get()
    }
}
