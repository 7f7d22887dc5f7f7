//! What Lockwright's benches and its load harness share: the run's mode (which sizes to
//! use), criterion's filter for the measurements a bench takes itself, and nearest-rank
//! quantiles.
//!
//! The benches are the `[[bench]]` targets of this package (`engine.rs`, `store_mem.rs`,
//! `store_mongo/`); the load harness of waiting Lockers is `harness/waiting` (the
//! `lockwright-harness` package's example `waiting`). benches/README.md says what each
//! measures and how to run it, and docs/performance.md holds the targets and one run's
//! results.

mod filter;

pub use filter::Selected;

/// The environment variable that selects the quick configuration (`scripts/bench --quick`).
pub const QUICK_ENV: &str = "LOCKWRIGHT_BENCH_QUICK";

/// How a bench binary was started, which decides the data sizes it uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// `cargo test --benches` (criterion runs each benchmark once): the smallest sizes, so
    /// the smoke run stays fast even in a debug build.
    Test,
    /// `scripts/bench --quick`: short criterion settings and smaller data sets.
    Quick,
    /// `scripts/bench` or `cargo bench`: every size the targets are stated for.
    Full,
}

impl RunMode {
    /// The mode of this process, decided from its arguments the way criterion decides
    /// between test and benchmark mode (`cargo bench` passes `--bench`; `cargo test
    /// --benches` does not), and from [`QUICK_ENV`].
    #[must_use]
    pub fn current() -> Self {
        let args: Vec<String> = std::env::args().collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        if !has("--bench") || has("--test") || has("--list") {
            RunMode::Test
        } else if std::env::var(QUICK_ENV).is_ok_and(|v| v == "1") {
            RunMode::Quick
        } else {
            RunMode::Full
        }
    }

    /// Picks the value for this mode.
    #[must_use]
    pub fn pick<T>(self, test: T, quick: T, full: T) -> T {
        match self {
            RunMode::Test => test,
            RunMode::Quick => quick,
            RunMode::Full => full,
        }
    }

    /// Prints what a measurement the bench took itself (not criterion) saw, as
    /// `id: line`; in test mode framed as criterion frames a benchmark it ran once.
    pub fn report(self, id: &str, line: &str) {
        if self == RunMode::Test {
            println!("Testing {id}");
        }
        println!("{id}: {line}");
        if self == RunMode::Test {
            println!("Success");
        }
    }
}

/// The `q` quantile of `samples` by nearest rank (the smallest sample with at least `q` of
/// them at or below it); 0 when there are none.
#[must_use]
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The largest of `samples`; 0 when there are none.
#[must_use]
pub fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().reduce(f64::max).unwrap_or(0.0)
}

/// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2); 1 when all are equal, 1/n when
/// one has everything, 0 when all are 0.
#[must_use]
pub fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(max(&[-0.5, 2.0, 1.0]), 2.0);
        assert_eq!(max(&[]), 0.0);
    }

    #[test]
    fn jain_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[0, 0]), 0.0);
    }
}
