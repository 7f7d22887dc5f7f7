//! Releases: unlock a lock id, retried until `release_timeout` has passed.

use rand_core::RngCore;

use super::{Event, Grant, LockerCore, Purpose, Release, Reply, Request, Timer};
use crate::error::Error;
use crate::lease::LeaseKey;
use crate::mutants::{self, Mutant};
use crate::time::LocalMs;

impl<R: RngCore> LockerCore<R> {
    pub(super) fn start_release(&mut self, key: Option<LeaseKey>, grant: Grant, now: LocalMs) {
        let rid = self.next_id;
        self.next_id += 1;
        let deadline = now.saturating_add(self.config.release_timeout);
        self.releases.insert(
            rid,
            Release {
                key,
                grant,
                deadline,
            },
        );
        self.send_unlock(rid, now);
    }

    pub(super) fn send_unlock(&mut self, rid: u64, now: LocalMs) {
        let Some(r) = self.releases.get(&rid) else {
            return;
        };
        let deadline = r
            .deadline
            .min(now.saturating_add(r.grant.ttl.as_duration()));
        let request = Request::Unlock {
            resource: r.grant.resource.clone(),
            lock_id: r.grant.lock_id.clone(),
        };
        self.send(request, Purpose::Unlock { release: rid }, deadline, now);
    }

    pub(super) fn unlock_settled(&mut self, rid: u64, reply: Option<Reply>, now: LocalMs) {
        let error = match reply {
            // A refusal (no such lock) leaves nothing to release either.
            Some(Reply::Done | Reply::Refused(_)) => {
                if let Some(r) = self.releases.remove(&rid) {
                    self.events.push_back(Event::Released {
                        key: r.key,
                        result: Ok(()),
                    });
                }
                return;
            }
            Some(Reply::Failed(e)) => e,
            Some(Reply::Granted(_) | Reply::Each(_)) => {
                Error::backend("release", "the store's answer does not fit a release")
            }
            None => Error::NoReply {
                operation: "release",
            },
        };
        let Some(r) = self.releases.get(&rid) else {
            return;
        };
        let retry = now.saturating_add(self.config.renew_retry);
        if retry < r.deadline && !mutants::active(Mutant::LockerReleaseNotRetried) {
            self.timers.insert((retry, Timer::Release(rid)));
        } else if let Some(r) = self.releases.remove(&rid) {
            self.events.push_back(Event::Released {
                key: r.key,
                result: Err(error),
            });
        }
    }
}
