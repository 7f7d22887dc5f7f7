//! CMD never outlives its lock: `run` and `elect` SIGKILLed 20 times each while CMD (with a
//! grandchild in its group) runs and the next process waits for the lock; and a CMD that
//! ignores SIGTERM, under a `run` cut off from the server while another waits.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;

use crate::support::{Coll, Proc, Proxy, code, primary, text, wait_for_file};

/// Kills per subcommand.
const KILLS: usize = 20;

/// A CMD that writes `started.N` (its process group and the wall time in ns, when it
/// started), then waits on a grandchild in its group, for ever.
fn cmd(n: usize) -> String {
    format!(
        "echo \"$(cut -d' ' -f5 /proc/$$/stat) $(date +%s%N)\" > started.{n}.tmp && \
         mv started.{n}.tmp started.{n}; sleep 1000 & wait"
    )
}

/// The processes of group `pgid` that are alive (zombies are not: they run nothing).
fn alive_in_group(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) STATE PPID PGRP ...`: comm may hold spaces, not a `)` at its end.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first().is_some_and(|s| *s != "Z" && *s != "X")
                && fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
        })
        .collect()
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// `started.N`: CMD's process group and when it started (ns since the epoch).
fn started(c: &Coll, n: usize) -> (i32, u128) {
    let path = c.path(&format!("started.{n}"));
    wait_for_file(&path);
    let line = std::fs::read_to_string(&path).expect("started file");
    let (group, at) = line.trim().split_once(' ').expect("two fields");
    (
        group.parse().expect("a process group"),
        at.parse().expect("a time"),
    )
}

/// Runs the kill test of `lockwright ARGS -- sh -c CMD`: a holder, then KILLS times a
/// waiter started, the holder SIGKILLed, its group watched until gone, and the waiter's CMD
/// awaited.
fn kill_holders(name: &str, args: &[&str]) {
    let c = Coll::new();
    let spawn = |n: usize| -> Proc {
        let mut command = c.lw();
        command
            .env("LOCKWRIGHT_TAKEOVER_GRACE", "500ms")
            .args(args)
            .args(["--", "sh", "-c", &cmd(n)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Proc::from(command.spawn().expect("spawn lockwright"))
    };
    let mut holder = spawn(0);
    let (mut group, _) = started(&c, 0);
    let mut gone_after = Vec::new();
    let mut overlaps = Vec::new();
    for n in 1..=KILLS {
        let waiter = spawn(n);
        // In line (or polling) before the holder dies.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !alive_in_group(group).is_empty(),
            "the holder's CMD runs before the kill"
        );
        holder.signal(Signal::SIGKILL);
        let killed = now_ns();
        // Gone long before anyone may take the lock (its TTL, 2 s, then the grace).
        let gone = wait_for_within(Duration::from_secs(2), || alive_in_group(group).is_empty());
        let Some(gone) = gone else {
            panic!(
                "{name}: CMD's group {group} still runs 2 s after lockwright was killed: {:?}",
                alive_in_group(group)
            );
        };
        gone_after.push(Duration::from_nanos(
            u64::try_from(gone - killed).expect("ns"),
        ));
        drop(holder);
        let (next, at) = started(&c, n);
        if at < gone {
            overlaps.push((
                n,
                Duration::from_nanos(u64::try_from(gone - at).expect("ns")),
            ));
        }
        holder = waiter;
        group = next;
    }
    drop(holder);
    gone_after.sort();
    let pct = |p: usize| gone_after[(gone_after.len() * p).div_ceil(100) - 1];
    // Past the test harness's capture: the run's log shows the numbers.
    let _ = writeln!(
        std::io::stdout(),
        "kill test ({name}): {KILLS} SIGKILLs; CMD's group gone after p50 {:?}, p99 {:?}, \
         max {:?}; overlapping commands: {}",
        pct(50),
        pct(99),
        gone_after.last().expect("kills"),
        overlaps.len()
    );
    assert!(
        overlaps.is_empty(),
        "{name}: the next CMD started while the killed holder's group still ran: {overlaps:?}"
    );
}

/// Polls `cond` every millisecond until it holds, for at most `limit`; when it held, in ns
/// since the epoch.
fn wait_for_within(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<u128> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(now_ns());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn run_killed_takes_its_command_with_it() {
    kill_holders("run", &["run", "job/kill", "--wait", "--ttl", "2s"]);
}

#[test]
fn elect_killed_takes_its_command_with_it() {
    kill_holders("elect", &["elect", "job/kill-elect", "--lease", "2s"]);
}

#[test]
fn a_paused_run_has_its_command_killed_when_the_trust_ends() {
    let c = Coll::new();
    let lw = c.spawn(&[
        "run",
        "job/paused",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        // Ignores SIGTERM: only SIGKILL stops it.
        &format!("trap '' TERM; {}", cmd(0)),
    ]);
    let (group, _) = started(&c, 0);
    lw.signal(Signal::SIGSTOP);
    let gone = wait_for_within(Duration::from_secs(10), || alive_in_group(group).is_empty())
        .expect("CMD's group still runs 10 s after its lockwright was paused");
    // Killed when the trust ended, before the lock expired in the store (nobody renews it
    // any more: its expiry stays put).
    let locks = c.locks();
    let expires = locks[0].expires_at.expect("a TTL").to_system_time();
    let expires = expires
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    assert!(
        gone < expires,
        "CMD's group was killed {} ms after the lock expired in the store",
        (gone - expires) / 1_000_000
    );
    lw.signal(Signal::SIGCONT);
    let out = lw.finish(Duration::from_secs(30));
    let err = text(&out.stderr);
    assert_eq!(code(&out), 76, "stderr: {err}");
    assert!(err.contains("killed by its watchdog"), "{err}");
}

#[test]
fn a_run_cut_off_from_the_server_stops_its_command_before_anyone_may_take_the_lock() {
    let c = Coll::new();
    let proxy = Proxy::to(&primary(&c));
    // Ignores SIGTERM: only SIGKILL, when the trust ends, stops it.
    let script = format!("trap '' TERM; {}", cmd(0));
    let mut cut_off = c.lw();
    cut_off
        .env("LOCKWRIGHT_URI", proxy.uri())
        .args([
            "run",
            "job/cut",
            "--ttl",
            "6s",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let cut_off = Proc::from(cut_off.spawn().expect("spawn lockwright"));
    let (group, _) = started(&c, 0);
    let waiter = c.spawn(&[
        "run",
        "job/cut",
        "--wait",
        "--ttl",
        "6s",
        "--",
        "sh",
        "-c",
        &cmd(1),
    ]);
    std::thread::sleep(Duration::from_millis(300));
    proxy.cut();
    let gone = wait_for_within(Duration::from_secs(30), || alive_in_group(group).is_empty())
        .expect("CMD's group still runs 30 s after its lockwright was cut off");
    let (_, next) = started(&c, 1);
    assert!(
        gone < next,
        "the waiter's CMD started {} ms before the cut-off one's group was gone",
        (gone - next) / 1_000_000
    );
    let out = cut_off.finish(Duration::from_secs(30));
    let err = text(&out.stderr);
    assert_eq!(code(&out), 76, "stderr: {err}");
    assert!(
        err.contains("renewals of the lock on `job/cut` are failing"),
        "{err}"
    );
    drop(waiter);
}
