//! Running one input: every operation on the document as first written, checked against the
//! engine's rules.

use super::*;
use lockwright_engine::Access;

/// A document the decoder refuses.
pub(crate) struct Bad {
    pub(crate) id: Bson,
    pub(crate) doc: Document,
    pub(crate) bytes: Vec<u8>,
    pub(crate) complaint: MalformedDocument,
}

pub(crate) struct World<'a> {
    pub(crate) store: &'a MongoStore,
    /// The readable documents, decoded.
    pub(crate) table: LockTable,
    pub(crate) bad: Vec<Bad>,
}

impl World<'_> {
    /// The complaints about the malformed documents matching `query`.
    async fn bad_matching(&self, query: &Document) -> Vec<&Bad> {
        let mut out = Vec::new();
        for b in &self.bad {
            if matches(self.store, &b.id, query.clone()).await {
                out.push(b);
            }
        }
        out
    }

    /// What `op` must return at `now`, and the readable table after it.
    async fn expect(&self, op: &Op, now: Timestamp) -> (Outcome, LockTable) {
        let mut t = self.table.clone();
        let complaints = |bad: Vec<&Bad>| -> Vec<MalformedDocument> {
            bad.into_iter().map(|b| b.complaint.clone()).collect()
        };
        let outcome = match op {
            Op::Xlock(r) | Op::Slock(r, _) => {
                let bad = self
                    .bad_matching(&doc! { "resource": r.resource.as_str() })
                    .await;
                let fence = t.resource(&r.resource).map_or(0, |state| state.last_fence);
                match (bad.first(), op) {
                    (Some(b), _) => Outcome::Malformed(b.complaint.clone()),
                    // A resource whose fence counter is at the top of the int64 range has
                    // used every fence: no grant, whatever the rule would say.
                    (None, _) if fence >= i64::MAX as u64 => {
                        Outcome::Malformed(MalformedDocument {
                            resource: r.resource.as_str().to_owned(),
                            field: "lastFence".into(),
                            reason: format!(
                                "is {fence}: every fence is used, so no grant is possible on \
                                 this resource"
                            ),
                        })
                    }
                    (None, Op::Slock(_, limit)) => {
                        outcome_one(t.lock(&r.clone().with_access(Access::Shared(*limit)), now))
                    }
                    (None, _) => outcome_one(t.lock(r, now)),
                }
            }
            Op::Unlock(id) => {
                let skipped = complaints(self.bad_matching(&group_query(id.as_str().into())).await);
                let done = table::unlock(&mut [&mut t], id, now);
                if skipped.is_empty() {
                    Outcome::Locks(done)
                } else {
                    Outcome::Skipped(done, skipped)
                }
            }
            Op::Renew(id) => {
                let bad = self.bad_matching(&group_query(id.as_str().into())).await;
                match bad.first() {
                    Some(b) => Outcome::Malformed(b.complaint.clone()),
                    None => outcome(table::renew(
                        &mut [&mut t],
                        id,
                        renew_ttl(),
                        RENEW_MARGIN,
                        now,
                    )),
                }
            }
            Op::Status(filter) => match filter.validate() {
                Err(e) => outcome(Err(e)),
                Ok(()) => {
                    let query = match (&filter.resource, &filter.lock_id) {
                        (Some(r), _) => doc! { "resource": r.as_str() },
                        (None, Some(l)) => group_query(l.as_str().into()),
                        (None, None) => doc! {},
                    };
                    let skipped = complaints(self.bad_matching(&query).await);
                    let done = table::status(&[&t], filter, now);
                    if skipped.is_empty() {
                        Outcome::Locks(done)
                    } else {
                        Outcome::Skipped(done, skipped)
                    }
                }
            },
            Op::Purge => {
                let date = Bson::DateTime(DateTime::from_millis(
                    i64::try_from(now.as_millis()).unwrap(),
                ));
                let expired = doc! { "$or": [
                    { "exclusive.expiresAt": { "$lte": date.clone() } },
                    { "shared.locks.expiresAt": { "$lte": date } },
                ] };
                let mut skipped = complaints(self.bad_matching(&expired).await);
                let mut groups = table::expired_groups(&[&t], now);
                if !groups.is_empty() {
                    let ids: Vec<Bson> = groups.iter().map(|g| g.as_str().into()).collect();
                    // A malformed document read with the groups keeps the groups it names.
                    for b in self
                        .bad_matching(&group_query(doc! { "$in": ids }.into()))
                        .await
                    {
                        if !skipped.contains(&b.complaint) {
                            skipped.push(b.complaint.clone());
                        }
                        for id in raw_lock_ids(&b.doc) {
                            groups.remove(&LockId::stored(&id));
                        }
                    }
                }
                let removed = table::purge_groups(&mut [&mut t], &groups, now);
                table::delete_empty(&mut [&mut t], now);
                if skipped.is_empty() {
                    Outcome::Locks(removed)
                } else {
                    Outcome::Skipped(removed, skipped)
                }
            }
        };
        (outcome, t)
    }
}

