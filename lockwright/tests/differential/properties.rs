//! What every step must keep, judged on the store's table before and after it: fences,
//! renewals, expiry, groups.

use super::*;

pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// The store, its clock, and what the property checks need to remember.
pub(crate) struct System<B: Backend> {
    pub(crate) store: B::Store,
    pub(crate) clock: Arc<ManualClock>,
    /// The highest fence granted so far, per resource.
    pub(crate) fences: BTreeMap<String, u64>,
    /// The store's table before the last step, and the last step with its outcome.
    pub(crate) before: RefCell<LockTable>,
    pub(crate) last: Option<(Step, Outcome)>,
}

pub(crate) struct Differential<B>(std::marker::PhantomData<B>);

/// Held at `now`: not yet expired for the takeover grace (the properties' own copy of the
/// rule, not the engine's): a held lock blocks others, counts towards a limit, and is
/// neither taken over nor purged.
pub(crate) fn live(expires_at: Option<Timestamp>, now: Timestamp) -> bool {
    expires_at.is_none_or(|e| e.saturating_add(GRACE) > now)
}

/// Every lock of a table as (resource, mode, lock id, fence, created, expires).
pub(crate) fn locks(table: &LockTable) -> Vec<Row> {
    table
        .resources()
        .iter()
        .flat_map(|(r, state)| {
            state.locks().map(move |(mode, l)| {
                (
                    r.to_string(),
                    mode,
                    l.lock_id.as_str().to_owned(),
                    l.fence,
                    l.created_at,
                    l.expires_at,
                )
            })
        })
        .collect()
}

/// (resource, lock id) of each of `locks`.
pub(crate) fn pairs_of(locks: &[LockStatus]) -> Vec<(String, String)> {
    locks
        .iter()
        .map(|l| {
            (
                l.resource.as_str().to_owned(),
                l.lock_id.as_str().to_owned(),
            )
        })
        .collect()
}

/// A lock of a table as [`locks`] lists it.
pub(crate) type Row = (String, Mode, String, u64, Timestamp, Option<Timestamp>);

/// One renewal's outcome `got` (of the lock `id` holds on `resource`, for `ttl` ms), judged
/// on `want`, the table as it should be after the step's earlier renewals (for the first
/// one, the table before the step): a renewed lock was held and outside the margin, keeps
/// its fence and gets `now + ttl`; `NotRenewable` names that one lock, held and within the
/// margin (or expired); `LockNotFound` only when no such lock is held. A renewal is applied
/// to `want`.
pub(crate) fn check_renewal(
    want: &mut [Row],
    (resource, id, ttl): (usize, usize, u64),
    got: &Outcome,
    now: Timestamp,
    op: &str,
) {
    let own = |l: &&Row| l.0 == RESOURCES[resource] && l.2 == IDS[id];
    let held = want.iter().find(own).cloned();
    match got {
        Outcome::Locks(renewed) => {
            let was = &held.unwrap_or_else(|| {
                panic!("renew_after_purge: {op} renewed a lock not held: {got:?}")
            });
            assert!(
                was.5
                    .is_none_or(|e| e.saturating_add(GRACE) > now.saturating_add(MARGIN)),
                "{op} renewed {was:?}, expired or within the margin"
            );
            let expires = Some(now.saturating_add(Duration::from_millis(ttl)));
            assert!(
                renewed.len() == 1
                    && renewed[0].fence == was.3
                    && renewed[0].expires_at == expires
                    && renewed[0].renewed_at == Some(now),
                "{op} of {was:?} returned {renewed:?}"
            );
            for l in want.iter_mut().filter(|l| own(&&**l)) {
                l.5 = expires;
            }
        }
        Outcome::NotRenewable(locks) => {
            let was = &held.unwrap_or_else(|| panic!("{op}: NotRenewable names a lock not held"));
            assert!(
                was.5
                    .is_some_and(|e| e.saturating_add(GRACE) <= now.saturating_add(MARGIN)),
                "{op} refused {was:?}, which is renewable"
            );
            assert_eq!(pairs_of(locks), vec![(was.0.clone(), was.2.clone())]);
        }
        Outcome::LockNotFound => {
            assert!(held.is_none(), "{op} did not find {held:?}");
        }
        other => panic!("{op}: unexpected {other:?}"),
    }
}

