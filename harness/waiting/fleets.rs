//! Where the Lockers of one measurement get their stores: one backend, one collection (or
//! store), one takeover grace. On MongoDB each Locker has a `MongoStore` on a
//! `mongodb::Client` of its own (so each opens its own wakes cursor, as separate
//! processes would), every command of those clients counted with command monitoring; in
//! memory each has a handle on one shared `MemStore`, whose calls stand for commands.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright_engine::{Filter, LockStore};
use lockwright_store_mem::MemStore;
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{TEST_DATABASE, fresh_store_on, options};
use mongodb::Client;
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::ClientOptions;

use crate::tally::Counter;

/// The stores of one measurement.
pub trait Fleet {
    /// The backend's store.
    type Store: LockStore;
    /// Whether the backend sends commands ([`Fleet::store`] counts them); otherwise the
    /// Lockers' store calls stand for them.
    const COMMANDS: bool;

    /// A store for one more Locker (on a client of its own where the backend has clients),
    /// whose set-up has run so that none of it is measured; every command its client starts
    /// is counted in `commands`.
    fn store(&self, commands: &Counter) -> impl Future<Output = Arc<Self::Store>>;

    /// Everything the fleet opened is closed (clients shut down, its collection dropped).
    fn finish(self) -> impl Future<Output = ()>;

    /// The CPU time the server has used so far (user and system), where the backend is a
    /// server that reports it.
    fn server_cpu(&self) -> impl Future<Output = Option<Duration>> {
        async { None }
    }
}

/// One store on the system clock.
pub struct MemFleet(pub Arc<MemStore>);

impl MemFleet {
    pub fn new(grace: Option<Duration>) -> Self {
        let store = MemStore::new();
        MemFleet(Arc::new(match grace {
            Some(grace) => store.with_takeover_grace(grace).unwrap(),
            None => store,
        }))
    }
}

impl Fleet for MemFleet {
    type Store = MemStore;
    const COMMANDS: bool = false;

    async fn store(&self, _commands: &Counter) -> Arc<MemStore> {
        Arc::clone(&self.0)
    }

    async fn finish(self) {}
}

/// One fresh collection, and the clients opened on it.
pub struct MongoFleet {
    options: ClientOptions,
    collection: String,
    grace: Option<Duration>,
    admin: Client,
    clients: Mutex<Vec<Client>>,
}

impl MongoFleet {
    pub async fn new(grace: Option<Duration>) -> Self {
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

    async fn store(&self, commands: &Counter) -> Arc<MongoStore> {
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
        Arc::new(store)
    }

    /// `serverStatus`'s `extra_info.user_time_us` and `system_time_us` (reported on
    /// Linux).
    async fn server_cpu(&self) -> Option<Duration> {
        crate::cpu::server_cpu(&self.admin).await
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
