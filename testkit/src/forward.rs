//! A store that wraps another and changes only some of its calls: [`Forward`] and
//! [`forward_lock_store!`](crate::forward_lock_store).

use std::future::Future;
use std::time::Duration;

use lockwright_engine::election::LeaderStream;
use lockwright_engine::{
    Filter, HintStream, LockId, LockRequest, LockStatus, LockStore, Renewal, Resource, Result,
    Summary, Ttl, Waiter,
};

/// A wrapper around the store [`Forward::inner`]: every method of [`LockStore`] is here too,
/// and by default passes the call on to the inner store unchanged (hints included), so a
/// test store that breaks, delays or counts one or two calls writes only those. Then one
/// line, [`forward_lock_store!`](crate::forward_lock_store), makes it a [`LockStore`] that
/// calls these methods (a blanket `impl<T: Forward> LockStore for T` cannot be written
/// outside the engine, which owns the trait). Name the trait by its path rather than
/// importing it where the wrapper is called: with both traits in scope, a call such as
/// `store.status(..)` on the wrapper is ambiguous.
///
/// ```
/// use lockwright_engine::{LockRequest, LockStatus, LockStore, Result};
///
/// /// A store whose grants take a millisecond longer.
/// struct Slow<S>(S);
///
/// impl<S: LockStore> lockwright_testkit::Forward for Slow<S> {
///     type Inner = S;
///
///     fn inner(&self) -> &S {
///         &self.0
///     }
///
///     async fn lock(&self, request: &LockRequest) -> Result<LockStatus> {
///         tokio::time::sleep(std::time::Duration::from_millis(1)).await;
///         self.0.lock(request).await
///     }
/// }
///
/// lockwright_testkit::forward_lock_store!(impl<S: LockStore> Slow<S>);
/// ```
pub trait Forward: Send + Sync + 'static {
    /// The wrapped store.
    type Inner: LockStore;

    /// The wrapped store, which every call not overridden goes to.
    fn inner(&self) -> &Self::Inner;

    /// [`LockStore::lock`].
    fn lock(&self, request: &LockRequest) -> impl Future<Output = Result<LockStatus>> + Send {
        self.inner().lock(request)
    }

    /// [`LockStore::unlock`].
    fn unlock(&self, lock_id: &LockId) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        self.inner().unlock(lock_id)
    }

    /// [`LockStore::renew`].
    fn renew(
        &self,
        lock_id: &LockId,
        ttl: Ttl,
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        self.inner().renew(lock_id, ttl, margin)
    }

    /// [`LockStore::renew_one`].
    fn renew_one(
        &self,
        lock: &Renewal,
        margin: Duration,
    ) -> impl Future<Output = Result<LockStatus>> + Send {
        self.inner().renew_one(lock, margin)
    }

    /// [`LockStore::set_comment`].
    fn set_comment(
        &self,
        resource: &Resource,
        lock_id: &LockId,
        comment: Option<&str>,
    ) -> impl Future<Output = Result<LockStatus>> + Send {
        self.inner().set_comment(resource, lock_id, comment)
    }

    /// [`LockStore::renew_many`].
    fn renew_many(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<Result<LockStatus>>>> + Send {
        self.inner().renew_many(locks, margin)
    }

    /// [`LockStore::unlock_one`].
    fn unlock_one(
        &self,
        resource: &Resource,
        lock_id: &LockId,
    ) -> impl Future<Output = Result<Option<LockStatus>>> + Send {
        self.inner().unlock_one(resource, lock_id)
    }

    /// [`LockStore::leave_queue`].
    fn leave_queue(
        &self,
        resource: &Resource,
        ticket: &LockId,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.inner().leave_queue(resource, ticket)
    }

    /// [`LockStore::waiters`].
    fn waiters(&self, resource: &Resource) -> impl Future<Output = Result<Vec<Waiter>>> + Send {
        self.inner().waiters(resource)
    }

    /// [`LockStore::status`].
    fn status(&self, filter: &Filter) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        self.inner().status(filter)
    }

    /// [`LockStore::summary`].
    fn summary(&self) -> impl Future<Output = Result<Summary>> + Send {
        self.inner().summary()
    }

    /// [`LockStore::purge`].
    fn purge(&self) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        self.inner().purge()
    }

    /// [`LockStore::create_indexes`].
    fn create_indexes(&self) -> impl Future<Output = Result<()>> + Send {
        self.inner().create_indexes()
    }

    /// [`LockStore::hints`]: the inner store's.
    fn hints(&self) -> Option<HintStream> {
        self.inner().hints()
    }

    /// [`LockStore::announce_leaders`]: the inner store's.
    fn announce_leaders(&self, election: &Resource) {
        self.inner().announce_leaders(election);
    }

    /// [`LockStore::leaders`]: the inner store's.
    fn leaders(&self) -> Option<LeaderStream> {
        self.inner().leaders()
    }
}

