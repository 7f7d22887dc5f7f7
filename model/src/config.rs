//! What the model is checked with: clients and their clock rates, resources, time bound,
//! TTL, shared limit, the store's renew margin, takeover grace and clock skew, the holders'
//! drift margin, and which faults clients may suffer.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lockwright_engine::{SharedLimit, Ttl};

/// The most clients a configuration may have (client names and sort keys assume it).
pub const MAX_CLIENTS: usize = 8;
/// The most resources a configuration may have.
pub const MAX_RESOURCES: usize = 8;
/// The largest real-time bound, in ticks (milliseconds).
pub const MAX_TICKS: u64 = 1_000;

/// How fast a client's monotonic clock runs against real time: `num / den` local
/// milliseconds per real millisecond. A client's clock reads `floor(real * num / den)`.
///
/// The drift bound of a configuration is the spread of its clients' rates; the holding rule's
/// drift margin has to cover the slowest one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    /// Local milliseconds per `den` real milliseconds.
    pub num: u32,
    /// Real milliseconds the `num` local ones take.
    pub den: u32,
}

impl Rate {
    /// Two local milliseconds per three real ones: a clock a third slow.
    pub const SLOW: Rate = Rate { num: 2, den: 3 };
    /// Exactly real time.
    pub const NORMAL: Rate = Rate { num: 1, den: 1 };
    /// Four local milliseconds per three real ones: a clock a third fast.
    pub const FAST: Rate = Rate { num: 4, den: 3 };

    /// A rate of `num / den`.
    ///
    /// # Errors
    /// When either part is zero or over 1000.
    pub fn new(num: u32, den: u32) -> Result<Self, ConfigError> {
        if num == 0 || den == 0 || num > 1_000 || den > 1_000 {
            return Err(ConfigError(format!(
                "clock rate {num}/{den}: both parts must be between 1 and 1000"
            )));
        }
        Ok(Rate { num, den })
    }

    /// The client's clock reading at real time `real` (both in ms; the clocks start together).
    #[must_use]
    pub fn local(self, real: u64) -> u64 {
        real * u64::from(self.num) / u64::from(self.den)
    }

    /// The shortest local time a client with this rate can see pass while `real` ms of real
    /// time pass, over every starting instant: `floor(real * num / den)` is a lower bound and
    /// is reached at a start of 0.
    #[must_use]
    pub fn min_local_elapsed(self, real: u64) -> u64 {
        self.local(real)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::SLOW => f.write_str("slow (2/3)"),
            Rate::NORMAL => f.write_str("normal (1/1)"),
            Rate::FAST => f.write_str("fast (4/3)"),
            Rate { num, den } => write!(f, "{num}/{den}"),
        }
    }
}

impl FromStr for Rate {
    type Err = ConfigError;

    /// `slow`, `normal`, `fast`, or `NUM/DEN`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "slow" => Ok(Rate::SLOW),
            "normal" => Ok(Rate::NORMAL),
            "fast" => Ok(Rate::FAST),
            other => {
                let bad = || {
                    ConfigError(format!(
                        "clock rate `{other}`: expected slow, normal, fast or NUM/DEN (e.g. 9/10)"
                    ))
                };
                let (num, den) = other.split_once('/').ok_or_else(bad)?;
                let num = num.trim().parse().map_err(|_| bad())?;
                let den = den.trim().parse().map_err(|_| bad())?;
                Rate::new(num, den)
            }
        }
    }
}

