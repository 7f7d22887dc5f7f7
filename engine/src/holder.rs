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
