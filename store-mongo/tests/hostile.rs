//! Hostile stored documents against the MongoDB store (`MONGODB_URI`).
//!
//! Each input is a raw BSON document written straight into a fresh collection next to a
//! sentinel: a good document holding a live exclusive lock of another group. Every operation
//! that applies to the input (grants on its resource, unlock and renew of the lock ids it
//! names, status, purge) runs on the document as first written (the collection is restored
//! after each one), and its outcome is compared with what it must be:
//!
//! - for a document the decoder refuses (`decode_check` is `Err`): a grant on its resource is
//!   `Malformed` naming exactly what the decoder names; status, unlock and purge are `Skipped`
//!   naming it when they read it (else their ordinary result); renew of a group touching it
//!   is `Malformed`. The document is never written, whatever the operation.
//! - for every other document (and for the rest of the collection in every case): the
//!   engine's own rules applied to the collection as the store's decoder reads it, and the
//!   collection afterwards decodes to the engine's table.
//!
//! Never a panic, never `Backend`; after any error (other than `Skipped`, which finishes the
//! work on the other documents) every document is byte-for-byte as it was; the sentinel is
//! byte-for-byte unchanged throughout, and its group can still be renewed and unlocked. The
//! server-side validity test (`valid_expression`) agrees with the decoder on every input and
//! on every document the operations leave behind, and never raises a server error.
//!
//! The inputs: a wrong BSON type in every field the rules read; negative, double, NaN and
//! Decimal128 numbers where integers belong; `shared.count` disagreeing with the array; a
//! lock id twice in `shared.locks`; an exclusive lock held beside shared ones; `lastFence`
//! at `i64::MAX` and one below; an `_id` alone; 10,000 shared locks in one document (valid);
//! `$`-, dot- and NUL-containing names; look-alike names (Latin and Cyrillic `J`, composed and
//! decomposed `é`), which must stay distinct resources; what the Go library may write (empty
//! and 300-byte lock ids, a 5,000-byte owner, a 600-byte or empty resource, `exclusive:
//! {acquired: false}` alone, locks without `fence`, documents without `lastFence`); field
//! names the store's own pipelines use; strings that are not UTF-8.
//!
//! All mismatches are collected and reported together at the end, after the one-line
//! summary; `HOSTILE_TRACE=1` prints every operation's outcome and each input's duration.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt, TryStreamExt};
use lockwright_engine::table;
use lockwright_engine::{
    Error, Filter, LockDetails, LockId, LockRequest, LockStatus, LockStore, LockTable,
    MalformedDocument, ManualClock, SharedLimit, Timestamp, Ttl,
};
use lockwright_store_mongo::MongoStore;
use lockwright_store_mongo::test_support::{
    decode_check, fresh_store_on, options, snapshot, valid_expression,
};
use mongodb::bson::{Bson, DateTime, Document, RawDocumentBuf, doc};
use mongodb::{Client, Collection};

const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// How far the clock is moved before purge: past every `expiresAt` at `T0 + 60 s`, not past
/// the sentinel's.
const PURGE_AFTER: Duration = Duration::from_secs(120);
const SENTINEL: &str = "sentinel";
const SENTINEL_GROUP: &str = "sentinel-group";
const NEWCOMER: &str = "newcomer";
/// Cases run at once, each on its own collection.
const CONCURRENT_CASES: usize = 4;

// ---------------------------------------------------------------------------------------
// Building documents.

fn at(secs: i64) -> Bson {
    let t0 = i64::try_from(T0.as_millis()).unwrap();
    Bson::DateTime(DateTime::from_millis(t0 + secs * 1000))
}

/// A lock entry as Lockwright writes it: created at `T0 + created` s, expiring at
/// `T0 + expires` s.
fn lock(id: &str, created: i64, expires: Option<i64>) -> Document {
    doc! {
        "lockId": id, "owner": "o", "host": "h", "comment": Bson::Null,
        "createdAt": at(created), "renewedAt": Bson::Null,
        "expiresAt": expires.map_or(Bson::Null, at), "acquired": true, "fence": 3_i64,
    }
}

/// A lock entry as the Go library writes it: no `comment`, no `fence`.
fn go_lock(id: &str, created: i64, expires: Option<i64>) -> Document {
    doc! {
        "lockId": id, "owner": "john", "host": "h1", "createdAt": at(created),
        "renewedAt": Bson::Null, "expiresAt": expires.map_or(Bson::Null, at), "acquired": true,
    }
}

fn empty_exclusive() -> Document {
    doc! {
        "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": Bson::Null, "renewedAt": Bson::Null, "expiresAt": Bson::Null,
        "acquired": false, "fence": Bson::Null,
    }
}

fn exclusive_doc(resource: impl Into<Bson>, l: Document) -> Document {
    doc! {
        "resource": resource.into(), "exclusive": l,
        "shared": { "count": 0, "locks": [] }, "lastFence": 5_i64,
    }
}

fn shared_doc(resource: impl Into<Bson>, locks: Vec<Document>) -> Document {
    let n = i32::try_from(locks.len()).unwrap();
    doc! {
        "resource": resource.into(), "exclusive": empty_exclusive(),
        "shared": { "count": n, "locks": locks }, "lastFence": 5_i64,
    }
}

