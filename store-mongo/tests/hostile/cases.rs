//! The inputs: each hostile document, with the companions, extra resources and limits it is
//! tried with.

use super::*;

pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) hostile: Document,
    /// Valid documents written alongside it (another resource of a group it names).
    pub(crate) companions: Vec<Document>,
    /// Resources to ask for besides the ones the document names.
    pub(crate) also_ask: Vec<String>,
    /// The shared limits each `slock` is tried with.
    pub(crate) limits: Vec<Option<SharedLimit>>,
}

pub(crate) fn case(name: &str, hostile: Document) -> Case {
    Case {
        name: name.to_string(),
        hostile,
        companions: Vec::new(),
        also_ask: Vec::new(),
        limits: vec![None, Some(SharedLimit::new(1).unwrap())],
    }
}

impl Case {
    pub(crate) fn companion(mut self, d: Document) -> Self {
        self.companions.push(d);
        self
    }

    pub(crate) fn also_ask(mut self, resource: &str) -> Self {
        self.also_ask.push(resource.to_string());
        self
    }

    pub(crate) fn limits(mut self, limits: &[u32]) -> Self {
        self.limits = limits
            .iter()
            .map(|&l| (l > 0).then(|| SharedLimit::new(l).unwrap()))
            .collect();
        self
    }

    /// The resources grants and status ask for: the ones the document names as strings
    /// (an array of strings is matched by each of them), then the extra ones.
    pub(crate) fn resources(&self) -> Vec<String> {
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
    pub(crate) fn lock_ids(&self) -> Vec<LockId> {
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

pub(crate) fn cases() -> Vec<Case> {
    let t0_ms = i64::try_from(T0.as_millis()).unwrap();
    let mut all: Vec<Case> = [
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
    ]
    .into_iter()
    .chain(exclusive_cases(t0_ms))
    .chain(shared_cases())
    .chain(queue_cases())
    .chain([
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
    ])
    .collect();
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

/// A place in a queue: `ticket` in `mode`, taken at `T0 + queued` s, lapsing at
/// `T0 + expires` s.
fn place(ticket: &str, mode: &str, queued: i64, expires: i64) -> Document {
    doc! { "ticket": ticket, "mode": mode, "queuedAt": at(queued), "expiresAt": at(expires) }
}

/// Three places: a live exclusive one, a dead shared one, a live shared one.
fn places() -> Vec<Document> {
    vec![
        place("t-1", "exclusive", -5, 3_600),
        place("t-2", "shared", -4, -1),
        place("t-3", "shared", -3, 3_600),
    ]
}

/// Inputs breaking `queue` (the places of fair waiters): its type, each field of a place,
/// a ticket twice; and good queues (live and dead places, null, empty) beside free and held
/// locks, which grants must wait behind and purge must keep.
pub(crate) fn queue_cases() -> Vec<Case> {
    let free = |r: &str| shared_doc(r, vec![]);
    let queued = |d: Document| with(d, "queue", array(places()));
    vec![
        case(
            "queue-string",
            with(x("queue-string", "g-q-s"), "queue", "t-1"),
        ),
        case(
            "queue-document",
            with(
                x("queue-document", "g-q-d"),
                "queue",
                doc! { "0": place("t-1", "shared", -1, 60) },
            ),
        ),
        case("queue-int", with(free("queue-int"), "queue", 3)),
        case(
            "queue.0-not-a-document",
            with(
                free("queue-0-int"),
                "queue",
                Bson::Array(vec![Bson::Int32(1)]),
            ),
        ),
        case(
            "queue.1-an-array",
            with(
                free("queue-1-array"),
                "queue",
                Bson::Array(vec![
                    Bson::Document(place("t-1", "shared", -1, 60)),
                    Bson::Array(vec![Bson::Document(place("t-2", "shared", -1, 60))]),
                ]),
            ),
        ),
        case(
            "queue.0.ticket-missing",
            without(queued(free("q-ticket-missing")), "queue.0.ticket"),
        ),
        case(
            "queue.0.ticket-int",
            with(queued(free("q-ticket-int")), "queue.0.ticket", 7),
        ),
        case(
            "queue.0.ticket-null",
            with(
                queued(x("q-ticket-null", "g-q-tn")),
                "queue.0.ticket",
                Bson::Null,
            ),
        ),
        case(
            "queue.1.mode-unknown",
            with(queued(free("q-mode-unknown")), "queue.1.mode", "both"),
        ),
        case(
            "queue.1.mode-bool",
            with(queued(free("q-mode-bool")), "queue.1.mode", true),
        ),
        case(
            "queue.1.mode-missing",
            without(queued(x("q-mode-missing", "g-q-mm")), "queue.1.mode"),
        ),
        case(
            "queue.2.queuedAt-string",
            with(queued(free("q-queued-string")), "queue.2.queuedAt", "now"),
        ),
        case(
            "queue.2.queuedAt-null",
            with(
                queued(free("q-queued-null")),
                "queue.2.queuedAt",
                Bson::Null,
            ),
        ),
        case(
            "queue.2.expiresAt-missing",
            without(queued(free("q-expires-missing")), "queue.2.expiresAt"),
        ),
        case(
            "queue.2.expiresAt-int",
            with(
                queued(x("q-expires-int", "g-q-ei")),
                "queue.2.expiresAt",
                5_i64,
            ),
        ),
        case(
            "queue.2.expiresAt-null",
            with(
                queued(free("q-expires-null")),
                "queue.2.expiresAt",
                Bson::Null,
            ),
        ),
        case(
            "queue-ticket-twice",
            with(queued(free("q-ticket-twice")), "queue.2.ticket", "t-1"),
        ),
        case(
            "queue-ticket-twice-one-dead",
            with(
                queued(s("q-ticket-twice-dead", &["g-q-td"])),
                "queue.1.ticket",
                "t-3",
            ),
        ),
        case(
            "queue-in-a-malformed-document",
            with(queued(x("q-bad-doc", "g-q-bd")), "shared.count", 3),
        ),
        // Good queues.
        case("queue-null", with(free("queue-null"), "queue", Bson::Null)),
        case(
            "queue-empty",
            with(x("queue-empty", "g-q-e"), "queue", Bson::Array(vec![])),
        ),
        case("queue-on-a-free-resource", queued(free("q-free"))),
        case(
            "queue-of-dead-places-only",
            with(
                free("q-dead"),
                "queue",
                array(vec![place("t-9", "exclusive", -9, -1)]),
            ),
        ),
        case(
            "queue-behind-an-expired-lock",
            queued(exclusive_doc("q-expired", lock("g-q-x", -20, Some(-1)))),
        ),
        case(
            "queue-behind-shared-locks",
            queued(s("q-shared", &["g-q-s1", "g-q-s2"])),
        )
        .limits(&[2, 3, 4, 0]),
        case(
            "queue-with-extra-fields-in-places",
            with(queued(free("q-extra")), "queue.0.note", "kept"),
        ),
    ]
}
