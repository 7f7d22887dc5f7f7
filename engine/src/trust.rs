//! The holding rule: how long a client may trust a lock it was granted.
//!
//! A client measures on its own monotonic clock from the moment it **sent** the request
//! (the server granted later, so the lease ends later than the client thinks), and stops
//! trusting the lock `drift_margin` before `sent + ttl`, to cover its clock running slower
//! than the server's. With clock-rate drift at most `rho`, a margin of at least
//! `ttl * rho / (1 - rho)` keeps two clients from both believing they hold conflicting
//! locks; the model checker proves it for its configurations and finds a counterexample
//! without the margin.

use std::time::Duration;

use crate::mutants::{self, Mutant};
use crate::time::Timestamp;
use crate::time::{LocalMs, Ttl, duration_millis};

/// The last instant (on the client's clock) at which a lock requested at `sent`
/// with `ttl` may still be trusted: `sent + ttl - drift_margin`, or `None` when the margin
/// eats the whole TTL (never trust it).
#[must_use]
pub fn trust_until(sent: LocalMs, ttl: Ttl, drift_margin: Duration) -> Option<LocalMs> {
    let margin = if mutants::active(Mutant::HolderWithoutMargin) {
        0
    } else {
        duration_millis(drift_margin)
    };
    let lease = ttl.as_millis().checked_sub(margin)?;
    if lease == 0 {
        return None;
    }
    Some(sent.saturating_add_millis(lease))
}

/// What a waiter knows when a wake says that the store handed its place a lock: the
/// input of [`trust_wake`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wake {
    /// An attempt of the waiter's own is in flight (its reply decides instead).
    pub in_flight: bool,
    /// The refusal that last kept the place kept it far back (the store hands such a
    /// place nothing).
    pub kept_far: bool,
    /// When (on the waiter's clock) it sent the attempt whose refusal last kept its place.
    pub kept_at: LocalMs,
    /// The highest fence that refusal and the wakes heard since accounted for.
    pub place_fence: u64,
    /// The handed lock's fence.
    pub fence: u64,
    /// The handed lock's creation, on the store's clock.
    pub created_at: Timestamp,
    /// The handed lock's end, on the store's clock, if the wake says.
    pub expires_at: Option<Timestamp>,
}

/// The waiter's side of [`trust_wake`]: how its places are leased and its locks renewed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WakeRule {
    /// The lease of a place, and so the claim lease of a lock handed to it.
    pub queue_ttl: Duration,
    /// The TTL the waiter asked for.
    pub ttl: Ttl,
    /// The share of a lease after which the waiter renews it.
    pub renew_fraction: f64,
    /// How much of a lease must be left for the store to renew it.
    pub renew_margin: Duration,
    /// The holding rule's drift margin.
    pub drift_margin: Duration,
}

/// How a waiter trusts a lock a wake handed it: the lease it trusts (the claim lease), the
/// local instant it measures from (the send time of the attempt whose refusal last kept its
/// place: the store answered that refusal before the handoff, so the handoff's claim lease
/// ends later than the waiter thinks) and the instant its trust ends ([`trust_until`]).
///
/// `None` (the wake only wakes the waiter, which claims the lock with its next attempt)
/// unless every guard holds:
/// - no attempt of its own is in flight (its reply decides: a grant claims the lock, and
///   a refusal may predate the handoff);
/// - the place was kept near (a place kept far back is handed nothing);
/// - the handed fence is above every fence the refusal and the wakes since accounted for
///   (a late wake of a handoff the waiter never claimed, before its place was taken anew,
///   has a lower one);
/// - the lease is the claim lease (or what the store says it handed, if shorter), never
///   more than the TTL asked for, and the trust left, and the lease left when the first
///   renewal falls due, are longer than the renew margin (the claim must be renewable).
///
/// A wake that carries a grant is trusted with no request of the waiter's own, so these
/// guards are safety: each has a mutant that the model checker and the simulator kill.
#[must_use]
pub fn trust_wake(wake: &Wake, rule: &WakeRule, now: LocalMs) -> Option<(Ttl, LocalMs, LocalMs)> {
    let in_flight = wake.in_flight && !mutants::active(Mutant::LockerTrustsWakeInFlight);
    // (A place kept far back is handed nothing by the store, whatever its clock does: this
    // check is a second line, against a store that would, and has no mutant of its own,
    // which no harness could tell from the shipped rule.)
    let old =
        wake.fence <= wake.place_fence && !mutants::active(Mutant::LockerTrustsWakeOfOldFence);
    if in_flight || wake.kept_far || old {
        return None;
    }
    let mut lease = rule.queue_ttl.min(rule.ttl.as_duration());
    if mutants::active(Mutant::LockerTrustsWakeForTtl) {
        lease = rule.ttl.as_duration();
    } else if let Some(expires) = wake.expires_at {
        lease = lease.min(Duration::from_millis(
            expires
                .as_millis()
                .saturating_sub(wake.created_at.as_millis()),
        ));
    }
    let since = if mutants::active(Mutant::LockerTrustsWakeOnArrival) {
        now
    } else {
        wake.kept_at
    };
    // Its first renewal, due at `renew_fraction` of the lease, must find more than the
    // renew margin left, or the store would refuse to renew (claim) it.
    if lease.mul_f64(1.0 - rule.renew_fraction) <= rule.renew_margin {
        return None;
    }
    let lease = Ttl::new(lease).ok()?;
    let until = trust_until(since, lease, rule.drift_margin)?;
    if now.saturating_add(rule.renew_margin) >= until {
        return None;
    }
    Some((lease, since, until))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusts_until_sent_plus_ttl_minus_margin() {
        let ttl = Ttl::new(Duration::from_millis(100)).unwrap();
        let sent = LocalMs::from_millis(1_000);
        assert_eq!(
            trust_until(sent, ttl, Duration::from_millis(10)),
            Some(LocalMs::from_millis(1_090))
        );
        assert_eq!(trust_until(sent, ttl, Duration::from_millis(100)), None);
        assert_eq!(trust_until(sent, ttl, Duration::from_secs(1)), None);
    }
}
