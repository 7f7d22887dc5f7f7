//! The termination signals lockwright catches: SIGINT, SIGTERM and SIGHUP.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{CliError, FAILURE};

/// Catches SIGINT, SIGTERM and SIGHUP from creation on (their default action, ending the
/// process, no longer applies).
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn catch() -> Result<Self, CliError> {
        let install = |kind| {
            signal(kind).map_err(|e| CliError::new(FAILURE, format!("cannot catch signals: {e}")))
        };
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The next signal caught.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// The exit code of a process ended by `signal`: 128 + its number.
pub fn exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(FAILURE)
}
