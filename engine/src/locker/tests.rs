//! The locker core's tests: trust, backoff, renewal batches, releases and shutdown.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::lock::LockRequest;
use crate::notice::Hint;
use crate::options::LockOptions;
use crate::table::LockTable;
use crate::time::Timestamp;

fn core() -> LockerCore<StdRng> {
    let config = LockerConfig {
        release_timeout: Duration::from_millis(1_000),
        ..LockerConfig::default()
    };
    LockerCore::new(config, Duration::from_millis(100), StdRng::seed_from_u64(7)).unwrap()
}

fn ms(ms: u64) -> LocalMs {
    LocalMs::from_millis(ms)
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_millis(1_000)).unwrap()
}

fn ask(resource: Resource) -> Ask {
    Ask {
        resource,
        access: Access::Exclusive,
        ttl: ttl(),
        who: Who::default(),
        fair: false,
    }
}

fn acquire(core: &mut LockerCore<StdRng>, key: LeaseKey, wait: Wait, now: u64) -> Transmit {
    let resource = Resource::new("job").unwrap();
    core.acquire(key, ask(resource), wait, ms(now));
    core.poll_transmit().expect("a lock request")
}

/// Grants `t` on a fresh table, as a store would.
fn grant(t: &Transmit) -> Reply {
    let Request::Lock { request, .. } = &t.request else {
        panic!("not a lock request: {t:?}");
    };
    let details = LockOptions::new().ttl(Duration::from_secs(1));
    let req = LockRequest::new("job", request.lock_id.as_str(), &details).unwrap();
    Reply::Granted(
        LockTable::new()
            .lock(&req, Timestamp::from_millis(0))
            .unwrap(),
    )
}

fn events(core: &mut LockerCore<StdRng>) -> Vec<Event> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

fn refused() -> Reply {
    Reply::Refused(Error::AlreadyLocked {
        resource: Resource::new("job").unwrap(),
        retry_in: None,
        queued: None,
    })
}

#[test]
fn a_grant_is_trusted_from_the_send_time_and_renewed_at_the_fraction() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 100);
    assert_eq!(t.deadline, ms(1_000), "sent + ttl - margin");
    c.handle_reply(t.id, grant(&t), ms(150));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::Acquired {
                key: 1,
                trust_until: LocalMs(1_000),
                ..
            }]
        ),
        "{ev:?}"
    );
    assert_eq!(c.poll_timeout(), Some(ms(600)));
    c.handle_timeout(ms(600));
    let renew = c.poll_transmit().unwrap();
    assert!(matches!(renew.request, Request::Renew { .. }));
    assert_eq!(renew.deadline, ms(1_000));
    c.handle_reply(renew.id, Reply::Done, ms(620));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::Renewed {
                key: 1,
                trust_until: LocalMs(1_500)
            }]
        ),
        "{ev:?}"
    );
    assert_eq!(c.stats().renewals, 1);
}

#[test]
fn a_grant_arriving_at_its_trust_deadline_is_released_not_handed_out() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::Forever, 0);
    c.handle_reply(t.id, grant(&t), ms(900));
    assert!(events(&mut c).is_empty(), "no guard");
    let unlock = c.poll_transmit().unwrap();
    let (Request::Lock { request, .. }, Request::Unlock { lock_id, .. }) =
        (&t.request, &unlock.request)
    else {
        panic!("{unlock:?}");
    };
    assert_eq!(
        &request.lock_id, lock_id,
        "the stale grant's lock id is released"
    );
    let next = c.poll_timeout().unwrap();
    assert!(
        (901..=921).contains(&next.as_millis()),
        "asks again after a jittered backoff: {next}"
    );
    c.handle_timeout(next);
    assert!(matches!(
        c.poll_transmit().unwrap().request,
        Request::Lock { .. }
    ));

    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 0);
    c.handle_reply(t.id, grant(&t), ms(950));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::AcquireFailed {
                key: 1,
                error: Error::StaleGrant { .. }
            }]
        ),
        "{ev:?}"
    );
}

#[test]
fn an_unanswered_lock_request_is_released_and_a_waiting_acquire_asks_again() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::Forever, 0);
    assert_eq!(c.poll_timeout(), Some(ms(900)));
    c.handle_timeout(ms(900));
    let unlock = c.poll_transmit().unwrap();
    assert!(matches!(unlock.request, Request::Unlock { .. }));
    assert!(matches!(
        events(&mut c)[..],
        [Event::AttemptFailed {
            key: 1,
            error: Error::NoReply { .. }
        }]
    ));
    // The late reply is ignored: the lock id is being released.
    c.handle_reply(t.id, grant(&t), ms(901));
    assert!(events(&mut c).is_empty());
    c.handle_reply(unlock.id, Reply::Done, ms(905));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::Released {
                key: None,
                result: Ok(())
            }]
        ),
        "{ev:?}"
    );
}

/// A failed lock request whose outcome is known ("not applied") costs nothing more; one
/// whose outcome is unknown is followed by exactly one release write of its lock id.
#[test]
fn only_a_failure_of_unknown_outcome_is_followed_by_a_release() {
    let writes_after = |failure: Error| {
        let mut c = core();
        let t = acquire(&mut c, 1, Wait::No, 0);
        let Request::Lock { request, .. } = &t.request else {
            panic!("not a lock request: {t:?}");
        };
        let lock_id = request.lock_id.clone();
        c.handle_reply(t.id, Reply::Failed(failure), ms(10));
        assert!(
            matches!(
                events(&mut c)[..],
                [Event::AcquireFailed {
                    key: 1,
                    error: Error::Backend { .. }
                }]
            ),
            "the acquire fails with the store's error"
        );
        let sent: Vec<Transmit> = std::iter::from_fn(|| c.poll_transmit()).collect();
        for t in &sent {
            assert!(
                matches!(&t.request, Request::Unlock { lock_id: l, .. } if *l == lock_id),
                "only a release of the attempt's lock id may follow: {t:?}"
            );
        }
        sent.len()
    };
    let down = || std::io::Error::other("connection refused");
    assert_eq!(writes_after(Error::not_applied("xlock", down())), 0);
    assert_eq!(writes_after(Error::backend("xlock", down())), 1);
}

