//! Reading locks: `status` and its filters.

use super::super::support::*;

/// Three locks with 2 s, 5 s and 8 s left, plus one without a TTL.
async fn ttl_ladder<B: Backend>(cx: &Ctx<B>) {
    cx.xlock("none", generate_lock_id(), &forever())
        .await
        .expect("grant");
    for (r, s) in [("two", 2), ("five", 5), ("eight", 8)] {
        cx.xlock(r, generate_lock_id(), &ttl(secs(s + 1)))
            .await
            .expect("grant");
    }
    cx.clock.advance(secs(1));
}

cases! {
    __conformance_status;

    async fn status_reports_remaining_ttl(cx) {
        cx.xlock("forever", generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.xlock("ten", generate_lock_id(), &ttl(secs(10)))
            .await
            .expect("grant");
        cx.xlock("one", generate_lock_id(), &ttl(secs(1)))
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

    async fn status_filters_ttl_lt(cx) {
        ttl_ladder(cx).await;
        let f = Filter::new().ttl_lt(secs(5));
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["two"])
        );
        let f = Filter::new().ttl_lt(ms(5_001));
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["two", "five"])
        );
    }

    async fn status_filters_ttl_gte(cx) {
        ttl_ladder(cx).await;
        let f = Filter::new().ttl_gte(secs(5));
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["five", "eight"])
        );
        let f = Filter::new().ttl_gte(ms(5_001));
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["eight"])
        );
    }

    async fn status_ttl_bounds_combine(cx) {
        ttl_ladder(cx).await;
        let f = Filter::new().ttl_gte(secs(3)).ttl_lt(secs(7));
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["five"])
        );
        let f = Filter::new().ttl_lt(secs(3)).ttl_gte(secs(7));
        assert!(
            cx.status(&f).await.expect("status").is_empty(),
            "neither bound overwrites the other"
        );
    }

    async fn status_ttl_bounds_skip_locks_without_ttl(cx) {
        ttl_ladder(cx).await;
        let f = Filter::new().ttl_lt(YEAR * 99);
        assert!(!resources(&cx.status(&f).await.expect("status")).contains("none"));
        let f = Filter::new().ttl_gte(Duration::ZERO);
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["two", "five", "eight"])
        );
    }

    async fn status_filters_created_before_and_after_strictly(cx) {
        for r in ["t0", "t10", "t20"] {
            cx.xlock(r, generate_lock_id(), &forever())
                .await
                .expect("grant");
            cx.clock.advance(ms(10));
        }
        let check = |f: Filter, want: &'static [&'static str]| async move {
            assert_eq!(
                resources(&cx.status(&f).await.expect("status")),
                set(want),
                "{f:?}"
            );
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

    async fn status_filters_owner(cx) {
        cx.xlock("r1", generate_lock_id(), &LockOptions::new().owner("alice"))
            .await
            .expect("grant");
        cx.xlock("r2", generate_lock_id(), &LockOptions::new().owner("bob"))
            .await
            .expect("grant");
        cx.xlock("r3", generate_lock_id(), &forever())
            .await
            .expect("grant");
        let f = Filter::new().owner("alice");
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["r1"])
        );
    }

    async fn status_filters_mode(cx) {
        cx.xlock("x", generate_lock_id(), &forever())
            .await
            .expect("grant");
        cx.slock("s", generate_lock_id(), &forever(), None)
            .await
            .expect("grant");
        cx.slock("s", generate_lock_id(), &forever(), None)
            .await
            .expect("grant");
        let shared = cx
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
            .status(&Filter::new().mode(Mode::Exclusive))
            .await
            .expect("status");
        assert_eq!(resources(&exclusive), set(&["x"]));
    }

    async fn status_filters_resource_and_lock_id(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        cx.slock("r1", &a, &forever(), None).await.expect("grant");
        cx.slock("r1", &b, &forever(), None).await.expect("grant");
        cx.xlock("r2", &a, &forever()).await.expect("grant");
        let f = Filter::new().resource("r1");
        assert_eq!(cx.status(&f).await.expect("status").len(), 2);
        let f = Filter::new().lock_id(a.as_str());
        assert_eq!(
            resources(&cx.status(&f).await.expect("status")),
            set(&["r1", "r2"])
        );
        let f = Filter::new().resource("r1").lock_id(b.as_str());
        assert_eq!(
            pairs(&cx.status(&f).await.expect("status")),
            vec![pair("r1", &b)]
        );
        let f = Filter::new().resource("nowhere");
        assert!(cx.status(&f).await.expect("status").is_empty());
    }

    async fn status_combines_fields(cx) {
        let alice = |t| LockOptions::new().owner("alice").ttl(t);
        cx.slock("r", generate_lock_id(), &alice(secs(10)), None)
            .await
            .expect("grant");
        cx.slock("r", generate_lock_id(), &alice(secs(2)), None)
            .await
            .expect("grant");
        cx.slock(
            "r",
            generate_lock_id(),
            &LockOptions::new().owner("bob").ttl(secs(10)),
            None,
        )
        .await
        .expect("grant");
        cx.xlock("q", generate_lock_id(), &alice(secs(10)))
            .await
            .expect("grant");
        let f = Filter::new()
            .owner("alice")
            .mode(Mode::Shared)
            .resource("r")
            .ttl_gte(secs(5));
        let found = cx.status(&f).await.expect("status");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].ttl, Some(secs(10)));
        assert_eq!(found[0].holder.owner.as_deref(), Some("alice"));
    }

    async fn status_orders_oldest_first(cx) {
        for r in ["c", "a", "b"] {
            cx.xlock(r, generate_lock_id(), &forever())
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

    async fn status_reports_expired_locks(cx) {
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(3));
        let locks = all(cx).await;
        assert_eq!(
            pairs(&locks),
            vec![pair("r", &a)],
            "expired but not yet purged"
        );
        assert_eq!(locks[0].ttl, Some(Duration::ZERO));
    }
}
