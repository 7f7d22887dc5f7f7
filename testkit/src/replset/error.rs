//! What can go wrong with a replica set fixture.

/// An error of the replica set fixture. Every variant says what was being done; the ones
/// about a mongod that would not start carry the tail of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No mongod binary (or no libfaketime, for a member with a clock offset) was found; the
    /// message says how to install it.
    #[error("{0}")]
    NotFound(String),
    /// A file or process operation failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A mongod exited before it listened, or did not listen in time.
    #[error("{what}\n{log_tail}")]
    Start {
        /// Which member, and what happened.
        what: String,
        /// The last lines of what it logged, indented.
        log_tail: String,
    },
    /// A command to a member, or to the set, failed.
    #[error("{context}: {error}")]
    Command {
        /// The command and the member.
        context: String,
        /// The driver's error.
        error: mongodb::error::Error,
    },
    /// The set did not reach the awaited state in time.
    #[error("{what}: not done after {secs:.1} s (last: {last})")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it was awaited, in seconds.
        secs: f64,
        /// The last state seen.
        last: String,
    },
    /// A signal could not be sent to a member.
    #[error("{context}: {error}")]
    Signal {
        /// The signal and the member.
        context: String,
        /// The operating system's error.
        error: nix::errno::Errno,
    },
    /// A call that does not fit the set as it is (no such member, a member that is already
    /// running, ...).
    #[error("{0}")]
    Usage(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, error: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            error,
        }
    }

    pub(crate) fn command(context: impl Into<String>, error: mongodb::error::Error) -> Self {
        Self::Command {
            context: context.into(),
            error,
        }
    }
}