/// An acquire whose deadline has already passed ends with `Timeout` and sends nothing, so
/// the store cannot grant it after the caller was told it timed out.
#[test]
fn an_acquire_past_its_deadline_sends_nothing() {
    let mut c = core();
    for now in [50, 51] {
        c.acquire(
            now,
            ask(Resource::new("job").unwrap()),
            Wait::Until(ms(50)),
            ms(now),
        );
        assert!(c.poll_transmit().is_none(), "nothing is sent");
        assert!(matches!(
            events(&mut c)[..],
            [Event::AcquireFailed {
                error: Error::Timeout { .. },
                ..
            }]
        ));
    }
    assert!(c.is_idle());
}

/// A waiting acquire asks again after failed attempts, and gives up with the last failure
/// once attempts have failed without an answer from the store for `unavailable_timeout`;
/// a refusal (an answer) starts that time again.
#[test]
fn a_waiting_acquire_gives_up_on_a_store_that_stays_unavailable() {
    let down = || Reply::Failed(Error::not_applied("xlock", "no server available"));
    let mut c = core();
    let timeout = ms(0).saturating_add(c.config().unavailable_timeout);
    let mut t = acquire(&mut c, 1, Wait::Forever, 0);
    let mut now = 0;
    let mut failed_attempts = 0;
    let ended = loop {
        c.handle_reply(t.id, down(), ms(now));
        failed_attempts += 1;
        let ev = events(&mut c);
        match &ev[..] {
            [Event::AttemptFailed { key: 1, .. }] => {}
            [Event::AcquireFailed { key: 1, error }] => break (ms(now), error.to_string()),
            other => panic!("{other:?}"),
        }
        if failed_attempts == 3 {
            // An answer of the store: the outage is over, and so is its clock.
            let next = c.poll_timeout().unwrap();
            c.handle_timeout(next);
            now = next.as_millis();
            t = c.poll_transmit().unwrap();
            c.handle_reply(t.id, refused(), ms(now));
            assert!(events(&mut c).is_empty());
        }
        let next = c.poll_timeout().unwrap();
        now = next.as_millis();
        c.handle_timeout(next);
        t = c.poll_transmit().expect("asks again");
        assert!(matches!(t.request, Request::Lock { .. }));
    };
    assert!(ended.0 >= timeout, "not before the timeout: {ended:?}");
    assert!(ended.1.contains("xlock failed"), "{ended:?}");
    assert_eq!(c.stats().acquire_failures, failed_attempts);
    assert!(failed_attempts > 10, "{failed_attempts}");
}

#[test]
fn refusals_back_off_with_full_jitter_doubling_to_the_cap() {
    let mut c = core();
    let mut now = 0;
    let mut t = acquire(&mut c, 1, Wait::Forever, now);
    let mut waits = Vec::new();
    for _ in 0..12 {
        c.handle_reply(t.id, refused(), ms(now));
        let next = c.poll_timeout().unwrap();
        waits.push(next.as_millis() - now);
        now = next.as_millis();
        c.handle_timeout(ms(now));
        t = c.poll_transmit().unwrap();
    }
    assert!(waits.iter().all(|w| (1..=1_000).contains(w)), "{waits:?}");
    assert!(waits[0] <= 20 && waits[1] <= 40, "{waits:?}");
    let distinct: BTreeSet<_> = waits.iter().collect();
    assert!(distinct.len() > 6, "jittered: {waits:?}");
}

#[test]
fn an_unanswered_renewal_ends_the_lease_at_its_trust_deadline() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 0);
    c.handle_reply(t.id, grant(&t), ms(10));
    events(&mut c);
    c.handle_timeout(ms(500));
    assert!(c.poll_transmit().is_some());
    assert_eq!(c.poll_timeout(), Some(ms(900)));
    c.handle_timeout(ms(899));
    assert!(events(&mut c).is_empty());
    c.handle_timeout(ms(900));
    let ev = events(&mut c);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Ended {
                key: 1,
                how: Ended::Expired
            }
        )),
        "{ev:?}"
    );
    assert_eq!(c.stats().lost, 1);
    assert_eq!(c.stats().held, 0);
}

#[test]
fn renewals_falling_due_together_go_out_as_one_batch() {
    let mut c = core();
    for (key, at) in [(1, 0), (2, 10), (3, 20)] {
        let t = acquire(&mut c, key, Wait::No, at);
        c.handle_reply(t.id, grant(&t), ms(at + 1));
    }
    events(&mut c);
    c.handle_timeout(ms(500));
    let batch = c.poll_transmit().unwrap();
    let Request::RenewMany { locks, .. } = &batch.request else {
        panic!("one batch: {batch:?}");
    };
    assert_eq!(locks.len(), 3);
    assert_eq!(batch.deadline, ms(900), "the earliest trust deadline");
    assert!(c.poll_transmit().is_none());
    let done = || Reply::Done;
    let gone = Reply::Refused(Error::LockNotFound);
    c.handle_reply(batch.id, Reply::Each(vec![done(), gone, done()]), ms(520));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [
                Event::Renewed {
                    key: 1,
                    trust_until: LocalMs(1_400)
                },
                Event::RenewFailed { key: 2, .. },
                Event::Ended {
                    key: 2,
                    how: Ended::Refused
                },
                Event::Renewed {
                    key: 3,
                    trust_until: LocalMs(1_400)
                },
            ]
        ),
        "{ev:?}"
    );
}

