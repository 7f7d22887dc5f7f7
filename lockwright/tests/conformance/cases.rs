//! The cases. Each asserts outcomes (grants, refusals, reported locks), never just "no
//! panic". Time moves only through `cx.clock`.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use lockwright::engine::{Renewal, Ttl};
use lockwright::{
    Client, Error, Filter, LockDetails, LockId, LockStatus, LockStore, ManualClock, Mode,
    Timestamp, generate_lock_id,
};

use super::{Backend, Ctx, T0};

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ttl(d: Duration) -> LockDetails {
    LockDetails::new().ttl(d)
}

fn forever() -> LockDetails {
    LockDetails::new()
}

fn at(offset: Duration) -> Timestamp {
    T0.saturating_add(offset)
}

fn id(name: &str) -> LockId {
    LockId::new(name).expect("test lock ids are valid")
}

#[track_caller]
fn assert_locked<T: Debug>(result: Result<T, Error>, resource: &str) {
    match result {
        Err(Error::AlreadyLocked { resource: r }) => assert_eq!(r.as_str(), resource),
        other => panic!("expected AlreadyLocked on {resource}, got {other:?}"),
    }
}

#[track_caller]
fn assert_invalid<T: Debug>(result: Result<T, Error>, field: &str) {
    match result {
        Err(Error::InvalidArgument { field: f, reason }) => {
            assert_eq!(f, field, "wrong field named ({reason})");
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidArgument for {field}, got {other:?}"),
    }
}

/// (resource, lock id) pairs, in the order given.
fn pairs(locks: &[LockStatus]) -> Vec<(String, String)> {
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

fn pair(resource: &str, lock_id: &LockId) -> (String, String) {
    (resource.to_string(), lock_id.as_str().to_owned())
}

async fn all<B: Backend>(cx: &Ctx<B>) -> Vec<LockStatus> {
    cx.client.status(&Filter::new()).await.expect("status")
}

// ---------------------------------------------------------------- bad input

pub async fn rejects_empty_resource<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    assert_invalid(cx.client.xlock("", &a, &forever()).await, "resource");
    assert_invalid(cx.client.slock("", &a, &forever(), None).await, "resource");
    assert_invalid(
        cx.client.status(&Filter::new().resource("")).await,
        "filter.resource",
    );
    assert!(all(cx).await.is_empty(), "nothing may be stored");
}

pub async fn rejects_oversized_resource<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let long = "r".repeat(513);
    assert_invalid(cx.client.xlock(&long, &a, &forever()).await, "resource");
    let max = "r".repeat(512);
    let granted = cx
        .client
        .xlock(&max, &a, &forever())
        .await
        .expect("512 bytes is allowed");
    assert_eq!(granted.resource.as_str(), max);
}

pub async fn rejects_empty_lock_id<B: Backend>(cx: &Ctx<B>) {
    assert_invalid(cx.client.xlock("r", "", &forever()).await, "lock_id");
    assert_invalid(
        cx.client.slock("r", "", &forever(), Some(2)).await,
        "lock_id",
    );
    assert_invalid(cx.client.unlock("").await, "lock_id");
    assert_invalid(cx.client.renew("", secs(1)).await, "lock_id");
    assert!(all(cx).await.is_empty());
}

pub async fn rejects_oversized_lock_id<B: Backend>(cx: &Ctx<B>) {
    assert_invalid(
        cx.client.xlock("r", "k".repeat(257), &forever()).await,
        "lock_id",
    );
    let max = "k".repeat(256);
    cx.client
        .xlock("r", &max, &forever())
        .await
        .expect("256 bytes is allowed");
    assert_eq!(cx.client.unlock(&max).await.expect("unlock").len(), 1);
}

pub async fn rejects_zero_ttl<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    assert_invalid(cx.client.xlock("r", &a, &ttl(Duration::ZERO)).await, "ttl");
    assert_invalid(
        cx.client.slock("r", &a, &ttl(Duration::ZERO), None).await,
        "ttl",
    );
    cx.client
        .xlock("r", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    assert_invalid(cx.client.renew(&a, Duration::ZERO).await, "ttl");
    let locks = all(cx).await;
    assert_eq!(
        locks[0].expires_at,
        Some(at(secs(5))),
        "a refused renew changes nothing"
    );
}

pub async fn rejects_sub_millisecond_and_huge_ttl<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    assert_invalid(
        cx.client
            .xlock("r", &a, &ttl(Duration::from_micros(999)))
            .await,
        "ttl",
    );
    assert_invalid(cx.client.xlock("r", &a, &ttl(YEAR * 101)).await, "ttl");
    assert_invalid(cx.client.xlock("r", &a, &ttl(Duration::MAX)).await, "ttl");
    let granted = cx
        .client
        .xlock("r", &a, &ttl(YEAR * 99))
        .await
        .expect("99 years is allowed");
    assert_eq!(granted.expires_at, Some(at(YEAR * 99)));
}

pub async fn rejects_zero_limit<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    assert_invalid(cx.client.slock("r", &a, &forever(), Some(0)).await, "limit");
    assert!(all(cx).await.is_empty());
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("resource stays free");
}

pub async fn rejects_bad_details<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    assert_invalid(
        cx.client
            .xlock("r", &a, &LockDetails::new().owner(""))
            .await,
        "owner",
    );
    assert_invalid(
        cx.client
            .xlock("r", &a, &LockDetails::new().host("h".repeat(1025)))
            .await,
        "host",
    );
    assert_invalid(
        cx.client
            .slock("r", &a, &LockDetails::new().comment(""), None)
            .await,
        "comment",
    );
    assert!(all(cx).await.is_empty());
}

pub async fn rejects_bad_filter<B: Backend>(cx: &Ctx<B>) {
    assert_invalid(
        cx.client.status(&Filter::new().lock_id("")).await,
        "filter.lock_id",
    );
    assert_invalid(
        cx.client.status(&Filter::new().owner("")).await,
        "filter.owner",
    );
    assert_invalid(
        cx.client
            .status(&Filter::new().resource("x".repeat(513)))
            .await,
        "filter.resource",
    );
}

pub async fn rejects_huge_renew_margin<B: Backend>(_cx: &Ctx<B>) {
    let store = B::store(Arc::new(ManualClock::new(T0))).await;
    let result = Client::with_renew_margin(store, YEAR * 101);
    assert_invalid(result.map(|_| ()), "renew_margin");
}

// ---------------------------------------------------------------- exclusive locks

pub async fn xlock_grants_free_resource<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let details = LockDetails::new()
        .owner("alice")
        .host("host-1")
        .comment("job 7")
        .ttl(secs(30));
    let granted = cx
        .client
        .xlock("invoices", &a, &details)
        .await
        .expect("grant");
    assert_eq!(granted.mode, Mode::Exclusive);
    assert_eq!(granted.created_at, T0);
    assert_eq!(granted.expires_at, Some(at(secs(30))));
    assert_eq!(granted.ttl, Some(secs(30)));
    assert!(granted.fence > 0);
    assert_eq!(all(cx).await, vec![granted]);
}

pub async fn xlock_refuses_other_group<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(10)))
        .await
        .expect("grant");
    assert_locked(
        cx.client
            .xlock("r", generate_lock_id(), &ttl(secs(10)))
            .await,
        "r",
    );
    cx.clock.advance(ms(9_999));
    assert_locked(
        cx.client.xlock("r", generate_lock_id(), &forever()).await,
        "r",
    );
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn xlock_is_not_reentrant<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let first = cx
        .client
        .xlock("r", &a, &ttl(secs(10)))
        .await
        .expect("grant");
    assert_locked(cx.client.xlock("r", &a, &ttl(secs(10))).await, "r");
    assert_eq!(
        all(cx).await,
        vec![first],
        "the refused request changed nothing"
    );
}

pub async fn xlock_takes_over_expired_lock<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    let first = cx
        .client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(ms(999));
    assert_locked(cx.client.xlock("r", &b, &forever()).await, "r");
    cx.clock.advance(ms(1)); // expires_at <= now: expired
    let second = cx
        .client
        .xlock("r", &b, &forever())
        .await
        .expect("takeover");
    assert!(second.fence > first.fence);
    assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)]);
    assert!(
        cx.client.unlock(&a).await.expect("unlock").is_empty(),
        "a's lock was taken over"
    );
}

