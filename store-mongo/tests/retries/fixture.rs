//! The fixture: a store on its own client and `appName`, the fail point set and always
//! cleared, and assertions on errors and holders.

use super::*;

/// `f`, or a panic when it takes longer than [`HANG_GUARD`].
pub(crate) async fn guarded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} still running after {HANG_GUARD:?}: the retries do not end"),
    }
}

/// An error and its sources, as one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let causes = std::iter::successors(Some(e), |e| e.source());
    causes
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Asserts a `Backend` error of `op`; returns its message with all sources.
pub(crate) fn backend<T: std::fmt::Debug>(op: &str, result: Result<T, Error>) -> String {
    match result {
        Err(e @ Error::Backend { operation, .. }) if operation == op => chain(&e),
        other => panic!("expected a Backend error of {op}, got {other:?}"),
    }
}

/// Asserts a `Backend` error of `op` whose outcome is unknown, and that says so.
pub(crate) fn outcome_unknown<T: std::fmt::Debug>(op: &str, result: Result<T, Error>) {
    if let Err(e) = &result {
        assert!(
            e.may_have_applied(),
            "{op}: the outcome must be unknown: {e:?}"
        );
    }
    let message = backend(op, result);
    assert!(
        message.contains("outcome is unknown"),
        "{op}: the error must say that the outcome is unknown: {message}"
    );
}

pub(crate) fn count(commands: &[String], name: &str) -> usize {
    commands.iter().filter(|c| *c == name).count()
}

/// A store on a fresh collection whose client carries a unique `appName`, and the commands
/// that client starts.
pub(crate) struct Fixture {
    pub(crate) store: MongoStore,
    pub(crate) commands: CommandLog,
    pub(crate) app: String,
}

impl Fixture {
    pub(crate) async fn new(test: &str, clock: Option<Arc<ManualClock>>) -> Fixture {
        let app = format!("lockwright-retries-{test}-{}", ObjectId::new().to_hex());
        let mut opts = options().await;
        let commands = CommandLog::attach(&mut opts);
        opts.app_name = Some(app.clone());
        // After an injected "node is shutting down" error the driver marks the server
        // unknown until its monitor hears from it again; with the default 10 s heartbeat
        // that can outlast server selection. The server's state never changed, so let the
        // monitor notice soon.
        opts.heartbeat_freq = Some(Duration::from_millis(500));
        let client = Client::with_options(opts).unwrap();
        let store = fresh_store_on(&client, clock).await;
        // The set-up check (hello, listIndexes) runs once, here, so that the commands
        // counted later are the operations' own.
        store.status(&Filter::new()).await.unwrap();
        Fixture {
            store,
            commands,
            app,
        }
    }

    pub(crate) async fn configure(&self, mode: Bson, data: Option<Document>) {
        let mut command = doc! { "configureFailPoint": "failCommand", "mode": mode };
        if let Some(mut data) = data {
            data.insert("appName", self.app.clone());
            command.insert("data", data);
        }
        self.store
            .client()
            .database("admin")
            .run_command(command)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "configureFailPoint failCommand failed (does the server run with \
                     --setParameter enableTestCommands=1?): {e}"
                )
            });
    }

    /// Makes `commands` of this test's client fail as `data` says, `mode` times; forgets
    /// the commands started so far.
    pub(crate) async fn fail(&self, mode: Bson, commands: &[&str], data: Document) {
        let mut data = data;
        data.insert("failCommands", commands.to_vec());
        self.configure(mode, Some(data)).await;
        self.commands.take();
    }

    pub(crate) async fn off(&self) {
        self.configure(Bson::from("off"), None).await;
    }

    /// Aborts, on the server, the transactions this test's client left open: one whose
    /// commit never reached the server stays open (holding its writes) until the server
    /// reaps it after `transactionLifetimeLimitSeconds` (60 s by default), and the driver
    /// does not abort a transaction once its commit was attempted. Returns how many
    /// sessions were killed.
    pub(crate) async fn kill_open_transactions(&self) -> usize {
        let admin = self.store.client().database("admin");
        let ops: Vec<Document> = admin
            .aggregate([
                doc! { "$currentOp": { "idleSessions": true } },
                doc! { "$match": { "appName": &self.app, "transaction": { "$exists": true } } },
            ])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let sessions: Vec<Bson> = ops
            .iter()
            .filter_map(|op| op.get_document("lsid").ok())
            .map(|lsid| Bson::Document(doc! { "id": lsid.get("id").unwrap().clone() }))
            .collect();
        if !sessions.is_empty() {
            admin
                .run_command(doc! { "killSessions": sessions.clone() })
                .await
                .unwrap();
        }
        sessions.len()
    }

    pub(crate) async fn status(&self) -> Vec<LockStatus> {
        guarded("status", self.store.status(&Filter::new()))
            .await
            .unwrap()
    }

    /// The stored document of `resource`.
    pub(crate) async fn document(&self, resource: &str) -> Document {
        self.store
            .collection()
            .find_one(doc! { "resource": resource })
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no document for {resource}"))
    }
}