#[test]
fn a_release_is_retried_until_the_release_timeout() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 0);
    c.handle_reply(t.id, grant(&t), ms(10));
    events(&mut c);
    c.release(1, ms(100));
    let mut attempts = 0;
    let mut now = 100;
    while let Some(u) = c.poll_transmit() {
        attempts += 1;
        c.handle_reply(
            u.id,
            Reply::Failed(Error::backend("unlock", "down")),
            ms(now),
        );
        match c.poll_timeout() {
            Some(next) => {
                now = next.as_millis();
                c.handle_timeout(ms(now));
            }
            None => break,
        }
    }
    assert_eq!(attempts, 10, "every 100 ms for 1 s");
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [
                Event::Ended {
                    key: 1,
                    how: Ended::Released
                },
                Event::Released {
                    key: Some(1),
                    result: Err(_)
                }
            ]
        ),
        "{ev:?}"
    );
    assert!(c.is_idle());
}

#[test]
fn a_cancelled_or_abandoned_acquire_releases_what_it_is_granted() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::Forever, 0);
    c.cancel(1);
    c.handle_reply(t.id, grant(&t), ms(10));
    assert!(events(&mut c).is_empty());
    assert!(matches!(
        c.poll_transmit().unwrap().request,
        Request::Unlock { .. }
    ));

    let mut c = core();
    let t = acquire(&mut c, 1, Wait::Until(ms(50)), 0);
    c.handle_timeout(ms(50));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::AcquireFailed {
                key: 1,
                error: Error::Timeout { .. }
            }]
        ),
        "{ev:?}"
    );
    c.handle_reply(t.id, grant(&t), ms(60));
    assert!(matches!(
        c.poll_transmit().unwrap().request,
        Request::Unlock { .. }
    ));
}

#[test]
fn shutdown_cancels_leases_and_refuses_new_acquires() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 0);
    c.handle_reply(t.id, grant(&t), ms(10));
    events(&mut c);
    c.shutdown();
    c.acquire(2, ask(Resource::new("job").unwrap()), Wait::Forever, ms(20));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [
                Event::Ended {
                    key: 1,
                    how: Ended::Cancelled
                },
                Event::AcquireFailed {
                    key: 2,
                    error: Error::Shutdown
                }
            ]
        ),
        "{ev:?}"
    );
    assert_eq!(c.poll_timeout(), None, "nothing renewed");
}

#[test]
fn a_bad_owner_fails_the_acquire_before_any_request() {
    let mut c = core();
    let mut bad_owner = ask(Resource::new("job").unwrap());
    bad_owner.who = Who::new(LockOptions::new().owner("").holder);
    c.acquire(1, bad_owner, Wait::Forever, ms(0));
    let ev = events(&mut c);
    assert!(
        matches!(
            ev[..],
            [Event::AcquireFailed {
                key: 1,
                error: Error::InvalidArgument { field: "owner", .. }
            }]
        ),
        "{ev:?}"
    );
    assert!(c.poll_transmit().is_none(), "nothing sent");
}

#[test]
fn a_refusal_that_says_when_the_locks_end_is_asked_again_by_then() {
    let mut c = core();
    let mut t = acquire(&mut c, 1, Wait::Forever, 0);
    let mut now = 0;
    // Refusals that cannot tell double the backoff up to `max_backoff` (1 s).
    for _ in 0..8 {
        c.handle_reply(t.id, refused(), ms(now));
        now = c.poll_timeout().unwrap().as_millis();
        c.handle_timeout(ms(now));
        t = c.poll_transmit().unwrap();
    }
    // Each refusal now says the locks in the way end 30 ms after the store decided (at
    // most 5 ms ago, when the reply came): the next attempt comes by `received + 30 ms`,
    // never before the end, not after a backoff of up to a second.
    for _ in 0..10 {
        let sent = now;
        let reply = Reply::Refused(Error::AlreadyLocked {
            resource: Resource::new("job").unwrap(),
            retry_in: Some(Duration::from_millis(30)),
            queued: None,
        });
        c.handle_reply(t.id, reply, ms(sent + 5));
        now = c.poll_timeout().unwrap().as_millis();
        assert!(
            (sent + 6..=sent + 35).contains(&now),
            "asked again at {now}, sent at {sent}"
        );
        c.handle_timeout(ms(now));
        t = c.poll_transmit().unwrap();
    }
    // One whose reply took longer than the locks had left: asked again `retry_in` after the
    // reply, since the store may have decided just before replying.
    let reply = Reply::Refused(Error::AlreadyLocked {
        resource: Resource::new("job").unwrap(),
        retry_in: Some(Duration::from_millis(3)),
        queued: None,
    });
    c.handle_reply(t.id, reply, ms(now + 10));
    assert_eq!(c.poll_timeout().unwrap().as_millis(), now + 13);
}

fn job() -> Resource {
    Resource::new("job").unwrap()
}

/// The head of a fair line whose refusal came back late asks `retry_in` after it sent the
/// attempt (the lock frees about then at the store, however late the reply): here at once,
/// as the reply took longer than `retry_in`; a waiter with others ahead waits on.
#[test]
fn the_head_of_a_line_asks_retry_in_after_its_attempt_was_sent() {
    let refusal = |ahead| {
        Reply::Refused(Error::AlreadyLocked {
            resource: job(),
            retry_in: Some(Duration::from_millis(50)),
            queued: Some(crate::Queued {
                ahead,
                live_ahead: ahead,
                fence: 0,
            }),
        })
    };
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    // Sent at 0; the reply took 80 ms, the lock freed at about 50.
    c.handle_reply(t.id, refusal(0), ms(80));
    assert_eq!(
        c.poll_timeout().unwrap().as_millis(),
        81,
        "the head asks at once"
    );
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    c.handle_reply(t.id, refusal(3), ms(80));
    let behind = c.poll_timeout().unwrap().as_millis();
    assert!(behind > 81, "a waiter behind others waits on ({behind})");
}

