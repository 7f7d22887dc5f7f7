//! Fresh places: a place counts for the grant rule and is handed the lock only while its
//! waiter asked to be next within its claim lease (`fresh_until`); a stale place (kept far
//! back, or not asked for in time) keeps its order, blocks nobody and is handed nothing,
//! until its waiter asks with a claim lease again.

use super::super::support::*;
use super::queue::{LEASE, fair, queued, waiting};

/// A fair request whose place lasts `lease` and may be handed the lock only within `claim`
/// of its last request: a waiter far back that asks rarely.
fn far(ticket: &LockId, lease: Duration, claim: Duration) -> Fair {
    Fair {
        claim: Some(claim),
        ..fair(ticket, lease)
    }
}

/// The fresh and the live places a refusal reports ahead, or a panic.
#[track_caller]
fn queued_live<T: Debug>(result: Result<T, Error>) -> (u32, u32) {
    match result {
        Err(Error::AlreadyLocked {
            queued: Some(q), ..
        }) => (q.ahead, q.live_ahead),
        other => panic!("expected AlreadyLocked with a place, got {other:?}"),
    }
}

cases! {
    __conformance_fresh;

    async fn a_place_not_kept_within_its_claim_lease_is_passed_over_and_keeps_its_order(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        assert_eq!(
            queued(cx.xlock_fair("r", &a, &far(&ta, secs(60), secs(1))).await),
            Some(0)
        );
        cx.clock.advance(ms(500));
        assert_eq!(
            queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await),
            Some(1),
            "a's place is fresh: it counts"
        );
        cx.clock.advance(ms(500));
        // a last asked 1 s ago: its place lives, keeps its order, and counts for nobody.
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive, Mode::Exclusive]);
        assert_eq!(
            queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await),
            Some(0),
            "a's place is stale"
        );
        cx.unlock(&holder).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)], "handed past a");
        let places = cx.waiters("r").await.expect("waiters");
        assert_eq!(places.len(), 1, "a keeps its place");
        assert_eq!(places[0].queued_at, T0);
        // a asks again: first in the line, fresh, so the next release hands it the lock.
        assert_eq!(
            queued(cx.xlock_fair("r", &a, &far(&ta, secs(60), secs(1))).await),
            Some(0)
        );
        cx.xlock_fair("r", &b, &fair(&tb, LEASE))
            .await
            .expect("b's claim");
        cx.unlock(&b).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &a)], "handed to a");
        assert_eq!(
            all(cx).await[0].expires_at,
            Some(at(secs(2))),
            "the claim lease (1 s), not the place's"
        );
    }

    async fn a_place_kept_far_back_is_stale_at_once_and_keeps_its_order(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await);
        assert_eq!(queued_live(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await), (1, 1));
        let far_back = Fair {
            far: true,
            ..fair(&ta, secs(60))
        };
        assert_eq!(queued_live(cx.xlock_fair("r", &a, &far_back).await), (0, 0));
        assert_eq!(
            queued_live(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await),
            (0, 1),
            "a's place is stale at once: it counts only as a live place"
        );
        let places = cx.waiters("r").await.expect("waiters");
        assert_eq!(places[0].expires_at, at(secs(60)), "kept for its long lease");
        cx.unlock(&holder).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)], "handed past a");
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive], "a keeps its place");
        assert_eq!(
            queued_live(cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await),
            (0, 0),
            "asking to be next again: first in the line"
        );
    }

    async fn a_place_kept_far_back_is_handed_nothing_when_the_clock_steps_back(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, a) = (generate_lock_id(), generate_lock_id());
        cx.clock.advance(secs(10));
        let far_back = Fair {
            far: true,
            ..fair(&ta, secs(600))
        };
        assert_eq!(queued_live(cx.xlock_fair("r", &a, &far_back).await), (0, 0));
        // The store's clock steps back 5 s (an NTP step, a failover to a member behind):
        // the release hands a's place nothing (with its 600 s lease or any other).
        cx.clock.set(at(secs(5)));
        cx.unlock(&holder).await.expect("unlock");
        assert!(all(cx).await.is_empty(), "a place kept far back was handed the lock");
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive], "a keeps its place");
        // Asking to be next again, a is granted as the head of the line.
        let granted = cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await.expect("a's grant");
        assert_eq!(granted.lock_id, a);
    }

    async fn a_stale_place_blocks_nobody(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let t = generate_lock_id();
        queued(cx.xlock_fair("r", generate_lock_id(), &far(&t, secs(60), secs(1))).await);
        cx.clock.advance(ms(999));
        cx.unlock(&holder).await.expect("unlock");
        assert_eq!(all(cx).await.len(), 1, "handed to the fresh place");
        let handed = all(cx).await[0].lock_id.clone();
        cx.unlock(&handed).await.expect("unlock");
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        queued(cx.xlock_fair("r", generate_lock_id(), &far(&t, secs(60), secs(1))).await);
        cx.clock.advance(secs(1));
        cx.unlock(&holder).await.expect("unlock");
        assert!(all(cx).await.is_empty(), "nobody is handed the lock");
        cx.xlock("r", generate_lock_id(), &ttl(secs(30)))
            .await
            .expect("a request that is not fair overtakes the stale place");
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive]);
    }
}
