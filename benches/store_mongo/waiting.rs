//! Waiting Lockers on MongoDB (issue 25): the measurements of `benches/waiting` with every
//! Locker on a `MongoStore` of its own, on a `mongodb::Client` of its own (so each opens
//! its own change stream, as separate processes do), all on one fresh collection per
//! measurement. Every command of those clients is counted with command monitoring.
//!
//! They run on a multi-threaded runtime of their own (one worker per core): the Lockers'
//! tasks and the clients' connections are spread over the cores, as the processes they
//! stand for would be.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use lockwright_engine::{Filter, LockStore};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{TEST_DATABASE, fresh_store_on, options};
use mongodb::Client;
use mongodb::bson::doc;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ClientOptions;

use crate::GROUP;
use crate::filter::Selected;
use crate::harness::Bench;
use crate::shared_waiting::{Counter, Fleet, Plan, run_all};

/// One fresh collection, and the clients opened on it.
struct MongoFleet {
    options: ClientOptions,
    collection: String,
    grace: Option<Duration>,
    admin: Client,
    clients: Mutex<Vec<Client>>,
}

impl MongoFleet {
    async fn new(grace: Option<Duration>) -> Self {
        let options = options().await;
        let admin = Client::with_options(options.clone()).unwrap();
        let store = fresh_store_on(&admin, None).await;
        MongoFleet {
            options,
            collection: store.collection().name().to_string(),
            grace,
            admin,
            clients: Mutex::default(),
        }
    }
}

impl Fleet for MongoFleet {
    type Store = MongoStore;
    const COMMANDS: bool = true;

    async fn store(&self, commands: &Counter) -> MongoStore {
        let mut options = self.options.clone();
        let sink = commands.clone();
        options.command_event_handler = Some(EventHandler::callback(move |e| {
            if let CommandEvent::Started(started) = e {
                sink.add(&started.command_name);
            }
        }));
        let client = Client::with_options(options).unwrap();
        let mut store = MongoStore::from_collection(
            client.database(TEST_DATABASE).collection(&self.collection),
        );
        if let Some(grace) = self.grace {
            store = store.with_takeover_grace(grace).unwrap();
        }
        // Connects and runs the store's set-up check (hello, listIndexes) outside any
        // measurement.
        store
            .status(&Filter::new().resource("warm-up"))
            .await
            .unwrap();
        self.clients.lock().unwrap().push(client);
        store
    }

    async fn server_counters(&self) -> BTreeMap<String, u64> {
        let status = self
            .admin
            .database("admin")
            .run_command(doc! { "serverStatus": 1 })
            .await
            .unwrap();
        let conflicts = status
            .get_document("metrics")
            .and_then(|m| m.get_document("operation"))
            .ok()
            .and_then(|o| o.get("writeConflicts"))
            .and_then(|n| n.as_i64().or_else(|| n.as_i32().map(i64::from)));
        conflicts
            .map(|n| ("writeConflicts".to_string(), u64::try_from(n).unwrap_or(0)))
            .into_iter()
            .collect()
    }

    async fn finish(self) {
        let clients = std::mem::take(&mut *self.clients.lock().unwrap());
        for client in clients {
            client.shutdown().await;
        }
        // Best effort: a leftover collection in the test database harms nothing.
        let _ = self
            .admin
            .database(TEST_DATABASE)
            .collection::<mongodb::bson::Document>(&self.collection)
            .drop()
            .await;
        self.admin.shutdown().await;
    }
}

/// The waiting measurements on MongoDB that criterion's filter selects.
pub fn waiting(bench: &Bench<'_>) {
    let selected = Selected::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_all(
        GROUP,
        bench.mode,
        &Plan::of(bench.mode, 1.0),
        |id| selected.selects(id),
        async |grace| MongoFleet::new(grace).await,
    ));
}