/// Refuses the attempt `t` at `now` and returns when the next attempt is due.
fn refuse(c: &mut LockerCore<StdRng>, t: &Transmit, now: u64) -> LocalMs {
    c.handle_reply(t.id, refused(), ms(now));
    assert!(c.poll_transmit().is_none(), "nothing sent at the refusal");
    c.poll_timeout().expect("a waiting acquire asks again")
}

#[test]
fn a_hint_that_the_resource_came_free_makes_a_waiter_ask_at_once() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    assert!(c.is_waiting());
    assert!(refuse(&mut c, &t, 10) > ms(10), "backs off first");
    // Hints about another resource, and grants to others, change nothing.
    c.handle_hint(&Hint::Freed(Resource::new("other").unwrap()), ms(12));
    c.handle_hint(&Hint::Taken(job(), None), ms(12));
    assert!(c.poll_timeout().unwrap() > ms(12));
    c.handle_hint(&Hint::Freed(job()), ms(15));
    assert!(
        matches!(c.poll_transmit().unwrap().request, Request::Lock { .. }),
        "the first hint is acted on at once, without a timer"
    );
    assert!(c.poll_transmit().is_none(), "one attempt");
    // The backoff timer the hint replaced (due by 31 ms) does not fire a second attempt.
    c.handle_timeout(ms(100));
    assert!(
        c.poll_transmit().is_none(),
        "the replaced backoff timer is dropped"
    );
}

#[test]
fn a_hint_during_an_attempt_makes_its_refusal_ask_again_at_once() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    c.handle_hint(&Hint::Freed(job()), ms(3));
    assert!(
        c.poll_transmit().is_none(),
        "no second attempt while one is in flight"
    );
    c.handle_reply(t.id, refused(), ms(5));
    let t = c
        .poll_transmit()
        .expect("asked again at once: the refusal may predate the release");
    // A grant to somebody else heard during the attempt cancels that.
    c.handle_hint(&Hint::Freed(job()), ms(6));
    c.handle_hint(&Hint::Taken(job(), None), ms(7));
    assert!(refuse(&mut c, &t, 8) > ms(8), "back to the backoff");
}

#[test]
fn waiters_whose_hinted_attempts_lose_spread_out_and_go_back_to_backoff_on_a_grant() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse(&mut c, &t, 1);
    c.handle_hint(&Hint::Freed(job()), ms(2));
    let t = c.poll_transmit().unwrap();
    // Refused: somebody woken by the same hint was first. The next hint waits up to
    // `hint_spread` (2 ms), then 4 ms...
    refuse(&mut c, &t, 3);
    c.handle_hint(&Hint::Freed(job()), ms(10));
    let at = c.poll_timeout().unwrap();
    assert!((10..=12).contains(&at.as_millis()), "{at}");
    // Somebody was granted before that delay ended: back to the backoff.
    c.handle_hint(&Hint::Taken(job(), None), ms(10));
    assert!(c.poll_timeout().unwrap() > ms(12));
    // A lost hint is covered: `Missed` wakes every waiter.
    c.handle_hint(&Hint::Missed, ms(20));
    assert!(
        c.poll_transmit().is_some() || c.poll_timeout().unwrap() <= ms(24),
        "asked again within the hint delay"
    );
}

#[test]
fn racing_waiters_never_act_on_hints() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::Forever, 0);
    assert!(
        c.is_waiting() && !c.wants_hints(),
        "a racing waiter wants no hints"
    );
    let due = refuse(&mut c, &t, 10);
    for hint in [Hint::Freed(job()), Hint::Missed, Hint::Taken(job(), None)] {
        c.handle_hint(&hint, ms(12));
        assert!(c.poll_transmit().is_none(), "{hint:?} woke a racing waiter");
        assert_eq!(c.poll_timeout(), Some(due), "{hint:?} moved its backoff");
    }
    // Hints heard or not, it polls on its backoff (20 ms at first), not as a safety net.
    c.handle_timeout(due);
    let t = c.poll_transmit().expect("it polls");
    assert!(refuse(&mut c, &t, due.as_millis()) <= ms(due.as_millis() + 40));
}

#[test]
fn hints_do_not_touch_one_shot_acquires_or_held_locks() {
    let mut c = core();
    let t = acquire(&mut c, 1, Wait::No, 0);
    assert!(!c.is_waiting(), "a one-shot acquire does not wait");
    c.handle_hint(&Hint::Freed(job()), ms(1));
    c.handle_reply(t.id, grant(&t), ms(2));
    let _ = events(&mut c);
    let due = c.poll_timeout();
    c.handle_hint(&Hint::Missed, ms(3));
    assert_eq!(c.poll_timeout(), due, "a held lock's schedule is unchanged");
    assert!(c.poll_transmit().is_none());
}

/// A fair waiting acquire of `job` under `key` at `now`, and its first attempt.
fn acquire_fair(c: &mut LockerCore<StdRng>, key: LeaseKey, wait: Wait, now: u64) -> Transmit {
    let ask = Ask {
        fair: true,
        ..ask(job())
    };
    c.acquire(key, ask, wait, ms(now));
    c.poll_transmit().expect("a lock request")
}

/// The ticket (secret) a lock request carries, if fair.
fn ticket(t: &Transmit) -> Option<LockId> {
    fair_ticket(t).map(|f| f.id)
}

/// The whole ticket a lock request carries, if fair.
fn fair_ticket(t: &Transmit) -> Option<crate::Ticket> {
    match &t.request {
        Request::Lock { request, .. } => request.fair.clone(),
        other => panic!("not a lock request: {other:?}"),
    }
}

/// Refuses `t` at `now` with the waiter's place (`ahead` waiters before it).
fn refuse_queued(c: &mut LockerCore<StdRng>, t: &Transmit, ahead: u32, now: u64) -> LocalMs {
    let reply = Reply::Refused(Error::AlreadyLocked {
        resource: job(),
        retry_in: None,
        queued: Some(crate::Queued {
            ahead,
            live_ahead: ahead,
            fence: 0,
        }),
    });
    c.handle_reply(t.id, reply, ms(now));
    assert!(c.poll_transmit().is_none(), "nothing sent at the refusal");
    c.poll_timeout().expect("a waiting acquire asks again")
}

