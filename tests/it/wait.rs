//! Waiting for a busy lock: woken by its release (one subscribed connection per client, the
//! release script publishes), polling as the fallback. Real redis-servers and twemproxy.
//!
//! No timing assertions: the tests count acquire attempts. A poller with a 10 ms pause makes
//! dozens of attempts while a lock is held for half a second; a notified waiter makes two (the
//! busy one and the one after the release).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lockkit::{
    AcquireObserver, AttemptOutcome, ClientOptions, LockClient, LockOptions, Locker,
    ReleaseOutcome, RetryOptions, WaitMode,
};
use lockkit_test_support::{Nutcracker, RedisServer};

#[derive(Default)]
struct Attempts(u32);

impl AcquireObserver for Attempts {
    fn on_attempt(&mut self, _: AttemptOutcome, _: Instant, _: Duration) {
        self.0 += 1;
    }
}

fn retrying(ttl: Duration) -> LockOptions {
    LockOptions::builder(ttl)
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(10))
                .jitter(Duration::ZERO)
                .deadline(Some(Duration::from_secs(20))),
        )
        .build()
        .unwrap()
}

/// Acquires `key` with [`retrying`] options; the lock and how many attempts it took.
async fn acquire_counting(c: &LockClient, key: &str) -> (lockkit::Lock, u32) {
    let mut attempts = Attempts::default();
    let lock = c
        .acquire_observed(key, &retrying(Duration::from_secs(5)), &mut attempts)
        .await
        .unwrap();
    (lock, attempts.0)
}

async fn client(url: &str, wait: WaitMode) -> LockClient {
    LockClient::connect_with(url, ClientOptions::new().wait(wait))
        .await
        .unwrap()
}

/// `holder` takes `key`, `waiter` tries to acquire it meanwhile; the holder releases after
/// `hold`. The waiter's attempt count.
async fn attempts_while_held(holder: &LockClient, waiter: &LockClient, key: &str) -> u32 {
    let held = holder
        .try_acquire(key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let w = waiter.clone();
    let k = key.to_string();
    let task = tokio::spawn(async move {
        let (lock, attempts) = acquire_counting(&w, &k).await;
        w.release(&lock).await.unwrap();
        attempts
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        holder.release(&held).await.unwrap(),
        ReleaseOutcome::Released
    );
    task.await.unwrap()
}

#[tokio::test]
async fn a_waiter_wakes_on_release_instead_of_polling() {
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let notified = client(&server.url(), WaitMode::Notify).await;
    assert_eq!(notified.wait_mode(), (WaitMode::Notify, None));
    let n = attempts_while_held(&holder, &notified, "lock:wake").await;
    assert!(
        n <= 3,
        "a notified waiter polled: {n} attempts for one release"
    );

    // The same scenario with polling: the pause of 10 ms means many attempts.
    let poller = client(&server.url(), WaitMode::Poll).await;
    assert_eq!(poller.wait_mode(), (WaitMode::Poll, None));
    let p = attempts_while_held(&holder, &poller, "lock:wake").await;
    assert!(p > 3, "polling made only {p} attempts in half a second");
}

#[tokio::test]
async fn a_waiter_wakes_when_the_holder_ttl_runs_out() {
    // The holder never releases (a crashed process): no message comes; the waiter reads the
    // remaining TTL and tries again when it has run out.
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let waiter = client(&server.url(), WaitMode::Notify).await;
    let _abandoned = holder
        .try_acquire("lock:crashed", Duration::from_millis(400))
        .await
        .unwrap()
        .unwrap();
    let (lock, attempts) = acquire_counting(&waiter, "lock:crashed").await;
    assert!(attempts <= 3, "{attempts} attempts");
    waiter.release(&lock).await.unwrap();
}

#[tokio::test]
async fn waiters_of_one_client_take_the_lock_first_come_first_served() {
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let waiters = client(&server.url(), WaitMode::Notify).await;
    let held = holder
        .try_acquire("lock:queue", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5u32 {
        let (w, order) = (waiters.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let (lock, attempts) = acquire_counting(&w, "lock:queue").await;
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            w.release(&lock).await.unwrap();
            attempts
        }));
        // Arrival order: each waiter is queued well before the next one starts.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    holder.release(&held).await.unwrap();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    // The first waiter tried once before queueing; the others queued behind it without trying;
    // each tried once more when its turn came (a spare attempt each at most).
    assert!(total <= 5 + 1 + 5, "{total} attempts for 5 locks");
}

#[tokio::test]
async fn release_publishes_only_when_it_deleted_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url(), WaitMode::Notify).await;
    let sub = redis::Client::open(server.url()).unwrap();
    let (mut sink, mut stream) = sub.get_async_pubsub().await.unwrap().split();
    sink.subscribe("lockkit:released:lock:pub").await.unwrap();

    let lock = c
        .try_acquire("lock:pub", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    // Someone else's token in the key: not ours, nothing deleted, nothing published.
    server.inline("SET lock:pub intruder").unwrap();
    assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::HeldByOther);
    server.inline("DEL lock:pub").unwrap();
    let lock = c
        .try_acquire("lock:pub", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::NotHeld);
    // A marker published after the three releases: everything before it has been delivered.
    let mut conn = sub.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("PUBLISH")
        .arg("lockkit:released:lock:pub")
        .arg("marker")
        .query_async::<i64>(&mut conn)
        .await
        .unwrap();
    let mut payloads = Vec::new();
    while let Some(msg) = stream.next().await {
        let p: String = msg.get_payload().unwrap();
        if p == "marker" {
            break;
        }
        payloads.push(p);
    }
    assert_eq!(
        payloads,
        vec!["1".to_string()],
        "one message, for the delete"
    );
}

