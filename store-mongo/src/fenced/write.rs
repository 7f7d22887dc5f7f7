//! The writes a [`FencedCollection`] returns: each runs when awaited, outside any session
//! unless `.session(&mut session)` names one (as the `mongodb` crate's own actions do).
//!
//! One write type per result type, each a thin wrapper over the collection's single
//! implementation of that write, which takes the session as an option.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;

use mongodb::ClientSession;
use mongodb::bson::Document;
use mongodb::options::UpdateModifications;
use mongodb::results::{DeleteResult, InsertOneResult, UpdateResult};
use serde::Serialize;

use lockwright_engine::Error;

use super::FencedCollection;

/// The future a fenced write runs as.
type Running<'a, R> = Pin<Box<dyn Future<Output = Result<R, Error>> + Send + 'a>>;

/// Adds `session`, `Debug` and the `IntoFuture` plumbing to a write type whose `run`
/// consumes it.
macro_rules! fenced_write {
    ($write:ident, $result:ty $(, $bound:path)?) => {
        impl<'a, T> $write<'a, T> {
            /// Runs the write in `session`, and so in its transaction if one is started.
            pub fn session(mut self, session: &'a mut ClientSession) -> Self {
                self.session = Some(session);
                self
            }
        }

        impl<T> fmt::Debug for $write<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($write))
                    .field("fenced", self.fenced)
                    .field("in_session", &self.session.is_some())
                    .finish_non_exhaustive()
            }
        }

        impl<'a, T $(: $bound + Sync)?> IntoFuture for $write<'a, T> {
            type Output = Result<$result, Error>;
            type IntoFuture = Running<'a, $result>;

            fn into_future(self) -> Self::IntoFuture {
                Box::pin(self.run())
            }
        }
    };
}

/// An update of one document, or an upsert, through a [`FencedCollection`]: made by
/// [`FencedCollection::update_one`] or [`FencedCollection::upsert_one`], run by `.await`.
#[must_use = "a fenced write does nothing until it is awaited"]
pub struct FencedUpdate<'a, T> {
    fenced: &'a FencedCollection<T>,
    filter: Document,
    update: UpdateModifications,
    upsert: bool,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T> FencedUpdate<'a, T> {
    pub(super) fn new(
        fenced: &'a FencedCollection<T>,
        filter: Document,
        update: UpdateModifications,
        upsert: bool,
    ) -> Self {
        FencedUpdate {
            fenced,
            filter,
            update,
            upsert,
            session: None,
        }
    }

    async fn run(self) -> Result<UpdateResult, Error> {
        let FencedUpdate {
            fenced,
            filter,
            update,
            upsert,
            session,
        } = self;
        fenced.update(session, filter, update, upsert).await
    }
}

fenced_write!(FencedUpdate, UpdateResult);

/// A replacement of one document through a [`FencedCollection`]: made by
/// [`FencedCollection::replace_one`], run by `.await`.
#[must_use = "a fenced write does nothing until it is awaited"]
pub struct FencedReplace<'a, T> {
    fenced: &'a FencedCollection<T>,
    filter: Document,
    replacement: &'a T,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T> FencedReplace<'a, T> {
    pub(super) fn new(
        fenced: &'a FencedCollection<T>,
        filter: Document,
        replacement: &'a T,
    ) -> Self {
        FencedReplace {
            fenced,
            filter,
            replacement,
            session: None,
        }
    }

    async fn run(self) -> Result<UpdateResult, Error>
    where
        T: Serialize,
    {
        let FencedReplace {
            fenced,
            filter,
            replacement,
            session,
        } = self;
        fenced.replace(session, filter, replacement).await
    }
}

fenced_write!(FencedReplace, UpdateResult, Serialize);

/// An insert of one document through a [`FencedCollection`]: made by
/// [`FencedCollection::insert_one`], run by `.await`.
#[must_use = "a fenced write does nothing until it is awaited"]
pub struct FencedInsert<'a, T> {
    fenced: &'a FencedCollection<T>,
    document: &'a T,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T> FencedInsert<'a, T> {
    pub(super) fn new(fenced: &'a FencedCollection<T>, document: &'a T) -> Self {
        FencedInsert {
            fenced,
            document,
            session: None,
        }
    }

    async fn run(self) -> Result<InsertOneResult, Error>
    where
        T: Serialize,
    {
        let FencedInsert {
            fenced,
            document,
            session,
        } = self;
        fenced.insert(session, document).await
    }
}

fenced_write!(FencedInsert, InsertOneResult, Serialize);

/// A delete of one document through a [`FencedCollection`]: made by
/// [`FencedCollection::delete_one`], run by `.await`.
#[must_use = "a fenced write does nothing until it is awaited"]
pub struct FencedDelete<'a, T> {
    fenced: &'a FencedCollection<T>,
    filter: Document,
    session: Option<&'a mut ClientSession>,
}

impl<'a, T> FencedDelete<'a, T> {
    pub(super) fn new(fenced: &'a FencedCollection<T>, filter: Document) -> Self {
        FencedDelete {
            fenced,
            filter,
            session: None,
        }
    }

    async fn run(self) -> Result<DeleteResult, Error> {
        let FencedDelete {
            fenced,
            filter,
            session,
        } = self;
        fenced.delete(session, filter).await
    }
}

fenced_write!(FencedDelete, DeleteResult);
