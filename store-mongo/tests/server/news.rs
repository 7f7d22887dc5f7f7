//! News of leaders on the real server: a store told to announce an election inserts one
//! document per leader it makes into the leaders' collection, holding the election, the
//! leader's fence, since-when and value (never a lock id); another process's cursor passes
//! on only what is inserted once it opened.

use futures_util::StreamExt;
use lockwright_engine::Resource;
use lockwright_engine::election::{Leader, LeaderNews, LeaderStream};

use super::*;
use crate::hints::process;

/// The next news, waiting as long as a loaded machine may need (never a timing assertion).
async fn next(news: &mut LeaderStream) -> LeaderNews {
    tokio::time::timeout(Duration::from_secs(60), news.next())
        .await
        .expect("news within a minute")
        .expect("the news goes on")
}

fn valued(value: &str) -> LockOptions {
    LockOptions::exclusive(Duration::from_secs(30)).comment(value)
}

#[tokio::test]
async fn news_sent_before_the_cursor_opened_is_not_passed_on() {
    let a = fresh_store(None).await;
    let e = Resource::new("e").unwrap();
    a.announce_leaders(&e);
    let (cb, b) = process(&a).await;
    let old = a
        .lock(&LockRequest::new("e", "old-leader", &valued("old")).unwrap())
        .await
        .unwrap();
    // The old news is in the leaders' collection (it is sent in a task of its own).
    let leaders = a.wake_collections().pop().unwrap();
    let coll = a
        .client()
        .database(&a.collection().namespace().db)
        .collection::<Document>(&leaders);
    let mut stored = Vec::new();
    for _ in 0..6_000 {
        stored = coll
            .find(doc! { "r": "e" })
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        if !stored.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stored.len(), 1, "one insert per leader made");
    let fields: Vec<&str> = stored[0].keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        ["_id", "r", "f", "c", "e", "v"],
        "no lock id in the news"
    );
    assert_eq!(stored[0].get_str("v"), Ok("old"));
    // b, another process, subscribes: `Missed`, then the next leader's news, not the old.
    let mut news = b.leaders().unwrap();
    assert_eq!(next(&mut news).await, LeaderNews::Missed);
    a.unlock_one(&e, &old.lock_id).await.unwrap();
    let new = a
        .lock(&LockRequest::new("e", "new-leader", &valued("new")).unwrap())
        .await
        .unwrap();
    assert_eq!(
        next(&mut news).await,
        LeaderNews::Leads {
            election: e,
            leader: Leader::of(&new),
            until: new.expires_at,
        },
        "the old leader is no news"
    );
    drop(news);
    teardown(&a).await;
    cb.shutdown().await;
}