#[test]
fn a_fair_acquire_keeps_one_ticket_and_asks_again_in_time_to_keep_its_place() {
    let mut one_shot = core();
    let ask = Ask {
        fair: true,
        ..ask(job())
    };
    one_shot.acquire(9, ask, Wait::No, ms(0));
    assert_eq!(
        ticket(&one_shot.poll_transmit().unwrap()),
        None,
        "one-shot: no place"
    );
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    let first = ticket(&t).expect("fair");
    let lease = c.config().queue_ttl;
    // Heard no hints yet: it polls on its backoff, but never later than half the place's
    // lease after the attempt that kept it was sent. Three places ahead in a line that
    // does not move: once it knows the pace, it keeps its place far back, stale, with a
    // lease four times as long (it is only three places back), and asks four times as
    // rarely.
    let mut sent = 0;
    let mut t = t;
    let mut far_keeps = 0;
    for _ in 0..20 {
        let kept = fair_ticket(&t).expect("fair");
        let due = refuse_queued(&mut c, &t, 3, sent + 5);
        assert!(
            due <= ms(sent + duration_millis(kept.ttl.as_duration()) / 2),
            "{due} after {sent}"
        );
        if kept.claim.is_none() {
            far_keeps += 1;
            assert_eq!(
                kept.ttl.as_duration(),
                lease * 4,
                "far back: a longer lease"
            );
            assert_eq!(
                due,
                ms(sent + duration_millis(lease) * 2),
                "and a keep as rare"
            );
        } else {
            assert_eq!(kept.ttl.as_duration(), lease);
            assert_eq!(
                kept.claim,
                Some(kept.ttl),
                "near: a claim lease of the place's"
            );
        }
        c.handle_timeout(due);
        t = c.poll_transmit().expect("asked again");
        assert_eq!(
            ticket(&t).as_ref(),
            Some(&first),
            "the same ticket every attempt"
        );
        sent = due.as_millis();
    }
    assert!(far_keeps >= 3, "{far_keeps} keeps far back of 20");
}

#[test]
fn a_fair_waiter_behind_others_leaves_releases_to_them_and_moves_up_on_grants() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, 2, 5);
    // It hears the store (any hint): from now on it does not poll while others are ahead.
    c.handle_hint(&Hint::Freed(job()), ms(6));
    assert!(
        c.poll_transmit().is_none(),
        "two waiters ahead: the release is theirs"
    );
    c.handle_timeout(c.poll_timeout().unwrap());
    let t = c
        .poll_transmit()
        .expect("the backoff planned before it heard a hint");
    let due = refuse_queued(&mut c, &t, 2, 60);
    let lease = duration_millis(c.config().queue_ttl);
    assert!(
        due.as_millis() >= 50 + lease / 2 - 50,
        "no poll, only keeping its place: {due}"
    );
    // Two grants to the waiters ahead: now it is first, and acts on the next release.
    c.handle_hint(&Hint::Taken(job(), None), ms(70));
    c.handle_hint(&Hint::Freed(job()), ms(71));
    assert!(c.poll_transmit().is_none(), "one waiter still ahead");
    c.handle_hint(&Hint::Taken(job(), None), ms(72));
    assert!(
        c.poll_transmit().is_none(),
        "an exclusive waiter waits for the release"
    );
    c.handle_hint(&Hint::Freed(job()), ms(80));
    assert!(
        matches!(c.poll_transmit().unwrap().request, Request::Lock { .. }),
        "first in line: asks at once"
    );
}

#[test]
fn a_new_acquire_relies_on_hints_already_heard_until_they_end() {
    // A waiter that never heard a hint polls on its backoff (20 ms at first).
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    assert!(refuse(&mut c, &t, 1) <= ms(1 + 20));
    // The subscription began (it starts with `Missed`), then an acquire: it polls only as a
    // safety net, although no hint came since it began.
    let mut c = core();
    let max = duration_millis(c.config().max_backoff);
    c.handle_hint(&Hint::Missed, ms(2));
    let t = acquire_fair(&mut c, 2, Wait::Forever, 3);
    let due = refuse(&mut c, &t, 4);
    assert!(due >= ms(4 + max / 2), "{due}");
    // The stream ended: every waiter asks once, then polls on its backoff.
    c.hints_ended(ms(5));
    let t = c
        .poll_transmit()
        .expect("asked once: hints may have been lost");
    assert!(refuse(&mut c, &t, 6) <= ms(6 + 40));
}

#[test]
fn a_fair_waiter_told_it_is_first_acts_whatever_its_count() {
    let first = |taken| Hint::First {
        resource: job(),
        taken,
        place: None,
        grant: None,
    };
    // Exclusive, three ahead as last counted: the store wakes only the first waiter's
    // process, so the grants to those three were never heard.
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, 3, 5);
    c.handle_hint(&Hint::Freed(job()), ms(6));
    assert!(c.poll_transmit().is_none(), "three ahead: not its release");
    c.handle_hint(&first(true), ms(7));
    assert!(
        c.poll_transmit().is_none(),
        "first after a grant: an exclusive waiter waits for the release"
    );
    c.handle_hint(&first(false), ms(8));
    let t = c.poll_transmit().expect("its turn: asks at once");
    assert!(matches!(t.request, Request::Lock { .. }));
    // Refused all the same (the store's answer decides): it counts again from the reply.
    refuse_queued(&mut c, &t, 1, 9);
    c.handle_hint(&Hint::Freed(job()), ms(10));
    assert!(c.poll_transmit().is_none(), "one ahead again");

    // Shared: first after a grant, it may share the lock, so it asks at once.
    let mut c = core();
    let ask = Ask {
        fair: true,
        access: Access::Shared(None),
        ..ask(job())
    };
    c.acquire(1, ask, Wait::Forever, ms(0));
    let t = c.poll_transmit().unwrap();
    refuse_queued(&mut c, &t, 3, 5);
    c.handle_hint(&first(true), ms(6));
    assert!(
        c.poll_transmit().is_some(),
        "a shared waiter first after a grant asks at once"
    );
}

