//! The operations run on each input, and their outcomes in comparable form.

use super::*;
use lockwright_engine::Access;

#[derive(Clone)]
pub(crate) enum Op {
    Xlock(LockRequest),
    Slock(LockRequest, Option<SharedLimit>),
    Unlock(LockId),
    Renew(LockId),
    Status(Filter),
    Purge,
}

pub(crate) fn short(s: &str) -> String {
    if s.len() <= 40 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(16).collect();
        format!("{head:?}..({} bytes)", s.len())
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Xlock(r) => write!(f, "xlock({})", short(r.resource.as_str())),
            Op::Slock(r, l) => write!(
                f,
                "slock({}, limit {:?})",
                short(r.resource.as_str()),
                l.map(SharedLimit::get)
            ),
            Op::Unlock(id) => write!(f, "unlock({})", short(id.as_str())),
            Op::Renew(id) => write!(f, "renew({})", short(id.as_str())),
            Op::Status(filter) => match (&filter.resource, &filter.lock_id) {
                (Some(r), _) => write!(f, "status(resource {})", short(r)),
                (None, Some(l)) => write!(f, "status(lock id {})", short(l)),
                (None, None) => write!(f, "status(all)"),
            },
            Op::Purge => write!(f, "purge"),
        }
    }
}

/// What an operation returned, comparable.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    Locks(Vec<LockStatus>),
    AlreadyLocked(String),
    LockNotFound,
    NotRenewable(Vec<LockStatus>),
    Malformed(MalformedDocument),
    Skipped(Vec<LockStatus>, Vec<MalformedDocument>),
    Invalid(&'static str),
    /// Anything else: `Backend`, `Misconfigured`, a panic.
    Other(String),
}

impl Outcome {
    /// An error that is not `Skipped`: the operation must have written nothing.
    pub(crate) fn wrote_nothing(&self) -> bool {
        !matches!(self, Outcome::Locks(_) | Outcome::Skipped(..))
    }
}

pub(crate) fn outcome(r: Result<Vec<LockStatus>, Error>) -> Outcome {
    match r {
        Ok(v) => Outcome::Locks(v),
        Err(Error::AlreadyLocked { resource, .. }) => Outcome::AlreadyLocked(resource.to_string()),
        Err(Error::LockNotFound) => Outcome::LockNotFound,
        Err(Error::NotRenewable { locks }) => Outcome::NotRenewable(locks),
        Err(Error::Malformed {
            resource,
            field,
            reason,
        }) => Outcome::Malformed(MalformedDocument {
            resource,
            field,
            reason,
        }),
        Err(Error::Skipped { done, skipped }) => Outcome::Skipped(done, skipped),
        Err(Error::InvalidArgument { field, .. }) => Outcome::Invalid(field),
        Err(other) => Outcome::Other(format!(
            "{other} ({:?})",
            std::error::Error::source(&other).map(ToString::to_string)
        )),
    }
}

/// An outcome in a few words, for the trace (`HOSTILE_TRACE=1`).
pub(crate) fn short_outcome(o: &Outcome) -> String {
    let locks = |v: &[LockStatus]| {
        let names: Vec<String> = v
            .iter()
            .take(3)
            .map(|l| {
                format!(
                    "{}/{}",
                    short(l.resource.as_str()),
                    short(l.lock_id.as_str())
                )
            })
            .collect();
        format!("{} lock(s) {}", v.len(), names.join(" "))
    };
    match o {
        Outcome::Locks(v) => format!("Ok({})", locks(v)),
        Outcome::NotRenewable(v) => format!("NotRenewable({})", locks(v)),
        Outcome::Skipped(done, skipped) => format!(
            "Skipped(done {}; {})",
            locks(done),
            skipped
                .iter()
                .map(|m| format!("{} at {}", short(&m.resource), m.field))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Outcome::Malformed(m) => format!("Malformed({} at {})", short(&m.resource), m.field),
        Outcome::Other(e) => format!("Other({})", e.chars().take(300).collect::<String>()),
        other => format!("{other:?}"),
    }
}

pub(crate) fn outcome_one(r: Result<LockStatus, Error>) -> Outcome {
    outcome(r.map(|l| vec![l]))
}

pub(crate) fn renew_ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

pub(crate) const RENEW_MARGIN: Duration = Duration::from_secs(1);

pub(crate) async fn perform(store: &MongoStore, op: &Op) -> Outcome {
    let run = async {
        match op {
            Op::Xlock(r) => outcome_one(store.lock(r).await),
            Op::Slock(r, l) => {
                outcome_one(store.lock(&r.clone().with_access(Access::Shared(*l))).await)
            }
            Op::Unlock(id) => outcome(store.unlock(id).await),
            Op::Renew(id) => outcome(store.renew(id, renew_ttl(), RENEW_MARGIN).await),
            Op::Status(f) => outcome(store.status(f).await),
            Op::Purge => outcome(store.purge().await),
        }
    };
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(o) => o,
        Err(panic) => Outcome::Other(format!(
            "panic: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default()
        )),
    }
}

/// The two values side by side, cut around their first difference when long.
pub(crate) fn contrast(expected: &impl Debug, got: &impl Debug) -> String {
    let (e, g) = (format!("{expected:?}"), format!("{got:?}"));
    if e.len() + g.len() < 3_000 {
        return format!("expected {e}\n      got {g}");
    }
    let at = e
        .bytes()
        .zip(g.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(e.len().min(g.len()));
    let window = |s: &str| {
        let from = (0..=at.saturating_sub(300))
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        let to = (at + 600).min(s.len());
        let to = (to..=s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(s.len());
        format!("({} chars) ...{}...", s.len(), &s[from..to])
    };
    format!(
        "first difference at char {at}: expected {}\n      got {}",
        window(&e),
        window(&g)
    )
}
