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

fn state(t: &LockTable) -> &crate::ResourceState {
    t.resource(&"r".try_into().unwrap()).unwrap()
}

/// The exclusive holder's lock id and expiry.
fn exclusive(t: &LockTable) -> Option<(String, Option<Timestamp>)> {
    let l = state(t).exclusive.as_ref()?;
    Some((l.lock_id.as_str().to_owned(), l.expires_at))
}

#[test]
fn a_release_hands_the_lock_to_the_head_of_the_line() {
    let mut t = LockTable::new();
    let f0 = t.lock(&plain("holder"), at(0)).unwrap().fence;
    assert_eq!(
        ahead_of(t.lock(&fair("a", "ta"), at(1)).unwrap_err()),
        Some(0)
    );
    assert_eq!(
        ahead_of(t.lock(&fair("b", "tb"), at(2)).unwrap_err()),
        Some(1)
    );
    t.unlock(&LockId::new("holder").unwrap(), at(3));
    // The release handed the lock to a, with a claim lease of its place's lease (3 s)
    // from the handoff, and removed a's place.
    assert_eq!(exclusive(&t), Some(("a".to_owned(), Some(at(3_003)))));
    let handed = t.take_handed();
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].ticket.as_str(), "ta");
    let fa = handed[0].status.fence;
    assert!(fa > f0);
    assert_eq!(state(&t).queue.len(), 1);
    // b asks: a holds the lock, and b is now first.
    assert_eq!(
        ahead_of(t.lock(&fair("b", "tb"), at(4)).unwrap_err()),
        Some(0)
    );
    // A request that is not fair does not overtake either, and takes no place.
    assert_eq!(ahead_of(t.lock(&plain("c"), at(4)).unwrap_err()), None);
    // a claims its lock with its next request: the grant, its TTL from now, the fence of
    // the handoff.
    let claimed = t.lock(&fair("a", "ta"), at(5)).unwrap();
    assert_eq!((claimed.fence, claimed.expires_at), (fa, Some(at(10_005))));
    assert_eq!(claimed.renewed_at, Some(at(5)));
    // Asking again claims again (a retry after a lost reply): the same lock, renewed.
    let again = t.lock(&fair("a", "ta"), at(6)).unwrap();
    assert_eq!((again.fence, again.expires_at), (fa, Some(at(10_006))));
    // Not fair, the same lock id is refused: grants are not re-entrant.
    t.lock(&plain("a"), at(6)).unwrap_err();
    t.unlock(&LockId::new("a").unwrap(), at(7));
    assert_eq!(exclusive(&t), Some(("b".to_owned(), Some(at(3_007)))));
    assert!(state(&t).queue.is_empty());
    assert!(t.lock(&fair("b", "tb"), at(8)).unwrap().fence > fa);
}

#[test]
fn a_dead_head_costs_its_claim_lease_and_dead_places_nobody() {
    let mut t = LockTable::new();
    t.lock(&plain("holder"), at(0)).unwrap();
    t.lock(&fair("a", "ta"), at(1)).unwrap_err();
    t.lock(&fair("b", "tb"), at(2)).unwrap_err();
    t.lock(&fair("c", "tc"), at(3)).unwrap_err();
    // Only c keeps its place; a's lapses at 3,001 ms and b's at 3,002.
    t.lock(&fair("c", "tc"), at(2_000)).unwrap_err();
    t.unlock(&LockId::new("holder").unwrap(), at(3_001));
    // a's place is dead and skipped; b is handed the lock, though it will never claim it.
    assert_eq!(exclusive(&t), Some(("b".to_owned(), Some(at(6_001)))));
    // c keeps its place and waits out b's claim lease.
    let e = t.lock(&fair("c", "tc"), at(4_000)).unwrap_err();
    assert!(
        matches!(e, Error::AlreadyLocked { retry_in: Some(d), .. } if d == Duration::from_millis(2_001)),
        "{e:?}"
    );
    // The first write after b's lease (no grace here) hands the lock on to c, and c's
    // own request claims it.
    let granted = t.lock(&fair("c", "tc"), at(6_001)).unwrap();
    assert_eq!(granted.lock_id.as_str(), "c");
    assert!(state(&t).queue.is_empty());
    // b comes back too late: its place is gone, it takes a new one at the back.
    assert_eq!(
        ahead_of(t.lock(&fair("b", "tb"), at(6_002)).unwrap_err()),
        Some(0)
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
    t.lock(&fair("r3", "t3").with_access(Access::Shared(None)), at(2))
        .unwrap_err();
    t.lock(&plain("r4").with_access(Access::Shared(None)), at(2))
        .unwrap_err();
    t.unlock(&LockId::new("r1").unwrap(), at(3));
    assert_eq!(exclusive(&t).unwrap().0, "w");
    let fw = t.lock(&fair("w", "tw"), at(4)).unwrap().fence;
    // The writer's release hands the lock to both readers behind it, each with its fence.
    t.unlock(&LockId::new("w").unwrap(), at(5));
    let shared: Vec<_> = state(&t)
        .shared
        .iter()
        .map(|l| (l.lock_id.as_str().to_owned(), l.fence))
        .collect();
    assert_eq!(shared.len(), 2);
    assert_eq!((shared[0].0.as_str(), shared[1].0.as_str()), ("r2", "r3"));
    assert!(fw < shared[0].1 && shared[0].1 < shared[1].1);
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
    t.lock(&fair("b", "tb").with_access(Access::Shared(limit)), at(1))
        .unwrap_err();
    // One slot comes free: a is handed it, and b (the limit reached) waits.
    t.unlock(&LockId::new("h1").unwrap(), at(2));
    let holders: Vec<_> = state(&t)
        .shared
        .iter()
        .map(|l| l.lock_id.as_str())
        .collect();
    assert_eq!(holders, ["h2", "a"]);
    assert_eq!(
        ahead_of(
            t.lock(&fair("b", "tb").with_access(Access::Shared(limit)), at(3))
                .unwrap_err()
        ),
        Some(0)
    );
    // Without a limit, a reader is not held back by readers ahead.
    t.lock(&plain("c").with_access(Access::Shared(None)), at(3))
        .unwrap();
    t.lock(&fair("a", "ta").with_access(Access::Shared(limit)), at(4))
        .unwrap();
    // Two slots free, one of them counted by c: b is handed one when h2 goes.
    t.unlock(&LockId::new("c").unwrap(), at(5));
    assert_eq!(state(&t).shared.len(), 2);
    t.unlock(&LockId::new("h2").unwrap(), at(6));
    assert!(state(&t).shared.iter().any(|l| l.lock_id.as_str() == "b"));
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
    let short = LockOptions::new().ttl(Duration::from_secs(1));
    t.lock(&LockRequest::new("r", "h", &short).unwrap(), at(0))
        .unwrap();
    t.lock(&fair("b", "tb"), at(0)).unwrap_err();
    // The lock ends at 1,000 ms, but b's place lives until 3,000 ms: c may go then.
    let e = t.lock(&fair("c", "tc"), at(10)).unwrap_err();
    assert!(
        matches!(e, Error::AlreadyLocked { retry_in: Some(d), queued: Some(Queued { ahead: 1, .. }), .. } if d == Duration::from_millis(2_990)),
        "{e:?}"
    );
}
