//! Fair mode (`LockOptionsBuilder::fair`): acquires take turns through a queue in Redis, across
//! separate clients, against a real redis-server.
//!
//! No timing assertions: the tests check the order in which waiters got the lock, and that a
//! waiter that gave up (or was dropped, or died) does not keep the next one from it. Arrival
//! order is made certain by waiting until each waiter is in the queue before starting the next.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use lockkit::{
    fair_queue_keys, AcquireObserver, AttemptOutcome, ClientOptions, ErrorKind, LockClient,
    LockOptions, LockOptionsBuilder, Locker, ReleaseOutcome, RetryOptions, WaitMode,
};
use lockkit_test_support::{Nutcracker, RedisServer};

#[derive(Default)]
struct Attempts(u32);

impl AcquireObserver for Attempts {
    fn on_attempt(&mut self, _: AttemptOutcome, _: Instant, _: Duration) {
        self.0 += 1;
    }
}

fn fair_builder(deadline: Duration) -> LockOptionsBuilder {
    let retry = RetryOptions::new()
        .delay(Duration::from_millis(10))
        .jitter(Duration::ZERO)
        .deadline(Some(deadline));
    LockOptions::builder(Duration::from_secs(30))
        .fair(true)
        .retry(retry)
}

fn fair(deadline: Duration) -> LockOptions {
    fair_builder(deadline).build().unwrap()
}

async fn client(url: &str, wait: WaitMode) -> LockClient {
    LockClient::connect_with(url, ClientOptions::new().wait(wait))
        .await
        .unwrap()
}

/// A plain connection to `url`, for looking at the keys.
async fn plain(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// How many waiters are in `key`'s fair queue.
async fn queued(url: &str, key: &str) -> usize {
    let mut conn = plain(url).await;
    redis::cmd("ZCARD")
        .arg(&fair_queue_keys(key)[0])
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits (bounded) until `key`'s queue holds `n` waiters (on whichever of `urls` it is).
async fn until_queued_on(urls: &[String], key: &str, n: usize) {
    for _ in 0..1000 {
        let mut total = 0;
        for url in urls {
            total += queued(url, key).await;
        }
        if total == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the queue of {key} never held {n} waiters");
}

/// Waits (bounded) until `key`'s queue on `url` holds `n` waiters.
async fn until_queued(url: &str, key: &str, n: usize) {
    until_queued_on(&[url.to_string()], key, n).await;
}

/// Six waiters, alternating between two clients, queue up behind a holder; each takes the lock,
/// holds it briefly and releases it. The order in which they got it, and their attempts.
async fn take_turns(wait: WaitMode) -> (Vec<usize>, u32) {
    let server = RedisServer::start();
    take_turns_at(&server.url(), &[server.url()], wait).await
}

/// [`take_turns`] through `url`, whose queue lands on one of `servers`.
async fn take_turns_at(url: &str, servers: &[String], wait: WaitMode) -> (Vec<usize>, u32) {
    let key = "lock:turns";
    let holder = client(url, wait).await;
    let clients = [client(url, wait).await, client(url, wait).await];
    let held = holder
        .acquire(key, &fair(Duration::from_secs(1)))
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    // Who is inside the critical section now (the holder to begin with), and how many times
    // someone entered while another was inside: the order means nothing if holders overlap.
    let inside = Arc::new(AtomicUsize::new(1));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (c, order) = (clients[i % 2].clone(), order.clone());
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let mut attempts = Attempts::default();
            let opts = fair(Duration::from_secs(20));
            let lock = c.acquire_observed(key, &opts, &mut attempts).await.unwrap();
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::Released);
            attempts.0
        }));
        until_queued_on(servers, key, i + 1).await;
    }
    inside.fetch_sub(1, Ordering::SeqCst);
    assert_eq!(
        holder.release(&held).await.unwrap(),
        ReleaseOutcome::Released
    );
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    until_queued_on(servers, key, 0).await;
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a waiter got the lock while another holder was inside"
    );
    let order = order.lock().unwrap().clone();
    (order, total)
}

#[tokio::test]
async fn waiters_of_two_clients_take_the_lock_in_arrival_order() {
    let (order, attempts) = take_turns(WaitMode::Notify).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
    // Each queued once and tried again when a release named it (a spare attempt each at most).
    assert!(attempts <= 6 * 3, "{attempts} attempts for 6 locks");
}