#[tokio::test]
async fn behind_twemproxy_waiters_poll_and_say_why() {
    let a = RedisServer::start();
    let proxy = Nutcracker::start(&[&a]);
    let c = client(&proxy.url(), WaitMode::Notify).await;
    let (mode, why) = c.wait_mode();
    assert_eq!(mode, WaitMode::Poll);
    assert!(why.is_some_and(|w| w.contains("proxy")), "{why:?}");
    // Polling still gets the lock once it is released.
    let n = attempts_while_held(&c, &c, "lock:proxied").await;
    assert!(n > 1, "{n}");
}

#[tokio::test]
async fn an_acl_without_channels_falls_back_to_polling_and_release_still_works() {
    let server = RedisServer::start();
    server
        .inline(
            "ACL SETUSER locker on >lockpw resetkeys ~lock:* resetchannels -@all \
             +set +get +del +pexpire +evalsha +eval +script|load +ping +pttl +publish +subscribe",
        )
        .unwrap();
    let url = format!("redis://locker:lockpw@127.0.0.1:{}", server.port());
    let c = client(&url, WaitMode::Notify).await;
    let (mode, why) = c.wait_mode();
    assert_eq!(mode, WaitMode::Poll);
    assert!(why.is_some_and(|w| w.contains("SUBSCRIBE")), "{why:?}");
    // The release script's PUBLISH is refused (no channel); the lock is released all the same.
    let lock = c
        .try_acquire("lock:acl", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.release(&lock).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.inline("EXISTS lock:acl").unwrap().trim(), ":0");
}

