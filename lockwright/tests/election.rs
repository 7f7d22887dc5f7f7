//! Leader election on both stores: candidates lead in the order they campaigned, the
//! store hands the leadership over when the leader resigns (or drops its leadership), every
//! leader has a higher fence than the one before, `leader()` says who leads in one read, and
//! an observer sees each leader once, in fence order.

// A test that cannot unwrap has failed: panicking is how it says so.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::StreamExt;
use lockwright::{Client, LockOptions, LockStore, Locker, LockerConfig};

fn lease() -> LockOptions {
    LockOptions::exclusive(Duration::from_secs(30))
}

/// Waits (a minute at most, never a timing assertion) until `client` says `value` leads.
async fn until_leads<S: LockStore>(client: &Client<S>, election: &str, value: &str) {
    for _ in 0..6_000 {
        let leader = client.leader(election).await.unwrap();
        if leader.is_some_and(|l| l.value.as_deref() == Some(value)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{value} does not lead {election} within a minute");
}

/// Three candidates in three Lockers on `client`'s store: a leads, b and c wait in line in
/// that order; a resigns and b leads, b's leadership is dropped and c leads; each with a
/// higher fence, which an observer sees in order.
async fn three_candidates<S: LockStore>(client: Client<S>) {
    let election = "scheduler";
    assert_eq!(client.leader(election).await.unwrap(), None, "nobody yet");
    let lockers: Vec<Locker<S>> = (0..3)
        .map(|_| Locker::new(client.clone(), LockerConfig::default()).unwrap())
        .collect();
    let mut observed = Box::pin(client.observe(election, Duration::from_millis(20)));
    let mut a = lockers[0]
        .campaign(election, "a:1", &lease())
        .await
        .unwrap();
    assert_eq!(a.value(), "a:1");
    let leader = client.leader(election).await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_deref(), leader.fence),
        (Some("a:1"), a.fence())
    );
    let first = observed.next().await.unwrap().unwrap();
    assert_eq!(first.fence, a.fence(), "the observer sees a");
    // a proclaims a new value: the same leadership, the same fence (the observer, which
    // yields leaders by fence, sees no new one).
    a.proclaim("a:2").await.unwrap();
    assert_eq!(a.value(), "a:2");
    let leader = client.leader(election).await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_deref(), leader.fence),
        (Some("a:2"), a.fence())
    );
    let bad = a.proclaim("").await;
    assert!(
        matches!(&bad, Err(lockwright::Error::InvalidArgument { field, .. }) if *field == "comment"),
        "{bad:?}"
    );
    assert_eq!(a.value(), "a:2", "a refused value changes nothing");

    // b, then c, take their places in line.
    let campaign = |i: usize, value: &'static str| {
        let locker = lockers[i].clone();
        tokio::spawn(async move { locker.campaign(election, value, &lease()).await })
    };
    let b = campaign(1, "b:1");
    for _ in 0..6_000 {
        if client
            .store()
            .waiters(&lockwright::Resource::new("scheduler").unwrap())
            .await
            .unwrap()
            .len()
            == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let c = campaign(2, "c:1");
    for _ in 0..6_000 {
        if client
            .store()
            .waiters(&lockwright::Resource::new("scheduler").unwrap())
            .await
            .unwrap()
            .len()
            == 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a_fence = a.fence();
    a.resign().await.unwrap();
    let b = b.await.unwrap().unwrap();
    assert!(b.fence() > a_fence, "a later leader, a higher fence");
    until_leads(&client, election, "b:1").await;
    let second = observed.next().await.unwrap().unwrap();
    assert_eq!(
        (second.value.as_deref(), second.fence),
        (Some("b:1"), b.fence())
    );

    let b_fence = b.fence();
    drop(b); // dropping the leadership resigns
    let c = c.await.unwrap().unwrap();
    assert!(c.fence() > b_fence);
    let third = observed.next().await.unwrap().unwrap();
    assert_eq!(
        (third.value.as_deref(), third.fence),
        (Some("c:1"), c.fence())
    );
    assert!(c.is_held());
    c.resign().await.unwrap();
    for l in &lockers {
        l.shutdown();
    }
}

#[cfg(feature = "mem")]
#[tokio::test]
async fn candidates_lead_in_turn_in_memory() {
    three_candidates(Client::new(lockwright::MemStore::new())).await;
}

#[cfg(feature = "mem")]
#[tokio::test]
async fn a_leader_is_alone_and_its_value_is_checked() {
    use lockwright::Error;
    let locker = Locker::new(
        Client::new(lockwright::MemStore::new()),
        LockerConfig::default(),
    )
    .unwrap();
    let shared = LockOptions::shared(None, Duration::from_secs(30));
    let refused = locker.campaign("e", "v", &shared).await;
    assert!(
        matches!(&refused, Err(Error::InvalidArgument { field, .. }) if *field == "access"),
        "{refused:?}"
    );
    let empty = locker.campaign("e", "", &lease()).await;
    assert!(
        matches!(&empty, Err(Error::InvalidArgument { field, .. }) if *field == "comment"),
        "{empty:?}"
    );
    assert_eq!(locker.client().leader("e").await.unwrap(), None);
    // A bad election name: one error, and the observer ends (no read every millisecond).
    let mut observed = Box::pin(locker.client().observe("", Duration::ZERO));
    let bad = observed.next().await;
    assert!(
        matches!(&bad, Some(Err(Error::InvalidArgument { field, .. })) if *field == "resource"),
        "{bad:?}"
    );
    assert!(observed.next().await.is_none());
}

/// A follower's hook: b campaigns while a leads, and is told a leads (its value and fence);
/// when a resigns, b leads.
#[cfg(feature = "mem")]
#[tokio::test]
async fn a_waiting_candidate_is_told_who_leads() {
    let client = Client::new(lockwright::MemStore::new());
    let lockers: Vec<Locker<_>> = (0..2)
        .map(|_| Locker::new(client.clone(), LockerConfig::default()).unwrap())
        .collect();
    let a = lockers[0].campaign("e", "a:1", &lease()).await.unwrap();
    let a_fence = a.fence();
    let (told_tx, mut told) = tokio::sync::mpsc::unbounded_channel();
    let b_locker = lockers[1].clone();
    let b = tokio::spawn(async move {
        let every = Duration::from_millis(5);
        b_locker
            .campaign_following("e", "b:1", &lease(), every, move |l| {
                told_tx.send(l).unwrap();
            })
            .await
    });
    let first = told.recv().await.unwrap();
    assert_eq!(
        (first.value.as_deref(), first.fence),
        (Some("a:1"), a_fence)
    );
    a.resign().await.unwrap();
    let b = b.await.unwrap().unwrap();
    assert!(b.fence() > a_fence);
    while let Ok(l) = told.try_recv() {
        assert!(l.fence > a_fence && l.fence <= b.fence(), "{l:?}");
    }
}

/// A store whose reads of status lag while `lag` is set: they return what `kept` holds (a
/// read served by a member that lags, or one overtaken by a later one).
#[cfg(feature = "mem")]
struct Lagging {
    inner: lockwright::MemStore,
    lag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    kept: std::sync::Arc<std::sync::Mutex<Vec<lockwright::LockStatus>>>,
    /// Reads that lagged.
    lagged: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[cfg(feature = "mem")]
impl lockwright_testkit::Forward for Lagging {
    type Inner = lockwright::MemStore;

    fn inner(&self) -> &lockwright::MemStore {
        &self.inner
    }

    /// No news and no hints: the observer polls, and its reads are what lags.
    fn notices(&self) -> Option<&dyn lockwright::Notices> {
        None
    }

    async fn read(
        &self,
        query: lockwright::Query<'_>,
    ) -> Result<lockwright::Reading, lockwright::Error> {
        if matches!(query, lockwright::Query::Locks(_))
            && self.lag.load(std::sync::atomic::Ordering::SeqCst)
        {
            self.lagged
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Ok(lockwright::Reading::Locks(
                self.kept.lock().unwrap().clone(),
            ));
        }
        lockwright::LockStore::read(&self.inner, query).await
    }
}

#[cfg(feature = "mem")]
lockwright_testkit::forward_lock_store!(Lagging);

/// An observer whose reads lag (they return a leader older than one it reported) reports
/// no leader twice and none out of order: a, then b, then (the reads lag, naming a) nothing,
/// then c. The kill matrix runs it and the observers of the store's news below (harness
/// `election`, every test named `observer`) against the election and news mutants.
#[cfg(feature = "mem")]
#[tokio::test]
async fn an_observer_never_reports_a_read_that_lags() {
    use std::sync::atomic::Ordering;
    // The kill matrix's harness `election`: the mutant named by `LOCKWRIGHT_MUTANT`, if any.
    #[cfg(lockwright_mutants)]
    lockwright_testkit::activate_mutant();
    let (lag, kept, lagged) = (Default::default(), Default::default(), Default::default());
    let store = Lagging {
        inner: lockwright::MemStore::new(),
        lag: std::sync::Arc::clone(&lag),
        kept: std::sync::Arc::clone(&kept),
        lagged: std::sync::Arc::clone(&lagged),
    };
    let client = Client::new(store);
    let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let mut observed = Box::pin(client.observe("e", Duration::from_millis(1)));
    let a = locker.campaign("e", "a", &lease()).await.unwrap();
    assert_eq!(observed.next().await.unwrap().unwrap().fence, a.fence());
    *kept.lock().unwrap() = client.status(&lockwright::Filter::new()).await.unwrap();
    a.resign().await.unwrap();
    let b = locker.campaign("e", "b", &lease()).await.unwrap();
    assert_eq!(observed.next().await.unwrap().unwrap().fence, b.fence());
    // The reads lag: they name a again, for a few reads of the observer's.
    lag.store(true, Ordering::SeqCst);
    b.resign().await.unwrap();
    let c = locker.campaign("e", "c", &lease()).await.unwrap();
    let lagging = tokio::spawn(async move { observed.next().await.map(|l| l.map(|l| l.fence)) });
    // Until the observer read three times while reads lagged, or reported something
    // (which can only be wrong: every read names a).
    for _ in 0..60_000 {
        if lagged.load(Ordering::SeqCst) >= 3 || lagging.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        lagged.load(Ordering::SeqCst) >= 3 || lagging.is_finished(),
        "the observer read while reads lagged"
    );
    lag.store(false, Ordering::SeqCst);
    let next = lagging.await.unwrap().unwrap().unwrap();
    assert_eq!(
        next,
        c.fence(),
        "after b, the observer reports c (not a, which a lagging read named)"
    );
}

/// A store that counts its status reads (who leads is one).
struct Reads<S> {
    inner: S,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<S: LockStore> lockwright_testkit::Forward for Reads<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn read(
        &self,
        query: lockwright::Query<'_>,
    ) -> Result<lockwright::Reading, lockwright::Error> {
        if matches!(query, lockwright::Query::Locks(_)) {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        lockwright::LockStore::read(&self.inner, query).await
    }
}

lockwright_testkit::forward_lock_store!(impl<S: LockStore> Reads<S>);

/// The next leader `observed` reports: a minute at most (its reads are an hour apart, so
/// only the store's news of leaders can bring it in time).
async fn heard(
    observed: &mut (
             impl futures_util::Stream<Item = Result<lockwright::Leader, lockwright::Error>> + Unpin
         ),
    what: &str,
) -> lockwright::Leader {
    tokio::time::timeout(Duration::from_secs(60), observed.next())
        .await
        .unwrap_or_else(|_| panic!("no news of {what} within a minute"))
        .unwrap()
        .unwrap()
}

/// Observers woken by the store: candidates on `candidates`' store; an observer on
/// `observer`'s (another process's, where the backend has processes) reads every hour, and
/// still reports a, b (handed the leadership when a resigns) and c (granted it, free) as
/// they lead, in fence order: it read who leads once (at the start: the news' stream was
/// open already).
async fn observers_hear_the_store<S: LockStore, O: LockStore>(
    candidates: Client<S>,
    observer: Client<Reads<O>>,
) {
    use std::sync::atomic::Ordering;
    // The kill matrix's harness `election` (with the filter `observer`): the mutant named
    // by `LOCKWRIGHT_MUTANT`, if any.
    #[cfg(lockwright_mutants)]
    lockwright_testkit::activate_mutant();
    let reads = std::sync::Arc::clone(&observer.store().reads);
    let hour = Duration::from_secs(3_600);
    // The news' stream is open once its first item, `Missed`, comes; kept open throughout.
    let mut open = observer
        .store()
        .leaders()
        .expect("the store sends news of leaders");
    assert_eq!(
        open.next().await,
        Some(lockwright_engine::election::LeaderNews::Missed)
    );
    let mut observed = Box::pin(observer.observe("news", hour));
    let locker = Locker::new(candidates.clone(), LockerConfig::default()).unwrap();
    // b's Locker hears no hints: it learns that it was handed the leadership by asking
    // again, and that claim (a grant of what it was handed) must be no news.
    let mut polling = LockerConfig::default();
    polling.wake_on_hints = false;
    let other = Locker::new(candidates.clone(), polling).unwrap();
    let a = locker.campaign("news", "a", &lease()).await.unwrap();
    let seen = heard(&mut observed, "a").await;
    assert_eq!((seen.value.as_deref(), seen.fence), (Some("a"), a.fence()));
    let b = {
        let other = other.clone();
        tokio::spawn(async move { other.campaign("news", "b", &lease()).await })
    };
    let resource = lockwright::Resource::new("news").unwrap();
    for _ in 0..6_000 {
        if candidates.store().waiters(&resource).await.unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.resign().await.unwrap();
    let seen = heard(&mut observed, "b, handed the leadership").await;
    let b = b.await.unwrap().unwrap();
    assert_eq!((seen.value.as_deref(), seen.fence), (Some("b"), b.fence()));
    b.resign().await.unwrap();
    let c = locker.campaign("news", "c", &lease()).await.unwrap();
    let seen = heard(&mut observed, "c, granted the leadership").await;
    assert_eq!((seen.value.as_deref(), seen.fence), (Some("c"), c.fence()));
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "one read, at the start: the observer heard b and c from the store"
    );
    drop(open);
    c.resign().await.unwrap();
    locker.shutdown();
    other.shutdown();
}

#[cfg(feature = "mem")]
#[tokio::test]
async fn observers_hear_the_store_in_memory() {
    let client = Client::new(Reads {
        inner: lockwright::MemStore::new(),
        reads: std::sync::Arc::default(),
    });
    observers_hear_the_store(client.clone(), client).await;
}

#[cfg(feature = "mongo")]
mod mongo {
    use lockwright_testkit::mongo::fixture::{fresh_store, monitored_client, teardown};

    use super::*;

    /// The observer is another process (a client of its own) on the candidates'
    /// collection, with two observers on two elections: one cursor on the leaders'
    /// collection serves both (one `find` on it), and each news is an insert of the
    /// candidates' process, one per leader made.
    #[tokio::test]
    async fn observers_hear_the_store_on_mongodb() {
        let candidates = Client::new(fresh_store(None).await);
        let (client, log) = monitored_client().await;
        let ns = candidates.store().collection().namespace();
        let observer = Client::new(Reads {
            inner: lockwright::MongoStore::from_collection(
                client.database(&ns.db).collection(&ns.coll),
            ),
            reads: std::sync::Arc::default(),
        });
        let leaders = observer.store().inner.wake_collections().pop().unwrap();
        assert!(leaders.ends_with(".wakes.leaders"), "{leaders}");
        let _elsewhere = Box::pin(observer.observe("elsewhere", Duration::from_secs(3_600)));
        observers_hear_the_store(candidates.clone(), observer).await;
        let finds = log
            .take_commands()
            .into_iter()
            .filter(|(name, body)| {
                name == "find"
                    && body.get_str("find") == Ok(leaders.as_str())
                    && body.get_bool("tailable") == Ok(true)
            })
            .count();
        assert_eq!(
            finds, 1,
            "one cursor on the leaders' collection for this process"
        );
        // One news per leader made (a's grant, the hand-over to b that a's resign made,
        // c's grant): none for b's claim of what it was handed.
        let news = client
            .database(&ns.db)
            .collection::<mongodb::bson::Document>(&leaders)
            .count_documents(mongodb::bson::doc! { "r": "news" })
            .await
            .unwrap();
        assert_eq!(news, 3, "one news per leader");
        teardown(candidates.store()).await;
    }

    #[tokio::test]
    async fn candidates_lead_in_turn_on_mongodb() {
        let client = Client::new(fresh_store(None).await);
        three_candidates(client.clone()).await;
        teardown(client.store()).await;
    }
}

/// A store whose news of leaders the test sends (one subscription).
#[cfg(feature = "mem")]
struct Told {
    inner: lockwright::MemStore,
    news: std::sync::Mutex<Option<lockwright_engine::election::LeaderStream>>,
}

#[cfg(feature = "mem")]
impl lockwright_testkit::Forward for Told {
    type Inner = lockwright::MemStore;

    fn inner(&self) -> &lockwright::MemStore {
        &self.inner
    }

    fn notices(&self) -> Option<&dyn lockwright::Notices> {
        Some(self)
    }
}

/// The inner store's hints and announcements, and the news this test hands it.
#[cfg(feature = "mem")]
impl lockwright::Notices for Told {
    fn hints(&self) -> Option<lockwright::HintStream> {
        lockwright::LockStore::hints(&self.inner)
    }

    fn announce_leaders(&self, election: &lockwright::Resource) {
        lockwright::LockStore::announce_leaders(&self.inner, election);
    }

    fn leaders(&self) -> Option<lockwright_engine::election::LeaderStream> {
        self.news.lock().unwrap().take()
    }
}

#[cfg(feature = "mem")]
lockwright_testkit::forward_lock_store!(Told);

/// News that comes late (its writer paused after its write: its lease has ended) is not
/// reported on its word: the observer reads who leads instead. Fresh news is reported.
#[cfg(feature = "mem")]
#[tokio::test]
async fn late_news_of_a_leader_is_confirmed_by_a_read() {
    use lockwright_engine::Timestamp;
    use lockwright_engine::election::LeaderNews;
    let (tell, told) = tokio::sync::mpsc::unbounded_channel();
    let told = futures_util::stream::unfold(told, |mut rx| async move {
        rx.recv().await.map(|news| (news, rx))
    });
    let client = Client::new(Told {
        inner: lockwright::MemStore::new(),
        news: std::sync::Mutex::new(Some(Box::pin(told))),
    });
    let locker = Locker::new(client.clone(), LockerConfig::default()).unwrap();
    let a = locker.campaign("e", "a", &lease()).await.unwrap();
    // Reads only at the start (and when news says to): an hour between reads.
    let mut observed = Box::pin(client.observe("e", Duration::from_secs(3_600)));
    assert_eq!(observed.next().await.unwrap().unwrap().fence, a.fence());
    let now = Timestamp::from_system_time(std::time::SystemTime::now()).unwrap();
    let news = |value: &str, fence, until| LeaderNews::Leads {
        election: lockwright::Resource::new("e").unwrap(),
        leader: lockwright::Leader::new(Some(value.to_owned()), fence, now),
        until: Some(until),
    };
    // Late: its lease ended a second ago. A read names a, who was reported already.
    tell.send(news(
        "late",
        a.fence() + 100,
        Timestamp::from_millis(now.as_millis() - 1_000),
    ))
    .unwrap();
    // Fresh: reported as it comes.
    tell.send(news(
        "fresh",
        a.fence() + 200,
        now.saturating_add(Duration::from_secs(60)),
    ))
    .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(60), observed.next())
        .await
        .expect("the fresh news is reported")
        .unwrap()
        .unwrap();
    assert_eq!(
        next.value.as_deref(),
        Some("fresh"),
        "late news was reported on its word: {next:?}"
    );
}
