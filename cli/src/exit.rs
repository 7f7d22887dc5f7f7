//! Exit codes, and the one-line error every failure becomes.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | failure: `unlock` found no lock under the lock id, a stored lock is malformed |
//! | 2 | usage error (clap's code): a bad flag, duration or argument |
//! | 69 | MongoDB unreachable or failing (`EX_UNAVAILABLE`) |
//! | 75 | the lock is held and `run` does not wait, or `--wait-until` gave up (`EX_TEMPFAIL`) |
//! | 76 | `run`: the lock was lost while CMD ran, and CMD was terminated |
//! | 78 | the deployment is misconfigured: no unique index, not a replica set (`EX_CONFIG`) |
//! | 126, 127 | `run`: CMD could not be executed, or was not found |
//! | N, 128+S | `run`: CMD's own exit code, or 128 + the signal that killed it |

use lockwright::Error;

/// Success.
pub const OK: u8 = 0;
/// A failure with no code of its own.
pub const FAILURE: u8 = 1;
/// A usage error (clap exits with the same code).
pub const USAGE: u8 = 2;
/// MongoDB is unreachable or failing.
pub const UNAVAILABLE: u8 = 69;
/// The lock is held (no `--wait`), or `--wait-until` gave up.
pub const HELD: u8 = 75;
/// The lock was lost while CMD ran.
pub const LOST: u8 = 76;
/// The deployment is misconfigured.
pub const CONFIG: u8 = 78;
/// CMD exists but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found.
pub const NOT_FOUND: u8 = 127;

/// A failure: the exit code and the one line printed after `lockwright: `.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub code: u8,
    /// The message, one line.
    pub message: String,
}

impl CliError {
    /// A failure with `code` and `message`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }

    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }
}

impl From<Error> for CliError {
    fn from(err: Error) -> Self {
        let code = code_of(&err);
        let mut message = chain(&err);
        if code == UNAVAILABLE && unreachable(&err) {
            message =
                format!("cannot reach the MongoDB server (check --uri/LOCKWRIGHT_URI): {message}");
        }
        if matches!(err, Error::Misconfigured { .. }) {
            message.push_str(" (`lockwright doctor --fix` creates the index)");
        }
        CliError::new(code, message)
    }
}

/// The exit code for a library error.
pub fn code_of(err: &Error) -> u8 {
    match err {
        Error::InvalidArgument { .. } => USAGE,
        Error::AlreadyLocked { .. } | Error::Timeout { .. } => HELD,
        Error::Backend { .. }
        | Error::PurgeIncomplete { .. }
        | Error::StaleGrant { .. }
        | Error::NoReply { .. } => UNAVAILABLE,
        Error::Misconfigured { .. } => CONFIG,
        _ => FAILURE,
    }
}

/// `err` and its causes joined by ": ", on one line (lock ids never appear in them).
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    for text in std::iter::successors(Some(err), |e| e.source()).map(ToString::to_string) {
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out = format!("{out}: {text}");
        }
    }
    one_line(&out)
}

/// `s` with every line break and control character replaced, so it prints as one line.
pub fn one_line(s: &str) -> String {
    lockwright_engine::error::Escaped(s).to_string()
}

/// Whether the failure is the driver finding no server to talk to.
fn unreachable(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(s) = source {
        if let Some(e) = s.downcast_ref::<lockwright::store_mongo::MongoFailure>() {
            return e.no_server();
        }
        source = s.source();
    }
    false
}
