//! `Semaphore`: N permits per key, each a lease of its own, against a real redis-server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit::{
    ErrorKind, ExtendOutcome, LockClient, LockOptions, Locker, ReleaseOutcome, RetryOptions,
    Semaphore, WatchdogOptions,
};
use lockkit_test_support::RedisServer;

async fn semaphore(server: &RedisServer, permits: u32) -> Semaphore {
    let client = LockClient::connect(&server.url()).await.unwrap();
    Semaphore::new(client, permits).unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.inline(&format!("PTTL {key}")).unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[tokio::test]
async fn zero_permits_are_refused() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let e = Semaphore::new(client, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn never_more_holders_than_permits_and_a_release_frees_one() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 3).await;
    let ttl = Duration::from_secs(30);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            sem.try_acquire("sem:a", ttl)
                .await
                .unwrap()
                .expect("a free permit"),
        );
    }
    assert!(sem.try_acquire("sem:a", ttl).await.unwrap().is_none());
    assert_eq!(sem.holders("sem:a").await.unwrap(), 3);
    // Another key has permits of its own.
    let other = sem.try_acquire("sem:b", ttl).await.unwrap().unwrap();
    let first = held.remove(0);
    assert_eq!(sem.release(&first).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(sem.release(&first).await.unwrap(), ReleaseOutcome::NotHeld);
    held.push(
        sem.try_acquire("sem:a", ttl)
            .await
            .unwrap()
            .expect("the freed permit"),
    );
    assert!(sem.try_acquire("sem:a", ttl).await.unwrap().is_none());
    for p in held.iter().chain([&other]) {
        assert_eq!(sem.release(p).await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(server.inline("EXISTS sem:a sem:b").unwrap().trim(), ":0");
}

#[tokio::test]
async fn a_crashed_holders_permit_comes_back_when_its_lease_ends_and_the_key_keeps_a_ttl() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 2).await;
    // Two holders that never release (they "crash").
    for _ in 0..2 {
        sem.try_acquire("sem:crash", Duration::from_millis(300))
            .await
            .unwrap()
            .unwrap();
    }
    assert!(sem
        .try_acquire("sem:crash", Duration::from_secs(5))
        .await
        .unwrap()
        .is_none());
    let ttl = pttl(&server, "sem:crash");
    assert!(ttl > 0 && ttl <= 300, "the key's TTL is {ttl}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The leases ended: the key is gone and a permit is free again.
    assert_eq!(pttl(&server, "sem:crash"), -2);
    let p = sem
        .try_acquire("sem:crash", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the crashed holders' permits came back");
    let ttl = pttl(&server, "sem:crash");
    assert!(ttl > 4000 && ttl <= 5000, "the key's TTL is {ttl}");
    sem.release(&p).await.unwrap();
}

#[tokio::test]
async fn extend_renews_only_a_live_permit_and_keeps_the_key_at_the_longest_lease() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 2).await;
    let mut a = sem
        .try_acquire("sem:x", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let b = sem
        .try_acquire("sem:x", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        sem.extend(&mut a, Duration::from_secs(60)).await.unwrap(),
        ExtendOutcome::Extended
    );
    assert_eq!(a.ttl(), Duration::from_secs(60));
    assert!(pttl(&server, "sem:x") > 50_000);
    // The longest lease leaves: the key's TTL comes down to the one left.
    sem.release(&a).await.unwrap();
    let ttl = pttl(&server, "sem:x");
    assert!(ttl > 0 && ttl <= 5000, "the key's TTL is {ttl}");
    sem.release(&b).await.unwrap();
    let mut gone = a.clone();
    assert_eq!(
        sem.extend(&mut gone, Duration::from_secs(5)).await.unwrap(),
        ExtendOutcome::NotHeld
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_long_before_the_holders_lease_ends() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 1).await;
    let holder = sem
        .try_acquire("sem:wait", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let opts = LockOptions::builder(Duration::from_secs(10))
        .retry(RetryOptions::new().deadline(Some(Duration::from_secs(20))))
        .build()
        .unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire("sem:wait", &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got a permit that was held"
    );
    sem.release(&holder).await.unwrap();
    // The holder's lease was a minute and the waiter's deadline 20 s: only the release (or a
    // retry after it) hands the permit over.
    let p = waiter.await.unwrap().expect("the waiter got the permit");
    assert_eq!(sem.release(&p).await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn the_watchdog_keeps_a_permit_past_its_ttl() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 1).await;
    let opts = LockOptions::new(Duration::from_millis(300)).unwrap();
    let guard = sem
        .lock("sem:dog", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(guard.is_lost().is_none());
    assert_eq!(sem.holders("sem:dog").await.unwrap(), 1);
    assert!(sem
        .try_acquire("sem:dog", Duration::from_secs(1))
        .await
        .unwrap()
        .is_none());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(sem.holders("sem:dog").await.unwrap(), 0);
}

/// An acquire dropped while its script waits on a frozen server: the script takes a permit
/// when the server wakes, for nobody. The clean-up must give back a *permit* (a mutex's
/// compare-and-delete finds a sorted set and fails): the permit is free right after.
#[tokio::test]
async fn an_acquire_dropped_mid_attempt_leaves_no_permit_behind() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 1).await;
    // Warm up: the scripts are loaded and the connection is up.
    let p = sem
        .try_acquire("sem:drop", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    sem.release(&p).await.unwrap();
    server.pause().unwrap();
    let attempt = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire("sem:drop", Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    attempt.abort();
    let _ = attempt.await;
    server.resume().unwrap();
    let since = Instant::now();
    let mut holders = u64::MAX;
    while since.elapsed() < Duration::from_secs(5) {
        holders = sem.holders("sem:drop").await.unwrap();
        if holders == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(holders, 0, "the dropped acquire's permit is still held");
}

#[tokio::test]
async fn concurrent_holders_never_exceed_the_permits() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 3).await;
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let opts = LockOptions::builder(Duration::from_secs(5))
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(2))
                .jitter(Duration::from_millis(2))
                .deadline(Some(Duration::from_secs(30))),
        )
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (sem, inside, most) = (sem.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let p = sem.acquire("sem:busy", &opts).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(sem.release(&p).await.unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once with 3 permits");
    assert!(most >= 2, "the permits were never shared ({most} at most)");
}

/// A fenced permit is one of N numbered slots with a counter each: a holder paused past its
/// lease loses its slot to the next holder, whose newer token writes first, and the paused
/// holder's late write through `fenced_set` (one stored token per slot) is refused, while the
/// holder of the other slot goes on writing.
#[tokio::test]
async fn a_paused_permit_holders_write_is_refused_once_its_slots_next_holder_wrote() {
    let server = RedisServer::start();
    let sem = semaphore(&server, 2).await;
    let client = sem.client().clone();
    let (key, fence) = ("{up}", "{up}:fence");
    let short = Duration::from_millis(200);
    let long = Duration::from_secs(30);
    let paused = sem.try_acquire_fenced(key, fence, short).await.unwrap();
    let paused = paused.expect("a free permit");
    let other = sem.try_acquire_fenced(key, fence, long).await.unwrap();
    let other = other.expect("the second permit");
    let slots = (paused.fencing_slot(), other.fencing_slot());
    assert_eq!(slots, (Some(1), Some(2)));
    assert_eq!(
        (paused.fencing_token(), other.fencing_token()),
        (Some(1), Some(1))
    );
    assert!(sem
        .try_acquire_fenced(key, fence, long)
        .await
        .unwrap()
        .is_none());
    // Slot 1's holder stops past its lease; the next holder gets slot 1, and a newer token.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = sem.try_acquire_fenced(key, fence, long).await.unwrap();
    let next = next.expect("the paused holder's permit came back");
    assert_eq!(
        (next.fencing_slot(), next.fencing_token()),
        (Some(1), Some(2))
    );
    let write = |p: &lockkit::Lock, value: &'static [u8]| {
        let client = client.clone();
        let slot = p.fencing_slot().unwrap();
        let token = p.fencing_token().unwrap();
        async move {
            let stored = format!("{{up}}:doc:{slot}");
            let bar = format!("{stored}:fence");
            client
                .fenced_set(&stored, &bar, token, value)
                .await
                .unwrap()
        }
    };
    assert!(write(&next, b"next").await);
    assert!(
        !write(&paused, b"stale").await,
        "the stale write is refused"
    );
    assert!(write(&other, b"other").await, "slot 2's holder goes on");
    assert!(server.inline("GET {up}:doc:1").unwrap().contains("next"));
    assert_eq!(sem.release(&paused).await.unwrap(), ReleaseOutcome::NotHeld);
    for p in [&other, &next] {
        assert_eq!(sem.release(p).await.unwrap(), ReleaseOutcome::Released);
    }
    // The counters stay (no TTL); the semaphore went with its last holder.
    assert_eq!(pttl(&server, fence), -1);
    assert_eq!(pttl(&server, key), -2);
}