/// The properties, judged on the store's own tables before and after `step`.
pub(crate) fn check_properties(
    before: &LockTable,
    after: &LockTable,
    step: &Step,
    got: &Outcome,
    now: Timestamp,
) {
    let (pre, post) = (locks(before), locks(after));
    // mutual_exclusion
    for (resource, state) in after.resources() {
        let live_x = state
            .exclusive
            .iter()
            .filter(|l| live(l.expires_at, now))
            .count();
        let live_s = state
            .shared
            .iter()
            .filter(|l| live(l.expires_at, now))
            .count();
        assert!(
            live_x == 0 || live_s == 0 && live_x == 1,
            "mutual_exclusion broken on {resource}"
        );
    }
    // no_lost_grant: only unlock and purge remove live locks; a renew changes only the
    // locks of its group, and the one-lock operations only their one lock.
    if !matches!(step, Step::Unlock { .. } | Step::Purge) {
        for l in pre.iter().filter(|l| live(l.5, now)) {
            let own = match step {
                Step::Renew { id, .. } => l.2 == IDS[*id],
                Step::RenewOne { resource, id, .. } | Step::UnlockOne { resource, id } => {
                    l.0 == RESOURCES[*resource] && l.2 == IDS[*id]
                }
                Step::RenewMany { locks } => locks
                    .iter()
                    .any(|(r, id, _)| l.0 == RESOURCES[*r] && l.2 == IDS[*id]),
                _ => false,
            };
            assert!(post.contains(l) || own, "no_lost_grant: {l:?} vanished");
        }
    }
    match (step, got) {
        (
            Step::Slock {
                resource,
                limit: Some(m),
                ..
            },
            Outcome::Locks(_),
        ) => {
            let name = RESOURCES[*resource];
            let held = post
                .iter()
                .filter(|l| l.0 == name && l.1 == Mode::Shared && live(l.5, now))
                .count();
            assert!(
                held <= *m as usize,
                "shared_limit: {held} live shared locks on {name}, limit {m}"
            );
        }
        (Step::Purge, Outcome::Locks(removed)) => {
            let expired_groups: Vec<&String> = pre
                .iter()
                .filter(|l| !live(l.5, now))
                .map(|l| &l.2)
                .collect();
            for r in removed {
                assert!(
                    expired_groups.contains(&&r.lock_id.as_str().to_owned()) && r.created_at < now,
                    "purge_safety: removed {r:?} whose group had no expired lock"
                );
            }
            for l in &post {
                assert!(
                    live(l.5, now),
                    "purge_safety: {l:?} expired but survived purge"
                );
                assert!(
                    !expired_groups.contains(&&l.2) || l.4 >= now,
                    "purge_safety: {l:?} of an expired group, created before the purge, survived"
                );
            }
        }
        (Step::Renew { id, .. }, Outcome::Locks(_)) => {
            for l in pre.iter().filter(|l| l.2 == IDS[*id]) {
                assert!(
                    l.5.is_none_or(|e| e.saturating_add(GRACE) > now.saturating_add(MARGIN)),
                    "renew_after_purge: renewed {l:?}, expired or within the margin"
                );
            }
        }
        (Step::RenewOne { resource, id, ttl }, got) => {
            let mut want = pre.clone();
            check_renewal(&mut want, (*resource, *id, *ttl), got, now, "renew_one");
            assert_eq!(
                post, want,
                "renew_one changes exactly its lock when renewed, nothing when refused"
            );
        }
        (Step::RenewMany { locks }, got) => {
            let Outcome::Each(each) = got else {
                panic!("renew_many: unexpected {got:?}");
            };
            assert_eq!(each.len(), locks.len(), "renew_many: one outcome per lock");
            let mut want = pre.clone();
            for (lock, got) in locks.iter().zip(each) {
                check_renewal(&mut want, *lock, got, now, "renew_many");
            }
            assert_eq!(
                post, want,
                "renew_many changes exactly the named renewable locks; refusals and misses \
                 change nothing"
            );
        }
        (Step::UnlockOne { resource, id }, Outcome::Locks(released)) => {
            let own = |l: &&Row| l.0 == RESOURCES[*resource] && l.2 == IDS[*id];
            match pre.iter().find(own) {
                Some(was) => {
                    assert!(
                        released.len() == 1
                            && released[0].fence == was.3
                            && released[0].expires_at == was.5,
                        "unlock_one of {was:?} returned {released:?}"
                    );
                    assert!(post.iter().find(own).is_none(), "{was:?} survived");
                    assert_eq!(pre.len(), post.len() + 1, "unlock_one removes one lock");
                }
                None => {
                    assert!(released.is_empty(), "unlock_one released {released:?}");
                    assert_eq!(pre, post, "unlock_one of no lock changes nothing");
                }
            }
        }
        (Step::Status(f), Outcome::Locks(found)) => {
            for s in found {
                let remaining = s.expires_at.map(|e| e.saturating_duration_since(now));
                let ok = f.ttl_lt.is_none_or(|d| remaining.is_some_and(|r| r < d))
                    && f.ttl_gte.is_none_or(|d| remaining.is_some_and(|r| r >= d))
                    && f.resource
                        .as_deref()
                        .is_none_or(|r| r == s.resource.as_str())
                    && f.mode.is_none_or(|m| m == s.mode);
                assert!(ok, "status reported {s:?}, which does not match {f:?}");
            }
        }
        _ => {}
    }
}
