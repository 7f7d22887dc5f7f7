//! What the client and the `Locker` record through the `metrics` facade, read back exactly
//! from a debugging recorder after scripted scenarios on the in-memory store and tokio's
//! paused clock (so every duration is exact): one where everything goes well, and one where
//! leases are lost (each `cause` of `lockwright_locks_lost_total`) and the store ends a hint
//! subscription; and that no lock id reaches a metric.

#![cfg(feature = "mem")]
// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lockwright::{
    Client, Ended, Error, HintStream, LockOptions, LockStatus, LockStore, Locker, LockerConfig,
    MemStore, Renewal,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// A metric as the test reads it: name and sorted labels.
type Series = (String, Vec<(String, String)>);

/// Runs `scenario` on a current-thread runtime with a paused clock, recording into a
/// recorder of its own; returns every series and its value (counters and gauges as one
/// number, histograms as their samples).
fn recorded(
    scenario: impl AsyncFnOnce() -> Vec<String>,
) -> (BTreeMap<Series, Vec<f64>>, Vec<String>) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let secrets = metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(scenario())
    });
    let mut series = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let values = match value {
            #[allow(clippy::cast_precision_loss)]
            DebugValue::Counter(n) => vec![n as f64],
            DebugValue::Gauge(g) => vec![g.into_inner()],
            DebugValue::Histogram(h) => h.into_iter().map(|v| v.into_inner()).collect(),
        };
        series.insert((key.name().to_owned(), labels), values);
    }
    (series, secrets)
}

fn get<'a>(m: &'a BTreeMap<Series, Vec<f64>>, name: &str, labels: &[(&str, &str)]) -> &'a [f64] {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    m.get(&(name.to_owned(), labels.clone()))
        .unwrap_or_else(|| panic!("no series {name} {labels:?} among {:#?}", m.keys()))
}

/// A waiter that polls once an hour: only the store's hint wakes it, at the release's
/// instant.
fn hint_only() -> LockerConfig {
    let mut config = LockerConfig::default();
    config.initial_backoff = Duration::from_secs(3_600);
    config.max_backoff = Duration::from_secs(3_600);
    config
}

