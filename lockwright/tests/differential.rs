//! Differential property tests: the engine is the reference, the stores are the systems
//! under test.
//!
//! Random sequences of operations over three resources and four lock ids, with time moving
//! through expiry boundaries, run against the engine's `LockTable` and against a store on a
//! manual clock (store-mem, and store-mongo on a real server with `$$NOW` replaced by the
//! clock). After every step the store's outcome must equal the engine's, and the store's
//! whole lock table must equal the engine's table. The operations are the group ones, the
//! one-lock `renew_one` and `unlock_one`, and `renew_many` batches of one to four distinct
//! locks, each with its own TTL (the reference renews them one by one with `renew_one`).
//! The store's results are also checked against the properties themselves
//! (mutual_exclusion, shared_limit, purge_safety, renew_after_purge, fence_monotonic,
//! no_lost_grant, that a renewal or a batch changes exactly the named renewable locks and a
//! refusal nothing, and that status reports only matching locks), with predicates written
//! out here rather than taken from the engine, so the checks still bite when the store and
//! the engine share a bug.
//!
//! A failure is shrunk to a minimal sequence and its seed saved in
//! `lockwright/proptest-regressions/differential.txt`, which is committed and replayed first
//! on every run. To replay or dig in:
//! `scripts/mongod.sh run -- cargo test -p lockwright --all-features --test differential`,
//! with `PROPTEST_CASES=N` for more cases.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockwright::engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStatus, LockStore, LockTable, ManualClock,
    Mode, Renewal, Resource, SharedLimit, Timestamp, Ttl,
};
use lockwright_testkit::Backend;
#[cfg(feature = "mem")]
use lockwright_testkit::Mem;
#[cfg(feature = "mongo")]
use lockwright_testkit::Mongo;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// Renew margin of every renew: TTLs here are a few milliseconds.
const MARGIN: Duration = Duration::from_millis(1);
const RESOURCES: [&str; 3] = ["a", "b", "c"];
const IDS: [&str; 4] = ["k0", "k1", "k2", "k3"];
/// Shards of an in-memory store.
const SHARDS: usize = 2;

/// One operation of a generated sequence.
#[derive(Clone, Debug)]
enum Step {
    Xlock {
        resource: usize,
        id: usize,
        ttl: Option<u64>,
    },
    Slock {
        resource: usize,
        id: usize,
        ttl: Option<u64>,
        limit: Option<u32>,
    },
    Unlock {
        id: usize,
    },
    Renew {
        id: usize,
        ttl: u64,
    },
    /// `renew_one` of the lock `id` holds on `resource`.
    RenewOne {
        resource: usize,
        id: usize,
        ttl: u64,
    },
    /// `renew_many` of the locks `(resource, id, ttl)`: each the lock `id` holds on
    /// `resource`, renewed for its own `ttl`. No lock appears twice (see [`distinct`]).
    RenewMany {
        locks: Vec<(usize, usize, u64)>,
    },
    /// `unlock_one` of the lock `id` holds on `resource`.
    UnlockOne {
        resource: usize,
        id: usize,
    },
    Status(Filter),
    Purge,
    Advance(u64),
}

/// What an operation returned, in comparable form.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Locks(Vec<LockStatus>),
    AlreadyLocked(String),
    LockNotFound,
    NotRenewable(Vec<LockStatus>),
    Other(String),
    /// A batch's outcome for each of its locks, in order (each as [`one`] gives it).
    Each(Vec<Outcome>),
}

fn outcome(result: Result<Vec<LockStatus>, Error>) -> Outcome {
    match result {
        Ok(locks) => Outcome::Locks(locks),
        Err(Error::AlreadyLocked { resource }) => {
            Outcome::AlreadyLocked(resource.as_str().to_owned())
        }
        Err(Error::LockNotFound) => Outcome::LockNotFound,
        Err(Error::NotRenewable { locks }) => Outcome::NotRenewable(locks),
        Err(other) => Outcome::Other(format!("{other:?}")),
    }
}

fn request(resource: usize, id: usize, ttl: Option<u64>) -> LockRequest {
    let mut details = LockDetails::new().owner(format!("owner-{id}"));
    details.ttl = ttl.map(Duration::from_millis);
    LockRequest::new(RESOURCES[resource], IDS[id], &details).unwrap()
}

