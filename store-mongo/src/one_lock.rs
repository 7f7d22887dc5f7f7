//! The one-lock operations, each one `findAndModify`: `xlock` and `slock` (a grant, with
//! upsert), `renew_one` and `unlock_one` (on the document holding the lock).

use std::time::Duration;

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document};
use mongodb::error::ErrorKind;
use tokio::time::Instant;

use lockwright_engine::election::Leader;
use lockwright_engine::{
    Error, LockId, LockRequest, LockStatus, LockTable, Renewal, Resource, Timestamp,
};

use crate::command::FindAndModify;
use crate::failure::{outcome_unknown, retryable};
use crate::pipeline::bind::{self, Shape};
use crate::retry::{RETRY_PAUSE, RETRY_WINDOW};
use crate::setup::{DUPLICATE_KEY, NAMESPACE_NOT_FOUND, command_code};
use crate::{MongoStore, failure, pipeline, schema, wakes};

/// The server code of a bad value, such as a hint naming an index that does not exist.
const BAD_VALUE: i32 = 2;

/// What a grant's reply said.
enum Granted {
    /// This request's grant.
    Yes(LockStatus),
    /// A refusal: how long after the server decided the rule would allow it, and a fair
    /// request's place in the queue.
    No {
        retry_in: Option<std::time::Duration>,
        queued: Option<lockwright_engine::Queued>,
    },
}

