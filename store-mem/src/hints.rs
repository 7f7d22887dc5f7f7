//! The in-process notifier behind [`MemStore`](crate::MemStore)'s hints and news of
//! leaders: every change that may free a resource (a release, a purge) or that took it (a
//! grant) is sent to every subscriber of hints, and every exclusive grant of an announced
//! election to every observer,
//! after the change is applied and its shard unlocked.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_channel::mpsc::{UnboundedSender, unbounded};
use lockwright_engine::election::{Leader, LeaderNews, LeaderStream};
use lockwright_engine::{HandedLock, Hint, HintStream, LockStatus, Mode, Resource, table::Handed};

/// Subscribers to one kind of message. Plain std primitives even under loom: hints and
/// news are outside what the loom tests explore (they never decide anything).
#[derive(Debug)]
struct Subscribers<T> {
    list: Mutex<Vec<UnboundedSender<T>>>,
    /// How many subscribers there were at the last change of the list, so the lock
    /// operations skip the list when nobody listens.
    count: AtomicUsize,
}

impl<T> Default for Subscribers<T> {
    fn default() -> Self {
        Subscribers {
            list: Mutex::default(),
            count: AtomicUsize::new(0),
        }
    }
}

impl<T: Clone> Subscribers<T> {
    /// A new subscription, starting with `first`.
    fn subscribe(&self, first: T) -> futures_channel::mpsc::UnboundedReceiver<T> {
        let (tx, rx) = unbounded();
        // The receiver is alive: the send cannot fail.
        let _ = tx.unbounded_send(first);
        let mut subscribers = self.list();
        subscribers.push(tx);
        self.count.store(subscribers.len(), Ordering::Release);
        rx
    }

    /// Whether anybody listens.
    fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    fn send(&self, message: &T) {
        let mut subscribers = self.list();
        subscribers.retain(|s| s.unbounded_send(message.clone()).is_ok());
        self.count.store(subscribers.len(), Ordering::Release);
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<UnboundedSender<T>>> {
        // Nothing panics while the list is locked; a poisoned list is still a valid list.
        self.list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The subscribers to hints, the observers of elections, and the elections whose leaders
/// are news.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    hints: Subscribers<Hint>,
    observers: Subscribers<LeaderNews>,
    elections: Mutex<HashSet<Resource>>,
}

impl lockwright_engine::Notices for Notifier {
    fn hints(&self) -> Option<HintStream> {
        Some(self.subscribe())
    }

    fn announce_leaders(&self, election: &Resource) {
        self.announce(election);
    }

    fn leaders(&self) -> Option<LeaderStream> {
        Some(self.observe())
    }
}

impl Notifier {
    /// A new subscription to hints, starting with `Missed`.
    pub(crate) fn subscribe(&self) -> HintStream {
        Box::pin(self.hints.subscribe(Hint::Missed))
    }

    /// From now on, the leaders of `election` are news.
    pub(crate) fn announce(&self, election: &Resource) {
        self.elections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(election.clone());
    }

    /// A new subscription to the news of leaders, starting with `Missed`.
    pub(crate) fn observe(&self) -> LeaderStream {
        Box::pin(self.observers.subscribe(LeaderNews::Missed))
    }

    /// Tells every subscriber that `resource` was freed.
    pub(crate) fn freed<'a>(&self, resources: impl IntoIterator<Item = &'a Resource>) {
        if !self.hints.any() {
            return;
        }
        for r in resources {
            self.hints.send(&Hint::Freed(r.clone()));
        }
    }

    /// The store handed locks to the heads of queues: each handed place's waiter holds its
    /// lock at once, as the hint says what was handed (or asks at once, and its request
    /// claims the lock); an exclusive one's holder leads its election.
    pub(crate) fn handed(&self, handed: &[Handed]) {
        if handed.is_empty() {
            return;
        }
        for h in handed {
            self.leads(&h.status);
        }
        if !self.hints.any() {
            return;
        }
        for h in handed {
            self.hints.send(&Hint::First {
                resource: h.status.resource.clone(),
                taken: false,
                place: Some(h.ticket.place_tag()),
                grant: Some(HandedLock::of(&h.status)),
            });
        }
    }

    /// Tells every subscriber that `granted`'s resource was granted, with its fence (and
    /// every observer who leads it, when exclusive and granted now: a claim renews a lock
    /// handed over earlier, which [`Notifier::handed`] told of).
    pub(crate) fn taken(&self, granted: &LockStatus) {
        if lockwright_engine::election::grant_is_news(granted) {
            self.leads(granted);
        }
        if self.hints.any() {
            self.hints
                .send(&Hint::Taken(granted.resource.clone(), Some(granted.fence)));
        }
    }

    /// Tells every observer that `lock`'s holder leads, when it is exclusive and its
    /// resource an election announced here.
    fn leads(&self, lock: &LockStatus) {
        if lock.mode == Mode::Exclusive
            && self.observers.any()
            && self
                .elections
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&lock.resource)
        {
            self.observers.send(&LeaderNews::Leads {
                election: lock.resource.clone(),
                leader: Leader::of(lock),
                until: lock.expires_at,
            });
        }
    }
}