/// The scenario: A holds `job` for 100 ms while B waits, then B for 50 ms (a handover at
/// the release's instant); a lease of 10 s on `renewed` held for 12 s (two renewals); and
/// the client alone: a grant, a refusal, an unlock and a renewal of a lock id that holds
/// nothing. Returns the lock ids the client used.
async fn scenario() -> Vec<String> {
    let client = Client::new(MemStore::new()).with_resource_labels(true);
    let locker = Locker::new(client.clone(), hint_only()).unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(30));
    let a = locker.acquire("job", &options).await.unwrap();
    let waiting = {
        let (locker, options) = (locker.clone(), options.clone());
        tokio::spawn(async move { locker.acquire("job", &options).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.release().await.unwrap();
    let b = waiting.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.release().await.unwrap();

    let short = LockOptions::exclusive(Duration::from_secs(10));
    let renewed = locker.acquire("renewed", &short).await.unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    renewed.release().await.unwrap();

    let (id, other) = (
        lockwright::generate_lock_id(),
        lockwright::generate_lock_id(),
    );
    client
        .lock("direct", &id, &LockOptions::new())
        .await
        .unwrap();
    let refused = client.lock("direct", &other, &LockOptions::new()).await;
    assert!(matches!(refused, Err(Error::AlreadyLocked { .. })));
    client.unlock(&id).await.unwrap();
    let gone = client.renew(&other, Duration::from_secs(1)).await;
    assert!(matches!(gone, Err(Error::LockNotFound)));
    locker.shutdown();
    vec![id.as_str().to_owned(), other.as_str().to_owned()]
}

#[test]
fn a_scripted_scenario_records_exactly_what_happened() {
    let (m, _) = recorded(scenario);
    let ops = "lockwright_operations_total";
    let x = ("mode", "exclusive");
    // The Locker's requests and the client's calls, by outcome.
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "xlock"),
                ("outcome", "ok"),
                ("resource", "job")
            ]
        ),
        [1.0]
    );
    // B's first attempt takes a place; the Locker then subscribes (a waiter listens once it
    // has a place), and the subscription's first `Missed` makes B ask once more, refused
    // again. A's release hands B's place the lock, and its hint says what: B holds it
    // without asking (so `xlock` on `job` was granted once, to A).
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "xlock"),
                ("outcome", "already_locked"),
                ("resource", "job")
            ]
        ),
        [2.0]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "xlock"),
                ("outcome", "ok"),
                ("resource", "direct")
            ]
        ),
        [1.0]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "unlock_one"),
                ("outcome", "ok"),
                ("resource", "renewed")
            ]
        ),
        [1.0]
    );
    // Every round trip timed: three xlocks on `job`, one on `renewed`, two by the client;
    // on the paused clock the in-memory store answers in no time.
    assert_eq!(
        get(
            &m,
            "lockwright_operation_duration_seconds",
            &[("operation", "xlock")]
        ),
        [0.0; 6]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "unlock_one"),
                ("outcome", "ok"),
                ("resource", "job")
            ]
        ),
        [2.0]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "renew_one"),
                ("outcome", "ok"),
                ("resource", "renewed")
            ]
        ),
        [2.0]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[
                ("operation", "xlock"),
                ("outcome", "already_locked"),
                ("resource", "direct")
            ]
        ),
        [1.0]
    );
    assert_eq!(
        get(&m, ops, &[("operation", "unlock"), ("outcome", "ok")]),
        [1.0]
    );
    assert_eq!(
        get(
            &m,
            ops,
            &[("operation", "renew"), ("outcome", "lock_not_found")]
        ),
        [1.0]
    );
    // Acquires: A at once, B after A's 100 ms; held 100 and 50 ms; B granted at the
    // release's instant.
    assert_eq!(
        get(
            &m,
            "lockwright_acquires_total",
            &[x, ("outcome", "granted"), ("resource", "job")]
        ),
        [2.0]
    );
    assert_eq!(
        get(
            &m,
            "lockwright_acquire_wait_seconds",
            &[x, ("resource", "job")]
        ),
        [0.0, 0.1]
    );
    assert_eq!(
        get(&m, "lockwright_hold_seconds", &[x, ("resource", "job")]),
        [0.1, 0.05]
    );
    assert_eq!(
        get(&m, "lockwright_handover_seconds", &[("resource", "job")]),
        [0.0]
    );
    // The 10 s lease: renewed at 5 and 10 s, each confirmed when it fell due.
    assert_eq!(get(&m, "lockwright_renewal_lag_seconds", &[]), [0.0, 0.0]);
    assert_eq!(
        get(&m, "lockwright_hold_seconds", &[x, ("resource", "renewed")]),
        [12.0]
    );
    // Nothing lost, nothing waiting or held at the end.
    assert!(
        !m.keys()
            .any(|(name, _)| name == "lockwright_locks_lost_total")
    );
    assert_eq!(get(&m, "lockwright_waiting_acquires", &[]), [0.0]);
    assert_eq!(get(&m, "lockwright_held_leases", &[]), [0.0]);
    // One subscription, opened for B's wait and kept (its linger is an hour).
    assert_eq!(
        get(&m, "lockwright_hint_streams_total", &[("event", "opened")]),
        [1.0]
    );
    // Hints: the in-memory store tells every subscriber of every change.
    assert!(get(&m, "lockwright_hints_total", &[])[0] >= 1.0);
}

/// The in-memory store, except that its hint subscriptions end after their first hint (the
/// `Missed` every subscription starts with), and its renewals never answer once `renew_hangs`
/// is set: a store that stops sending hints, and one that cannot be reached in time.
struct Failing {
    inner: MemStore,
    renew_hangs: AtomicBool,
}