/// Implements [`LockStore`](lockwright_engine::LockStore) for a type that implements
/// [`Forward`], every method calling the [`Forward`] method of the same name:
/// `forward_lock_store!(TheStore);`, or for a generic wrapper
/// `forward_lock_store!(impl<S: LockStore> TheStore<S>);`.
#[macro_export]
macro_rules! forward_lock_store {
    (impl<$($param:ident: $bound:path),+ $(,)?> $store:ty) => {
        $crate::forward_lock_store!(@impl [$($param: $bound),+] $store);
    };
    ($store:ty) => {
        $crate::forward_lock_store!(@impl [] $store);
    };
    (@impl [$($generics:tt)*] $store:ty) => {
        impl<$($generics)*> $crate::__forward::LockStore for $store {
            fn lock(
                &self,
                request: &$crate::__forward::LockRequest,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::LockStatus>,
            > + Send {
                $crate::Forward::lock(self, request)
            }

            fn unlock(
                &self,
                lock_id: &$crate::__forward::LockId,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::LockStatus>>,
            > + Send {
                $crate::Forward::unlock(self, lock_id)
            }

            fn renew(
                &self,
                lock_id: &$crate::__forward::LockId,
                ttl: $crate::__forward::Ttl,
                margin: ::std::time::Duration,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::LockStatus>>,
            > + Send {
                $crate::Forward::renew(self, lock_id, ttl, margin)
            }

            fn renew_one(
                &self,
                lock: &$crate::__forward::Renewal,
                margin: ::std::time::Duration,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::LockStatus>,
            > + Send {
                $crate::Forward::renew_one(self, lock, margin)
            }

            fn set_comment(
                &self,
                resource: &$crate::__forward::Resource,
                lock_id: &$crate::__forward::LockId,
                comment: ::std::option::Option<&str>,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::LockStatus>,
            > + Send {
                $crate::Forward::set_comment(self, resource, lock_id, comment)
            }

            fn renew_many(
                &self,
                locks: &[$crate::__forward::Renewal],
                margin: ::std::time::Duration,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<
                    ::std::vec::Vec<$crate::__forward::Result<$crate::__forward::LockStatus>>,
                >,
            > + Send {
                $crate::Forward::renew_many(self, locks, margin)
            }

            fn unlock_one(
                &self,
                resource: &$crate::__forward::Resource,
                lock_id: &$crate::__forward::LockId,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<
                    ::std::option::Option<$crate::__forward::LockStatus>,
                >,
            > + Send {
                $crate::Forward::unlock_one(self, resource, lock_id)
            }

            fn leave_queue(
                &self,
                resource: &$crate::__forward::Resource,
                ticket: &$crate::__forward::LockId,
            ) -> impl ::std::future::Future<Output = $crate::__forward::Result<bool>> + Send {
                $crate::Forward::leave_queue(self, resource, ticket)
            }

            fn waiters(
                &self,
                resource: &$crate::__forward::Resource,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::Waiter>>,
            > + Send {
                $crate::Forward::waiters(self, resource)
            }

            fn status(
                &self,
                filter: &$crate::__forward::Filter,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::LockStatus>>,
            > + Send {
                $crate::Forward::status(self, filter)
            }

            fn summary(
                &self,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::Summary>,
            > + Send {
                $crate::Forward::summary(self)
            }

            fn purge(
                &self,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::LockStatus>>,
            > + Send {
                $crate::Forward::purge(self)
            }

            fn create_indexes(
                &self,
            ) -> impl ::std::future::Future<Output = $crate::__forward::Result<()>> + Send {
                $crate::Forward::create_indexes(self)
            }

            fn hints(&self) -> ::std::option::Option<$crate::__forward::HintStream> {
                $crate::Forward::hints(self)
            }

            fn announce_leaders(&self, election: &$crate::__forward::Resource) {
                $crate::Forward::announce_leaders(self, election)
            }

            fn leaders(&self) -> ::std::option::Option<$crate::__forward::LeaderStream> {
                $crate::Forward::leaders(self)
            }
        }
    };
}

/// The engine's names that [`forward_lock_store!`](crate::forward_lock_store) writes, for
/// crates that reach the engine only through the facade.
#[doc(hidden)]
pub mod __forward {
    pub use lockwright_engine::election::LeaderStream;
    pub use lockwright_engine::{
        Filter, HintStream, LockId, LockRequest, LockStatus, LockStore, Renewal, Resource, Result,
        Summary, Ttl, Waiter,
    };
}