pub async fn xlock_without_ttl_never_expires<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("grant");
    cx.clock.advance(YEAR * 50);
    assert_locked(
        cx.client.xlock("r", generate_lock_id(), &forever()).await,
        "r",
    );
    assert!(cx.client.purge().await.expect("purge").is_empty());
}

pub async fn one_lock_id_locks_many_resources<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    for r in ["r1", "r2", "r3"] {
        cx.client.xlock(r, &a, &ttl(secs(5))).await.expect("grant");
    }
    cx.client
        .slock("r4", &a, &forever(), Some(1))
        .await
        .expect("grant");
    let group = cx
        .client
        .status(&Filter::new().lock_id(a.as_str()))
        .await
        .expect("status");
    assert_eq!(group.len(), 4);
    assert!(group.iter().all(|l| l.lock_id == a));
    assert_locked(
        cx.client.xlock("r2", generate_lock_id(), &forever()).await,
        "r2",
    );
}

pub async fn xlock_refused_by_live_shared<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .slock("r", generate_lock_id(), &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert_locked(
        cx.client.xlock("r", generate_lock_id(), &forever()).await,
        "r",
    );
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn xlock_refuses_upgrade_from_shared<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .slock("r", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert_locked(cx.client.xlock("r", &a, &ttl(secs(5))).await, "r");
    let locks = all(cx).await;
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].mode, Mode::Shared);
}

pub async fn expired_shared_does_not_block_xlock<B: Backend>(cx: &Ctx<B>) {
    for _ in 0..2 {
        cx.client
            .slock("r", generate_lock_id(), &ttl(secs(1)), None)
            .await
            .expect("grant");
    }
    cx.clock.advance(secs(1));
    let b = generate_lock_id();
    let granted = cx
        .client
        .xlock("r", &b, &forever())
        .await
        .expect("expired shared locks do not block");
    assert_eq!(
        all(cx).await,
        vec![granted],
        "expired shared locks were taken over"
    );
}

pub async fn xlock_refused_while_any_shared_live<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .slock("r", generate_lock_id(), &ttl(secs(1)), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", generate_lock_id(), &ttl(secs(10)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    assert_locked(
        cx.client.xlock("r", generate_lock_id(), &forever()).await,
        "r",
    );
    assert_eq!(all(cx).await.len(), 2, "a refused grant takes nothing over");
}

// ---------------------------------------------------------------- shared locks

pub async fn slock_unlimited_admits_many<B: Backend>(cx: &Ctx<B>) {
    for _ in 0..20 {
        cx.client
            .slock("r", generate_lock_id(), &forever(), None)
            .await
            .expect("grant");
    }
    let locks = all(cx).await;
    assert_eq!(locks.len(), 20);
    assert!(locks.iter().all(|l| l.mode == Mode::Shared));
}

pub async fn slock_limit_is_enforced<B: Backend>(cx: &Ctx<B>) {
    let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
    for a in &ids {
        cx.client
            .slock("r", a, &forever(), Some(3))
            .await
            .expect("grant");
    }
    let d = generate_lock_id();
    assert_locked(cx.client.slock("r", &d, &forever(), Some(3)).await, "r");
    assert_eq!(cx.client.unlock(&ids[0]).await.expect("unlock").len(), 1);
    cx.client
        .slock("r", &d, &forever(), Some(3))
        .await
        .expect("a slot is free again");
    assert_eq!(all(cx).await.len(), 3);
}

pub async fn slock_limit_holds_on_fresh_resource<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .slock("fresh", generate_lock_id(), &forever(), Some(1))
        .await
        .expect("grant");
    assert_locked(
        cx.client
            .slock("fresh", generate_lock_id(), &forever(), Some(1))
            .await,
        "fresh",
    );
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn slock_refuses_duplicate_lock_id<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .slock("r", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert_locked(cx.client.slock("r", &a, &ttl(secs(5)), None).await, "r");
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn slock_refused_by_live_exclusive<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(5)))
        .await
        .expect("grant");
    assert_locked(
        cx.client
            .slock("r", generate_lock_id(), &forever(), None)
            .await,
        "r",
    );
    cx.clock.advance(ms(4_999));
    assert_locked(
        cx.client
            .slock("r", generate_lock_id(), &forever(), Some(10))
            .await,
        "r",
    );
}

pub async fn expired_exclusive_does_not_block_slock<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.clock.advance(secs(5));
    let b = generate_lock_id();
    cx.client
        .slock("r", &b, &forever(), Some(1))
        .await
        .expect("expired exclusive does not block");
    assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)]);
}

pub async fn expired_shared_not_counted_toward_limit<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .slock("r", generate_lock_id(), &ttl(secs(1)), Some(2))
        .await
        .expect("grant");
    cx.client
        .slock("r", generate_lock_id(), &ttl(secs(10)), Some(2))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    cx.client
        .slock("r", generate_lock_id(), &forever(), Some(2))
        .await
        .expect("one live, limit 2");
    assert_locked(
        cx.client
            .slock("r", generate_lock_id(), &forever(), Some(2))
            .await,
        "r",
    );
}

pub async fn slock_regrants_after_own_lock_expired<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .slock("r", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let again = cx
        .client
        .slock("r", &a, &ttl(secs(1)), None)
        .await
        .expect("own lock expired");
    let group = cx
        .client
        .status(&Filter::new().lock_id(a.as_str()))
        .await
        .expect("status");
    assert_eq!(group, vec![again], "one lock per lock id and resource");
}

pub async fn slock_limit_is_per_call<B: Backend>(cx: &Ctx<B>) {
    for _ in 0..3 {
        cx.client
            .slock("r", generate_lock_id(), &forever(), None)
            .await
            .expect("grant");
    }
    assert_locked(
        cx.client
            .slock("r", generate_lock_id(), &forever(), Some(3))
            .await,
        "r",
    );
    cx.client
        .slock("r", generate_lock_id(), &forever(), Some(4))
        .await
        .expect("limit 4 admits a 4th");
}

// ---------------------------------------------------------------- unlock

pub async fn unlock_returns_newest_first_across_resources<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r1", &a, &LockDetails::new().owner("o1"))
        .await
        .expect("grant");
    cx.clock.advance(ms(1));
    cx.client
        .slock("r2", &a, &LockDetails::new().owner("o2"), None)
        .await
        .expect("grant");
    cx.clock.advance(ms(1));
    cx.client
        .xlock("r3", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let released = cx.client.unlock(&a).await.expect("unlock");
    assert_eq!(
        pairs(&released),
        vec![pair("r3", &a), pair("r2", &a), pair("r1", &a)]
    );
    assert_eq!(released[1].mode, Mode::Shared);
    assert_eq!(released[1].owner.as_deref(), Some("o2"));
    assert!(all(cx).await.is_empty());
}

pub async fn unlock_orders_same_instant_by_resource<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    for r in ["b", "c", "a"] {
        cx.client.xlock(r, &a, &forever()).await.expect("grant");
    }
    let released = cx.client.unlock(&a).await.expect("unlock");
    assert_eq!(
        pairs(&released),
        vec![pair("c", &a), pair("b", &a), pair("a", &a)]
    );
}

pub async fn unlock_unknown_lock_id_returns_empty<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("grant");
    assert!(
        cx.client
            .unlock(generate_lock_id())
            .await
            .expect("unlock")
            .is_empty()
    );
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn unlock_is_idempotent<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client.xlock("r", &a, &forever()).await.expect("grant");
    assert_eq!(cx.client.unlock(&a).await.expect("unlock").len(), 1);
    assert!(cx.client.unlock(&a).await.expect("unlock again").is_empty());
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("resource is free");
}

pub async fn unlock_reports_expired_locks_with_zero_ttl<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(5));
    let released = cx.client.unlock(&a).await.expect("unlock");
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].ttl, Some(Duration::ZERO));
    assert_eq!(released[0].expires_at, Some(at(secs(1))));
}

