//! A bad argument, as the value types report it: the bottom of the engine, which every
//! other module may use and which uses none of them.
//!
//! Names, times and limits are checked where they are made ([`crate::names`],
//! [`crate::time`], [`crate::access`]); they report an [`InvalidArgument`], which becomes
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument) with the same field and reason
//! wherever an operation returns an [`Error`](crate::Error) (`?` converts it).

/// An argument broke a documented bound; `field` names it and `reason` says how.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("invalid argument `{field}`: {reason}")]
pub struct InvalidArgument {
    /// The offending argument or field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidArgument {
    /// `field` is wrong because of `reason`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// The same complaint about another field (a ticket checked as a lock id, say).
    #[must_use]
    pub fn about(self, field: &'static str) -> Self {
        InvalidArgument { field, ..self }
    }
}
