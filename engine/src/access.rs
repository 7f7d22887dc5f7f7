//! What a lock grants: exclusive or shared access ([`Access`], with the limit of a shared
//! one), and the kind of a lock a store holds ([`Mode`]).

use std::fmt;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::invalid::InvalidArgument;

/// Exclusive or shared: the kind of a lock a store holds, or of a place in its queue (what
/// a status reports). A request says more: its [`Access`].
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
    pub const fn get(self) -> u32 {
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

/// What a request asks for: an exclusive lock, or a shared one with an optional limit.
///
/// The one type for "how to lock" in every API: [`LockOptions`](crate::LockOptions),
/// [`LockRequest`](crate::LockRequest) and the Locker's asks all carry it. A shared limit
/// is a [`SharedLimit`], so a limit of zero cannot be built. A lock the store holds records
/// only its [`Mode`] (the limit belongs to each request, not to the lock).
///
/// ```
/// use lockwright_engine::{Access, Mode, SharedLimit};
///
/// let five = Access::shared(Some(5))?;
/// assert_eq!(five, Access::Shared(Some(SharedLimit::new(5)?)));
/// assert_eq!(five.mode(), Mode::Shared);
/// assert!(Access::shared(Some(0)).is_err());
/// assert_eq!(Access::default(), Access::Exclusive);
/// # Ok::<(), lockwright_engine::InvalidArgument>(())
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// One holder, and no shared holders beside it.
    #[default]
    Exclusive,
    /// One of any number of shared holders, or of at most `limit` (counted when the request
    /// is decided), and no exclusive holder.
    Shared(Option<SharedLimit>),
}

impl Access {
    /// Shared access with at most `limit` holders (`None`: no limit).
    ///
    /// # Errors
    /// `InvalidArgument` naming `limit` for `Some(0)`.
    pub fn shared(limit: Option<u32>) -> Result<Self, InvalidArgument> {
        Ok(Access::Shared(limit.map(SharedLimit::new).transpose()?))
    }

    /// The kind of lock it grants.
    #[must_use]
    pub const fn mode(self) -> Mode {
        match self {
            Access::Exclusive => Mode::Exclusive,
            Access::Shared(_) => Mode::Shared,
        }
    }

    /// The operation's name, as the API and metrics say it: `xlock` or `slock`.
    #[must_use]
    pub const fn operation(self) -> &'static str {
        match self {
            Access::Exclusive => "xlock",
            Access::Shared(_) => "slock",
        }
    }
}
