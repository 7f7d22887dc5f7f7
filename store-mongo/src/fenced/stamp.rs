//! What a fenced write sends and what it reads back: the stamp added to the caller's update
//! or document, and the refusal made of a stamp found on the server.

use mongodb::bson::{Bson, Document, doc};
use mongodb::options::UpdateModifications;
use serde::Serialize;

use lockwright_engine::error::Escaped;
use lockwright_engine::{Error, MalformedDocument};

use super::FencedCollection;

impl<T> FencedCollection<T> {
    /// `update` with the stamp added: to `$set` for update operators, as a last `$set`
    /// stage for a pipeline.
    pub(super) fn stamped_update(
        &self,
        op: &'static str,
        update: UpdateModifications,
    ) -> Result<UpdateModifications, Error> {
        let stamp = self.stamp(op)?;
        let field = self.field.as_str();
        match update {
            UpdateModifications::Document(mut operators) => {
                for (operator, fields) in &operators {
                    if !operator.starts_with('$') {
                        return Err(Error::invalid(
                            "update",
                            format!(
                                "`{}` is not an update operator: use replace_one to replace a document",
                                Escaped(operator)
                            ),
                        ));
                    }
                    let touches = |path: &String| {
                        path == field
                            || path.strip_prefix(field).is_some_and(|r| r.starts_with('.'))
                    };
                    if let Bson::Document(fields) = fields
                        && fields.keys().any(touches)
                    {
                        return Err(Error::invalid(
                            "update",
                            format!(
                                "`{operator}` changes the fence field `{}`, which the fenced write sets itself",
                                Escaped(field)
                            ),
                        ));
                    }
                }
                match operators.get_mut("$set") {
                    Some(Bson::Document(set)) => {
                        set.insert(field, stamp);
                    }
                    Some(_) => return Err(Error::invalid("update", "`$set` is not a document")),
                    None => {
                        operators.insert("$set", doc! {field: stamp});
                    }
                }
                Ok(UpdateModifications::Document(operators))
            }
            UpdateModifications::Pipeline(mut stages) => {
                stages.push(doc! {"$set": {field: {"$literal": stamp}}});
                Ok(UpdateModifications::Pipeline(stages))
            }
            _ => Err(Error::invalid(
                "update",
                "a fenced write takes update operators or a pipeline",
            )),
        }
    }

    /// `document` as BSON, stamped with this fence.
    pub(super) fn stamped_document(&self, op: &'static str, document: &T) -> Result<Document, Error>
    where
        T: Serialize,
    {
        let mut document = mongodb::bson::to_document(document)
            .map_err(|e| Error::invalid("document", format!("{op}: not a BSON document: {e}")))?;
        document.insert(self.field.as_str(), self.stamp(op)?);
        Ok(document)
    }

    /// The error for a write refused by the stamp in `document`.
    pub(super) fn refusal(&self, op: &'static str, document: Document) -> Result<Error, Error> {
        let field = self.field.as_str();
        let malformed = |reason: &str| {
            Error::from(MalformedDocument {
                resource: document
                    .get("_id")
                    .map_or_else(|| "(no _id)".to_owned(), |id| format!("_id {id}")),
                field: field.to_owned(),
                reason: format!("{op}: {reason}"),
            })
        };
        let Some(Bson::Document(stamp)) = document.get(field) else {
            return Err(malformed(
                "the fence field is not a document {resource, fence}",
            ));
        };
        let seen_resource = match stamp.get("resource") {
            Some(Bson::String(r)) => r.clone(),
            _ => return Err(malformed("the stamp's `resource` is not a string")),
        };
        let seen_fence = match stamp.get("fence") {
            Some(Bson::Int64(f)) => u64::try_from(*f).ok(),
            Some(Bson::Int32(f)) => u64::try_from(*f).ok(),
            _ => None,
        }
        .ok_or_else(|| malformed("the stamp's `fence` is not a non-negative integer"))?;
        Ok(Error::Fenced {
            resource: self.resource.clone(),
            fence: self.fence,
            seen_resource,
            seen_fence,
        })
    }
}

/// Whether `filter` pins the document's `_id` with an equality (a value, not operators).
pub(super) fn names_id(filter: &Document) -> bool {
    match filter.get("_id") {
        None => false,
        Some(Bson::Document(d)) => !d.keys().any(|k| k.starts_with('$')),
        Some(_) => true,
    }
}
