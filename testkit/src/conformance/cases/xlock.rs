//! Exclusive locks: `xlock`.

use super::super::support::*;

cases! {
    __conformance_xlock;

    async fn xlock_grants_free_resource(cx) {
        let a = generate_lock_id();
        let details = LockOptions::new()
            .owner("alice")
            .host("host-1")
            .comment("job 7")
            .ttl(secs(30));
        let granted = cx.xlock("invoices", &a, &details).await.expect("grant");
        assert_eq!(granted.mode, Mode::Exclusive);
        assert_eq!(granted.created_at, T0);
        assert_eq!(granted.expires_at, Some(at(secs(30))));
        assert_eq!(granted.ttl, Some(secs(30)));
        assert!(granted.fence > 0);
        assert_eq!(all(cx).await, vec![granted]);
    }

    async fn xlock_refuses_other_group(cx) {
        cx.xlock("r", generate_lock_id(), &ttl(secs(10)))
            .await
            .expect("grant");
        assert_locked(cx.xlock("r", generate_lock_id(), &ttl(secs(10))).await, "r");
        cx.clock.advance(ms(9_999));
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn xlock_is_not_reentrant(cx) {
        let a = generate_lock_id();
        let first = cx.xlock("r", &a, &ttl(secs(10))).await.expect("grant");
        assert_locked(cx.xlock("r", &a, &ttl(secs(10))).await, "r");
        assert_eq!(
            all(cx).await,
            vec![first],
            "the refused request changed nothing"
        );
    }

    async fn xlock_takes_over_expired_lock(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        let first = cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(ms(999));
        assert_locked(cx.xlock("r", &b, &forever()).await, "r");
        cx.clock.advance(ms(1)); // expires_at <= now: expired
        let second = cx.xlock("r", &b, &forever()).await.expect("takeover");
        assert!(second.fence > first.fence);
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)]);
        assert!(
            cx.unlock(&a).await.expect("unlock").is_empty(),
            "a's lock was taken over"
        );
    }

    async fn xlock_without_ttl_never_expires(cx) {
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.clock.advance(YEAR * 50);
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        assert!(cx.purge().await.expect("purge").is_empty());
    }

    async fn one_lock_id_locks_many_resources(cx) {
        let a = generate_lock_id();
        for r in ["r1", "r2", "r3"] {
            cx.xlock(r, &a, &ttl(secs(5))).await.expect("grant");
        }
        cx.slock("r4", &a, &forever(), Some(1))
            .await
            .expect("grant");
        let group = cx
            .status(&Filter::new().lock_id(a.as_str()))
            .await
            .expect("status");
        assert_eq!(group.len(), 4);
        assert!(group.iter().all(|l| l.lock_id == a));
        assert_locked(cx.xlock("r2", generate_lock_id(), &forever()).await, "r2");
    }

    async fn xlock_refused_by_live_shared(cx) {
        cx.slock("r", generate_lock_id(), &ttl(secs(5)), None)
            .await
            .expect("grant");
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn xlock_refuses_upgrade_from_shared(cx) {
        let a = generate_lock_id();
        cx.slock("r", &a, &ttl(secs(5)), None).await.expect("grant");
        assert_locked(cx.xlock("r", &a, &ttl(secs(5))).await, "r");
        let locks = all(cx).await;
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].mode, Mode::Shared);
    }

    async fn expired_shared_does_not_block_xlock(cx) {
        for _ in 0..2 {
            cx.slock("r", generate_lock_id(), &ttl(secs(1)), None)
                .await
                .expect("grant");
        }
        cx.clock.advance(secs(1));
        let b = generate_lock_id();
        let granted = cx
            .xlock("r", &b, &forever())
            .await
            .expect("expired shared locks do not block");
        assert_eq!(
            all(cx).await,
            vec![granted],
            "expired shared locks were taken over"
        );
    }

    async fn xlock_refused_while_any_shared_live(cx) {
        cx.slock("r", generate_lock_id(), &ttl(secs(1)), None)
            .await
            .expect("grant");
        cx.slock("r", generate_lock_id(), &ttl(secs(10)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        assert_eq!(all(cx).await.len(), 2, "a refused grant takes nothing over");
    }
}
