//! Hints from the store to the waiting clients, over the faulty network.
//!
//! The hints are the store's own: each client's subscription is a [`LockStore::hints`]
//! stream of the in-memory store, opened when the subscription request reaches the store,
//! and drained after every grant or release (store-mem sends `Taken` after each grant and
//! `Freed` after each release, while the operation runs; its stream starts with `Missed`).
//! Each hint drained travels to its client like a reply: after latency, so hints overtake
//! one another; lost as often as replies are; delivered twice in seeds that duplicate
//! hints; and now and then the store ends the stream instead of sending a hint (the hint
//! is lost with it). Hints to a paused client wait in its socket; a crash drops the
//! subscription with the process.
//!
//! The client side mirrors the `lockwright` Locker task's (`lockwright/src/locker/driver.rs`):
//! a process subscribes while its core [`wants_hints`] (a fair acquire waits), keeps the subscription for
//! `max_backoff` after it stops waiting, hands every hint to the core's [`handle_hint`] at
//! its own local time, and when the stream ends hands the core `Missed` and subscribes
//! again no sooner than `max_backoff` later. A hint that reaches a process whose core waits
//! for nothing is handed over too (the core ignores it), but as nothing else comes of it
//! the world does not run its checks after it.
//!
//! [`LockStore::hints`]: lockwright_engine::LockStore::hints
//! [`wants_hints`]: lockwright_engine::locker::LockerCore::wants_hints
//! [`handle_hint`]: lockwright_engine::locker::LockerCore::handle_hint

use futures_util::{FutureExt, StreamExt};
use lockwright_engine::{Hint, HintStream, LocalMs, LockStore};
use rand::Rng;

use super::app::App;
use super::{Event, World};

/// A client process's subscription to hints, as the Locker task keeps it. Times are on the
/// client's clock.
#[derive(Default)]
pub(super) struct Watch {
    /// The subscription the process holds (its number), if any.
    sub: Option<u64>,
    /// Its stream at the store, once the subscription reached it and until the store ends
    /// it or the process drops it.
    stream: Option<HintStream>,
    /// Since when the core has not been waiting, while subscribed.
    idle_since: Option<u64>,
    /// No subscription before then (the last stream ended).
    not_before: Option<u64>,
}

impl Watch {
    /// Whether the process holds a subscription (hints reach it, or its stream's first
    /// `Missed` is on its way).
    pub(super) fn listening(&self) -> bool {
        self.sub.is_some()
    }
}

/// A hint on its way to a client, or (`None`) the end of its stream.
pub(super) type InFlightHint = Option<Hint>;

