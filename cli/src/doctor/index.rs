//! Doctor's unique index check, and `--fix`, which creates the index.
//!
//! The verdict is the store's own set-up check, reached through a `status` call. That
//! check makes the indexes of a collection that does not exist yet or was never used (first
//! use needs no set-up), so doctor first asks the store what it finds of the collection
//! (`MongoStore::collection_use`, which only reads) and, without `--fix`, runs the check
//! only on a collection in use, where it only reads.

use lockwright::store_mongo::CollectionUse;
use lockwright::{Client, Error, Filter, MongoStore};

use super::report::{Report, Verdict};
use crate::exit::{self, CliError};

/// The unique index on `resource`, judged by the store itself; created with `--fix`.
/// Without `--fix` nothing is written: a collection the store's set-up check would make
/// ready (one missing or never used) is reported, not checked.
pub(super) async fn index(report: &mut Report, store: &MongoStore, fix: bool) {
    let ns = store.collection().namespace();
    let client = Client::new(store_clone(store));
    let found = match store.collection_use().await {
        Ok(found) => found,
        Err(e) => {
            report.line(&Verdict::Fail, &CliError::from(e).message);
            return;
        }
    };
    if matches!(found, CollectionUse::Missing | CollectionUse::NeverUsed) {
        if !fix {
            let what = if found == CollectionUse::Missing {
                "does not exist yet"
            } else {
                "was never used (no document, no index but `_id`'s)"
            };
            report.line(
                &Verdict::Ok,
                &format!(
                    "collection {ns} {what}: the first lock operation makes its unique index \
                     on `resource` (or run `lockwright doctor --fix`)"
                ),
            );
            return;
        }
        match client.create_indexes().await {
            Ok(()) => report.line(
                &Verdict::Ok,
                &format!("created the unique index on `resource` in {ns}"),
            ),
            Err(e) => report.line(
                &Verdict::Fail,
                &format!("creating the index: {}", exit::chain(&e)),
            ),
        }
    }
    // Any operation runs the store's set-up check first, which only reads a collection in
    // use (or one just fixed); status on one name reads little.
    let probe = Filter::new().resource("lockwright-doctor-probe");
    let mut checked = client.status(&probe).await;
    if fix && matches!(checked, Err(Error::Misconfigured { .. })) {
        match client.create_indexes().await {
            Ok(()) => {
                report.line(
                    &Verdict::Ok,
                    &format!("created the unique index on `resource` in {ns}"),
                );
                checked = client.status(&probe).await;
            }
            Err(e) => report.line(
                &Verdict::Fail,
                &format!("creating the index: {}", exit::chain(&e)),
            ),
        }
    }
    match checked {
        Ok(_) | Err(Error::Skipped { .. }) => {
            let name = resource_index_name(store).await.unwrap_or_default();
            report.line(
                &Verdict::Ok,
                &format!("collection {ns} has a unique index on `resource` {name}"),
            );
        }
        // Not a replica set: already reported.
        Err(Error::Misconfigured { reason }) if reason.contains("replica set") => {}
        Err(Error::Misconfigured { reason }) => report.line(
            &Verdict::Fail,
            &format!("{reason}; or run `lockwright doctor --fix`"),
        ),
        Err(e) => report.line(&Verdict::Fail, &CliError::from(e).message),
    }
}

/// A second store on the same collection (its set-up check is its own).
fn store_clone(store: &MongoStore) -> MongoStore {
    MongoStore::from_collection(store.collection().clone())
}

/// `(name)` of the unique index on `resource`, for the report.
async fn resource_index_name(store: &MongoStore) -> Option<String> {
    use futures_util::TryStreamExt;
    let indexes: Vec<_> = store
        .collection()
        .list_indexes()
        .await
        .ok()?
        .try_collect()
        .await
        .ok()?;
    indexes
        .into_iter()
        .find(|i| {
            i.keys.keys().map(String::as_str).eq(["resource"])
                && i.options.as_ref().and_then(|o| o.unique) == Some(true)
        })
        .and_then(|i| i.options.and_then(|o| o.name))
        .map(|n| format!("({n})"))
}
