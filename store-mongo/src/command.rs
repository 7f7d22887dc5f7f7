//! The one-lock commands as raw BSON: a `findAndModify` whose pipeline and projection are
//! built once per [`Shape`] (and takeover grace) and kept as encoded BSON, its inputs bound
//! with `let` ([`pipeline::bind`]), sent with `runCommand`. A grant then costs the client
//! about what a bare write does: no expression tree is built, cloned, encoded or dropped
//! per call.
//!
//! `runCommand` leaves to the caller what the driver's `find_one_and_update` does itself:
//! the collection's write concern goes into the command, and a `writeConcernError` in the
//! reply becomes the driver's own write concern error. It sends no transaction number, so
//! the server does not label its errors as retryable writes: [`crate::failure::retryable`]
//! tells them by their codes (every one-lock command may be sent again: a grant finds its
//! own earlier grant by its id, and a renewal or release applied twice is applied once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mongodb::bson::{Bson, Document, RawArrayBuf, RawDocumentBuf};
use mongodb::error::{ErrorKind, WriteConcernError, WriteFailure};
use mongodb::options::WriteConcern;

use crate::pipeline::{self, bind::Shape};

/// A one-lock command's constant parts, encoded.
#[derive(Debug)]
pub(crate) struct Template {
    update: RawArrayBuf,
    fields: RawDocumentBuf,
}

impl Template {
    /// The template of `shape` with the takeover grace `grace_ms`.
    fn build(shape: Shape, grace_ms: i64) -> Template {
        let readings = pipeline::bind::template_readings(grace_ms);
        let now = Bson::String(pipeline::bind::NOW.to_owned());
        let floor = Bson::String(pipeline::bind::FLOOR.to_owned());
        let (stages, fields) = match shape {
            Shape::Grant { .. } => (
                pipeline::grant_pipeline(shape, &readings),
                pipeline::grant_projection(&now),
            ),
            Shape::RenewOne => (
                pipeline::renew_one(&readings),
                pipeline::with_now_and_floor(&now, &floor),
            ),
            Shape::SetComment => (
                pipeline::set_comment(),
                pipeline::with_now_and_floor(&now, &floor),
            ),
            Shape::UnlockOne => (
                pipeline::unlock_one(&readings),
                pipeline::with_now_and_floor(&now, &floor),
            ),
            Shape::Leave => (
                pipeline::leave(&readings),
                pipeline::with_now_and_floor(&now, &floor),
            ),
        };
        let mut update = RawArrayBuf::new();
        for stage in &stages {
            update.push(encode(stage));
        }
        Template {
            update,
            fields: encode(&fields),
        }
    }
}

/// A document built by this crate, encoded: every key is a field name of ours, so the
/// encoding cannot fail.
fn encode(doc: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(doc)
        .unwrap_or_else(|e| panic!("a pipeline of the store's own does not encode: {e}"))
}

/// The templates a store has built, by shape and grace.
#[derive(Debug, Default)]
pub(crate) struct Templates {
    built: Mutex<HashMap<(Shape, i64), Arc<Template>>>,
}

impl Templates {
    /// The template of `shape` with the grace `grace_ms`, built on first use. In builds
    /// with mutants (which a test may switch at run time), built afresh each time.
    pub(crate) fn get(&self, shape: Shape, grace_ms: i64) -> Arc<Template> {
        if cfg!(lockwright_mutants) {
            return Arc::new(Template::build(shape, grace_ms));
        }
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        built
            .entry((shape, grace_ms))
            .or_insert_with(|| Arc::new(Template::build(shape, grace_ms)))
            .clone()
    }
}

/// One `findAndModify`: the template's pipeline and projection on the document `query`
/// selects, with `vars` bound.
pub(crate) struct FindAndModify<'a> {
    pub(crate) query: &'a Document,
    pub(crate) template: &'a Template,
    pub(crate) vars: &'a Document,
    /// Insert the document when none matches.
    pub(crate) upsert: bool,
    /// Return the document as the command left it (else as it found it).
    pub(crate) new: bool,
    /// The index the query must use.
    pub(crate) hint: Option<&'a str>,
}

