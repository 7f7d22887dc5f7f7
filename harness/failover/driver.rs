//! The failover driver: at each planned instant, a `replSetStepDown` of the primary or a
//! SIGKILL of it followed by a restart of that member, through the test kit's replica set
//! fixture.
//!
//! Without a shifted clock, step-downs and kills alternate and any member may win the
//! election. With one (`--skew`), failovers go alternately *to* the shifted member and *away*
//! from it, so that every one switches the primary's clock, and go graceful, graceful, kill,
//! kill, so that both directions are forced both ways:
//!
//! - to it, the members that are neither it nor the primary are first frozen
//!   (`replSetFreeze`), so that it is the only member that can be elected; then, gracefully,
//!   it is made to stand (`replSetStepUp`: the primary steps down as soon as it sees the new
//!   term, and the switch takes a fraction of a second, as a step-down's election handoff
//!   does), or the primary is killed (the shifted member wins the election that follows,
//!   after the election timeout);
//! - away from it, it is the primary, and it steps down (`replSetStepDown`) or is killed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwright_testkit::replset::{MemberState, ReplSet};
use mongodb::bson::doc;

use crate::observer::Shared;

/// How a failover was forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    StepDown,
    /// `replSetStepUp` on the shifted member.
    StepUp,
    Kill,
}

/// Where a failover was meant to move the primary, when a member's clock is shifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Any member but the old primary (no shifted clock).
    Any,
    /// To the shifted member: the others were frozen.
    ToShifted,
    /// Away from the shifted member, which was primary.
    FromShifted,
}

/// One forced failover.
#[derive(Clone, Debug)]
pub(crate) struct Failover {
    pub(crate) n: usize,
    pub(crate) action: Action,
    pub(crate) direction: Direction,
    /// The member that was primary.
    pub(crate) member: Option<usize>,
    /// The member that became primary, once one did (`None`: not seen within the bound).
    pub(crate) new_primary: Option<usize>,
    /// When the command that forced it returned (the old primary had stepped down or died).
    pub(crate) at: Instant,
    /// How long that command took (it first waits for a healthy set).
    pub(crate) took: Duration,
    /// From `at` until the new primary said it was one.
    pub(crate) elected: Option<Duration>,
    /// After a kill: how long the restart took until the set was healthy again.
    pub(crate) restart: Option<Duration>,
    pub(crate) error: Option<String>,
}

/// How long members are frozen for a failover to the shifted member (they are unfrozen as
/// soon as it is primary; this bounds the freeze if the run stops in between).
const FREEZE_SECS: i32 = 20;

/// How long a failover waits for the new primary.
const ELECTION_BOUND: Duration = Duration::from_secs(20);

/// The action of failover `i` (0-based).
fn action(i: usize, shifted: bool) -> Action {
    let step = if shifted {
        i % 4 < 2
    } else {
        i.is_multiple_of(2)
    };
    if step { Action::StepDown } else { Action::Kill }
}

