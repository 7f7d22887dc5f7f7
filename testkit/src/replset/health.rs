//! The set's health: what each member says it is, and the waits for one writable primary
//! with every other member SECONDARY.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use mongodb::bson::{Document, doc};
use mongodb::error::ErrorKind;

use super::member::Member;
use super::{Error, ReplSet, SET_NAME};

/// How long one `hello` to a member may take before the member counts as unreachable (a
/// paused member never answers).
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// What a member says it is, by its own `hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberState {
    /// A writable primary.
    Primary,
    /// A secondary.
    Secondary,
    /// It answers, but is neither (starting up, recovering, not in the set yet...).
    Other(String),
    /// It does not answer (down, paused, or not listening yet).
    Unreachable(String),
}

impl ReplSet {
    /// What member `member` says it is.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when there is no such member.
    pub async fn member_state(&self, member: usize) -> Result<MemberState, Error> {
        Ok(state(self.member(member)?).await)
    }

    /// Waits until the set is healthy (one writable primary, every other member SECONDARY,
    /// by each one's `hello` and by the primary's `replSetGetStatus`); the primary.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when it is not within the set's timeout.
    pub async fn primary(&self) -> Result<usize, Error> {
        self.wait_healthy_for("primary").await
    }

    /// Waits until the set is healthy: see [`ReplSet::primary`].
    ///
    /// # Errors
    ///
    /// As [`ReplSet::primary`].
    pub async fn wait_healthy(&self) -> Result<usize, Error> {
        self.wait_healthy_for("a healthy set").await
    }

    pub(super) async fn wait_healthy_for(&self, what: &str) -> Result<usize, Error> {
        let t = Instant::now();
        loop {
            let last = match self.healthy().await {
                Ok(p) => return Ok(p),
                Err(last) => last,
            };
            if t.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    what: format!("{what}: a healthy set"),
                    secs: t.elapsed().as_secs_f64(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The primary when the set is healthy, else what is wrong.
    async fn healthy(&self) -> Result<usize, String> {
        let states = join_all(self.members.iter().map(state)).await;
        let primaries: Vec<usize> = (0..states.len())
            .filter(|i| states[*i] == MemberState::Primary)
            .collect();
        let all_up = states
            .iter()
            .all(|s| matches!(s, MemberState::Primary | MemberState::Secondary));
        let [p] = primaries[..] else {
            return Err(describe(&states));
        };
        if !all_up {
            return Err(describe(&states));
        }
        let status = tokio::time::timeout(
            HELLO_TIMEOUT,
            self.members[p]
                .client
                .database("admin")
                .run_command(doc! { "replSetGetStatus": 1 }),
        )
        .await
        .map_err(|_| format!("replSetGetStatus on member {p}: no answer"))?
        .map_err(|e| format!("replSetGetStatus on member {p}: {e}"))?;
        let listed = status.get_array("members").map_err(|e| e.to_string())?;
        let mut seen: Vec<&str> = Vec::new();
        let mut all_healthy = true;
        for entry in listed {
            let Some(d) = entry.as_document() else {
                return Err("replSetGetStatus: a member is not a document".into());
            };
            seen.push(d.get_str("stateStr").unwrap_or("?"));
            all_healthy &= number(d, "health") == Some(1.0);
        }
        seen.sort_unstable();
        let mut want = vec!["PRIMARY"];
        want.extend(std::iter::repeat_n("SECONDARY", self.members.len() - 1));
        if seen != want || !all_healthy {
            return Err(format!("member {p} (primary) sees {seen:?}"));
        }
        Ok(p)
    }
}

/// What member `m` says it is.
pub(super) async fn state(m: &Member) -> MemberState {
    let hello = tokio::time::timeout(
        HELLO_TIMEOUT,
        m.client.database("admin").run_command(doc! { "hello": 1 }),
    )
    .await;
    let h = match hello {
        Err(_) => return MemberState::Unreachable("no answer".into()),
        Ok(Err(e)) => return MemberState::Unreachable(short(&e)),
        Ok(Ok(h)) => h,
    };
    if h.get_str("setName") != Ok(SET_NAME) {
        MemberState::Other(format!("not in {SET_NAME} yet"))
    } else if h.get_bool("isWritablePrimary") == Ok(true) {
        MemberState::Primary
    } else if h.get_bool("secondary") == Ok(true) {
        MemberState::Secondary
    } else {
        MemberState::Other("neither primary nor secondary".into())
    }
}

fn short(e: &mongodb::error::Error) -> String {
    match *e.kind {
        ErrorKind::ServerSelection { .. } => "down".into(),
        _ => e.to_string(),
    }
}

fn describe(states: &[MemberState]) -> String {
    let parts: Vec<String> = states
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            MemberState::Primary => format!("{i}: PRIMARY"),
            MemberState::Secondary => format!("{i}: SECONDARY"),
            MemberState::Other(w) | MemberState::Unreachable(w) => format!("{i}: {w}"),
        })
        .collect();
    format!("members say {}", parts.join(", "))
}

/// A numeric field as f64, whatever its BSON number type.
fn number(d: &Document, key: &str) -> Option<f64> {
    match d.get(key)? {
        mongodb::bson::Bson::Double(x) => Some(*x),
        mongodb::bson::Bson::Int32(x) => Some(f64::from(*x)),
        #[allow(clippy::cast_precision_loss)]
        mongodb::bson::Bson::Int64(x) => Some(*x as f64),
        _ => None,
    }
}