pub async fn unlock_leaves_other_groups_alone<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    cx.client
        .slock("r", &a, &forever(), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", &b, &forever(), None)
        .await
        .expect("grant");
    cx.client
        .xlock("other", &b, &forever())
        .await
        .expect("grant");
    assert_eq!(
        pairs(&cx.client.unlock(&a).await.expect("unlock")),
        vec![pair("r", &a)]
    );
    let left = all(cx).await;
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|l| l.lock_id == b));
}

// ---------------------------------------------------------------- status

pub async fn status_reports_remaining_ttl<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("forever", generate_lock_id(), &forever())
        .await
        .expect("grant");
    cx.client
        .xlock("ten", generate_lock_id(), &ttl(secs(10)))
        .await
        .expect("grant");
    cx.client
        .xlock("one", generate_lock_id(), &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(4));
    let by_resource = |r: &str, locks: &[LockStatus]| {
        locks
            .iter()
            .find(|l| l.resource.as_str() == r)
            .map(|l| l.ttl)
    };
    let locks = all(cx).await;
    assert_eq!(by_resource("forever", &locks), Some(None));
    assert_eq!(by_resource("ten", &locks), Some(Some(secs(6))));
    assert_eq!(by_resource("one", &locks), Some(Some(Duration::ZERO)));
}

/// Three locks with 2 s, 5 s and 8 s left, plus one without a TTL.
async fn ttl_ladder<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("none", generate_lock_id(), &forever())
        .await
        .expect("grant");
    for (r, s) in [("two", 2), ("five", 5), ("eight", 8)] {
        cx.client
            .xlock(r, generate_lock_id(), &ttl(secs(s + 1)))
            .await
            .expect("grant");
    }
    cx.clock.advance(secs(1));
}

fn resources(locks: &[LockStatus]) -> BTreeSet<String> {
    locks
        .iter()
        .map(|l| l.resource.as_str().to_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_string()).collect()
}

pub async fn status_filters_ttl_lt<B: Backend>(cx: &Ctx<B>) {
    ttl_ladder(cx).await;
    let f = Filter::new().ttl_lt(secs(5));
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["two"])
    );
    let f = Filter::new().ttl_lt(ms(5_001));
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["two", "five"])
    );
}

pub async fn status_filters_ttl_gte<B: Backend>(cx: &Ctx<B>) {
    ttl_ladder(cx).await;
    let f = Filter::new().ttl_gte(secs(5));
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["five", "eight"])
    );
    let f = Filter::new().ttl_gte(ms(5_001));
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["eight"])
    );
}

pub async fn status_ttl_bounds_combine<B: Backend>(cx: &Ctx<B>) {
    ttl_ladder(cx).await;
    let f = Filter::new().ttl_gte(secs(3)).ttl_lt(secs(7));
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["five"])
    );
    let f = Filter::new().ttl_lt(secs(3)).ttl_gte(secs(7));
    assert!(
        cx.client.status(&f).await.expect("status").is_empty(),
        "neither bound overwrites the other"
    );
}

pub async fn status_ttl_bounds_skip_locks_without_ttl<B: Backend>(cx: &Ctx<B>) {
    ttl_ladder(cx).await;
    let f = Filter::new().ttl_lt(YEAR * 99);
    assert!(!resources(&cx.client.status(&f).await.expect("status")).contains("none"));
    let f = Filter::new().ttl_gte(Duration::ZERO);
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["two", "five", "eight"])
    );
}

pub async fn status_filters_created_before_and_after_strictly<B: Backend>(cx: &Ctx<B>) {
    for r in ["t0", "t10", "t20"] {
        cx.client
            .xlock(r, generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.clock.advance(ms(10));
    }
    let check = |f: Filter, want: &'static [&'static str]| {
        let client = cx.client.clone();
        async move {
            assert_eq!(
                resources(&client.status(&f).await.expect("status")),
                set(want),
                "{f:?}"
            );
        }
    };
    check(Filter::new().created_after(at(ms(10))), &["t20"]).await;
    check(Filter::new().created_before(at(ms(10))), &["t0"]).await;
    check(
        Filter::new().created_after(T0).created_before(at(ms(20))),
        &["t10"],
    )
    .await;
    check(Filter::new().created_after(at(ms(9))), &["t10", "t20"]).await;
}

pub async fn status_filters_owner<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r1", generate_lock_id(), &LockDetails::new().owner("alice"))
        .await
        .expect("grant");
    cx.client
        .xlock("r2", generate_lock_id(), &LockDetails::new().owner("bob"))
        .await
        .expect("grant");
    cx.client
        .xlock("r3", generate_lock_id(), &forever())
        .await
        .expect("grant");
    let f = Filter::new().owner("alice");
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["r1"])
    );
}

pub async fn status_filters_mode<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("x", generate_lock_id(), &forever())
        .await
        .expect("grant");
    cx.client
        .slock("s", generate_lock_id(), &forever(), None)
        .await
        .expect("grant");
    cx.client
        .slock("s", generate_lock_id(), &forever(), None)
        .await
        .expect("grant");
    let shared = cx
        .client
        .status(&Filter::new().mode(Mode::Shared))
        .await
        .expect("status");
    assert_eq!(shared.len(), 2);
    assert!(
        shared
            .iter()
            .all(|l| l.mode == Mode::Shared && l.resource.as_str() == "s")
    );
    let exclusive = cx
        .client
        .status(&Filter::new().mode(Mode::Exclusive))
        .await
        .expect("status");
    assert_eq!(resources(&exclusive), set(&["x"]));
}

pub async fn status_filters_resource_and_lock_id<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    cx.client
        .slock("r1", &a, &forever(), None)
        .await
        .expect("grant");
    cx.client
        .slock("r1", &b, &forever(), None)
        .await
        .expect("grant");
    cx.client.xlock("r2", &a, &forever()).await.expect("grant");
    let f = Filter::new().resource("r1");
    assert_eq!(cx.client.status(&f).await.expect("status").len(), 2);
    let f = Filter::new().lock_id(a.as_str());
    assert_eq!(
        resources(&cx.client.status(&f).await.expect("status")),
        set(&["r1", "r2"])
    );
    let f = Filter::new().resource("r1").lock_id(b.as_str());
    assert_eq!(
        pairs(&cx.client.status(&f).await.expect("status")),
        vec![pair("r1", &b)]
    );
    let f = Filter::new().resource("nowhere");
    assert!(cx.client.status(&f).await.expect("status").is_empty());
}

pub async fn status_combines_fields<B: Backend>(cx: &Ctx<B>) {
    let alice = |t| LockDetails::new().owner("alice").ttl(t);
    cx.client
        .slock("r", generate_lock_id(), &alice(secs(10)), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", generate_lock_id(), &alice(secs(2)), None)
        .await
        .expect("grant");
    cx.client
        .slock(
            "r",
            generate_lock_id(),
            &LockDetails::new().owner("bob").ttl(secs(10)),
            None,
        )
        .await
        .expect("grant");
    cx.client
        .xlock("q", generate_lock_id(), &alice(secs(10)))
        .await
        .expect("grant");
    let f = Filter::new()
        .owner("alice")
        .mode(Mode::Shared)
        .resource("r")
        .ttl_gte(secs(5));
    let found = cx.client.status(&f).await.expect("status");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].ttl, Some(secs(10)));
    assert_eq!(found[0].owner.as_deref(), Some("alice"));
}

pub async fn status_orders_oldest_first<B: Backend>(cx: &Ctx<B>) {
    for r in ["c", "a", "b"] {
        cx.client
            .xlock(r, generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.clock.advance(ms(5));
    }
    let names: Vec<String> = all(cx)
        .await
        .iter()
        .map(|l| l.resource.as_str().to_owned())
        .collect();
    assert_eq!(names, ["c", "a", "b"]);
}

pub async fn status_reports_expired_locks<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(3));
    let locks = all(cx).await;
    assert_eq!(
        pairs(&locks),
        vec![pair("r", &a)],
        "expired but not yet purged"
    );
    assert_eq!(locks[0].ttl, Some(Duration::ZERO));
}

// ---------------------------------------------------------------- renew

