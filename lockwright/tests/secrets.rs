//! A lock id is a secret: it must not appear in the `Debug` or `Display` of any outcome of
//! the operations a user runs (errors included, as `main() -> Result<(), Error>` prints
//! them), nor in what the library logs through `tracing`.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use lockwright::Access;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "mem")]
use lockwright::MemStore;
#[cfg(feature = "mongo")]
use lockwright::store_mongo::test_support;
use lockwright::{
    Client, Error, Filter, LockId, LockOptions, LockStore, Locker, LockerConfig, ManualClock,
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

/// Both renderings of an outcome, an error's whole chain of sources included.
fn shown<T: std::fmt::Debug>(out: &mut Vec<String>, result: &Result<T, Error>) {
    match result {
        Ok(v) => out.push(format!("{v:?}")),
        Err(e) => out.push(chain(e)),
    }
}

/// `Display` and `Debug` of an error and of every source under it.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{e} / {e:?}");
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(" / caused by: {s} / {s:?}"));
        source = s.source();
    }
    text
}

/// A subscriber that keeps everything logged at any level, as text.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    (
        captured.clone(),
        tracing::subscriber::set_default(subscriber),
    )
}

/// Fails when any lock id of `secrets` appears in `out` or in the captured log, as text or
/// as the hex of its bytes (the driver's dumps of raw server replies are hex).
fn assert_no_secret(secrets: &[LockId], out: &[String], captured: &Captured) {
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for text in out.iter().chain(std::iter::once(&logged)) {
        assert!(!text.contains("\nINFO"), "a forged line: {text}");
    }
    for secret in secrets {
        let hex: String = secret
            .as_str()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        for text in out.iter().chain(std::iter::once(&logged)) {
            assert!(
                !text.contains(secret.as_str()) && !text.to_lowercase().contains(&hex),
                "a lock id appears in: {text}"
            );
        }
    }
}

/// Every public operation, its outcomes rendered into `out`; the lock ids it used are
/// pushed to `secrets`. `clock` is the store's; `renewals` is how long to let a `Locker`
/// renew.
async fn exercise<S: LockStore>(
    client: &Client<S>,
    clock: &ManualClock,
    renewals: Duration,
    out: &mut Vec<String>,
    secrets: &mut Vec<LockId>,
) {
    let ttl = LockOptions::new().ttl(Duration::from_secs(2)).owner("me");
    let id = generate_lock_id();
    secrets.push(id.clone());
    let held = client.lock("r", &id, &ttl).await;
    shown(out, &held);
    let held = held.unwrap();
    let other = generate_lock_id();
    secrets.push(other.clone());
    shown(out, &client.lock("r", &other, &ttl).await); // AlreadyLocked
    shown(
        out,
        &client
            .lock(
                "s",
                &id,
                &ttl.clone().access(Access::shared(Some(1)).unwrap()),
            )
            .await,
    );
    shown(
        out,
        &client
            .lock(
                "s",
                &other,
                &ttl.clone().access(Access::shared(Some(1)).unwrap()),
            )
            .await,
    ); // full
    // Within the 1 s renew margin of the end of the takeover grace once 1.5 s more have
    // passed: NotRenewable lists the locks.
    clock.advance(Duration::from_millis(1_500) + lockwright::DEFAULT_TAKEOVER_GRACE);
    shown(out, &client.renew(&id, Duration::from_secs(5)).await);
    shown(out, &client.renew_one(&held, Duration::from_secs(5)).await);
    shown(out, &client.renew(&other, Duration::from_secs(5)).await); // LockNotFound
    shown(out, &client.status(&Filter::new()).await);
    shown(
        out,
        &client.status(&Filter::new().lock_id(id.as_str())).await,
    );
    shown(out, &client.unlock_one(&held).await);
    shown(out, &client.unlock(&id).await);
    clock.advance(Duration::from_secs(5) + lockwright::DEFAULT_TAKEOVER_GRACE);
    shown(out, &client.purge().await);

    let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(5)).owner("me");
    let guard = locker.acquire("job", &options).await.unwrap();
    secrets.push(guard.lock_id().clone());
    out.push(format!("{guard:?} {:?}", guard.status()));
    let refused = locker.try_acquire("job", &options).await;
    shown(out, &refused.map(|g| g.fence()));
    let gave_up = locker
        .acquire_until("job", &options, tokio::time::Instant::now())
        .await;
    shown(out, &gave_up.map(|g| g.fence()));
    tokio::time::sleep(renewals).await;
    shown(out, &guard.release().await);
    out.push(format!("{locker:?} {:?}", locker.stats()));
    // A name with a line break is logged and reported escaped: it cannot forge a line.
    let forged = "job\nINFO lock acquired by mallory";
    let guard = locker.acquire(forged, &options).await.unwrap();
    secrets.push(guard.lock_id().clone());
    shown(
        out,
        &locker
            .try_acquire(forged, &options)
            .await
            .map(|g| g.fence()),
    );
    shown(out, &guard.release().await);
    locker.shutdown();
    shown(
        out,
        &locker.try_acquire("job", &options).await.map(|g| g.fence()),
    );
    assert!(
        out.iter().any(|t| t.contains("NotRenewable"))
            && out.iter().any(|t| t.contains("LockId(#"))
            && out.iter().any(|t| t.contains("Timeout"))
            && out.iter().any(|t| t.contains("Shutdown")),
        "the outcomes that carry lock ids were rendered: {out:?}"
    );
}

