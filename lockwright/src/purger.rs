//! A loop that purges expired lock groups at an interval until told to stop.

use std::time::Duration;

use lockwright_engine::{Error, LockStore};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Client;

/// What a purger did while it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PurgerReport {
    /// Purge calls made.
    pub runs: u64,
    /// Locks removed, including those a failed purge reported removed.
    pub removed: u64,
    /// Purge calls that failed.
    pub failures: u64,
    /// The message of the last failure, with its causes.
    pub last_error: Option<String>,
}

/// Calls [`Client::purge`] every `interval` until stopped. Failures are logged, counted
/// and retried at the next tick; they never end the loop.
///
#[cfg_attr(feature = "mem", doc = "```")]
#[cfg_attr(not(feature = "mem"), doc = "```ignore")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockwright::Error> {
/// use std::time::Duration;
/// use lockwright::{Client, MemStore, Purger};
///
/// let client = Client::new(MemStore::new());
/// let purger = Purger::new(client, Duration::from_secs(30))?.spawn();
/// // ... serve ...
/// let report = purger.stop().await;
/// println!("{} purge runs removed {} locks", report.runs, report.removed);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Purger<S> {
    client: Client<S>,
    interval: Duration,
}

impl<S: LockStore> Purger<S> {
    /// A purger for `client` that runs every `interval`.
    ///
    /// # Errors
    /// `InvalidArgument` naming `interval` when zero.
    pub fn new(client: Client<S>, interval: Duration) -> Result<Self, Error> {
        if interval.is_zero() {
            return Err(Error::invalid("interval", "must be greater than zero"));
        }
        Ok(Purger { client, interval })
    }

    /// Runs until `stop` is cancelled: purges at once, then every interval. Returns what it
    /// did.
    pub async fn run(self, stop: CancellationToken) -> PurgerReport {
        let mut report = PurgerReport::default();
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            report.runs += 1;
            match self.client.purge().await {
                Ok(removed) => {
                    report.removed += removed.len() as u64;
                    if !removed.is_empty() {
                        tracing::info!(removed = removed.len(), "purged expired locks");
                    }
                }
                Err(err) => {
                    match &err {
                        Error::PurgeIncomplete { removed, .. } => {
                            report.removed += removed.len() as u64;
                        }
                        // Everything readable was purged; the rest waits for a repair.
                        Error::Skipped { done, .. } => report.removed += done.len() as u64,
                        _ => {}
                    }
                    report.failures += 1;
                    let message = error_chain(&err);
                    tracing::warn!(error = %message, "purge failed; retrying at the next tick");
                    report.last_error = Some(message);
                }
            }
        }
        report
    }

    /// Runs on the current tokio runtime until [`PurgerHandle::stop`], or until the handle
    /// is dropped.
    #[must_use = "dropping the handle stops the purger"]
    pub fn spawn(self) -> PurgerHandle {
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone()));
        PurgerHandle { stop, task }
    }
}

/// A running purger. Dropping it stops the purger (after the purge in flight, if any).
#[derive(Debug)]
#[must_use = "dropping the handle stops the purger"]
pub struct PurgerHandle {
    stop: CancellationToken,
    task: JoinHandle<PurgerReport>,
}

impl PurgerHandle {
    /// Stops the purger (after the purge in flight, if any) and returns its report.
    pub async fn stop(mut self) -> PurgerReport {
        self.stop.cancel();
        match (&mut self.task).await {
            Ok(report) => report,
            // The loop does not panic on its own; a panic in the backend is re-raised here.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => PurgerReport::default(),
        }
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `err` and its causes, joined by ": ".
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let causes = std::iter::successors(Some(err), |e| e.source());
    causes
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
