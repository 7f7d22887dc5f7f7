//! What the client and the `Locker` record through the [`metrics`] facade: nothing is
//! exported unless the application installs a recorder (an exporter such as
//! `metrics-exporter-prometheus`), and recording without one costs a few atomic loads.
//!
//! Names follow the Prometheus conventions (`_total` counters, `_seconds` histograms, base
//! units). Labels are closed vocabularies (operation, outcome, mode, cause), plus the
//! resource's name only where the client opted in ([`Client::with_resource_labels`]:
//! resource names can be many, and each is a time series); never a lock id.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `lockwright_operations_total` | counter | `operation`, `outcome` (, `resource`) | store operations, by what they returned |
//! | `lockwright_operation_duration_seconds` | histogram | `operation` | their round trips, renewals included |
//! | `lockwright_acquires_total` | counter | `mode`, `outcome` (, `resource`) | `Locker` acquires that ended, granted or not |
//! | `lockwright_acquire_wait_seconds` | histogram | `mode` (, `resource`) | from an acquire's call to its grant |
//! | `lockwright_hold_seconds` | histogram | `mode` (, `resource`) | from a grant to the end of its lease, however it ended |
//! | `lockwright_handover_seconds` | histogram | (`resource`) | from a release by a `Locker` to its next grant of the same resource |
//! | `lockwright_renewal_lag_seconds` | histogram | | from when a renewal fell due to its confirmation |
//! | `lockwright_locks_lost_total` | counter | `cause` (, `resource`) | leases that ended without a release: `refused`, `expired` |
//! | `lockwright_waiting_acquires` | gauge | | acquires waiting now |
//! | `lockwright_held_leases` | gauge | | leases held now |
//! | `lockwright_hints_total` | counter | | wake-up hints the `Locker`s heard from their stores |
//! | `lockwright_hint_streams_total` | counter | `event` | hint subscriptions `opened` and `ended` (each end is followed by a reopening while acquires wait) |
//!
//! These are one process's view. The state every client of a collection shares (held and
//! abandoned locks, fair waiters, the longest wait, per resource) is read from the store by
//! [`Client::summary`] in one read, and exported as gauges by `lockwright status
//! --prometheus`.
//!
//! [`Client::with_resource_labels`]: crate::Client::with_resource_labels
//! [`Client::summary`]: crate::Client::summary

use std::time::Duration;

use lockwright_engine::{Error, Mode, Resource};
use metrics::{Label, counter, gauge, histogram};

pub(crate) const OPERATIONS: &str = "lockwright_operations_total";
pub(crate) const OPERATION_SECONDS: &str = "lockwright_operation_duration_seconds";
pub(crate) const ACQUIRES: &str = "lockwright_acquires_total";
pub(crate) const ACQUIRE_WAIT: &str = "lockwright_acquire_wait_seconds";
pub(crate) const HOLD: &str = "lockwright_hold_seconds";
pub(crate) const HANDOVER: &str = "lockwright_handover_seconds";
pub(crate) const RENEWAL_LAG: &str = "lockwright_renewal_lag_seconds";
pub(crate) const LOST: &str = "lockwright_locks_lost_total";
pub(crate) const WAITING: &str = "lockwright_waiting_acquires";
pub(crate) const HELD: &str = "lockwright_held_leases";
pub(crate) const HINTS: &str = "lockwright_hints_total";
pub(crate) const HINT_STREAMS: &str = "lockwright_hint_streams_total";

/// How a client labels what it records: with resource names or without.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Labels {
    pub(crate) resources: bool,
}

impl Labels {
    /// `labels`, and the resource's name when opted in and known.
    fn with(self, mut labels: Vec<Label>, resource: Option<&Resource>) -> Vec<Label> {
        if self.resources
            && let Some(r) = resource
        {
            labels.push(Label::new("resource", r.as_str().to_owned()));
        }
        labels
    }

