//! The fair requests' grant rules, through the lock table: order, dead places, writer
//! preference, limits, leaving, and what a refusal reports.

use std::time::Duration;

use crate::{
    Access, Error, LockId, LockOptions, LockRequest, LockTable, Queued, SharedLimit, Ticket,
    Timestamp,
};

const T0: Timestamp = Timestamp::from_millis(1_000_000);

fn at(ms: u64) -> Timestamp {
    T0.saturating_add(Duration::from_millis(ms))
}

fn fair(lock_id: &str, ticket: &str) -> LockRequest {
    let details = LockOptions::new().ttl(Duration::from_secs(10));
    LockRequest::new("r", lock_id, &details)
        .unwrap()
        .fair(Ticket::new(LockId::new(ticket).unwrap(), Duration::from_secs(3)).unwrap())
}

fn plain(lock_id: &str) -> LockRequest {
    LockRequest::new(
        "r",
        lock_id,
        &LockOptions::new().ttl(Duration::from_secs(10)),
    )
    .unwrap()
}

fn ahead_of(e: Error) -> Option<u32> {
    match e {
        Error::AlreadyLocked { queued, .. } => queued.map(|q| q.ahead),
        other => panic!("not a refusal: {other}"),
    }
}

#[test]
fn debug_never_shows_a_ticket() {
    let ticket = Ticket::new(
        LockId::new("secret-ticket-42").unwrap(),
        Duration::from_secs(3),
    );
    let request = plain("lock").fair(ticket.unwrap());
    for shown in [format!("{:?}", request.fair), format!("{request:?}")] {
        assert!(!shown.contains("secret-ticket-42"), "{shown}");
    }
    let e = LockId::new("x".repeat(300)).unwrap_err();
    assert!(!format!("{e} {e:?}").contains("xxxx"), "{e:?}");
}

#[test]
fn waiters_are_granted_in_order() {
    let mut t = LockTable::new();
    t.lock(&plain("holder"), at(0)).unwrap();
    assert_eq!(
        ahead_of(t.lock(&fair("a", "ta"), at(1)).unwrap_err()),
        Some(0)
    );
    assert_eq!(
        ahead_of(t.lock(&fair("b", "tb"), at(2)).unwrap_err()),
        Some(1)
    );
    t.unlock(&LockId::new("holder").unwrap(), at(3));
    // b asks first after the release, but a is ahead: refused, its place kept.
    assert_eq!(
        ahead_of(t.lock(&fair("b", "tb"), at(4)).unwrap_err()),
        Some(1)
    );
    // A request that is not fair does not overtake either, and takes no place.
    assert_eq!(ahead_of(t.lock(&plain("c"), at(4)).unwrap_err()), None);
    t.lock(&fair("a", "ta"), at(5)).unwrap();
    let state = t.resource(&"r".try_into().unwrap()).unwrap();
    assert_eq!(state.queue.len(), 1, "the grant removed the winner's place");
    t.unlock(&LockId::new("a").unwrap(), at(6));
    t.lock(&fair("b", "tb"), at(7)).unwrap();
}

#[test]
fn a_dead_place_blocks_nobody() {
    let mut t = LockTable::new();
    t.lock(&plain("holder"), at(0)).unwrap();
    t.lock(&fair("a", "ta"), at(1)).unwrap_err();
    t.unlock(&LockId::new("holder").unwrap(), at(2));
    // a's place lapses at 3,001 ms: until then b waits, then it goes.
    let e = t.lock(&fair("b", "tb"), at(3_000)).unwrap_err();
    assert!(
        matches!(e, Error::AlreadyLocked { retry_in: Some(d), .. } if d == Duration::from_millis(1))
    );
    t.lock(&fair("b", "tb"), at(3_001)).unwrap();
    assert!(
        t.resource(&"r".try_into().unwrap())
            .unwrap()
            .queue
            .is_empty()
    );
}

#[test]
fn a_waiting_writer_holds_back_later_readers() {
    let mut t = LockTable::new();
    t.lock(&plain("r1").with_access(Access::Shared(None)), at(0))
        .unwrap();
    t.lock(&fair("w", "tw"), at(1)).unwrap_err();
    // A reader after the writer waits behind it, fair or not.
    assert_eq!(
        ahead_of(
            t.lock(&fair("r2", "t2").with_access(Access::Shared(None)), at(2))
                .unwrap_err()
        ),
        Some(1)
    );
    t.lock(&plain("r3").with_access(Access::Shared(None)), at(2))
        .unwrap_err();
    t.unlock(&LockId::new("r1").unwrap(), at(3));
    t.lock(&fair("w", "tw"), at(4)).unwrap();
    t.unlock(&LockId::new("w").unwrap(), at(5));
    t.lock(&fair("r2", "t2").with_access(Access::Shared(None)), at(6))
        .unwrap();
}

#[test]
fn readers_ahead_hold_their_slots_under_a_limit() {
    let limit = Some(SharedLimit::new(2).unwrap());
    let mut t = LockTable::new();
    t.lock(&plain("h1").with_access(Access::Shared(limit)), at(0))
        .unwrap();
    t.lock(&plain("h2").with_access(Access::Shared(limit)), at(0))
        .unwrap();
    t.lock(&fair("a", "ta").with_access(Access::Shared(limit)), at(1))
        .unwrap_err();
    t.unlock(&LockId::new("h1").unwrap(), at(2));
    // One slot: a's. A later shared ask waits; without a limit it would not.
    t.lock(&fair("b", "tb").with_access(Access::Shared(limit)), at(3))
        .unwrap_err();
    t.lock(&plain("c").with_access(Access::Shared(None)), at(3))
        .unwrap();
    t.lock(&fair("a", "ta").with_access(Access::Shared(limit)), at(4))
        .unwrap_err(); // c took the slot
    t.unlock(&LockId::new("c").unwrap(), at(5));
    t.lock(&fair("a", "ta").with_access(Access::Shared(limit)), at(6))
        .unwrap();
}

#[test]
fn leaving_the_queue_lets_the_next_one_in() {
    let mut t = LockTable::new();
    t.lock(&plain("holder"), at(0)).unwrap();
    t.lock(&fair("a", "ta"), at(1)).unwrap_err();
    t.lock(&fair("b", "tb"), at(1)).unwrap_err();
    assert!(t.leave_queue(&"r".try_into().unwrap(), &LockId::new("ta").unwrap(), at(2)));
    t.unlock(&LockId::new("holder").unwrap(), at(3));
    t.lock(&fair("b", "tb"), at(4)).unwrap();
}

#[test]
fn a_refusal_says_when_dead_places_end() {
    let mut t = LockTable::new();
    t.lock(&fair("a", "ta"), at(0)).unwrap();
    t.lock(&fair("b", "tb"), at(0)).unwrap_err();
    t.unlock(&LockId::new("a").unwrap(), at(1));
    // b's place lives until 3,000 ms: c may go then.
    let e = t.lock(&fair("c", "tc"), at(10)).unwrap_err();
    assert!(
        matches!(e, Error::AlreadyLocked { retry_in: Some(d), queued: Some(Queued { ahead: 1, .. }), .. } if d == Duration::from_millis(2_990))
    );
}
