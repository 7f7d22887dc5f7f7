//! News of leaders ([`LockStore::leaders`]): a store told to announce an election sends
//! `Leads` for each grant of its exclusive lock and each hand-over of it that its writes
//! make (with the leader's value, fence and since-when), none for a claim of a lock handed
//! over earlier or for an election it was not told to announce, and a new subscription
//! starts with `Missed` and no old news.

use futures_util::StreamExt;
use lockwright_engine::Resource;
use lockwright_engine::election::{Leader, LeaderNews, LeaderStream};

use super::super::support::*;
use super::queue::{LEASE, fair, queued};

/// The next news, or a panic after a minute (news comes in about a round trip).
async fn next(news: &mut LeaderStream) -> LeaderNews {
    tokio::time::timeout(secs(60), news.next())
        .await
        .expect("news within a minute")
        .expect("the news' stream goes on")
}

/// A lock with a TTL of 30 s and `value` for its comment (the value a leader proclaims).
fn valued(value: &str) -> LockOptions {
    ttl(secs(30)).comment(value)
}

/// `name` as a resource.
fn election(name: &str) -> Resource {
    Resource::new(name).expect("a valid name")
}

/// The news of `lock`'s grant on `e`.
fn leads(e: &str, lock: &LockStatus) -> LeaderNews {
    LeaderNews::Leads {
        election: election(e),
        leader: Leader::of(lock),
        until: lock.expires_at,
    }
}

cases! {
    __conformance_news;

    async fn news_tells_of_each_leader_made_here(cx) {
        let mut news = cx.store.leaders().expect("this backend sends news of leaders");
        assert_eq!(next(&mut news).await, LeaderNews::Missed, "first, the subscription");
        cx.store.announce_leaders(&election("e"));
        cx.store.announce_leaders(&election("f"));
        // A grant: a leads.
        let a = generate_lock_id();
        let first = cx.xlock("e", &a, &valued("a")).await.expect("a's grant");
        assert_eq!(
            next(&mut news).await,
            leads("e", &first),
            "news of a grant, with the end of its lease"
        );
        // b waits in line; a resigns (a one-lock release): the store hands b the lock, and
        // that is news, with b's value and the hand-over's fence.
        let (b, tb) = (generate_lock_id(), generate_lock_id());
        let mut place = fair(&tb, LEASE);
        place.options = valued("b");
        assert_eq!(queued(cx.xlock_fair("e", &b, &place).await), Some(0));
        cx.clock.advance(ms(1));
        let resigned = cx.store.unlock_one(&first.resource, &a).await;
        assert!(resigned.expect("unlock_one").is_some(), "a's lock");
        let (handed, until) = match next(&mut news).await {
            LeaderNews::Leads { election: e, leader, until } if e == election("e") => (leader, until),
            other => panic!("expected news of b, got {other:?}"),
        };
        // The lease b was handed: its claim lease, from the hand-over.
        assert_eq!(until, Some(at(ms(1)).saturating_add(LEASE)), "the claim lease's end");
        assert_eq!(handed.value.as_deref(), Some("b"));
        assert!(handed.fence > first.fence, "{} after {}", handed.fence, first.fence);
        assert_eq!(handed.since, at(ms(1)));
        // b claims it: no news (it led already); a grant of an election nobody announced
        // here is no news either. The next news is f's grant.
        let claimed = cx.xlock_fair("e", &b, &place).await.expect("b's claim");
        assert_eq!(claimed.fence, handed.fence);
        cx.xlock("g", generate_lock_id(), &valued("g"))
            .await
            .expect("g's grant");
        let f = cx
            .xlock("f", generate_lock_id(), &valued("f"))
            .await
            .expect("f's grant");
        assert_eq!(
            next(&mut news).await,
            leads("f", &f),
            "no news of b's claim, nor of g"
        );
        // A new subscription hears none of the news before it: first `Missed`, then the
        // next leader made.
        drop(news);
        let mut news = cx.store.leaders().expect("this backend sends news of leaders");
        assert_eq!(next(&mut news).await, LeaderNews::Missed);
        cx.unlock(&b).await.expect("unlock");
        let again = cx.xlock("e", generate_lock_id(), &valued("c")).await.expect("c's grant");
        assert_eq!(
            next(&mut news).await,
            leads("e", &again),
            "no old news"
        );
    }
}
