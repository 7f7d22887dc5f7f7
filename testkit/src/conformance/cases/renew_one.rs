//! One lock: `renew_one`.

use super::super::support::*;

/// The locks of `lock_id`, as status reports them.
async fn group_of<B: Backend>(cx: &Ctx<B>, lock_id: &LockId) -> Vec<LockStatus> {
    cx.status(&Filter::new().lock_id(lock_id.as_str()))
        .await
        .expect("status")
}

#[track_caller]
fn assert_not_found<T: Debug>(result: Result<T, Error>) {
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

cases! {
    __conformance_renew_one;

    async fn renew_one_extends_live_exclusive_lock(cx) {
        let a = generate_lock_id();
        let details = LockOptions::new()
            .owner("alice")
            .host("host-1")
            .comment("job 7")
            .ttl(secs(5));
        let granted = cx.xlock("r", &a, &details).await.expect("grant");
        cx.clock.advance(secs(2));
        let got = cx.renew_one(&granted, secs(10)).await.expect("renew_one");
        assert_eq!(got, renewed(&granted, at(secs(2)), secs(10)));
        assert_eq!(got.expires_at, Some(at(secs(12))));
        assert_eq!(got.fence, granted.fence, "renewing keeps the fence");
        assert_eq!(
            all(cx).await,
            vec![got],
            "the store holds what was returned"
        );
        cx.clock.advance(secs(6)); // past the original expiry
        assert_locked(cx.xlock("r", generate_lock_id(), &forever()).await, "r");
    }

    async fn renew_one_changes_only_its_shared_lock(cx) {
        let ids: Vec<LockId> = (0..3).map(|_| generate_lock_id()).collect();
        let mut granted = Vec::new();
        for a in &ids {
            let l = cx.slock("r", a, &ttl(secs(5)), None).await.expect("grant");
            granted.push(l);
        }
        cx.clock.advance(secs(1));
        let before = all(cx).await;
        let got = cx
            .renew_one(&granted[1], secs(30))
            .await
            .expect("renew_one");
        assert_eq!(got, renewed(&before[1], at(secs(1)), secs(30)));
        assert_eq!(got.mode, Mode::Shared);
        let want: Vec<LockStatus> = before
            .iter()
            .map(|l| {
                if l.lock_id == ids[1] {
                    got.clone()
                } else {
                    l.clone()
                }
            })
            .collect();
        assert_eq!(all(cx).await, want, "the other shared locks are untouched");
    }

    async fn renew_one_sets_ttl_on_lock_without_one(cx) {
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &forever()).await.expect("grant");
        assert_eq!(granted.expires_at, None);
        cx.clock.advance(secs(3));
        let got = cx
            .renew_one(&granted, secs(5))
            .await
            .expect("a lock without TTL is renewable");
        assert_eq!(got, renewed(&granted, at(secs(3)), secs(5)));
        assert_eq!(all(cx).await, vec![got]);
        cx.clock.advance(secs(5));
        cx.xlock("r", generate_lock_id(), &forever())
            .await
            .expect("now it expires");
    }

    async fn renew_one_within_margin_changes_nothing(cx) {
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &ttl(secs(2))).await.expect("grant");
        cx.clock.advance(ms(1_500)); // 500 ms left, inside the 1 s margin
        let before = all(cx).await;
        match cx.renew_one(&granted, secs(30)).await {
            Err(Error::NotRenewable { locks }) => {
                assert_eq!(locks, before, "the refusal lists the lock as it is");
            }
            other => panic!("expected NotRenewable, got {other:?}"),
        }
        assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
    }

    async fn renew_one_margin_boundary(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        let la = cx.xlock("a", &a, &ttl(secs(5))).await.expect("grant");
        let lb = cx.slock("b", &b, &ttl(secs(5)), None).await.expect("grant");
        cx.clock.advance(ms(3_999)); // 1001 ms left: outside the 1 s margin
        let got = cx.renew_one(&la, secs(5)).await.expect("renewable");
        assert_eq!(got.expires_at, Some(at(ms(8_999))));
        cx.clock.advance(ms(1)); // 1000 ms left: expires_at <= now + margin
        match cx.renew_one(&lb, secs(5)).await {
            Err(Error::NotRenewable { locks }) => {
                assert_eq!(pairs(&locks), vec![pair("b", &b)]);
                assert_eq!(locks[0].expires_at, Some(at(secs(5))));
            }
            other => panic!("expected NotRenewable, got {other:?}"),
        }
    }

    async fn renew_one_of_expired_lock_is_refused(cx) {
        let a = generate_lock_id();
        let granted = cx.slock("r", &a, &ttl(secs(1)), None).await.expect("grant");
        cx.clock.advance(secs(2));
        let before = all(cx).await;
        match cx.renew_one(&granted, secs(10)).await {
            Err(Error::NotRenewable { locks }) => {
                assert_eq!(locks, before, "the refusal lists the lock as it is");
                assert_eq!(locks[0].ttl, Some(Duration::ZERO));
            }
            other => panic!("expected NotRenewable, got {other:?}"),
        }
        assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
    }

    async fn renew_one_of_taken_over_lock_is_not_found(cx) {
        let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        let old_x = cx.xlock("x", &a, &ttl(secs(1))).await.expect("grant");
        let old_s = cx.slock("s", &a, &ttl(secs(1)), None).await.expect("grant");
        cx.clock.advance(secs(1));
        let new_x = cx.xlock("x", &b, &ttl(secs(10))).await.expect("takeover");
        let new_s = cx.xlock("s", &c, &ttl(secs(10))).await.expect("takeover");
        assert_not_found(cx.renew_one(&old_x, secs(10)).await);
        assert_not_found(cx.renew_one(&old_s, secs(10)).await);
        assert_eq!(
            all(cx).await,
            vec![new_s, new_x],
            "the new holders are untouched"
        );
    }

    async fn renew_one_after_purge_is_not_found(cx) {
        let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        let old = cx.slock("r", &a, &ttl(secs(1)), None).await.expect("grant");
        let keep = cx.slock("r", &b, &forever(), None).await.expect("grant");
        let gone = cx.xlock("alone", &c, &ttl(secs(1))).await.expect("grant");
        cx.clock.advance(secs(1));
        let purged: BTreeSet<_> = pairs(&cx.purge().await.expect("purge"))
            .into_iter()
            .collect();
        assert_eq!(purged, BTreeSet::from([pair("r", &a), pair("alone", &c)]));
        assert_not_found(cx.renew_one(&old, secs(10)).await);
        assert_not_found(cx.renew_one(&gone, secs(10)).await);
        assert_eq!(all(cx).await, vec![keep]);
    }

    async fn renew_one_of_released_lock_is_not_found(cx) {
        let (a, b) = (generate_lock_id(), generate_lock_id());
        let by_unlock = cx.xlock("r", &a, &forever()).await.expect("grant");
        assert_eq!(cx.unlock(&a).await.expect("unlock").len(), 1);
        assert_not_found(cx.renew_one(&by_unlock, secs(5)).await);
        let by_unlock_one = cx.slock("s", &b, &ttl(secs(5)), None).await.expect("grant");
        assert!(
            cx.unlock_one(&by_unlock_one)
                .await
                .expect("unlock_one")
                .is_some()
        );
        assert_not_found(cx.renew_one(&by_unlock_one, secs(5)).await);
        assert!(all(cx).await.is_empty(), "nothing came back");
    }

    async fn renew_one_leaves_rest_of_group(cx) {
        let a = generate_lock_id();
        let r1 = cx.xlock("r1", &a, &ttl(secs(5))).await.expect("grant");
        cx.slock("r2", &a, &ttl(secs(5)), None)
            .await
            .expect("grant");
        cx.clock.advance(secs(2));
        let r2_before = cx
            .status(&Filter::new().resource("r2"))
            .await
            .expect("status");
        let got = cx.renew_one(&r1, secs(10)).await.expect("renew_one");
        assert_eq!(got.expires_at, Some(at(secs(12))));
        let mut want = vec![got];
        want.extend(r2_before);
        assert_eq!(group_of(cx, &a).await, want, "r2 keeps its expiry");
        assert_eq!(want[1].expires_at, Some(at(secs(5))));
        assert_eq!(want[1].renewed_at, None);
        cx.clock.advance(secs(3)); // r2 expired, r1 renewed
        cx.xlock("r2", generate_lock_id(), &forever())
            .await
            .expect("r2 was not renewed");
        assert_locked(cx.xlock("r1", generate_lock_id(), &forever()).await, "r1");
    }

    async fn renew_one_ignores_rest_of_group_within_margin(cx) {
        let a = generate_lock_id();
        let long = cx.xlock("long", &a, &ttl(secs(10))).await.expect("grant");
        cx.xlock("short", &a, &ttl(secs(2))).await.expect("grant");
        cx.clock.advance(ms(1_500)); // "short" expires in 500 ms, inside the 1 s margin
        let result = cx.renew(&a, secs(30)).await;
        assert!(
            matches!(&result, Err(Error::NotRenewable { locks }) if locks.len() == 1),
            "the group is not renewable: {result:?}"
        );
        let got = cx
            .renew_one(&long, secs(30))
            .await
            .expect("one lock of the group is");
        assert_eq!(got.expires_at, Some(at(ms(31_500))));
        let short = cx
            .status(&Filter::new().resource("short"))
            .await
            .expect("status");
        assert_eq!(short[0].expires_at, Some(at(secs(2))));
        assert_eq!(short[0].renewed_at, None);
    }

    async fn renew_one_rejects_zero_ttl(cx) {
        let granted = cx
            .xlock("r", generate_lock_id(), &ttl(secs(5)))
            .await
            .expect("grant");
        assert_invalid(cx.renew_one(&granted, Duration::ZERO).await, "ttl");
        assert_eq!(all(cx).await, vec![granted], "nothing changed");
    }

    async fn renew_one_twice_in_one_instant_within_margin(cx) {
        // A renewal for a TTL within the margin leaves a lock the next renewal must refuse, in
        // the same millisecond too (the second call must not pass for the first one).
        let a = generate_lock_id();
        let granted = cx.xlock("r", &a, &ttl(secs(5))).await.expect("grant");
        let first = cx
            .renew_one(&granted, secs(1))
            .await
            .expect("5 s left: renewable");
        assert_eq!(first.expires_at, Some(at(secs(1))));
        let before = all(cx).await;
        match cx.renew_one(&granted, secs(1)).await {
            Err(Error::NotRenewable { locks }) => {
                assert_eq!(locks, before, "the refusal lists the lock as it is");
            }
            other => panic!("expected NotRenewable (1 s left, 1 s margin), got {other:?}"),
        }
        assert_eq!(all(cx).await, before, "a refused renew_one changes nothing");
    }
}
