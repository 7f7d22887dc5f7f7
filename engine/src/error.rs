//! The one error type of lock operations, shared by the engine, every store and the client.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::invalid::InvalidArgument;
pub use crate::names::Escaped;
use crate::names::Resource;
use crate::status::{LockStatus, Queued};

/// The result of lock operations: `Err` is this crate's [`Error`] unless `E` says otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error from the outside world (a driver, a socket), kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a lock operation did not succeed.
///
/// Refusals that follow from the lock rules (`AlreadyLocked`, `LockNotFound`,
/// `NotRenewable`) are distinct from bad input (`InvalidArgument`), from the `Locker`'s own
/// ends (`Shutdown`, `Timeout`, `StaleGrant`, `NoReply`) and from failures of the backend
/// (`Backend`, `Malformed`, `Skipped`, `PurgeIncomplete`, `Misconfigured`); a transport
/// failure is never reported as "not found". Each variant says when it happens and whether
/// retrying can help; [`Error::may_have_applied`] says whether a failed write may still
/// have taken effect.
///
/// Neither `Display` nor `Debug` shows a lock id (they are secrets: [`LockId`](crate::LockId)
/// prints a short tag), and names read from the store are shown with control characters
/// escaped, so a resource name cannot forge a log line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument broke a documented bound (an empty or too long name, a zero or huge TTL,
    /// a zero limit, a bad configuration value); `field` names it. Nothing was sent to the
    /// store. Retrying the same call cannot help: fix the argument.
    #[error("invalid argument `{field}`: {reason}")]
    InvalidArgument {
        /// The offending argument or field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The resource holds a lock (live, or expired but inside the takeover grace) that
    /// conflicts with the request (an exclusive lock, or shared locks up to the limit), or a
    /// waiter that is ahead of it in the resource's queue. No lock was written (a fair
    /// request took or refreshed its place in the queue). Retrying helps once the holders release or their locks are
    /// abandoned (the `Locker`'s `acquire` waits for that).
    #[error("resource `{resource}` is already locked")]
    AlreadyLocked {
        /// The resource that was asked for.
        resource: Resource,
        /// How long after the store decided the rule would allow the request, should no
        /// lock in the way be renewed or released (they are abandoned by then): the earliest
        /// sensible instant to ask again. `None` when a lock without a TTL is in the way, or
        /// the store cannot tell.
        retry_in: Option<std::time::Duration>,
        /// For a fair request: its place in the resource's queue, which the refusal took or
        /// kept: how many live waiters ahead of it it must let go first, as of which grant
        /// (see `lockwright_engine::queue`). `None` for a request that is not fair, or when
        /// the store cannot tell.
        queued: Option<Queued>,
    },
    /// The lock id holds no lock: it was released, purged, taken over after it expired, or
    /// never granted. Retrying cannot help: the locks are gone.
    #[error("no lock is held under this lock id")]
    LockNotFound,
    /// At least one lock of the group is past its takeover grace, or within the renew margin
    /// of its end; nothing was renewed where the backend is atomic. Retrying cannot help:
    /// take the locks again.
    #[error("{} lock(s) of the group are expired or within the renew margin", locks.len())]
    NotRenewable {
        /// The locks that could not be renewed, as they were.
        locks: Vec<LockStatus>,
    },
    /// A `Locker` was shut down before or while this call ran: it takes no new work and
    /// renews nothing. Retrying on that locker cannot help; make a new one.
    #[error("the locker has been shut down")]
    Shutdown,
    /// A `Locker`'s `acquire_until` reached its deadline without a grant: the lock stayed
    /// held by others, or the store did not grant it in time. No lock is left behind.
    /// Retrying later may succeed.
    #[error("gave up waiting for resource `{resource}` at the deadline")]
    Timeout {
        /// The resource that was asked for.
        resource: Resource,
    },
    /// A `Locker`'s grant arrived after the lock would have stopped being trusted (the store
    /// took longer than the TTL minus the drift margin to answer): it was not handed out,
    /// and it is being released. Retrying may succeed (a waiting acquire asks again itself).
    #[error(
        "the grant of resource `{resource}` arrived too late to be trusted (after the TTL minus \
         the drift margin); it is being released"
    )]
    StaleGrant {
        /// The resource that was asked for.
        resource: Resource,
    },
    /// A `Locker`'s request got no reply by its deadline (for a lock request or a renewal,
    /// the instant the lock would stop being trusted: the TTL minus the drift margin after
    /// it was sent), so its outcome is unknown; whatever it may have granted is being
    /// released. Retrying may succeed (a waiting acquire asks again itself).
    #[error("{operation}: no reply from the store in time; its outcome is unknown")]
    NoReply {
        /// The operation that got no reply.
        operation: &'static str,
    },
    /// A stored document does not follow the schema (another client wrote it, or it was
    /// edited by hand); the operation left it untouched. Retrying cannot help until the
    /// document is repaired or removed.
    #[error(
        "stored document for resource `{}` is malformed at `{}`: {}",
        Escaped(resource),
        Escaped(field),
        Escaped(reason)
    )]
    Malformed {
        /// The resource named by the document (or a placeholder when even that is unreadable).
        resource: String,
        /// The dotted path of the bad field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend is set up in a way that would make locking unsafe or impossible (no
    /// unique index, a standalone server, a write concern below majority, an illegal
    /// collection name); `reason` says how to fix it. Retrying cannot help until it is fixed.
    #[error("backend misconfigured: {reason}")]
    Misconfigured {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The backend failed (unreachable server, timeout, server error). The source says why,
    /// as the server's error code, code name and a short message, never its raw reply;
    /// `outcome` says whether a write may still have been applied. Retrying may help (the
    /// `Locker` retries renewals and releases itself).
    #[error("{operation} failed in the backend{}", match outcome {
        Outcome::NotApplied => "",
        Outcome::Unknown => " (its outcome is unknown: it may have been applied)",
    })]
    Backend {
        /// The lock operation that was running.
        operation: &'static str,
        /// Whether the write may have been applied.
        outcome: Outcome,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
    /// Some stored documents could not be decided on and were left exactly as they were;
    /// the operation completed on every other document. `done` is what it did there
    /// (the locks found by `status`, removed by `purge` or released by `unlock`, in that
    /// operation's order) and `skipped` names each document left alone. Retrying does not
    /// help until the documents are repaired or removed by hand.
    #[error(
        "{} malformed stored document(s) left untouched ({}); the operation completed on the \
         others ({} lock(s))",
        skipped.len(), SkippedList(skipped), done.len()
    )]
    Skipped {
        /// What the operation did on the readable documents.
        done: Vec<LockStatus>,
        /// The documents it left alone, and why.
        skipped: Vec<MalformedDocument>,
    },
    /// A fenced write to the user's own collection (`FencedCollection`, MongoDB only) was
    /// refused, and nothing was written: the document it would change was last written under
    /// a fence this one may not overtake, a higher fence of the same resource (this holder's
    /// lock was taken over, and its successor has written) or a fence of another resource
    /// (fences of different resources cannot be compared). Retrying cannot help.
    #[error(
        "fenced write refused: the document was written under fence {seen_fence} of `{}`, \
         which fence {fence} of `{resource}` may not overtake",
        Escaped(seen_resource)
    )]
    Fenced {
        /// The resource whose fence the write carried.
        resource: Resource,
        /// The fence the write carried.
        fence: u64,
        /// The resource named by the document's fence field.
        seen_resource: String,
        /// The fence in the document's fence field.
        seen_fence: u64,
    },
    /// Purge removed some locks and then failed; `removed` lists what is gone and `source`
    /// says why it stopped. Retrying (the next purge) removes the rest.
    #[error("purge failed after removing {} lock(s)", removed.len())]
    PurgeIncomplete {
        /// Everything this purge removed before the failure.
        removed: Vec<LockStatus>,
        /// The failure.
        #[source]
        source: Box<Error>,
    },
}