#[test]
fn of_two_fair_waiters_here_only_the_one_named_first_acts() {
    let mut c = core();
    let t1 = acquire_fair(&mut c, 1, Wait::Forever, 0);
    let t2 = acquire_fair(&mut c, 2, Wait::Forever, 0);
    let (k1, k2) = (ticket(&t1).unwrap(), ticket(&t2).unwrap());
    assert_ne!(
        k1.place_tag(),
        k2.place_tag(),
        "this seed draws tickets with distinct tags"
    );
    refuse_queued(&mut c, &t1, 4, 5);
    refuse_queued(&mut c, &t2, 5, 5);
    c.handle_hint(
        &Hint::First {
            resource: job(),
            taken: false,
            place: Some(k2.place_tag()),
            grant: None,
        },
        ms(6),
    );
    let t = c.poll_transmit().expect("the waiter named asks");
    assert_eq!(ticket(&t), Some(k2), "only the waiter named");
    assert!(c.poll_transmit().is_none(), "the other one is behind it");
}

#[test]
fn a_fair_acquire_that_stops_waiting_gives_its_place_up() {
    for stop in ["cancel", "timeout", "shutdown"] {
        let mut c = core();
        let t = acquire_fair(&mut c, 1, Wait::Until(ms(500)), 0);
        let own = ticket(&t).unwrap();
        refuse_queued(&mut c, &t, 1, 5);
        match stop {
            "cancel" => c.cancel(1),
            "timeout" => c.handle_timeout(ms(500)),
            _ => c.shutdown(),
        }
        // (An attempt may fall due at the same instant as the deadline: it goes out first.)
        let leave = std::iter::from_fn(|| c.poll_transmit())
            .find(|t| !matches!(t.request, Request::Lock { .. }))
            .expect("a request to leave the queue");
        match leave.request {
            Request::LeaveQueue { resource, ticket } => {
                assert_eq!(resource, job());
                assert_eq!(ticket, own, "{stop}");
            }
            other => panic!("{stop}: {other:?}"),
        }
        c.handle_reply(leave.id, Reply::Done, ms(600));
    }
    // One that never was refused has no place to give up.
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    c.handle_reply(t.id, grant(&t), ms(1));
    let _ = events(&mut c);
    assert!(c.poll_transmit().is_none());
}

#[test]
fn grants_hinted_around_a_refusal_move_a_fair_waiter_by_their_fences() {
    let refuse_at = |c: &mut LockerCore<StdRng>, t: &Transmit, ahead: u32, fence: u64, now| {
        let reply = Reply::Refused(Error::AlreadyLocked {
            resource: job(),
            retry_in: None,
            queued: Some(crate::Queued {
                ahead,
                live_ahead: ahead,
                fence,
            }),
        });
        c.handle_reply(t.id, reply, ms(now));
    };
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    // While the attempt is in flight: a grant the refusal counted (fence 10) and one after
    // it (fence 12), each heard before the reply.
    c.handle_hint(&Hint::Taken(job(), Some(10)), ms(1));
    c.handle_hint(&Hint::Taken(job(), Some(12)), ms(2));
    refuse_at(&mut c, &t, 2, 11, 3);
    // One waiter ahead now (2, less the grant at 12); a grant hinted twice counts once, and
    // an old one not at all.
    c.handle_hint(&Hint::Taken(job(), Some(12)), ms(4));
    c.handle_hint(&Hint::Taken(job(), Some(9)), ms(4));
    c.handle_hint(&Hint::Freed(job()), ms(5));
    assert!(c.poll_transmit().is_none(), "one waiter still ahead");
    c.handle_hint(&Hint::Taken(job(), Some(13)), ms(6));
    c.handle_hint(&Hint::Freed(job()), ms(7));
    assert!(
        matches!(c.poll_transmit().unwrap().request, Request::Lock { .. }),
        "first in line after the grant at 13: asks at once"
    );
}

#[test]
fn a_fair_waiter_far_back_in_a_slow_line_stops_listening_and_only_keeps_its_place() {
    let mut c = core();
    let every = duration_millis(c.config().queue_ttl) / 2;
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    assert!(
        !c.wants_hints(),
        "no answer yet: the answer is what it waits for"
    );
    refuse_queued(&mut c, &t, 40, 5);
    assert!(c.wants_hints(), "one refusal does not tell the line's pace");
    c.handle_hint(&Hint::Missed, ms(6));
    let t = c.poll_transmit().expect("a missed hint: it asks once");
    refuse_queued(&mut c, &t, 40, 10);
    assert!(
        c.wants_hints(),
        "a line that did not move in 6 ms may still move fast"
    );
    c.handle_hint(&Hint::Missed, ms(3_000));
    let t = c.poll_transmit().expect("a missed hint: it asks once");
    // Between the attempts' sending (two keep-place intervals apart: enough to judge the
    // pace on) the line moved one place in 3 s: 38 to go take some 114 s, more than the
    // time to the next keep.
    let due = refuse_queued(&mut c, &t, 39, 3_010);
    assert!(!c.wants_hints(), "far back: its process need not listen");
    assert_eq!(due, ms(3_000 + every), "it asks only to keep its place");
    for hint in [Hint::Missed, Hint::Freed(job())] {
        c.handle_hint(&hint, ms(3_200));
        assert!(
            c.poll_transmit().is_none(),
            "{hint:?} woke a waiter far back"
        );
        assert_eq!(c.poll_timeout(), Some(due));
    }
    // Told it is first (the store handed it the lock): it acts on that at once.
    let tag = ticket(&t).unwrap().place_tag();
    c.handle_hint(
        &Hint::First {
            resource: job(),
            taken: false,
            place: Some(tag),
            grant: None,
        },
        ms(3_300),
    );
    assert!(c.poll_transmit().is_some(), "a handoff reaches it");
}

