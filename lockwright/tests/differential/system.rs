//! The system under test: each step on a real store, its outcome and table compared with
//! the reference's.

use super::*;
use lockwright::Access;

impl<B: Backend> StateMachineTest for Differential<B> {
    type SystemUnderTest = System<B>;
    type Reference = Engine;

    fn init_test(_initial: &Reference) -> System<B> {
        #[cfg(lockwright_mutants)]
        lockwright_testkit::activate_mutant();
        let clock = Arc::new(ManualClock::new(T0));
        System {
            store: runtime().block_on(B::store(Arc::clone(&clock), SHARDS, GRACE)),
            clock,
            fences: BTreeMap::new(),
            before: RefCell::new(LockTable::new()),
            last: None,
        }
    }

    fn apply(mut sys: System<B>, reference: &Reference, step: Step) -> System<B> {
        let store = &sys.store;
        let got = runtime().block_on(async {
            match &step {
                Step::Xlock { resource, id, ttl } => Some(outcome(
                    store
                        .lock(&request(*resource, *id, *ttl))
                        .await
                        .map(|l| vec![l]),
                )),
                Step::Slock {
                    resource,
                    id,
                    ttl,
                    limit: m,
                } => Some(outcome(
                    store
                        .lock(&request(*resource, *id, *ttl).with_access(Access::Shared(limit(*m))))
                        .await
                        .map(|l| vec![l]),
                )),
                Step::Unlock { id } => Some(outcome(store.unlock(&lock_id(*id)).await)),
                Step::Renew { id, ttl: ms } => {
                    Some(outcome(store.renew(&lock_id(*id), ttl(*ms), MARGIN).await))
                }
                Step::RenewOne {
                    resource: r,
                    id,
                    ttl: ms,
                } => Some(one(store
                    .renew_one(
                        &Renewal {
                            resource: resource(*r),
                            lock_id: lock_id(*id),
                            ttl: ttl(*ms),
                        },
                        MARGIN,
                    )
                    .await
                    .map(Some))),
                Step::RenewMany { locks } => {
                    Some(each(store.renew_each(&renewals(locks), MARGIN).await))
                }
                Step::UnlockOne { resource: r, id } => {
                    Some(one(store.unlock_one(&resource(*r), &lock_id(*id)).await))
                }
                Step::Status(filter) => Some(outcome(store.status(filter).await)),
                Step::Purge => Some(outcome(store.purge().await)),
                Step::Advance(_) => None,
            }
        });
        if let Step::Advance(ms) = step {
            sys.clock.advance(Duration::from_millis(ms));
        }
        assert_eq!(
            got, reference.last,
            "outcome of {step:?} differs from the engine's"
        );
        if let Some(Outcome::Locks(granted)) = &got
            && matches!(step, Step::Xlock { .. } | Step::Slock { .. })
        {
            for l in granted {
                let last = sys
                    .fences
                    .entry(l.resource.as_str().to_owned())
                    .or_insert(0);
                assert!(
                    l.fence > *last,
                    "fence_monotonic: {} after {last} on {}",
                    l.fence,
                    l.resource
                );
                *last = l.fence;
            }
        }
        sys.last = got.map(|g| (step, g));
        sys
    }

    fn check_invariants(sys: &System<B>, reference: &Reference) {
        let after = runtime().block_on(B::snapshot(&sys.store));
        assert_eq!(
            after, reference.table,
            "the store's table differs from the engine's"
        );
        if let Some((step, got)) = &sys.last {
            check_properties(&sys.before.borrow(), &after, step, got, reference.now);
        }
        *sys.before.borrow_mut() = after;
    }

    fn teardown(sys: System<B>, _reference: Reference) {
        runtime().block_on(B::teardown(&sys.store));
    }
}
