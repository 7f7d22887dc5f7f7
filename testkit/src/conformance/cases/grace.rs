//! The takeover grace: an expired lock that was not released blocks every other grant,
//! counts towards a shared limit and is spared by purge until `expires_at + grace <= now`;
//! its own holder may renew it while `expires_at + grace > now + margin`; a release frees
//! it at once. Each case runs on a store of its own with the default grace, 2 s (the rest of
//! the suite runs with none, where the rule turns at expiry).

use super::super::support::*;

/// The grace of these cases: the stores' default.
const GRACE: Duration = DEFAULT_TAKEOVER_GRACE;

/// A fresh store with [`GRACE`], on its own clock at [`T0`].
async fn graced<B: Backend>() -> Ctx<B> {
    Ctx::with_grace(GRACE).await
}

cases! {
    __conformance_grace;

    async fn expired_exclusive_blocks_others_until_grace_passes(_cx) {
        let cx = graced::<B>().await;
        let first = cx
            .xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), None).await,
            "r",
        );
        cx.clock.advance(GRACE - ms(1));
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        cx.clock.advance(ms(1));
        let b = generate_lock_id();
        let second = cx.xlock("r", &b, &forever()).await.expect("grace passed");
        assert!(second.fence > first.fence);
        let held = all(&cx).await;
        assert_eq!(
            pairs(&held),
            vec![pair("r", &b)],
            "the abandoned lock was taken over"
        );
        cx.teardown().await;
    }

    async fn own_lock_id_is_blocked_by_its_expired_lock_too(_cx) {
        let cx = graced::<B>().await;
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1));
        assert_locked(cx.xlock("r", &a, &forever()).await, "r");
        cx.teardown().await;
    }

    async fn expired_shared_blocks_exclusive_until_grace_passes(_cx) {
        let cx = graced::<B>().await;
        cx.slock("r", generate_lock_id(), &ttl(secs(1)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(1) + GRACE - ms(1));
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
        cx.clock.advance(ms(1));
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("grace passed");
        cx.teardown().await;
    }

    async fn expired_shared_counts_toward_limit_inside_grace(_cx) {
        let cx = graced::<B>().await;
        let limit = Some(1);
        cx.slock("r", generate_lock_id(), &ttl(secs(1)), limit)
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), limit).await,
            "r",
        );
        // Without a limit, an expired shared lock in its grace does not block a shared one.
        cx.slock("r", generate_lock_id(), &forever(), None)
            .await
            .expect("no limit");
        cx.clock.advance(GRACE);
        // The abandoned lock no longer counts; the unlimited one still does.
        assert_locked(
            cx.slock("r", generate_lock_id(), &forever(), limit).await,
            "r",
        );
        cx.slock("r", generate_lock_id(), &forever(), Some(2))
            .await
            .expect("one held lock, limit 2");
        cx.teardown().await;
    }

    async fn release_frees_at_once_whatever_the_grace(_cx) {
        let cx = graced::<B>().await;
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1));
        assert_eq!(cx.unlock(&a).await.expect("unlock").len(), 1);
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("released");
        cx.teardown().await;
    }

    async fn holder_renews_expired_lock_inside_grace(_cx) {
        // Renewable while expires_at + grace > now + margin: with a 1 s TTL, the 2 s
        // grace and the cases' 1 s margin, until 2 s after the grant (exclusive).
        let cx = graced::<B>().await;
        let margin = RENEW_MARGIN;
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        let b = generate_lock_id();
        cx.xlock("s", &b, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1) + GRACE - margin - ms(1));
        let renewed = cx.renew(&a, secs(1)).await.expect("inside the grace");
        assert_eq!(renewed.len(), 1);
        assert_eq!(
            renewed[0].expires_at,
            Some(cx.clock.now().saturating_add(secs(1)))
        );
        cx.clock.advance(ms(1));
        match cx.renew(&b, secs(1)).await {
            Err(Error::NotRenewable { locks }) => assert_eq!(pairs(&locks), vec![pair("s", &b)]),
            other => panic!("expected NotRenewable at the edge of the grace, got {other:?}"),
        }
        cx.teardown().await;
    }

    async fn renew_one_inside_grace(_cx) {
        let cx = graced::<B>().await;
        let granted = cx
            .xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        cx.clock.advance(secs(1) + ms(500));
        let renewed = cx
            .renew_one(&granted, secs(1))
            .await
            .expect("inside the grace");
        assert_eq!(
            renewed.expires_at,
            Some(cx.clock.now().saturating_add(secs(1)))
        );
        cx.teardown().await;
    }

    async fn set_comment_changes_only_the_comment_while_held(_cx) {
        // A leader proclaims a new value: the comment changes, nothing else does; inside
        // the grace its holder may still change it, past the grace it may not.
        let cx = graced::<B>().await;
        let granted = cx
            .xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        let (r, id) = (&granted.resource, &granted.lock_id);
        let set = cx.store.set_comment(r, id, Some("v1")).await.expect("held");
        assert_eq!(set.holder.comment.as_deref(), Some("v1"));
        assert_eq!(
            (set.fence, set.created_at, set.expires_at, &set.lock_id),
            (granted.fence, granted.created_at, granted.expires_at, id)
        );
        let stored = all(&cx).await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].holder.comment.as_deref(), Some("v1"));
        // Who does not hold the lock (a deposed leader whose proclaim arrives late) changes
        // nothing: the holder's value stays.
        let deposed = cx.store.set_comment(r, &generate_lock_id(), Some("usurper")).await;
        assert!(matches!(deposed, Err(Error::LockNotFound)), "{deposed:?}");
        assert_eq!(all(&cx).await, stored, "a proclaim by who does not hold it");
        cx.clock.advance(secs(1) + ms(500));
        let cleared = cx.store.set_comment(r, id, None).await.expect("inside the grace");
        assert_eq!(cleared.holder.comment, None);
        cx.clock.advance(GRACE);
        let late = cx.store.set_comment(r, id, Some("late")).await;
        assert!(matches!(late, Err(Error::NotRenewable { .. })), "{late:?}");
        assert_eq!(all(&cx).await[0].holder.comment, None, "nothing changed");
        let nobody = generate_lock_id();
        let missing = cx.store.set_comment(r, &nobody, Some("x")).await;
        assert!(matches!(missing, Err(Error::LockNotFound)), "{missing:?}");
        cx.teardown().await;
    }

    async fn purge_waits_out_the_grace(_cx) {
        let cx = graced::<B>().await;
        let a = generate_lock_id();
        cx.xlock("r", &a, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1) + GRACE - ms(1));
        assert!(
            cx.purge().await.expect("purge").is_empty(),
            "inside the grace"
        );
        assert_eq!(all(&cx).await.len(), 1);
        cx.clock.advance(ms(1));
        let purged = cx.purge().await.expect("purge");
        assert_eq!(pairs(&purged), vec![pair("r", &a)]);
        cx.teardown().await;
    }

    async fn status_reports_expired_lock_inside_grace_with_zero_ttl(_cx) {
        let cx = graced::<B>().await;
        cx.xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        cx.clock.advance(secs(1) + ms(1));
        let locks = all(&cx).await;
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].ttl, Some(Duration::ZERO));
        cx.teardown().await;
    }

    async fn summary_counts_an_expired_lock_as_held_until_grace_passes(_cx) {
        let cx = graced::<B>().await;
        cx.xlock("x", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("grant");
        cx.slock("s", generate_lock_id(), &ttl(secs(3)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(1) + GRACE - ms(1));
        let summary = cx.summary().await.expect("summary");
        let counts: Vec<(&str, u32, u32, u32, Option<Duration>)> = summary
            .resources
            .iter()
            .map(|s| {
                (
                    s.resource.as_str(),
                    s.held_exclusive,
                    s.held_shared,
                    s.abandoned,
                    s.next_expiry,
                )
            })
            .collect();
        // Both held; the expired one has no remaining TTL; more holders first, then by name.
        assert_eq!(
            counts,
            vec![("s", 0, 1, 0, Some(ms(1))), ("x", 1, 0, 0, None)]
        );
        cx.clock.advance(ms(1));
        let summary = cx.summary().await.expect("summary");
        let x = summary
            .resources
            .iter()
            .find(|s| s.resource.as_str() == "x")
            .expect("x");
        assert_eq!((x.held(), x.abandoned), (0, 1), "abandoned, not yet purged");
        cx.purge().await.expect("purge");
        let summary = cx.summary().await.expect("summary");
        let left: Vec<&str> = summary
            .resources
            .iter()
            .map(|s| s.resource.as_str())
            .collect();
        assert_eq!(left, vec!["s"], "a purged resource is idle, and left out");
        assert!(summary.skipped.is_empty());
        cx.teardown().await;
    }
}
