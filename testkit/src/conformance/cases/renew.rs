//! Renewing a group: `renew` and its margin.

use super::super::support::*;

cases! {
    __conformance_renew;

    async fn renew_extends_every_lock_of_group(cx) {
        let a = generate_lock_id();
        cx.xlock("r1", &a, &ttl(secs(5))).await.expect("grant");
        cx.slock("r2", &a, &ttl(secs(5)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(2));
        let renewed = cx.renew(&a, secs(10)).await.expect("renew");
        assert_eq!(renewed.len(), 2);
        for l in &renewed {
            assert_eq!(l.expires_at, Some(at(secs(12))));
            assert_eq!(l.renewed_at, Some(at(secs(2))));
            assert_eq!(l.ttl, Some(secs(10)));
        }
        assert_eq!(all(cx).await, renewed);
        cx.clock.advance(secs(6)); // past the original expiry
        assert_locked(cx.xlock("r1", generate_lock_id(), &forever()).await, "r1");
    }

    async fn renew_changes_only_its_group(cx) {
        let (a, decoy) = (generate_lock_id(), generate_lock_id());
        cx.slock("r", &a, &ttl(secs(5)), None).await.expect("grant");
        cx.slock("r", &decoy, &ttl(secs(5)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        let renewed = cx.renew(&a, secs(60)).await.expect("renew");
        assert_eq!(pairs(&renewed), vec![pair("r", &a)]);
        let decoy_now = cx
            .status(&Filter::new().lock_id(decoy.as_str()))
            .await
            .expect("status");
        assert_eq!(decoy_now[0].expires_at, Some(at(secs(5))));
        assert_eq!(decoy_now[0].renewed_at, None);
    }

    async fn renew_unknown_lock_id_is_not_found(cx) {
        cx.xlock("r", generate_lock_id(), &ttl(secs(5)))
            .await
            .expect("grant");
        let result = cx.renew(generate_lock_id(), secs(5)).await;
        assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
    }

    async fn renew_within_margin_changes_nothing(cx) {
        let a = generate_lock_id();
        cx.xlock("long", &a, &ttl(secs(10))).await.expect("grant");
        cx.xlock("short", &a, &ttl(secs(2))).await.expect("grant");
        cx.clock.advance(ms(1_500)); // "short" expires in 500 ms, inside the 1 s margin
        let before = all(cx).await;
        match cx.renew(&a, secs(30)).await {
            Err(Error::NotRenewable { locks }) => {
                assert_eq!(pairs(&locks), vec![pair("short", &a)]);
            }
            other => panic!("expected NotRenewable, got {other:?}"),
        }
        assert_eq!(all(cx).await, before, "a failed renew changes nothing");
    }

    async fn renew_of_expired_lock_is_refused(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(2));
        let result = cx.renew(&a, secs(10)).await;
        assert!(
            matches!(&result, Err(Error::NotRenewable { locks }) if locks.len() == 1),
            "{result:?}"
        );
    }

    async fn renew_sets_ttl_on_lock_without_one(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &forever()).await.expect("grant");
        let renewed = cx.renew(&a, secs(5)).await.expect("renew");
        assert_eq!(renewed[0].expires_at, Some(at(secs(5))));
        cx.clock.advance(secs(5));
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("now it expires");
    }

    async fn renew_with_zero_margin(_cx) {
        let cx = Ctx::<B>::with_renew_margin(Duration::ZERO)
            .await
            .expect("zero margin is allowed");
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(ms(999));
        let renewed = cx
            .renew(&a, secs(1))
            .await
            .expect("1 ms left is enough with no margin");
        assert_eq!(renewed[0].expires_at, Some(at(ms(1_999))));
        cx.clock.advance(secs(1));
        let result = cx.renew(&a, secs(1)).await;
        assert!(
            matches!(result, Err(Error::NotRenewable { .. })),
            "{result:?}"
        );
        cx.teardown().await;
    }

    async fn renew_margin_boundary(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        cx.xlock("a", &a, &ttl(secs(5))).await.expect("grant");
        cx.xlock("b", &b, &ttl(secs(5))).await.expect("grant");
        cx.clock.advance(ms(3_999)); // 1001 ms left: outside the 1 s margin
        cx.renew(&a, secs(5)).await.expect("renewable");
        cx.clock.advance(ms(1)); // 1000 ms left: expires_at <= now + margin
        let result = cx.renew(&b, secs(5)).await;
        assert!(
            matches!(result, Err(Error::NotRenewable { .. })),
            "{result:?}"
        );
    }

    async fn renew_keeps_fence(cx) {
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &ttl(secs(5))).await.expect("grant");
        let renewed = cx.renew(&a, secs(5)).await.expect("renew");
        assert_eq!(renewed[0].fence, granted.fence);
        assert_eq!(renewed[0].created_at, granted.created_at);
    }
}
