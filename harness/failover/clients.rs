//! The contending clients: `Client` tasks (xlock or slock, renew by hand, unlock) and
//! `Locker` tasks (waiting acquire, background renewal, `lost()`), each recording its grants
//! for the observer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwright::{
    Access, Client, Error, LockGuard, LockId, LockOptions, Locker, MongoStore, generate_lock_id,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::observer::{
    Holding, Kind, Op, Shared, Stop, lost_why, probe, record_probe, resource_name,
};

/// With `--break-holding-rule`: how long a Client holder goes on trusting (and holding) its
/// lock past its expiry plus the takeover grace, when another client may take it over.
const BROKEN_WINDOW: Duration = Duration::from_secs(2);

/// A hold time: mostly short, a share `long` of them across several renewals.
pub(crate) fn hold_time(rng: &mut StdRng, long: f64) -> Duration {
    if rng.random_bool(long) {
        Duration::from_millis(rng.random_range(1000..3000))
    } else {
        Duration::from_millis(rng.random_range(10..150))
    }
}

/// Sleeps a random time below `cap` (full jitter).
pub(crate) async fn jitter(rng: &mut StdRng, cap: Duration) {
    let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX).max(2);
    tokio::time::sleep(Duration::from_millis(rng.random_range(1..ms))).await;
}

/// Unlocks `lock_id`, bounded; errors are counted (the lock then expires by its TTL).
pub(crate) async fn unlock(sh: &Shared, client: &Client<MongoStore>, lock_id: &LockId) {
    match tokio::time::timeout(sh.args.op_timeout(), client.unlock(lock_id)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => sh.error(Op::Unlock, Some(&e)),
        Err(_) => sh.error(Op::Unlock, None),
    }
}