/// A live exclusive lock of `id` (expires at `T0 + 60 s`).
fn x(resource: &str, id: &str) -> Document {
    exclusive_doc(resource, lock(id, -10, Some(60)))
}

/// Live shared locks of `ids` (expiring at `T0 + 60 s`).
fn s(resource: &str, ids: &[&str]) -> Document {
    shared_doc(
        resource,
        ids.iter().map(|id| lock(id, -10, Some(60))).collect(),
    )
}

fn edit_doc(d: &mut Document, parts: &[&str], value: Option<Bson>) {
    let (first, rest) = parts.split_first().unwrap();
    if rest.is_empty() {
        match value {
            Some(v) => {
                d.insert(*first, v);
            }
            None => {
                d.remove(*first);
            }
        }
        return;
    }
    edit_bson(d.get_mut(*first).unwrap(), rest, value);
}

fn edit_bson(b: &mut Bson, parts: &[&str], value: Option<Bson>) {
    match b {
        Bson::Document(d) => edit_doc(d, parts, value),
        Bson::Array(items) => {
            let i: usize = parts[0].parse().unwrap();
            if parts.len() == 1 {
                match value {
                    Some(v) => items[i] = v,
                    None => {
                        items.remove(i);
                    }
                }
            } else {
                edit_bson(&mut items[i], &parts[1..], value);
            }
        }
        other => panic!("cannot edit inside {other:?}"),
    }
}

/// `d` with the dotted `path` (array indices as numbers) set to `value`, in place.
fn with(mut d: Document, path: &str, value: impl Into<Bson>) -> Document {
    let parts: Vec<&str> = path.split('.').collect();
    edit_doc(&mut d, &parts, Some(value.into()));
    d
}

/// `d` without the dotted `path`.
fn without(mut d: Document, path: &str) -> Document {
    let parts: Vec<&str> = path.split('.').collect();
    edit_doc(&mut d, &parts, None);
    d
}

fn array(items: Vec<Document>) -> Bson {
    Bson::Array(items.into_iter().map(Bson::Document).collect())
}

// ---------------------------------------------------------------------------------------
// The inputs.

struct Case {
    name: String,
    hostile: Document,
    /// Valid documents written alongside it (another resource of a group it names).
    companions: Vec<Document>,
    /// Resources to ask for besides the ones the document names.
    also_ask: Vec<String>,
    /// The shared limits each `slock` is tried with.
    limits: Vec<Option<SharedLimit>>,
}

fn case(name: &str, hostile: Document) -> Case {
    Case {
        name: name.to_string(),
        hostile,
        companions: Vec::new(),
        also_ask: Vec::new(),
        limits: vec![None, Some(SharedLimit::new(1).unwrap())],
    }
}

impl Case {
    fn companion(mut self, d: Document) -> Self {
        self.companions.push(d);
        self
    }

    fn also_ask(mut self, resource: &str) -> Self {
        self.also_ask.push(resource.to_string());
        self
    }

    fn limits(mut self, limits: &[u32]) -> Self {
        self.limits = limits
            .iter()
            .map(|&l| (l > 0).then(|| SharedLimit::new(l).unwrap()))
            .collect();
        self
    }

