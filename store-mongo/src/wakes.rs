//! Wakes: how a hand-over reaches the process of the waiter it was handed to.
//!
//! MongoDB wakes every open change-stream cursor on every write to the deployment, filtered
//! or not, so a change stream per waiting process makes the server's work per write grow
//! with the number of processes. The store listens elsewhere. A write that hands a lock
//! over says so in the document it writes (`wake`: the command's nonce and the tags of the
//! places handed the lock, see `pipeline::queue`), and the writer, which reads that
//! document back (or, for a release, replays it with the engine), inserts one small
//! document per handed place into a capped collection, `<collection>.wakes.<k>`: `k` (one
//! of [`SHARDS`]) is the last hex digit of the tag of the store whose waiter holds the
//! place. A store with a waiter near the head of a line keeps one tailable cursor that
//! awaits inserts on its own shard, filtered on its tag (module `hints`).
//!
//! The server wakes such a cursor only for inserts into its shard: hand-overs to the stores
//! of that shard, about one in [`SHARDS`] of all hand-overs. Lock writes, renewals and the
//! waiters' keep-place writes wake nobody. A wake is a hint: one that is lost (the writer
//! died between its write and its insert, the insert failed, the cursor fell behind) costs
//! time, never safety, for the waiter's next keep-place attempt claims what it was handed.
//!
//! A wake document holds the store's tag (`s`), the place's tag (`p`, 64 bits of a hash of
//! the ticket: [`LockId::place_tag`]), the resource's name (`r`), and what the place was
//! handed: the grant's fence (`f`), when it was handed (`c`) and when its claim lease ends
//! (`e`, absent for a lock without a TTL). The waiter then holds the lock at once, without
//! asking (the engine's `locker::fair`). No lock id or ticket is ever written there. A store lists the shards that exist once, and creates the
//! others on first use (capped, 64 KiB each, with one document in them: a tailable cursor
//! on an empty capped collection dies at once). Wakes are inserted with acknowledgement by
//! the primary alone (`w: 1`): a wake that a failover loses is a wake lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use mongodb::bson::{Bson, Document, doc};
use mongodb::options::{Acknowledgment, WriteConcern};
use mongodb::{Collection, Database};

use lockwright_engine::election::Leader;
use lockwright_engine::table::Handed;
use lockwright_engine::{HandedLock, LockTable, Mode, Resource, StoredLock, Timestamp};

use crate::failure::MongoFailure;
use crate::schema::{self, QUEUE, TAG, TICKET, WAKE};
use crate::setup::command_code;

/// How many capped collections the wakes are spread over (one per hex digit).
pub(crate) const SHARDS: usize = 16;
/// The collection of the news of leaders, `<collection>.wakes.leaders`, numbered after the
/// shards: every observing process tails it whole (see [`Wakes::announce`]).
pub(crate) const LEADERS: usize = SHARDS;
/// A leader's news's value (absent when it proclaimed none); its resource, fence,
/// since-when and the end of the lease it was granted are a wake's `r`, `f`, `c` and `e`.
pub(crate) const VALUE: &str = "v";
/// The size of each capped collection: some 600 wakes.
const SHARD_BYTES: u64 = 64 * 1024;
/// A wake's fields: the tag of the store that waits, of the place, the resource, and the
/// grant's fence, creation and expiry.
pub(crate) const STORE: &str = "s";
pub(crate) const PLACE: &str = "p";
pub(crate) const RESOURCE: &str = "r";
pub(crate) const FENCE: &str = "f";
pub(crate) const CREATED: &str = "c";
pub(crate) const EXPIRES: &str = "e";

/// One wake to send: the place's tag (`<store>.<place>`, as the place records it) and what
/// it was handed, when the writer knows (and, for an exclusive lock, the leadership it
/// carries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wake {
    pub(crate) place: String,
    pub(crate) grant: Option<HandedLock>,
    pub(crate) leader: Option<Leader>,
}
/// NamespaceExists: the shard was created by somebody else.
const NAMESPACE_EXISTS: i32 = 48;

/// The shard a store's wakes go to, by its tag (hexadecimal; anything else goes to 0).
pub(crate) fn shard_of(store_tag: &str) -> usize {
    store_tag
        .chars()
        .next_back()
        .and_then(|c| c.to_digit(16))
        .map_or(0, |d| d as usize % SHARDS)
}

