//! Removing expired groups: `purge`.

use super::super::support::*;

cases! {
    __conformance_purge;

    async fn purge_removes_expired_groups_and_keeps_live(cx) {
        let (x, y, z) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        cx.xlock("r1", &x, &ttl(secs(1))).await.expect("grant");
        cx.xlock("r2", &y, &ttl(secs(10))).await.expect("grant");
        cx.xlock("r3", &z, &forever()).await.expect("grant");
        cx.clock.advance(secs(2));
        let removed = cx.purge().await.expect("purge");
        assert_eq!(pairs(&removed), vec![pair("r1", &x)]);
        assert_eq!(resources(&all(cx).await), set(&["r2", "r3"]));
    }

    async fn purge_removes_no_ttl_lock_of_expired_group(cx) {
        let x = generate_lock_id();
        cx.xlock("expiring", &x, &ttl(secs(1)))
            .await
            .expect("grant");
        cx.clock.advance(ms(1));
        cx.slock("forever", &x, &forever(), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(2));
        let removed = cx.purge().await.expect("purge");
        assert_eq!(
            pairs(&removed),
            vec![pair("forever", &x), pair("expiring", &x)]
        );
        assert!(all(cx).await.is_empty());
    }

    async fn purge_spares_lock_created_after_purge_began(cx) {
        let x = generate_lock_id();
        cx.xlock("old", &x, &ttl(secs(1))).await.expect("grant");
        cx.clock.set(at(secs(5)));
        cx.xlock("new", &x, &forever()).await.expect("grant");
        // Run the purge "as of" 2 s: it began before "new" was created at 5 s.
        cx.clock.set(at(secs(2)));
        let removed = cx.purge().await.expect("purge");
        assert_eq!(pairs(&removed), vec![pair("old", &x)]);
        cx.clock.set(at(secs(5)));
        assert_eq!(pairs(&all(cx).await), vec![pair("new", &x)]);
    }

    async fn purge_spares_lock_created_in_its_millisecond(cx) {
        // Timestamps are milliseconds: a lock created at the purge's instant may have been
        // granted after the purge began, so it is spared although its group has expired.
        let x = generate_lock_id();
        cx.xlock("old", &x, &ttl(secs(1))).await.expect("grant");
        cx.clock.set(at(secs(2)));
        cx.xlock("same-ms", &x, &ttl(secs(10)))
            .await
            .expect("grant");
        let removed = cx.purge().await.expect("purge");
        assert_eq!(pairs(&removed), vec![pair("old", &x)]);
        assert_eq!(pairs(&all(cx).await), vec![pair("same-ms", &x)]);
    }

    async fn purge_groups_by_lock_id_newest_first(cx) {
        let (a, b) = (id("group-a"), id("group-b"));
        cx.xlock("b1", &b, &ttl(secs(1))).await.expect("grant");
        cx.xlock("a1", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(ms(10));
        cx.xlock("b2", &b, &ttl(secs(1))).await.expect("grant");
        cx.xlock("a2", &a, &forever()).await.expect("grant");
        cx.clock.advance(secs(2));
        let removed = cx.purge().await.expect("purge");
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

    async fn purge_is_idempotent(cx) {
        cx.xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        cx.xlock("live", generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        assert_eq!(cx.purge().await.expect("purge").len(), 1);
        let after_once = all(cx).await;
        assert!(cx.purge().await.expect("purge again").is_empty());
        assert_eq!(all(cx).await, after_once);
    }

    async fn purge_of_nothing_returns_empty(cx) {
        assert!(cx.purge().await.expect("purge").is_empty());
        cx.xlock("r", generate_lock_id(), &ttl(secs(10)))
            .await
            .expect("grant");
        assert!(cx.purge().await.expect("purge").is_empty());
        assert_eq!(all(cx).await.len(), 1);
    }

    async fn purge_frees_resources(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.slock("s", &a, &forever(), Some(1)).await.expect("grant");
        cx.clock.advance(secs(1));
        assert_eq!(cx.purge().await.expect("purge").len(), 2);
        cx.xlock("s", generate_lock_id(), &forever())
            .await
            .expect("s is free");
        cx.slock("r", generate_lock_id(), &forever(), Some(1))
            .await
            .expect("r is free");
    }

    async fn renew_after_purge_is_not_found(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1));
        assert_eq!(cx.purge().await.expect("purge").len(), 1);
        let result = cx.renew(&a, secs(10)).await;
        assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
    }
}
