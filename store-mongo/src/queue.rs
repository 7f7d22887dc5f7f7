//! The queue of fair waiters: `leave_queue` (one `findAndModify`) and `waiters` (one
//! aggregation, with the server's `now`). The grants take, refresh and remove places in
//! their own pipelines (`pipeline::grant`), and purge drops the dead ones.

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, doc};

use lockwright_engine::{Error, LockId, Resource, Waiter};

use crate::one_lock::Modified;
use crate::pipeline::bind::{self, Shape};
use crate::{MongoStore, schema};

/// `leave_queue`: removes `ticket`'s place in `resource`'s queue, and the dead places, in
/// one `findAndModify`; `Ok(true)` when it had a place. The update writes a fresh
/// `lastLeave` when it removes the place, so the document it returns tells (a retry of an
/// applied attempt too); a hand-over it makes sends its wakes.
///
/// # Errors
/// `Malformed` when the resource's document cannot be decided on (it is left as it is);
/// `Backend` when the server fails.
pub(crate) async fn leave_queue(
    store: &MongoStore,
    resource: &Resource,
    ticket: &LockId,
) -> Result<bool, Error> {
    let op = "leave_queue";
    let leave_id = Bson::ObjectId(ObjectId::new());
    let readings = store.readings();
    let vars = bind::leave(ticket, &leave_id, &readings);
    let filter = doc! { schema::RESOURCE: resource.as_str() };
    let doc = match store
        .modify_one(op, resource, &filter, Shape::Leave, &vars, true)
        .await?
    {
        Modified::Reply(doc) | Modified::Reread(doc) => doc,
        Modified::Nothing => return Ok(false),
    };
    store.wake_handed(resource, &doc, &readings.nonce).await;
    // A document the rules cannot decide on was left as it was: say so.
    schema::decode(&doc)?;
    Ok(doc.get(schema::LAST_LEAVE) == Some(&leave_id))
}

/// `waiters`: the live places of `resource`'s queue at the server's `now`, in order.
///
/// # Errors
/// `Malformed` when the resource's document cannot be decided on; `Backend` when the server
/// fails.
pub(crate) async fn waiters(store: &MongoStore, resource: &Resource) -> Result<Vec<Waiter>, Error> {
    let filter = doc! { schema::RESOURCE: resource.as_str() };
    let read = store.read_with_now("waiters", filter).await?;
    if let Some(m) = read.skipped.into_iter().next() {
        return Err(m.into());
    }
    let (Some(now), Some(state)) = (read.now, read.table.resource(resource)) else {
        return Ok(Vec::new());
    };
    Ok(state.waiters(now).map(Waiter::from).collect())
}
