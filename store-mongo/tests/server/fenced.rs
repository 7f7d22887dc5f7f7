//! Fenced writes to a user's collection: one command when the fence lets the write
//! through, two (the write, then one read of the stamp that refuses it) when it does not;
//! and the server finds the document by its `_id` index for both, never by a collection
//! scan, whatever the collection holds.

use super::*;
use lockwright_engine::Resource;
use lockwright_store_mongo::fenced::FencedCollection;
use lockwright_store_mongo::test_support::winning_stages;

/// The write was refused by the fence.
#[track_caller]
fn assert_fenced<T: std::fmt::Debug>(what: &str, result: Result<T, Error>) {
    assert!(
        matches!(result, Err(Error::Fenced { .. })),
        "{what}: {result:?}"
    );
}

/// The winning plan of `command` (an update, delete or find the fenced writes sent, as
/// sent) finds its document through an index: no collection scan.
async fn assert_by_index(db: &mongodb::Database, name: &str, command: &Document) {
    let inner = match name {
        "update" | "delete" => {
            let mut c = doc! { name: command.get_str(name).unwrap() };
            let key = if name == "update" {
                "updates"
            } else {
                "deletes"
            };
            c.insert(key, command.get_array(key).unwrap().clone());
            c
        }
        "find" => doc! {
            "find": command.get_str("find").unwrap(),
            "filter": command.get_document("filter").unwrap().clone(),
        },
        other => panic!("not a command this test explains: {other}"),
    };
    let explained = db
        .run_command(doc! { "explain": inner, "verbosity": "queryPlanner" })
        .await
        .unwrap();
    let stages = winning_stages(&explained);
    assert!(
        stages
            .iter()
            .any(|s| s.starts_with("IXSCAN") || s == "IDHACK")
            && !stages.iter().any(|s| s == "COLLSCAN"),
        "{name}: the winning plan is {stages:?}, not by index, for {command}"
    );
}

#[tokio::test]
async fn fenced_writes_are_one_command_and_a_refusal_two_all_by_index() {
    let (client, commands) = monitored_client().await;
    let store = fresh_store_on(&client, None).await;
    let db = client.database(&store.collection().namespace().db);
    let orders = db.collection::<Document>(&format!("{}_orders", store.collection().name()));
    // Many documents, so that a collection scan could not pass for an index's work.
    let filler: Vec<Document> = (100..1_100)
        .map(|i| doc! { "_id": i, "state": "old" })
        .collect();
    orders.insert_many(filler).await.unwrap();
    let resource = Resource::new("orders").unwrap();
    let current = FencedCollection::new(&orders, resource.clone(), 20);
    let stale = FencedCollection::new(&orders, resource, 10);
    commands.take();

    current
        .insert_one(&doc! { "_id": 1, "state": "new" })
        .await
        .unwrap();
    assert_eq!(commands.take(), ["insert"], "insert_one");
    current
        .update_one(doc! { "_id": 1 }, doc! { "$set": { "state": "paid" } })
        .await
        .unwrap();
    assert_eq!(commands.take(), ["update"], "update_one");
    current
        .upsert_one(doc! { "_id": 2 }, doc! { "$set": { "state": "new" } })
        .await
        .unwrap();
    assert_eq!(commands.take(), ["update"], "upsert_one");
    current
        .replace_one(doc! { "_id": 2 }, &doc! { "state": "paid" })
        .await
        .unwrap();
    assert_eq!(commands.take(), ["update"], "replace_one");

    // The stale fence: each write matches nothing (or collides), then one read finds the
    // stamp that refuses it.
    assert_fenced(
        "update_one",
        stale
            .update_one(doc! { "_id": 1 }, doc! { "$set": { "state": "late" } })
            .await,
    );
    assert_eq!(commands.take(), ["update", "find"], "a refused update_one");
    assert_fenced(
        "upsert_one",
        stale
            .upsert_one(doc! { "_id": 1 }, doc! { "$set": { "state": "late" } })
            .await,
    );
    assert_eq!(commands.take(), ["update", "find"], "a refused upsert_one");
    assert_fenced(
        "replace_one",
        stale
            .replace_one(doc! { "_id": 2 }, &doc! { "state": "late" })
            .await,
    );
    assert_eq!(commands.take(), ["update", "find"], "a refused replace_one");
    assert_fenced(
        "insert_one",
        stale.insert_one(&doc! { "_id": 2, "state": "late" }).await,
    );
    assert_eq!(commands.take(), ["insert", "find"], "a refused insert_one");
    assert_fenced("delete_one", stale.delete_one(doc! { "_id": 1 }).await);
    let refused_delete = commands.take_commands();
    assert_eq!(
        refused_delete
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["delete", "find"],
        "a refused delete_one"
    );

    // The plans, of every kind of command the writes sent, as sent.
    current
        .update_one(doc! { "_id": 1 }, doc! { "$set": { "state": "shipped" } })
        .await
        .unwrap();
    stale
        .update_one(doc! { "_id": 1 }, doc! { "$set": { "state": "late" } })
        .await
        .unwrap_err();
    let mut sent = commands.take_commands();
    sent.extend(refused_delete);
    current.delete_one(doc! { "_id": 1 }).await.unwrap();
    sent.extend(commands.take_commands());
    let kinds: BTreeSet<&str> = sent.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["delete", "find", "update"]),
        "{sent:?}"
    );
    for (name, command) in &sent {
        assert_by_index(&db, name, command).await;
    }
    assert_eq!(
        orders.count_documents(doc! {}).await.unwrap(),
        1_001,
        "the stale writes changed nothing; the current delete removed one"
    );
    orders.drop().await.unwrap();
    teardown(&store).await;
}
