//! The seeds of the randomized harnesses (differential, linearizability, predicates): fixed
//! unless asked otherwise, so that the kill matrix comes out the same on every run.
//!
//! `LOCKWRIGHT_RANDOM_SEED=1` draws fresh seeds (one per process); a harness's own variable
//! (`PROPTEST_RNG_SEED`, `LINEARIZABILITY_BASE_SEED`, ...) reruns the seed a run printed.

use std::sync::OnceLock;

/// Whether fresh seeds were asked for: `LOCKWRIGHT_RANDOM_SEED` is set, and neither empty
/// nor `0`.
#[must_use]
pub fn random_asked() -> bool {
    std::env::var("LOCKWRIGHT_RANDOM_SEED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The value of the environment variable `var`, read by `parse`, when it is set and not
/// empty.
///
/// # Panics
/// When `parse` cannot read it (the message names `var`).
#[must_use]
pub fn from_env(var: &str, parse: fn(&str) -> Option<u64>) -> Option<u64> {
    let s = std::env::var(var).ok().filter(|s| !s.is_empty())?;
    Some(parse(&s).unwrap_or_else(|| panic!("{var}={s:?} is not a seed")))
}

/// The seed a harness runs: `var`'s (read by `parse`) when set; else, when fresh seeds were
/// asked for, one drawn once per process (the same for every call); else `fixed`.
///
/// # Panics
/// As [`from_env`].
#[must_use]
pub fn chosen(var: &str, fixed: u64, parse: fn(&str) -> Option<u64>) -> u64 {
    static FRESH: OnceLock<u64> = OnceLock::new();
    from_env(var, parse).unwrap_or_else(|| {
        if random_asked() {
            *FRESH.get_or_init(rand::random)
        } else {
            fixed
        }
    })
}

/// A decimal `u64`.
#[must_use]
pub fn decimal(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// A hexadecimal `u64`, with or without `0x`.
#[must_use]
pub fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}
