//! Retries within [`RETRY_WINDOW`], and the transactions of the group operations.

use std::time::Duration;

use mongodb::ClientSession;
use mongodb::bson::doc;
use mongodb::error::{ErrorKind, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::{ReadConcern, TransactionOptions};
use tokio::time::Instant;

use lockwright_engine::Error;

use crate::{MongoStore, failure};

/// How long after an operation began the store still starts a new attempt of it after a
/// failure that is safe to retry (a transient transaction error, an unknown commit result,
/// a retryable write error such as "not primary" during an election). Each attempt is
/// itself bounded by the driver's server selection timeout (`serverSelectionTimeoutMS`,
/// 30 s unless the URI says otherwise), and each lock operation as a whole by that timeout
/// plus this window, so one against a deployment that is down fails within that bound.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// The pause before another attempt of an operation.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl MongoStore {
    fn transaction_options(&self) -> TransactionOptions {
        TransactionOptions::builder()
            .write_concern(self.write_concern.clone())
            // The latest data on the primary, not the majority snapshot, which may lag a
            // grant already acknowledged to its caller; conflicting writes still abort.
            .read_concern(ReadConcern::local())
            .build()
    }

    /// Runs `body` in a transaction and commits what it returns; a rule's refusal
    /// (`Ok(Err(_))`) aborts it. Transient transaction errors and unknown commit results are
    /// retried within [`RETRY_WINDOW`]; a commit whose result stays unknown is a `Backend`
    /// error saying so.
    pub(crate) async fn transaction<R, C, F>(
        &self,
        op: &'static str,
        mut context: C,
        mut body: F,
    ) -> Result<R, Error>
    where
        R: Send,
        F: for<'b> FnMut(
            &'b mut ClientSession,
            &'b mut C,
        ) -> futures_util::future::BoxFuture<
            'b,
            mongodb::error::Result<Result<R, Error>>,
        >,
    {
        let started = Instant::now();
        let mut session = self
            .client
            .start_session()
            .await
            .map_err(|e| failure::backend(op, &e))?;
        'attempt: loop {
            session
                .start_transaction()
                .with_options(self.transaction_options())
                .await
                .map_err(|e| failure::backend(op, &e))?;
            let value = match body(&mut session, &mut context).await {
                Ok(Ok(value)) => value,
                Ok(Err(refusal)) => {
                    // Nothing was written; the abort only ends the transaction early.
                    let _ = session.abort_transaction().await;
                    return Err(refusal);
                }
                Err(e) if matches!(e.kind.as_ref(), ErrorKind::ServerSelection { .. }) => {
                    // No server could be selected for a whole selection timeout: nothing was
                    // committed, and an abort or another attempt would only wait out another
                    // timeout. Dropping the session ends its transaction.
                    return Err(failure::backend(op, &e));
                }
                Err(e) => {
                    let _ = session.abort_transaction().await;
                    if e.contains_label(TRANSIENT_TRANSACTION_ERROR)
                        && started.elapsed() < RETRY_WINDOW
                    {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue 'attempt;
                    }
                    return Err(failure::backend(op, &e));
                }
            };
            loop {
                match session.commit_transaction().await {
                    Ok(()) => return Ok(value),
                    Err(e) if started.elapsed() >= RETRY_WINDOW => {
                        if !e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) {
                            return Err(failure::backend(op, &e));
                        }
                        // The driver will not abort a transaction whose commit it tried, and
                        // the server would keep it, and the documents it wrote, blocked for
                        // up to a minute: end the session's transaction on the server.
                        self.kill_session(&session).await;
                        return Err(failure::unknown(op, &e));
                    }
                    Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue 'attempt;
                    }
                    Err(e) => return Err(failure::backend(op, &e)),
                }
            }
        }
    }

    /// Best effort: ends `session` on the server (its open transaction is aborted, unless it
    /// committed), so that documents it wrote are not held until the transaction times out.
    async fn kill_session(&self, session: &ClientSession) {
        let id = session.id().clone();
        if let Err(e) = self
            .client
            .database("admin")
            .run_command(doc! { "killSessions": [ id ] })
            .await
        {
            tracing::warn!(error = %e, "could not end a session whose commit result is unknown");
        }
    }
}