#[tokio::test]
async fn a_killed_subscription_degrades_to_polling_and_comes_back() {
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let waiter = client(&server.url(), WaitMode::Notify).await;
    let n = attempts_while_held(&holder, &waiter, "lock:killed").await;
    assert!(n <= 3, "{n}");
    // The waiter's client is subscribed to lock:killed's channel now; kill that connection.
    let killed = server.inline("CLIENT KILL TYPE pubsub").unwrap();
    assert_eq!(killed.trim(), ":1");
    // Still gets the lock (polling meanwhile, or notified once reconnected).
    let n = attempts_while_held(&holder, &waiter, "lock:killed").await;
    assert!(n >= 2, "{n}");
    // Reconnected within the back-off, and subscribed again to the key it waited on.
    let mut back = false;
    for _ in 0..100 {
        if server
            .inline("CLIENT LIST TYPE pubsub")
            .unwrap()
            .contains("id=")
        {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the subscription connection did not come back");
    let n = attempts_while_held(&holder, &waiter, "lock:killed").await;
    assert!(n <= 3, "after reconnecting, still polling: {n} attempts");
}

/// Counts attempts into a shared counter the test can read while the acquire runs.
struct SharedAttempts(Arc<Mutex<u32>>);

impl AcquireObserver for SharedAttempts {
    fn on_attempt(&mut self, _: AttemptOutcome, _: Instant, _: Duration) {
        *self.0.lock().unwrap() += 1;
    }
}

/// An acquire that allows one attempt never waits, not even behind the same client's queue of
/// waiters for the key: it tries once and reports the lock busy. (It used to queue behind them
/// and wait up to the lock's TTL before its single attempt.)
#[tokio::test]
async fn a_single_attempt_acquire_does_not_queue_behind_waiters() {
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let c = client(&server.url(), WaitMode::Notify).await;
    let ttl = Duration::from_secs(60);
    let held = holder.try_acquire("single", ttl).await.unwrap().unwrap();
    // A retrying waiter of `c` queues for the key.
    let seen = Arc::new(Mutex::new(0u32));
    let (w, s) = (c.clone(), Arc::clone(&seen));
    let waiting = tokio::spawn(async move {
        let _ = w
            .acquire_observed("single", &retrying(ttl), &mut SharedAttempts(s))
            .await;
    });
    for _ in 0..200 {
        if *seen.lock().unwrap() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        *seen.lock().unwrap() > 0,
        "the waiter never made its first attempt"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The bound is generous: the lock is held for a minute, so waiting behind the queue would
    // run into it; one attempt takes a round trip.
    let once = LockOptions::builder(ttl)
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let mut attempts = Attempts::default();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        c.acquire_observed("single", &once, &mut attempts),
    )
    .await
    .expect("a single-attempt acquire waited behind the queue instead of trying once");
    assert_eq!(result.unwrap_err().kind(), lockkit::ErrorKind::Busy);
    assert_eq!(attempts.0, 1);
    waiting.abort();
    holder.release(&held).await.unwrap();
}

/// The futures of the uncontended path stay small: each layer of the retry loop, the metrics
/// and the tracing span moves its inner future once, so every KiB of future is several KiB of
/// copying per lock. Rare paths (a lost acquire reply, `NOSCRIPT`, a retried release, waiting)
/// are boxed so they do not enlarge it. (Before: 4,064 and 2,584 bytes in a release build.)
#[tokio::test]
async fn uncontended_futures_stay_small() {
    let server = RedisServer::start();
    let c = client(&server.url(), WaitMode::Notify).await;
    let once = LockOptions::builder(Duration::from_secs(5))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let mut attempts = Attempts::default();
    let acquire = c.acquire_observed("small", &once, &mut attempts);
    let acquire_size = std::mem::size_of_val(&acquire);
    let lock = acquire.await.unwrap();
    let release = c.release(&lock);
    let release_size = std::mem::size_of_val(&release);
    assert_eq!(release.await.unwrap(), ReleaseOutcome::Released);
    eprintln!("acquire future {acquire_size} bytes, release future {release_size} bytes");
    assert!(acquire_size <= 1536, "acquire future: {acquire_size} bytes");
    assert!(release_size <= 1024, "release future: {release_size} bytes");
}

/// An acquire with a 1 s deadline against a frozen server (SIGSTOP): its attempts time out, and
/// waiting for the release (subscribing to its channel) must not wait past the deadline either.
/// `Ok(kind)` of the error the acquire ended with while the server was still frozen; `Err` when
/// it was still waiting 8 s later.
async fn acquire_while_frozen(fair: bool) -> Result<lockkit::ErrorKind, &'static str> {
    let server = RedisServer::start();
    let holder = client(&server.url(), WaitMode::Notify).await;
    let waiter = LockClient::connect_with(
        &server.url(),
        ClientOptions::new()
            .wait(WaitMode::Notify)
            .response_timeout(Some(Duration::from_millis(250))),
    )
    .await
    .unwrap();
    let key = "frozen";
    let held = holder
        .try_acquire(key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let opts = LockOptions::builder(Duration::from_secs(5))
        .fair(fair)
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(10))
                .deadline(Some(Duration::from_secs(1))),
        )
        .build()
        .unwrap();
    server.pause().unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(8), waiter.acquire(key, &opts)).await;
    server.resume().unwrap();
    holder.release(&held).await.unwrap();
    match ended {
        Ok(Ok(_)) => panic!("acquired a held lock"),
        Ok(Err(e)) => Ok(e.kind()),
        Err(_) => Err("still waiting 8 s into a 1 s deadline"),
    }
}

#[tokio::test]
async fn a_notified_acquire_keeps_its_deadline_while_the_server_is_frozen() {
    let kind = acquire_while_frozen(false).await.unwrap();
    assert_eq!(kind, lockkit::ErrorKind::Timeout);
}

#[tokio::test]
async fn a_fair_acquire_keeps_its_deadline_while_the_server_is_frozen() {
    let kind = acquire_while_frozen(true).await.unwrap();
    assert_eq!(kind, lockkit::ErrorKind::Timeout);
}

