//! The query plans in the report: each captured command that reads or writes documents is
//! sent again as `explain`, and the winning plan's stages are kept.

use lockwright_store_mongo::test_support::winning_stages;
use mongodb::Database;
use mongodb::bson::{Document, doc};

/// The winning plan of a captured command that reads or writes documents, as
/// `command: STAGE STAGE(index) ...`; `None` for other commands (`commitTransaction`, ...).
pub async fn explain(db: &Database, name: &str, command: &Document) -> Option<String> {
    let coll = command.get_str(name).ok()?;
    let mut inner = doc! { name: coll };
    let keep: &[&str] = match name {
        "find" => &["filter", "sort"],
        "aggregate" => &["pipeline"],
        "update" => &["updates"],
        "delete" => &["deletes"],
        // `let` binds the variables of the store's one-lock commands; `hint` names the index a
        // grant must use.
        "findAndModify" => &["query", "update", "upsert", "sort", "new", "let", "hint"],
        _ => return None,
    };
    for key in keep {
        if let Some(v) = command.get(*key) {
            inner.insert(*key, v.clone());
        }
    }
    if name == "aggregate" {
        inner.insert("cursor", Document::new());
    }
    let explained = db
        .run_command(doc! { "explain": inner, "verbosity": "queryPlanner" })
        .await;
    Some(match explained {
        Ok(out) => format!("{name}: {}", plan_summary(&out)),
        Err(e) => format!("{name}: explain failed: {e}"),
    })
}

/// The stages of every winning plan in `explain` output, depth first, with index names.
fn plan_summary(explained: &Document) -> String {
    let mut out = winning_stages(explained);
    out.dedup();
    if out.is_empty() {
        "no winning plan in explain output".into()
    } else {
        out.join(" ")
    }
}
