//! Building documents: locks as Lockwright and the Go library write them, and edits of a
//! dotted path.

use super::*;

pub(crate) fn at(secs: i64) -> Bson {
    let t0 = i64::try_from(T0.as_millis()).unwrap();
    Bson::DateTime(DateTime::from_millis(t0 + secs * 1000))
}

/// A lock entry as Lockwright writes it: created at `T0 + created` s, expiring at
/// `T0 + expires` s.
pub(crate) fn lock(id: &str, created: i64, expires: Option<i64>) -> Document {
    doc! {
        "lockId": id, "owner": "o", "host": "h", "comment": Bson::Null,
        "createdAt": at(created), "renewedAt": Bson::Null,
        "expiresAt": expires.map_or(Bson::Null, at), "acquired": true, "fence": 3_i64,
    }
}

/// A lock entry as the Go library writes it: no `comment`, no `fence`.
pub(crate) fn go_lock(id: &str, created: i64, expires: Option<i64>) -> Document {
    doc! {
        "lockId": id, "owner": "john", "host": "h1", "createdAt": at(created),
        "renewedAt": Bson::Null, "expiresAt": expires.map_or(Bson::Null, at), "acquired": true,
    }
}

pub(crate) fn empty_exclusive() -> Document {
    doc! {
        "lockId": Bson::Null, "owner": Bson::Null, "host": Bson::Null, "comment": Bson::Null,
        "createdAt": Bson::Null, "renewedAt": Bson::Null, "expiresAt": Bson::Null,
        "acquired": false, "fence": Bson::Null,
    }
}

pub(crate) fn exclusive_doc(resource: impl Into<Bson>, l: Document) -> Document {
    doc! {
        "resource": resource.into(), "exclusive": l,
        "shared": { "count": 0, "locks": [] }, "lastFence": 5_i64,
    }
}

pub(crate) fn shared_doc(resource: impl Into<Bson>, locks: Vec<Document>) -> Document {
    let n = i32::try_from(locks.len()).unwrap();
    doc! {
        "resource": resource.into(), "exclusive": empty_exclusive(),
        "shared": { "count": n, "locks": locks }, "lastFence": 5_i64,
    }
}

/// A live exclusive lock of `id` (expires at `T0 + 60 s`).
pub(crate) fn x(resource: &str, id: &str) -> Document {
    exclusive_doc(resource, lock(id, -10, Some(60)))
}

/// Live shared locks of `ids` (expiring at `T0 + 60 s`).
pub(crate) fn s(resource: &str, ids: &[&str]) -> Document {
    shared_doc(
        resource,
        ids.iter().map(|id| lock(id, -10, Some(60))).collect(),
    )
}

pub(crate) fn edit_doc(d: &mut Document, parts: &[&str], value: Option<Bson>) {
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

pub(crate) fn edit_bson(b: &mut Bson, parts: &[&str], value: Option<Bson>) {
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
pub(crate) fn with(mut d: Document, path: &str, value: impl Into<Bson>) -> Document {
    let parts: Vec<&str> = path.split('.').collect();
    edit_doc(&mut d, &parts, Some(value.into()));
    d
}

/// `d` without the dotted `path`.
pub(crate) fn without(mut d: Document, path: &str) -> Document {
    let parts: Vec<&str> = path.split('.').collect();
    edit_doc(&mut d, &parts, None);
    d
}

pub(crate) fn array(items: Vec<Document>) -> Bson {
    Bson::Array(items.into_iter().map(Bson::Document).collect())
}