impl MongoStore {
    /// One grant: `findAndModify` with upsert, hinted to the trusted unique index so that
    /// it fails rather than inserts when that index is gone. `Ok(None)` means refused by
    /// the rule.
    ///
    /// A failure that is safe to retry is retried with the same request (`grant_id`)
    /// within [`RETRY_WINDOW`]: if an earlier attempt was applied, the retry finds its own
    /// grant in `lastGrant`. What cannot be told apart is reported as a `Backend` error whose
    /// outcome is unknown, never as a refusal.
    async fn grant(
        &self,
        op: &'static str,
        request: &LockRequest,
        tag: &str,
    ) -> Result<LockStatus, Error> {
        let index = self.ready(op).await?;
        let grant_id = Bson::ObjectId(ObjectId::new());
        let readings = self.readings();
        let template = self.templates.get(Shape::grant(request), readings.grace_ms);
        let query = pipeline::grant_filter(request.resource.as_str());
        let vars = bind::grant(request, &grant_id, tag, &readings);
        let command = FindAndModify {
            query: &query,
            template: &template,
            vars: &vars,
            upsert: true,
            new: true,
            hint: Some(&index),
        };
        let decide = |doc: &Document, unknown| {
            let granted = decide_grant(op, doc, &grant_id, request, self.grace, unknown)?;
            match granted {
                Granted::Yes(status) => Ok(status),
                Granted::No { retry_in, queued } => Err(Error::AlreadyLocked {
                    resource: request.resource.clone(),
                    retry_in,
                    queued,
                }),
            }
        };
        let started = Instant::now();
        // The failure of an earlier attempt that may have been applied.
        let mut unknown: Option<mongodb::error::Error> = None;
        let mut duplicates = 0;
        loop {
            let result = self.find_and_modify(&command).await;
            let e = match result {
                Ok(Some(doc)) => {
                    self.wake_handed(&request.resource, &doc, &readings.nonce)
                        .await;
                    return decide(&doc, unknown);
                }
                Ok(None) => return Err(Error::backend(op, "upsert returned no document")),
                Err(e) => e,
            };
            if matches!(e.kind.as_ref(), ErrorKind::InvalidResponse { .. }) {
                // The driver could not read the reply (say, text in the document that is not
                // UTF-8): the server decided, so read the document to see what it decided.
                return match self.read_resource(op, &request.resource).await? {
                    Some(doc) => {
                        self.wake_handed(&request.resource, &doc, &readings.nonce)
                            .await;
                        decide(&doc, Some(e))
                    }
                    None => Err(failure::unknown(op, &e)),
                };
            }
            let code = command_code(&e);
            // The server retries an insert race on the unique index as an update; should a
            // duplicate key still come back, the document exists now, so one more try
            // decides by the rule.
            if code == Some(DUPLICATE_KEY) && duplicates == 0 {
                duplicates += 1;
                continue;
            }
            let maybe_applied = outcome_unknown(&e);
            if retryable(&e) && started.elapsed() < RETRY_WINDOW {
                if maybe_applied {
                    unknown = Some(e);
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            if maybe_applied || unknown.is_some() {
                return Err(failure::unknown(op, &e));
            }
            if code == Some(DUPLICATE_KEY) {
                return Err(Error::AlreadyLocked {
                    resource: request.resource.clone(),
                    retry_in: None,
                    queued: None,
                });
            }
            if code == Some(BAD_VALUE) || code == Some(NAMESPACE_NOT_FOUND) {
                // The hinted index (or the whole collection) is gone: nothing was applied.
                self.forget_ready();
                return Err(match self.ready(op).await {
                    Err(e) => e,
                    Ok(_) => failure::backend(op, &e),
                });
            }
            return Err(failure::backend(op, &e));
        }
    }

    /// One `findAndModify` of a one-lock operation (the template of `shape`, its variables
    /// `vars`) on the document `query` selects, returning the document before or after it
    /// (`new`) with the `now` it ran at. Retried within [`RETRY_WINDOW`] when the error
    /// allows: every one-lock operation may be applied twice with the same effect as once.
    ///
    /// When the driver cannot read the reply (the document holds text that is not UTF-8), or
    /// the reply lacks the `now` it ran at (which the projection always adds: a reply
    /// without it is not one this code can trust), the server has decided: the document is
    /// read back as it is now, with the server's time, and returned as
    /// [`Modified::Reread`].
    pub(crate) async fn modify_one(
        &self,
        op: &'static str,
        resource: &Resource,
        query: &Document,
        shape: Shape,
        vars: &Document,
        new: bool,
    ) -> Result<Modified, Error> {
        // No hint: nothing is inserted, so uniqueness is not at stake, and a lock can still
        // be renewed and released after its unique index was dropped.
        self.ready(op).await?;
        let template = self.templates.get(shape, pipeline::ms(self.grace));
        let command = FindAndModify {
            query,
            template: &template,
            vars,
            upsert: false,
            new,
            hint: None,
        };
        let started = Instant::now();
        loop {
            let result = self.find_and_modify(&command).await;
            // `None`: the server decided, but its reply cannot be used as it is.
            let failed = match result {
                Ok(Some(doc)) => {
                    if doc.contains_key(pipeline::NOW_FIELD) {
                        return Ok(Modified::Reply(doc));
                    }
                    None
                }
                Ok(None) => return Ok(Modified::Nothing),
                Err(e) if matches!(e.kind.as_ref(), ErrorKind::InvalidResponse { .. }) => None,
                Err(e) => Some(e),
            };
            let Some(e) = failed else {
                let now = self.now_value(op).await?;
                return Ok(match self.read_resource(op, resource).await? {
                    Some(mut doc) => {
                        doc.insert(pipeline::NOW_FIELD, pipeline::date(now));
                        Modified::Reread(doc)
                    }
                    None => Modified::Nothing,
                });
            };
            if retryable(&e) && started.elapsed() < RETRY_WINDOW {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            return Err(failure::write_failed(op, &e));
        }
    }
}

impl MongoStore {
    /// Sends the wakes of a hand-over that the write with `nonce` made, as the document it
    /// returned or left (read after it) says (see the module `wakes`).
    pub(crate) async fn wake_handed(&self, resource: &Resource, doc: &Document, nonce: &str) {
        let handed = wakes::handed_in(doc, nonce);
        if !handed.is_empty() {
            self.announce_handed(resource, &handed);
            self.wakes.send(resource, &handed).await;
        }
    }

    /// Sends the wakes of hand-overs, by resource (see [`wakes::replayed`]).
    pub(crate) async fn wake_all(&self, handed: Vec<(Resource, Vec<wakes::Wake>)>) {
        for (resource, places) in handed {
            self.announce_handed(&resource, &places);
            self.wakes.send(&resource, &places).await;
        }
    }

    /// Announces the leaders that `handed` (of `resource`) made, where it is an election.
    fn announce_handed(&self, resource: &Resource, handed: &[wakes::Wake]) {
        if crate::mutants::active(crate::mutants::Mutant::NewsSkipsHandOver) {
            return;
        }
        self.announce(handed.iter().filter_map(|w| {
            let until = w.grant.as_ref().and_then(|g| g.expires_at);
            Some((resource.clone(), w.leader.clone()?, until))
        }));
    }
}

/// What a one-lock `findAndModify` returned.
pub(crate) enum Modified {
    /// The document (before or after, as asked), with the `now` it ran at.
    Reply(Document),
    /// The reply could not be read; the document as read back afterwards, with a later
    /// `now`.
    Reread(Document),
    /// No document matched.
    Nothing,
}

/// The `now` a one-lock operation ran at, from its projection.
/// The fence floor a one-lock operation's reply says it ran at, if it says.
fn floor_of(doc: &Document) -> Option<u64> {
    match doc.get(pipeline::FLOOR_FIELD)? {
        Bson::Int64(f) => u64::try_from(*f).ok(),
        Bson::Int32(f) => u64::try_from(*f).ok(),
        _ => None,
    }
}

fn now_of(op: &'static str, doc: &Document) -> Result<Timestamp, Error> {
    match doc.get(pipeline::NOW_FIELD) {
        Some(Bson::DateTime(dt)) => u64::try_from(dt.timestamp_millis())
            .map(Timestamp::from_millis)
            .map_err(|_| Error::backend(op, "the server's clock is before the Unix epoch")),
        _ => Err(Error::backend(op, "the reply carries no server time")),
    }
}

/// What a grant's returned document says: granted (this request, `grant_id`, made the last
/// grant, and the lock is decoded from its own entry alone, whatever else the document
/// holds), refused (with when the rules would allow it, judged by the engine at the `now` the
/// server reported, when it did), or malformed. After an earlier attempt whose outcome is
/// unknown (`unknown`), a document holding a lock of this lock id that this request cannot
/// be shown to have made is reported as unknown, not as a refusal.
fn decide_grant(
    op: &'static str,
    doc: &Document,
    grant_id: &Bson,
    request: &LockRequest,
    grace: std::time::Duration,
    unknown: Option<mongodb::error::Error>,
) -> Result<Granted, Error> {
    let resource = Resource::stored(&schema::label(doc));
    let mode = request.mode();
    if doc.get(schema::LAST_GRANT) == Some(grant_id) {
        return match schema::decode_own(doc, mode, &request.lock_id) {
            // A claim renews a lock granted earlier: its TTL counts from the claim's `now`.
            Some(Ok(lock)) => {
                let now = now_of(op, doc).unwrap_or(lock.created_at);
                Ok(Granted::Yes(lock.status(&resource, mode, now)))
            }
            Some(Err(m)) => Err(Error::backend(
                op,
                format!("the grant was applied but its own entry reads as malformed: {m}"),
            )),
            None => Err(Error::backend(
                op,
                "the grant was applied but the document does not hold the new lock",
            )),
        };
    }
    let (_, state) = schema::decode(doc).map_err(Error::from)?;
    if state.last_fence >= schema::FENCES_EXHAUSTED {
        return Err(Error::Malformed {
            resource: resource.as_str().to_owned(),
            field: schema::LAST_FENCE.into(),
            reason: format!(
                "is {}: every fence is used, so no grant is possible on this resource",
                state.last_fence
            ),
        });
    }
    if let Some(e) = unknown
        && state
            .lock_of(&request.lock_id)
            .is_some_and(|(m, _)| m == mode)
    {
        return Err(failure::unknown(op, &e));
    }
    // A document read back without the server's `now` cannot tell. The document is the one
    // the refusal left: a fair request's place is in it.
    let now = now_of(op, doc).ok();
    let retry_in = now.and_then(|now| state.free_in(request, now, grace));
    let queued = now
        .filter(|_| request.fair.is_some())
        .map(|now| state.queued(request, now));
    Ok(Granted::No { retry_in, queued })
}

/// `lock`: the exclusive or the shared grant, as the request's access says.
pub(crate) async fn lock(store: &MongoStore, request: &LockRequest) -> Result<LockStatus, Error> {
    let tag = crate::hints::place_tag(store.tag(), request);
    let granted = store
        .grant(request.access.operation(), request, &tag)
        .await?;
    let news = lockwright_engine::election::grant_is_news(&granted)
        || (crate::mutants::active(crate::mutants::Mutant::NewsOfClaims)
            && granted.mode == lockwright_engine::Mode::Exclusive);
    if news {
        store.announce([(
            granted.resource.clone(),
            Leader::of(&granted),
            granted.expires_at,
        )]);
    }
    Ok(granted)
}

/// What a one-lock write on a held lock (`renew_one`, `set_comment`) replied: the document
/// as its pipeline found it, decoded, at the `now` it ran at; or, `reread`, the document as
/// it is after the write (read back, with a later `now`).
struct OneLockReply {
    name: Resource,
    state: lockwright_engine::ResourceState,
    now: Timestamp,
    reread: bool,
}

/// Runs `update` on the document of `resource` holding a lock of `lock_id`.
///
/// # Errors
/// `LockNotFound` when no document holds one; backend and decoding errors.
async fn modify_one_lock(
    store: &MongoStore,
    op: &'static str,
    resource: &Resource,
    filter: &Document,
    shape: Shape,
    vars: &Document,
) -> Result<OneLockReply, Error> {
    let (doc, reread) = match store
        .modify_one(op, resource, filter, shape, vars, false)
        .await?
    {
        Modified::Reply(doc) => (doc, false),
        Modified::Reread(doc) => (doc, true),
        Modified::Nothing => return Err(Error::LockNotFound),
    };
    let now = now_of(op, &doc)?;
    let (name, state) = schema::decode(&doc)?;
    Ok(OneLockReply {
        name,
        state,
        now,
        reread,
    })
}

/// `renew_one`: renews the one lock of `lock_id` on `resource`.
pub(crate) async fn renew_one(
    store: &MongoStore,
    lock: &Renewal,
    margin: Duration,
) -> Result<LockStatus, Error> {
    let Renewal {
        resource,
        lock_id,
        ttl,
    } = lock;
    let ttl = *ttl;
    let op = "renew";
    let margin_ms = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
    let vars = bind::renew_one(lock_id, ttl.as_millis(), margin_ms, &store.readings());
    let filter = pipeline::one_lock_filter(resource.as_str(), lock_id);
    let OneLockReply {
        name,
        state,
        now,
        reread,
    } = modify_one_lock(store, op, resource, &filter, Shape::RenewOne, &vars).await?;
    if reread {
        // Read back after the command, with a later `now`: a lock still renewable was
        // renewed (the pipeline renews every renewable lock), and is reported as it is.
        return match state.lock_of(lock_id) {
            Some((mode, lock)) if lock.is_renewable(now, margin, store.grace) => {
                Ok(lock.status(&name, mode, now))
            }
            _ => LockTable::from_resources([(name.clone(), state)])
                .with_takeover_grace(store.grace)
                .renew_one(&name, lock_id, ttl, margin, now),
        };
    }
    // The document as the pipeline found it, at the instant it ran: the pipeline renewed
    // iff the rules say so, and the engine says what that gave, or why not.
    LockTable::from_resources([(name.clone(), state)])
        .with_takeover_grace(store.grace)
        .renew_one(&name, lock_id, ttl, margin, now)
}

/// `set_comment`: sets the comment of the one lock of `lock_id` on `resource`, if held.
pub(crate) async fn set_comment(
    store: &MongoStore,
    resource: &Resource,
    lock_id: &LockId,
    comment: Option<&str>,
) -> Result<LockStatus, Error> {
    let op = "set_comment";
    let vars = bind::set_comment(lock_id, comment, &store.readings());
    let filter = pipeline::set_comment_filter(resource.as_str(), lock_id);
    let OneLockReply {
        name,
        state,
        now,
        reread,
    } = modify_one_lock(store, op, resource, &filter, Shape::SetComment, &vars).await?;
    if reread
        && let Some((mode, lock)) = state.lock_of(lock_id)
        && lock.holder.comment.as_deref() == comment
        && lock.is_renewable(now, Duration::ZERO, store.grace)
    {
        // Read back after the command: it set the comment.
        return Ok(lock.status(&name, mode, now));
    }
    // The document as the pipeline found it (or, read back, as it is): the engine says
    // what the pipeline did, or why it did nothing.
    LockTable::from_resources([(name.clone(), state)])
        .with_takeover_grace(store.grace)
        .set_comment(&name, lock_id, comment.map(str::to_owned), now)
}

/// `unlock_one`: removes the one lock of `lock_id` on `resource`.
pub(crate) async fn unlock_one(
    store: &MongoStore,
    resource: &Resource,
    lock_id: &LockId,
) -> Result<Option<LockStatus>, Error> {
    let op = "unlock";
    let filter = pipeline::one_lock_filter(resource.as_str(), lock_id);
    let readings = store.readings();
    let vars = bind::unlock_one(lock_id, &readings);
    let doc = match store
        .modify_one(op, resource, &filter, Shape::UnlockOne, &vars, false)
        .await?
    {
        Modified::Reply(doc) => doc,
        Modified::Reread(doc) => {
            // Read back after the removal: the lock is gone (its details with it), or the
            // document could not be decided on and is as it was.
            schema::decode(&doc)?;
            store.wake_handed(resource, &doc, &readings.nonce).await;
            return Ok(None);
        }
        Modified::Nothing => return Ok(None),
    };
    let now = now_of(op, &doc)?;
    // A document the rules cannot decide on was left as it was: say so.
    let (name, state) = schema::decode(&doc)?;
    let mut table =
        LockTable::from_resources([(name.clone(), state)]).with_takeover_grace(store.grace);
    // At the fence floor the command ran at, the replay takes the very fences it took, and
    // its wakes say what they handed (without it, only whom).
    let floor = floor_of(&doc);
    if let Some(floor) = floor
        && !crate::mutants::active(crate::mutants::Mutant::ReplayIgnoresFenceFloor)
    {
        table = table.with_fence_floor(floor);
    }
    let released = table.unlock_one(&name, lock_id, now);
    // The reply is the document before the release: the engine says what it handed over.
    store
        .wake_all(wakes::replayed(
            &mut table,
            std::slice::from_ref(&doc),
            floor.is_some(),
        ))
        .await;
    Ok(released)
}
