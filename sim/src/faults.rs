//! The faults: the mix each seed draws (from streams of its own, so that adding a kind of
//! fault leaves the other draws of a seed as they were), and the count of those injected.

use std::fmt;

use rand::Rng;

use crate::SimRng;
use crate::options::Options;

/// The faults one seed injects, derived from the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultMix {
    /// One-way network latency range, in ms.
    pub latency_ms: (u64, u64),
    /// Percentage of replies lost after the store applied the request (and of hints lost
    /// on their way to a client).
    pub lost_reply_pct: u32,
    /// Percentage of requests lost before they reach the store (and of subscriptions to
    /// hints that never reach it).
    pub lost_request_pct: u32,
    /// Chance per client step, in 1/1000, of a pause longer than the TTL.
    pub pause_permille: u16,
    /// Chance per client step, in 1/1000, of a crash.
    pub crash_permille: u16,
    /// The drift bound of this seed's clients, in ppm (0: perfect clocks).
    pub drift_ppm: i64,
    /// How far a failover may move the store's clock in this seed, in ms (0: no failovers).
    pub clock_jump_ms: u64,
    /// Whether that is beyond the store's takeover grace.
    pub jumps_beyond_grace: bool,
    /// Percentage of hints delivered twice (each copy with its own latency).
    pub hint_dup_pct: u32,
    /// Chance per hint the store sends, in 1/1000, that the subscription's stream ends
    /// instead (the hint is lost with it; the client hears the end, then subscribes again).
    pub stream_drop_permille: u16,
    /// Percentage of hints that arrive late: up to `late_hint_ms` later than the latency.
    pub late_hint_pct: u32,
    /// How late a late hint may be, in ms.
    pub late_hint_ms: u64,
    /// The clients that acquire fairly, one bit each (not a fault: drawn with the mix, from
    /// a stream of its own).
    pub fair_clients: u32,
}

/// The stream the failovers are drawn from: apart from the world's, so that a seed
/// without failovers runs exactly as it would with none configured.
pub(crate) fn failover_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6661_696c_6f76_6572)
}

/// The stream the fair clients are drawn from: apart from the world's, so that a seed
/// without fair clients runs exactly as it would with none configured.
pub(crate) fn fair_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6661_6972_5f71_7565)
}

/// The stream the hint faults are drawn from: apart from the world's, so that each seed
/// keeps the other faults it drew before hints existed.
pub(crate) fn hint_rng(seed: u64) -> SimRng {
    use rand::SeedableRng;
    SimRng::seed_from_u64(seed ^ 0x6869_6e74_7374_726d)
}

impl FaultMix {
    pub(crate) fn from_rng(
        rng: &mut SimRng,
        failovers: &mut SimRng,
        hints: &mut SimRng,
        opts: &Options,
    ) -> Self {
        let on = |rng: &mut SimRng| rng.random_bool(0.5);
        let slow = on(rng);
        let mut mix = FaultMix {
            latency_ms: if slow {
                (1, rng.random_range(2..opts.ttl_ms / 5))
            } else {
                FAST_NETWORK_MS
            },
            lost_reply_pct: if on(rng) { rng.random_range(1..30) } else { 0 },
            lost_request_pct: if on(rng) { rng.random_range(1..30) } else { 0 },
            pause_permille: if on(rng) { rng.random_range(1..20) } else { 0 },
            crash_permille: if on(rng) { rng.random_range(1..10) } else { 0 },
            drift_ppm: if on(rng) { opts.max_drift_ppm } else { 0 },
            clock_jump_ms: if on(failovers) { opts.clock_jump_ms } else { 0 },
            jumps_beyond_grace: false,
            hint_dup_pct: if on(hints) {
                hints.random_range(1..30)
            } else {
                0
            },
            stream_drop_permille: if on(hints) {
                hints.random_range(1..20)
            } else {
                0
            },
            // Drawn last from the hints' stream, and only when configured: the seeds of
            // every other configuration draw what they drew before.
            late_hint_pct: if opts.late_hint_ms > 0 && on(hints) {
                hints.random_range(1..50)
            } else {
                0
            },
            late_hint_ms: opts.late_hint_ms,
            fair_clients: 0,
        };
        if opts.calm {
            // Drawn first and overridden, so the rest of the seed's stream is unchanged.
            mix.latency_ms = FAST_NETWORK_MS;
            mix.lost_reply_pct = 0;
            mix.lost_request_pct = 0;
            mix.pause_permille = 0;
            mix.clock_jump_ms = 0;
            mix.stream_drop_permille = 0;
        }
        mix.with_grace(opts.grace_ms)
    }

