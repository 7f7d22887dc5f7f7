//! Fair requests and the resource's queue: a refused fair request takes (or keeps) a place;
//! a request is granted only when no live place that conflicts with it is ahead of its own
//! (every place, for a request without one); a grant removes the winner's place; a place
//! lapses when its lease runs out, and a waiter can leave. Every write that frees the lock
//! (a release, a waiter leaving, purge, a request that finds the holder gone) hands it to
//! the live head of the line, with a claim lease of its place's lease from the handoff; the
//! head's next request (the same lock id) claims it, and a head that never claims costs the
//! others its claim lease.

use super::super::support::*;

/// A fair request: `ticket`'s place lasts `lease` unless it asks again.
pub(super) fn fair(ticket: &LockId, lease: Duration) -> Fair {
    place(ticket.as_str(), lease)
}

/// A fair request whose ticket is `ticket`, checked only when it is sent.
fn place(ticket: impl Into<String>, lease: Duration) -> Fair {
    Fair {
        options: ttl(secs(30)),
        ticket: ticket.into(),
        lease,
        claim: None,
        far: false,
    }
}

/// The lease of the places in these cases, unless a case says otherwise.
pub(super) const LEASE: Duration = Duration::from_secs(5);

/// The place a refusal reports, or a panic.
#[track_caller]
pub(super) fn queued<T: Debug>(result: Result<T, Error>) -> Option<u32> {
    match result {
        Err(Error::AlreadyLocked { queued, .. }) => queued.map(|q| q.ahead),
        other => panic!("expected AlreadyLocked, got {other:?}"),
    }
}

/// The modes of the live places on `resource`, first come first.
pub(super) async fn waiting<B: Backend>(cx: &Ctx<B>, resource: &str) -> Vec<Mode> {
    let waiters = cx.waiters(resource).await.expect("waiters");
    waiters.into_iter().map(|w| w.mode).collect()
}

