//! What a waiting measurement counts: the commands of its Lockers' clients (MongoDB) and
//! their store calls ([`Tallied`], a store wrapper), sorted into lock writes, change-stream
//! traffic and the rest, and divided by the grants (cycles, rounds) of the window.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwright_engine::{
    Error, HintStream, LockId, LockRequest, LockStatus, LockStore, Notices, Query, Reading,
    Release, Released, Renewal, Resource, Result, Ttl,
};

/// Commands or calls so far, by name.
#[derive(Clone, Default)]
pub struct Counter(Arc<Mutex<BTreeMap<String, u64>>>);

impl Counter {
    /// One more `name`.
    pub fn add(&self, name: &str) {
        *self.0.lock().unwrap().entry(name.to_string()).or_default() += 1;
    }

    /// The counts now.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap().clone()
    }
}

/// The store under a measured Locker: `inner` (shared: in memory every Locker's handle is
/// on one store), counting every call by the name of the `LockStore` method, refusals of
/// `xlock` as `refused`, and hint subscriptions as `hints` (or `no_hints` when the store
/// had none to give).
pub struct Tallied<S> {
    pub inner: Arc<S>,
    pub calls: Counter,
}

impl<S: LockStore> LockStore for Tallied<S> {
    async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
        self.calls.add(request.access.operation());
        let granted = self.inner.lock(request).await;
        if let Err(Error::AlreadyLocked { .. }) = granted {
            self.calls.add("refused");
        }
        granted
    }

    async fn release(&self, what: Release<'_>) -> Result<Released> {
        match what {
            Release::Group(_) => self.calls.add("unlock"),
            Release::Lock { .. } => self.calls.add("unlock_one"),
            Release::Place { .. } => {}
        }
        self.inner.release(what).await
    }

    async fn renew(&self, lock_id: &LockId, ttl: Ttl, margin: Duration) -> Result<Vec<LockStatus>> {
        self.calls.add("renew");
        self.inner.renew(lock_id, ttl, margin).await
    }

    async fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> Result<Vec<Result<LockStatus>>> {
        self.calls.add(if locks.len() == 1 {
            "renew_one"
        } else {
            "renew_many"
        });
        self.inner.renew_each(locks, margin).await
    }

    async fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> Result<LockStatus> {
        self.calls.add("set_comment");
        self.inner.set_comment(resource, lock_id, comment).await
    }

    async fn read(&self, query: Query<'_>) -> Result<Reading> {
        if let Query::Locks(_) = query {
            self.calls.add("status");
        }
        self.inner.read(query).await
    }

    async fn purge(&self) -> Result<Vec<LockStatus>> {
        self.calls.add("purge");
        self.inner.purge().await
    }

    fn notices(&self) -> Option<&dyn Notices> {
        Some(self)
    }
}

/// The inner store's notices, each hint subscription counted.
impl<S: LockStore> Notices for Tallied<S> {
    fn hints(&self) -> Option<HintStream> {
        let hints = self.inner.hints();
        self.calls
            .add(if hints.is_some() { "hints" } else { "no_hints" });
        hints
    }

    fn announce_leaders(&self, election: &Resource) {
        self.inner.announce_leaders(election);
    }

    fn leaders(&self) -> Option<lockwright_engine::election::LeaderStream> {
        self.inner.leaders()
    }
}

/// How a command (MongoDB) or a store call (memory) counts towards the herd target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A write to the locks: a grant attempt, a release, a renewal.
    Lock,
    /// The wakes cursor behind the hints (opening, awaiting, closing it, and creating or
    /// seeding its capped collection; in memory, a hint subscription). A change stream's
    /// commands, should any be sent, count here too.
    Stream,
    /// Anything else (set-up, sessions, status).
    Other,
}

fn kind(name: &str) -> Kind {
    match name {
        "findAndModify" | "update" | "delete" | "insert" | "commitTransaction"
        | "abortTransaction" | "xlock" | "slock" | "unlock" | "unlock_one" | "renew"
        | "renew_one" | "renew_many" | "purge" => Kind::Lock,
        "find" | "getMore" | "killCursors" | "create" | "listCollections" | "aggregate"
        | "hints" => Kind::Stream,
        _ => Kind::Other,
    }
}

/// `after - before`, name by name (names only in `after` count from zero).
fn difference(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// What one measurement counts: the commands of its Lockers' clients and their store
/// calls.
#[derive(Clone, Default)]
pub struct Counts {
    pub commands: Counter,
    pub calls: Counter,
}

/// The counts at one instant.
pub struct Snapshot {
    commands: BTreeMap<String, u64>,
    calls: BTreeMap<String, u64>,
}

impl Counts {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            commands: self.commands.snapshot(),
            calls: self.calls.snapshot(),
        }
    }

    /// Between `before` and `after`, per `per` (grants, cycles, rounds; `what` names it):
    /// lock, change-stream and other commands (in memory, with `commands` false, the
    /// store calls stand for them), acquire attempts (the store's `xlock` calls), each
    /// command by name, and the hint subscriptions the stores gave over the whole run (0
    /// with hints on means the store has none and the Lockers polled).
    pub fn line(
        &self,
        commands: bool,
        (before, after): (&Snapshot, &Snapshot),
        per: f64,
        what: &str,
    ) -> String {
        let calls = difference(&before.calls, &after.calls);
        let counted = if commands {
            difference(&before.commands, &after.commands)
        } else {
            calls
                .iter()
                .filter(|(name, _)| !matches!(name.as_str(), "refused" | "no_hints"))
                .map(|(name, n)| (name.clone(), *n))
                .collect()
        };
        let per = per.max(1.0);
        let mut by_kind = [0u64; 3];
        for (name, n) in &counted {
            by_kind[kind(name) as usize] += n;
        }
        let mut by_count: Vec<_> = counted.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let each: Vec<String> = by_count
            .iter()
            .map(|(name, n)| format!("{name} {:.2}", **n as f64 / per))
            .collect();
        let subscriptions = self.calls.snapshot().get("hints").copied().unwrap_or(0);
        format!(
            "per {what}: lock commands {:.2}, change-stream {:.2}, other {:.2}, attempts {:.2} \
             ({}); {subscriptions} hint subscription(s)",
            by_kind[Kind::Lock as usize] as f64 / per,
            by_kind[Kind::Stream as usize] as f64 / per,
            by_kind[Kind::Other as usize] as f64 / per,
            calls.get("xlock").copied().unwrap_or(0) as f64 / per,
            each.join(", "),
        )
    }
}
