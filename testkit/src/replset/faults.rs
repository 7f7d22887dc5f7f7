//! What tests do to a running set: step its primary down, kill, restart (with a new clock
//! offset), pause and resume members, and measure a member's clock offset.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mongodb::bson::doc;
use mongodb::error::ErrorKind;
use nix::sys::signal::Signal;

use super::health::{MemberState, state};
use super::member::POLL;
use super::{Error, ReplSet, find_libfaketime, log};

impl ReplSet {
    /// Waits for a healthy set ([`ReplSet::primary`]), makes its primary step down
    /// (`replSetStepDown`: 5 s before it may stand again, up to 5 s for a secondary to catch
    /// up), and waits until it no longer says it is primary; the member that stepped down.
    ///
    /// # Errors
    ///
    /// No healthy set, the command refused, or a primary that does not step down in time.
    pub async fn step_down(&self) -> Result<usize, Error> {
        let p = self.wait_healthy_for("step-down").await?;
        let m = &self.members[p];
        let cmd = doc! { "replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 5 };
        match tokio::time::timeout(
            Duration::from_secs(30),
            m.client.database("admin").run_command(cmd),
        )
        .await
        {
            Ok(Err(e)) if matches!(*e.kind, ErrorKind::Command(_)) => {
                return Err(Error::command(format!("replSetStepDown on member {p}"), e));
            }
            // Done, or the connection closed as it stepped down: the wait below tells.
            _ => {}
        }
        let t = Instant::now();
        while state(m).await == MemberState::Primary {
            if t.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    what: format!("member {p} to step down"),
                    secs: t.elapsed().as_secs_f64(),
                    last: "still primary".into(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
        log(format_args!("member {p} (port {}) stepped down", m.port));
        Ok(p)
    }

    /// SIGKILLs member `member`'s mongod and waits until the process is gone.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub async fn kill(&self, member: usize) -> Result<(), Error> {
        let m = self.member(member)?;
        let pid = m.pid().unwrap_or_default();
        m.kill().await?;
        log(format_args!(
            "killed member {member} (pid {pid}, port {}) with SIGKILL",
            m.port
        ));
        Ok(())
    }

    /// Waits for a healthy set and SIGKILLs its primary ([`ReplSet::kill`]); the member that
    /// was primary.
    ///
    /// # Errors
    ///
    /// No healthy set, or as [`ReplSet::kill`].
    pub async fn kill_primary(&self) -> Result<usize, Error> {
        let p = self.wait_healthy_for("kill-primary").await?;
        self.kill(p).await?;
        Ok(p)
    }

    /// Starts member `member` again (after [`ReplSet::kill`], or after it died), on its
    /// port and dbpath with its clock offset, and waits until the set is healthy again.
    ///
    /// # Errors
    ///
    /// No such member, it is running, its mongod does not start, or the set does not become
    /// healthy in time.
    pub async fn restart(&self, member: usize) -> Result<(), Error> {
        let skew = self.member(member)?.skew_ms();
        self.restart_with_skew_ms(member, skew).await
    }

    /// As [`ReplSet::restart`], with the member's wall clock now `offset_ms` milliseconds
    /// ahead (negative: behind; 0: not shifted).
    ///
    /// # Errors
    ///
    /// As [`ReplSet::restart`], and no libfaketime for a non-zero offset.
    pub async fn restart_with_skew_ms(&self, member: usize, offset_ms: i64) -> Result<(), Error> {
        let m = self.member(member)?;
        let t = Instant::now();
        let found;
        let faketime = match (offset_ms, &self.faketime) {
            (0, _) => None,
            (_, Some(f)) => Some(f.as_path()),
            (_, None) => {
                found = find_libfaketime()?;
                Some(found.as_path())
            }
        };
        m.restart(&self.launch, offset_ms, faketime).await?;
        log(format_args!(
            "member {member}: mongod pid {} on port {} again; waiting for a healthy set",
            m.pid().unwrap_or_default(),
            m.port
        ));
        self.wait_healthy_for("restart").await?;
        log(format_args!(
            "member {member} back and the set healthy in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// Freezes member `member`'s mongod (SIGSTOP): it answers nobody until
    /// [`ReplSet::resume`]. A set with a paused member is not healthy.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub fn pause(&self, member: usize) -> Result<(), Error> {
        self.member(member)?.signal(Signal::SIGSTOP)?;
        log(format_args!("paused member {member} (SIGSTOP)"));
        Ok(())
    }

    /// Lets a paused member run again (SIGCONT). It does not wait for a healthy set.
    ///
    /// # Errors
    ///
    /// No such member, or it is not running.
    pub fn resume(&self, member: usize) -> Result<(), Error> {
        self.member(member)?.signal(Signal::SIGCONT)?;
        log(format_args!("resumed member {member} (SIGCONT)"));
        Ok(())
    }

    /// How far member `member`'s wall clock is ahead of this process's, in milliseconds (its
    /// `hello` `localTime` against the middle of the round trip; about ±1 ms on loopback
    /// plus the clock's millisecond resolution).
    ///
    /// # Errors
    ///
    /// No such member, or it does not answer.
    pub async fn clock_offset_ms(&self, member: usize) -> Result<i64, Error> {
        let m = self.member(member)?;
        let before = SystemTime::now();
        let hello = m
            .client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| Error::command(format!("hello to member {member}"), e))?;
        let after = SystemTime::now();
        let local = hello
            .get_datetime("localTime")
            .map_err(|e| Error::Usage(format!("member {member}'s hello has no localTime: {e}")))?;
        let mid = before + after.duration_since(before).unwrap_or_default() / 2;
        let mid_ms = match mid.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        };
        Ok(local.timestamp_millis() - mid_ms)
    }
}
