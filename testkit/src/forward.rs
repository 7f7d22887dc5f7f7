//! A store that wraps another and changes only some of its calls: [`Forward`] and
//! [`forward_lock_store!`](crate::forward_lock_store).

use std::future::Future;
use std::time::Duration;

use lockwright_engine::{
    LockId, LockRequest, LockStatus, LockStore, Notices, Query, Reading, Release, Released,
    Renewal, Resource, Result, Ttl,
};

/// A wrapper around the store [`Forward::inner`]: every required method of [`LockStore`]
/// is here too, and by default passes the call on to the inner store unchanged (notices
/// included), so a test store that breaks, delays or counts one or two calls writes only
/// those. Then one
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

    /// [`LockStore::release`].
    fn release(&self, what: Release<'_>) -> impl Future<Output = Result<Released>> + Send {
        self.inner().release(what)
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

    /// [`LockStore::renew_each`].
    fn renew_each(
        &self,
        locks: &[Renewal],
        margin: Duration,
    ) -> impl Future<Output = Result<Vec<Result<LockStatus>>>> + Send {
        self.inner().renew_each(locks, margin)
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

    /// [`LockStore::read`].
    fn read(&self, query: Query<'_>) -> impl Future<Output = Result<Reading>> + Send {
        self.inner().read(query)
    }

    /// [`LockStore::purge`].
    fn purge(&self) -> impl Future<Output = Result<Vec<LockStatus>>> + Send {
        self.inner().purge()
    }

    /// [`LockStore::notices`]: the inner store's.
    fn notices(&self) -> Option<&dyn Notices> {
        self.inner().notices()
    }
}

/// Implements [`LockStore`](lockwright_engine::LockStore) for a type that implements
/// [`Forward`], each of its eight required methods calling the [`Forward`] method of the
/// same name (the provided ones go through those): `forward_lock_store!(TheStore);`, or
/// for a generic wrapper `forward_lock_store!(impl<S: LockStore> TheStore<S>);`.
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

            fn release(
                &self,
                what: $crate::__forward::Release<'_>,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::Released>,
            > + Send {
                $crate::Forward::release(self, what)
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

            fn renew_each(
                &self,
                locks: &[$crate::__forward::Renewal],
                margin: ::std::time::Duration,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<
                    ::std::vec::Vec<$crate::__forward::Result<$crate::__forward::LockStatus>>,
                >,
            > + Send {
                $crate::Forward::renew_each(self, locks, margin)
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

            fn read(
                &self,
                query: $crate::__forward::Query<'_>,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<$crate::__forward::Reading>,
            > + Send {
                $crate::Forward::read(self, query)
            }

            fn purge(
                &self,
            ) -> impl ::std::future::Future<
                Output = $crate::__forward::Result<::std::vec::Vec<$crate::__forward::LockStatus>>,
            > + Send {
                $crate::Forward::purge(self)
            }

            fn notices(&self) -> ::std::option::Option<&dyn $crate::__forward::Notices> {
                $crate::Forward::notices(self)
            }
        }
    };
}

/// The engine's names that [`forward_lock_store!`](crate::forward_lock_store) writes, for
/// crates that reach the engine only through the facade.
#[doc(hidden)]
pub mod __forward {
    pub use lockwright_engine::{
        LockId, LockRequest, LockStatus, LockStore, Notices, Query, Reading, Release, Released,
        Renewal, Resource, Result, Ttl,
    };
}
