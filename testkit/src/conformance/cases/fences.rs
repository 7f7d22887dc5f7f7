//! Fencing tokens: increasing per resource, across unlock and purge.

use super::super::support::*;

cases! {
    __conformance_fences;

    async fn fences_increase_per_resource(cx) {
        let mut last = 0;
        for _ in 0..5 {
            let l = cx
                .slock("r", generate_lock_id(), &forever(), None)
                .await
                .expect("grant");
            assert!(l.fence > last, "{} after {last}", l.fence);
            last = l.fence;
        }
    }

    async fn fences_increase_across_unlock(cx) {
        let a = generate_lock_id();
        let first = cx.xlock("r", &a, &forever()).await.expect("grant");
        cx.unlock(&a).await.expect("unlock");
        let second = cx.xlock("r", &a, &forever()).await.expect("grant");
        assert!(second.fence > first.fence);
    }

    async fn fences_increase_across_purge(cx) {
        let mut last = 0;
        for round in 0..3 {
            let l = cx
                .xlock("r", generate_lock_id(), &ttl(secs(1)))
                .await
                .expect("grant");
            assert!(l.fence > last, "round {round}: {} after {last}", l.fence);
            last = l.fence;
            cx.clock.advance(secs(1));
            assert_eq!(cx.purge().await.expect("purge").len(), 1);
        }
    }

    async fn fences_are_per_resource_and_reported_by_status(cx) {
        let a = cx
            .xlock("a", generate_lock_id(), &forever())
            .await
            .expect("grant");
        let b = cx
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
}
