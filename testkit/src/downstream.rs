//! A fenced downstream store: what fencing tokens protect.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// A downstream system that accepts a write only with a fence at least as high as every
/// fence it accepted before for the same key (the first write to a key is accepted).
///
/// [`FencedStore::unchecked`] builds one that accepts every write but still tells which
/// ones were stale, to show what fencing prevents.
#[derive(Debug)]
pub struct FencedStore<K> {
    /// The highest fence accepted, per key.
    highest: Mutex<HashMap<K, u64>>,
    /// Whether a write with a lower fence is rejected.
    checked: bool,
}

/// What a [`FencedStore`] did with a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted: the fence was at least as high as any accepted before for the key.
    Accepted,
    /// Accepted although stale: lower than `highest`, accepted before for the key (only by
    /// an [unchecked](FencedStore::unchecked) store).
    AcceptedStale {
        /// The highest fence accepted before.
        highest: u64,
    },
    /// Rejected as stale: lower than `highest`, accepted before for the key.
    Rejected {
        /// The highest fence accepted before.
        highest: u64,
    },
}

impl<K> Default for FencedStore<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> FencedStore<K> {
    /// A store that rejects stale fences.
    #[must_use]
    pub fn new() -> Self {
        FencedStore {
            highest: Mutex::new(HashMap::new()),
            checked: true,
        }
    }

    /// A store that accepts every write, stale or not (fencing switched off), and says which
    /// were stale.
    #[must_use]
    pub fn unchecked() -> Self {
        FencedStore {
            checked: false,
            ..Self::new()
        }
    }
}

impl<K: Hash + Eq> FencedStore<K> {
    /// Writes to `key` with `fence`: accepted when `fence` is at least the highest fence
    /// accepted for `key` so far (or when the store is unchecked), which it then becomes.
    pub fn write(&self, key: K, fence: u64) -> Verdict {
        let mut highest = self
            .highest
            .lock()
            .expect("no writer panics while holding this mutex");
        let seen = highest.entry(key).or_insert(0);
        let before = *seen;
        if fence >= before {
            *seen = fence;
            Verdict::Accepted
        } else if self.checked {
            Verdict::Rejected { highest: before }
        } else {
            Verdict::AcceptedStale { highest: before }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_only_lower_fences_per_key() {
        let store = FencedStore::new();
        assert_eq!(store.write("a", 3), Verdict::Accepted);
        assert_eq!(store.write("a", 3), Verdict::Accepted);
        assert_eq!(store.write("b", 1), Verdict::Accepted);
        assert_eq!(store.write("a", 2), Verdict::Rejected { highest: 3 });
        assert_eq!(store.write("a", 4), Verdict::Accepted);
    }

    #[test]
    fn unchecked_accepts_stale_and_says_so() {
        let store = FencedStore::unchecked();
        assert_eq!(store.write(0, 5), Verdict::Accepted);
        assert_eq!(store.write(0, 2), Verdict::AcceptedStale { highest: 5 });
        assert_eq!(store.write(0, 4), Verdict::AcceptedStale { highest: 5 });
        assert_eq!(store.write(0, 6), Verdict::Accepted);
    }
}
