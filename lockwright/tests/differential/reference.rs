//! The reference: generated steps applied to the engine's own lock table.

use super::*;
use lockwright::Access;

/// One operation of a generated sequence.
#[derive(Clone, Debug)]
pub(crate) enum Step {
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
pub(crate) enum Outcome {
    Locks(Vec<LockStatus>),
    /// The resource, and when the rule would allow the request.
    AlreadyLocked(String, Option<Duration>),
    LockNotFound,
    NotRenewable(Vec<LockStatus>),
    Other(String),
    /// A batch's outcome for each of its locks, in order (each as [`one`] gives it).
    Each(Vec<Outcome>),
}

pub(crate) fn outcome(result: Result<Vec<LockStatus>, Error>) -> Outcome {
    match result {
        Ok(locks) => Outcome::Locks(locks),
        Err(Error::AlreadyLocked {
            resource, retry_in, ..
        }) => Outcome::AlreadyLocked(resource.as_str().to_owned(), retry_in),
        Err(Error::LockNotFound) => Outcome::LockNotFound,
        Err(Error::NotRenewable { locks }) => Outcome::NotRenewable(locks),
        Err(other) => Outcome::Other(format!("{other:?}")),
    }
}

pub(crate) fn request(resource: usize, id: usize, ttl: Option<u64>) -> LockRequest {
    let mut details = LockOptions::new().owner(format!("owner-{id}"));
    details.ttl = ttl.map(Duration::from_millis);
    LockRequest::new(RESOURCES[resource], IDS[id], &details).unwrap()
}

pub(crate) fn lock_id(id: usize) -> LockId {
    LockId::new(IDS[id]).unwrap()
}

pub(crate) fn resource(r: usize) -> Resource {
    Resource::new(RESOURCES[r]).unwrap()
}

/// The outcome of a one-lock operation: the lock renewed or released as a list of one, or
/// an empty list when `unlock_one` found none.
pub(crate) fn one(result: Result<Option<LockStatus>, Error>) -> Outcome {
    outcome(result.map(|l| l.into_iter().collect()))
}

/// The outcome of a batch: each lock's, or the batch's error.
pub(crate) fn each(result: Result<Vec<Result<LockStatus, Error>>, Error>) -> Outcome {
    match result {
        Ok(each) => Outcome::Each(each.into_iter().map(|r| one(r.map(Some))).collect()),
        Err(e) => outcome(Err(e)),
    }
}

/// The renewals of a `RenewMany` step.
pub(crate) fn renewals(locks: &[(usize, usize, u64)]) -> Vec<Renewal> {
    locks
        .iter()
        .map(|&(r, id, ms)| Renewal {
            resource: resource(r),
            lock_id: lock_id(id),
            ttl: ttl(ms),
        })
        .collect()
}

pub(crate) fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

pub(crate) fn limit(m: Option<u32>) -> Option<SharedLimit> {
    m.map(|m| SharedLimit::new(m).unwrap())
}

/// The reference: the engine's table, its clock, and the last outcome.
#[derive(Clone, Debug)]
pub(crate) struct Reference {
    pub(crate) table: LockTable,
    pub(crate) now: Timestamp,
    pub(crate) last: Option<Outcome>,
}

pub(crate) struct Engine;

pub(crate) fn filters() -> impl Strategy<Value = Filter> {
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
            table: LockTable::new().with_takeover_grace(GRACE),
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
                t.lock(&request(*resource, *id, *ttl), now).map(|l| vec![l]),
            )),
            Step::Slock {
                resource,
                id,
                ttl,
                limit: m,
            } => Some(outcome(
                t.lock(
                    &request(*resource, *id, *ttl).with_access(Access::Shared(limit(*m))),
                    now,
                )
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