pub async fn renew_extends_every_lock_of_group<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r1", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.client
        .slock("r2", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let renewed = cx.client.renew(&a, secs(10)).await.expect("renew");
    assert_eq!(renewed.len(), 2);
    for l in &renewed {
        assert_eq!(l.expires_at, Some(at(secs(12))));
        assert_eq!(l.renewed_at, Some(at(secs(2))));
        assert_eq!(l.ttl, Some(secs(10)));
    }
    assert_eq!(all(cx).await, renewed);
    cx.clock.advance(secs(6)); // past the original expiry
    assert_locked(
        cx.client.xlock("r1", generate_lock_id(), &forever()).await,
        "r1",
    );
}

pub async fn renew_changes_only_its_group<B: Backend>(cx: &Ctx<B>) {
    let (a, decoy) = (generate_lock_id(), generate_lock_id());
    cx.client
        .slock("r", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", &decoy, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let renewed = cx.client.renew(&a, secs(60)).await.expect("renew");
    assert_eq!(pairs(&renewed), vec![pair("r", &a)]);
    let decoy_now = cx
        .client
        .status(&Filter::new().lock_id(decoy.as_str()))
        .await
        .expect("status");
    assert_eq!(decoy_now[0].expires_at, Some(at(secs(5))));
    assert_eq!(decoy_now[0].renewed_at, None);
}

pub async fn renew_unknown_lock_id_is_not_found<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(5)))
        .await
        .expect("grant");
    let result = cx.client.renew(generate_lock_id(), secs(5)).await;
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

pub async fn renew_within_margin_changes_nothing<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("long", &a, &ttl(secs(10)))
        .await
        .expect("grant");
    cx.client
        .xlock("short", &a, &ttl(secs(2)))
        .await
        .expect("grant");
    cx.clock.advance(ms(1_500)); // "short" expires in 500 ms, inside the 1 s margin
    let before = all(cx).await;
    match cx.client.renew(&a, secs(30)).await {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(pairs(&locks), vec![pair("short", &a)]);
        }
        other => panic!("expected NotRenewable, got {other:?}"),
    }
    assert_eq!(all(cx).await, before, "a failed renew changes nothing");
}

pub async fn renew_of_expired_lock_is_refused<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let result = cx.client.renew(&a, secs(10)).await;
    assert!(
        matches!(&result, Err(Error::NotRenewable { locks }) if locks.len() == 1),
        "{result:?}"
    );
}

pub async fn renew_sets_ttl_on_lock_without_one<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client.xlock("r", &a, &forever()).await.expect("grant");
    let renewed = cx.client.renew(&a, secs(5)).await.expect("renew");
    assert_eq!(renewed[0].expires_at, Some(at(secs(5))));
    cx.clock.advance(secs(5));
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("now it expires");
}

pub async fn renew_with_zero_margin<B: Backend>(_cx: &Ctx<B>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = B::store(Arc::clone(&clock)).await;
    let client = Client::with_renew_margin(store, Duration::ZERO).expect("zero margin is allowed");
    let a = generate_lock_id();
    client.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
    clock.advance(ms(999));
    let renewed = client
        .renew(&a, secs(1))
        .await
        .expect("1 ms left is enough with no margin");
    assert_eq!(renewed[0].expires_at, Some(at(ms(1_999))));
    clock.advance(secs(1));
    let result = client.renew(&a, secs(1)).await;
    assert!(
        matches!(result, Err(Error::NotRenewable { .. })),
        "{result:?}"
    );
    B::teardown(client.store()).await;
}

