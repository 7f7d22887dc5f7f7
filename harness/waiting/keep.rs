//! `keep_place/P`: what one keep-place write costs when P places wait in a line that does
//! not move (a lock held by another client for the whole run). The waiters' fair requests
//! are sent by one store, in turn (each keeps its place: refused, its lease renewed), so
//! what is measured is the store's write alone: its latency, and the server's CPU time per
//! write where the server reports it. A line of waiters far back costs the server P writes
//! like these every keep-place interval, so this is the figure that says how that cost
//! grows with the line.

use std::time::{Duration, Instant};

use lockwright_benches::quantile;
use lockwright_engine::{Error, LockId, LockStore, Ticket};

use crate::fleets::Fleet;
use crate::idle::IDLE_TTL;
use crate::measures::{ms, request};
use crate::tally::Counter;

/// `keep_place/P`: see the module's docs. `rounds` writes, spread over the places in turn.
pub async fn keep_place<F: Fleet>(fleet: &F, places: usize, rounds: usize) -> String {
    let store = fleet.store(&Counter::default()).await;
    let resource = format!("keep_place/{places}");
    store
        .lock(&request(&resource, "blocker", IDLE_TTL))
        .await
        .unwrap();
    let requests: Vec<_> = (0..places)
        .map(|i| {
            let ticket = Ticket::new(LockId::new(format!("place-{i}")).unwrap(), IDLE_TTL).unwrap();
            request(&resource, &format!("waiter-{i}"), IDLE_TTL).fair(ticket)
        })
        .collect();
    let refused = async |i: usize| {
        let refusal = store.lock(&requests[i % places]).await;
        assert!(
            matches!(
                refusal,
                Err(Error::AlreadyLocked {
                    queued: Some(_),
                    ..
                })
            ),
            "the line far back never moves: {refusal:?}"
        );
    };
    for i in 0..places {
        refused(i).await;
    }
    let cpu_before = fleet.server_cpu().await;
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let start = Instant::now();
        refused(i).await;
        times.push(ms(start.elapsed()));
    }
    let cpu_after = fleet.server_cpu().await;
    let cpu = cpu_before
        .zip(cpu_after)
        .map(|(before, after)| after.saturating_sub(before));
    let cpu = cpu.map_or_else(
        || "server CPU n/a".to_string(),
        |cpu: Duration| {
            format!(
                "server CPU {:.3} ms per write",
                ms(cpu) / rounds.max(1) as f64
            )
        },
    );
    format!(
        "{places} places, {rounds} keep-place writes: p50 {:.2} ms, p99 {:.2} ms, {cpu}",
        quantile(&times, 0.5),
        quantile(&times, 0.99),
    )
}
