//! What to simulate: the clients, resources, leases, drift, faults and fair clients a sweep
//! runs with, and the command-line flags that reproduce them.

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Clients contending.
    pub clients: usize,
    /// Resources they lock (exclusively; a job locks one to four of them).
    pub resources: usize,
    /// The TTL of every lock, in ms.
    pub ttl_ms: u64,
    /// The holders' drift margin, in ms.
    pub drift_margin_ms: u64,
    /// The renew margin the Locker core renews with (the client's, in the shipped Locker), in
    /// ms: the store refuses to renew a lock that expires within it.
    pub renew_margin_ms: u64,
    /// The largest clock-rate drift a seed may give a client, in parts per million.
    pub max_drift_ppm: i64,
    /// Whether the downstream store rejects fences lower than the highest it accepted.
    pub fencing: bool,
    /// How long faults are injected, in ms of virtual time.
    pub duration_ms: u64,
    /// The store's takeover grace, in ms: an expired lock blocks other grants until it has
    /// been expired this long.
    pub grace_ms: u64,
    /// How far apart the store members' clocks are, in ms: a failover moves the store's
    /// clock to another member's, at most this far forward or back (0: no failovers).
    pub clock_jump_ms: u64,
    /// Calm seeds only: every seed keeps the crashes, clock drift and duplicated hints it
    /// draws but gets a fast network that loses nothing, no pauses, no failovers and no
    /// dropped hint streams, so that every seed is checked for `handover_liveness`.
    pub calm: bool,
    /// The share of seeds, in percent, whose clients acquire fairly (waiting in the
    /// resource's queue); drawn per seed from a stream of its own, so that the other seeds
    /// run as they would without fair clients.
    pub fair_seeds_pct: u32,
    /// In a seed with fair clients, the share of its clients, in percent, that acquire
    /// fairly (at least one does; the others' acquires are not fair, and obey the queue).
    pub fair_clients_pct: u32,
    /// The lease of a fair waiter's place in a queue (`LockerConfig::queue_ttl`), in ms.
    pub queue_ttl_ms: u64,
    /// An election on `r0` (see [`Options::election`]): every client is a candidate, and an
    /// observer reads who leads.
    pub election: bool,
    /// Late hints: in half of the seeds, a share of the hints (drawn per seed) arrive up to
    /// this many ms later than the network's latency, past a claim lease (0: none).
    pub late_hint_ms: u64,
}

impl Default for Options {
    /// Three clients, four resources (a job holds up to four, half of them just one), 1 s
    /// TTL, 5% drift at most and a 100 ms drift margin (more than the `ttl * drift / (1 -
    /// drift)` = 53 ms the holding rule needs), a 100 ms renew margin (a tenth of the TTL, as
    /// the shipped 1 s default is of a 10 s lease), fencing on, 30 s of faults, a takeover
    /// grace of 200 ms (a fifth of the TTL, as the shipped 2 s default is of a 10 s lease),
    /// store members' clocks up to 200 ms apart (as far as the grace covers), fair clients
    /// in half of the seeds (three in four of their clients, at least one), and places in a
    /// queue leased for one TTL (1 s; the shipped 3 s default is less than a 10 s lease's
    /// third, but a place of 300 ms would be kept by an attempt every 150 ms).
    fn default() -> Self {
        Options {
            clients: 3,
            resources: 4,
            ttl_ms: 1_000,
            drift_margin_ms: 100,
            renew_margin_ms: 100,
            max_drift_ppm: 50_000,
            fencing: true,
            duration_ms: 30_000,
            grace_ms: 200,
            clock_jump_ms: 200,
            calm: false,
            fair_seeds_pct: 50,
            fair_clients_pct: 75,
            queue_ttl_ms: 1_000,
            election: false,
            late_hint_ms: 0,
        }
    }
}

impl Options {
    /// An election: the default options with one resource, every client of every seed a
    /// candidate (fair), leaders that proclaim and resign, and an observer.
    #[must_use]
    pub fn election() -> Self {
        Options {
            resources: 1,
            fair_seeds_pct: 100,
            fair_clients_pct: 100,
            election: true,
            ..Options::default()
        }
    }

    /// The wakes that hand a lock, verified: twelve fair clients (the sweep also runs 8 and
    /// 16) on two resources (places far back in long lines), places leased for 400 ms (a claim lease shorter than the
    /// TTL), hints up to 1.5 s late (past a claim lease) in half of the seeds, and the
    /// default failovers, which step the store's clock back as often as forward.
    #[must_use]
    pub fn wakes() -> Self {
        Options {
            clients: 12,
            resources: 2,
            fair_seeds_pct: 100,
            fair_clients_pct: 100,
            queue_ttl_ms: 400,
            late_hint_ms: 1_500,
            ..Options::default()
        }
    }

    /// The command-line flags that reproduce these options.
    #[must_use]
    pub fn flags(&self) -> String {
        let d = Options::default();
        let mut out = String::new();
        let mut add = |name: &str, v: String, dv: String| {
            if v != dv {
                out.push_str(&format!(" --{name} {v}"));
            }
        };
        add("clients", self.clients.to_string(), d.clients.to_string());
        add(
            "resources",
            self.resources.to_string(),
            d.resources.to_string(),
        );
        add("ttl", self.ttl_ms.to_string(), d.ttl_ms.to_string());
        add(
            "margin",
            self.drift_margin_ms.to_string(),
            d.drift_margin_ms.to_string(),
        );
        add(
            "renew-margin",
            self.renew_margin_ms.to_string(),
            d.renew_margin_ms.to_string(),
        );
        add(
            "drift-ppm",
            self.max_drift_ppm.to_string(),
            d.max_drift_ppm.to_string(),
        );
        add(
            "duration",
            self.duration_ms.to_string(),
            d.duration_ms.to_string(),
        );
        add(
            "grace-ms",
            self.grace_ms.to_string(),
            d.grace_ms.to_string(),
        );
        add(
            "clock-jump-ms",
            self.clock_jump_ms.to_string(),
            d.clock_jump_ms.to_string(),
        );
        add(
            "fair-seeds",
            self.fair_seeds_pct.to_string(),
            d.fair_seeds_pct.to_string(),
        );
        add(
            "fair-clients",
            self.fair_clients_pct.to_string(),
            d.fair_clients_pct.to_string(),
        );
        add(
            "queue-ttl",
            self.queue_ttl_ms.to_string(),
            d.queue_ttl_ms.to_string(),
        );
        add(
            "late-hints",
            self.late_hint_ms.to_string(),
            d.late_hint_ms.to_string(),
        );
        if !self.fencing {
            out.push_str(" --no-fencing");
        }
        if self.calm {
            out.push_str(" --calm");
        }
        if self.election {
            out.push_str(" --election");
        }
        out
    }
}