pub async fn renew_margin_boundary<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    cx.client
        .xlock("a", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.client
        .xlock("b", &b, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.clock.advance(ms(3_999)); // 1001 ms left: outside the 1 s margin
    cx.client.renew(&a, secs(5)).await.expect("renewable");
    cx.clock.advance(ms(1)); // 1000 ms left: expires_at <= now + margin
    let result = cx.client.renew(&b, secs(5)).await;
    assert!(
        matches!(result, Err(Error::NotRenewable { .. })),
        "{result:?}"
    );
}

pub async fn renew_keeps_fence<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx
        .client
        .xlock("r", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let renewed = cx.client.renew(&a, secs(5)).await.expect("renew");
    assert_eq!(renewed[0].fence, granted.fence);
    assert_eq!(renewed[0].created_at, granted.created_at);
}

// ---------------------------------------------------------------- purge

pub async fn purge_removes_expired_groups_and_keeps_live<B: Backend>(cx: &Ctx<B>) {
    let (x, y, z) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    cx.client
        .xlock("r1", &x, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.client
        .xlock("r2", &y, &ttl(secs(10)))
        .await
        .expect("grant");
    cx.client.xlock("r3", &z, &forever()).await.expect("grant");
    cx.clock.advance(secs(2));
    let removed = cx.client.purge().await.expect("purge");
    assert_eq!(pairs(&removed), vec![pair("r1", &x)]);
    assert_eq!(resources(&all(cx).await), set(&["r2", "r3"]));
}

pub async fn purge_removes_no_ttl_lock_of_expired_group<B: Backend>(cx: &Ctx<B>) {
    let x = generate_lock_id();
    cx.client
        .xlock("expiring", &x, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(ms(1));
    cx.client
        .slock("forever", &x, &forever(), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let removed = cx.client.purge().await.expect("purge");
    assert_eq!(
        pairs(&removed),
        vec![pair("forever", &x), pair("expiring", &x)]
    );
    assert!(all(cx).await.is_empty());
}

pub async fn purge_spares_lock_created_after_purge_began<B: Backend>(cx: &Ctx<B>) {
    let x = generate_lock_id();
    cx.client
        .xlock("old", &x, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.set(at(secs(5)));
    cx.client.xlock("new", &x, &forever()).await.expect("grant");
    // Run the purge "as of" 2 s: it began before "new" was created at 5 s.
    cx.clock.set(at(secs(2)));
    let removed = cx.client.purge().await.expect("purge");
    assert_eq!(pairs(&removed), vec![pair("old", &x)]);
    cx.clock.set(at(secs(5)));
    assert_eq!(pairs(&all(cx).await), vec![pair("new", &x)]);
}

pub async fn purge_spares_lock_created_in_its_millisecond<B: Backend>(cx: &Ctx<B>) {
    // Timestamps are milliseconds: a lock created at the purge's instant may have been
    // granted after the purge began, so it is spared although its group has expired.
    let x = generate_lock_id();
    cx.client
        .xlock("old", &x, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.set(at(secs(2)));
    cx.client
        .xlock("same-ms", &x, &ttl(secs(10)))
        .await
        .expect("grant");
    let removed = cx.client.purge().await.expect("purge");
    assert_eq!(pairs(&removed), vec![pair("old", &x)]);
    assert_eq!(pairs(&all(cx).await), vec![pair("same-ms", &x)]);
}

pub async fn purge_groups_by_lock_id_newest_first<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (id("group-a"), id("group-b"));
    cx.client
        .xlock("b1", &b, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.client
        .xlock("a1", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(ms(10));
    cx.client
        .xlock("b2", &b, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.client.xlock("a2", &a, &forever()).await.expect("grant");
    cx.clock.advance(secs(2));
    let removed = cx.client.purge().await.expect("purge");
    assert_eq!(
        pairs(&removed),
        vec![
            pair("a2", &a),
            pair("a1", &a),
            pair("b2", &b),
            pair("b1", &b)
        ]
    );
}

pub async fn purge_is_idempotent<B: Backend>(cx: &Ctx<B>) {
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(1)))
        .await
        .expect("grant");
    cx.client
        .xlock("live", generate_lock_id(), &forever())
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    assert_eq!(cx.client.purge().await.expect("purge").len(), 1);
    let after_once = all(cx).await;
    assert!(cx.client.purge().await.expect("purge again").is_empty());
    assert_eq!(all(cx).await, after_once);
}

pub async fn purge_of_nothing_returns_empty<B: Backend>(cx: &Ctx<B>) {
    assert!(cx.client.purge().await.expect("purge").is_empty());
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(10)))
        .await
        .expect("grant");
    assert!(cx.client.purge().await.expect("purge").is_empty());
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn purge_frees_resources<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.client
        .slock("s", &a, &forever(), Some(1))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    assert_eq!(cx.client.purge().await.expect("purge").len(), 2);
    cx.client
        .xlock("s", generate_lock_id(), &forever())
        .await
        .expect("s is free");
    cx.client
        .slock("r", generate_lock_id(), &forever(), Some(1))
        .await
        .expect("r is free");
}

pub async fn renew_after_purge_is_not_found<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    cx.client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    assert_eq!(cx.client.purge().await.expect("purge").len(), 1);
    let result = cx.client.renew(&a, secs(10)).await;
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

// ---------------------------------------------------------------- one lock: renew_one, unlock_one

/// The locks of `lock_id`, as status reports them.
async fn group_of<B: Backend>(cx: &Ctx<B>, lock_id: &LockId) -> Vec<LockStatus> {
    cx.client
        .status(&Filter::new().lock_id(lock_id.as_str()))
        .await
        .expect("status")
}

#[track_caller]
fn assert_not_found<T: Debug>(result: Result<T, Error>) {
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

/// `lock` as it reads after a renewal at `now` for `ttl`.
fn renewed(lock: &LockStatus, now: Timestamp, ttl: Duration) -> LockStatus {
    let mut want = lock.clone();
    want.expires_at = Some(now.saturating_add(ttl));
    want.renewed_at = Some(now);
    want.ttl = Some(ttl);
    want
}

pub async fn renew_one_extends_live_exclusive_lock<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let details = LockDetails::new()
        .owner("alice")
        .host("host-1")
        .comment("job 7")
        .ttl(secs(5));
    let granted = cx.client.xlock("r", &a, &details).await.expect("grant");
    cx.clock.advance(secs(2));
    let got = cx
        .client
        .renew_one(&granted, secs(10))
        .await
        .expect("renew_one");
    assert_eq!(got, renewed(&granted, at(secs(2)), secs(10)));
    assert_eq!(got.expires_at, Some(at(secs(12))));
    assert_eq!(got.fence, granted.fence, "renewing keeps the fence");
    assert_eq!(
        all(cx).await,
        vec![got],
        "the store holds what was returned"
    );
    cx.clock.advance(secs(6)); // past the original expiry
    assert_locked(
        cx.client.xlock("r", generate_lock_id(), &forever()).await,
        "r",
    );
}

pub async fn renew_one_changes_only_its_shared_lock<B: Backend>(cx: &Ctx<B>) {
    let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
    let mut granted = Vec::new();
    for a in &ids {
        let l = cx
            .client
            .slock("r", a, &ttl(secs(5)), None)
            .await
            .expect("grant");
        granted.push(l);
    }
    cx.clock.advance(secs(1));
    let before = all(cx).await;
    let got = cx
        .client
        .renew_one(&granted[1], secs(30))
        .await
        .expect("renew_one");
    assert_eq!(got, renewed(&before[1], at(secs(1)), secs(30)));
    assert_eq!(got.mode, Mode::Shared);
    let want: Vec<LockStatus> = before
        .iter()
        .map(|l| {
            if l.lock_id == ids[1] {
                got.clone()
            } else {
                l.clone()
            }
        })
        .collect();
    assert_eq!(all(cx).await, want, "the other shared locks are untouched");
}

pub async fn renew_one_sets_ttl_on_lock_without_one<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx.client.xlock("r", &a, &forever()).await.expect("grant");
    assert_eq!(granted.expires_at, None);
    cx.clock.advance(secs(3));
    let got = cx
        .client
        .renew_one(&granted, secs(5))
        .await
        .expect("a lock without TTL is renewable");
    assert_eq!(got, renewed(&granted, at(secs(3)), secs(5)));
    assert_eq!(all(cx).await, vec![got]);
    cx.clock.advance(secs(5));
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("now it expires");
}

pub async fn renew_one_within_margin_changes_nothing<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx
        .client
        .xlock("r", &a, &ttl(secs(2)))
        .await
        .expect("grant");
    cx.clock.advance(ms(1_500)); // 500 ms left, inside the 1 s margin
    let before = all(cx).await;
    match cx.client.renew_one(&granted, secs(30)).await {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(locks, before, "the refusal lists the lock as it is");
        }
        other => panic!("expected NotRenewable, got {other:?}"),
    }
    assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
}

pub async fn renew_one_margin_boundary<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    let la = cx
        .client
        .xlock("a", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let lb = cx
        .client
        .slock("b", &b, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.clock.advance(ms(3_999)); // 1001 ms left: outside the 1 s margin
    let got = cx.client.renew_one(&la, secs(5)).await.expect("renewable");
    assert_eq!(got.expires_at, Some(at(ms(8_999))));
    cx.clock.advance(ms(1)); // 1000 ms left: expires_at <= now + margin
    match cx.client.renew_one(&lb, secs(5)).await {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(pairs(&locks), vec![pair("b", &b)]);
            assert_eq!(locks[0].expires_at, Some(at(secs(5))));
        }
        other => panic!("expected NotRenewable, got {other:?}"),
    }
}

pub async fn renew_one_of_expired_lock_is_refused<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx
        .client
        .slock("r", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let before = all(cx).await;
    match cx.client.renew_one(&granted, secs(10)).await {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(locks, before, "the refusal lists the lock as it is");
            assert_eq!(locks[0].ttl, Some(Duration::ZERO));
        }
        other => panic!("expected NotRenewable, got {other:?}"),
    }
    assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
}