fn lock_id(id: usize) -> LockId {
    LockId::new(IDS[id]).unwrap()
}

fn resource(r: usize) -> Resource {
    Resource::new(RESOURCES[r]).unwrap()
}

/// The outcome of a one-lock operation: the lock renewed or released as a list of one, or
/// an empty list when `unlock_one` found none.
fn one(result: Result<Option<LockStatus>, Error>) -> Outcome {
    outcome(result.map(|l| l.into_iter().collect()))
}

/// The outcome of a batch: each lock's, or the batch's error.
fn each(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Outcome {
    match result {
        Ok(each) => Outcome::Each(each.into_iter().map(|r| one(r.map(Some))).collect()),
        Err(e) => outcome(Err(e)),
    }
}

/// The renewals of a `RenewMany` step.
fn renewals(locks: &[(usize, usize, u64)]) -> Vec<Renewal> {
    locks
        .iter()
        .map(|&(r, id, ms)| Renewal {
            resource: resource(r),
            lock_id: lock_id(id),
            ttl: ttl(ms),
        })
        .collect()
}

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

fn limit(m: Option<u32>) -> Option<SharedLimit> {
    m.map(|m| SharedLimit::new(m).unwrap())
}

/// The reference: the engine's table, its clock, and the last outcome.
#[derive(Clone, Debug)]
struct Reference {
    table: LockTable,
    now: Timestamp,
    last: Option<Outcome>,
}

struct Engine;

fn filters() -> impl Strategy<Value = Filter> {
    let ms = |hi: u64| (0..hi).prop_map(Duration::from_millis);
    (
        proptest::option::weighted(0.3, 0..RESOURCES.len()),
        proptest::option::weighted(0.3, 0..IDS.len()),
        proptest::option::weighted(0.2, prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]),
        proptest::option::weighted(0.3, ms(8)),
        proptest::option::weighted(0.3, ms(8)),
        proptest::option::weighted(0.2, 0_u64..12),
        proptest::option::weighted(0.2, 0..IDS.len()),
    )
        .prop_map(|(resource, id, mode, lt, gte, created_after, owner)| {
            let mut f = Filter::new();
            f.resource = resource.map(|r| RESOURCES[r].to_string());
            f.lock_id = id.map(|i| IDS[i].to_string());
            f.mode = mode;
            f.ttl_lt = lt;
            f.ttl_gte = gte;
            f.created_after = created_after.map(|d| T0.saturating_add(Duration::from_millis(d)));
            f.owner = owner.map(|o| format!("owner-{o}"));
            f
        })
}

impl ReferenceStateMachine for Engine {
    type State = Reference;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Reference> {
        Just(Reference {
            table: LockTable::new(),
            now: T0,
            last: None,
        })
        .boxed()
    }

