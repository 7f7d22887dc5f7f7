//! Criterion's benchmark filter, for the measurements the bench takes itself.

use regex::Regex;

/// Criterion's benchmark filter, read from the arguments as criterion reads them (the first
/// positional argument; a regex unless `--exact`), for the measurements criterion does not
/// run itself.
#[derive(Debug)]
pub enum Selected {
    /// No filter: everything runs.
    All,
    /// `--list` or `--ignored`: nothing runs.
    Nothing,
    /// `--exact`: the id given.
    Exact(String),
    /// Ids the regex matches anywhere.
    Matching(Regex),
}

impl Selected {
    /// The filter of this process's arguments.
    ///
    /// # Panics
    /// When the filter is not a regex.
    #[must_use]
    pub fn from_args() -> Self {
        // Criterion's options that take a value.
        const WITH_VALUE: [&str; 19] = [
            "-c",
            "--color",
            "-s",
            "--save-baseline",
            "-b",
            "--baseline",
            "--baseline-lenient",
            "--format",
            "--profile-time",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--output-format",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        if has("--list") || has("--ignored") {
            return Selected::Nothing;
        }
        let mut filter = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if WITH_VALUE.contains(&arg.as_str()) {
                rest.next();
            } else if !arg.starts_with('-') {
                filter = Some(arg.clone());
                break;
            }
        }
        match filter {
            None => Selected::All,
            Some(f) if has("--exact") => Selected::Exact(f),
            Some(f) => Selected::Matching(
                Regex::new(&f).unwrap_or_else(|e| panic!("filter {f:?} is not a regex: {e}")),
            ),
        }
    }

    /// Whether a measurement with this id runs.
    #[must_use]
    pub fn selects(&self, id: &str) -> bool {
        match self {
            Selected::All => true,
            Selected::Nothing => false,
            Selected::Exact(exact) => id == exact,
            Selected::Matching(re) => re.is_match(id),
        }
    }
}