pub async fn renew_one_of_taken_over_lock_is_not_found<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let old_x = cx
        .client
        .xlock("x", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    let old_s = cx
        .client
        .slock("s", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let new_x = cx
        .client
        .xlock("x", &b, &ttl(secs(10)))
        .await
        .expect("takeover");
    let new_s = cx
        .client
        .xlock("s", &c, &ttl(secs(10)))
        .await
        .expect("takeover");
    assert_not_found(cx.client.renew_one(&old_x, secs(10)).await);
    assert_not_found(cx.client.renew_one(&old_s, secs(10)).await);
    assert_eq!(
        all(cx).await,
        vec![new_s, new_x],
        "the new holders are untouched"
    );
}

pub async fn renew_one_after_purge_is_not_found<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let old = cx
        .client
        .slock("r", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    let keep = cx
        .client
        .slock("r", &b, &forever(), None)
        .await
        .expect("grant");
    let gone = cx
        .client
        .xlock("alone", &c, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let purged: BTreeSet<_> = pairs(&cx.client.purge().await.expect("purge"))
        .into_iter()
        .collect();
    assert_eq!(purged, BTreeSet::from([pair("r", &a), pair("alone", &c)]));
    assert_not_found(cx.client.renew_one(&old, secs(10)).await);
    assert_not_found(cx.client.renew_one(&gone, secs(10)).await);
    assert_eq!(all(cx).await, vec![keep]);
}

pub async fn renew_one_of_released_lock_is_not_found<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    let by_unlock = cx.client.xlock("r", &a, &forever()).await.expect("grant");
    assert_eq!(cx.client.unlock(&a).await.expect("unlock").len(), 1);
    assert_not_found(cx.client.renew_one(&by_unlock, secs(5)).await);
    let by_unlock_one = cx
        .client
        .slock("s", &b, &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert!(
        cx.client
            .unlock_one(&by_unlock_one)
            .await
            .expect("unlock_one")
            .is_some()
    );
    assert_not_found(cx.client.renew_one(&by_unlock_one, secs(5)).await);
    assert!(all(cx).await.is_empty(), "nothing came back");
}

pub async fn renew_one_leaves_rest_of_group<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let r1 = cx
        .client
        .xlock("r1", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.client
        .slock("r2", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let r2_before = cx
        .client
        .status(&Filter::new().resource("r2"))
        .await
        .expect("status");
    let got = cx.client.renew_one(&r1, secs(10)).await.expect("renew_one");
    assert_eq!(got.expires_at, Some(at(secs(12))));
    let mut want = vec![got];
    want.extend(r2_before);
    assert_eq!(group_of(cx, &a).await, want, "r2 keeps its expiry");
    assert_eq!(want[1].expires_at, Some(at(secs(5))));
    assert_eq!(want[1].renewed_at, None);
    cx.clock.advance(secs(3)); // r2 expired, r1 renewed
    cx.client
        .xlock("r2", generate_lock_id(), &forever())
        .await
        .expect("r2 was not renewed");
    assert_locked(
        cx.client.xlock("r1", generate_lock_id(), &forever()).await,
        "r1",
    );
}

pub async fn renew_one_ignores_rest_of_group_within_margin<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let long = cx
        .client
        .xlock("long", &a, &ttl(secs(10)))
        .await
        .expect("grant");
    cx.client
        .xlock("short", &a, &ttl(secs(2)))
        .await
        .expect("grant");
    cx.clock.advance(ms(1_500)); // "short" expires in 500 ms, inside the 1 s margin
    let result = cx.client.renew(&a, secs(30)).await;
    assert!(
        matches!(&result, Err(Error::NotRenewable { locks }) if locks.len() == 1),
        "the group is not renewable: {result:?}"
    );
    let got = cx
        .client
        .renew_one(&long, secs(30))
        .await
        .expect("one lock of the group is");
    assert_eq!(got.expires_at, Some(at(ms(31_500))));
    let short = cx
        .client
        .status(&Filter::new().resource("short"))
        .await
        .expect("status");
    assert_eq!(short[0].expires_at, Some(at(secs(2))));
    assert_eq!(short[0].renewed_at, None);
}

pub async fn renew_one_rejects_zero_ttl<B: Backend>(cx: &Ctx<B>) {
    let granted = cx
        .client
        .xlock("r", generate_lock_id(), &ttl(secs(5)))
        .await
        .expect("grant");
    assert_invalid(cx.client.renew_one(&granted, Duration::ZERO).await, "ttl");
    assert_eq!(all(cx).await, vec![granted], "nothing changed");
}

pub async fn renew_one_twice_in_one_instant_within_margin<B: Backend>(cx: &Ctx<B>) {
    // A renewal for a TTL within the margin leaves a lock the next renewal must refuse, in
    // the same millisecond too (the second call must not pass for the first one).
    let a = generate_lock_id();
    let granted = cx
        .client
        .xlock("r", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let first = cx
        .client
        .renew_one(&granted, secs(1))
        .await
        .expect("5 s left: renewable");
    assert_eq!(first.expires_at, Some(at(secs(1))));
    let before = all(cx).await;
    match cx.client.renew_one(&granted, secs(1)).await {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(locks, before, "the refusal lists the lock as it is");
        }
        other => panic!("expected NotRenewable (1 s left, 1 s margin), got {other:?}"),
    }
    assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
}

pub async fn unlock_one_releases_live_lock<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let details = LockDetails::new()
        .owner("alice")
        .host("host-1")
        .comment("job 7")
        .ttl(secs(5));
    let granted = cx.client.xlock("r", &a, &details).await.expect("grant");
    cx.clock.advance(secs(1));
    let before = all(cx).await;
    let released = cx.client.unlock_one(&granted).await.expect("unlock_one");
    assert_eq!(
        released.as_ref(),
        before.first(),
        "returned as it was just before"
    );
    assert_eq!(released.and_then(|l| l.ttl), Some(secs(4)));
    assert!(all(cx).await.is_empty());
    let next = cx
        .client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("the resource is free");
    assert!(
        next.fence > granted.fence,
        "the fence counter survives: {} after {}",
        next.fence,
        granted.fence
    );
}

pub async fn unlock_one_of_released_lock_is_none<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx.client.xlock("r", &a, &forever()).await.expect("grant");
    assert_eq!(cx.client.unlock(&a).await.expect("unlock").len(), 1);
    assert_eq!(
        cx.client.unlock_one(&granted).await.expect("unlock_one"),
        None
    );
    assert!(all(cx).await.is_empty());
}

