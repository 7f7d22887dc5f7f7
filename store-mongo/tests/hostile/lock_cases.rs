//! The inputs that break a lock entry: `exclusive` and `shared`, field by field.

use super::*;

/// Inputs breaking `exclusive`: its type, and each field of its lock.
pub(crate) fn exclusive_cases(t0_ms: i64) -> Vec<Case> {
    vec![
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
    ]
}

/// Inputs breaking `shared`: its type, its count, and each field of its locks.
pub(crate) fn shared_cases() -> Vec<Case> {
    vec![
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
    ]
}