#[cfg(feature = "mem")]
#[tokio::test(start_paused = true)]
async fn no_lock_id_in_outcomes_errors_or_traces_mem() {
    let (captured, _default) = capture();
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
    let client = Client::new(MemStore::with_clock(Arc::clone(&clock)));
    let (mut out, mut secrets) = (Vec::new(), Vec::new());
    exercise(
        &client,
        &clock,
        Duration::from_secs(12),
        &mut out,
        &mut secrets,
    )
    .await;
    assert_no_secret(&secrets, &out, &captured);
    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("lock acquired"), "{logged}");
    assert!(
        logged.contains(r"job\nINFO lock acquired by mallory"),
        "the name is logged, escaped: {logged}"
    );
}

#[cfg(feature = "mongo")]
#[tokio::test]
async fn no_lock_id_in_outcomes_errors_or_traces_mongo() {
    let (captured, _default) = capture();
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
    let store = test_support::fresh_store(Some(Arc::clone(&clock))).await;
    let client = Client::new(store);
    let (mut out, mut secrets) = (Vec::new(), Vec::new());
    // A 5 s lease is renewed at about half-time: 3 s see one renewal.
    exercise(
        &client,
        &clock,
        Duration::from_secs(3),
        &mut out,
        &mut secrets,
    )
    .await;
    assert_no_secret(&secrets, &out, &captured);
    test_support::teardown(client.store()).await;
}

/// A server that refuses a write quotes the refused document in its reply (a schema
/// validator's `errInfo` names the value it considered: the lock id). The error reports the
/// server's code, code name and a short message, never the raw reply.
#[cfg(feature = "mongo")]
#[tokio::test]
async fn no_lock_id_in_backend_errors() {
    let (captured, _default) = capture();
    let driver = mongodb::Client::with_options(test_support::options().await).unwrap();
    let db = driver.database(test_support::TEST_DATABASE);
    let name = format!("t_validator_{}", generate_lock_id().as_str());
    db.create_collection(&name)
        .validator(mongodb::bson::doc! { "$jsonSchema": {
            "properties": {
                "exclusive": { "properties": { "lockId": { "bsonType": "string", "pattern": "^never$" } } },
                "shared": { "properties": { "locks": { "items": {
                    "properties": { "lockId": { "bsonType": "string", "pattern": "^never$" } }
                } } } }
            }
        } })
        .await
        .unwrap();
    let store = lockwright::MongoStore::from_collection(db.collection(&name));
    store.create_indexes().await.unwrap();
    let client = Client::new(store);
    let details = LockOptions::new().ttl(Duration::from_secs(30));
    let (mut out, mut secrets) = (Vec::new(), Vec::new());
    let id = generate_lock_id();
    secrets.push(id.clone());
    let refused = client.lock("r", &id, &details).await;
    assert!(
        matches!(&refused, Err(Error::Backend { .. })),
        "the validator refuses the write: {refused:?}"
    );
    let text = chain(refused.as_ref().unwrap_err());
    assert!(
        text.contains("121") && text.contains("DocumentValidationFailure"),
        "{text}"
    );
    out.push(text);
    shown(
        &mut out,
        &client
            .lock("s", &id, &details.clone().access(Access::Shared(None)))
            .await,
    );

    // An unreachable server: the error says so, and names nothing secret either.
    let nowhere = lockwright::MongoStore::connect(
        "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300&connectTimeoutMS=300",
        "db",
        "locks",
    )
    .await
    .unwrap();
    let unreachable = Client::new(nowhere).lock("r", &id, &details).await;
    assert!(
        matches!(&unreachable, Err(Error::Backend { .. })),
        "{unreachable:?}"
    );
    shown(&mut out, &unreachable);
    eprintln!("{out:#?}");
    assert_no_secret(&secrets, &out, &captured);
    test_support::teardown(client.store()).await;
}