pub async fn unlock_one_of_taken_over_lock_is_none<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let old_x = cx
        .client
        .xlock("x", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    let old_s = cx
        .client
        .slock("s", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let new_x = cx
        .client
        .slock("x", &b, &forever(), None)
        .await
        .expect("expired exclusive does not block");
    let new_s = cx
        .client
        .xlock("s", &c, &forever())
        .await
        .expect("expired shared does not block");
    assert_eq!(
        cx.client.unlock_one(&old_x).await.expect("unlock_one"),
        None
    );
    assert_eq!(
        cx.client.unlock_one(&old_s).await.expect("unlock_one"),
        None
    );
    assert_eq!(
        all(cx).await,
        vec![new_s, new_x],
        "the new holders are untouched"
    );
}

pub async fn unlock_one_after_purge_is_none<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let old = cx
        .client
        .slock("r", &a, &ttl(secs(1)), None)
        .await
        .expect("grant");
    let keep = cx
        .client
        .slock("r", &b, &forever(), None)
        .await
        .expect("grant");
    let gone = cx
        .client
        .xlock("alone", &c, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    assert_eq!(cx.client.purge().await.expect("purge").len(), 2);
    assert_eq!(cx.client.unlock_one(&old).await.expect("unlock_one"), None);
    assert_eq!(cx.client.unlock_one(&gone).await.expect("unlock_one"), None);
    assert_eq!(all(cx).await, vec![keep]);
}

pub async fn unlock_one_leaves_rest_of_group<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let r1 = cx.client.xlock("r1", &a, &forever()).await.expect("grant");
    let r2 = cx
        .client
        .slock("r2", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert_eq!(
        cx.client.unlock_one(&r1).await.expect("unlock_one"),
        Some(r1)
    );
    assert_eq!(all(cx).await, vec![r2], "r2 is untouched");
    cx.client
        .xlock("r1", generate_lock_id(), &forever())
        .await
        .expect("r1 is free");
    assert_locked(
        cx.client.xlock("r2", generate_lock_id(), &forever()).await,
        "r2",
    );
    assert_eq!(
        pairs(&cx.client.unlock(&a).await.expect("unlock")),
        vec![pair("r2", &a)],
        "the group is r2 alone"
    );
}

pub async fn unlock_one_is_idempotent<B: Backend>(cx: &Ctx<B>) {
    let (a, b) = (generate_lock_id(), generate_lock_id());
    let mine = cx
        .client
        .slock("r", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", &b, &ttl(secs(5)), None)
        .await
        .expect("grant");
    assert_eq!(
        cx.client.unlock_one(&mine).await.expect("unlock_one"),
        Some(mine.clone())
    );
    let after_once = all(cx).await;
    assert_eq!(pairs(&after_once), vec![pair("r", &b)]);
    assert_eq!(
        cx.client.unlock_one(&mine).await.expect("unlock_one again"),
        None
    );
    assert_eq!(all(cx).await, after_once, "twice is once");
}

pub async fn unlock_one_changes_only_its_shared_lock<B: Backend>(cx: &Ctx<B>) {
    let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
    let mut granted = Vec::new();
    for a in &ids {
        let l = cx
            .client
            .slock("r", a, &ttl(secs(5)), Some(3))
            .await
            .expect("grant");
        granted.push(l);
    }
    cx.clock.advance(secs(1));
    let mut before = all(cx).await;
    let released = cx.client.unlock_one(&granted[1]).await.expect("unlock_one");
    assert_eq!(released, Some(before.remove(1)));
    assert_eq!(
        all(cx).await,
        before,
        "the other shared locks are untouched"
    );
    cx.client
        .slock("r", generate_lock_id(), &forever(), Some(3))
        .await
        .expect("a slot is free again");
    assert_locked(
        cx.client
            .slock("r", generate_lock_id(), &forever(), Some(3))
            .await,
        "r",
    );
}

pub async fn unlock_one_of_expired_lock_returns_it<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let granted = cx
        .client
        .xlock("r", &a, &ttl(secs(1)))
        .await
        .expect("grant");
    cx.clock.advance(secs(5));
    let released = cx
        .client
        .unlock_one(&granted)
        .await
        .expect("unlock_one")
        .expect("an expired lock is still there to release");
    assert_eq!(released.ttl, Some(Duration::ZERO));
    assert_eq!(released.expires_at, Some(at(secs(1))));
    assert_eq!(released.fence, granted.fence);
    assert!(all(cx).await.is_empty());
}

// ---------------------------------------------------------------- batches: renew_many

/// A renewal of `lock` (a grant's resource and lock id) for `ttl`.
fn renewal(lock: &LockStatus, ttl: Duration) -> Renewal {
    Renewal {
        resource: lock.resource.clone(),
        lock_id: lock.lock_id.clone(),
        ttl: Ttl::new(ttl).expect("test TTLs are valid"),
    }
}

/// `renew_many` through the client's store with the client's renew margin (the client has
/// no batch method: the Locker calls the store); the batch as a whole must succeed.
async fn renew_many<B: Backend>(cx: &Ctx<B>, batch: &[Renewal]) -> Vec<Result<LockStatus, Error>> {
    let each = cx
        .client
        .store()
        .renew_many(batch, cx.client.renew_margin())
        .await
        .expect("the batch as a whole succeeds");
    assert_eq!(each.len(), batch.len(), "one outcome per renewal");
    each
}

#[track_caller]
fn assert_not_renewable(result: &Result<LockStatus, Error>, want: &LockStatus) {
    match result {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(
                locks,
                std::slice::from_ref(want),
                "the refusal lists the lock as it is"
            );
        }
        other => panic!("expected NotRenewable of {want:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_missing(result: &Result<LockStatus, Error>) {
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

/// `locks` with each lock of `changed` replaced by its new state (matched by resource and
/// lock id).
fn replaced(locks: &[LockStatus], changed: &[&LockStatus]) -> Vec<LockStatus> {
    locks
        .iter()
        .map(|l| {
            changed
                .iter()
                .find(|c| c.resource == l.resource && c.lock_id == l.lock_id)
                .map_or_else(|| l.clone(), |c| (*c).clone())
        })
        .collect()
}

pub async fn renew_many_renews_each_lock_with_its_ttl<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c, d) = (
        generate_lock_id(),
        generate_lock_id(),
        generate_lock_id(),
        generate_lock_id(),
    );
    let x = cx
        .client
        .xlock("x", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let s = cx
        .client
        .slock("s", &b, &ttl(secs(5)), Some(2))
        .await
        .expect("grant");
    let forever_x = cx.client.xlock("f", &c, &forever()).await.expect("grant");
    let s_other = cx
        .client
        .slock("s", &d, &ttl(secs(5)), Some(2))
        .await
        .expect("grant");
    cx.clock.advance(secs(2));
    let before = all(cx).await;
    let now = at(secs(2));
    let each = renew_many(
        cx,
        &[
            renewal(&x, secs(10)),
            renewal(&s, secs(20)),
            renewal(&forever_x, secs(5)),
        ],
    )
    .await;
    let got: Vec<LockStatus> = each
        .into_iter()
        .map(|r| r.expect("every lock of the batch is renewable"))
        .collect();
    let was = |l: &LockStatus| {
        before
            .iter()
            .find(|b| b.resource == l.resource && b.lock_id == l.lock_id)
            .expect("held")
            .clone()
    };
    assert_eq!(
        got,
        vec![
            renewed(&was(&x), now, secs(10)),
            renewed(&was(&s), now, secs(20)),
            renewed(&was(&forever_x), now, secs(5)),
        ],
        "each lock with its own TTL, in the batch's order"
    );
    assert_eq!(
        [got[0].mode, got[1].mode, got[2].mode],
        [Mode::Exclusive, Mode::Shared, Mode::Exclusive]
    );
    assert_eq!(
        [got[0].fence, got[1].fence, got[2].fence],
        [x.fence, s.fence, forever_x.fence],
        "renewing keeps the fences"
    );
    let after = all(cx).await;
    assert_eq!(
        after,
        replaced(&before, &[&got[0], &got[1], &got[2]]),
        "the store holds what was returned, and the unnamed shared lock is untouched"
    );
    assert!(after.contains(&was(&s_other)));
    // At +6 s: the unnamed shared lock and the old expiries have passed, the new ones not.
    cx.clock.advance(secs(4));
    assert_locked(
        cx.client.xlock("x", generate_lock_id(), &forever()).await,
        "x",
    );
    assert_locked(
        cx.client.xlock("f", generate_lock_id(), &forever()).await,
        "f",
    );
    cx.client
        .slock("s", generate_lock_id(), &forever(), Some(2))
        .await
        .expect("the unnamed shared lock expired: one slot free");
    assert_locked(
        cx.client
            .slock("s", generate_lock_id(), &forever(), Some(2))
            .await,
        "s",
    );
}

pub async fn renew_many_decides_each_lock_on_its_own<B: Backend>(cx: &Ctx<B>) {
    let ids: Vec<LockId> = (0..9).map(|_| generate_lock_id()).collect();
    let [
        live,
        short,
        expired,
        gone,
        over,
        purged,
        pair_short,
        pair_long,
        taker,
    ] = std::array::from_fn(|i| ids[i].clone());
    let l_live = cx
        .client
        .xlock("live", &live, &ttl(secs(10)))
        .await
        .expect("grant");
    let l_short = cx
        .client
        .slock("short", &short, &ttl(ms(2_500)), None)
        .await
        .expect("grant");
    let l_expired = cx
        .client
        .xlock("expired", &expired, &ttl(ms(1_500)))
        .await
        .expect("grant");
    let l_gone = cx
        .client
        .xlock("gone", &gone, &forever())
        .await
        .expect("grant");
    let l_over = cx
        .client
        .xlock("over", &over, &ttl(secs(1)))
        .await
        .expect("grant");
    let l_purged = cx
        .client
        .slock("purged", &purged, &ttl(secs(1)), None)
        .await
        .expect("grant");
    // One document, two shared locks: one within the margin, one renewable.
    let l_pair_short = cx
        .client
        .slock("pair", &pair_short, &ttl(ms(2_500)), None)
        .await
        .expect("grant");
    let l_pair_long = cx
        .client
        .slock("pair", &pair_long, &ttl(secs(10)), None)
        .await
        .expect("grant");
    assert_eq!(cx.client.unlock(&gone).await.expect("unlock").len(), 1);
    cx.clock.advance(secs(1)); // "over" and "purged" expire
    let l_taker = cx
        .client
        .xlock("over", &taker, &ttl(secs(30)))
        .await
        .expect("takeover");
    let purged_now = pairs(&cx.client.purge().await.expect("purge"));
    assert_eq!(purged_now, vec![pair("purged", &purged)]);
    cx.clock.advance(ms(800)); // at +1.8 s: "short" and "pair" short have 700 ms left
    let now = at(ms(1_800));
    let before = all(cx).await;
    let as_is = |l: &LockStatus| {
        before
            .iter()
            .find(|b| b.resource == l.resource && b.lock_id == l.lock_id)
            .expect("still held")
            .clone()
    };
    let each = renew_many(
        cx,
        &[
            renewal(&l_short, secs(5)),
            renewal(&l_live, secs(5)),
            renewal(&l_gone, secs(5)),
            renewal(&l_expired, secs(5)),
            renewal(&l_over, secs(5)),
            renewal(&l_pair_short, secs(5)),
            renewal(&l_purged, secs(5)),
            renewal(&l_pair_long, secs(7)),
        ],
    )
    .await;
    assert_not_renewable(&each[0], &as_is(&l_short));
    let got_live = each[1].as_ref().expect("live: renewed").clone();
    assert_eq!(got_live, renewed(&as_is(&l_live), now, secs(5)));
    assert_missing(&each[2]);
    assert_not_renewable(&each[3], &as_is(&l_expired));
    assert!(
        matches!(&each[3], Err(Error::NotRenewable { locks }) if locks[0].ttl == Some(Duration::ZERO))
    );
    assert_missing(&each[4]);
    assert_not_renewable(&each[5], &as_is(&l_pair_short));
    assert_missing(&each[6]);
    let got_pair = each[7].as_ref().expect("pair long: renewed").clone();
    assert_eq!(got_pair, renewed(&as_is(&l_pair_long), now, secs(7)));
    assert_eq!(
        all(cx).await,
        replaced(&before, &[&got_live, &got_pair]),
        "only the two renewable locks changed; refusals and misses changed nothing"
    );
    assert!(
        before
            .iter()
            .any(|l| l.lock_id == taker && l.fence == l_taker.fence)
    );
}

pub async fn renew_many_leaves_unnamed_lock_of_shared_resource<B: Backend>(cx: &Ctx<B>) {
    let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
    let named = cx
        .client
        .slock("r", &a, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.client
        .slock("r", &b, &ttl(secs(5)), None)
        .await
        .expect("grant");
    // The rest of `a`'s group, not named either.
    cx.client
        .xlock("rest", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let elsewhere = cx
        .client
        .xlock("x", &c, &ttl(secs(5)))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let before = all(cx).await;
    let each = renew_many(
        cx,
        &[renewal(&named, secs(30)), renewal(&elsewhere, secs(30))],
    )
    .await;
    let got: Vec<LockStatus> = each.into_iter().map(|r| r.expect("renewable")).collect();
    assert_eq!(got[0].expires_at, Some(at(secs(31))));
    assert_eq!(got[1].expires_at, Some(at(secs(31))));
    let after = all(cx).await;
    assert_eq!(after, replaced(&before, &[&got[0], &got[1]]));
    let untouched: Vec<&LockStatus> = after
        .iter()
        .filter(|l| (l.resource.as_str() == "r" && l.lock_id == b) || l.resource.as_str() == "rest")
        .collect();
    assert_eq!(untouched.len(), 2);
    for l in untouched {
        assert_eq!(l.expires_at, Some(at(secs(5))), "{l:?} keeps its expiry");
        assert_eq!(l.renewed_at, None, "{l:?} was not renewed");
    }
}

pub async fn renew_many_of_nothing_is_empty<B: Backend>(cx: &Ctx<B>) {
    assert!(renew_many(cx, &[]).await.is_empty(), "on an empty store");
    cx.client
        .xlock("r", generate_lock_id(), &ttl(secs(5)))
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let before = all(cx).await;
    assert!(renew_many(cx, &[]).await.is_empty(), "with a lock held");
    assert_eq!(all(cx).await, before, "nothing changed");
}

pub async fn renew_many_names_one_lock_twice<B: Backend>(cx: &Ctx<B>) {
    // Each renewal of the batch is renew_one in turn at the batch's instant: the second
    // renewal of a lock sees the first one's result.
    let (a, b) = (generate_lock_id(), generate_lock_id());
    let la = cx
        .client
        .xlock("a", &a, &ttl(secs(5)))
        .await
        .expect("grant");
    let lb = cx
        .client
        .slock("b", &b, &ttl(secs(5)), None)
        .await
        .expect("grant");
    cx.clock.advance(secs(1));
    let now = at(secs(1));
    let before = all(cx).await;
    let each = renew_many(
        cx,
        &[
            renewal(&la, secs(10)),
            renewal(&lb, secs(1)),
            renewal(&la, secs(20)),
            renewal(&lb, secs(10)),
        ],
    )
    .await;
    let a1 = each[0].as_ref().expect("a: 4 s left, renewable").clone();
    assert_eq!(a1.expires_at, Some(at(secs(11))));
    let b1 = each[1].as_ref().expect("b: 4 s left, renewable").clone();
    assert_eq!(b1, renewed(&before[1], now, secs(1)));
    let a2 = each[2]
        .as_ref()
        .expect("a again: 10 s left after the first renewal, renewable")
        .clone();
    assert_eq!(a2, renewed(&before[0], now, secs(20)));
    // b has 1 s left after its first renewal: within the 1 s margin.
    assert_not_renewable(&each[3], &b1);
    assert_eq!(
        all(cx).await,
        vec![a2, b1],
        "the store holds each lock as the last renewal of it left it"
    );
}

// ---------------------------------------------------------------- fences

pub async fn fences_increase_per_resource<B: Backend>(cx: &Ctx<B>) {
    let mut last = 0;
    for _ in 0..5 {
        let l = cx
            .client
            .slock("r", generate_lock_id(), &forever(), None)
            .await
            .expect("grant");
        assert!(l.fence > last, "{} after {last}", l.fence);
        last = l.fence;
    }
}

pub async fn fences_increase_across_unlock<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let first = cx.client.xlock("r", &a, &forever()).await.expect("grant");
    cx.client.unlock(&a).await.expect("unlock");
    let second = cx.client.xlock("r", &a, &forever()).await.expect("grant");
    assert!(second.fence > first.fence);
}

pub async fn fences_increase_across_purge<B: Backend>(cx: &Ctx<B>) {
    let mut last = 0;
    for round in 0..3 {
        let l = cx
            .client
            .xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        assert!(l.fence > last, "round {round}: {} after {last}", l.fence);
        last = l.fence;
        cx.clock.advance(secs(1));
        assert_eq!(cx.client.purge().await.expect("purge").len(), 1);
    }
}

pub async fn fences_are_per_resource_and_reported_by_status<B: Backend>(cx: &Ctx<B>) {
    let a = cx
        .client
        .xlock("a", generate_lock_id(), &forever())
        .await
        .expect("grant");
    let b = cx
        .client
        .xlock("b", generate_lock_id(), &forever())
        .await
        .expect("grant");
    let locks = all(cx).await;
    let fence_of = |r: &str| {
        locks
            .iter()
            .find(|l| l.resource.as_str() == r)
            .map(|l| l.fence)
    };
    assert_eq!(fence_of("a"), Some(a.fence));
    assert_eq!(fence_of("b"), Some(b.fence));
}

// ---------------------------------------------------------------- misc

pub async fn create_indexes_is_idempotent<B: Backend>(cx: &Ctx<B>) {
    cx.client.create_indexes().await.expect("create indexes");
    cx.client
        .create_indexes()
        .await
        .expect("create indexes again");
    cx.client
        .xlock("r", generate_lock_id(), &forever())
        .await
        .expect("grant");
}

pub async fn details_round_trip<B: Backend>(cx: &Ctx<B>) {
    let a = generate_lock_id();
    let d = LockDetails::new()
        .owner("ünïcode owner")
        .host("h-1.example")
        .comment("nightly run #42")
        .ttl(secs(7));
    cx.client.slock("r", &a, &d, Some(5)).await.expect("grant");
    let s = all(cx).await.remove(0);
    assert_eq!(
        (s.owner.as_deref(), s.host.as_deref(), s.comment.as_deref()),
        (
            Some("ünïcode owner"),
            Some("h-1.example"),
            Some("nightly run #42")
        )
    );
    let released = cx.client.unlock(&a).await.expect("unlock");
    assert_eq!(released, vec![s]);
}

pub async fn concurrent_xlock_has_one_winner<B: Backend>(cx: &Ctx<B>) {
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let client = cx.client.clone();
            tokio::spawn(async move { client.xlock("hot", generate_lock_id(), &forever()).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => winners += 1,
            Err(Error::AlreadyLocked { .. }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(all(cx).await.len(), 1);
}

pub async fn concurrent_slock_respects_limit<B: Backend>(cx: &Ctx<B>) {
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let client = cx.client.clone();
            tokio::spawn(async move {
                client
                    .slock("hot", generate_lock_id(), &forever(), Some(3))
                    .await
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if t.await.expect("task").is_ok() {
            winners += 1;
        }
    }
    assert_eq!(winners, 3);
    assert_eq!(all(cx).await.len(), 3);
}

pub async fn concurrent_purgers_report_each_lock_once<B: Backend>(cx: &Ctx<B>) {
    for i in 0..20 {
        cx.client
            .xlock(&format!("r{i}"), generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
    }
    cx.clock.advance(secs(1));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let client = cx.client.clone();
            tokio::spawn(async move { client.purge().await })
        })
        .collect();
    let mut reported = Vec::new();
    for t in tasks {
        reported.extend(t.await.expect("task").expect("purge"));
    }
    let distinct: BTreeSet<_> = pairs(&reported).into_iter().collect();
    assert_eq!(reported.len(), 20, "every lock reported exactly once");
    assert_eq!(distinct.len(), 20);
    assert!(all(cx).await.is_empty());
}
