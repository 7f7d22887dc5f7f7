//! The collection as stored: documents' bytes, server-side matching and validity, and the
//! table the decoder reads.

use super::*;

pub(crate) fn raw(store: &MongoStore) -> Collection<RawDocumentBuf> {
    store.collection().clone_with_type::<RawDocumentBuf>()
}

/// Every document's bytes, in `_id` order.
pub(crate) async fn all_bytes(store: &MongoStore) -> Vec<Vec<u8>> {
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

pub(crate) async fn bytes_of(store: &MongoStore, id: &Bson) -> Option<Vec<u8>> {
    raw(store)
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .map(RawDocumentBuf::into_bytes)
}

/// What differs between two lists of stored documents (in `_id` order), field by field.
pub(crate) fn changes(before: &[Vec<u8>], after: &[Vec<u8>]) -> String {
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

pub(crate) fn bson_bytes(d: &Document) -> Vec<u8> {
    let mut out = Vec::new();
    d.to_writer(&mut out).unwrap();
    out
}

/// Whether the document `id` matches `query` on the server.
pub(crate) async fn matches(store: &MongoStore, id: &Bson, query: Document) -> bool {
    store
        .collection()
        .count_documents(doc! { "$and": [ { "_id": id.clone() }, query ] })
        .await
        .unwrap()
        > 0
}

/// The documents holding (by the server's path matching) a lock of `ids`.
pub(crate) fn group_query(ids: Bson) -> Document {
    doc! { "$or": [ { "exclusive.lockId": ids.clone() }, { "shared.locks.lockId": ids } ] }
}

/// The lock ids a malformed document names where the store looks for them (a document
/// `exclusive`, an array `shared.locks`).
pub(crate) fn raw_lock_ids(d: &Document) -> Vec<String> {
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
pub(crate) async fn check_agreement(store: &MongoStore, when: &str, failures: &mut Vec<String>) {
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
pub(crate) async fn readable_table(store: &MongoStore, bad: &[Bad]) -> Result<LockTable, String> {
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