/// The wake collections of one lock collection.
#[derive(Debug)]
pub(crate) struct Wakes {
    db: Database,
    /// The lock collection's name: the shards are `<name>.wakes.<k>`.
    name: String,
    /// The shards known to exist (created here, or found), and the leaders' collection.
    ready: Mutex<[bool; SHARDS + 1]>,
    /// Whether the shards that exist were listed (once: one `listCollections` in place of
    /// a `create` per shard this store writes to or listens on).
    listed: AtomicBool,
}

impl Wakes {
    pub(crate) fn new(coll: &Collection<Document>) -> Self {
        let ns = coll.namespace();
        Wakes {
            db: coll.client().database(&ns.db),
            name: ns.coll,
            ready: Mutex::new([false; SHARDS + 1]),
            listed: AtomicBool::new(false),
        }
    }

    /// The name of shard `k` (of the leaders' collection for [`LEADERS`]).
    pub(crate) fn shard_name(&self, k: usize) -> String {
        if k == LEADERS {
            format!("{}.wakes.leaders", self.name)
        } else {
            format!("{}.wakes.{k:x}", self.name)
        }
    }

    /// The names of every shard, and of the leaders' collection.
    pub(crate) fn shard_names(&self) -> Vec<String> {
        (0..=SHARDS).map(|k| self.shard_name(k)).collect()
    }

    /// Shard `k` (the leaders' collection for [`LEADERS`]), written with `w: 1`.
    pub(crate) fn shard(&self, k: usize) -> Collection<Document> {
        let options = mongodb::options::CollectionOptions::builder()
            .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build())
            .build();
        self.db
            .collection_with_options(&self.shard_name(k), options)
    }

    /// Creates shard `k` (capped, with one document) unless it is known to exist. The first
    /// call lists the shards that exist.
    pub(crate) async fn ensure(&self, k: usize) -> Result<(), mongodb::error::Error> {
        if !self.listed.swap(true, Ordering::AcqRel) {
            let found = self
                .db
                .list_collection_names()
                .filter(doc! { "name": { "$in": self.shard_names() } })
                .await;
            let found = match found {
                Ok(found) => found,
                Err(e) => {
                    self.listed.store(false, Ordering::Release);
                    return Err(e);
                }
            };
            let mut ready = self.ready.lock().unwrap_or_else(PoisonError::into_inner);
            for (i, name) in self.shard_names().iter().enumerate() {
                ready[i] |= found.contains(name);
            }
        }
        if self.ready.lock().unwrap_or_else(PoisonError::into_inner)[k] {
            return Ok(());
        }
        let created = self
            .db
            .create_collection(self.shard_name(k))
            .capped(true)
            .size(SHARD_BYTES)
            .await;
        match created {
            Ok(()) => self.seed(k).await?,
            Err(e) if command_code(&e) == Some(NAMESPACE_EXISTS) => {}
            Err(e) => return Err(e),
        }
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)[k] = true;
        Ok(())
    }

    /// Makes shard `k` capped again (`convertToCapped`, to the shard's size, keeping its
    /// newest wakes): it was dropped, and a write made it anew as a plain collection, on
    /// which no tailable cursor opens and which would grow without bound.
    pub(crate) async fn recap(&self, k: usize) -> Result<(), mongodb::error::Error> {
        self.db
            .run_command(doc! {
                "convertToCapped": self.shard_name(k),
                "size": i64::try_from(SHARD_BYTES).unwrap_or(i64::MAX),
            })
            .await
            .map(|_| ())
    }

    /// Puts a document no store listens for into shard `k`, so that a tailable cursor on
    /// it stays open.
    pub(crate) async fn seed(&self, k: usize) -> Result<(), mongodb::error::Error> {
        self.shard(k)
            .insert_one(doc! { STORE: "" })
            .await
            .map(|_| ())
    }

    /// Tells the processes of `wakes`' places that they were handed `resource`'s lock: one
    /// insert per shard. Best effort: a failure is logged, and the waiters' next keep-place
    /// attempts claim what they were handed.
    pub(crate) async fn send(&self, resource: &Resource, wakes: &[Wake]) {
        let mut by_shard: [Vec<Document>; SHARDS] = Default::default();
        for wake in wakes {
            let Some((store, place)) = wake.place.split_once('.') else {
                continue;
            };
            let mut d = doc! { STORE: store, PLACE: place, RESOURCE: resource.as_str() };
            if let Some(g) = &wake.grant {
                d.insert(FENCE, i64::try_from(g.fence).unwrap_or(i64::MAX));
                d.insert(CREATED, schema_date(g.created_at));
                if let Some(e) = g.expires_at {
                    d.insert(EXPIRES, schema_date(e));
                }
            }
            by_shard[shard_of(store)].push(d);
        }
        for (k, docs) in by_shard.into_iter().enumerate() {
            if docs.is_empty() {
                continue;
            }
            let sent = async {
                self.ensure(k).await?;
                self.shard(k).insert_many(docs).await.map(|_| ())
            };
            if let Err(e) = sent.await {
                tracing::debug!(
                    resource = %resource, error = %MongoFailure::new(&e),
                    "a wake was not sent: the waiter's next attempt claims its lock"
                );
            }
        }
    }
}

