//! A lock id is a secret: it must not appear in the `Debug` or `Display` of any outcome of
//! the operations a user runs (errors included, as `main() -> Result<(), Error>` prints
//! them), nor in what the library logs through `tracing`.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright::{
    Client, Filter, LockDetails, LockId, LockOptions, Locker, LockerConfig, ManualClock, MemStore,
    Timestamp, generate_lock_id,
};

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Both renderings of an outcome.
fn shown<T: std::fmt::Debug, E: std::fmt::Debug + std::fmt::Display>(
    out: &mut Vec<String>,
    result: &Result<T, E>,
) {
    match result {
        Ok(v) => out.push(format!("{v:?}")),
        Err(e) => out.push(format!("{e:?} / {e}")),
    }
}

#[tokio::test(start_paused = true)]
async fn no_lock_id_in_outcomes_errors_or_traces() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
    let client = Client::new(MemStore::with_clock(Arc::clone(&clock)));
    let ttl = LockDetails::new().ttl(Duration::from_secs(2)).owner("me");
    let mut secrets: Vec<LockId> = Vec::new();
    let mut out = Vec::new();

    let id = generate_lock_id();
    secrets.push(id.clone());
    let held = client.xlock("r", &id, &ttl).await;
    shown(&mut out, &held);
    let held = held.unwrap();
    let other = generate_lock_id();
    secrets.push(other.clone());
    shown(&mut out, &client.xlock("r", &other, &ttl).await); // AlreadyLocked
    shown(&mut out, &client.slock("s", &id, &ttl, Some(1)).await);
    shown(&mut out, &client.slock("s", &other, &ttl, Some(1)).await); // full
    // Within the 1 s renew margin once 1.5 s have passed: NotRenewable lists the locks.
    clock.advance(Duration::from_millis(1_500));
    shown(&mut out, &client.renew(&id, Duration::from_secs(5)).await);
    shown(
        &mut out,
        &client.renew_one(&held, Duration::from_secs(5)).await,
    );
    shown(
        &mut out,
        &client.renew(&other, Duration::from_secs(5)).await,
    ); // LockNotFound
    shown(&mut out, &client.status(&Filter::new()).await);
    shown(
        &mut out,
        &client.status(&Filter::new().lock_id(id.as_str())).await,
    );
    shown(&mut out, &client.unlock_one(&held).await);
    shown(&mut out, &client.unlock(&id).await);
    shown(&mut out, &client.purge().await);

    let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let guard = locker
        .acquire("job", &LockOptions::exclusive(Duration::from_secs(5)))
        .await
        .unwrap();
    secrets.push(guard.lock_id().clone());
    out.push(format!("{guard:?} {:?}", guard.status()));
    let refused = locker
        .try_acquire("job", &LockOptions::exclusive(Duration::from_secs(5)))
        .await;
    shown(&mut out, &refused.map(|g| g.fence()));
    tokio::time::sleep(Duration::from_secs(12)).await; // renewals
    shown(&mut out, &guard.release().await);
    out.push(format!("{locker:?} {:?}", locker.stats()));

    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("lock acquired"),
        "the log was captured: {logged}"
    );
    for secret in &secrets {
        for text in out.iter().chain(std::iter::once(&logged)) {
            assert!(
                !text.contains(secret.as_str()),
                "a lock id appears in: {text}"
            );
        }
    }
    assert!(
        out.iter().any(|t| t.contains("NotRenewable"))
            && out.iter().any(|t| t.contains("LockId(#")),
        "the outcomes that carry lock ids were rendered: {out:?}"
    );
}