    /// The resources grants and status ask for: the ones the document names as strings
    /// (an array of strings is matched by each of them), then the extra ones.
    fn resources(&self) -> Vec<String> {
        let mut out = match self.hostile.get("resource") {
            Some(Bson::String(r)) => vec![r.clone()],
            Some(Bson::Array(items)) => items
                .iter()
                .filter_map(|b| b.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        out.extend(self.also_ask.iter().cloned());
        out
    }

    /// The lock ids the document names anywhere (a non-string one as its text, which must
    /// not find it), at most three: the first two and the last.
    fn lock_ids(&self) -> Vec<LockId> {
        fn walk(b: &Bson, out: &mut Vec<String>) {
            match b {
                Bson::Document(d) => {
                    for (k, v) in d {
                        match (k.as_str(), v) {
                            ("lockId", Bson::String(s)) => out.push(s.clone()),
                            ("lockId", Bson::Null) => {}
                            ("lockId", other) => out.push(other.to_string()),
                            _ => walk(v, out),
                        }
                    }
                }
                Bson::Array(items) => items.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        walk(&Bson::Document(self.hostile.clone()), &mut all);
        let mut seen = BTreeSet::new();
        all.retain(|id| seen.insert(id.clone()));
        if all.len() > 3 {
            all = vec![all[0].clone(), all[1].clone(), all[all.len() - 1].clone()];
        }
        all.iter().map(|id| LockId::stored(id)).collect()
    }
}

fn cases() -> Vec<Case> {
    let t0_ms = i64::try_from(T0.as_millis()).unwrap();
    let mut all = vec![
        // `resource`
        case("resource-int", with(x("_", "g-res-int"), "resource", 5)),
        case(
            "resource-array",
            with(
                x("_", "g-res-arr"),
                "resource",
                Bson::Array(vec!["resource-array".into()]),
            ),
        ),
        case(
            "resource-null",
            with(x("_", "g-res-null"), "resource", Bson::Null),
        ),
        case(
            "resource-missing",
            without(x("_", "g-res-missing"), "resource"),
        ),
        case(
            "resource-document",
            with(x("_", "g-res-doc"), "resource", doc! { "$where": "true" }),
        ),
        case("id-only", doc! { "_id": "only-an-id" }),
        // `exclusive`
        case(
            "exclusive-string",
            with(x("exclusive-string", "g"), "exclusive", "oops"),
        ),
        case(
            "exclusive-array",
            with(
                x("exclusive-array", "g"),
                "exclusive",
                array(vec![lock("g-xarr", -10, Some(60))]),
            ),
        ),
        case(
            "exclusive.acquired-string",
            with(
                x("exclusive.acquired-string", "g-acq-s"),
                "exclusive.acquired",
                "yes",
            ),
        ),
        case(
            "exclusive.acquired-int",
            with(
                x("exclusive.acquired-int", "g-acq-i"),
                "exclusive.acquired",
                1,
            ),
        ),
        case(
            "exclusive.lockId-int",
            with(x("exclusive.lockId-int", "_"), "exclusive.lockId", 42),
        ),
        case(
            "exclusive.lockId-missing",
            without(x("exclusive.lockId-missing", "_"), "exclusive.lockId"),
        ),
        case(
            "exclusive.createdAt-string",
            with(
                x("exclusive.createdAt-string", "g-xc-s"),
                "exclusive.createdAt",
                "yesterday",
            ),
        ),
        case(
            "exclusive.createdAt-missing",
            without(
                x("exclusive.createdAt-missing", "g-xc-m"),
                "exclusive.createdAt",
            ),
        ),
        case(
            "exclusive.createdAt-number",
            with(
                x("exclusive.createdAt-number", "g-xc-n"),
                "exclusive.createdAt",
                t0_ms,
            ),
        ),
        case(
            "exclusive.expiresAt-string",
            with(
                x("exclusive.expiresAt-string", "g-xe-s"),
                "exclusive.expiresAt",
                "soon",
            ),
        ),
        case(
            "exclusive.expiresAt-timestamp",
            with(
                x("exclusive.expiresAt-timestamp", "g-xe-t"),
                "exclusive.expiresAt",
                Bson::Timestamp(mongodb::bson::Timestamp {
                    time: 1_800_000_060,
                    increment: 1,
                }),
            ),
        ),
        case(
            "exclusive.expiresAt-number",
            with(
                x("exclusive.expiresAt-number", "g-xe-n"),
                "exclusive.expiresAt",
                t0_ms + 60_000,
            ),
        ),
        case(
            "exclusive.renewedAt-int",
            with(
                x("exclusive.renewedAt-int", "g-xr-i"),
                "exclusive.renewedAt",
                5,
            ),
        ),
        case(
            "exclusive.fence-string",
            with(
                x("exclusive.fence-string", "g-xf-s"),
                "exclusive.fence",
                "7",
            ),
        ),
        case(
            "exclusive.fence-negative",
            with(
                x("exclusive.fence-negative", "g-xf-neg"),
                "exclusive.fence",
                -1,
            ),
        ),
        case(
            "exclusive.fence-double",
            with(
                x("exclusive.fence-double", "g-xf-d"),
                "exclusive.fence",
                3.0,
            ),
        ),
        case(
            "exclusive.details-of-any-type",
            with(
                with(
                    with(x("exclusive.details", "g-x-details"), "exclusive.owner", 42),
                    "exclusive.host",
                    Bson::Array(vec![1.into(), 2.into()]),
                ),
                "exclusive.comment",
                doc! { "a": 1 },
            ),
        ),
        case(
            "exclusive-released-with-garbage",
            doc! {
                "resource": "released-garbage",
                "exclusive": { "acquired": false, "lockId": "ghost", "createdAt": "x",
                               "expiresAt": at(-5), "fence": -1 },
                "shared": { "count": 0, "locks": [] },
            },
        ),
        case(
            "exclusive-empty-document",
            doc! { "resource": "exclusive-empty", "exclusive": {} },
        ),
        case(
            "exclusive-and-shared-null",
            doc! { "resource": "both-null", "exclusive": Bson::Null, "shared": Bson::Null },
        ),
        case(
            "exclusive-dates-before-epoch",
            with(
                with(
                    x("before-epoch", "g-epoch"),
                    "exclusive.createdAt",
                    DateTime::from_millis(-5_000),
                ),
                "exclusive.expiresAt",
                DateTime::from_millis(-1_000),
            ),
        ),
        // `shared`
        case(
            "shared-string",
            with(s("shared-string", &["g-ss"]), "shared", "oops"),
        ),
        case(
            "shared-array",
            with(
                s("shared-array", &["g-sa"]),
                "shared",
                array(vec![
                    doc! { "count": 1, "locks": [lock("g-sa", -10, Some(60))] },
                ]),
            ),
        ),
        case(
            "shared.locks-string",
            with(s("shared.locks-string", &["g-sls"]), "shared.locks", "oops"),
        ),
        case(
            "shared.locks-document",
            with(
                s("shared.locks-document", &["g-sld"]),
                "shared.locks",
                lock("g-sld", -10, Some(60)),
            ),
        ),
        case(
            "shared.locks.N-string",
            with(
                s("shared.locks.N-string", &["g-sn1", "g-sn2"]),
                "shared.locks.1",
                "x",
            ),
        ),
        case(
            "shared.locks.N-null",
            with(
                s("shared.locks.N-null", &["g-snn1", "g-snn2"]),
                "shared.locks.0",
                Bson::Null,
            ),
        ),
        case(
            "shared.locks.N-array",
            with(
                s("shared.locks.N-array", &["g-sna1", "g-sna2"]),
                "shared.locks.0",
                array(vec![lock("g-sna1", -10, Some(60))]),
            ),
        ),
        case(
            "shared.locks.N.lockId-int",
            with(
                s("shared.locks.N.lockId-int", &["g-sli", "_"]),
                "shared.locks.1.lockId",
                7,
            ),
        ),
        case(
            "shared.locks.N.lockId-missing",
            without(
                s("shared.locks.N.lockId-missing", &["_", "g-slm"]),
                "shared.locks.0.lockId",
            ),
        ),
        case(
            "shared.locks.N.createdAt-string",
            with(
                s("shared.locks.N.createdAt-string", &["g-scs1", "g-scs2"]),
                "shared.locks.1.createdAt",
                "x",
            ),
        ),
        case(
            "shared.locks.N.createdAt-missing",
            without(
                s("shared.locks.N.createdAt-missing", &["g-scm1", "g-scm2"]),
                "shared.locks.0.createdAt",
            ),
        ),
        case(
            "shared.locks.N.expiresAt-string",
            with(
                s("shared.locks.N.expiresAt-string", &["g-ses1", "g-ses2"]),
                "shared.locks.1.expiresAt",
                "x",
            ),
        ),
        case(
            "shared.locks.N.renewedAt-bool",
            with(
                s("shared.locks.N.renewedAt-bool", &["g-srb1", "g-srb2"]),
                "shared.locks.0.renewedAt",
                true,
            ),
        ),
        case(
            "shared.locks.N.fence-negative",
            with(
                s("shared.locks.N.fence-negative", &["g-sfn1", "g-sfn2"]),
                "shared.locks.1.fence",
                -5_i64,
            ),
        ),
        case(
            "shared.locks.N.fence-double",
            with(
                s("shared.locks.N.fence-double", &["g-sfd1", "g-sfd2"]),
                "shared.locks.0.fence",
                2.5,
            ),
        ),
        case(
            "shared.locks.N.details-of-any-type",
            with(
                with(
                    with(
                        s("shared.details", &["g-sd1", "g-sd2"]),
                        "shared.locks.0.owner",
                        doc! { "name": { "first": "x" } },
                    ),
                    "shared.locks.1.host",
                    3.5,
                ),
                "shared.locks.1.comment",
                Bson::Array(vec!["c".into()]),
            ),
        ),
        case(
            "shared.locks.N.acquired-nonsense",
            with(
                s("shared.acquired-nonsense", &["g-san"]),
                "shared.locks.0.acquired",
                "nonsense",
            ),
        ),
        case(
            "shared.count-string",
            with(
                s("shared.count-string", &["g-scnt-s", "g-scnt-s2"]),
                "shared.count",
                "2",
            ),
        ),
        case(
            "shared.count-negative",
            with(s("shared.count-negative", &[]), "shared.count", -1),
        ),
        case(
            "shared.count-too-high",
            with(
                s("shared.count-too-high", &["g-sch1", "g-sch2"]),
                "shared.count",
                3,
            ),
        ),
        case(
            "shared.count-too-low",
            with(
                s("shared.count-too-low", &["g-scl1", "g-scl2"]),
                "shared.count",
                1,
            ),
        ),
        case(
            "shared.count-double",
            with(
                s("shared.count-double", &["g-scd1", "g-scd2"]),
                "shared.count",
                2.0,
            ),
        ),
        case(
            "shared.count-missing",
            without(
                s("shared.count-missing", &["g-scm-1", "g-scm-2"]),
                "shared.count",
            ),
        ),
        case(
            "shared.count-long",
            with(
                s("shared.count-long", &["g-scl-1", "g-scl-2"]),
                "shared.count",
                2_i64,
            ),
        ),
        case(
            "shared.count-without-locks",
            doc! { "resource": "count-without-locks", "shared": { "count": 0 } },
        ),
        case(
            "shared-empty-document",
            doc! { "resource": "shared-empty", "shared": {} },
        ),
        case(
            "shared.locks-duplicate-lock-id",
            s("shared.duplicate", &["g-dup", "g-dup"]),
        ),
        case(
            "exclusive-held-with-shared-locks",
            with(
                s("held-with-shared", &["g-both-s"]),
                "exclusive",
                lock("g-both-x", -10, Some(60)),
            ),
        ),
        // `lastFence`
        case(
            "lastFence-string",
            with(x("lastFence-string", "g-lf-s"), "lastFence", "9"),
        ),
        case(
            "lastFence-negative",
            with(x("lastFence-negative", "g-lf-n"), "lastFence", -1_i64),
        ),
        case(
            "lastFence-double",
            with(x("lastFence-double", "g-lf-d"), "lastFence", 1.5),
        ),
        case(
            "lastFence-bool",
            with(x("lastFence-bool", "g-lf-b"), "lastFence", true),
        ),
        case(
            "lastFence-int32",
            with(x("lastFence-int32", "g-lf-i"), "lastFence", 5_i32),
        ),
        case(
            "lastFence-i64-max",
            with(x("lastFence-max", "g-lf-max"), "lastFence", i64::MAX),
        ),
        case(
            "lastFence-i64-max-minus-1-live",
            with(
                x("lastFence-max-1-live", "g-lf-max1"),
                "lastFence",
                i64::MAX - 1,
            ),
        ),
        case(
            "lastFence-i64-max-minus-1-expired",
            with(
                exclusive_doc("lastFence-max-1-expired", lock("g-lf-max1e", -10, Some(-1))),
                "lastFence",
                i64::MAX - 1,
            ),
        ),
        // Names that look like operators or paths, NUL bytes, look-alikes.
        case(
            "dollar-where-names",
            with(x("$where", "$where"), "exclusive.owner", "$where"),
        ),
        case(
            "dotted-names",
            with(s("a.b", &["a.b", "c.d"]), "shared.locks.0.owner", "a.b"),
        ),
        case(
            "dollar-dollar-now-names",
            with(
                exclusive_doc("$$NOW", lock("$$NOW", -10, Some(-1))),
                "exclusive.owner",
                "$$NOW",
            ),
        ),
        case(
            "dollar-names-in-malformed-document",
            with(
                s("$where", &["$$ROOT", "$exclusive.lockId"]),
                "shared.count",
                7,
            ),
        ),
        case(
            "nul-bytes-in-names",
            with(x("nul\0res", "id\0x"), "exclusive.owner", "o\0wner"),
        ),
        case("cyrillic-look-alike", x("Job", "g-latin-job")).also_ask("\u{408}ob"),
        case("e-acute-composed", x("caf\u{e9}", "g-composed")).also_ask("cafe\u{301}"),
        case("e-acute-decomposed", x("cafe\u{301}", "g-decomposed")).also_ask("caf\u{e9}"),
        // What the Go library may write.
        case("go-empty-lock-id", x("go-empty-id", "")),
        case(
            "go-300-byte-lock-id",
            s("go-long-id", &[&"L".repeat(300), "g-short"]),
        ),
        case(
            "go-5000-byte-owner",
            with(
                x("go-long-owner", "g-long-owner"),
                "exclusive.owner",
                "o".repeat(5_000),
            ),
        ),
        case(
            "go-600-byte-resource",
            x(&"r".repeat(600), "g-long-resource"),
        ),
        case("go-empty-resource", x("", "g-empty-resource")),
        case(
            "go-released-exclusive-alone",
            doc! { "resource": "go-released", "exclusive": { "acquired": false } },
        ),
        case(
            "go-shared-without-fences",
            doc! {
                "resource": "go-shared",
                "exclusive": { "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null,
                               "createdAt": Bson::Null, "renewedAt": Bson::Null,
                               "expiresAt": Bson::Null, "acquired": false },
                "shared": { "count": 2, "locks": [
                    go_lock("go-1", -5, None), go_lock("go-2", -4, Some(60)),
                ] },
            },
        ),
        case(
            "go-expired-exclusive-without-fences",
            doc! {
                "resource": "go-exclusive",
                "exclusive": go_lock("go-x", -20, Some(-10)),
                "shared": { "count": 0, "locks": [] },
            },
        ),
        case(
            "dotted-and-dollar-keys",
            doc! {
                "resource": "odd-keys",
                "exclusive.acquired": true,
                "exclusive": { "acquired": false, "$bad": 1, "a.b": 2 },
            },
        ),
        // Boundaries the rules decide on.
        case(
            "shared.locks.N.expiresAt-exactly-now",
            with(
                s("expires-now", &["g-now1", "g-now2"]),
                "shared.locks.0.expiresAt",
                at(0),
            ),
        ),
        case(
            "exclusive.fence-i64-max",
            with(x("fence-max", "g-fence-max"), "exclusive.fence", i64::MAX),
        ),
        case(
            "expired-but-created-after-the-purge",
            exclusive_doc("created-later", lock("g-later", 200, Some(-1))),
        ),
        case(
            "released-exclusive-names-a-shared-holder",
            with(
                with(
                    s("released-names-holder", &["g-both"]),
                    "exclusive.lockId",
                    "g-both",
                ),
                "exclusive.expiresAt",
                at(-5),
            ),
        ),
        // Fields the store's own pipelines use, or that no rule reads.
        case(
            "lastGrant-string",
            with(
                x("lastGrant-string", "g-lg"),
                "lastGrant",
                "not an ObjectId",
            ),
        ),
        case(
            "pipeline-field-names-in-a-good-document",
            with(
                with(
                    x("temp-fields-good", "g-tmp-good"),
                    "__lockwright_valid",
                    false,
                ),
                "__lockwright_grant",
                true,
            ),
        ),
        case(
            "pipeline-field-names-in-a-malformed-document",
            with(
                with(
                    with(x("temp-fields-bad", "g-tmp-bad"), "exclusive.fence", "x"),
                    "__lockwright_valid",
                    true,
                ),
                "__lockwright_live_shared",
                Bson::Array(vec![]),
            ),
        ),
        case(
            "now-field-name-in-a-malformed-document",
            with(
                with(x("now-field-bad", "g-now-bad"), "shared.count", 4),
                "__lockwright_now",
                "later",
            ),
        ),
        // The newcomer's own locks.
        case(
            "newcomer-holds-an-expired-shared-lock",
            shared_doc(
                "newcomer-expired",
                vec![lock(NEWCOMER, -20, Some(-1)), lock("g-peer", -10, Some(60))],
            ),
        ),
        case(
            "newcomer-holds-a-live-shared-lock",
            s("newcomer-live", &[NEWCOMER, "g-peer2"]),
        ),
        // Numbers of other kinds where integers belong.
        case(
            "lastFence-decimal128",
            with(
                x("lastFence-decimal128", "g-lf-dec"),
                "lastFence",
                Bson::Decimal128(mongodb::bson::Decimal128::from_bytes([0; 16])),
            ),
        ),
        case(
            "exclusive.fence-NaN",
            with(x("fence-nan", "g-nan"), "exclusive.fence", f64::NAN),
        ),
        // A group with a lock in a good document and one in a malformed one.
        case(
            "group-spans-malformed-and-good",
            with(
                s("span-bad", &["g-span", "g-span-other"]),
                "shared.count",
                5,
            ),
        )
        .companion(exclusive_doc("span-good", lock("g-span", -10, Some(60)))),
    ];
    // 10,000 shared locks in one document, one in ten expired.
    let locks: Vec<Document> = (0..10_000)
        .map(|i| {
            let expires = if i % 10 == 0 { -1 } else { 3_600 };
            lock(&format!("g-{i:05}"), -20, Some(expires))
        })
        .collect();
    // First, as the slowest: the others run beside it.
    all.insert(
        0,
        case(
            "ten-thousand-shared-locks",
            shared_doc("ten-thousand", locks),
        )
        .limits(&[9_000, 9_001, 0]),
    );
    all
}

// ---------------------------------------------------------------------------------------
// Operations and their outcomes.

#[derive(Clone)]
enum Op {
    Xlock(LockRequest),
    Slock(LockRequest, Option<SharedLimit>),
    Unlock(LockId),
    Renew(LockId),
    Status(Filter),
    Purge,
}

fn short(s: &str) -> String {
    if s.len() <= 40 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(16).collect();
        format!("{head:?}..({} bytes)", s.len())
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Xlock(r) => write!(f, "xlock({})", short(r.resource.as_str())),
            Op::Slock(r, l) => write!(
                f,
                "slock({}, limit {:?})",
                short(r.resource.as_str()),
                l.map(SharedLimit::get)
            ),
            Op::Unlock(id) => write!(f, "unlock({})", short(id.as_str())),
            Op::Renew(id) => write!(f, "renew({})", short(id.as_str())),
            Op::Status(filter) => match (&filter.resource, &filter.lock_id) {
                (Some(r), _) => write!(f, "status(resource {})", short(r)),
                (None, Some(l)) => write!(f, "status(lock id {})", short(l)),
                (None, None) => write!(f, "status(all)"),
            },
            Op::Purge => write!(f, "purge"),
        }
    }
}

/// What an operation returned, comparable.
#[derive(Debug, PartialEq)]
enum Outcome {
    Locks(Vec<LockStatus>),
    AlreadyLocked(String),
    LockNotFound,
    NotRenewable(Vec<LockStatus>),
    Malformed(MalformedDocument),
    Skipped(Vec<LockStatus>, Vec<MalformedDocument>),
    Invalid(&'static str),
    /// Anything else: `Backend`, `Misconfigured`, a panic.
    Other(String),
}

impl Outcome {
    /// An error that is not `Skipped`: the operation must have written nothing.
    fn wrote_nothing(&self) -> bool {
        !matches!(self, Outcome::Locks(_) | Outcome::Skipped(..))
    }
}

fn outcome(r: Result<Vec<LockStatus>, Error>) -> Outcome {
    match r {
        Ok(v) => Outcome::Locks(v),
        Err(Error::AlreadyLocked { resource }) => Outcome::AlreadyLocked(resource.to_string()),
        Err(Error::LockNotFound) => Outcome::LockNotFound,
        Err(Error::NotRenewable { locks }) => Outcome::NotRenewable(locks),
        Err(Error::Malformed {
            resource,
            field,
            reason,
        }) => Outcome::Malformed(MalformedDocument {
            resource,
            field,
            reason,
        }),
        Err(Error::Skipped { done, skipped }) => Outcome::Skipped(done, skipped),
        Err(Error::InvalidArgument { field, .. }) => Outcome::Invalid(field),
        Err(other) => Outcome::Other(format!(
            "{other} ({:?})",
            std::error::Error::source(&other).map(ToString::to_string)
        )),
    }
}

/// An outcome in a few words, for the trace (`HOSTILE_TRACE=1`).
fn short_outcome(o: &Outcome) -> String {
    let locks = |v: &[LockStatus]| {
        let names: Vec<String> = v
            .iter()
            .take(3)
            .map(|l| {
                format!(
                    "{}/{}",
                    short(l.resource.as_str()),
                    short(l.lock_id.as_str())
                )
            })
            .collect();
        format!("{} lock(s) {}", v.len(), names.join(" "))
    };
    match o {
        Outcome::Locks(v) => format!("Ok({})", locks(v)),
        Outcome::NotRenewable(v) => format!("NotRenewable({})", locks(v)),
        Outcome::Skipped(done, skipped) => format!(
            "Skipped(done {}; {})",
            locks(done),
            skipped
                .iter()
                .map(|m| format!("{} at {}", short(&m.resource), m.field))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Outcome::Malformed(m) => format!("Malformed({} at {})", short(&m.resource), m.field),
        Outcome::Other(e) => format!("Other({})", e.chars().take(300).collect::<String>()),
        other => format!("{other:?}"),
    }
}

fn outcome_one(r: Result<LockStatus, Error>) -> Outcome {
    outcome(r.map(|l| vec![l]))
}

fn renew_ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

const RENEW_MARGIN: Duration = Duration::from_secs(1);

async fn perform(store: &MongoStore, op: &Op) -> Outcome {
    let run = async {
        match op {
            Op::Xlock(r) => outcome_one(store.xlock(r).await),
            Op::Slock(r, l) => outcome_one(store.slock(r, *l).await),
            Op::Unlock(id) => outcome(store.unlock(id).await),
            Op::Renew(id) => outcome(store.renew(id, renew_ttl(), RENEW_MARGIN).await),
            Op::Status(f) => outcome(store.status(f).await),
            Op::Purge => outcome(store.purge().await),
        }
    };
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(o) => o,
        Err(panic) => Outcome::Other(format!(
            "panic: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default()
        )),
    }
}

/// The two values side by side, cut around their first difference when long.
fn contrast(expected: &impl Debug, got: &impl Debug) -> String {
    let (e, g) = (format!("{expected:?}"), format!("{got:?}"));
    if e.len() + g.len() < 3_000 {
        return format!("expected {e}\n      got {g}");
    }
    let at = e
        .bytes()
        .zip(g.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(e.len().min(g.len()));
    let window = |s: &str| {
        let from = (0..=at.saturating_sub(300))
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        let to = (at + 600).min(s.len());
        let to = (to..=s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(s.len());
        format!("({} chars) ...{}...", s.len(), &s[from..to])
    };
    format!(
        "first difference at char {at}: expected {}\n      got {}",
        window(&e),
        window(&g)
    )
}

// ---------------------------------------------------------------------------------------
// The collection as stored.

fn raw(store: &MongoStore) -> Collection<RawDocumentBuf> {
    store.collection().clone_with_type::<RawDocumentBuf>()
}

/// Every document's bytes, in `_id` order.
async fn all_bytes(store: &MongoStore) -> Vec<Vec<u8>> {
    raw(store)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .unwrap()
        .try_collect::<Vec<RawDocumentBuf>>()
        .await
        .unwrap()
        .into_iter()
        .map(RawDocumentBuf::into_bytes)
        .collect()
}

async fn bytes_of(store: &MongoStore, id: &Bson) -> Option<Vec<u8>> {
    raw(store)
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .map(RawDocumentBuf::into_bytes)
}

/// What differs between two lists of stored documents (in `_id` order), field by field.
fn changes(before: &[Vec<u8>], after: &[Vec<u8>]) -> String {
    let docs = |all: &[Vec<u8>]| -> Vec<Document> {
        all.iter()
            .map(|b| {
                RawDocumentBuf::from_bytes(b.clone())
                    .unwrap()
                    .to_document()
                    .unwrap()
            })
            .collect()
    };
    let (before, after) = (docs(before), docs(after));
    let mut out = Vec::new();
    for d in &before {
        let id = d.get("_id");
        match after.iter().find(|a| a.get("_id") == id) {
            None => out.push(format!("{} deleted", short(&d.to_string()))),
            Some(a) if a == d => {
                if bson_bytes(a) != bson_bytes(d) {
                    out.push(format!("{} re-encoded", short(&d.to_string())));
                }
            }
            Some(a) => {
                let keys: BTreeSet<&String> = d.keys().chain(a.keys()).collect();
                for k in keys {
                    if d.get(k) != a.get(k) {
                        out.push(format!(
                            "`{k}` of {}: {} -> {}",
                            short(d.get_str("resource").unwrap_or("?")),
                            short(&format!("{:?}", d.get(k))),
                            short(&format!("{:?}", a.get(k)))
                        ));
                    }
                }
            }
        }
    }
    for a in &after {
        if !before.iter().any(|d| d.get("_id") == a.get("_id")) {
            out.push(format!("{} inserted", short(&a.to_string())));
        }
    }
    out.join("; ")
}

fn bson_bytes(d: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    d.to_writer(&mut out).unwrap();
    out
}

/// Whether the document `id` matches `query` on the server.
async fn matches(store: &MongoStore, id: &Bson, query: Document) -> bool {
    store
        .collection()
        .count_documents(doc! { "$and": [ { "_id": id.clone() }, query ] })
        .await
        .unwrap()
        > 0
}

/// The documents holding (by the server's path matching) a lock of `ids`.
fn group_query(ids: Bson) -> Document {
    doc! { "$or": [ { "exclusive.lockId": ids.clone() }, { "shared.locks.lockId": ids } ] }
}

/// The lock ids a malformed document names where the store looks for them (a document
/// `exclusive`, an array `shared.locks`).
fn raw_lock_ids(d: &Document) -> Vec<String> {
    let mut ids = Vec::new();
    if let Ok(id) = d
        .get_document("exclusive")
        .and_then(|x| x.get_str("lockId"))
    {
        ids.push(id.to_string());
    }
    if let Ok(locks) = d.get_document("shared").and_then(|s| s.get_array("locks")) {
        ids.extend(
            locks
                .iter()
                .filter_map(|l| l.as_document()?.get_str("lockId").ok())
                .map(str::to_string),
        );
    }
    ids
}

/// The server's validity verdict on every document, against the decoder's.
async fn check_agreement(store: &MongoStore, when: &str, failures: &mut Vec<String>) {
    let docs: Vec<Document> = store
        .collection()
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let verdicts: Result<Vec<Document>, _> = match store
        .collection()
        .aggregate(vec![doc! { "$project": { "ok": valid_expression() } }])
        .await
    {
        Ok(cursor) => cursor.try_collect().await,
        Err(e) => Err(e),
    };
    let verdicts = match verdicts {
        Ok(v) => v,
        Err(e) => {
            failures.push(format!("{when}: the validity aggregation failed: {e}"));
            return;
        }
    };
    for d in &docs {
        let id = d.get("_id").cloned().unwrap_or(Bson::Null);
        let server = verdicts
            .iter()
            .find(|v| v.get("_id") == Some(&id))
            .and_then(|v| v.get_bool("ok").ok());
        let decoder = decode_check(d);
        if server != Some(decoder.is_ok()) {
            failures.push(format!(
                "{when}: server validity {server:?} but decoder {decoder:?} on {}",
                short(&d.to_string())
            ));
        }
    }
}

/// The collection without the malformed documents, as the store's decoder reads it; `Err`
/// when some other document does not decode (the store wrote something it cannot read).
async fn readable_table(store: &MongoStore, bad: &[Bad]) -> Result<LockTable, String> {
    if !bad.is_empty() {
        let ids: Vec<Bson> = bad.iter().map(|b| b.id.clone()).collect();
        store
            .collection()
            .delete_many(doc! { "_id": { "$in": ids } })
            .await
            .unwrap();
    }
    let docs: Vec<Document> = store
        .collection()
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let refused: Vec<String> = docs
        .iter()
        .filter_map(|d| {
            decode_check(d)
                .err()
                .map(|m| format!("{m} in {}", short(&d.to_string())))
        })
        .collect();
    if refused.is_empty() {
        Ok(snapshot(store).await)
    } else {
        Err(format!(
            "documents the store's decoder refuses: {}",
            refused.join("; ")
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Running one input.

/// A document the decoder refuses.
struct Bad {
    id: Bson,
    doc: Document,
    bytes: Vec<u8>,
    complaint: MalformedDocument,
}

struct World<'a> {
    store: &'a MongoStore,
    /// The readable documents, decoded.
    table: LockTable,
    bad: Vec<Bad>,
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
                    (None, Op::Slock(_, limit)) => outcome_one(t.slock(r, *limit, now)),
                    (None, _) => outcome_one(t.xlock(r, now)),
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

fn newcomer(resource: &str) -> Result<LockRequest, Error> {
    let details = LockDetails::new()
        .owner("newcomer-owner")
        .ttl(Duration::from_secs(30));
    LockRequest::new(resource, NEWCOMER, &details)
}

fn operations(case: &Case, failures: &mut Vec<String>) -> Vec<Op> {
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
struct Report {
    inputs: usize,
    operations: usize,
    failures: Vec<String>,
}

async fn run_case(client: &Client, case: &Case) -> Report {
    let mut report = Report {
        inputs: 1,
        ..Report::default()
    };
    let failures = &mut report.failures;
    let name = &case.name;
    let started = std::time::Instant::now();
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store_on(client, Some(Arc::clone(&clock))).await;
    let coll = store.collection().clone();

    let sentinel_request = LockRequest::new(
        SENTINEL,
        SENTINEL_GROUP,
        &LockDetails::new().ttl(Duration::from_secs(3_600)),
    )
    .unwrap();
    store.xlock(&sentinel_request).await.unwrap();
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
async fn run_invalid_utf8_case(client: &Client, field: &str) -> Report {
    let name = format!("invalid-utf8-in-{field}");
    let mut report = Report {
        inputs: 1,
        ..Report::default()
    };
    let clock = Arc::new(ManualClock::new(T0));
    let store = fresh_store_on(client, Some(Arc::clone(&clock))).await;
    let sentinel_request = LockRequest::new(
        SENTINEL,
        SENTINEL_GROUP,
        &LockDetails::new().ttl(Duration::from_secs(3_600)),
    )
    .unwrap();
    store.xlock(&sentinel_request).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_documents_are_refused_typed_and_isolated() {
    let client = Client::with_options(options().await).unwrap();
    let cases = cases();
    assert!(cases.len() >= 40, "{} inputs", cases.len());
    let mut reports: Vec<Report> = futures_util::stream::iter(&cases)
        .map(|c| run_case(&client, c))
        .buffer_unordered(CONCURRENT_CASES)
        .collect()
        .await;
    for field in ["exclusive.owner", "exclusive.lockId", "resource"] {
        reports.push(run_invalid_utf8_case(&client, field).await);
    }
    client.clone().shutdown().await;
    let inputs: usize = reports.iter().map(|r| r.inputs).sum();
    let operations: usize = reports.iter().map(|r| r.operations).sum();
    let failures: Vec<&String> = reports.iter().flat_map(|r| &r.failures).collect();
    println!("hostile: {inputs} inputs, {operations} operations checked");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| format!("- {f}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