#[tokio::test]
async fn polling_waiters_still_take_the_lock_in_arrival_order() {
    // Where releases do not notify, the queue in Redis still decides who goes next.
    let (order, _) = take_turns(WaitMode::Poll).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn behind_twemproxy_the_queue_still_decides_the_order() {
    // No pub/sub through the proxy: waiters poll, the queue (routed with the lock key, the
    // scripts' first key, to one of two backends) decides who goes next.
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let proxy = Nutcracker::start(&[&a, &b]);
    let (order, _) = take_turns_at(&proxy.url(), &[a.url(), b.url()], WaitMode::Notify).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
}

/// A holder, then `first` queued (its place lasting a minute), then `second` behind it with a
/// 10 s deadline: `second` gets the lock after the release only if `first` is out of its way.
/// `give_up` returns a task checking how `first` ended; it is awaited, so its assertions count.
async fn second_in_line_after(
    give_up: impl FnOnce(
        tokio::task::JoinHandle<lockkit::Result<lockkit::Lock>>,
    ) -> tokio::task::JoinHandle<()>,
    first_deadline: Duration,
) {
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:gone";
    let (a, b, holder) = (
        client(&url, WaitMode::Notify).await,
        client(&url, WaitMode::Notify).await,
        client(&url, WaitMode::Notify).await,
    );
    let long_lease = |d| {
        fair_builder(d)
            .queue_lease(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    let held = holder
        .acquire(key, &long_lease(Duration::from_secs(1)))
        .await
        .unwrap();
    let first = tokio::spawn(async move { a.acquire(key, &long_lease(first_deadline)).await });
    until_queued(&url, key, 1).await;
    let second = tokio::spawn(async move {
        b.acquire(key, &long_lease(Duration::from_secs(10)))
            .await
            .map(|lock| (b, lock))
    });
    until_queued(&url, key, 2).await;
    let first_ended = give_up(first);
    until_queued(&url, key, 1).await;
    holder.release(&held).await.unwrap();
    let (b, lock) = second
        .await
        .unwrap()
        .expect("the second waiter got the lock");
    assert_eq!(b.release(&lock).await.unwrap(), ReleaseOutcome::Released);
    first_ended.await.unwrap();
}

#[tokio::test]
async fn a_waiter_whose_deadline_passed_leaves_the_queue() {
    second_in_line_after(
        |first| {
            tokio::spawn(async move {
                // The lock stayed busy until the deadline: `AcquireTimeout`, of kind Busy.
                let e = first.await.unwrap().unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            })
        },
        Duration::from_millis(300),
    )
    .await;
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_queue() {
    second_in_line_after(
        |first| {
            first.abort();
            tokio::spawn(async {})
        },
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn a_dead_waiter_is_dropped_from_the_queue_when_its_lease_runs_out() {
    // A waiter that queued and never came back (its process died): a place with a 300 ms lease.
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:dead";
    let holder = client(&url, WaitMode::Notify).await;
    let next = client(&url, WaitMode::Notify).await;
    let held = holder
        .acquire(key, &fair(Duration::from_secs(1)))
        .await
        .unwrap();
    let [queue, leases] = fair_queue_keys(key);
    let mut conn = plain(&url).await;
    let place: Vec<i64> = redis::Script::new(lockkit::scripts::ACQUIRE_FAIR.source())
        .key(key)
        .key(&queue)
        .key(&leases)
        .arg("dead-ticket")
        .arg(30000)
        .arg(300)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(place[0], 1, "the dead waiter is the head");
    let task = {
        let next = next.clone();
        tokio::spawn(async move { next.acquire(key, &fair(Duration::from_secs(10))).await })
    };
    until_queued(&url, key, 2).await;
    holder.release(&held).await.unwrap();
    let lock = task.await.unwrap().expect("the live waiter got the lock");
    assert_eq!(next.release(&lock).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(queued(&url, key).await, 0);
}

#[tokio::test]
async fn only_the_holder_releases_a_fair_lock() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server.url(), WaitMode::Notify).await,
        client(&server.url(), WaitMode::Notify).await,
    );
    let short = LockOptions::builder(Duration::from_millis(100))
        .fair(true)
        .build()
        .unwrap();
    let old = a.acquire("lock:own", &short).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lock = b
        .acquire("lock:own", &fair(Duration::from_secs(1)))
        .await
        .unwrap();
    // The expired holder's release leaves the new holder's lock alone.
    assert_eq!(a.release(&old).await.unwrap(), ReleaseOutcome::HeldByOther);
    assert!(b
        .try_acquire("lock:own", Duration::from_secs(1))
        .await
        .unwrap()
        .is_none());
    assert_eq!(b.release(&lock).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(b.release(&lock).await.unwrap(), ReleaseOutcome::NotHeld);
}

#[tokio::test]
async fn redlock_says_fair_mode_is_unavailable_and_acquires_without_it() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let options = lockkit::RedlockOptions::new().restart_rule(false);
    let redlock = lockkit::Redlock::connect_with(&urls, options)
        .await
        .unwrap();
    assert!(redlock.fair_unavailable().is_some());
    let lock = redlock
        .acquire("lock:rl", &fair(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(
        !lock.options().is_fair(),
        "the lock says it was taken without the queue"
    );
    assert!(redlock.release(&lock).await.unwrap().is_released());
    assert_eq!(queued(&urls[0], "lock:rl").await, 0);
}

/// Reads `key`'s value over a fresh connection.
async fn holder_of(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut plain(url).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_fair_lock_taken_after_lost_replies_is_not_released_behind_its_holder() {
    // The server freezes while a fair acquire runs: its attempts time out (their outcome is
    // unknown), and so do their clean-ups, which then go on in the background with the
    // attempt's token. When the server is back, the acquire takes the lock; those background
    // clean-ups must not delete that lock afterwards.
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:fair-lost-replies";
    let c = LockClient::connect_with(
        &url,
        ClientOptions::new()
            .wait(WaitMode::Poll)
            .response_timeout(Some(Duration::from_millis(250))),
    )
    .await
    .unwrap();
    let opts = LockOptions::builder(Duration::from_secs(30))
        .fair(true)
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(50))
                .jitter(Duration::ZERO)
                .deadline(Some(Duration::from_secs(20))),
        )
        .build()
        .unwrap();
    server.pause().unwrap();
    let acquire = {
        let (c, opts) = (c.clone(), opts);
        tokio::spawn(async move { c.acquire(key, &opts).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.resume().unwrap();
    let lock = acquire
        .await
        .unwrap()
        .expect("acquired once the server was back");
    assert!(
        c.stats().unknown_outcome_cleanups >= 1,
        "the acquire met lost replies"
    );
    // The background clean-ups retry for about 3 s; the lock (30 s TTL) must stay ours.
    for _ in 0..40 {
        assert_eq!(
            holder_of(&url, key).await.as_deref(),
            Some(lock.token()),
            "the lock handed back was deleted behind its holder"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_fair_acquire_dropped_mid_attempt_leaves_no_lock_behind() {
    // The acquire's attempt reaches a frozen server, and the acquire is dropped (a timeout, a
    // client gone) before the reply: when the server wakes, the attempt takes the free lock
    // under the acquire's ticket, which nobody holds. Leaving the queue releases it too.
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:fair-dropped";
    let c = client(&url, WaitMode::Poll).await;
    server.pause().unwrap();
    let acquire = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire(key, &fair(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    acquire.abort();
    assert!(acquire.await.unwrap_err().is_cancelled());
    server.resume().unwrap();
    // The lock's TTL is 30 s: freed by the dropped acquire, or held for all of it.
    let mut freed = false;
    for _ in 0..100 {
        if holder_of(&url, key).await.is_none() && queued(&url, key).await == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        freed,
        "a lock taken by a dropped acquire stays held: {:?}, {} queued",
        holder_of(&url, key).await,
        queued(&url, key).await
    );
}

#[tokio::test]
async fn a_fair_attempt_finding_the_lock_under_its_ticket_counts_validity_from_the_keys_ttl() {
    // An attempt sent again under a ticket that already holds the lock (its first reply was
    // lost) gets the lock back: valid for what is left of the key's TTL, not a whole new one.
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:fair-again";
    let c = client(&url, WaitMode::Poll).await;
    let opts = LockOptions::builder(Duration::from_secs(2))
        .fair(true)
        .build()
        .unwrap();
    let ticket = lockkit::new_token();
    let first = c.attempt_fair(key, &opts, &ticket).await.unwrap();
    assert!(
        matches!(first, lockkit::FairAttempt::Acquired(_)),
        "{first:?}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let again = match c.attempt_fair(key, &opts, &ticket).await.unwrap() {
        lockkit::FairAttempt::Acquired(lock) => lock,
        other => panic!("the ticket holds the lock: {other:?}"),
    };
    let pttl: u64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut plain(&url).await)
        .await
        .unwrap();
    let validity = again.remaining_validity();
    assert!(
        validity <= Duration::from_millis(pttl),
        "the lock counts on {validity:?}, the key expires in {pttl} ms"
    );
    assert_eq!(c.release(&again).await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_fair_lock_released_in_a_batch_names_the_next_ticket() {
    // release_many of a fair lock wakes the head of the queue by name, as release does, rather
    // than every fair waiter of the key (a plain release's `1`).
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:fair-batch";
    let (holder, waiter) = (
        client(&url, WaitMode::Notify).await,
        client(&url, WaitMode::Notify).await,
    );
    let opts = fair_builder(Duration::from_secs(20))
        .queue_lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let held = holder.acquire(key, &opts).await.unwrap();
    let next = {
        let w = waiter.clone();
        tokio::spawn(async move { w.acquire(key, &opts).await })
    };
    until_queued(&url, key, 1).await;
    let head: Vec<String> = redis::cmd("ZRANGE")
        .arg(&fair_queue_keys(key)[0])
        .arg(0)
        .arg(0)
        .query_async(&mut plain(&url).await)
        .await
        .unwrap();
    let mut sub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(lockkit::wait::release_channel(key))
        .await
        .unwrap();
    let outcomes = holder.release_many(&[held]).await.unwrap();
    assert_eq!(outcomes, vec![ReleaseOutcome::Released]);
    let message = tokio::time::timeout(Duration::from_secs(10), sub.on_message().next())
        .await
        .expect("a release message")
        .unwrap();
    let named: String = message.get_payload().unwrap();
    assert_eq!(vec![named], head, "the release names the next ticket");
    let lock = next.await.unwrap().expect("the next waiter got the lock");
    assert_eq!(
        waiter.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
}
