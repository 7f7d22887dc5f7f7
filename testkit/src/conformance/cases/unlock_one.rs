//! One lock: `unlock_one`.

use super::super::support::*;

cases! {
    __conformance_unlock_one;

    async fn unlock_one_releases_live_lock(cx) {
        let a = generate_lock_id();
        let details = LockOptions::new()
            .owner("alice")
            .host("host-1")
            .comment("job 7")
            .ttl(secs(5));
        let granted = cx.xlock("r", &a, &details).await.expect("grant");
        cx.clock.advance(secs(1));
        let before = all(cx).await;
        let released = cx.unlock_one(&granted).await.expect("unlock_one");
        assert_eq!(
            released.as_ref(),
            before.first(),
            "returned as it was just before"
        );
        assert_eq!(released.and_then(|l| l.ttl), Some(secs(4)));
        assert!(all(cx).await.is_empty());
        let next = cx
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

    async fn unlock_one_of_released_lock_is_none(cx) {
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &forever()).await.expect("grant");
        assert_eq!(cx.unlock(&a).await.expect("unlock").len(), 1);
        assert_eq!(cx.unlock_one(&granted).await.expect("unlock_one"), None);
        assert!(all(cx).await.is_empty());
    }

    async fn unlock_one_of_taken_over_lock_is_none(cx) {
        let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        let old_x = cx.xlock("x", &a, &ttl(secs(1))).await.expect("grant");
        let old_s = cx.slock("s", &a, &ttl(secs(1)), None).await.expect("grant");
        cx.clock.advance(secs(1));
        let new_x = cx
            .slock("x", &b, &forever(), None)
            .await
            .expect("expired exclusive does not block");
        let new_s = cx
            .xlock("s", &c, &forever())
            .await
            .expect("expired shared does not block");
        assert_eq!(cx.unlock_one(&old_x).await.expect("unlock_one"), None);
        assert_eq!(cx.unlock_one(&old_s).await.expect("unlock_one"), None);
        assert_eq!(
            all(cx).await,
            vec![new_s, new_x],
            "the new holders are untouched"
        );
    }

    async fn unlock_one_after_purge_is_none(cx) {
        let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        let old = cx.slock("r", &a, &ttl(secs(1)), None).await.expect("grant");
        let keep = cx.slock("r", &b, &forever(), None).await.expect("grant");
        let gone = cx.xlock("alone", &c, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1));
        assert_eq!(cx.purge().await.expect("purge").len(), 2);
        assert_eq!(cx.unlock_one(&old).await.expect("unlock_one"), None);
        assert_eq!(cx.unlock_one(&gone).await.expect("unlock_one"), None);
        assert_eq!(all(cx).await, vec![keep]);
    }

    async fn unlock_one_leaves_rest_of_group(cx) {
        let a = generate_lock_id();
        let r1 = cx.xlock("r1", &a, &forever()).await.expect("grant");
        let r2 = cx
            .slock("r2", &a, &ttl(secs(5)), None)
            .await
            .expect("grant");
        assert_eq!(cx.unlock_one(&r1).await.expect("unlock_one"), Some(r1));
        assert_eq!(all(cx).await, vec![r2], "r2 is untouched");
        cx.xlock("r1", generate_lock_id(), &forever())
            .await
            .expect("r1 is free");
        assert_locked(cx.xlock("r2", generate_lock_id(), &forever()).await, "r2");
        assert_eq!(
            pairs(&cx.unlock(&a).await.expect("unlock")),
            vec![pair("r2", &a)],
            "the group is r2 alone"
        );
    }

    async fn unlock_one_is_idempotent(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        let mine = cx.slock("r", &a, &ttl(secs(5)), None).await.expect("grant");
        cx.slock("r", &b, &ttl(secs(5)), None).await.expect("grant");
        assert_eq!(
            cx.unlock_one(&mine).await.expect("unlock_one"),
            Some(mine.clone())
        );
        let after_once = all(cx).await;
        assert_eq!(pairs(&after_once), vec![pair("r", &b)]);
        assert_eq!(cx.unlock_one(&mine).await.expect("unlock_one again"), None);
        assert_eq!(all(cx).await, after_once, "twice is once");
    }

    async fn unlock_one_changes_only_its_shared_lock(cx) {
        let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
        let mut granted = Vec::new();
        for a in &ids {
            let l = cx
                .slock("r", a, &ttl(secs(5)), Some(3))
                .await
                .expect("grant");
            granted.push(l);
        }
        cx.clock.advance(secs(1));
        let mut before = all(cx).await;
        let released = cx.unlock_one(&granted[1]).await.expect("unlock_one");
        assert_eq!(released, Some(before.remove(1)));
        assert_eq!(
            all(cx).await,
            before,
            "the other shared locks are untouched"
        );
        cx.slock("r", generate_lock_id(), &forever(), Some(3))
            .await
            .expect("a slot is free again");
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), Some(3)).await,
            "r",
        );
    }

    async fn unlock_one_of_expired_lock_returns_it(cx) {
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(5));
        let released = cx
            .unlock_one(&granted)
            .await
            .expect("unlock_one")
            .expect("an expired lock is still there to release");
        assert_eq!(released.ttl, Some(Duration::ZERO));
        assert_eq!(released.expires_at, Some(at(secs(1))));
        assert_eq!(released.fence, granted.fence);
        assert!(all(cx).await.is_empty());
    }
}