pub(crate) fn newcomer(resource: &str) -> Result<LockRequest, Error> {
    let details = LockOptions::new()
        .owner("newcomer-owner")
        .ttl(Duration::from_secs(30));
    LockRequest::new(resource, NEWCOMER, &details)
}

pub(crate) fn operations(case: &Case, failures: &mut Vec<String>) -> Vec<Op> {
    let mut ops = Vec::new();
    let resources = case.resources();
    for r in &resources {
        match newcomer(r) {
            Ok(req) => {
                ops.push(Op::Xlock(req.clone()));
                for limit in &case.limits {
                    ops.push(Op::Slock(req.clone(), *limit));
                }
            }
            // A name the API refuses cannot be asked for; it must say so with a typed error.
            Err(Error::InvalidArgument {
                field: "resource", ..
            }) => {}
            Err(other) => failures.push(format!(
                "{}: LockRequest::new({}) gave {other:?}",
                case.name,
                short(r)
            )),
        }
    }
    let ids = case.lock_ids();
    for id in &ids {
        ops.push(Op::Unlock(id.clone()));
        ops.push(Op::Renew(id.clone()));
    }
    ops.push(Op::Status(Filter::new()));
    for r in &resources {
        ops.push(Op::Status(Filter::new().resource(r.as_str())));
    }
    if let Some(id) = ids.first() {
        ops.push(Op::Status(Filter::new().lock_id(id.as_str())));
    }
    ops.push(Op::Purge);
    ops
}

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) inputs: usize,
    pub(crate) operations: usize,
    pub(crate) failures: Vec<String>,
}

