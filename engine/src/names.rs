//! Validated names: the resource being locked and the lock id that owns a group of locks.

use std::fmt;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::invalid::InvalidArgument;

/// The longest resource name accepted, in UTF-8 bytes.
pub const MAX_RESOURCE_LEN: usize = 512;
/// The longest lock id accepted, in UTF-8 bytes.
pub const MAX_LOCK_ID_LEN: usize = 256;
/// The longest owner, host or comment accepted, in UTF-8 bytes.
pub const MAX_DETAIL_LEN: usize = 1024;

pub(crate) fn check_text(
    field: &'static str,
    value: &str,
    max: usize,
) -> Result<(), InvalidArgument> {
    if value.is_empty() {
        return Err(InvalidArgument::new(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(InvalidArgument::new(
            field,
            format!("must be at most {max} bytes, got {}", value.len()),
        ));
    }
    Ok(())
}

macro_rules! validated_name {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(SmolStr);

        impl $name {
            /// Validates the name.
            ///
            /// # Errors
            #[doc = concat!("`InvalidArgument` naming `", $field, "` when empty or too long.")]
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidArgument> {
                let value = value.into();
                check_text($field, &value, $max)?;
                Ok($name(SmolStr::from(value)))
            }

            /// The name exactly as a store holds it, without the bounds check: another
            /// client sharing the store (the Go library accepts empty names and names of
            /// any length) may have written it. For stores decoding what they read; names
            /// from callers go through [`Self::new`].
            #[must_use]
            pub fn stored(value: &str) -> Self {
                $name(SmolStr::from(value))
            }

            /// The name as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidArgument;
            fn try_from(value: String) -> Result<Self, InvalidArgument> {
                $name::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidArgument;
            fn try_from(value: &str) -> Result<Self, InvalidArgument> {
                $name::new(value)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0.into()
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

    };
}

validated_name!(
    /// The name of the thing being locked: non-empty UTF-8, at most [`MAX_RESOURCE_LEN`] bytes.
    Resource,
    "resource",
    MAX_RESOURCE_LEN
);

validated_name!(
    /// The caller's secret handle for a group of locks: non-empty, at most
    /// [`MAX_LOCK_ID_LEN`] bytes.
    ///
    /// Knowing a resource name is never enough to unlock or renew: the lock id is the
    /// capability, so generate it randomly and do not log it. [`LockId::from_random`] turns
    /// 128 random bits into one.
    LockId,
    "lock_id",
    MAX_LOCK_ID_LEN
);

/// The name with its control characters escaped (a newline shows as `\n`), so a name
/// cannot forge a line of a log or a report; [`Resource::as_str`] is the exact value.
impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Escaped(&self.0), f)
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Resource({:?})", self.0)
    }
}

/// Redacted: a lock id is a secret, and `Debug` output ends up in logs and in the report of
/// a `main` that returns an error. Shows the short [`LockId::tag`] instead; the value
/// itself is [`LockId::as_str`].
impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockId({}, redacted)", self.tag())
    }
}

/// Redacted as `Debug` is: shows the short [`LockId::tag`], never the value.
impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.tag())
    }
}

impl LockId {
    /// A short tag that stands for the lock id in logs and reports, such as `#3f9a`: 16
    /// bits of a fixed hash, enough to tell the lock ids of one report apart and far too
    /// few to recover or guess the value.
    #[must_use]
    pub fn tag(&self) -> String {
        format!("#{:04x}", self.hash() >> 48)
    }

    /// A longer tag that names a fair waiter's place to its store's hints, such as
    /// `#3f9a0c1e22b7d465`: 64 bits of the same hash. A hint that carries a grant names the
    /// place it was handed to by it, so two places of one store must not share it (16 bits
    /// would, once in some 65,000 pairs); 64 bits of a hash of 128 random bits still leave
    /// the value beyond guessing. Stores write it only where the ticket itself is stored.
    #[must_use]
    pub fn place_tag(&self) -> String {
        format!("#{:016x}", self.hash())
    }

    fn hash(&self) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0x6c6f_636b_7772_6967).hash_one(self.0.as_str())
    }

    /// A lock id from 128 bits the caller drew from a cryptographically secure generator,
    /// written as 32 lowercase hex digits.
    #[must_use]
    pub fn from_random(bits: u128) -> Self {
        LockId(smol_str::format_smolstr!("{bits:032x}"))
    }
}

/// Shows a name with its control characters escaped (a newline as `\n`), so a name read
/// from the store or given by a caller cannot forge a line of a log or a report.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for c in self.0.chars() {
            if c.is_control() {
                for e in c.escape_default() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_in_bytes() {
        assert!(Resource::new("").is_err());
        assert!(Resource::new("é".repeat(256)).is_ok()); // 512 bytes
        assert!(Resource::new(format!("{}x", "é".repeat(256))).is_err());
        assert!(LockId::new("x".repeat(256)).is_ok());
        let err = LockId::new("x".repeat(257)).unwrap_err();
        assert!(err.to_string().contains("lock_id"), "{err}");
        assert_eq!(LockId::stored("").as_str(), "");
        assert_eq!(Resource::stored(&"r".repeat(600)).as_str().len(), 600);
    }

    #[test]
    fn serde_validates() {
        assert!(serde_json::from_str::<Resource>("\"\"").is_err());
        let r: Resource = serde_json::from_str("\"a\"").unwrap();
        assert_eq!(r.as_str(), "a");
        assert_eq!(LockId::from_random(0xab).as_str().len(), 32);
    }

    #[test]
    fn resources_show_control_characters_escaped() {
        let forged = Resource::new("job\nINFO granted to mallory").unwrap();
        assert_eq!(forged.to_string(), "job\\nINFO granted to mallory");
        assert_eq!(forged.as_str(), "job\nINFO granted to mallory");
        assert_eq!(Resource::new("tenant-é").unwrap().to_string(), "tenant-é");
    }

    #[test]
    fn debug_never_shows_a_lock_id() {
        let secret = LockId::from_random(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let shown = format!("{secret:?} {:?}", vec![secret.clone()]);
        assert!(!shown.contains(secret.as_str()), "{shown}");
        assert!(!shown.contains("0123"), "no part of it either: {shown}");
        assert!(shown.starts_with("LockId(#"), "{shown}");
        assert_eq!(secret.to_string(), secret.tag());
        assert_eq!(secret.tag().len(), 5);
        let other = LockId::new("another").unwrap();
        assert_ne!(
            format!("{secret:?}"),
            format!("{other:?}"),
            "tags tell them apart"
        );
    }
}
