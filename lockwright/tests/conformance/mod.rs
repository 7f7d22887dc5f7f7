//! The conformance suite: every rule of the lock semantics, written once against the public
//! [`Client`] API and run for every backend.
//!
//! A backend test file implements [`Backend`] and calls `conformance_suite!(TheBackend)`,
//! which expands to one `#[tokio::test]` per case. Time is a [`ManualClock`] shared with the
//! store, so no case sleeps.

pub mod cases;

use std::future::Future;
use std::sync::Arc;

use lockwright::{Client, LockStore, ManualClock, Timestamp};

/// The instant every case starts at (2027-01-15), far from the epoch so that
/// "before"/"after" bounds have room on both sides.
pub const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

/// How a backend gives the suite a fresh, empty store on a controlled clock.
pub trait Backend: 'static {
    /// The store type.
    type Store: LockStore;

    /// A fresh, empty store whose every time decision uses `clock`.
    fn store(clock: Arc<ManualClock>) -> impl Future<Output = Self::Store> + Send;

    /// Releases what `store` holds outside the process (a collection, say).
    fn teardown(store: &Self::Store) -> impl Future<Output = ()> + Send;
}

/// What a case works with.
pub struct Ctx<B: Backend> {
    /// A client with the default renew margin.
    pub client: Client<B::Store>,
    /// The clock of the store.
    pub clock: Arc<ManualClock>,
}

impl<B: Backend> Ctx<B> {
    /// A fresh store at [`T0`].
    pub async fn new() -> Self {
        #[cfg(lockwright_mutants)]
        lockwright::engine::mutants::activate_from_env();
        let clock = Arc::new(ManualClock::new(T0));
        let client = Client::new(B::store(Arc::clone(&clock)).await);
        Ctx { client, clock }
    }

    /// Cleans up the backend.
    pub async fn teardown(self) {
        B::teardown(self.client.store()).await;
    }
}

/// Expands to one test per conformance case for the backend type given.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:ty) => {
        $crate::conformance_suite!(@cases $backend;
            rejects_empty_resource,
            rejects_oversized_resource,
            rejects_empty_lock_id,
            rejects_oversized_lock_id,
            rejects_zero_ttl,
            rejects_sub_millisecond_and_huge_ttl,
            rejects_zero_limit,
            rejects_bad_details,
            rejects_bad_filter,
            rejects_huge_renew_margin,
            xlock_grants_free_resource,
            xlock_refuses_other_group,
            xlock_is_not_reentrant,
            xlock_takes_over_expired_lock,
            xlock_without_ttl_never_expires,
            one_lock_id_locks_many_resources,
            xlock_refused_by_live_shared,
            xlock_refuses_upgrade_from_shared,
            expired_shared_does_not_block_xlock,
            xlock_refused_while_any_shared_live,
            slock_unlimited_admits_many,
            slock_limit_is_enforced,
            slock_limit_holds_on_fresh_resource,
            slock_refuses_duplicate_lock_id,
            slock_refused_by_live_exclusive,
            expired_exclusive_does_not_block_slock,
            expired_shared_not_counted_toward_limit,
            slock_regrants_after_own_lock_expired,
            slock_limit_is_per_call,
            unlock_returns_newest_first_across_resources,
            unlock_orders_same_instant_by_resource,
            unlock_unknown_lock_id_returns_empty,
            unlock_is_idempotent,
            unlock_reports_expired_locks_with_zero_ttl,
            unlock_leaves_other_groups_alone,
            status_reports_remaining_ttl,
            status_filters_ttl_lt,
            status_filters_ttl_gte,
            status_ttl_bounds_combine,
            status_ttl_bounds_skip_locks_without_ttl,
            status_filters_created_before_and_after_strictly,
            status_filters_owner,
            status_filters_mode,
            status_filters_resource_and_lock_id,
            status_combines_fields,
            status_orders_oldest_first,
            status_reports_expired_locks,
            renew_extends_every_lock_of_group,
            renew_changes_only_its_group,
            renew_unknown_lock_id_is_not_found,
            renew_within_margin_changes_nothing,
            renew_of_expired_lock_is_refused,
            renew_sets_ttl_on_lock_without_one,
            renew_with_zero_margin,
            renew_margin_boundary,
            renew_keeps_fence,
            purge_removes_expired_groups_and_keeps_live,
            purge_removes_no_ttl_lock_of_expired_group,
            purge_spares_lock_created_after_purge_began,
            purge_spares_lock_created_in_its_millisecond,
            purge_groups_by_lock_id_newest_first,
            purge_is_idempotent,
            purge_of_nothing_returns_empty,
            purge_frees_resources,
            renew_after_purge_is_not_found,
            renew_one_extends_live_exclusive_lock,
            renew_one_changes_only_its_shared_lock,
            renew_one_sets_ttl_on_lock_without_one,
            renew_one_within_margin_changes_nothing,
            renew_one_margin_boundary,
            renew_one_of_expired_lock_is_refused,
            renew_one_of_taken_over_lock_is_not_found,
            renew_one_after_purge_is_not_found,
            renew_one_of_released_lock_is_not_found,
            renew_one_leaves_rest_of_group,
            renew_one_ignores_rest_of_group_within_margin,
            renew_one_rejects_zero_ttl,
            renew_one_twice_in_one_instant_within_margin,
            unlock_one_releases_live_lock,
            unlock_one_of_released_lock_is_none,
            unlock_one_of_taken_over_lock_is_none,
            unlock_one_after_purge_is_none,
            unlock_one_leaves_rest_of_group,
            unlock_one_is_idempotent,
            unlock_one_changes_only_its_shared_lock,
            unlock_one_of_expired_lock_returns_it,
            renew_many_renews_each_lock_with_its_ttl,
            renew_many_decides_each_lock_on_its_own,
            renew_many_leaves_unnamed_lock_of_shared_resource,
            renew_many_of_nothing_is_empty,
            renew_many_names_one_lock_twice,
            fences_increase_per_resource,
            fences_increase_across_unlock,
            fences_increase_across_purge,
            fences_are_per_resource_and_reported_by_status,
            create_indexes_is_idempotent,
            details_round_trip,
            concurrent_xlock_has_one_winner,
            concurrent_slock_respects_limit,
            concurrent_purgers_report_each_lock_once,
        );
    };
    (@cases $backend:ty; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let cx = conformance::Ctx::<$backend>::new().await;
                conformance::cases::$case(&cx).await;
                cx.teardown().await;
            }
        )*
    };
}