#[test]
fn a_fair_waiter_in_a_fast_line_or_near_the_head_keeps_listening() {
    // 40 places moved in 3 s: the head is about 3 s away, within two keeps.
    let (c, _) = two_refusals(80, 40);
    assert!(c.wants_hints(), "near its turn: it listens");
    // 10 places in 3 s, 30 to go: 9 s away, six keeps. A waiter that listens goes far back
    // only past eight keeps (12 s), so it goes on listening...
    let (c, _) = two_refusals(41, 31);
    assert!(c.wants_hints(), "9 s away, listening: it keeps listening");
    // ... and one far back comes near again only within four keeps (6 s).
    let (mut c, due) = two_refusals(41, 40);
    assert!(!c.wants_hints(), "1 place in 3 s, 39 to go: far back");
    assert_eq!(
        due,
        ms(4_500),
        "the first keep far back: at the near interval"
    );
    c.handle_timeout(due);
    let t = c.poll_transmit().expect("it keeps its place");
    // Far back in a line that moves, it keeps its place every four intervals, whatever its
    // distance.
    assert_eq!(
        fair_ticket(&t).unwrap().ttl.as_duration(),
        c.config().queue_ttl * 4
    );
    let due = refuse_queued(&mut c, &t, 35, 4_510);
    assert_eq!(
        due,
        ms(4_500 + 4 * 1_500),
        "a keep as rare as its lease is long"
    );
    assert!(
        !c.wants_hints(),
        "6 places in 4.5 s, 34 to go: 25 s away, still far back"
    );
    c.handle_timeout(due);
    let t = c.poll_transmit().expect("it keeps its place");
    refuse_queued(&mut c, &t, 3, due.as_millis() + 10);
    assert!(
        c.wants_hints(),
        "38 places in 10.5 s, 2 to go: under a second away, near again"
    );
    // A line that does not move, with one waiter ahead: near the head all the same.
    let (c, _) = two_refusals(1, 1);
    assert!(c.wants_hints(), "next in line: it listens");
    // Far back, then moved up by grants heard for another waiter: near again.
    let (mut c, _) = two_refusals(3, 3);
    assert!(!c.wants_hints());
    for (i, fence) in [(1, 10), (2, 11)] {
        c.handle_hint(&Hint::Taken(job(), Some(fence)), ms(3_010 + i));
    }
    assert!(c.wants_hints(), "one place ahead: near the head");
}

/// A fair waiter refused with `first` waiters ahead (its attempt sent at 0), then, asked
/// again by a `Missed` hint at 3 s (two keep-place intervals: enough to judge the pace
/// on), with `then` ahead; and when it asks next.
fn two_refusals(first: u32, then: u32) -> (LockerCore<StdRng>, LocalMs) {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, first, 5);
    c.handle_hint(&Hint::Missed, ms(3_000));
    let t = c.poll_transmit().expect("a missed hint: it asks once");
    let due = refuse_queued(&mut c, &t, then, 3_010);
    (c, due)
}

#[test]
fn a_fair_waiter_that_hears_no_hints_polls_afresh_once_it_is_next() {
    let mut c = core();
    let mut t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    // Behind two others, hearing nothing: its backoff doubles (20, 40, 80, 160 ms...).
    let mut now = 0;
    for _ in 0..6 {
        let due = refuse_queued(&mut c, &t, 2, now + 1);
        c.handle_timeout(due);
        t = c.poll_transmit().expect("it polls");
        now = due.as_millis();
    }
    // Next in line: it polls within the first backoff (20 ms) again.
    let due = refuse_queued(&mut c, &t, 0, now + 1);
    assert!(
        due <= ms(now + 1 + 20),
        "the head polls afresh: {due} after {now}"
    );
}

#[test]
fn a_fair_waiter_far_back_in_a_long_line_that_does_not_move_keeps_its_place_rarely() {
    // 40 places ahead, then 40 again 3 s later: the line does not move.
    let (mut c, due) = two_refusals(40, 40);
    assert!(!c.wants_hints(), "far back");
    c.handle_timeout(due);
    let t = c.poll_transmit().expect("it keeps its place");
    let far = fair_ticket(&t).unwrap();
    assert_eq!(far.claim, None, "kept far back: stale");
    assert_eq!(
        far.ttl.as_duration(),
        c.config().queue_ttl * 20,
        "one interval per two places ahead"
    );
    let due = refuse_queued(&mut c, &t, 40, due.as_millis() + 10);
    assert_eq!(due, ms(4_500 + 20 * 1_500));
    // 3,000 places ahead: the longest place lease there is.
    let (mut c, due) = two_refusals(3_000, 3_000);
    c.handle_timeout(due);
    let t = c.poll_transmit().expect("it keeps its place");
    assert_eq!(
        fair_ticket(&t).unwrap().ttl.as_duration(),
        crate::queue::MAX_QUEUE_TTL
    );
    let due = refuse_queued(&mut c, &t, 3_000, due.as_millis() + 10);
    assert_eq!(due, ms(4_500 + 300_000), "half the longest lease");
}