    fn transitions(state: &Reference) -> BoxedStrategy<Step> {
        let r = 0..RESOURCES.len();
        let id = 0..IDS.len();
        // The one-lock operations name a (resource, lock id) from the pools, mostly one that
        // holds a lock in the reference (live or expired), so that they do not mostly miss.
        let held: Vec<(usize, usize)> = state
            .table
            .resources()
            .iter()
            .flat_map(|(name, st)| {
                st.locks()
                    .map(|(_, l)| {
                        let at = |pool: &[&str], v: &str| pool.iter().position(|p| *p == v);
                        (
                            at(&RESOURCES, name.as_str()).unwrap(),
                            at(&IDS, l.lock_id.as_str()).unwrap(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let one = if held.is_empty() {
            (r.clone(), id.clone()).boxed()
        } else {
            prop_oneof![
                2 => proptest::sample::select(held),
                1 => (r.clone(), id.clone()),
            ]
            .boxed()
        };
        let ttl = proptest::option::weighted(0.8, 1_u64..6);
        prop_oneof![
            4 => (r.clone(), id.clone(), ttl.clone())
                .prop_map(|(resource, id, ttl)| Step::Xlock { resource, id, ttl }),
            4 => (r.clone(), id.clone(), ttl, proptest::option::of(1_u32..4))
                .prop_map(|(resource, id, ttl, limit)| Step::Slock { resource, id, ttl, limit }),
            2 => id.clone().prop_map(|id| Step::Unlock { id }),
            3 => (id.clone(), 1_u64..6).prop_map(|(id, ttl)| Step::Renew { id, ttl }),
            3 => (one.clone(), 1_u64..6)
                .prop_map(|((resource, id), ttl)| Step::RenewOne { resource, id, ttl }),
            3 => proptest::collection::vec((one.clone(), 1_u64..6), 1..=4).prop_map(|v| {
                let locks = v.into_iter().map(|((r, id), ttl)| (r, id, ttl)).collect();
                Step::RenewMany { locks }
            }),
            2 => one.prop_map(|(resource, id)| Step::UnlockOne { resource, id }),
            2 => filters().prop_map(Step::Status),
            2 => Just(Step::Purge),
            4 => (0_u64..4).prop_map(Step::Advance),
        ]
        .boxed()
    }

    fn apply(mut state: Reference, step: &Step) -> Reference {
        let now = state.now;
        let t = &mut state.table;
        state.last = match step {
            Step::Xlock { resource, id, ttl } => Some(outcome(
                t.xlock(&request(*resource, *id, *ttl), now)
                    .map(|l| vec![l]),
            )),
            Step::Slock {
                resource,
                id,
                ttl,
                limit: m,
            } => Some(outcome(
                t.slock(&request(*resource, *id, *ttl), limit(*m), now)
                    .map(|l| vec![l]),
            )),
            Step::Unlock { id } => Some(outcome(Ok(t.unlock(&lock_id(*id), now)))),
            Step::Renew { id, ttl: ms } => {
                Some(outcome(t.renew(&lock_id(*id), ttl(*ms), MARGIN, now)))
            }
            Step::RenewOne {
                resource: r,
                id,
                ttl: ms,
            } => Some(one(t
                .renew_one(&resource(*r), &lock_id(*id), ttl(*ms), MARGIN, now)
                .map(Some))),
            Step::RenewMany { locks } => Some(Outcome::Each(
                renewals(locks)
                    .iter()
                    .map(|r| {
                        one(t
                            .renew_one(&r.resource, &r.lock_id, r.ttl, MARGIN, now)
                            .map(Some))
                    })
                    .collect(),
            )),
            Step::UnlockOne { resource: r, id } => {
                Some(one(Ok(t.unlock_one(&resource(*r), &lock_id(*id), now))))
            }
            Step::Status(filter) => Some(outcome(Ok(t.status(filter, now)))),
            Step::Purge => Some(outcome(Ok(t.purge(now)))),
            Step::Advance(ms) => {
                state.now = now.saturating_add(Duration::from_millis(*ms));
                None
            }
        };
        state
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// The store, its clock, and what the property checks need to remember.
struct System<B: Backend> {
    store: B::Store,
    clock: Arc<ManualClock>,
    /// The highest fence granted so far, per resource.
    fences: BTreeMap<String, u64>,
    /// The store's table before the last step, and the last step with its outcome.
    before: RefCell<LockTable>,
    last: Option<(Step, Outcome)>,
}

struct Differential<B>(std::marker::PhantomData<B>);

fn live(expires_at: Option<Timestamp>, now: Timestamp) -> bool {
    expires_at.is_none_or(|e| e > now)
}

/// Every lock of a table as (resource, mode, lock id, fence, created, expires).
fn locks(table: &LockTable) -> Vec<Row> {
    table
        .resources()
        .iter()
        .flat_map(|(r, state)| {
            state.locks().map(move |(mode, l)| {
                (
                    r.to_string(),
                    mode,
                    l.lock_id.as_str().to_owned(),
                    l.fence,
                    l.created_at,
                    l.expires_at,
                )
            })
        })
        .collect()
}

/// (resource, lock id) of each of `locks`.
fn pairs_of(locks: &[LockStatus]) -> Vec<(String, String)> {
    locks
        .iter()
        .map(|l| {
            (
                l.resource.as_str().to_owned(),
                l.lock_id.as_str().to_owned(),
            )
        })
        .collect()
}

/// A lock of a table as [`locks`] lists it.
type Row = (String, Mode, String, u64, Timestamp, Option<Timestamp>);

/// One renewal's outcome `got` (of the lock `id` holds on `resource`, for `ttl` ms), judged
/// on `want`, the table as it should be after the step's earlier renewals (for the first
/// one, the table before the step): a renewed lock was held and outside the margin, keeps
/// its fence and gets `now + ttl`; `NotRenewable` names that one lock, held and within the
/// margin (or expired); `LockNotFound` only when no such lock is held. A renewal is applied
/// to `want`.
fn check_renewal(
    want: &mut [Row],
    (resource, id, ttl): (usize, usize, u64),
    got: &Outcome,
    now: Timestamp,
    op: &str,
) {
    let own = |l: &&Row| l.0 == RESOURCES[resource] && l.2 == IDS[id];
    let held = want.iter().find(own).cloned();
    match got {
        Outcome::Locks(renewed) => {
            let was = &held.unwrap_or_else(|| {
                panic!("renew_after_purge: {op} renewed a lock not held: {got:?}")
            });
            assert!(
                was.5.is_none_or(|e| e > now.saturating_add(MARGIN)),
                "{op} renewed {was:?}, expired or within the margin"
            );
            let expires = Some(now.saturating_add(Duration::from_millis(ttl)));
            assert!(
                renewed.len() == 1
                    && renewed[0].fence == was.3
                    && renewed[0].expires_at == expires
                    && renewed[0].renewed_at == Some(now),
                "{op} of {was:?} returned {renewed:?}"
            );
            for l in want.iter_mut().filter(|l| own(&&**l)) {
                l.5 = expires;
            }
        }
        Outcome::NotRenewable(locks) => {
            let was = &held.unwrap_or_else(|| panic!("{op}: NotRenewable names a lock not held"));
            assert!(
                was.5.is_some_and(|e| e <= now.saturating_add(MARGIN)),
                "{op} refused {was:?}, which is renewable"
            );
            assert_eq!(pairs_of(locks), vec![(was.0.clone(), was.2.clone())]);
        }
        Outcome::LockNotFound => {
            assert!(held.is_none(), "{op} did not find {held:?}");
        }
        other => panic!("{op}: unexpected {other:?}"),
    }
}

/// The properties, judged on the store's own tables before and after `step`.
fn check_properties(
    before: &LockTable,
    after: &LockTable,
    step: &Step,
    got: &Outcome,
    now: Timestamp,
) {
    let (pre, post) = (locks(before), locks(after));
    // mutual_exclusion
    for (resource, state) in after.resources() {
        let live_x = state
            .exclusive
            .iter()
            .filter(|l| live(l.expires_at, now))
            .count();
        let live_s = state
            .shared
            .iter()
            .filter(|l| live(l.expires_at, now))
            .count();
        assert!(
            live_x == 0 || live_s == 0 && live_x == 1,
            "mutual_exclusion broken on {resource}"
        );
    }
    // no_lost_grant: only unlock and purge remove live locks; a renew changes only the
    // locks of its group, and the one-lock operations only their one lock.
    if !matches!(step, Step::Unlock { .. } | Step::Purge) {
        for l in pre.iter().filter(|l| live(l.5, now)) {
            let own = match step {
                Step::Renew { id, .. } => l.2 == IDS[*id],
                Step::RenewOne { resource, id, .. } | Step::UnlockOne { resource, id } => {
                    l.0 == RESOURCES[*resource] && l.2 == IDS[*id]
                }
                Step::RenewMany { locks } => locks
                    .iter()
                    .any(|(r, id, _)| l.0 == RESOURCES[*r] && l.2 == IDS[*id]),
                _ => false,
            };
            assert!(post.contains(l) || own, "no_lost_grant: {l:?} vanished");
        }
    }
    match (step, got) {
        (
            Step::Slock {
                resource,
                limit: Some(m),
                ..
            },
            Outcome::Locks(_),
        ) => {
            let name = RESOURCES[*resource];
            let held = post
                .iter()
                .filter(|l| l.0 == name && l.1 == Mode::Shared && live(l.5, now))
                .count();
            assert!(
                held <= *m as usize,
                "shared_limit: {held} live shared locks on {name}, limit {m}"
            );
        }
        (Step::Purge, Outcome::Locks(removed)) => {
            let expired_groups: Vec<&String> = pre
                .iter()
                .filter(|l| !live(l.5, now))
                .map(|l| &l.2)
                .collect();
            for r in removed {
                assert!(
                    expired_groups.contains(&&r.lock_id.as_str().to_owned()) && r.created_at < now,
                    "purge_safety: removed {r:?} whose group had no expired lock"
                );
            }
            for l in &post {
                assert!(
                    live(l.5, now),
                    "purge_safety: {l:?} expired but survived purge"
                );
                assert!(
                    !expired_groups.contains(&&l.2) || l.4 >= now,
                    "purge_safety: {l:?} of an expired group, created before the purge, survived"
                );
            }
        }
        (Step::Renew { id, .. }, Outcome::Locks(_)) => {
            for l in pre.iter().filter(|l| l.2 == IDS[*id]) {
                assert!(
                    l.5.is_none_or(|e| e > now.saturating_add(MARGIN)),
                    "renew_after_purge: renewed {l:?}, expired or within the margin"
                );
            }
        }
        (Step::RenewOne { resource, id, ttl }, got) => {
            let mut want = pre.clone();
            check_renewal(&mut want, (*resource, *id, *ttl), got, now, "renew_one");
            assert_eq!(
                post, want,
                "renew_one changes exactly its lock when renewed, nothing when refused"
            );
        }
        (Step::RenewMany { locks }, got) => {
            let Outcome::Each(each) = got else {
                panic!("renew_many: unexpected {got:?}");
            };
            assert_eq!(each.len(), locks.len(), "renew_many: one outcome per lock");
            let mut want = pre.clone();
            for (lock, got) in locks.iter().zip(each) {
                check_renewal(&mut want, *lock, got, now, "renew_many");
            }
            assert_eq!(
                post, want,
                "renew_many changes exactly the named renewable locks; refusals and misses \
                 change nothing"
            );
        }
        (Step::UnlockOne { resource, id }, Outcome::Locks(released)) => {
            let own = |l: &&Row| l.0 == RESOURCES[*resource] && l.2 == IDS[*id];
            match pre.iter().find(own) {
                Some(was) => {
                    assert!(
                        released.len() == 1
                            && released[0].fence == was.3
                            && released[0].expires_at == was.5,
                        "unlock_one of {was:?} returned {released:?}"
                    );
                    assert!(post.iter().find(own).is_none(), "{was:?} survived");
                    assert_eq!(pre.len(), post.len() + 1, "unlock_one removes one lock");
                }
                None => {
                    assert!(released.is_empty(), "unlock_one released {released:?}");
                    assert_eq!(pre, post, "unlock_one of no lock changes nothing");
                }
            }
        }
        (Step::Status(f), Outcome::Locks(found)) => {
            for s in found {
                let remaining = s.expires_at.map(|e| e.saturating_duration_since(now));
                let ok = f.ttl_lt.is_none_or(|d| remaining.is_some_and(|r| r < d))
                    && f.ttl_gte.is_none_or(|d| remaining.is_some_and(|r| r >= d))
                    && f.resource
                        .as_deref()
                        .is_none_or(|r| r == s.resource.as_str())
                    && f.mode.is_none_or(|m| m == s.mode);
                assert!(ok, "status reported {s:?}, which does not match {f:?}");
            }
        }
        _ => {}
    }
}

impl<B: Backend> StateMachineTest for Differential<B> {
    type SystemUnderTest = System<B>;
    type Reference = Engine;

    fn init_test(_initial: &Reference) -> System<B> {
        #[cfg(lockwright_mutants)]
        lockwright::engine::mutants::activate_from_env();
        let clock = Arc::new(ManualClock::new(T0));
        System {
            store: runtime().block_on(B::store(Arc::clone(&clock), SHARDS)),
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
                        .xlock(&request(*resource, *id, *ttl))
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
                        .slock(&request(*resource, *id, *ttl), limit(*m))
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
                    Some(each(store.renew_many(&renewals(locks), MARGIN).await))
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

fn config(cases: u32) -> Config {
    let mut config = Config::with_cases(cases);
    // Runs under a mutant are expected to fail; their counterexamples are not regressions.
    if std::env::var_os("LOCKWRIGHT_MUTANT").is_some_and(|v| !v.is_empty()) {
        config.failure_persistence = None;
    } else {
        config.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/differential.txt"
        ))));
    }
    config
}

#[cfg(feature = "mem")]
prop_state_machine! {
    #![proptest_config(config(256))]
    #[test]
    fn store_mem_matches_engine(sequential 1..40 => Differential<Mem>);
}

#[cfg(feature = "mongo")]
prop_state_machine! {
    #![proptest_config(config(40))]
    #[test]
    fn store_mongo_matches_engine(sequential 1..30 => Differential<Mongo>);
}
