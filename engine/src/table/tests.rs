//! The lock table's tests: fences across deletion, the index, and purge's two strategies.

use std::collections::BTreeSet;
use std::time::Duration;

use super::purge::{PurgeStrategy, SCAN_HASHES_OVER, purge_groups_by};
use super::*;
use crate::{Access, LockOptions, SharedLimit};

fn req(resource: &str, lock_id: &str, ttl_ms: Option<u64>) -> LockRequest {
    let mut d = LockOptions::new();
    d.ttl = ttl_ms.map(Duration::from_millis);
    LockRequest::new(resource, lock_id, &d).unwrap()
}

fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

#[test]
fn fences_increase_when_the_clock_goes_back_across_deletion() {
    // A failover to a store whose clock is 3 s behind: the fence clock does not follow it.
    let mut table = LockTable::new();
    let first = table.lock(&req("r", "a", Some(10)), t(10_000)).unwrap();
    table.unlock(&LockId::new("a").unwrap(), t(10_001));
    table.purge(t(10_002));
    assert!(table.resources().is_empty(), "deleted");
    assert_eq!(table.fence_clock(), fence_floor(t(10_002)));
    let second = table.lock(&req("r", "b", None), t(7_000)).unwrap();
    assert!(
        second.fence > first.fence,
        "{} after {}",
        second.fence,
        first.fence
    );
}

#[test]
fn an_expired_lock_is_held_until_its_grace_has_passed() {
    let grace = Duration::from_millis(2_000);
    let mut table = LockTable::new().with_takeover_grace(grace);
    assert_eq!(table.takeover_grace(), grace);
    let first = table.lock(&req("r", "a", Some(1_000)), t(0)).unwrap();
    // Expired at 1 s, held until 3 s: refused, counted, spared, renewable by its holder.
    let refused = table.lock(&req("r", "b", None), t(2_999));
    assert!(matches!(refused, Err(Error::AlreadyLocked { .. })));
    assert!(table.purge(t(2_999)).is_empty());
    let margin = Duration::from_millis(500);
    let renewed = table
        .renew_one(
            &Resource::new("r").unwrap(),
            &LockId::new("a").unwrap(),
            crate::Ttl::new(Duration::from_millis(1_000)).unwrap(),
            margin,
            t(2_499),
        )
        .unwrap();
    assert_eq!(renewed.expires_at, Some(t(3_499)));
    // Renewed at 2.499 s until 3.499 s: held until 5.499 s.
    assert!(table.lock(&req("r", "b", None), t(5_498)).is_err());
    let second = table.lock(&req("r", "b", None), t(5_499)).unwrap();
    assert!(second.fence > first.fence);
}

#[test]
fn renewable_while_nobody_may_take_it_before_now_plus_margin() {
    let lock = StoredLock {
        expires_at: Some(t(1_000)),
        ..StoredLock::new(LockId::new("a").unwrap(), t(0), 1)
    };
    let (margin, grace) = (Duration::from_millis(300), Duration::from_millis(2_000));
    assert!(lock.is_renewable(t(2_699), margin, grace));
    assert!(!lock.is_renewable(t(2_700), margin, grace));
    assert!(lock.is_expired(t(1_000)) && lock.is_held(t(2_999), grace));
    assert!(lock.is_abandoned(t(3_000), grace));
    assert!(lock.is_abandoned(t(1_000), Duration::ZERO));
}

#[test]
fn a_grace_above_an_hour_is_refused() {
    assert!(crate::check_takeover_grace(crate::MAX_TAKEOVER_GRACE).is_ok());
    let err = crate::check_takeover_grace(crate::MAX_TAKEOVER_GRACE + Duration::from_millis(1))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                field: "takeover_grace",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn emptied_resource_is_kept_until_the_floor_passes_its_counter() {
    let mut table = LockTable::new();
    // Several grants within one millisecond push the counter past the floor (which grows by
    // one a millisecond within a second).
    for i in 0..10 {
        let id = format!("id{i}");
        table
            .lock(&req("r", &id, None).with_access(Access::Shared(None)), t(5))
            .unwrap();
        table.unlock(&LockId::new(id).unwrap(), t(5));
    }
    let counter = table
        .resource(&Resource::new("r").unwrap())
        .unwrap()
        .last_fence;
    assert!(counter > fence_floor(t(6)));
    table.purge(t(6));
    assert!(
        table.resources().contains_key(&Resource::new("r").unwrap()),
        "kept: counter ahead of floor"
    );
    table.purge(t(5 + 9));
    assert!(
        table.resources().contains_key(&Resource::new("r").unwrap()),
        "kept: counter (14) still at the floor"
    );
    table.purge(t(5 + 10));
    assert!(
        table.resources().is_empty(),
        "deleted once the floor passed the counter"
    );
    let next = table.lock(&req("r", "again", None), t(7)).unwrap();
    assert!(next.fence > counter);
}

#[test]
fn index_follows_takeover_and_purge() {
    let mut table = LockTable::new();
    table.lock(&req("r", "a", Some(10)), t(0)).unwrap();
    table.lock(&req("r", "b", None), t(10)).unwrap();
    let a = LockId::new("a").unwrap();
    assert_eq!(table.group(&a).count(), 0, "taken over");
    assert!(table.unlock(&a, t(10)).is_empty());
    let rebuilt = LockTable::from_resources(table.resources().clone());
    assert_eq!(rebuilt, table);
    assert_eq!(
        rebuilt.groups, table.groups,
        "the index is a function of the resources"
    );
}

/// A grant or an unlock at some instant: what the purge test builds its tables with.
#[derive(Clone, Debug)]
enum Step {
    Grant {
        resource: u8,
        lock: u8,
        shared: bool,
        ttl_ms: Option<u64>,
        at: u64,
    },
    Unlock {
        lock: u8,
        at: u64,
    },
}

/// Lock ids `g0` to `g23`: more than [`SCAN_HASHES_OVER`], so that purging all of them
/// takes the scan's hash-set path.
const LOCK_IDS: u8 = 24;

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..12u8, 0..LOCK_IDS, any::<bool>(), proptest::option::of(1..60u64), 0..100u64)
            .prop_map(|(resource, lock, shared, ttl_ms, at)| Step::Grant {
                resource,
                lock,
                shared,
                ttl_ms,
                at,
            }),
        1 => (0..LOCK_IDS, 0..100u64).prop_map(|(lock, at)| Step::Unlock { lock, at }),
    ]
}

