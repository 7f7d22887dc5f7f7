//! Batches: `renew_many`, each lock decided on its own.

use super::super::support::*;

/// A renewal of `lock` (a grant's resource and lock id) for `ttl`.
fn renewal(lock: &LockStatus, ttl: Duration) -> Renewal {
    Renewal {
        resource: lock.resource.clone(),
        lock_id: lock.lock_id.clone(),
        ttl: Ttl::new(ttl).expect("test TTLs are valid"),
    }
}

/// `renew_many` on the store with the cases' renew margin; the batch as a whole must
/// succeed.
async fn renew_many<B: Backend>(cx: &Ctx<B>, batch: &[Renewal]) -> Vec<Result<LockStatus, Error>> {
    let each = cx
        .store
        .renew_each(batch, cx.margin)
        .await
        .expect("the batch as a whole succeeds");
    assert_eq!(each.len(), batch.len(), "one outcome per renewal");
    each
}

#[track_caller]
fn assert_not_renewable(result: &Result<LockStatus, Error>, want: &LockStatus) {
    match result {
        Err(Error::NotRenewable { locks }) => {
            assert_eq!(
                locks,
                std::slice::from_ref(want),
                "the refusal lists the lock as it is"
            );
        }
        other => panic!("expected NotRenewable of {want:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_missing(result: &Result<LockStatus, Error>) {
    assert!(matches!(result, Err(Error::LockNotFound)), "{result:?}");
}

/// `locks` with each lock of `changed` replaced by its new state (matched by resource and
/// lock id).
fn replaced(locks: &[LockStatus], changed: &[&LockStatus]) -> Vec<LockStatus> {
    locks
        .iter()
        .map(|l| {
            changed
                .iter()
                .find(|c| c.resource == l.resource && c.lock_id == l.lock_id)
                .map_or_else(|| l.clone(), |c| (*c).clone())
        })
        .collect()
}

cases! {
    __conformance_renew_many;

    async fn renew_many_renews_each_lock_with_its_ttl(cx) {
        let (a, b, c, d) = (
            generate_lock_id(),
            generate_lock_id(),
            generate_lock_id(),
            generate_lock_id(),
        );
        let x = cx.xlock("x", &a, &ttl(secs(5))).await.expect("grant");
        let s = cx
            .slock("s", &b, &ttl(secs(5)), Some(2))
            .await
            .expect("grant");
        let forever_x = cx.xlock("f", &c, &forever()).await.expect("grant");
        let s_other = cx
            .slock("s", &d, &ttl(secs(5)), Some(2))
            .await
            .expect("grant");
        cx.clock.advance(secs(2));
        let before = all(cx).await;
        let now = at(secs(2));
        let each = renew_many(
            cx,
            &[
                renewal(&x, secs(10)),
                renewal(&s, secs(20)),
                renewal(&forever_x, secs(5)),
            ],
        )
        .await;
        let got: Vec<LockStatus> = each
            .into_iter()
            .map(|r| r.expect("every lock of the batch is renewable"))
            .collect();
        let was = |l: &LockStatus| {
            before
                .iter()
                .find(|b| b.resource == l.resource && b.lock_id == l.lock_id)
                .expect("held")
                .clone()
        };
        assert_eq!(
            got,
            vec![
                renewed(&was(&x), now, secs(10)),
                renewed(&was(&s), now, secs(20)),
                renewed(&was(&forever_x), now, secs(5)),
            ],
            "each lock with its own TTL, in the batch's order"
        );
        assert_eq!(
            [got[0].mode, got[1].mode, got[2].mode],
            [Mode::Exclusive, Mode::Shared, Mode::Exclusive]
        );
        assert_eq!(
            [got[0].fence, got[1].fence, got[2].fence],
            [x.fence, s.fence, forever_x.fence],
            "renewing keeps the fences"
        );
        let after = all(cx).await;
        assert_eq!(
            after,
            replaced(&before, &[&got[0], &got[1], &got[2]]),
            "the store holds what was returned, and the unnamed shared lock is untouched"
        );
        assert!(after.contains(&was(&s_other)));
        // At +6 s: the unnamed shared lock and the old expiries have passed, the new ones not.
        cx.clock.advance(secs(4));
        assert_locked(cx.xlock("x", generate_lock_id(), &forever()).await, "x");
        assert_locked(cx.xlock("f", generate_lock_id(), &forever()).await, "f");
        cx.slock("s", generate_lock_id(), &forever(), Some(2))
            .await
            .expect("the unnamed shared lock expired: one slot free");
        assert_locked(
            cx.slock("s", generate_lock_id(), &forever(), Some(2)).await,
            "s",
        );
    }

    async fn renew_many_decides_each_lock_on_its_own(cx) {
        let ids: Vec<LockId> = (0..9).map(|_| generate_lock_id()).collect();
        let [
            live,
            short,
            expired,
            gone,
            over,
            purged,
            pair_short,
            pair_long,
            taker,
        ] = std::array::from_fn(|i| ids[i].clone());
        let l_live = cx
            .xlock("live", &live, &ttl(secs(10)))
            .await
            .expect("grant");
        let l_short = cx
            .slock("short", &short, &ttl(ms(2_500)), None)
            .await
            .expect("grant");
        let l_expired = cx
            .xlock("expired", &expired, &ttl(ms(1_500)))
            .await
            .expect("grant");
        let l_gone = cx.xlock("gone", &gone, &forever()).await.expect("grant");
        let l_over = cx.xlock("over", &over, &ttl(secs(1))).await.expect("grant");
        let l_purged = cx
            .slock("purged", &purged, &ttl(secs(1)), None)
            .await
            .expect("grant");
        // One document, two shared locks: one within the margin, one renewable.
        let l_pair_short = cx
            .slock("pair", &pair_short, &ttl(ms(2_500)), None)
            .await
            .expect("grant");
        let l_pair_long = cx
            .slock("pair", &pair_long, &ttl(secs(10)), None)
            .await
            .expect("grant");
        assert_eq!(cx.unlock(&gone).await.expect("unlock").len(), 1);
        cx.clock.advance(secs(1)); // "over" and "purged" expire
        let l_taker = cx
            .xlock("over", &taker, &ttl(secs(30)))
            .await
            .expect("takeover");
        let purged_now = pairs(&cx.purge().await.expect("purge"));
        assert_eq!(purged_now, vec![pair("purged", &purged)]);
        cx.clock.advance(ms(800)); // at +1.8 s: "short" and "pair" short have 700 ms left
        let now = at(ms(1_800));
        let before = all(cx).await;
        let as_is = |l: &LockStatus| {
            before
                .iter()
                .find(|b| b.resource == l.resource && b.lock_id == l.lock_id)
                .expect("still held")
                .clone()
        };
        let each = renew_many(
            cx,
            &[
                renewal(&l_short, secs(5)),
                renewal(&l_live, secs(5)),
                renewal(&l_gone, secs(5)),
                renewal(&l_expired, secs(5)),
                renewal(&l_over, secs(5)),
                renewal(&l_pair_short, secs(5)),
                renewal(&l_purged, secs(5)),
                renewal(&l_pair_long, secs(7)),
            ],
        )
        .await;
        assert_not_renewable(&each[0], &as_is(&l_short));
        let got_live = each[1].as_ref().expect("live: renewed").clone();
        assert_eq!(got_live, renewed(&as_is(&l_live), now, secs(5)));
        assert_missing(&each[2]);
        assert_not_renewable(&each[3], &as_is(&l_expired));
        assert!(
            matches!(&each[3], Err(Error::NotRenewable { locks }) if locks[0].ttl == Some(Duration::ZERO))
        );
        assert_missing(&each[4]);
        assert_not_renewable(&each[5], &as_is(&l_pair_short));
        assert_missing(&each[6]);
        let got_pair = each[7].as_ref().expect("pair long: renewed").clone();
        assert_eq!(got_pair, renewed(&as_is(&l_pair_long), now, secs(7)));
        assert_eq!(
            all(cx).await,
            replaced(&before, &[&got_live, &got_pair]),
            "only the two renewable locks changed; refusals and misses changed nothing"
        );
        assert!(
            before
                .iter()
                .any(|l| l.lock_id == taker && l.fence == l_taker.fence)
        );
    }

    async fn renew_many_leaves_unnamed_lock_of_shared_resource(cx) {
        let (a, b, c) = (generate_lock_id(), generate_lock_id(), generate_lock_id());
        let named = cx.slock("r", &a, &ttl(secs(5)), None).await.expect("grant");
        cx.slock("r", &b, &ttl(secs(5)), None).await.expect("grant");
        // The rest of `a`'s group, not named either.
        cx.xlock("rest", &a, &ttl(secs(5))).await.expect("grant");
        let elsewhere = cx.xlock("x", &c, &ttl(secs(5))).await.expect("grant");
        cx.clock.advance(secs(1));
        let before = all(cx).await;
        let each = renew_many(
            cx,
            &[renewal(&named, secs(30)), renewal(&elsewhere, secs(30))],
        )
        .await;
        let got: Vec<LockStatus> = each.into_iter().map(|r| r.expect("renewable")).collect();
        assert_eq!(got[0].expires_at, Some(at(secs(31))));
        assert_eq!(got[1].expires_at, Some(at(secs(31))));
        let after = all(cx).await;
        assert_eq!(after, replaced(&before, &[&got[0], &got[1]]));
        let untouched: Vec<&LockStatus> = after
            .iter()
            .filter(|l| {
                (l.resource.as_str() == "r" && l.lock_id == b) || l.resource.as_str() == "rest"
            })
            .collect();
        assert_eq!(untouched.len(), 2);
        for l in untouched {
            assert_eq!(l.expires_at, Some(at(secs(5))), "{l:?} keeps its expiry");
            assert_eq!(l.renewed_at, None, "{l:?} was not renewed");
        }
    }

    async fn renew_many_of_nothing_is_empty(cx) {
        assert!(renew_many(cx, &[]).await.is_empty(), "on an empty store");
        cx.xlock("r", generate_lock_id(), &ttl(secs(5)))
            .await
            .expect("grant");
        cx.clock.advance(secs(1));
        let before = all(cx).await;
        assert!(renew_many(cx, &[]).await.is_empty(), "with a lock held");
        assert_eq!(all(cx).await, before, "nothing changed");
    }

    async fn renew_many_names_one_lock_twice(cx) {
        // Each renewal of the batch is renew_one in turn at the batch's instant: the second
        // renewal of a lock sees the first one's result.
        let (a, b) = (generate_lock_id(), generate_lock_id());
        let la = cx.xlock("a", &a, &ttl(secs(5))).await.expect("grant");
        let lb = cx.slock("b", &b, &ttl(secs(5)), None).await.expect("grant");
        cx.clock.advance(secs(1));
        let now = at(secs(1));
        let before = all(cx).await;
        let each = renew_many(
            cx,
            &[
                renewal(&la, secs(10)),
                renewal(&lb, secs(1)),
                renewal(&la, secs(20)),
                renewal(&lb, secs(10)),
            ],
        )
        .await;
        let a1 = each[0].as_ref().expect("a: 4 s left, renewable").clone();
        assert_eq!(a1.expires_at, Some(at(secs(11))));
        let b1 = each[1].as_ref().expect("b: 4 s left, renewable").clone();
        assert_eq!(b1, renewed(&before[1], now, secs(1)));
        let a2 = each[2]
            .as_ref()
            .expect("a again: 10 s left after the first renewal, renewable")
            .clone();
        assert_eq!(a2, renewed(&before[0], now, secs(20)));
        // b has 1 s left after its first renewal: within the 1 s margin.
        assert_not_renewable(&each[3], &b1);
        assert_eq!(
            all(cx).await,
            vec![a2, b1],
            "the store holds each lock as the last renewal of it left it"
        );
    }
}
