//! The failover driver: at each planned instant, a `replSetStepDown` of the primary or a
//! SIGKILL of it followed by a restart of that member, alternately, through
//! `scripts/mongod.sh`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Runs `scripts/mongod.sh ARGS`; its stdout, trimmed.
pub(crate) async fn run_script(
    script: &std::path::Path,
    args: Vec<String>,
) -> Result<String, String> {
    let script = script.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&script)
            .args(&args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "mongod.sh {} failed ({})",
                args.join(" "),
                out.status
            ))
        }
    })
    .await
    .map_err(|e| format!("the task running mongod.sh failed: {e}"))?
}

/// Forces a failover at each instant of `plan`: step-down, kill + restart, alternately.
pub(crate) async fn failover_task(
    sh: Shared,
    script: PathBuf,
    dir: String,
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
        let result = run_script(&script, vec![sub.to_string(), dir.clone()]).await;
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
        match result.and_then(|s| {
            s.parse::<usize>()
                .map_err(|e| format!("mongod.sh {sub} printed {s:?}: {e}"))
        }) {
            Ok(m) => f.member = Some(m),
            Err(e) => f.error = Some(e),
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
            match run_script(
                &script,
                vec!["restart-member".into(), dir.clone(), m.to_string()],
            )
            .await
            {
                Ok(_) => {
                    f.restart = Some(t.elapsed());
                    eprintln!(
                        "failover: #{} member {m} restarted, set healthy at {:.1} s",
                        f.n,
                        sh.secs(Instant::now())
                    );
                }
                Err(e) => f.error = Some(e),
            }
        }
        out.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(f);
    }
}
