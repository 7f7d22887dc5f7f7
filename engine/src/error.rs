//! The one error type of lock operations, shared by the engine, every store and the client.

use crate::lock::LockStatus;
use crate::names::Resource;

/// A boxed error from the outside world (a driver, a socket), kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a lock operation did not succeed.
///
/// Refusals that follow from the lock rules (`AlreadyLocked`, `LockNotFound`,
/// `NotRenewable`) are distinct from bad input (`InvalidArgument`) and from failures of the
/// backend (`Backend`, `Malformed`, `Misconfigured`); a transport failure is never reported
/// as "not found". Messages never contain lock ids: they are secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument broke a documented bound; `field` names it.
    #[error("invalid argument `{field}`: {reason}")]
    InvalidArgument {
        /// The offending argument or field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The resource holds a live lock that conflicts with the request.
    #[error("resource `{resource}` is already locked")]
    AlreadyLocked {
        /// The resource that was asked for.
        resource: Resource,
    },
    /// The lock id holds no lock.
    #[error("no lock is held under this lock id")]
    LockNotFound,
    /// At least one lock of the group is expired or within the renew margin; nothing was
    /// renewed where the backend is atomic.
    #[error("{} lock(s) of the group are expired or within the renew margin", locks.len())]
    NotRenewable {
        /// The locks that could not be renewed, as they were.
        locks: Vec<LockStatus>,
    },
    /// A stored document does not follow the schema.
    #[error("stored document for resource `{resource}` is malformed at `{field}`: {reason}")]
    Malformed {
        /// The resource named by the document (or a placeholder when even that is unreadable).
        resource: String,
        /// The dotted path of the bad field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend is set up in a way that would make locking unsafe.
    #[error("backend misconfigured: {reason}")]
    Misconfigured {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The backend failed (transport, timeout, server error).
    #[error("{operation} failed in the backend")]
    Backend {
        /// The lock operation that was running.
        operation: &'static str,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
    /// Purge removed some locks and then failed; `removed` lists what is gone.
    #[error("purge failed after removing {} lock(s)", removed.len())]
    PurgeIncomplete {
        /// Everything this purge removed before the failure.
        removed: Vec<LockStatus>,
        /// The failure.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// An `InvalidArgument` error.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// A `Backend` error for `operation` with `source`.
    pub fn backend(operation: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            operation,
            source: source.into(),
        }
    }
}
