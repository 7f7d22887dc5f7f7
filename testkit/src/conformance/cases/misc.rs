//! Details round trip, and concurrent clients.

use super::super::support::*;

cases! {
    __conformance_misc;

    async fn details_round_trip(cx) {
        let a = generate_lock_id();
        let d = LockOptions::new()
            .owner("ünïcode owner")
            .host("h-1.example")
            .comment("nightly run #42")
            .ttl(secs(7));
        cx.slock("r", &a, &d, Some(5)).await.expect("grant");
        let s = all(cx).await.remove(0);
        assert_eq!(
            (
                s.holder.owner.as_deref(),
                s.holder.host.as_deref(),
                s.holder.comment.as_deref()
            ),
            (
                Some("ünïcode owner"),
                Some("h-1.example"),
                Some("nightly run #42")
            )
        );
        let released = cx.unlock(&a).await.expect("unlock");
        assert_eq!(released, vec![s]);
    }

    async fn concurrent_xlock_has_one_winner(cx) {
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let cx = cx.clone();
                tokio::spawn(async move { cx.xlock("hot", generate_lock_id(), &forever()).await })
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

    async fn concurrent_slock_respects_limit(cx) {
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let cx = cx.clone();
                tokio::spawn(async move {
                    cx.slock("hot", generate_lock_id(), &forever(), Some(3))
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

    async fn concurrent_purgers_report_each_lock_once(cx) {
        for i in 0..20 {
            cx.xlock(&format!("r{i}"), generate_lock_id(), &ttl(secs(1)))
                .await
                .expect("grant");
        }
        cx.clock.advance(secs(1));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let cx = cx.clone();
                tokio::spawn(async move { cx.purge().await })
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
}