/// A configuration the model refuses, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The parameters of one model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// One clock rate per client; the number of clients is its length.
    pub rates: Vec<Rate>,
    /// The number of resources (`r0`, `r1`, ...).
    pub resources: usize,
    /// The last real instant the model reaches, in ms (ticks): time runs `0..=ticks`.
    pub ticks: u64,
    /// The TTL of every lock and every renewal.
    pub ttl: Ttl,
    /// The limit every `slock` passes (`None`: unlimited).
    pub shared_limit: Option<SharedLimit>,
    /// The store's renew margin: a lock expiring within it is not renewable.
    pub renew_margin: Duration,
    /// The holders' drift margin in the holding rule (`trust until sent + ttl - margin`).
    pub drift_margin: Duration,
    /// Whether clients may pause (stop acting, keeping their beliefs).
    pub pauses: bool,
    /// Whether clients may crash (losing their beliefs; a new lock id on restart).
    pub crashes: bool,
    /// Whether holders write to the fenced downstream store.
    pub writes: bool,
    /// The most grants per resource per millisecond (a bound on the state space like
    /// `ticks`: without it, lock-unlock loops within one millisecond would count fences up
    /// to the engine's per-millisecond reserve). Two suffice for two grants to meet in one
    /// millisecond.
    pub grants_per_ms: u64,
    /// Whether states are reduced to a representative under permutations of clients with
    /// equal clock rates.
    pub symmetry: bool,
    /// The store's takeover grace (`LockTable::with_takeover_grace`): an expired lock still
    /// blocks other grants, counts towards the shared limit and is spared by purge until
    /// `expires_at + grace <= now`, and its holder may renew it until then.
    pub grace: Duration,
    /// How far apart the clocks of the store's members may be, in ms (ticks). The store's
    /// clock reads real time plus an offset of 0 or `skew`; a failover
    /// ([`Action::Failover`](crate::Action::Failover)) switches between the two, so the
    /// store's clock jumps `skew` forward or back while the clients' clocks run on. Zero: one
    /// clock, no failovers.
    pub skew: u64,
    /// The most failovers in one run (a bound on the state space like `ticks`); two give a
    /// jump forward and one back.
    pub failovers: u8,
    /// Whether a purge, as it finishes, checks again which of the groups it found still
    /// hold a lock abandoned at its instant, and purges only those (MongoDB's purge does so
    /// in each batch's transaction). Without it the phases are as far apart as they can be,
    /// which is safe while the store's clock only goes forward: a lock granted after the
    /// purge began was created at or after its instant and is spared. A failover that takes
    /// the clock back breaks that: a group that lost its abandoned lock and took a new one
    /// on the new primary's earlier clock would lose the new one too.
    pub purge_rechecks: bool,
    /// Whether clients make fair requests ([`Action::FairXLock`](crate::Action::FairXLock),
    /// [`Action::FairSLock`](crate::Action::FairSLock)): a refused one takes (or refreshes)
    /// a place in the resource's queue, named by a ticket the client keeps across attempts
    /// until it is granted, leaves the queue ([`Action::Leave`](crate::Action::Leave)) or
    /// dies while waiting ([`Action::StopWaiting`](crate::Action::StopWaiting)).
    pub fair: bool,
    /// The lease of a place in a queue, in model time (the engine's own floor, 100 ms, is
    /// for real networks; the model's clock runs in TTL-sized steps of 1 ms): a place taken
    /// or refreshed at `t` lives while the store's clock is below `t + queue_ttl`.
    pub queue_ttl: Ttl,
    /// Whether the clients are candidates of an election on `r0` (leader election on a fair
    /// exclusive lock): they only campaign (fair exclusive requests whose comment is their
    /// value), resign (unlock), renew, proclaim a new value
    /// ([`Action::Proclaim`](crate::Action::Proclaim): `LockTable::set_comment`, also late,
    /// by a candidate that no longer leads), leave or die while waiting; and an observer
    /// reads who leads (`election::leader_of`) in two reads that may overlap and come back
    /// in either order, and reports them through the engine's `election::Observer`.
    pub election: bool,
    /// Wakes ([`Config::ci_wakes`]): a lock the store hands a fair waiter's place is told to
    /// the waiter by a wake, a message that may arrive at any later time, more than once and
    /// in any order; a waiter that hears one trusts the lock it carries by the Locker's own
    /// rule (`trust::trust_wake`), with no request of its own, or only wakes up. Needs
    /// `fair`.
    pub wakes: bool,
    /// Whether an election's candidates proclaim (once each: their second value).
    pub proclaims: bool,
    /// How many reads an election's observer makes in a run (a bound on the state space,
    /// as time is; 0: no observer). Two in flight at once at most, answered once all are
    /// sent, in any order.
    pub observer_reads: u8,
}

impl Config {
    /// `clients` clients with slow clocks (the worst drift the default bound allows),
    /// `resources` resources, time up to `ticks` ms, TTL 3 ms, shared limit 1, renew margin
    /// 1 ms, the drift margin the slow clocks need ([`Config::required_drift_margin`]),
    /// pauses, crashes and downstream writes on, symmetry reduction on, no takeover grace and
    /// one store clock (no skew).
    ///
    /// # Errors
    /// As [`Config::validate`].
    pub fn new(clients: usize, resources: usize, ticks: u64) -> Result<Self, ConfigError> {
        let mut config = Config {
            rates: vec![Rate::SLOW; clients],
            resources,
            ticks,
            ttl: Ttl::new(Duration::from_millis(3)).map_err(|e| ConfigError(e.to_string()))?,
            shared_limit: Some(SharedLimit::new(1).map_err(|e| ConfigError(e.to_string()))?),
            renew_margin: Duration::from_millis(1),
            drift_margin: Duration::ZERO,
            pauses: true,
            crashes: true,
            writes: true,
            grants_per_ms: 2,
            symmetry: true,
            grace: Duration::ZERO,
            skew: 0,
            failovers: 2,
            purge_rechecks: false,
            fair: false,
            queue_ttl: Ttl::new(Duration::from_millis(2))
                .map_err(|e| ConfigError(e.to_string()))?,
            election: false,
            wakes: false,
            proclaims: false,
            observer_reads: 0,
        };
        config.drift_margin = Duration::from_millis(config.required_drift_margin());
        config.validate()?;
        Ok(config)
    }

