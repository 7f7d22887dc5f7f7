//! Refused input: names, TTLs, limits, details, filters and margins out of range.

use super::super::support::*;

cases! {
    __conformance_input;

    async fn rejects_empty_resource(cx) {
        let a = generate_lock_id();
        assert_invalid(cx.xlock("", &a, &forever()).await, "resource");
        assert_invalid(cx.slock("", &a, &forever(), None).await, "resource");
        assert_invalid(
            cx.status(&Filter::new().resource("")).await,
            "filter.resource",
        );
        assert!(all(cx).await.is_empty(), "nothing may be stored");
    }

    async fn rejects_oversized_resource(cx) {
        let a = generate_lock_id();
        let long = "r".repeat(513);
        assert_invalid(cx.xlock(&long, &a, &forever()).await, "resource");
        let max = "r".repeat(512);
        let granted = cx
            .xlock(&max, &a, &forever())
            .await
            .expect("512 bytes is allowed");
        assert_eq!(granted.resource.as_str(), max);
    }

    async fn rejects_empty_lock_id(cx) {
        assert_invalid(cx.xlock("r", "", &forever()).await, "lock_id");
        assert_invalid(cx.slock("r", "", &forever(), Some(2)).await, "lock_id");
        assert_invalid(cx.unlock("").await, "lock_id");
        assert_invalid(cx.renew("", secs(1)).await, "lock_id");
        assert!(all(cx).await.is_empty());
    }

    async fn rejects_oversized_lock_id(cx) {
        assert_invalid(cx.xlock("r", "k".repeat(257), &forever()).await, "lock_id");
        let max = "k".repeat(256);
        cx.xlock("r", &max, &forever())
            .await
            .expect("256 bytes is allowed");
        assert_eq!(cx.unlock(&max).await.expect("unlock").len(), 1);
    }

    async fn rejects_zero_ttl(cx) {
        let a = generate_lock_id();
        assert_invalid(cx.xlock("r", &a, &ttl(Duration::ZERO)).await, "ttl");
        assert_invalid(cx.slock("r", &a, &ttl(Duration::ZERO), None).await, "ttl");
        cx.xlock("r", &a, &ttl(secs(5))).await.expect("grant");
        assert_invalid(cx.renew(&a, Duration::ZERO).await, "ttl");
        let locks = all(cx).await;
        assert_eq!(
            locks[0].expires_at,
            Some(at(secs(5))),
            "a refused renew changes nothing"
        );
    }

    async fn rejects_sub_millisecond_and_huge_ttl(cx) {
        let a = generate_lock_id();
        assert_invalid(
            cx.xlock("r", &a, &ttl(Duration::from_micros(999))).await,
            "ttl",
        );
        assert_invalid(cx.xlock("r", &a, &ttl(YEAR * 101)).await, "ttl");
        assert_invalid(cx.xlock("r", &a, &ttl(Duration::MAX)).await, "ttl");
        let granted = cx
            .xlock("r", &a, &ttl(YEAR * 99))
            .await
            .expect("99 years is allowed");
        assert_eq!(granted.expires_at, Some(at(YEAR * 99)));
    }

    async fn rejects_zero_limit(cx) {
        let a = generate_lock_id();
        assert_invalid(cx.slock("r", &a, &forever(), Some(0)).await, "limit");
        assert!(all(cx).await.is_empty());
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("resource stays free");
    }

    async fn rejects_bad_details(cx) {
        let a = generate_lock_id();
        assert_invalid(
            cx.xlock("r", &a, &LockOptions::new().owner("")).await,
            "owner",
        );
        assert_invalid(
            cx.xlock("r", &a, &LockOptions::new().host("h".repeat(1025)))
                .await,
            "host",
        );
        assert_invalid(
            cx.slock("r", &a, &LockOptions::new().comment(""), None)
                .await,
            "comment",
        );
        assert!(all(cx).await.is_empty());
    }

    async fn rejects_bad_filter(cx) {
        assert_invalid(
            cx.status(&Filter::new().lock_id("")).await,
            "filter.lock_id",
        );
        assert_invalid(cx.status(&Filter::new().owner("")).await, "filter.owner");
        assert_invalid(
            cx.status(&Filter::new().resource("x".repeat(513))).await,
            "filter.resource",
        );
    }

    async fn rejects_huge_renew_margin(_cx) {
        let result = Ctx::<B>::with_renew_margin(YEAR * 101).await;
        assert_invalid(result.map(|_| ()), "renew_margin");
    }
}
