//! Lockwright's metrics in Prometheus's text format: three workers take turns on one lock
//! through a `Locker`, and the recorder of `metrics-exporter-prometheus` renders what they
//! recorded, as a scrape of `/metrics` would show it.
//!
//! Run: `cargo run --example metrics -p lockwright`
//!
//! A service would install the exporter with its HTTP listener instead
//! (`PrometheusBuilder::new().with_http_listener(addr).install()`, the crate's default
//! features); Lockwright records through the `metrics` facade whatever the exporter.

use std::time::Duration;

use lockwright::{Client, Error, LockOptions, Locker, LockerConfig, MemStore};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Error::invalid("recorder", e.to_string()))?;

    // Resource names as labels: fine for a handful of known names.
    let client = Client::new(MemStore::new()).with_resource_labels(true);
    let locker = Locker::new(client, LockerConfig::default())?;
    let options = LockOptions::exclusive(Duration::from_secs(10)).fair();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (locker, options) = (locker.clone(), options.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = locker.acquire("nightly-report", &options).await?;
                tokio::time::sleep(Duration::from_millis(5)).await; // the work
                guard.release().await?;
            }
            Ok::<(), Error>(())
        }));
    }
    for w in workers {
        w.await
            .map_err(|e| Error::invalid("worker", e.to_string()))??;
    }
    locker.shutdown();
    print!("{}", prometheus.render());
    Ok(())
}