    /// The configuration CI checks exhaustively for the lock rules: two slow clients, two
    /// resources (so that a lock group spans resources), time up to 4 ms (a purge at the
    /// first expiry, 3 ms, then a lock created after it), no client faults and no downstream
    /// writes (those are checked by [`Config::ci_faults`]).
    #[must_use]
    pub fn ci() -> Self {
        let mut config = Config::new(2, 2, 4).expect("the CI configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config
    }

    /// The configuration CI checks exhaustively for client faults: two slow clients that
    /// pause, crash and write to the fenced downstream store, one resource, time up to 4 ms.
    #[must_use]
    pub fn ci_faults() -> Self {
        Config::new(2, 1, 4).expect("the CI faults configuration is valid")
    }

    /// The configuration CI checks exhaustively for failovers between store members whose
    /// clocks disagree: two slow clients, one resource, time up to 5 ms (a lock granted at 0
    /// expires at 3, is abandoned at 4, and is taken over by then), no client faults and no
    /// downstream writes (with writes, about 2.6 M unique states: checked by command), a
    /// takeover grace of 1 ms and members 1 ms apart (the store's
    /// clock jumps 1 ms forward, then back, at up to two failovers), and a purge that checks
    /// its groups again as it finishes, as MongoDB's does. With the grace at least the skew,
    /// every property holds; with the grace below it, or a purge that does not check again,
    /// `holder_safety` fails.
    #[must_use]
    pub fn ci_skew() -> Self {
        let mut config = Config::new(2, 1, 5).expect("the CI skew configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config.grace = Duration::from_millis(1);
        config.skew = 1;
        config.purge_rechecks = true;
        config
    }

    /// The configuration CI checks exhaustively for the queue of fair requests: two slow
    /// clients that make plain and fair requests (exclusive and shared, limit 1), keep their
    /// ticket across attempts, leave the queue or die while waiting; one resource, time up
    /// to 5 ms (a lock granted at 0 expires at 3; a place taken at 1 and not refreshed lapses
    /// at 3), places that live 2 ms, no client faults and no downstream writes.
    #[must_use]
    pub fn ci_fair() -> Self {
        let mut config = Config::new(2, 1, 5).expect("the CI fair configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config.fair = true;
        config
    }

    /// The configuration CI checks exhaustively for the store handing the lock over: three
    /// slow clients that make plain and fair requests, shared locks without a limit (so
    /// that a reader behind a waiting writer is one the locks alone would let through, and
    /// the head of the line is not the only place a store could wrongly hand the lock to),
    /// one resource, time up to 3 ms (a place taken at 1 ms lapses at its end), no client
    /// faults and no downstream writes. Two clients cannot show it: a release hands the
    /// lock to the first place at once, so two live places need a holder that waits for
    /// nothing.
    #[must_use]
    pub fn ci_handoff() -> Self {
        let mut config = Config::new(3, 1, 3).expect("the CI handoff configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config.fair = true;
        config.shared_limit = None;
        // As MongoDB's purge does (and a lock created after a purge began needs more time).
        config.purge_rechecks = true;
        config
    }

    /// The configuration CI checks exhaustively for wakes: two slow clients that make plain
    /// and fair exclusive requests on one resource (shared ones add nothing a wake decides),
    /// waiters that hear the wakes of locks handed to their places, late (past the claim
    /// lease), twice or out of order, and trust them by the Locker's rule; time up to 4 ms
    /// (a place kept at 0 is handed the lock at 0 or 1, whose claim lease ends at 2 or 3,
    /// and another client may take it over then), no client faults and no downstream
    /// writes. `holder_safety` holds; each of the rule's guards removed (a mutant) breaks it.
    #[must_use]
    pub fn ci_wakes() -> Self {
        let mut config = Config::new(2, 1, 4).expect("the CI wakes configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config.fair = true;
        config.wakes = true;
        config
    }

    /// The configuration CI checks exhaustively for leader election's candidates: two slow
    /// candidates that campaign on one resource, resign, proclaim once (also late: a
    /// proclaim sent while leading that arrives after), leave or die while waiting (a leader
    /// that dies is one that stops renewing: crashes add nothing the store sees); time up to
    /// 4 ms, no pauses and no downstream writes, no observer (see
    /// [`Config::ci_observe`]).
    #[must_use]
    pub fn ci_election() -> Self {
        let mut config = Config::new(2, 1, 4).expect("the CI election configuration is valid");
        config.pauses = false;
        config.crashes = false;
        config.writes = false;
        config.fair = true;
        config.election = true;
        config.proclaims = true;
        config.shared_limit = None;
        config
    }

    /// The configuration CI checks exhaustively for an election's observer: the candidates
    /// of [`Config::ci_election`] without proclaims, and an observer that reads who leads
    /// twice, the reads in flight together and answered in either order; time up to 3 ms
    /// (the observer's reads multiply the states some twentyfold).
    #[must_use]
    pub fn ci_observe() -> Self {
        let mut config = Config::ci_election();
        config.ticks = 3;
        config.proclaims = false;
        config.observer_reads = 2;
        config
    }

    /// The larger configuration, checked by command rather than in CI: three slow clients
    /// that pause, crash and write to the fenced downstream store, one resource, time up to
    /// 4 ms (about 0.6 M unique states with symmetry reduction).
    #[must_use]
    pub fn three_clients() -> Self {
        Config::new(3, 1, 4).expect("the three-client configuration is valid")
    }

    /// The number of clients.
    #[must_use]
    pub fn clients(&self) -> usize {
        self.rates.len()
    }

    /// The TTL in ms.
    #[must_use]
    pub fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis()
    }

    /// The lease of a place in a queue, in ms.
    #[must_use]
    pub fn queue_ttl_ms(&self) -> u64 {
        self.queue_ttl.as_millis()
    }

    /// The takeover grace in ms.
    #[must_use]
    pub fn grace_ms(&self) -> u64 {
        u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the store's clock may jump at a failover.
    #[must_use]
    pub fn has_failovers(&self) -> bool {
        self.skew > 0 && self.failovers > 0
    }

    /// The smallest drift margin (ms) with which the holding rule is safe for these clock
    /// rates: a lock granted at real `g` expires at `g + ttl`, and the slowest clock may show
    /// only `floor(ttl * rate)` elapsed by then, so trust must end `ttl - floor(ttl * rate)`
    /// early. Fast clocks need nothing (they stop trusting early).
    #[must_use]
    pub fn required_drift_margin(&self) -> u64 {
        let ttl = self.ttl_ms();
        self.rates
            .iter()
            .map(|r| ttl.saturating_sub(r.min_local_elapsed(ttl)))
            .max()
            .unwrap_or(0)
    }

    /// Checks the bounds: 1 to [`MAX_CLIENTS`] clients, 1 to [`MAX_RESOURCES`] resources,
    /// 1 to [`MAX_TICKS`] ticks, a grace and a skew of at most [`MAX_TICKS`] ms.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.rates.is_empty() || self.rates.len() > MAX_CLIENTS {
            return Err(ConfigError(format!(
                "clients: {} given, must be between 1 and {MAX_CLIENTS}",
                self.rates.len()
            )));
        }
        if self.resources == 0 || self.resources > MAX_RESOURCES {
            return Err(ConfigError(format!(
                "resources: {} given, must be between 1 and {MAX_RESOURCES}",
                self.resources
            )));
        }
        if self.ticks == 0 || self.ticks > MAX_TICKS {
            return Err(ConfigError(format!(
                "ticks: {} given, must be between 1 and {MAX_TICKS}",
                self.ticks
            )));
        }
        if self.grace_ms() > MAX_TICKS || self.skew > MAX_TICKS {
            return Err(ConfigError(format!(
                "grace {} ms, skew {} ms: each must be at most {MAX_TICKS} ms",
                self.grace_ms(),
                self.skew
            )));
        }
        if self.wakes && !self.fair {
            return Err(ConfigError(
                "wakes tell fair waiters what the store handed them: they need fair".into(),
            ));
        }
        if (self.proclaims || self.observer_reads > 0) && !self.election {
            return Err(ConfigError(
                "proclaims and observer reads are an election's: they need election".into(),
            ));
        }
        if self.election && !self.fair {
            return Err(ConfigError(
                "election: candidates campaign with fair requests, so it needs fair".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_run() {
        assert_eq!("slow".parse::<Rate>(), Ok(Rate::SLOW));
        assert_eq!("9/10".parse::<Rate>(), Ok(Rate { num: 9, den: 10 }));
        assert!("0/1".parse::<Rate>().is_err());
        assert!("quick".parse::<Rate>().is_err());
        assert_eq!(Rate::SLOW.local(3), 2);
        assert_eq!(Rate::SLOW.local(4), 2);
        assert_eq!(Rate::FAST.local(3), 4);
    }

    #[test]
    fn slow_clocks_need_one_ms_of_margin_with_a_ttl_of_three() {
        let config = Config::ci();
        assert_eq!(config.required_drift_margin(), 1);
        assert_eq!(config.drift_margin, Duration::from_millis(1));
        assert!(Config::new(0, 1, 1).is_err());
        assert!(Config::new(1, 0, 1).is_err());
        assert!(Config::new(1, 1, 0).is_err());
    }
}