#[test]
fn a_fair_waiter_whose_keep_place_attempts_fail_backs_off() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, 1, 5);
    // It hears hints (so it does not poll): it asks again only to keep its place.
    c.handle_hint(&Hint::Missed, ms(6));
    let t = c.poll_transmit().expect("a missed hint: it asks once");
    let keep = refuse_queued(&mut c, &t, 1, 10);
    assert_eq!(keep, ms(6 + 1_500), "the keep");
    // Its keep falls due, and every attempt from then on fails (the store answers with an
    // error): the keep is overdue after each, but the retries follow the backoff, not a
    // loop of requests.
    c.handle_timeout(keep);
    let mut now = keep.as_millis();
    for _ in 0..8 {
        let t = c.poll_transmit().expect("it asks again");
        c.handle_reply(
            t.id,
            Reply::Failed(Error::backend("xlock", "down")),
            ms(now + 5),
        );
        while c.poll_event().is_some() {}
        let next = c.poll_timeout().expect("it asks again");
        c.handle_timeout(next);
        now = next.as_millis();
    }
    assert!(
        now >= keep.as_millis() + 100,
        "8 failed attempts in {} ms after the keep fell due",
        now - keep.as_millis()
    );
}

/// A hint that the store handed the place of `t`'s ticket the lock, with `fence`, at the
/// store's `at` ms, with a claim lease of `lease` ms.
fn handed(t: &Transmit, fence: u64, at: u64, lease: u64) -> Hint {
    Hint::First {
        resource: job(),
        taken: false,
        place: Some(ticket(t).unwrap().place_tag()),
        grant: Some(crate::HandedLock {
            fence,
            created_at: Timestamp::from_millis(at),
            expires_at: Some(Timestamp::from_millis(at + lease)),
        }),
    }
}

#[test]
fn a_fair_waiter_a_hint_hands_the_lock_holds_it_at_once_and_claims_it_with_its_first_renewal() {
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 10);
    let lock_id = match &t.request {
        Request::Lock { request } => request.lock_id.clone(),
        _ => unreachable!(),
    };
    refuse_queued(&mut c, &t, 0, 15);
    c.handle_hint(&handed(&t, 1, 1_000, 3_000), ms(400));
    assert!(c.poll_transmit().is_none(), "held without asking");
    let acquired = events(&mut c);
    let [
        Event::Acquired {
            key: 1,
            status,
            trust_until,
        },
    ] = acquired.as_slice()
    else {
        panic!("{acquired:?}");
    };
    // Trusted from the refusal's send time, for the claim lease (here the acquire's TTL of
    // 1 s, which is shorter), less the drift margin: the handoff came after the refusal.
    assert_eq!(*trust_until, ms(10 + 1_000 - 100));
    assert_eq!((status.fence, &status.lock_id), (1, &lock_id));
    assert_eq!(status.created_at, Timestamp::from_millis(1_000));
    assert_eq!(c.stats().handed_by_hint, 1);
    assert_eq!(c.stats().held, 1);
    // Its first renewal claims it for the TTL, at renew_fraction of that lease.
    assert_eq!(c.poll_timeout(), Some(ms(10 + 500)));
    c.handle_timeout(ms(510));
    let renew = c.poll_transmit().expect("the claim");
    match renew.request {
        Request::Renew { lock, .. } => {
            assert_eq!((lock.lock_id, lock.ttl), (lock_id, ttl()));
        }
        other => panic!("{other:?}"),
    }
    // The same hint again (duplicated) does nothing.
    c.handle_hint(&handed(&t, 1, 1_000, 3_000), ms(520));
    assert!(c.poll_transmit().is_none() && events(&mut c).is_empty());
}

#[test]
fn a_hint_that_hands_the_lock_is_trusted_only_when_sound() {
    // Each case: the waiter only asks at once (and its reply claims the lock).
    let asks_instead = |c: &mut LockerCore<StdRng>, why: &str| {
        assert!(events(c).is_empty(), "{why}: held on the hint");
        assert_eq!(c.stats().handed_by_hint, 0, "{why}");
        let t = c.poll_transmit();
        assert!(
            matches!(t.map(|t| t.request), Some(Request::Lock { .. })),
            "{why}: it asks"
        );
    };
    // A handoff older than the refusal (its fence is no higher than the refusal's): the
    // place was taken anew since.
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    let reply = Reply::Refused(Error::AlreadyLocked {
        resource: job(),
        retry_in: None,
        queued: Some(crate::Queued {
            ahead: 0,
            live_ahead: 0,
            fence: 7,
        }),
    });
    c.handle_reply(t.id, reply, ms(5));
    c.handle_hint(&handed(&t, 7, 1_000, 3_000), ms(20));
    asks_instead(&mut c, "an old handoff");
    // So little trust left that the claim could not be renewed (the renew margin is 100 ms).
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Until(ms(5_000)), 0);
    refuse_queued(&mut c, &t, 0, 5);
    c.handle_hint(&handed(&t, 1, 1_000, 3_000), ms(850));
    asks_instead(&mut c, "too late");
    // An attempt in flight: its reply decides.
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, 0, 5);
    c.handle_hint(&Hint::Missed, ms(6));
    let second = c.poll_transmit().expect("asks once after Missed");
    c.handle_hint(&handed(&t, 1, 1_000, 3_000), ms(7));
    assert!(events(&mut c).is_empty() && c.stats().handed_by_hint == 0);
    c.handle_reply(second.id, grant(&second), ms(8));
    assert!(matches!(
        events(&mut c).as_slice(),
        [Event::Acquired { .. }]
    ));
    // A claim lease so short that its first renewal, at half of it, would find less than
    // the renew margin (100 ms) left: the store would refuse to renew it.
    let config = LockerConfig {
        queue_ttl: Duration::from_millis(150),
        ..LockerConfig::default()
    };
    let mut c =
        LockerCore::new(config, Duration::from_millis(100), StdRng::seed_from_u64(7)).unwrap();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    refuse_queued(&mut c, &t, 0, 5);
    c.handle_hint(&handed(&t, 1, 1_000, 150), ms(6));
    asks_instead(&mut c, "a claim lease too short to renew");
    // No refusal yet: no place to have been handed anything from.
    let mut c = core();
    let t = acquire_fair(&mut c, 1, Wait::Forever, 0);
    c.handle_hint(&handed(&t, 1, 1_000, 3_000), ms(7));
    assert!(events(&mut c).is_empty() && c.stats().handed_by_hint == 0);
}
