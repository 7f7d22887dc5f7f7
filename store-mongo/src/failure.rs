//! How a failure of the driver or the server is reported: a short, safe summary.

use std::fmt;

use lockwright_engine::Error;
use lockwright_engine::error::Escaped;
use mongodb::error::{ErrorKind, RETRYABLE_WRITE_ERROR, WriteFailure};

/// What a failure to reach any server is called.
const NO_SERVER: &str = "no server available";

/// The longest message kept from the driver or the server, in characters.
const MAX_MESSAGE: usize = 300;

/// A failure of MongoDB (the server or the driver), as the source of a
/// [`Error::Backend`]: what failed, the server's error code and code name, the error's
/// labels and a short message. Whether the write may have been applied is the error's
/// `outcome`.
///
/// The driver's own error keeps the server's raw reply, and that can quote the document a
/// write was refused for (a schema validator names the value it rejected: a lock id). That
/// reply is dropped here, so no report of a failure carries it.
///
/// ```
/// # fn f(e: &lockwright_engine::Error) {
/// use std::error::Error as _;
/// use lockwright_store_mongo::MongoFailure;
///
/// if let Some(failure) = e.source().and_then(|s| s.downcast_ref::<MongoFailure>()) {
///     eprintln!("server code {:?} ({:?})", failure.code(), failure.code_name());
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MongoFailure {
    what: &'static str,
    code: Option<i32>,
    code_name: Option<String>,
    labels: Vec<String>,
    message: String,
}

impl MongoFailure {
    /// The summary of a driver error.
    #[must_use]
    pub fn new(e: &mongodb::error::Error) -> Self {
        let (what, code, code_name, message) = match e.kind.as_ref() {
            ErrorKind::Command(c) => (
                "server error",
                Some(c.code),
                Some(c.code_name.clone()),
                c.message.clone(),
            ),
            ErrorKind::Write(WriteFailure::WriteError(w)) => (
                "write error",
                Some(w.code),
                w.code_name.clone(),
                w.message.clone(),
            ),
            ErrorKind::Write(WriteFailure::WriteConcernError(w)) => (
                "write concern error",
                Some(w.code),
                Some(w.code_name.clone()),
                w.message.clone(),
            ),
            ErrorKind::ServerSelection { message, .. } => (NO_SERVER, None, None, message.clone()),
            ErrorKind::Io(io) => ("I/O error", None, None, io.to_string()),
            ErrorKind::Authentication { message, .. } => {
                ("authentication failed", None, None, message.clone())
            }
            ErrorKind::InvalidArgument { message, .. } => {
                ("invalid argument", None, None, message.clone())
            }
            // Anything else in the driver's own words, which never include a server reply.
            other => ("driver error", None, None, other.to_string()),
        };
        let mut labels: Vec<String> = e.labels().iter().cloned().collect();
        labels.sort();
        MongoFailure {
            what,
            code,
            code_name: code_name.filter(|n| !n.is_empty()),
            labels,
            message: shorten(&message),
        }
    }

    /// The server's error code, when the server answered with one.
    #[must_use]
    pub fn code(&self) -> Option<i32> {
        self.code
    }

    /// The server's name for the code (`DocumentValidationFailure`, `NotWritablePrimary`).
    #[must_use]
    pub fn code_name(&self) -> Option<&str> {
        self.code_name.as_deref()
    }

    /// The error's labels (`RetryableWriteError`, `TransientTransactionError`), sorted.
    #[must_use]
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Whether no server could be reached at all (server selection timed out): the
    /// deployment is down or the connection string names the wrong hosts.
    #[must_use]
    pub fn no_server(&self) -> bool {
        self.what == NO_SERVER
    }
}

impl fmt::Display for MongoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)?;
        match (self.code, &self.code_name) {
            (Some(code), Some(name)) => write!(f, " {code} ({name})")?,
            (Some(code), None) => write!(f, " {code}")?,
            _ => {}
        }
        write!(f, ": {}", Escaped(&self.message))?;
        if !self.labels.is_empty() {
            write!(f, " [labels: {}]", self.labels.join(", "))?;
        }
        Ok(())
    }
}

impl std::error::Error for MongoFailure {}

/// At most [`MAX_MESSAGE`] characters of `message`.
fn shorten(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message.to_owned(),
    }
}

/// A `Backend` error for `operation` failed by the driver error `e`, which wrote nothing
/// (the server refused to run it, it was never sent, or it only read).
pub(crate) fn backend(operation: &'static str, e: &mongodb::error::Error) -> Error {
    Error::not_applied(operation, MongoFailure::new(e))
}

/// As [`backend`], for a write that may have been applied ([`Outcome::Unknown`]).
///
/// [`Outcome::Unknown`]: lockwright_engine::Outcome::Unknown
pub(crate) fn unknown(operation: &'static str, e: &mongodb::error::Error) -> Error {
    Error::backend(operation, MongoFailure::new(e))
}

/// The error for a failed write: [`unknown`] if it may have been applied, else [`backend`].
pub(crate) fn write_failed(operation: &'static str, e: &mongodb::error::Error) -> Error {
    if outcome_unknown(e) {
        unknown(operation, e)
    } else {
        backend(operation, e)
    }
}

/// The server's error codes of a write that may be sent again (the retryable writes
/// specification's list: a primary stepping down or shutting down, a network failure
/// between members, a timeout of an exceeded time limit on the server). The server labels
/// them `RetryableWriteError` only on a retryable write (one with a transaction number),
/// which the one-lock commands sent with `runCommand` are not (see `command`), so they are
/// told by their codes.
const RETRYABLE_WRITE_CODES: [i32; 12] = [
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
];

/// Whether the server answered `e` with a code of [`RETRYABLE_WRITE_CODES`], as a command
/// error or as a write concern error.
fn retryable_code(e: &mongodb::error::Error) -> bool {
    let code = match e.kind.as_ref() {
        ErrorKind::Command(c) => c.code,
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => w.code,
        _ => return false,
    };
    RETRYABLE_WRITE_CODES.contains(&code)
}

/// Whether a failed write may have been applied: anything but an error the server
/// answered for a command it did not run.
pub(crate) fn outcome_unknown(e: &mongodb::error::Error) -> bool {
    match e.kind.as_ref() {
        ErrorKind::Command(_) | ErrorKind::Write(WriteFailure::WriteError(_)) => {
            e.contains_label(RETRYABLE_WRITE_ERROR) || retryable_code(e)
        }
        ErrorKind::ServerSelection { .. }
        | ErrorKind::InvalidArgument { .. }
        | ErrorKind::Authentication { .. }
        | ErrorKind::BsonSerialization(_) => false,
        _ => true,
    }
}

/// Whether a failed single write may be sent again: the driver or the server says so (by
/// label, or for a command sent without a transaction number, by its code), or the
/// connection broke.
pub(crate) fn retryable(e: &mongodb::error::Error) -> bool {
    e.contains_label(RETRYABLE_WRITE_ERROR)
        || retryable_code(e)
        || matches!(
            e.kind.as_ref(),
            ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. }
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_and_control_characters_escaped() {
        let io = std::io::Error::other(format!("a\nb{}", "x".repeat(1_000)));
        let failure = MongoFailure::new(&mongodb::error::Error::from(io));
        let shown = failure.to_string();
        assert!(shown.starts_with("I/O error: a\\nb"), "{shown}");
        assert!(shown.chars().count() < MAX_MESSAGE + 40, "{shown}");
        assert_eq!(failure.code(), None);
    }
}
