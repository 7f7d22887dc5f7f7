//! Shared locks: `slock` and its limit.

use super::super::support::*;

cases! {
    __conformance_slock;

    async fn slock_unlimited_admits_many(cx) {
        for _ in 0..20 {
            cx.slock("r", generate_lock_id(), &forever(), None)
                .await
                .expect("grant");
        }
        let locks = all(cx).await;
        assert_eq!(locks.len(), 20);
        assert!(locks.iter().all(|l| l.mode == Mode::Shared));
    }

    async fn slock_limit_is_enforced(cx) {
        let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
        for a in &ids {
            cx.slock("r", a, &forever(), Some(3)).await.expect("grant");
        }
        let d = generate_lock_id();
        assert_locked(cx.slock("r", &d, &forever(), Some(3)).await, "r");
        assert_eq!(cx.unlock(&ids[0]).await.expect("unlock").len(), 1);
        cx.slock("r", &d, &forever(), Some(3))
            .await
            .expect("a slot is free again");
        assert_eq!(all(cx).await.len(), 3);
    }

    async fn slock_limit_holds_on_fresh_resource(cx) {
        cx.slock("fresh", generate_lock_id(), &forever(), Some(1))
            .await
            .expect("grant");
        assert_locked(
            cx.slock("fresh", generate_lock_id(), &forever(), Some(1))
                .await,
            "fresh",
        );
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn slock_refuses_duplicate_lock_id(cx) {
        let a = generate_lock_id();
        cx.slock("r", &a, &ttl(secs(5)), None).await.expect("grant");
        assert_locked(cx.slock("r", &a, &ttl(secs(5)), None).await, "r");
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn slock_refused_by_live_exclusive(cx) {
        cx.xlock("r", generate_lock_id(), &ttl(secs(5)))
            .await
            .expect("grant");
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), None).await,
            "r",
        );
        cx.clock.advance(ms(4_999));
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), Some(10))
                .await,
            "r",
        );
    }

    async fn expired_exclusive_does_not_block_slock(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(5))).await.expect("grant");
        cx.clock.advance(secs(5));
        let b = generate_lock_id();
        cx.slock("r", &b, &forever(), Some(1))
            .await
            .expect("expired exclusive does not block");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)]);
    }

    async fn expired_shared_not_counted_toward_limit(cx) {
        cx.slock("r", generate_lock_id(), &ttl(secs(1)), Some(2))
            .await
            .expect("grant");
        cx.slock("r", generate_lock_id(), &ttl(secs(10)), Some(2))
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        cx.slock("r", generate_lock_id(), &forever(), Some(2))
            .await
            .expect("one live, limit 2");
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), Some(2)).await,
            "r",
        );
    }

    async fn slock_regrants_after_own_lock_expired(cx) {
        let a = generate_lock_id();
        cx.slock("r", &a, &ttl(secs(1)), None).await.expect("grant");
        cx.clock.advance(secs(1));
        let again = cx
            .slock("r", &a, &ttl(secs(1)), None)
            .await
            .expect("own lock expired");
        let group = cx
            .status(&Filter::new().lock_id(a.as_str()))
            .await
            .expect("status");
        assert_eq!(group, vec![again], "one lock per lock id and resource");
    }

    async fn slock_limit_is_per_call(cx) {
        for _ in 0..3 {
            cx.slock("r", generate_lock_id(), &forever(), None)
                .await
                .expect("grant");
        }
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), Some(3)).await,
            "r",
        );
        cx.slock("r", generate_lock_id(), &forever(), Some(4))
            .await
            .expect("limit 4 admits a 4th");
    }
}