fn build(steps: &[Step]) -> LockTable {
    let mut table = LockTable::new();
    for s in steps {
        match *s {
            Step::Grant {
                resource,
                lock,
                shared,
                ttl_ms,
                at,
            } => {
                let r = req(&format!("r{resource}"), &format!("g{lock}"), ttl_ms);
                // A refused grant leaves the table as it was; either outcome is a table.
                let _ = if shared {
                    table.lock(
                        &r.clone()
                            .with_access(Access::Shared(SharedLimit::new(2).ok())),
                        t(at),
                    )
                } else {
                    table.lock(&r, t(at))
                };
            }
            Step::Unlock { lock, at } => {
                table.unlock(&LockId::new(format!("g{lock}")).unwrap(), t(at));
            }
        }
    }
    table
}

proptest::proptest! {
    /// Purge's second phase removes the same locks, and leaves the same table and index,
    /// whether it looks each group up or scans the table; for the expired groups, for
    /// any other few groups (a batch of them, or ids the table does not hold), and for
    /// every lock id.
    #[test]
    fn purge_by_group_and_by_scan_agree(
        steps in proptest::collection::vec(step(), 0..80),
        at in 0..160u64,
        extra in proptest::collection::btree_set(0..LOCK_IDS + 4, 0..4),
    ) {
        let table = build(&steps);
        let ids = |range: &mut dyn Iterator<Item = u8>| -> BTreeSet<LockId> {
            range.map(|i| LockId::new(format!("g{i}")).unwrap()).collect()
        };
        let expired = expired_groups(&[&table], t(at));
        let few = ids(&mut extra.iter().copied());
        let all = ids(&mut (0..LOCK_IDS));
        proptest::prop_assert!(all.len() > SCAN_HASHES_OVER);
        for groups in [expired, few, all] {
            let mut by_group = table.clone();
            let mut by_scan = table.clone();
            let a = purge_groups_by(&mut [&mut by_group], &groups, t(at), PurgeStrategy::ByGroup);
            let b = purge_groups_by(&mut [&mut by_scan], &groups, t(at), PurgeStrategy::Scan);
            proptest::prop_assert_eq!(&a, &b);
            proptest::prop_assert_eq!(&by_group, &by_scan);
            proptest::prop_assert_eq!(&by_group.groups, &by_scan.groups);
            let rebuilt = LockTable::from_resources(by_scan.resources().clone());
            proptest::prop_assert_eq!(&rebuilt.groups, &by_scan.groups);
            for lock in &a {
                proptest::prop_assert!(groups.contains(&lock.lock_id));
            }
        }
    }
}

#[test]
fn a_refusal_says_when_the_rule_would_allow() {
    let grace = Duration::from_millis(500);
    let mut table = LockTable::new().with_takeover_grace(grace);
    let retry_in = |r: Result<LockStatus, Error>| match r {
        Err(Error::AlreadyLocked { retry_in, .. }) => retry_in,
        other => panic!("expected AlreadyLocked, got {other:?}"),
    };
    table.lock(&req("x", "a", Some(1_000)), t(0)).unwrap();
    // Abandoned at 1.5 s: asked at 0.2 s, 1.3 s from now.
    let r = table.lock(&req("x", "b", None), t(200));
    assert_eq!(retry_in(r), Some(Duration::from_millis(1_300)));
    // Three shared locks, ending (with the grace) at 1.5, 3.5 and 2.5 s: under a limit of 2
    // a slot opens once two have ended, under a limit of 1 (and for an exclusive lock) once
    // all three have.
    let limit = SharedLimit::new(2).ok();
    table
        .lock(
            &req("s", "a", Some(1_000)).with_access(Access::Shared(None)),
            t(0),
        )
        .unwrap();
    table
        .lock(
            &req("s", "b", Some(3_000)).with_access(Access::Shared(None)),
            t(0),
        )
        .unwrap();
    table
        .lock(
            &req("s", "c", Some(2_000)).with_access(Access::Shared(None)),
            t(0),
        )
        .unwrap();
    let r = table.lock(
        &req("s", "d", None).with_access(Access::Shared(limit)),
        t(0),
    );
    assert_eq!(retry_in(r), Some(Duration::from_millis(2_500)));
    let r = table.lock(
        &req("s", "d", None).with_access(Access::Shared(SharedLimit::new(1).ok())),
        t(0),
    );
    assert_eq!(retry_in(r), Some(Duration::from_millis(3_500)));
    let r = table.lock(&req("s", "d", None), t(0));
    assert_eq!(retry_in(r), Some(Duration::from_millis(3_500)));
    // A lock without a TTL never ends.
    table.lock(&req("forever", "a", None), t(0)).unwrap();
    assert_eq!(retry_in(table.lock(&req("forever", "b", None), t(0))), None);
}