    /// One store operation's outcome and round trip.
    pub(crate) fn operation<T>(
        self,
        operation: &'static str,
        resource: Option<&Resource>,
        result: &Result<T, Error>,
        took: Duration,
    ) {
        self.operation_outcome(operation, resource, result.as_ref().map(|_| ()), took);
    }

    /// As [`Labels::operation`], from the outcome alone.
    pub(crate) fn operation_outcome(
        self,
        operation: &'static str,
        resource: Option<&Resource>,
        result: Result<(), &Error>,
        took: Duration,
    ) {
        let outcome = match result {
            Ok(()) => "ok",
            Err(e) => outcome(e),
        };
        let labels = self.with(
            vec![
                Label::new("operation", operation),
                Label::new("outcome", outcome),
            ],
            resource,
        );
        counter!(OPERATIONS, labels).increment(1);
        histogram!(OPERATION_SECONDS, "operation" => operation).record(took);
    }

    /// A `Locker` acquire that ended: granted after `waited`, or not (the `outcome` label:
    /// the error's, or `cancelled`).
    pub(crate) fn acquire(
        self,
        mode: Mode,
        resource: &Resource,
        result: Result<(), &'static str>,
        waited: Duration,
    ) {
        let outcome = match result {
            Ok(()) => "granted",
            Err(why) => why,
        };
        let labels = self.with(
            vec![
                Label::new("mode", mode_name(mode)),
                Label::new("outcome", outcome),
            ],
            Some(resource),
        );
        counter!(ACQUIRES, labels).increment(1);
        if result.is_ok() {
            let labels = self.with(vec![Label::new("mode", mode_name(mode))], Some(resource));
            histogram!(ACQUIRE_WAIT, labels).record(waited);
        }
    }

    /// A lease that ended after `held`; `lost` names why, when it was not released.
    pub(crate) fn ended(
        self,
        mode: Mode,
        resource: &Resource,
        held: Duration,
        lost: Option<&'static str>,
    ) {
        let labels = self.with(vec![Label::new("mode", mode_name(mode))], Some(resource));
        histogram!(HOLD, labels).record(held);
        if let Some(cause) = lost {
            let labels = self.with(vec![Label::new("cause", cause)], Some(resource));
            counter!(LOST, labels).increment(1);
        }
    }

    /// A grant `took` after this Locker released the same resource.
    pub(crate) fn handover(self, resource: &Resource, took: Duration) {
        histogram!(HANDOVER, self.with(Vec::new(), Some(resource))).record(took);
    }
}

/// A renewal confirmed `lag` after it fell due.
pub(crate) fn renewal_lag(lag: Duration) {
    histogram!(RENEWAL_LAG).record(lag);
}

/// The `Locker`'s waiting acquires and held leases now.
pub(crate) fn gauges(waiting: usize, held: u64) {
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    {
        gauge!(WAITING).set(waiting as f64);
        gauge!(HELD).set(held as f64);
    }
}

/// A hint heard from the store.
pub(crate) fn hint() {
    counter!(HINTS).increment(1);
}

/// A hint subscription `opened` or `ended`.
pub(crate) fn hint_stream(event: &'static str) {
    counter!(HINT_STREAMS, "event" => event).increment(1);
}

/// The `outcome` label of an error: its variant, in snake case.
pub(crate) fn outcome(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { .. } => "invalid_argument",
        Error::AlreadyLocked { .. } => "already_locked",
        Error::LockNotFound => "lock_not_found",
        Error::NotRenewable { .. } => "not_renewable",
        Error::Shutdown => "shutdown",
        Error::Timeout { .. } => "timeout",
        Error::StaleGrant { .. } => "stale_grant",
        Error::NoReply { .. } => "no_reply",
        Error::Malformed { .. } => "malformed",
        Error::Misconfigured { .. } => "misconfigured",
        Error::Backend { .. } => "backend",
        Error::Skipped { .. } => "skipped",
        Error::PurgeIncomplete { .. } => "purge_incomplete",
        Error::Fenced { .. } => "fenced",
        _ => "other",
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}
