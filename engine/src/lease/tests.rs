//! The lease schedule, step by step on a manual clock.

use super::*;

fn schedule() -> LeaseSchedule {
    let config = LeaseConfig::new(
        0.5,
        Duration::from_millis(100),
        3,
        Duration::from_millis(50),
    )
    .unwrap();
    LeaseSchedule::new(config)
}

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

fn at(ms: u64) -> LocalMs {
    LocalMs::from_millis(ms)
}

fn id() -> LockId {
    LockId::new("k").unwrap()
}

#[test]
fn renews_at_the_fraction_and_extends_from_the_send_time() {
    let mut s = schedule();
    s.insert(1, id(), ttl(1_000), at(0)).unwrap();
    assert_eq!(s.trust_until(1), Some(at(900)));
    assert_eq!(s.next_wakeup(), Some(at(500)));
    assert!(s.poll(at(499)).is_empty());
    assert_eq!(
        s.poll(at(500)),
        vec![LeaseEvent::Renew {
            key: 1,
            lock_id: id(),
            ttl: ttl(1_000)
        }]
    );
    assert_eq!(
        s.next_wakeup(),
        Some(at(900)),
        "while in flight, the next deadline is the validity end"
    );
    s.renewed(1, at(500));
    assert_eq!(s.trust_until(1), Some(at(1_400)));
    assert_eq!(s.next_wakeup(), Some(at(1_000)));
}

#[test]
fn loses_the_lease_when_validity_runs_out_during_a_slow_renewal() {
    let mut s = schedule();
    s.insert(1, id(), ttl(1_000), at(0)).unwrap();
    s.poll(at(500));
    assert_eq!(
        s.poll(at(900)),
        vec![LeaseEvent::Lost {
            key: 1,
            cause: LostCause::Expired
        }]
    );
    assert!(s.is_empty());
    s.renewed(1, at(500)); // the late reply changes nothing
    assert!(s.is_empty());
}

#[test]
fn retries_transient_failures_a_bounded_number_of_times() {
    let mut s = schedule();
    s.insert(1, id(), ttl(1_000), at(0)).unwrap();
    s.poll(at(500));
    assert_eq!(s.renew_failed(1, false, at(510)), None);
    assert_eq!(s.next_wakeup(), Some(at(560)));
    assert_eq!(s.poll(at(560)).len(), 1);
    assert_eq!(s.renew_failed(1, false, at(570)), None);
    assert_eq!(s.poll(at(620)).len(), 1);
    assert_eq!(
        s.renew_failed(1, false, at(630)),
        Some(LeaseEvent::Lost {
            key: 1,
            cause: LostCause::Expired
        })
    );
}

#[test]
fn a_refusal_loses_the_lease_at_once() {
    let mut s = schedule();
    s.insert(7, id(), ttl(1_000), at(0)).unwrap();
    s.poll(at(500));
    assert_eq!(
        s.renew_failed(7, true, at(505)),
        Some(LeaseEvent::Lost {
            key: 7,
            cause: LostCause::Refused
        })
    );
    assert_eq!(s.next_wakeup(), None);
}

#[test]
fn rejects_bad_configuration_and_ttls_within_the_margin() {
    assert!(LeaseConfig::new(1.0, Duration::ZERO, 1, Duration::from_millis(1)).is_err());
    assert!(LeaseConfig::new(0.5, Duration::ZERO, 0, Duration::from_millis(1)).is_err());
    let mut s = schedule();
    assert!(s.insert(1, id(), ttl(100), at(0)).is_err());
}

#[test]
fn renewals_due_within_the_batch_fraction_join_a_due_one() {
    let config = LeaseConfig::new(
        0.5,
        Duration::from_millis(100),
        3,
        Duration::from_millis(50),
    )
    .unwrap()
    .with_batch_fraction(0.1)
    .unwrap();
    let mut s = LeaseSchedule::new(config);
    s.insert(1, id(), ttl(1_000), at(0)).unwrap(); // due at 500
    s.insert(2, id(), ttl(1_000), at(60)).unwrap(); // due at 560: within 100 of 500
    s.insert(3, id(), ttl(1_000), at(150)).unwrap(); // due at 650: not
    let keys = |events: Vec<LeaseEvent>| -> Vec<LeaseKey> {
        events
            .into_iter()
            .map(|e| match e {
                LeaseEvent::Renew { key, .. } | LeaseEvent::Lost { key, .. } => key,
            })
            .collect()
    };
    assert!(
        s.poll(at(499)).is_empty(),
        "nothing joins before something is due"
    );
    assert_eq!(keys(s.poll(at(500))), [1, 2]);
    assert_eq!(s.next_wakeup(), Some(at(650)));
    assert!(
        LeaseConfig::new(0.5, Duration::ZERO, 1, Duration::from_millis(1))
            .unwrap()
            .with_batch_fraction(0.6)
            .is_err()
    );
}

#[test]
fn one_index_orders_many_leases() {
    let mut s = schedule();
    for k in 0..1_000 {
        s.insert(k, id(), ttl(1_000 + k), at(0)).unwrap();
    }
    assert_eq!(s.next_wakeup(), Some(at(500)));
    assert_eq!(
        s.poll(at(500)).len(),
        2,
        "ttl 1000 and 1001 are both due at 500"
    );
    assert_eq!(s.len(), 1_000);
}