/// `replSetStepUp` on member `s` until it wins an election (it loses one while its oplog is
/// behind a voter's, under the clients' writes: it asks again every 50 ms, for up to
/// `ELECTION_BOUND`), then waits until the primary `p` says it is no longer one.
async fn step_up(set: &ReplSet, s: usize, p: usize) -> Result<usize, String> {
    let t = Instant::now();
    loop {
        let cmd = doc! { "replSetStepUp": 1 };
        let last = match tokio::time::timeout(
            Duration::from_secs(10),
            set.client(s).database("admin").run_command(cmd),
        )
        .await
        {
            Ok(Ok(_)) => break,
            Ok(Err(e)) => short(&e),
            Err(_) => "no answer".to_string(),
        };
        if t.elapsed() > ELECTION_BOUND {
            return Err(format!(
                "replSetStepUp on member {s} did not win an election in {:.1} s: {last}",
                t.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while set.member_state(p).await.ok() == Some(MemberState::Primary) {
        if t.elapsed() > ELECTION_BOUND {
            return Err(format!(
                "member {p} still primary {} s after member {s} stood",
                ELECTION_BOUND.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(p)
}

/// A command's error without the server's raw reply.
fn short(e: &mongodb::error::Error) -> String {
    match &*e.kind {
        mongodb::error::ErrorKind::Command(c) => format!("{} ({})", c.message, c.code_name),
        _ => e.to_string(),
    }
}

/// `replSetFreeze` for `secs` seconds (0: unfreeze) on member `m`.
async fn freeze(set: &ReplSet, m: usize, secs: i32) -> Result<(), String> {
    let cmd = doc! { "replSetFreeze": secs };
    match tokio::time::timeout(
        Duration::from_secs(5),
        set.client(m).database("admin").run_command(cmd),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("replSetFreeze {secs} on member {m}: {}", short(&e))),
        Err(_) => Err(format!("replSetFreeze {secs} on member {m}: no answer")),
    }
}

/// Waits until a member other than `old` says it is primary (`want`: that member); which.
async fn wait_new_primary(set: &ReplSet, old: usize, want: Option<usize>) -> Option<usize> {
    let t = Instant::now();
    while t.elapsed() < ELECTION_BOUND {
        for m in (0..set.member_count()).filter(|&m| m != old) {
            if want.is_some_and(|w| w != m) {
                continue;
            }
            if set.member_state(m).await.ok() == Some(MemberState::Primary) {
                return Some(m);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Forces one failover; fills in `f`.
async fn force(set: &ReplSet, shifted: Option<usize>, f: &mut Failover) {
    let called = Instant::now();
    let mut errors = Vec::new();
    // Whom to freeze: with a shifted member that is not primary, every member but it and
    // the primary, so that it is the only one that can be elected.
    let mut frozen = Vec::new();
    let mut stand = None;
    if let Some(s) = shifted {
        match set.primary().await {
            Ok(p) if p == s => f.direction = Direction::FromShifted,
            Ok(p) => {
                f.direction = Direction::ToShifted;
                if f.action == Action::StepDown {
                    f.action = Action::StepUp;
                    stand = Some((s, p));
                }
                for m in (0..set.member_count()).filter(|&m| m != p && m != s) {
                    match freeze(set, m, FREEZE_SECS).await {
                        Ok(()) => frozen.push(m),
                        Err(e) => errors.push(e),
                    }
                }
            }
            Err(e) => errors.push(format!("no healthy set: {e}")),
        }
    }
    let result = match (f.action, stand) {
        (Action::StepUp, Some((s, p))) => step_up(set, s, p).await,
        (Action::StepDown | Action::StepUp, _) => {
            set.step_down().await.map_err(|e| format!("step-down: {e}"))
        }
        (Action::Kill, _) => set
            .kill_primary()
            .await
            .map_err(|e| format!("kill-primary: {e}")),
    };
    f.at = Instant::now();
    f.took = f.at - called;
    match result {
        Ok(m) => {
            f.member = Some(m);
            let want = (f.direction == Direction::ToShifted)
                .then_some(shifted)
                .flatten();
            f.new_primary = wait_new_primary(set, m, want).await;
            match f.new_primary {
                Some(_) => f.elected = Some(f.at.elapsed()),
                None => errors.push(format!(
                    "no new primary{} within {} s",
                    want.map_or(String::new(), |w| format!(" (member {w})")),
                    ELECTION_BOUND.as_secs()
                )),
            }
        }
        Err(e) => {
            f.member = stand.map(|(_, p)| p);
            errors.push(e);
        }
    }
    for m in frozen {
        if let Err(e) = freeze(set, m, 0).await {
            errors.push(e);
        }
    }
    if let (Action::Kill, Some(m)) = (f.action, f.member) {
        let t = Instant::now();
        match set.restart(m).await {
            Ok(()) => f.restart = Some(t.elapsed()),
            Err(e) => errors.push(format!("restart of member {m}: {e}")),
        }
    }
    if !errors.is_empty() {
        f.error = Some(errors.join("; "));
    }
}

/// Forces a failover at each instant of `plan`; with a `shifted` member, alternately to it
/// and away from it.
pub(crate) async fn failover_task(
    sh: Shared,
    set: Arc<ReplSet>,
    plan: Vec<Instant>,
    shifted: Option<usize>,
    out: Arc<Mutex<Vec<Failover>>>,
) {
    for (i, when) in plan.into_iter().enumerate() {
        tokio::time::sleep_until(when.into()).await;
        let mut f = Failover {
            n: i + 1,
            action: action(i, shifted.is_some()),
            direction: Direction::Any,
            member: None,
            new_primary: None,
            at: Instant::now(),
            took: Duration::ZERO,
            elected: None,
            restart: None,
            error: None,
        };
        force(&set, shifted, &mut f).await;
        let who = |m: Option<usize>| m.map_or("?".to_string(), |m| m.to_string());
        eprintln!(
            "failover: #{} {}{}: primary member {} gone at {:.1} s (the command took {:.2} s), \
             member {} primary {} later{}{}",
            f.n,
            match f.action {
                Action::StepDown => "step-down",
                Action::StepUp => "step-up of the shifted member",
                Action::Kill => "kill",
            },
            match f.direction {
                Direction::Any => "",
                Direction::ToShifted => " (to the shifted member)",
                Direction::FromShifted => " (away from the shifted member)",
            },
            who(f.member),
            sh.secs(f.at),
            f.took.as_secs_f64(),
            who(f.new_primary),
            f.elected
                .map_or("?".to_string(), |d| format!("{:.2} s", d.as_secs_f64())),
            f.restart.map_or(String::new(), |d| format!(
                ", restarted and healthy in {:.1} s",
                d.as_secs_f64()
            )),
            f.error
                .as_ref()
                .map_or(String::new(), |e| format!(": ERROR {e}"))
        );
        out.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(f);
    }
}
