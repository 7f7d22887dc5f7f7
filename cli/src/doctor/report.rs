//! Doctor's report: one line per check as it finishes, tagged `ok`, `warn` or `FAIL`.

use crate::exit;

/// The result of one check.
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// Prints the checks as they finish; remembers whether any failed.
#[derive(Default)]
pub struct Report {
    failed: bool,
}

impl Report {
    /// Prints `text` on one line, tagged with `verdict`.
    pub fn line(&mut self, verdict: &Verdict, text: &str) {
        let tag = match verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => {
                self.failed = true;
                "FAIL"
            }
        };
        println!("{tag} {}", exit::one_line(text));
    }

    /// Whether any check failed.
    pub fn failed(&self) -> bool {
        self.failed
    }
}