/// Whether a failed operation may have been applied by the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// Nothing was written: the backend answered that it did not run the operation, or it
    /// was never sent (no server could be selected), or it only reads.
    NotApplied,
    /// The backend may have applied it (the connection broke after it was sent, say): read
    /// the locks back, or release the lock id, to be sure.
    Unknown,
}

/// A stored document an operation could not decide on, named by resource and field.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MalformedDocument {
    /// The resource the document names (or, when even that is unreadable, how to find the
    /// document, such as its `_id`).
    pub resource: String,
    /// The dotted path of the bad field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for MalformedDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resource `{}` at `{}`: {}",
            Escaped(&self.resource),
            Escaped(&self.field),
            Escaped(&self.reason)
        )
    }
}

impl From<InvalidArgument> for Error {
    fn from(InvalidArgument { field, reason }: InvalidArgument) -> Self {
        Error::InvalidArgument { field, reason }
    }
}

impl From<MalformedDocument> for Error {
    fn from(m: MalformedDocument) -> Self {
        Error::Malformed {
            resource: m.resource,
            field: m.field,
            reason: m.reason,
        }
    }
}

/// At most three skipped documents, then a count of the rest.
struct SkippedList<'a>(&'a [MalformedDocument]);

impl fmt::Display for SkippedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.0.iter().take(3).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{m}")?;
        }
        if self.0.len() > 3 {
            write!(f, "; and {} more", self.0.len() - 3)?;
        }
        Ok(())
    }
}

impl Error {
    /// An `InvalidArgument` error.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// A `Backend` error for `operation` with `source`, whose outcome is unknown: use it
    /// when a write may have been applied, or when it is not known whether it was.
    pub fn backend(operation: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            operation,
            outcome: Outcome::Unknown,
            source: source.into(),
        }
    }

    /// A `Backend` error for `operation` with `source` that certainly wrote nothing (the
    /// backend refused to run it, or it was never sent, or it only reads).
    pub fn not_applied(operation: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            operation,
            outcome: Outcome::NotApplied,
            source: source.into(),
        }
    }

    /// Whether the failed operation may still have been applied by the store: `true` for a
    /// `Backend` error whose outcome is unknown and for the failures that do not say
    /// (`Malformed`, `Misconfigured`, `Skipped`, `PurgeIncomplete`), and for the `Locker`'s
    /// `StaleGrant` and `NoReply` (it releases what they may have granted itself); `false`
    /// for a refusal by the rules, a bad argument, `Shutdown`, `Timeout` and a `Backend`
    /// error that wrote nothing. After a lock request that may have been applied, the
    /// `Locker` releases its lock id; after one that was not, it sends nothing more.
    #[must_use]
    pub fn may_have_applied(&self) -> bool {
        match self {
            Error::Backend { outcome, .. } => *outcome == Outcome::Unknown,
            Error::InvalidArgument { .. }
            | Error::AlreadyLocked { .. }
            | Error::LockNotFound
            | Error::NotRenewable { .. }
            | Error::Shutdown
            | Error::Timeout { .. }
            | Error::Fenced { .. } => false,
            Error::StaleGrant { .. }
            | Error::NoReply { .. }
            | Error::Malformed { .. }
            | Error::Misconfigured { .. }
            | Error::Skipped { .. }
            | Error::PurgeIncomplete { .. } => true,
        }
    }
}