impl Failing {
    async fn renew_fault(&self) {
        if self.renew_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl lockwright_testkit::Forward for Failing {
    type Inner = MemStore;

    fn inner(&self) -> &MemStore {
        &self.inner
    }

    async fn renew_each(
        &self,
        locks: &[Renewal],
        m: Duration,
    ) -> Result<Vec<Result<LockStatus, Error>>, Error> {
        self.renew_fault().await;
        self.inner.renew_each(locks, m).await
    }

    fn notices(&self) -> Option<&dyn lockwright::Notices> {
        Some(self)
    }
}

/// The inner store's notices, but a hint stream that ends after its first hint.
impl lockwright::Notices for Failing {
    fn hints(&self) -> Option<HintStream> {
        let stream = self.inner.hints()?;
        Some(Box::pin(stream.take(1)))
    }

    fn announce_leaders(&self, election: &lockwright::Resource) {
        self.inner.announce_leaders(election);
    }

    fn leaders(&self) -> Option<lockwright_engine::election::LeaderStream> {
        self.inner.leaders()
    }
}

lockwright_testkit::forward_lock_store!(Failing);

/// The losses: a waiter whose hint subscription the store ends, then gives up after 100 ms;
/// a lease of 10 s on `taken` whose lock is unlocked behind its holder's back (the store
/// refuses its renewal at 5 s); and a lease of 10 s on `unreachable` whose renewals never
/// answer (its validity runs out).
async fn losses() -> Vec<String> {
    let client = Client::new(Failing {
        inner: MemStore::new(),
        renew_hangs: AtomicBool::new(false),
    })
    .with_resource_labels(true);
    let locker = Locker::new(client.clone(), hint_only()).unwrap();
    let options = LockOptions::exclusive(Duration::from_secs(10));

    let held = locker.acquire("job", &options).await.unwrap();
    // Refused, subscribed; the stream's `Missed` makes it ask again (refused), then the
    // stream ends, and the next subscription is an hour away (the waiter's `max_backoff`).
    let waited =
        tokio::time::timeout(Duration::from_millis(100), locker.acquire("job", &options)).await;
    assert!(waited.is_err(), "the lock is held: {waited:?}");
    held.release().await.unwrap();

    let taken = locker.acquire("taken", &options).await.unwrap();
    client.unlock(taken.lock_id()).await.unwrap();
    assert_eq!(taken.lost().await, Ended::Refused);

    let unreachable = locker.acquire("unreachable", &options).await.unwrap();
    client.store().renew_hangs.store(true, Ordering::SeqCst);
    assert_eq!(unreachable.lost().await, Ended::Expired);
    locker.shutdown();
    vec![
        held.lock_id().as_str().to_owned(),
        taken.lock_id().as_str().to_owned(),
        unreachable.lock_id().as_str().to_owned(),
    ]
}

#[test]
fn lost_leases_and_ended_hint_streams_are_recorded_exactly() {
    let (m, _) = recorded(losses);
    let x = ("mode", "exclusive");
    let lost = "lockwright_locks_lost_total";
    assert_eq!(
        get(&m, lost, &[("cause", "refused"), ("resource", "taken")]),
        [1.0]
    );
    assert_eq!(
        get(
            &m,
            lost,
            &[("cause", "expired"), ("resource", "unreachable")]
        ),
        [1.0]
    );
    // Those two, and no other loss (`job` was released).
    assert_eq!(m.keys().filter(|(name, _)| name == lost).count(), 2);
    // Held until the refused renewal at half the TTL; and until the validity ran out.
    assert_eq!(
        get(&m, "lockwright_hold_seconds", &[x, ("resource", "taken")]),
        [5.0]
    );
    assert_eq!(
        get(
            &m,
            "lockwright_hold_seconds",
            &[x, ("resource", "unreachable")]
        ),
        [9.9]
    );
    // One subscription, opened for the waiter and ended by the store; none after it (the
    // waiter gave up within the hour before the next).
    assert_eq!(
        get(&m, "lockwright_hint_streams_total", &[("event", "opened")]),
        [1.0]
    );
    assert_eq!(
        get(&m, "lockwright_hint_streams_total", &[("event", "ended")]),
        [1.0]
    );
    assert_eq!(
        get(
            &m,
            "lockwright_acquires_total",
            &[x, ("outcome", "cancelled"), ("resource", "job")]
        ),
        [1.0]
    );
    assert_eq!(get(&m, "lockwright_held_leases", &[]), [0.0]);
    assert_eq!(get(&m, "lockwright_waiting_acquires", &[]), [0.0]);
}

#[test]
fn no_lock_id_reaches_a_metric() {
    // Both scenarios: the losses label their counter with a cause and the resource.
    let (mut m, mut secrets) = recorded(scenario);
    let (lost, lost_secrets) = recorded(losses);
    m.extend(lost);
    secrets.extend(lost_secrets);
    let allowed_keys = ["operation", "outcome", "mode", "resource", "cause", "event"];
    for (name, labels) in m.keys() {
        assert!(name.starts_with("lockwright_"), "{name}");
        for (k, v) in labels {
            assert!(allowed_keys.contains(&k.as_str()), "{name}: label {k}");
            if k == "resource" {
                assert!(
                    ["job", "renewed", "direct", "taken", "unreachable"].contains(&v.as_str()),
                    "{name}: {v}"
                );
            }
            for secret in &secrets {
                assert!(!v.contains(secret.as_str()) && !name.contains(secret.as_str()));
            }
        }
    }
    // Without the opt-in, no resource either.
    let (plain, _) = recorded(async || {
        let client = Client::new(MemStore::new());
        let locker = Locker::new(client, LockerConfig::default()).unwrap();
        let options = LockOptions::exclusive(Duration::from_secs(30));
        locker
            .acquire("job", &options)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        locker.shutdown();
        Vec::new()
    });
    assert!(!plain.is_empty());
    assert!(
        plain
            .keys()
            .all(|(_, labels)| labels.iter().all(|(k, _)| k != "resource")),
        "{:#?}",
        plain.keys()
    );
}