impl Wakes {
    /// Tells every observing process who leads: one insert into the leaders' collection,
    /// whose every tailable cursor (one per observing process, whatever the elections it
    /// observes) the server wakes. Best effort, as wakes: a failure is logged, and the
    /// observers read who leads every so often.
    pub(crate) async fn announce(&self, leaders: Vec<(Resource, Leader, Option<Timestamp>)>) {
        if leaders.is_empty() {
            return;
        }
        let docs: Vec<Document> = leaders
            .iter()
            .map(|(resource, leader, until)| {
                let mut d = doc! {
                    RESOURCE: resource.as_str(),
                    FENCE: i64::try_from(leader.fence).unwrap_or(i64::MAX),
                    CREATED: schema_date(leader.since),
                };
                if let Some(until) = until {
                    d.insert(EXPIRES, schema_date(*until));
                }
                if let Some(value) = &leader.value {
                    d.insert(VALUE, value.as_str());
                }
                d
            })
            .collect();
        let sent = async {
            self.ensure(LEADERS).await?;
            self.shard(LEADERS).insert_many(docs).await.map(|_| ())
        };
        if let Err(e) = sent.await {
            tracing::debug!(
                error = %MongoFailure::new(&e),
                "the news of a leader was not sent: its observers read who leads in time"
            );
        }
    }
}

/// The wakes of the places the write with `nonce` handed the lock to, from the `wake` of
/// the document it returned (after the write), each with the lock of its fence there: none
/// when the `wake` is an earlier write's, or missing.
pub(crate) fn handed_in(doc: &Document, nonce: &str) -> Vec<Wake> {
    let Ok(wake) = doc.get_str(WAKE) else {
        return Vec::new();
    };
    let mut words = wake.split(' ');
    if words.next() != Some(nonce) {
        return Vec::new();
    }
    let state = schema::decode(doc).ok().map(|(_, state)| state);
    words
        .filter_map(|w| {
            let (place, fence) = w.split_once('/').unwrap_or((w, ""));
            if !place.contains('.') {
                return None;
            }
            let fence = fence.parse::<u64>().ok();
            let find = |locks: &[StoredLock]| {
                let f = fence?;
                locks.iter().find(|l| l.fence == f).cloned()
            };
            let exclusive = state.as_ref().and_then(|s| find(s.exclusive.as_slice()));
            let lock = exclusive
                .clone()
                .or_else(|| state.as_ref().and_then(|s| find(&s.shared)));
            Some(Wake {
                place: place.to_owned(),
                grant: lock.as_ref().map(handed_lock),
                leader: exclusive.as_ref().map(Leader::of_stored),
            })
        })
        .collect()
}

/// What a wake says was handed: the lock's fence and times.
fn handed_lock(lock: &StoredLock) -> HandedLock {
    HandedLock {
        fence: lock.fence,
        created_at: lock.created_at,
        expires_at: lock.expires_at,
    }
}

fn schema_date(t: Timestamp) -> Bson {
    Bson::DateTime(mongodb::bson::DateTime::from_millis(
        i64::try_from(t.as_millis()).unwrap_or(i64::MAX),
    ))
}

