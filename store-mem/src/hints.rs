//! The in-process notifier behind [`MemStore`](crate::MemStore)'s hints: every change that
//! may free a resource (a release, a purge) or that took it (a grant) is sent to every
//! subscriber, after the change is applied and its shard unlocked.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_channel::mpsc::{UnboundedSender, unbounded};
use lockwright_engine::{HandedLock, Hint, HintStream, Resource, table::Handed};

/// The subscribers. Plain std primitives even under loom: hints are outside what the loom
/// tests explore (they never decide anything).
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    subscribers: Mutex<Vec<UnboundedSender<Hint>>>,
    /// How many subscribers there were at the last change of the list, so the lock
    /// operations skip the list when nobody listens.
    count: AtomicUsize,
}

impl Notifier {
    /// A new subscription, starting with `Missed`.
    pub(crate) fn subscribe(&self) -> HintStream {
        let (tx, rx) = unbounded();
        // The receiver is alive: the send cannot fail.
        let _ = tx.unbounded_send(Hint::Missed);
        let mut subscribers = self.list();
        subscribers.push(tx);
        self.count.store(subscribers.len(), Ordering::Release);
        Box::pin(rx)
    }

    /// Tells every subscriber that `resource` was freed.
    pub(crate) fn freed<'a>(&self, resources: impl IntoIterator<Item = &'a Resource>) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        for r in resources {
            self.send(&Hint::Freed(r.clone()));
        }
    }

    /// Tells every subscriber that `resource` was granted, with `fence`.
    /// The store handed locks to the heads of queues: each handed place's waiter holds its
    /// lock at once, as the hint says what was handed (or asks at once, and its request
    /// claims the lock).
    pub(crate) fn handed(&self, handed: &[Handed]) {
        if handed.is_empty() || self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        for h in handed {
            self.send(&Hint::First {
                resource: h.status.resource.clone(),
                taken: false,
                place: Some(h.ticket.place_tag()),
                grant: Some(HandedLock::of(&h.status)),
            });
        }
    }

    pub(crate) fn taken(&self, resource: &Resource, fence: u64) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        self.send(&Hint::Taken(resource.clone(), Some(fence)));
    }

    fn send(&self, hint: &Hint) {
        let mut subscribers = self.list();
        subscribers.retain(|s| s.unbounded_send(hint.clone()).is_ok());
        self.count.store(subscribers.len(), Ordering::Release);
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<UnboundedSender<Hint>>> {
        // Nothing panics while the list is locked; a poisoned list is still a valid list.
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
