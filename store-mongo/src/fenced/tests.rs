//! Unit tests of what fenced writes send, without a server.

use super::*;

fn fenced() -> FencedCollection<Document> {
    let client = mongodb::Client::with_options(
        mongodb::options::ClientOptions::builder()
            .hosts(vec![mongodb::options::ServerAddress::Tcp {
                host: "localhost".into(),
                port: Some(1),
            }])
            .build(),
    )
    .expect("a client is made without connecting");
    FencedCollection::new(
        &client.database("d").collection("c"),
        Resource::new("r").expect("a valid name"),
        7,
    )
}

#[tokio::test]
async fn field_names_are_checked() {
    for bad in ["", "_id", "$x", "a.b", "a\0b"] {
        assert!(
            matches!(
                fenced().with_field(bad),
                Err(Error::InvalidArgument {
                    field: "fence field",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(
        fenced().with_field("owner").expect("valid").field(),
        "owner"
    );
}

#[tokio::test]
async fn the_stamp_joins_set_or_ends_a_pipeline() {
    let f = fenced();
    let stamp = doc! {"resource": "r", "fence": 7_i64};
    let UpdateModifications::Document(d) = f
        .stamped_update("t", doc! {"$set": {"a": 1}, "$inc": {"n": 1}}.into())
        .expect("valid")
    else {
        panic!("not a document")
    };
    assert_eq!(
        d,
        doc! {"$set": {"a": 1, "_fence": stamp.clone()}, "$inc": {"n": 1}}
    );
    let UpdateModifications::Pipeline(p) = f
        .stamped_update("t", vec![doc! {"$set": {"a": 1}}].into())
        .expect("valid")
    else {
        panic!("not a pipeline")
    };
    assert_eq!(
        p.last(),
        Some(&doc! {"$set": {"_fence": {"$literal": stamp}}})
    );
}

#[tokio::test]
async fn updates_that_touch_the_fence_or_replace_are_refused() {
    let f = fenced();
    for bad in [
        doc! {"$unset": {"_fence": ""}},
        doc! {"$set": {"_fence.fence": 99}},
        doc! {"a": 1},
    ] {
        assert!(
            matches!(
                f.stamped_update("t", bad.clone().into()),
                Err(Error::InvalidArgument {
                    field: "update",
                    ..
                })
            ),
            "{bad}"
        );
    }
    // A field that only starts with the fence field's name is the user's.
    assert!(
        f.stamped_update("t", doc! {"$set": {"_fenced": 1}}.into())
            .is_ok()
    );
}

#[tokio::test]
async fn upserts_need_an_id_equality() {
    assert!(names_id(&doc! {"_id": 3}));
    assert!(names_id(&doc! {"_id": {"a": 1}, "x": 2}));
    assert!(!names_id(&doc! {"_id": {"$gt": 3}}));
    assert!(!names_id(&doc! {"x": 3}));
}

#[tokio::test]
async fn fences_beyond_bson_are_refused() {
    let f = FencedCollection {
        fence: u64::MAX,
        ..fenced()
    };
    assert!(matches!(
        f.guarded("t", doc! {}),
        Err(Error::InvalidArgument { field: "fence", .. })
    ));
}

#[tokio::test]
async fn a_refusal_names_the_stamp_and_a_foreign_field_is_malformed() {
    let f = fenced();
    let e = f
        .refusal(
            "t",
            doc! {"_id": 1, "_fence": {"resource": "r", "fence": 9_i64}},
        )
        .expect("a stamp");
    assert!(
        matches!(&e, Error::Fenced { fence: 7, seen_fence: 9, seen_resource, .. } if seen_resource == "r"),
        "{e:?}"
    );
    let bad = f
        .refusal("t", doc! {"_id": 1, "_fence": "yes"})
        .expect_err("not a stamp");
    assert!(matches!(bad, Error::Malformed { .. }), "{bad:?}");
}