impl FindAndModify<'_> {
    /// The command on `collection` with `write_concern`.
    fn encode(&self, collection: &str, write_concern: Option<&RawDocumentBuf>) -> RawDocumentBuf {
        let mut command = RawDocumentBuf::new();
        command.append("findAndModify", collection);
        command.append("query", encode(self.query));
        command.append("update", self.template.update.clone());
        command.append("fields", self.template.fields.clone());
        command.append("new", self.new);
        command.append("upsert", self.upsert);
        if let Some(hint) = self.hint {
            command.append("hint", hint);
        }
        command.append("let", encode(self.vars));
        if let Some(wc) = write_concern {
            command.append("writeConcern", wc.clone());
        }
        command
    }
}

/// Encodes a write concern for a command (`None`: the server's default).
pub(crate) fn write_concern(wc: &WriteConcern) -> Option<RawDocumentBuf> {
    if *wc == WriteConcern::default() {
        return None;
    }
    let doc = mongodb::bson::to_document(wc)
        .unwrap_or_else(|e| panic!("a write concern does not encode: {e}"));
    Some(encode(&doc))
}

impl crate::MongoStore {
    /// Sends `command`: the document it returned (`None`: no document matched), or the
    /// driver's error (a `writeConcernError` in the reply as the driver's write concern
    /// error).
    pub(crate) async fn find_and_modify(
        &self,
        command: &FindAndModify<'_>,
    ) -> Result<Option<Document>, mongodb::error::Error> {
        let ns = self.coll.namespace();
        let raw = command.encode(&ns.coll, self.raw_write_concern.as_ref());
        let mut reply = self.client.database(&ns.db).run_raw_command(raw).await?;
        if let Some(Bson::Document(wce)) = reply.get("writeConcernError") {
            let wce: WriteConcernError = mongodb::bson::from_document(wce.clone())?;
            return Err(ErrorKind::Write(WriteFailure::WriteConcernError(wce)).into());
        }
        match reply.remove("value") {
            Some(Bson::Document(doc)) => Ok(Some(doc)),
            Some(Bson::Null) | None => Ok(None),
            // The server decided, but says nothing the store can read: what it did is unknown.
            Some(other) => Err(mongodb::error::Error::custom(format!(
                "findAndModify answered a value of type {:?}",
                other.element_type()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockwright_engine::Mode;

    /// Every template encodes, and none outgrows its budget: the server parses, serializes
    /// again and frees the whole pipeline on every command, so its size is its cost
    /// (docs/performance.md). Prints each size.
    #[test]
    fn templates_stay_within_their_size_budget() {
        let grants = [
            (Mode::Exclusive, false),
            (Mode::Shared, false),
            (Mode::Shared, true),
        ];
        let mut shapes: Vec<Shape> = grants
            .into_iter()
            .flat_map(|(mode, limited)| {
                [false, true].map(|fair| Shape::Grant {
                    mode,
                    limited,
                    fair,
                })
            })
            .collect();
        shapes.extend([
            Shape::RenewOne,
            Shape::SetComment,
            Shape::UnlockOne,
            Shape::Leave,
        ]);
        for shape in shapes {
            let t = Template::build(shape, 2_000);
            let bytes = t.update.as_bytes().len();
            eprintln!("{shape:?}: pipeline {bytes} bytes");
            let budget = match shape {
                Shape::Grant { .. } => 14_500,
                Shape::UnlockOne | Shape::Leave => 10_500,
                Shape::RenewOne | Shape::SetComment => 6_500,
            };
            assert!(bytes <= budget, "{shape:?}: {bytes} bytes, over {budget}");
        }
    }
}
