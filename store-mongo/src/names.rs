//! The names MongoDB accepts for a lock collection and its database.

/// The longest namespace (`database.collection`) MongoDB accepts, in bytes.
const MAX_NAMESPACE: usize = 255;
/// The longest database name MongoDB accepts, in bytes.
const MAX_DATABASE: usize = 63;

/// Why MongoDB would refuse `database.collection` as the lock collection, naming the bad
/// part (`"database"` or `"collection"`); `None` when it accepts it. The server would
/// otherwise report such a collection as empty or missing, which reads as a missing index.
pub(crate) fn refused(database: &str, collection: &str) -> Option<(&'static str, String)> {
    let database_refusal = if database.is_empty() {
        Some("must not be empty".to_owned())
    } else if database.len() > MAX_DATABASE {
        Some(format!("must be at most {MAX_DATABASE} bytes"))
    } else {
        database
            .chars()
            .find(|c| "/\\. \"$*<>:|?\0".contains(*c))
            .map(|c| format!("must not contain {c:?}"))
    };
    if let Some(why) = database_refusal {
        return Some(("database", format!("database name {database:?} {why}")));
    }
    let collection_refusal = if collection.is_empty() {
        Some("must not be empty".to_owned())
    } else if collection.contains('$') || collection.contains('\0') {
        Some("must not contain '$' or a NUL character".to_owned())
    } else if collection.starts_with("system.") {
        Some("must not start with \"system.\" (reserved for MongoDB's own collections)".to_owned())
    } else if collection.starts_with('.') || collection.ends_with('.') {
        Some("must not start or end with '.'".to_owned())
    } else if database.len() + 1 + collection.len() > MAX_NAMESPACE {
        Some(format!(
            "makes the namespace longer than {MAX_NAMESPACE} bytes"
        ))
    } else {
        None
    };
    collection_refusal.map(|why| {
        (
            "collection",
            format!("collection name {collection:?} {why}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::refused;

    #[test]
    fn names_mongodb_refuses_are_refused() {
        assert_eq!(refused("app", "locks"), None);
        assert_eq!(refused("app", "team.locks"), None);
        for (db, coll, part) in [
            ("app", "bad$name", "collection"),
            ("app", "system.locks", "collection"),
            ("app", "", "collection"),
            ("app", ".locks", "collection"),
            ("", "locks", "database"),
            ("a.b", "locks", "database"),
            ("a b", "locks", "database"),
            ("app", &"c".repeat(300), "collection"),
        ] {
            let (field, why) = refused(db, coll).unwrap_or_else(|| panic!("{db}.{coll}"));
            assert_eq!(field, part, "{why}");
        }
    }
}