/// A client that calls `xlock`/`slock`, renews by hand, and unlocks.
pub(crate) async fn client_task(id: usize, sh: Shared, client: Client<MongoStore>) {
    let mut rng = StdRng::from_os_rng();
    let args = Arc::clone(&sh.args);
    let (ttl, margin) = (args.ttl(), args.margin());
    let mut backoff = Duration::from_millis(10);
    let mut last_grant = Instant::now();
    while Instant::now() < sh.stop_at {
        let resource = args.pick_resource(id, last_grant, &mut rng);
        let exclusive = rng.random_bool(args.exclusive_share);
        let lock_id = generate_lock_id();
        let details = LockOptions::new().owner(format!("client-{id}")).ttl(ttl);
        let name = resource_name(resource);
        let op = if exclusive { Op::Xlock } else { Op::Slock };
        let sent = Instant::now();
        let call = async {
            if exclusive {
                client.lock(&name, &lock_id, &details).await
            } else {
                client
                    .lock(
                        &name,
                        &lock_id,
                        &details.clone().access(
                            Access::shared(Some(args.shared_limit)).expect("checked when parsed"),
                        ),
                    )
                    .await
            }
        };
        let status = match tokio::time::timeout(args.op_timeout(), call).await {
            Ok(Ok(status)) => status,
            Ok(Err(Error::AlreadyLocked { .. })) => {
                sh.obs().refusals += 1;
                jitter(&mut rng, backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
            Ok(Err(e)) => {
                sh.error(op, Some(&e));
                sh.obs().unknown += 1;
                unlock(&sh, &client, &lock_id).await;
                jitter(&mut rng, Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                sh.error(op, None);
                sh.obs().unknown += 1;
                unlock(&sh, &client, &lock_id).await;
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        let start = Instant::now();
        last_grant = start;
        // Breaking the rule: trusting the lock past the instant another client may take it
        // over, its expiry plus the takeover grace, for two seconds more (a window wide enough
        // for a contender's retry or a waiter's poll to land in it).
        let mut trust_end = if args.break_holding_rule {
            sent + ttl + args.grace() + BROKEN_WINDOW
        } else {
            sent + ttl - margin
        };
        let mut holding = Holding {
            client: id,
            kind: Kind::Client,
            resource,
            exclusive,
            fence: status.fence,
            sent,
            start,
            end: start,
            stop: Stop::NeverTrusted,
        };
        if start >= trust_end {
            sh.obs().holdings.push(holding);
            unlock(&sh, &client, &lock_id).await;
            continue;
        }
        let hold_until = if args.break_holding_rule {
            start + ttl + args.grace() + BROKEN_WINDOW
        } else {
            start + hold_time(&mut rng, args.long_hold_share)
        };
        // One status probe at a random point of the hold; renewals at half the TTL.
        let mut probe_at = Some(start + (hold_until - start).mul_f64(rng.random_range(0.0..1.0)));
        let mut renew_at = (!args.break_holding_rule).then(|| sent + ttl / 2);
        let stop = loop {
            let now = Instant::now();
            if now >= trust_end {
                break Stop::Deadline;
            }
            if now >= hold_until {
                break Stop::Released;
            }
            if probe_at.is_some_and(|t| now >= t) {
                probe_at = None;
                let p = probe(&sh, &client, &lock_id, resource, status.fence, || {
                    Instant::now() < trust_end
                })
                .await;
                let gone = record_probe(&sh, &p, || {
                    format!(
                        "client {id} (Client) fence {} on {name}: status did not list it at {:.3} s \
                         while trusted until {:.3} s",
                        status.fence,
                        sh.secs(Instant::now()),
                        sh.secs(trust_end)
                    )
                });
                if gone {
                    holding.end = Instant::now().min(trust_end);
                    break Stop::Gone;
                }
                continue;
            }
            if renew_at.is_some_and(|t| now >= t) {
                let renew_sent = Instant::now();
                let budget = trust_end.saturating_duration_since(renew_sent);
                match tokio::time::timeout(budget, client.renew(&lock_id, ttl)).await {
                    Ok(Ok(_)) => {
                        sh.obs().renewals += 1;
                        trust_end = trust_end.max(renew_sent + ttl - margin);
                        renew_at = Some(renew_sent + ttl / 2);
                    }
                    Ok(Err(Error::LockNotFound)) => {
                        sh.error(Op::Renew, Some(&Error::LockNotFound));
                        if Instant::now() < trust_end {
                            sh.obs().lost.push(format!(
                                "client {id} (Client) fence {} on {name}: renew said LockNotFound \
                                 at {:.3} s while trusted until {:.3} s",
                                status.fence,
                                sh.secs(Instant::now()),
                                sh.secs(trust_end)
                            ));
                            holding.end = Instant::now();
                            break Stop::Gone;
                        }
                        sh.obs().renew_refused.1 += 1;
                        renew_at = None;
                    }
                    Ok(Err(e)) => {
                        // NotRenewable: the lock is there but within the renew margin; stop
                        // renewing. A backend error: try again shortly.
                        let refused = matches!(e, Error::NotRenewable { .. });
                        sh.error(Op::Renew, Some(&e));
                        if refused {
                            sh.obs().renew_refused.0 += 1;
                        }
                        renew_at = if refused {
                            None
                        } else {
                            Some(Instant::now() + Duration::from_millis(100))
                        };
                    }
                    Err(_) => {
                        // The budget ran out: the trust deadline has passed.
                        sh.error(Op::Renew, None);
                        renew_at = None;
                    }
                }
                continue;
            }
            let mut next = hold_until.min(trust_end);
            for t in [probe_at, renew_at].into_iter().flatten() {
                next = next.min(t);
            }
            tokio::time::sleep_until(next.into()).await;
        };
        holding.stop = stop;
        holding.end = match stop {
            Stop::Released => Instant::now().min(trust_end),
            Stop::Deadline => trust_end,
            _ => holding.end,
        };
        sh.obs().holdings.push(holding);
        unlock(&sh, &client, &lock_id).await;
    }
}

/// A client that goes through a `Locker`: acquire, hold while watching `lost()`, release.
pub(crate) async fn locker_task(id: usize, sh: Shared, locker: Locker<MongoStore>) {
    let mut rng = StdRng::from_os_rng();
    let args = Arc::clone(&sh.args);
    let ttl = args.ttl();
    let mut last_grant = Instant::now();
    while Instant::now() < sh.stop_at {
        let resource = args.pick_resource(id, last_grant, &mut rng);
        let exclusive = rng.random_bool(args.exclusive_share);
        let access = if exclusive {
            Access::Exclusive
        } else {
            Access::shared(Some(args.shared_limit)).expect("checked when parsed")
        };
        let name = resource_name(resource);
        let called = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(args.acquire_wait_ms);
        let acquired = tokio::time::timeout(
            args.op_timeout(),
            locker.acquire_until(&name, &LockOptions::exclusive(ttl).access(access), deadline),
        )
        .await;
        let guard = match acquired {
            Ok(Ok(guard)) => guard,
            Ok(Err(Error::Timeout { .. })) => {
                sh.obs().refusals += 1;
                continue;
            }
            Ok(Err(e)) => {
                // The Locker releases whatever such a request may have been granted.
                sh.error(Op::Acquire, Some(&e));
                sh.obs().unknown += 1;
                jitter(&mut rng, Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                sh.error(Op::Acquire, None);
                sh.obs().unknown += 1;
                continue;
            }
        };
        let start = Instant::now();
        last_grant = start;
        let holding = hold_guard(
            id,
            &sh,
            &mut rng,
            (locker.client(), &guard),
            (resource, exclusive),
            called,
            start,
        )
        .await;
        sh.obs().holdings.push(holding);
        match tokio::time::timeout(args.op_timeout(), guard.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => sh.error(Op::Release, Some(&e)),
            Err(_) => sh.error(Op::Release, None),
        }
    }
    locker.shutdown();
}

/// Holds a `Locker` guard: acts (checks `is_held()`) every 10 ms until the hold time is up
/// or the lock is lost, and probes the store once.
pub(crate) async fn hold_guard(
    id: usize,
    sh: &Shared,
    rng: &mut StdRng,
    (client, guard): (&Client<MongoStore>, &LockGuard<MongoStore>),
    (resource, exclusive): (usize, bool),
    called: Instant,
    start: Instant,
) -> Holding {
    let mut holding = Holding {
        client: id,
        kind: Kind::Locker,
        resource,
        exclusive,
        fence: guard.fence(),
        sent: called,
        start,
        end: start,
        stop: Stop::NeverTrusted,
    };
    if !guard.is_held() {
        return holding;
    }
    let hold_until = start + hold_time(rng, sh.args.long_hold_share);
    let mut probe_at = Some(start + (hold_until - start).mul_f64(rng.random_range(0.0..1.0)));
    // The last instant at which the holder found the lock held: it acts only then.
    let mut last_held = start;
    let tick = Duration::from_millis(10);
    let stop = loop {
        let next = hold_until
            .min(last_held + tick)
            .min(probe_at.unwrap_or(hold_until));
        tokio::select! {
            ended = guard.lost() => {
                break Stop::Lost(Some(lost_why(ended)));
            }
            () = tokio::time::sleep_until(next.into()) => {}
        }
        let now = Instant::now();
        if !guard.is_held() {
            break match guard.ended() {
                Some(e) => Stop::Lost(Some(lost_why(e))),
                None => Stop::Lost(None),
            };
        }
        last_held = now;
        if now >= hold_until {
            break Stop::Released;
        }
        if probe_at.is_some_and(|t| now >= t) {
            probe_at = None;
            let p = probe(sh, client, guard.lock_id(), resource, guard.fence(), || {
                guard.is_held()
            })
            .await;
            let gone = record_probe(sh, &p, || {
                format!(
                    "client {id} (Locker) fence {} on {}: status did not list it at {:.3} s \
                     while is_held() was true",
                    guard.fence(),
                    resource_name(resource),
                    sh.secs(Instant::now()),
                )
            });
            if gone {
                holding.end = last_held;
                holding.stop = Stop::Gone;
                return holding;
            }
            if guard.is_held() {
                last_held = Instant::now();
            }
        }
    };
    // Released: the release is sent right after this check.
    holding.end = if stop == Stop::Released && guard.is_held() {
        Instant::now()
    } else {
        last_held
    };
    holding.stop = stop;
    holding
}

/// The purger: `purge` every `--purge-every-ms` on a client of its own (with the run's
/// takeover grace), so that expired locks are removed, and emptied resources deleted, while
/// the primary's clock changes. What it removes is counted; a lock it removes while its
/// holder still trusts it shows as a lost grant.
pub(crate) async fn purger_task(sh: Shared, client: Client<MongoStore>) {
    let every = Duration::from_millis(sh.args.purge_every_ms);
    while Instant::now() < sh.stop_at {
        tokio::time::sleep(every).await;
        match tokio::time::timeout(sh.args.op_timeout(), client.purge()).await {
            Ok(Ok(removed)) => {
                let mut obs = sh.obs();
                obs.purges += 1;
                obs.purged += removed.len() as u64;
            }
            Ok(Err(e)) => sh.error(Op::Purge, Some(&e)),
            Err(_) => sh.error(Op::Purge, None),
        }
    }
}