/// The wakes of the places the engine handed the lock to while replaying a write on
/// `table`, which was read from `docs` (as they were before the write), by resource. With
/// `exact` (the replay ran at the write's own `now` and fence floor, so it handed what the
/// write did), each says what was handed; otherwise only whom.
pub(crate) fn replayed(
    table: &mut LockTable,
    docs: &[Document],
    exact: bool,
) -> Vec<(Resource, Vec<Wake>)> {
    let mut by_resource: BTreeMap<Resource, Vec<Handed>> = BTreeMap::new();
    for handed in table.take_handed() {
        by_resource
            .entry(handed.status.resource.clone())
            .or_default()
            .push(handed);
    }
    by_resource
        .into_iter()
        .filter_map(|(resource, handed)| {
            let doc = docs
                .iter()
                .find(|d| d.get_str(schema::RESOURCE) == Ok(resource.as_str()))?;
            let wakes = wakes_of(doc, &handed, exact);
            (!wakes.is_empty()).then_some((resource, wakes))
        })
        .collect()
}

/// The wakes of `handed` (what the engine, replaying a write, says it handed; with `exact`,
/// what it handed too), with the tags of their places in `doc` as it was before the write.
pub(crate) fn wakes_of(doc: &Document, handed: &[Handed], exact: bool) -> Vec<Wake> {
    let Ok(queue) = doc.get_array(QUEUE) else {
        return Vec::new();
    };
    handed
        .iter()
        .filter_map(|h| {
            let place = queue.iter().find_map(|place| match place {
                Bson::Document(p) if p.get_str(TICKET) == Ok(h.ticket.as_str()) => {
                    p.get_str(TAG).ok().map(str::to_owned)
                }
                _ => None,
            })?;
            Some(Wake {
                place,
                grant: exact.then(|| HandedLock::of(&h.status)),
                leader: (exact && h.status.mode == Mode::Exclusive).then(|| Leader::of(&h.status)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_names_the_places_of_its_own_write_only() {
        let doc = doc! { WAKE: "n1 65a1.3f9a/3 -/4 65a2.0001/5" };
        let places: Vec<String> = handed_in(&doc, "n1").into_iter().map(|w| w.place).collect();
        assert_eq!(places, ["65a1.3f9a", "65a2.0001"]);
        assert!(handed_in(&doc, "n2").is_empty(), "an earlier write's wake");
        assert!(handed_in(&doc! {}, "n1").is_empty());
        assert!(handed_in(&doc! { WAKE: "65a1.3f9a:0.25" }, "n1").is_empty());
    }

    #[test]
    fn stores_spread_over_the_shards_by_their_tags_last_digit() {
        assert_eq!(shard_of("65a1f"), 15);
        assert_eq!(shard_of("65a10"), 0);
        assert_eq!(shard_of(""), 0);
        assert_eq!(shard_of("xyz"), 0);
    }

    #[test]
    fn a_replayed_hand_over_wakes_the_tagged_places_and_says_what_when_exact() {
        use lockwright_engine::{LockId, LockOptions, LockRequest, Ticket};
        use std::time::Duration;
        let at = lockwright_engine::Timestamp::from_millis(1_000);
        let details = LockOptions::new().ttl(Duration::from_secs(5));
        let mut table = LockTable::new();
        table
            .lock(&LockRequest::new("r", "holder", &details).unwrap(), at)
            .unwrap();
        for (lock_id, ticket) in [("a", "ticket-a"), ("b", "ticket-b")] {
            let ticket = Ticket::new(LockId::new(ticket).unwrap(), Duration::from_secs(3));
            let fair = LockRequest::new("r", lock_id, &details)
                .unwrap()
                .fair(ticket.unwrap());
            assert!(table.lock(&fair, at).is_err(), "queued");
        }
        table.unlock_one(
            &Resource::new("r").unwrap(),
            &LockId::new("holder").unwrap(),
            at,
        );
        let handed = table.take_handed();
        assert_eq!(handed.len(), 1, "the exclusive head alone");
        let doc = doc! { QUEUE: [
            { TICKET: "ticket-a", TAG: "65a1.3f9a" },
            { TICKET: "ticket-b" },
            "not a place",
        ] };
        let wakes = wakes_of(&doc, &handed, true);
        assert_eq!(wakes.len(), 1);
        assert_eq!(wakes[0].place, "65a1.3f9a");
        let grant = wakes[0].grant.expect("exact: what was handed");
        assert_eq!(grant.fence, handed[0].status.fence);
        assert_eq!(
            grant.expires_at,
            Some(lockwright_engine::Timestamp::from_millis(4_000))
        );
        assert_eq!(wakes_of(&doc, &handed, false)[0].grant, None);
        assert!(wakes_of(&doc! {}, &handed, true).is_empty());
    }
}
