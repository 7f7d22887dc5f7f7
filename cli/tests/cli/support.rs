//! Test support: a fresh lock collection per test on the MongoDB at `MONGODB_URI`, the
//! `lockwright` binary pointed at it, processes killed on drop, and polling.

use std::future::IntoFuture as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lockwright::{Client, Filter, LockStatus, MongoStore};

/// The URI of the test deployment; panics with a clear message when unset.
pub fn mongodb_uri() -> String {
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => uri,
        _ => panic!(
            "MONGODB_URI is not set: these tests need a MongoDB replica set. Run \
             `scripts/test`, or the tests under `scripts/mongod.sh run -- cargo test ...`"
        ),
    }
}

/// A uniquely named lock collection, dropped (with its database's entry) on drop.
pub struct Coll {
    /// The deployment's URI.
    pub uri: String,
    /// `lockwright_test.cli_<hex>`.
    pub namespace: String,
    pub client: Client<MongoStore>,
    pub runtime: tokio::runtime::Runtime,
    /// A scratch directory for files the commands write.
    pub dir: tempfile::TempDir,
}

impl Coll {
    /// A fresh collection with the unique index in place.
    pub fn new() -> Self {
        let coll = Self::missing();
        coll.block_on(coll.client.create_indexes())
            .expect("create_indexes");
        coll
    }

    /// A collection someone already uses without the unique index: it holds a document
    /// that is not a lock, and no index but `_id`'s.
    pub fn used_without_index() -> Self {
        let coll = Self::missing();
        coll.block_on(
            coll.client
                .store()
                .collection()
                .insert_one(mongodb::bson::doc! {"note": "not a lock"})
                .into_future(),
        )
        .expect("insert");
        coll
    }

    /// A collection that does not exist yet.
    pub fn missing() -> Self {
        Self::missing_on(mongodb_uri())
    }

    /// A fresh collection, with the unique index in place, on the deployment at `uri` (a
    /// replica set of the test's own).
    pub fn on(uri: &str) -> Self {
        let coll = Self::missing_on(uri.to_owned());
        coll.block_on(coll.client.create_indexes())
            .expect("create_indexes");
        coll
    }

    fn missing_on(uri: String) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let id = lockwright::generate_lock_id();
        let name = format!("cli_{}", &id.as_str()[..12]);
        let store = runtime
            .block_on(MongoStore::connect(&uri, "lockwright_test", &name))
            .expect("connect");
        Coll {
            uri,
            namespace: format!("lockwright_test.{name}"),
            client: Client::new(store),
            runtime,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// `lockwright` with the URI and collection in its environment.
    pub fn lw(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockwright"));
        cmd.env("LOCKWRIGHT_URI", &self.uri)
            .env("LOCKWRIGHT_COLLECTION", &self.namespace)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        cmd
    }

    /// `lockwright ARGS`, run to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.lw().args(args).output().expect("run lockwright")
    }

    /// `lockwright ARGS` started in the background, output captured.
    pub fn spawn(&self, args: &[&str]) -> Proc {
        let child = self
            .lw()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockwright");
        Proc(Some(child))
    }

    /// `lockwright ARGS` started in the background, its standard output written to the
    /// scratch file `out` (to be read while it runs), standard error captured.
    pub fn spawn_to_file(&self, args: &[&str], out: &str) -> Proc {
        let file = std::fs::File::create(self.path(out)).expect("create the output file");
        let child = self
            .lw()
            .args(args)
            .stdout(file)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockwright");
        Proc(Some(child))
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The locks in the collection, through the library.
    pub fn locks(&self) -> Vec<LockStatus> {
        self.block_on(self.client.status(&Filter::new()))
            .expect("status")
    }

    /// `status --json`, parsed.
    pub fn status_json(&self, extra: &[&str]) -> Vec<serde_json::Value> {
        let mut args = vec!["status", "--json"];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        assert!(out.status.success(), "status --json: {}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

impl Drop for Coll {
    fn drop(&mut self) {
        // The lock collection and its wake shards (created by hand-overs).
        self.runtime.block_on(async {
            let store = self.client.store();
            let _ = store.collection().drop().await;
            let db = store.client().database(&store.collection().namespace().db);
            for shard in store.wake_collections() {
                let _ = db
                    .collection::<mongodb::bson::Document>(&shard)
                    .drop()
                    .await;
            }
        });
    }
}

/// A background `lockwright`, killed (SIGKILL) on drop if still running.
pub struct Proc(Option<Child>);

impl Proc {
    pub fn pid(&self) -> nix::unistd::Pid {
        let child = self.0.as_ref().expect("running");
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("kill");
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        let child = self.0.as_mut().expect("running");
        child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the exit (at most `limit`), and returns the output.
    pub fn finish(mut self, limit: Duration) -> Output {
        let ok = wait_for(limit, || !self.running());
        let child = self.0.take().expect("running");
        if !ok {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
                nix::sys::signal::Signal::SIGKILL,
            );
            let out = child.wait_with_output().expect("wait");
            panic!(
                "lockwright did not exit within {limit:?}; stderr: {}",
                text(&out.stderr)
            );
        }
        child.wait_with_output().expect("wait")
    }
}

impl From<Child> for Proc {
    fn from(child: Child) -> Self {
        Proc(Some(child))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `cond` every 50 ms until it holds (true) or `limit` passes (false).
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most 20 s) for `path` to exist; panics otherwise.
pub fn wait_for_file(path: &Path) {
    assert!(
        wait_for(Duration::from_secs(20), || path.exists()),
        "{} was not created in time",
        path.display()
    );
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The exit code, panicking on death by signal.
pub fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("lockwright died of a signal; stderr: {}", text(&out.stderr)))
}

/// Asserts no lock id of `locks` appears in `output`.
pub fn assert_no_lock_id(locks: &[LockStatus], output: &str) {
    for lock in locks {
        assert!(
            !output.contains(lock.lock_id.as_str()),
            "a lock id leaked into: {output}"
        );
    }
}

/// A TCP proxy on 127.0.0.1 to one server, which can cut every connection through it (and
/// refuse new ones) at once: a client cut off from the server while others still reach it.
pub struct Proxy {
    /// Its port.
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    /// A proxy to `server` (`host:port`).
    pub fn to(server: &str) -> Self {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let proxy = Proxy {
            port,
            cut: Default::default(),
            open: Default::default(),
        };
        let (cut, open, server) = (proxy.cut.clone(), proxy.open.clone(), server.to_owned());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let upstream = match TcpStream::connect(&server) {
                    Ok(s) if !cut.load(Ordering::SeqCst) => s,
                    _ => {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                };
                let clones = (client.try_clone(), upstream.try_clone());
                let (Ok(c2), Ok(u2)) = clones else { continue };
                if let Ok(mut open) = open.lock() {
                    open.extend(client.try_clone().ok());
                    open.extend(upstream.try_clone().ok());
                }
                pipe(client, u2);
                pipe(upstream, c2);
            }
        });
        proxy
    }

    /// `mongodb://` through the proxy, to that one server.
    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }

    /// Cuts every connection, and refuses new ones from now on.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(open) = self.open.lock() {
            for s in open.iter() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// The primary of the deployment `c` is on, as `host:port`.
pub fn primary(c: &Coll) -> String {
    let hello = c
        .block_on(
            c.client
                .store()
                .client()
                .database("admin")
                .run_command(mongodb::bson::doc! {"hello": 1})
                .into_future(),
        )
        .expect("hello");
    hello.get_str("primary").expect("a primary").to_owned()
}