pub(crate) async fn run_case(client: &Client, case: &Case) -> Report {
    let mut report = Report {
        inputs: 1,
        ..Report::default()
    };
    let failures = &mut report.failures;
    let name = &case.name;
    let started = std::time::Instant::now();
    let clock = Arc::new(ManualClock::new(T0));
    // No takeover grace: the cases' expired locks (a second ago) are to be taken over.
    let store = fresh_store_on(client, Some(Arc::clone(&clock)))
        .await
        .with_takeover_grace(Duration::ZERO)
        .unwrap();
    let coll = store.collection().clone();

    let sentinel_request = LockRequest::new(
        SENTINEL,
        SENTINEL_GROUP,
        &LockOptions::new().ttl(Duration::from_secs(3_600)),
    )
    .unwrap();
    store.lock(&sentinel_request).await.unwrap();
    let sentinel = coll
        .find_one(doc! { "resource": SENTINEL })
        .await
        .unwrap()
        .unwrap();
    let sentinel_id = sentinel.get("_id").unwrap().clone();
    let sentinel_bytes = bytes_of(&store, &sentinel_id).await.unwrap();

    // Write the input and its companions, raw; keep them as stored.
    let mut originals: Vec<RawDocumentBuf> = Vec::new();
    let mut bad = Vec::new();
    for (i, d) in std::iter::once(&case.hostile)
        .chain(&case.companions)
        .enumerate()
    {
        let id = match coll.insert_one(d.clone()).await {
            Ok(r) => r.inserted_id,
            Err(e) => {
                failures.push(format!("{name}: cannot write the input: {e}"));
                let _ = coll.drop().await;
                return report;
            }
        };
        let bytes = bytes_of(&store, &id).await.unwrap();
        let stored = RawDocumentBuf::from_bytes(bytes.clone()).unwrap();
        let doc = stored.to_document().unwrap();
        originals.push(stored);
        let verdict = decode_check(&doc);
        if i > 0 {
            assert!(
                verdict.is_ok(),
                "{name}: companion must be valid: {verdict:?}"
            );
        }
        // The server's validity test agrees with the decoder, without a server error.
        let pipeline = vec![
            doc! { "$match": { "_id": id.clone() } },
            doc! { "$project": { "ok": valid_expression() } },
        ];
        let server = match coll.aggregate(pipeline).await {
            Ok(cursor) => cursor
                .try_collect::<Vec<Document>>()
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match server
            .as_deref()
            .map(|rows| rows.first().map(|r| r.get_bool("ok")))
        {
            Ok(Some(Ok(ok))) if ok == verdict.is_ok() => {}
            other => failures.push(format!(
                "{name}: server validity {other:?} but decoder {verdict:?} on {}",
                short(&doc.to_string())
            )),
        }
        if let Err(complaint) = verdict {
            bad.push(Bad {
                id,
                doc,
                bytes,
                complaint,
            });
        }
    }

    let restore = |originals: Vec<RawDocumentBuf>| {
        let coll = coll.clone();
        let sentinel_id = sentinel_id.clone();
        let clock = Arc::clone(&clock);
        async move {
            coll.delete_many(doc! { "_id": { "$ne": sentinel_id } })
                .await
                .unwrap();
            coll.clone_with_type::<RawDocumentBuf>()
                .insert_many(originals)
                .await
                .unwrap();
            clock.set(T0);
        }
    };

    let table = match readable_table(&store, &bad).await {
        Ok(t) => t,
        Err(e) => panic!("{name}: the input's readable part does not decode: {e}"),
    };
    restore(originals.clone()).await;
    let world = World {
        store: &store,
        table,
        bad,
    };

    for op in operations(case, failures) {
        let now = if matches!(op, Op::Purge) {
            T0.saturating_add(PURGE_AFTER)
        } else {
            T0
        };
        let (expected, expected_table) = world.expect(&op, now).await;
        let before = all_bytes(&store).await;
        clock.set(now);
        let got = perform(&store, &op).await;
        report.operations += 1;
        let what = format!("{name}: {op}");
        if std::env::var_os("HOSTILE_TRACE").is_some() {
            println!("{what} -> {}", short_outcome(&got));
        }
        if got != expected {
            failures.push(format!("{what}: {}", contrast(&expected, &got)));
        }
        // A malformed document is never written; an error writes nothing at all.
        let failures_before = failures.len();
        for b in &world.bad {
            let now = bytes_of(&store, &b.id).await;
            if now.as_ref() != Some(&b.bytes) {
                failures.push(format!(
                    "{what} returned {} but wrote to the malformed document: {}",
                    short_outcome(&got),
                    changes(
                        std::slice::from_ref(&b.bytes),
                        &now.into_iter().collect::<Vec<_>>()
                    )
                ));
            }
        }
        let after = all_bytes(&store).await;
        let wrote_to_bad = failures.len() > failures_before;
        if got.wrote_nothing() && after != before && !wrote_to_bad {
            failures.push(format!(
                "{what} returned {} but wrote: {}",
                short_outcome(&got),
                changes(&before, &after)
            ));
        }
        if bytes_of(&store, &sentinel_id).await.as_ref() != Some(&sentinel_bytes) {
            failures.push(format!("{what}: the sentinel document changed"));
        }
        check_agreement(&store, &what, failures).await;
        match readable_table(&store, &world.bad).await {
            Ok(t) if t == expected_table => {}
            Ok(t) => failures.push(format!(
                "{what}: collection afterwards {}",
                contrast(&expected_table, &t)
            )),
            Err(e) => {
                // What the holder of the lock just granted can still do.
                let unlock = perform(&store, &Op::Unlock(LockId::new(NEWCOMER).unwrap())).await;
                failures.push(format!(
                    "{what} returned {}, then {e}; unlock of the new lock then returned {}",
                    short_outcome(&got),
                    short_outcome(&unlock)
                ));
            }
        }
        restore(originals.clone()).await;
    }

    // The sentinel's group still renews and unlocks, and the malformed document is as it was.
    let sentinel_id_lock = LockId::new(SENTINEL_GROUP).unwrap();
    let renewed = store
        .renew(&sentinel_id_lock, renew_ttl(), RENEW_MARGIN)
        .await;
    let released = store.unlock(&sentinel_id_lock).await;
    report.operations += 2;
    for (op, result) in [("renew", renewed), ("unlock", released)] {
        match result {
            Ok(locks) if locks.len() == 1 && locks[0].resource.as_str() == SENTINEL => {}
            other => failures.push(format!("{name}: sentinel {op}: {other:?}")),
        }
    }
    for b in &world.bad {
        if bytes_of(&store, &b.id).await.as_ref() != Some(&b.bytes) {
            failures.push(format!(
                "{name}: sentinel operations wrote to the malformed document"
            ));
        }
    }
    let _ = coll.drop().await;
    if std::env::var_os("HOSTILE_TRACE").is_some() {
        println!("{name}: done in {:?}", started.elapsed());
    }
    report
}

/// A document with a string that is not UTF-8 at `field` (BSON requires UTF-8, but the
/// server stores what it is sent, and the Go driver encodes a Go string's bytes as they
/// are): the store reads such text with U+FFFD in place of the bad bytes, so operations
/// answer with a typed outcome, write the document only when they report a lock of it
/// released, granted or purged, and keep working for the rest of the collection.
pub(crate) async fn run_invalid_utf8_case(client: &Client, field: &str) -> Report {
    let name = format!("invalid-utf8-in-{field}");
    let mut report = Report {
        inputs: 1,
        ..Report::default()
    };
    let clock = Arc::new(ManualClock::new(T0));
    // No takeover grace: the cases' expired locks (a second ago) are to be taken over.
    let store = fresh_store_on(client, Some(Arc::clone(&clock)))
        .await
        .with_takeover_grace(Duration::ZERO)
        .unwrap();
    let sentinel_request = LockRequest::new(
        SENTINEL,
        SENTINEL_GROUP,
        &LockOptions::new().ttl(Duration::from_secs(3_600)),
    )
    .unwrap();
    store.lock(&sentinel_request).await.unwrap();
    // "QQQQ" becomes the bytes ff fe 51 51.
    let mut bytes = bson_bytes(&with(x("bad-utf8", "g-utf8"), field, "QQQQ"));
    let at = bytes.windows(4).position(|w| w == b"QQQQ").unwrap();
    bytes[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    let id = raw(&store)
        .insert_one(RawDocumentBuf::from_bytes(bytes).unwrap())
        .await
        .unwrap()
        .inserted_id;
    let mut stored = bytes_of(&store, &id).await;
    let ops = [
        Op::Status(Filter::new()),
        Op::Status(Filter::new().resource("bad-utf8")),
        Op::Xlock(newcomer("bad-utf8").unwrap()),
        Op::Unlock(LockId::new("g-utf8").unwrap()),
        Op::Renew(LockId::new("g-utf8").unwrap()),
        Op::Purge,
    ];
    for op in ops {
        if matches!(op, Op::Purge) {
            clock.set(T0.saturating_add(PURGE_AFTER));
        }
        let got = perform(&store, &op).await;
        report.operations += 1;
        let what = format!("{name}: {op}");
        if std::env::var_os("HOSTILE_TRACE").is_some() {
            println!("{what} -> {}", short_outcome(&got));
        }
        if matches!(got, Outcome::Other(_)) {
            report
                .failures
                .push(format!("{what} returned {}", short_outcome(&got)));
        }
        if let (Op::Status(f), Outcome::Locks(done) | Outcome::Skipped(done, _)) = (&op, &got)
            && f.resource.is_none()
            && !done.iter().any(|l| l.resource.as_str() == SENTINEL)
        {
            report
                .failures
                .push(format!("{what} did not report the sentinel's lock"));
        }
        let now_stored = bytes_of(&store, &id).await;
        if now_stored != stored {
            // Purge deletes a document left with no lock; other writes report a lock.
            let reported = matches!(&got, Outcome::Locks(done) if !done.is_empty())
                || (matches!(op, Op::Purge) && now_stored.is_none());
            if !reported || matches!(op, Op::Status(_)) {
                report
                    .failures
                    .push(format!("{what} wrote to the document"));
            }
            stored = now_stored;
        }
    }
    clock.set(T0);
    let sentinel_group = LockId::new(SENTINEL_GROUP).unwrap();
    let renewed = store
        .renew(&sentinel_group, renew_ttl(), RENEW_MARGIN)
        .await;
    let released = store.unlock(&sentinel_group).await;
    report.operations += 2;
    for (op, result) in [("renew", renewed), ("unlock", released)] {
        match result {
            Ok(locks) if locks.len() == 1 => {}
            other => report
                .failures
                .push(format!("{name}: sentinel {op}: {other:?}")),
        }
    }
    let _ = store.collection().drop().await;
    report
}
