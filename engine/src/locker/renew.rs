//! The renewal path: renewals falling due go out alone or in one batch, and each reply
//! renews the lease's trust or counts towards losing it.

use std::sync::Arc;

use rand_core::RngCore;

use super::{Ended, Event, LockerCore, Purpose, Reply, Request};
use crate::error::Error;
use crate::lease::{LeaseEvent, LeaseKey, LostCause};
use crate::mutants::{self, Mutant};
use crate::status::Renewal;
use crate::time::LocalMs;

impl<R: RngCore> LockerCore<R> {
    /// One lock: one `Renew`. More: one `RenewMany`, answered by the earliest of their
    /// trust deadlines.
    pub(super) fn send_renewals(&mut self, mut batch: Vec<(LeaseKey, Renewal)>, now: LocalMs) {
        let deadline = batch
            .iter()
            .filter_map(|(key, _)| self.schedule.trust_until(*key))
            .min()
            .unwrap_or(now);
        match batch.len() {
            0 => {}
            1 => {
                if let Some((key, r)) = batch.pop() {
                    let request = Request::Renew {
                        lock: r,
                        margin: self.renew_margin,
                    };
                    self.send(request, Purpose::Renew { key }, deadline, now);
                }
            }
            _ => {
                let (keys, locks) = batch.into_iter().unzip();
                let request = Request::RenewMany {
                    locks,
                    margin: self.renew_margin,
                };
                self.send(request, Purpose::RenewMany { keys }, deadline, now);
            }
        }
    }

    /// Each lock of a batch is settled on its own outcome; a failure of the whole batch is
    /// each lock's failure.
    pub(super) fn batch_settled(
        &mut self,
        keys: Vec<LeaseKey>,
        sent: LocalMs,
        reply: Option<Reply>,
        now: LocalMs,
    ) {
        match reply {
            Some(Reply::Each(each)) if each.len() == keys.len() => {
                for (key, reply) in keys.into_iter().zip(each) {
                    self.renew_settled(key, sent, Some(reply), now);
                }
            }
            None => {
                for key in keys {
                    self.renew_settled(key, sent, None, now);
                }
            }
            other => {
                let cause = Arc::new(match other {
                    Some(Reply::Failed(e)) => e,
                    _ => Error::backend("renew", "the store's answer to a batch does not fit it"),
                });
                for key in keys {
                    let e = Error::backend("renew", Arc::clone(&cause));
                    self.renew_settled(key, sent, Some(Reply::Failed(e)), now);
                }
            }
        }
    }

    pub(super) fn renew_settled(
        &mut self,
        key: LeaseKey,
        sent: LocalMs,
        reply: Option<Reply>,
        now: LocalMs,
    ) {
        if !self.held.get(&key).is_some_and(|h| h.live) {
            return;
        }
        let (refused, error) = match reply {
            Some(Reply::Done) => {
                self.schedule.renewed(key, sent);
                if let Some(until) = self.schedule.trust_until(key) {
                    self.stats.renewals += 1;
                    self.events.push_back(Event::Renewed {
                        key,
                        trust_until: until,
                    });
                }
                return;
            }
            Some(Reply::Refused(e)) => (true, e),
            Some(Reply::Failed(e)) => (false, e),
            Some(Reply::Granted(_) | Reply::Each(_)) => (
                false,
                Error::backend("renew", "the store's answer does not fit a renewal"),
            ),
            None => (false, Error::NoReply { operation: "renew" }),
        };
        self.stats.renew_failures += 1;
        self.events.push_back(Event::RenewFailed { key, error });
        if let Some(LeaseEvent::Lost { key, cause }) = self.schedule.renew_failed(key, refused, now)
        {
            self.lose(key, cause);
        }
    }

    pub(super) fn lose(&mut self, key: LeaseKey, cause: LostCause) {
        if mutants::active(Mutant::LockerLossNotSignalled) {
            return;
        }
        if let Some(held) = self.held.get_mut(&key)
            && held.live
        {
            held.live = false;
            self.stats.held -= 1;
            self.stats.lost += 1;
            self.events.push_back(Event::Ended {
                key,
                how: match cause {
                    LostCause::Refused => Ended::Refused,
                    LostCause::Expired => Ended::Expired,
                },
            });
        }
    }
}