cases! {
    __conformance_queue;

    async fn fair_request_on_free_resource_is_granted_without_a_place(cx) {
        let t = generate_lock_id();
        cx.xlock_fair("r", generate_lock_id(), &fair(&t, LEASE))
            .await
            .expect("grant");
        assert_eq!(waiting(cx, "r").await, vec![]);
    }

    async fn a_release_hands_the_lock_to_the_first_waiter(cx) {
        let holder = generate_lock_id();
        let first = cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        assert_eq!(queued(cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await), Some(0));
        cx.clock.advance(ms(1));
        assert_eq!(queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await), Some(1));
        let places = cx.waiters("r").await.expect("waiters");
        assert_eq!(places.len(), 2);
        assert_eq!(places[0].queued_at, T0);
        assert_eq!(places[0].expires_at, at(LEASE));
        assert_eq!(places[1].queued_at, at(ms(1)));
        cx.clock.advance(ms(1));
        cx.unlock(&holder).await.expect("unlock");
        // The release handed the lock to a: its lock, a claim lease of its place's lease
        // from the release, the next fence; its place is gone.
        let handed = all(cx).await;
        assert_eq!(pairs(&handed), vec![pair("r", &a)]);
        assert_eq!(handed[0].expires_at, Some(at(ms(2) + LEASE)));
        assert_eq!(handed[0].renewed_at, None);
        assert!(handed[0].fence > first.fence);
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive]);
        // b is first now, behind a's lock.
        assert_eq!(queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await), Some(0));
        // a claims it: the grant, renewed to its TTL from now, with the handoff's fence.
        cx.clock.advance(ms(1));
        let claimed = cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await.expect("a's claim");
        assert_eq!(claimed.fence, handed[0].fence);
        assert_eq!(claimed.expires_at, Some(at(ms(3) + secs(30))));
        assert_eq!(claimed.renewed_at, Some(at(ms(3))));
        // Asking again claims again (an attempt whose reply was lost); asking without a
        // place is refused, as grants are not re-entrant.
        let again = cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await.expect("again");
        assert_eq!(again.fence, handed[0].fence);
        assert_locked(cx.xlock("r", &a, &ttl(secs(30))).await, "r");
        cx.unlock(&a).await.expect("unlock");
        let b_lock = cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await.expect("b's turn");
        assert!(b_lock.fence > handed[0].fence);
        assert_eq!(waiting(cx, "r").await, vec![]);
        // A one-lock release (a leader's resign) hands the lock over in the same write too.
        let (c, tc) = (generate_lock_id(), generate_lock_id());
        assert_eq!(queued(cx.xlock_fair("r", &c, &fair(&tc, LEASE)).await), Some(0));
        let resigned = cx.store.unlock_one(&b_lock.resource, &b);
        assert!(resigned.await.expect("unlock_one").is_some(), "b's lock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &c)]);
    }

    async fn a_write_that_finds_the_holder_gone_hands_the_lock_over(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(1))).await.expect("grant");
        let (ta, a) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await);
        // The holder's lock ends (no grace here) and nobody releases it: the next write of
        // the resource, a request that is not fair, hands the lock to a, and is refused.
        cx.clock.advance(secs(1));
        assert_eq!(
            queued(cx.xlock("r", generate_lock_id(), &ttl(secs(1))).await),
            None
        );
        assert_eq!(
            queued(cx.slock("r", generate_lock_id(), &ttl(secs(1)), None).await),
            None
        );
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &a)]);
        assert_eq!(waiting(cx, "r").await, vec![], "no place was taken");
        cx.xlock_fair("r", &a, &fair(&ta, LEASE))
            .await
            .expect("a's claim");
    }

    async fn a_waiting_writer_holds_back_later_readers(cx) {
        let r1 = generate_lock_id();
        cx.slock("r", &r1, &ttl(secs(30)), None)
            .await
            .expect("grant");
        let (tw, t2) = (generate_lock_id(), generate_lock_id());
        let (w, r2) = (generate_lock_id(), generate_lock_id());
        assert_eq!(queued(cx.xlock_fair("r", &w, &fair(&tw, LEASE)).await), Some(0));
        // Readers that come after the writer wait behind it, fair or not.
        assert_eq!(
            queued(cx.slock_fair("r", &r2, &fair(&t2, LEASE), None).await),
            Some(1)
        );
        assert_locked(
            cx.slock("r", generate_lock_id(), &ttl(secs(1)), None).await,
            "r",
        );
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive, Mode::Shared]);
        cx.unlock(&r1).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &w)], "the writer's turn");
        assert_locked(cx.slock_fair("r", &r2, &fair(&t2, LEASE), None).await, "r");
        cx.xlock_fair("r", &w, &fair(&tw, LEASE))
            .await
            .expect("the writer's claim");
        cx.unlock(&w).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &r2)], "r2's turn");
        cx.slock("r", generate_lock_id(), &ttl(secs(1)), None)
            .await
            .expect("nobody waits any more");
        cx.slock_fair("r", &r2, &fair(&t2, LEASE), None)
            .await
            .expect("r2's claim");
    }

    async fn a_waiter_granted_from_its_place_leaves_the_queue(cx) {
        let reader = generate_lock_id();
        cx.slock("r", &reader, &ttl(secs(30)), None)
            .await
            .expect("grant");
        let (t, w) = (generate_lock_id(), generate_lock_id());
        // A writer waits behind the reader, then asks again as a reader (its place keeps
        // its turn): the locks let it through, nobody is ahead, so it is granted, and its
        // place goes with the grant.
        assert_eq!(queued(cx.xlock_fair("r", &w, &fair(&t, LEASE)).await), Some(0));
        cx.slock_fair("r", &w, &fair(&t, LEASE), None)
            .await
            .expect("granted from its place");
        assert_eq!(waiting(cx, "r").await, vec![]);
    }

    async fn queued_readers_are_not_held_back_by_each_other(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (t1, t2) = (generate_lock_id(), generate_lock_id());
        let (r1, r2) = (generate_lock_id(), generate_lock_id());
        assert_eq!(
            queued(cx.slock_fair("r", &r1, &fair(&t1, LEASE), None).await),
            Some(0)
        );
        assert_eq!(
            queued(cx.slock_fair("r", &r2, &fair(&t2, LEASE), None).await),
            Some(0)
        );
        cx.unlock(&holder).await.expect("unlock");
        cx.slock_fair("r", &r2, &fair(&t2, LEASE), None)
            .await
            .expect("r2");
        cx.slock_fair("r", &r1, &fair(&t1, LEASE), None)
            .await
            .expect("r1");
        // A writer behind readers waits for the readers' locks, not for a place.
        let tw = generate_lock_id();
        assert_eq!(
            queued(cx.xlock_fair("r", generate_lock_id(), &fair(&tw, LEASE)).await),
            Some(0)
        );
    }

    async fn readers_ahead_keep_their_slots_under_a_limit(cx) {
        let (h1, h2) = (generate_lock_id(), generate_lock_id());
        cx.slock("r", &h1, &ttl(secs(30)), Some(2))
            .await
            .expect("grant");
        cx.slock("r", &h2, &ttl(secs(30)), Some(2))
            .await
            .expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        assert_eq!(
            queued(cx.slock_fair("r", &a, &fair(&ta, LEASE), Some(2)).await),
            Some(0)
        );
        assert_eq!(
            queued(cx.slock_fair("r", &b, &fair(&tb, LEASE), Some(2)).await),
            Some(1)
        );
        // One slot comes free: a is handed it, and b waits for the next.
        cx.unlock(&h1).await.expect("unlock");
        assert_eq!(waiting(cx, "r").await, vec![Mode::Shared]);
        assert_eq!(
            queued(cx.slock_fair("r", &b, &fair(&tb, LEASE), Some(2)).await),
            Some(0)
        );
        assert_locked(
            cx.slock("r", generate_lock_id(), &ttl(secs(1)), Some(2))
                .await,
            "r",
        );
        // A request without a limit takes no slot from anybody.
        let free = generate_lock_id();
        cx.slock("r", &free, &ttl(secs(30)), None)
            .await
            .expect("no limit");
        cx.slock_fair("r", &a, &fair(&ta, LEASE), Some(2))
            .await
            .expect("a's claim");
        // h2 goes, but a and the unlimited reader fill b's limit; when that reader goes
        // too, b is handed a slot.
        cx.unlock(&h2).await.expect("unlock");
        assert_eq!(waiting(cx, "r").await, vec![Mode::Shared]);
        cx.unlock(&free).await.expect("unlock");
        assert_eq!(waiting(cx, "r").await, vec![]);
        let holders: BTreeSet<_> = pairs(&all(cx).await).into_iter().collect();
        assert_eq!(holders, [pair("r", &a), pair("r", &b)].into_iter().collect());
    }

    async fn a_dead_place_is_never_handed_the_lock(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let b = generate_lock_id();
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&ta, secs(1))).await);
        queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await);
        cx.clock.advance(ms(999));
        assert_eq!(waiting(cx, "r").await, vec![Mode::Exclusive, Mode::Exclusive]);
        cx.clock.advance(ms(1));
        assert_eq!(
            waiting(cx, "r").await,
            vec![Mode::Exclusive],
            "only b's place lives"
        );
        cx.unlock(&holder).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)], "a's place lapsed");
        assert_eq!(waiting(cx, "r").await, vec![]);
        cx.xlock_fair("r", &b, &fair(&tb, LEASE))
            .await
            .expect("b's claim");
    }

    async fn asking_again_keeps_the_place(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let a = generate_lock_id();
        queued(cx.xlock_fair("r", &a, &fair(&ta, secs(1))).await);
        cx.clock.advance(ms(900));
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&tb, LEASE)).await);
        // a asks again before its place lapses: it keeps it, ahead of b, and for longer.
        assert_eq!(
            queued(cx.xlock_fair("r", &a, &fair(&ta, secs(1))).await),
            Some(0)
        );
        let places = cx.waiters("r").await.expect("waiters");
        assert_eq!(places[0].queued_at, T0, "the place keeps its time");
        assert_eq!(places[0].expires_at, at(ms(1_900)));
        cx.clock.advance(ms(500));
        cx.unlock(&holder).await.expect("unlock");
        // Handed at 1,400 ms with a claim lease of a's place lease (1 s) from then.
        let handed = all(cx).await;
        assert_eq!(pairs(&handed), vec![pair("r", &a)]);
        assert_eq!(handed[0].expires_at, Some(at(ms(2_400))));
        assert_eq!(
            queued(cx.xlock_fair("r", generate_lock_id(), &fair(&tb, LEASE)).await),
            Some(0)
        );
        cx.xlock_fair("r", &a, &fair(&ta, secs(1)))
            .await
            .expect("a's claim");
    }

    async fn leaving_the_queue_lets_the_next_one_in(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let b = generate_lock_id();
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&ta, LEASE)).await);
        queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await);
        assert!(cx.leave_queue("r", &ta).await.expect("leave"));
        assert!(!cx.leave_queue("r", &ta).await.expect("leave twice"));
        assert!(
            !cx.leave_queue("elsewhere", &tb)
                .await
                .expect("no such resource")
        );
        cx.unlock(&holder).await.expect("unlock");
        cx.xlock_fair("r", &b, &fair(&tb, LEASE))
            .await
            .expect("b is first now");
    }

    async fn a_waiter_leaving_from_the_front_hands_the_lock_on(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(1))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, LEASE)).await);
        queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await);
        cx.clock.advance(ms(500));
        assert!(cx.leave_queue("r", &ta).await.expect("leave"));
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &holder)], "still held");
        // The holder's lock ends: a third waiter leaving finds it gone, and hands it to b.
        let tc = generate_lock_id();
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&tc, LEASE)).await);
        cx.clock.advance(ms(500));
        assert!(cx.leave_queue("r", &tc).await.expect("leave"));
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)], "b's turn");
        cx.xlock_fair("r", &b, &fair(&tb, LEASE))
            .await
            .expect("b's claim");
    }

    async fn purge_hands_the_lock_over_and_drops_dead_places(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(10))).await.expect("grant");
        let ta = generate_lock_id();
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&ta, secs(1))).await);
        cx.clock.advance(secs(2));
        assert!(cx.purge().await.expect("purge").is_empty());
        assert_eq!(waiting(cx, "r").await, vec![], "a's place lapsed");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &holder)]);
        let (tc, c) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &c, &fair(&tc, secs(3))).await);
        cx.clock.advance(secs(7));
        queued(cx.xlock_fair("r", &c, &fair(&tc, secs(3))).await);
        // The holder's lock ends at 10 s; purge removes it and hands the lock to c.
        cx.clock.advance(secs(1));
        let purged = cx.purge().await.expect("purge");
        assert_eq!(pairs(&purged), vec![pair("r", &holder)]);
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &c)], "purge handed it to c");
        assert_eq!(waiting(cx, "r").await, vec![]);
        // c never claims: after its claim lease, purge removes the handed lock too.
        cx.clock.advance(secs(3));
        let purged = cx.purge().await.expect("purge");
        assert_eq!(pairs(&purged), vec![pair("r", &c)]);
        cx.xlock("r", generate_lock_id(), &ttl(secs(1)))
            .await
            .expect("nobody waits");
    }

    async fn a_grant_after_a_purge_of_a_waited_resource_keeps_fences_increasing(cx) {
        let holder = generate_lock_id();
        let first = cx.xlock("r", &holder, &ttl(secs(1))).await.expect("grant");
        let (ta, a) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, secs(3))).await);
        cx.clock.advance(secs(2));
        cx.purge().await.expect("purge");
        let next = cx
            .xlock_fair("r", &a, &fair(&ta, secs(3)))
            .await
            .expect("a's claim");
        assert!(next.fence > first.fence);
    }

    async fn a_head_that_never_claims_costs_its_claim_lease(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, secs(2))).await);
        queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await);
        cx.clock.advance(secs(1));
        cx.unlock(&holder).await.expect("unlock");
        // The claim lease starts at the handoff (1 s), not when a took its place.
        let handed = all(cx).await;
        assert_eq!(pairs(&handed), vec![pair("r", &a)]);
        assert_eq!(handed[0].expires_at, Some(at(secs(3))));
        cx.clock.advance(ms(1_500));
        match cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await {
            Err(Error::AlreadyLocked {
                retry_in, queued, ..
            }) => {
                assert_eq!(retry_in, Some(ms(500)), "a's claim lease ends in 500 ms");
                assert_eq!(queued.map(|q| q.ahead), Some(0));
            }
            other => panic!("expected AlreadyLocked, got {other:?}"),
        }
        // a never claims; b's next request finds its lease over, is handed the lock and
        // claims it in the same write.
        cx.clock.advance(ms(500));
        let granted = cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await.expect("b's turn");
        assert!(granted.fence > handed[0].fence);
        assert_eq!(granted.lock_id, b);
    }

    async fn a_lapsed_handoff_is_not_claimed(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (ta, tb) = (generate_lock_id(), generate_lock_id());
        let (a, b) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", &a, &fair(&ta, secs(1))).await);
        queued(cx.xlock_fair("r", &b, &fair(&tb, LEASE)).await);
        cx.unlock(&holder).await.expect("unlock");
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &a)]);
        // a comes back when its claim lease is over: the same write hands the lock to b,
        // and a takes a new place, behind b's lock.
        cx.clock.advance(secs(1));
        assert_eq!(queued(cx.xlock_fair("r", &a, &fair(&ta, secs(1))).await), Some(0));
        assert_eq!(pairs(&all(cx).await), vec![pair("r", &b)]);
        cx.xlock_fair("r", &b, &fair(&tb, LEASE))
            .await
            .expect("b's claim");
    }

    async fn bad_queue_arguments_are_refused(cx) {
        let t = generate_lock_id();
        for lease in [Duration::ZERO, ms(99), secs(601)] {
            assert_invalid(
                cx.xlock_fair("r", generate_lock_id(), &fair(&t, lease)).await,
                "queue_ttl",
            );
        }
        assert_invalid(
            cx.xlock_fair("r", generate_lock_id(), &place("", LEASE))
                .await,
            "ticket",
        );
        assert_invalid(
            cx.slock_fair(
                "r",
                generate_lock_id(),
                &place("x".repeat(257), LEASE),
                None,
            )
            .await,
            "ticket",
        );
        assert_invalid(cx.leave_queue("r", "").await, "ticket");
        assert_invalid(cx.leave_queue("", &t).await, "resource");
        assert_invalid(cx.waiters("").await, "resource");
        assert_eq!(waiting(cx, "r").await, vec![], "nothing was written");
        assert!(all(cx).await.is_empty());
    }

    async fn summary_counts_live_waiters_and_the_longest_wait(cx) {
        let holder = generate_lock_id();
        cx.xlock("r", &holder, &ttl(secs(30))).await.expect("grant");
        let (tw, tr) = (generate_lock_id(), generate_lock_id());
        queued(cx.xlock_fair("r", generate_lock_id(), &fair(&tw, ms(500))).await);
        cx.clock.advance(ms(100));
        queued(
            cx.slock_fair("r", generate_lock_id(), &fair(&tr, LEASE), None)
                .await,
        );
        cx.xlock("quiet", generate_lock_id(), &ttl(secs(30)))
            .await
            .expect("grant");
        cx.clock.advance(ms(300));
        let summary = cx.summary().await.expect("summary");
        let names: Vec<&str> = summary
            .resources
            .iter()
            .map(|s| s.resource.as_str())
            .collect();
        assert_eq!(names, vec!["r", "quiet"], "the resource with waiters first");
        let r = &summary.resources[0];
        assert_eq!(
            (r.held_exclusive, r.waiting_exclusive, r.waiting_shared),
            (1, 1, 1)
        );
        assert_eq!(r.longest_wait, Some(ms(400)));
        assert_eq!(r.next_expiry, Some(secs(30) - ms(400)));
        // The writer's place lapses at 500 ms: the reader is then the longest waiter.
        cx.clock.advance(ms(100));
        let summary = cx.summary().await.expect("summary");
        let r = &summary.resources[0];
        assert_eq!((r.waiting_exclusive, r.waiting_shared), (0, 1));
        assert_eq!(r.longest_wait, Some(ms(400)));
    }
}