    /// Draws which clients of the seed acquire fairly: in `fair_seeds_pct` of the seeds,
    /// each client with `fair_clients_pct` chance, at least one.
    pub(crate) fn with_fair_clients(mut self, fair: &mut SimRng, opts: &Options) -> Self {
        let pct = |p: u32| f64::from(p.min(100)) / 100.0;
        if !fair.random_bool(pct(opts.fair_seeds_pct)) {
            return self;
        }
        let n = opts.clients.min(32);
        for c in 0..n {
            if fair.random_bool(pct(opts.fair_clients_pct)) {
                self.fair_clients |= 1 << c;
            }
        }
        if self.fair_clients == 0 && n > 0 {
            self.fair_clients = 1 << fair.random_range(0..n);
        }
        self
    }

    /// Whether client `c` acquires fairly.
    #[must_use]
    pub fn is_fair(&self, c: usize) -> bool {
        c < 32 && self.fair_clients & (1 << c) != 0
    }

    fn with_grace(mut self, grace_ms: u64) -> Self {
        self.jumps_beyond_grace = self.clock_jump_ms > grace_ms;
        self
    }
}

/// The latency range of a fast network, in ms.
const FAST_NETWORK_MS: (u64, u64) = (1, 3);

impl FaultMix {
    /// Whether this mix has a fault that can legitimately cost a held lease: a slow
    /// network, lost requests or replies, pauses, crashes, or failovers whose clock jumps
    /// exceed the takeover grace. Clock drift within the bound the drift margin covers
    /// cannot, nor can failovers within the grace, nor anything done to hints (they only
    /// wake waiters).
    #[must_use]
    pub fn can_cost_a_lease(&self) -> bool {
        self.latency_ms != FAST_NETWORK_MS
            || self.lost_reply_pct > 0
            || self.lost_request_pct > 0
            || self.pause_permille > 0
            || self.crash_permille > 0
            || self.jumps_beyond_grace
    }

    /// Whether this seed is checked for `handover_liveness`: a fast network that loses
    /// nothing, no pauses, no failovers (they move the store's clock, and with it the
    /// instant a crashed holder's lock is abandoned) and no dropped hint streams. Crashes
    /// are allowed (their locks are the takeover case), as are clock drift and duplicated or
    /// reordered hints.
    #[must_use]
    pub fn checks_handovers(&self) -> bool {
        self.latency_ms == FAST_NETWORK_MS
            && self.lost_reply_pct == 0
            && self.lost_request_pct == 0
            && self.pause_permille == 0
            && self.clock_jump_ms == 0
            && self.stream_drop_permille == 0
            && self.late_hint_pct == 0
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "latency {}-{} ms, lost replies {}%, lost requests {}%, pauses {}‰, crashes {}‰, drift ±{} ppm",
            self.latency_ms.0,
            self.latency_ms.1,
            self.lost_reply_pct,
            self.lost_request_pct,
            self.pause_permille,
            self.crash_permille,
            self.drift_ppm
        )?;
        if self.clock_jump_ms > 0 {
            write!(f, ", failovers (store clock ±{} ms)", self.clock_jump_ms)?;
        }
        write!(
            f,
            ", hints duplicated {}%, hint streams dropped {}‰",
            self.hint_dup_pct, self.stream_drop_permille
        )?;
        if self.late_hint_pct > 0 {
            write!(
                f,
                ", hints late {}% (up to {} ms)",
                self.late_hint_pct, self.late_hint_ms
            )?;
        }
        if self.fair_clients != 0 {
            let fair: Vec<usize> = (0..32).filter(|&c| self.is_fair(c)).collect();
            write!(f, "; fair clients {fair:?}")?;
        }
        if self.checks_handovers() {
            write!(f, " (handovers checked)")?;
        }
        Ok(())
    }
}

/// Faults injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Replies lost after the store applied the request.
    pub lost_replies: u64,
    /// Requests lost before they reached the store.
    pub lost_requests: u64,
    /// Client pauses longer than the TTL.
    pub pauses: u64,
    /// Client crashes.
    pub crashes: u64,
    /// Failovers of the store to a member with another clock.
    pub failovers: u64,
    /// Of those, the ones that moved the store's clock forward.
    pub clock_jumps_forward: u64,
    /// ... and back.
    pub clock_jumps_back: u64,
    /// Hints lost on their way to a client.
    pub lost_hints: u64,
    /// Hints delivered twice.
    pub duplicated_hints: u64,
    /// Hints delivered late (past the network's latency).
    pub late_hints: u64,
    /// Subscriptions to hints that ended under a client (the store dropped the stream, or
    /// the subscription never reached it).
    pub dropped_streams: u64,
    /// Partitions (elections only): a client cut off from the store for a while, every
    /// request, reply, hint and proclaim of its lost meanwhile.
    pub partitions: u64,
    /// Messages lost to partitions.
    pub partitioned_messages: u64,
}
