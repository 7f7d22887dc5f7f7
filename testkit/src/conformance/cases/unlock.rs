//! Releasing a group: `unlock`.

use super::super::support::*;

cases! {
    __conformance_unlock;

    async fn unlock_returns_newest_first_across_resources(cx) {
        let a = generate_lock_id();
        cx.xlock("r1", &a, &LockOptions::new().owner("o1"))
            .await
            .expect("grant");
        cx.clock.advance(ms(1));
        cx.slock("r2", &a, &LockOptions::new().owner("o2"), None)
            .await
            .expect("grant");
        cx.clock.advance(ms(1));
        cx.xlock("r3", &a, &ttl(secs(5))).await.expect("grant");
        let released = cx.unlock(&a).await.expect("unlock");
        assert_eq!(
            pairs(&released),
            vec![pair("r3", &a), pair("r2", &a), pair("r1", &a)]
        );
        assert_eq!(released[1].mode, Mode::Shared);
        assert_eq!(released[1].holder.owner.as_deref(), Some("o2"));
        assert!(all(cx).await.is_empty());
    }

    async fn unlock_orders_same_instant_by_resource(cx) {
        let a = generate_lock_id();
        for r in ["b", "c", "a"] {
            cx.xlock(r, &a, &forever()).await.expect("grant");
        }
        let released = cx.unlock(&a).await.expect("unlock");
        assert_eq!(
            pairs(&released),
            vec![pair("c", &a), pair("b", &a), pair("a", &a)]
        );
    }

    async fn unlock_unknown_lock_id_returns_empty(cx) {
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("grant");
        assert!(
            cx.unlock(generate_lock_id())
                .await
                .expect("unlock")
                .is_empty()
        );
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn unlock_is_idempotent(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &forever()).await.expect("grant");
        assert_eq!(cx.unlock(&a).await.expect("unlock").len(), 1);
        assert!(cx.unlock(&a).await.expect("unlock again").is_empty());
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("resource is free");
    }

    async fn unlock_reports_expired_locks_with_zero_ttl(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(5));
        let released = cx.unlock(&a).await.expect("unlock");
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].ttl, Some(Duration::ZERO));
        assert_eq!(released[0].expires_at, Some(at(secs(1))));
    }

    async fn unlock_leaves_other_groups_alone(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        cx.slock("r", &a, &forever(), None).await.expect("grant");
        cx.slock("r", &b, &forever(), None).await.expect("grant");
        cx.xlock("other", &b, &forever()).await.expect("grant");
        assert_eq!(
            pairs(&cx.unlock(&a).await.expect("unlock")),
            vec![pair("r", &a)]
        );
        let left = all(cx).await;
        assert_eq!(left.len(), 2);
        assert!(left.iter().all(|l| l.lock_id == b));
    }
}