pub(crate) fn times(n: i32) -> Bson {
    Bson::Document(doc! { "times": n })
}

pub(crate) fn always_on() -> Bson {
    Bson::from("alwaysOn")
}

/// Runs `body` on a fresh fixture while holding [`FAIL_POINT`]; afterwards, whatever
/// happened, switches the fail point off and drops the collection. When the body passed,
/// also checks that the store is not stuck: `status` and `purge` still work.
pub(crate) async fn run<F, Fut>(test: &str, clock: Option<Arc<ManualClock>>, body: F)
where
    F: FnOnce(Arc<Fixture>) -> Fut,
    Fut: Future<Output = ()>,
{
    let _turn = FAIL_POINT.lock().await;
    let fx = Arc::new(Fixture::new(test, clock).await);
    let outcome = AssertUnwindSafe(body(Arc::clone(&fx))).catch_unwind().await;
    fx.off().await;
    if outcome.is_ok() {
        guarded("status", fx.store.status(&Filter::new()))
            .await
            .unwrap_or_else(|e| panic!("status after the fail point was switched off: {e:?}"));
        guarded("purge", fx.store.purge())
            .await
            .unwrap_or_else(|e| panic!("purge after the fail point was switched off: {e:?}"));
    }
    // Otherwise the collection drop waits for the server to reap them.
    fx.kill_open_transactions().await;
    teardown(&fx.store).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Asserts that `resource`'s document holds exactly one lock, `lock_id`'s, in `mode`.
pub(crate) async fn holds_exactly(fx: &Fixture, resource: &str, lock_id: &str, mode: Mode) {
    let doc = fx.document(resource).await;
    let exclusive = doc.get_document("exclusive").unwrap();
    let shared = doc.get_document("shared").unwrap();
    let shared_ids: Vec<&str> = shared
        .get_array("locks")
        .unwrap()
        .iter()
        .map(|l| l.as_document().unwrap().get_str("lockId").unwrap())
        .collect();
    match mode {
        Mode::Exclusive => {
            assert_eq!(exclusive.get_bool("acquired"), Ok(true), "{doc}");
            assert_eq!(exclusive.get_str("lockId"), Ok(lock_id), "{doc}");
            assert!(shared_ids.is_empty(), "{doc}");
        }
        Mode::Shared => {
            assert_eq!(exclusive.get_bool("acquired"), Ok(false), "{doc}");
            assert_eq!(shared_ids, [lock_id], "{doc}");
            let n = match shared.get("count") {
                Some(Bson::Int32(n)) => i64::from(*n),
                Some(Bson::Int64(n)) => *n,
                other => panic!("shared.count: {other:?} in {doc}"),
            };
            assert_eq!(n, 1, "{doc}");
        }
    }
    let held: Vec<(String, String)> = fx
        .status()
        .await
        .into_iter()
        .filter(|l| l.resource.as_str() == resource)
        .map(|l| (l.lock_id.as_str().to_string(), format!("{:?}", l.mode)))
        .collect();
    assert_eq!(
        held,
        [(lock_id.to_string(), format!("{mode:?}"))],
        "status of {resource}"
    );
}