/// `holder` takes `key` for a minute; `waiter` acquires it (retries every 10 ms, 20 s deadline)
/// and is told of the release 300 ms later. Panics when the waiter still waited 5 s after the
/// release: it slept towards its deadline instead of being woken (or polling).
async fn taken_soon_after_the_release(holder: &LockClient, waiter: &LockClient, key: &str) {
    let held = holder
        .try_acquire(key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let w = waiter.clone();
    let k = key.to_string();
    let waiting = tokio::spawn(async move {
        let lock = w.acquire(&k, &retrying(Duration::from_secs(5))).await;
        (lock, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        holder.release(&held).await.unwrap(),
        ReleaseOutcome::Released
    );
    let released = Instant::now();
    let (lock, at) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter still waited 5 s after the release (deadline 20 s, holder's TTL 60 s)")
        .unwrap();
    let lock = lock.unwrap();
    eprintln!(
        "taken {:?} after the release",
        at.saturating_duration_since(released)
    );
    waiter.release(&lock).await.unwrap();
}

/// Issue 35, defect 3: the runtime that connected the client (and ran its release-notification
/// connection) shuts down; the client goes on on another runtime. A waiter whose key was
/// subscribed before must not sleep towards its deadline on a hub that can no longer hear
/// anything: it polls the moment the hub is gone, and gets the lock soon after the release.
#[test]
fn a_waiter_whose_hub_runtime_ended_gets_the_lock_at_the_release() {
    let server = RedisServer::start();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let key = "hub:runtime";
    let waiter = first.block_on(async {
        let holder = client(&server.url(), WaitMode::Poll).await;
        let waiter = client(&server.url(), WaitMode::Notify).await;
        // The waiter's hub subscribes to the key's channel, and is woken over it once.
        let n = attempts_while_held(&holder, &waiter, key).await;
        assert!(n <= 3, "{n}");
        waiter
    });
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let holder = client(&server.url(), WaitMode::Poll).await;
        taken_soon_after_the_release(&holder, &waiter, key).await;
    });
}

/// Issue 35, defect 3: only the release-notification connection goes silent (a NAT entry
/// dropped: nothing passes, nothing is closed). A waiter must not wait for a message that
/// cannot come: the hub finds the silence, the waiter polls meanwhile, and gets the lock soon
/// after the release (it slept until its deadline).
#[tokio::test]
async fn a_waiter_whose_hub_went_silent_gets_the_lock_at_the_release() {
    let server = RedisServer::start();
    let relay =
        lockkit_test_support::DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO)
            .unwrap();
    let waiter = client(&relay.url(), WaitMode::Notify).await;
    // The lock connection (0) and the release-notification connection (1).
    assert_eq!(relay.accepted(), 2);
    let holder = client(&server.url(), WaitMode::Poll).await;
    let key = "hub:silent";
    let n = attempts_while_held(&holder, &waiter, key).await;
    assert!(n <= 3, "{n}");
    relay.stall_connection(1);
    taken_soon_after_the_release(&holder, &waiter, key).await;
}

/// Issue 35, defect 3: a server that accepts connections and then answers nothing on them (here
/// every connection after the client's first: its release-notification connection). `connect`
/// is bounded by its connect timeout in every step, the `SUBSCRIBE` probe included: it returns
/// (waiters poll until notification answers) instead of waiting forever.
#[tokio::test]
async fn connect_returns_within_its_timeout_when_the_server_stops_answering() {
    let server = RedisServer::start();
    let relay =
        lockkit_test_support::DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO)
            .unwrap();
    relay.stall_from(1);
    let opts = ClientOptions::new().connect_timeout(Duration::from_secs(1));
    let connected = tokio::time::timeout(
        Duration::from_secs(6),
        LockClient::connect_with(&relay.url(), opts),
    )
    .await
    .expect("connect still pending 6 s in (connect timeout 1 s)");
    let client = connected.unwrap();
    let lock = client
        .try_acquire("silent:after-connect", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    client.release(&lock).await.unwrap();
}

/// Issue 35, defect 3: against a server that accepts and never answers, `connect` fails within
/// its connect timeout (and a little), not after every reconnect retry's timeout in turn (1 s
/// each, 4 of them and their pauses here).
#[tokio::test]
async fn connect_to_a_server_that_never_answers_fails_within_its_timeout() {
    let server = RedisServer::start();
    let relay =
        lockkit_test_support::DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO)
            .unwrap();
    relay.stall_from(0);
    let opts = ClientOptions::new().connect_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let connected = tokio::time::timeout(
        Duration::from_secs(3),
        LockClient::connect_with(&relay.url(), opts),
    )
    .await;
    let err = match connected {
        Ok(Ok(_)) => panic!("a server that answers nothing was connected to"),
        Ok(Err(e)) => e,
        Err(_) => panic!("connect still pending 3 s in (connect timeout 1 s)"),
    };
    eprintln!("failed after {:?}: {err}", start.elapsed());
    assert_eq!(err.kind(), lockkit::ErrorKind::Timeout, "{err}");
}
