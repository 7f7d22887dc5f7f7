//! The one error type of lock operations, shared by the engine, every store and the client.

use std::fmt;

use serde::{Deserialize, Serialize};

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
            self.resource, self.field, self.reason
        )
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

    /// A `Backend` error for `operation` with `source`.
    pub fn backend(operation: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            operation,
            source: source.into(),
        }
    }
}