impl World {
    /// How long a subscription outlives the last wait, and how long after a stream ended
    /// the process subscribes again: `max_backoff`, as the Locker task.
    fn linger_ms(&self) -> u64 {
        u64::try_from(self.config.max_backoff.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The Locker task's `Watch::update`: subscribes while the core waits (unless a stream
    /// ended less than `max_backoff` ago), and unsubscribes `max_backoff` after it stopped
    /// waiting. Returns when the watch next has something to do on its own (local time).
    pub(super) fn update_watch(&mut self, client: usize) -> Option<u64> {
        let local = self.local(client);
        let linger = self.linger_ms();
        let waiting = self.config.wake_on_hints && self.clients[client].core.wants_hints();
        let w = &mut self.clients[client].watch;
        if w.not_before.is_some_and(|t| t <= local) {
            w.not_before = None;
        }
        if waiting {
            w.idle_since = None;
            if w.sub.is_none() && w.not_before.is_none() {
                self.subscribe(client);
            }
        } else if w.sub.is_some() {
            let since = *w.idle_since.get_or_insert(local);
            if since + linger <= local {
                w.sub = None;
                w.stream = None;
                w.idle_since = None;
                self.note(Some(client), "unsubscribes from hints");
                if self.clients[client].core.is_waiting() {
                    self.report.tally.far_back_unsubscribed += 1;
                }
                self.clients[client].core.hints_ended(LocalMs(local));
            }
        }
        let w = &self.clients[client].watch;
        match (w.sub, w.idle_since) {
            (Some(_), Some(since)) => Some(since + linger),
            (Some(_), None) => None,
            (None, _) => w.not_before,
        }
    }

    /// The process asks the store for hints: the request reaches it after latency, or is
    /// lost (the process then sees the stream end).
    fn subscribe(&mut self, client: usize) {
        self.next_sub += 1;
        let sub = self.next_sub;
        let incarnation = self.clients[client].incarnation;
        self.clients[client].watch.sub = Some(sub);
        self.report.tally.subscriptions += 1;
        self.note(Some(client), "subscribes to hints");
        let at = self.now + self.latency();
        if !self.healing && self.rng.random_range(0..100) < self.mix.lost_request_pct {
            self.report.faults.dropped_streams += 1;
            self.note(Some(client), "subscription to hints lost");
            self.push(
                at,
                Event::Hint {
                    client,
                    incarnation,
                    sub,
                    hint: None,
                },
            );
            return;
        }
        self.push(
            at,
            Event::Subscribe {
                client,
                incarnation,
                sub,
            },
        );
    }

    /// A subscription reached the store: its stream opens (with `Missed` first).
    pub(super) fn subscribed(&mut self, client: usize, incarnation: u32, sub: u64) {
        let c = &self.clients[client];
        if c.incarnation != incarnation || c.crashed || c.watch.sub != Some(sub) {
            // The process died or gave the subscription up meanwhile.
            return;
        }
        match self.store.hints() {
            Some(stream) => {
                self.clients[client].watch.stream = Some(stream);
                self.pump_hints();
            }
            None => {
                self.report.faults.dropped_streams += 1;
                self.send_hint(client, None);
            }
        }
    }

    /// Sends every hint the store gave its subscribers since the last call over the network.
    pub(super) fn pump_hints(&mut self) {
        for client in 0..self.clients.len() {
            while let Some(stream) = self.clients[client].watch.stream.as_mut() {
                // store-mem's stream is a channel: ready with a hint, or pending when empty.
                let Some(item) = stream.next().now_or_never() else {
                    break;
                };
                if item.is_none() {
                    self.clients[client].watch.stream = None;
                }
                self.send_hint(client, item);
            }
        }
    }

    /// One hint (or the end of the stream) travels to `client`: lost, delayed (so hints
    /// overtake one another), duplicated, or the stream ends in its stead.
    fn send_hint(&mut self, client: usize, hint: InFlightHint) {
        let c = &self.clients[client];
        let (incarnation, Some(sub)) = (c.incarnation, c.watch.sub) else {
            return;
        };
        let mut hint = hint;
        if hint.is_some() && self.partitioned(client) {
            self.report.tally.hints_sent += 1;
            return;
        }
        if hint.is_some() {
            self.report.tally.hints_sent += 1;
            if !self.healing
                && self.rng.random_range(0..1000) < u32::from(self.mix.stream_drop_permille)
            {
                // The store drops the stream: this hint and every later one are lost.
                self.clients[client].watch.stream = None;
                self.report.faults.dropped_streams += 1;
                self.note(Some(client), "the store drops the hint stream");
                hint = None;
            } else if !self.healing && self.rng.random_range(0..100) < self.mix.lost_reply_pct {
                self.report.faults.lost_hints += 1;
                if let Some(h) = &hint {
                    let what = describe_hint(h);
                    self.note(Some(client), format!("hint {what} lost"));
                }
                return;
            }
        }
        let copies = if hint.is_some()
            && !self.healing
            && self.rng.random_range(0..100) < self.mix.hint_dup_pct
        {
            self.report.faults.duplicated_hints += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = self.now + self.latency();
            if hint.is_some()
                && !self.healing
                && self.mix.late_hint_pct > 0
                && self.rng.random_range(0..100) < self.mix.late_hint_pct
            {
                self.report.faults.late_hints += 1;
                at += self.rng.random_range(0..=self.mix.late_hint_ms);
            }
            self.push(
                at,
                Event::Hint {
                    client,
                    incarnation,
                    sub,
                    hint: hint.clone(),
                },
            );
        }
    }

    /// A hint reached its client: handed to the core, or kept in the socket while the
    /// process is paused; lost on a crashed process or a subscription it dropped. Returns
    /// whether anything came of it: a hint to a core that waits for nothing is handed over
    /// (the core ignores it) and nothing else happens.
    pub(super) fn hint_arrives(
        &mut self,
        client: usize,
        incarnation: u32,
        sub: u64,
        hint: InFlightHint,
    ) -> bool {
        let c = &mut self.clients[client];
        if c.incarnation != incarnation || c.crashed || c.watch.sub != Some(sub) {
            return false;
        }
        if c.paused_until.is_some() {
            c.hint_inbox.push((sub, hint));
            return false;
        }
        let matters = hint.is_none() || c.core.wants_hints();
        self.hear(client, sub, hint);
        if matters {
            self.settle(client);
        }
        matters
    }

    /// Hands a hint to the core, or, at the end of the stream, `Missed` (hints may have
    /// been lost) and no subscription for `max_backoff`.
    pub(super) fn hear(&mut self, client: usize, sub: u64, hint: InFlightHint) {
        if self.clients[client].watch.sub != Some(sub) {
            return;
        }
        let local = self.local(client);
        let (hint, ended) = match hint {
            Some(hint) => (hint, false),
            None => {
                let not_before = local + self.linger_ms();
                let w = &mut self.clients[client].watch;
                w.sub = None;
                w.stream = None;
                w.idle_since = None;
                w.not_before = Some(not_before);
                self.note(Some(client), "its hint stream ended");
                (Hint::Missed, true)
            }
        };
        self.report.tally.hints_heard += 1;
        if let App::Acquiring { resource, .. } = self.clients[client].app
            && match &hint {
                Hint::Freed(r) => *r == self.resources[resource],
                Hint::Taken(..) => false,
                Hint::First {
                    resource: r, taken, ..
                } => !taken && *r == self.resources[resource],
                Hint::Missed => true,
            }
        {
            self.clients[client].wake_hints += 1;
        }
        if self.record && self.clients[client].core.wants_hints() {
            let what = describe_hint(&hint);
            self.note(Some(client), format!("hears {what}"));
        }
        if ended {
            self.clients[client].core.hints_ended(LocalMs(local));
        } else {
            let before = self.clients[client].core.stats().handed_by_hint;
            self.clients[client].core.handle_hint(&hint, LocalMs(local));
            self.report.tally.held_on_hint +=
                self.clients[client].core.stats().handed_by_hint - before;
        }
    }
}

fn describe_hint(hint: &Hint) -> String {
    match hint {
        Hint::Freed(r) => format!("Freed({r})"),
        Hint::Taken(r, _) => format!("Taken({r})"),
        Hint::First {
            resource, taken, ..
        } => format!("First({resource}, taken: {taken})"),
        Hint::Missed => "Missed".into(),
    }
}
