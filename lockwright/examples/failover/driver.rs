//! The failover driver: at each planned instant, a `replSetStepDown` of the primary or a
//! SIGKILL of it followed by a restart of that member, alternately, through the test kit's
//! replica set fixture.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwright_testkit::replset::ReplSet;

use crate::observer::Shared;

/// How a failover was forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    StepDown,
    Kill,
}

/// One forced failover.
#[derive(Clone, Debug)]
pub(crate) struct Failover {
    pub(crate) n: usize,
    pub(crate) action: Action,
    /// The member that was primary.
    pub(crate) member: Option<usize>,
    /// When the command that forced it returned (the failover had happened by then).
    pub(crate) at: Instant,
    /// How long that command took (it first waits for a healthy set).
    pub(crate) took: Duration,
    /// After a kill: how long the restart took until the set was healthy again.
    pub(crate) restart: Option<Duration>,
    pub(crate) error: Option<String>,
}

/// Forces a failover at each instant of `plan`: step-down, kill + restart, alternately.
pub(crate) async fn failover_task(
    sh: Shared,
    set: Arc<ReplSet>,
    plan: Vec<Instant>,
    out: Arc<Mutex<Vec<Failover>>>,
) {
    for (i, when) in plan.into_iter().enumerate() {
        tokio::time::sleep_until(when.into()).await;
        let action = if i % 2 == 0 {
            Action::StepDown
        } else {
            Action::Kill
        };
        let sub = match action {
            Action::StepDown => "step-down",
            Action::Kill => "kill-primary",
        };
        let called = Instant::now();
        let result = match action {
            Action::StepDown => set.step_down().await,
            Action::Kill => set.kill_primary().await,
        };
        let at = Instant::now();
        let mut f = Failover {
            n: i + 1,
            action,
            member: None,
            at,
            took: at - called,
            restart: None,
            error: None,
        };
        match result {
            Ok(m) => f.member = Some(m),
            Err(e) => f.error = Some(format!("{sub}: {e}")),
        }
        eprintln!(
            "failover: #{} {} of member {} done at {:.1} s (the command took {:.2} s){}",
            f.n,
            sub,
            f.member.map_or("?".to_string(), |m| m.to_string()),
            sh.secs(at),
            f.took.as_secs_f64(),
            f.error
                .as_ref()
                .map_or(String::new(), |e| format!(": ERROR {e}"))
        );
        if let (Action::Kill, Some(m)) = (action, f.member) {
            let t = Instant::now();
            match set.restart(m).await {
                Ok(()) => {
                    f.restart = Some(t.elapsed());
                    eprintln!(
                        "failover: #{} member {m} restarted, set healthy at {:.1} s",
                        f.n,
                        sh.secs(Instant::now())
                    );
                }
                Err(e) => f.error = Some(format!("restart of member {m}: {e}")),
            }
        }
        out.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(f);
    }
}
