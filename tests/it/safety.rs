//! Safety defects, each shown the way a user would see it, against a real redis-server.

use std::time::{Duration, Instant};

use lockkit::{
    ClientOptions, Error, ExtendOutcome, LockClient, LockOptions, Locker, ReleaseOutcome,
    RetryOptions, WaitMode, WatchdogOptions,
};
use lockkit_test_support::{DelayRelay, RedisServer};

/// Over `for_`, checks again and again that `key` holds `token` (read directly) and that a
/// second client cannot take it: `Err` says when either failed.
async fn stays_ours(url: &str, key: &str, token: &str, for_: Duration) -> Result<u32, String> {
    let other = LockClient::connect(url).await.unwrap();
    let mut direct = redis::Client::open(url).unwrap().get_connection().unwrap();
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < for_ {
        let held: Option<String> = redis::cmd("GET").arg(key).query(&mut direct).unwrap();
        if held.as_deref() != Some(token) {
            return Err(format!("{:?} in, the key held {held:?}", start.elapsed()));
        }
        if let Some(lock) = other
            .try_acquire(key, Duration::from_secs(5))
            .await
            .unwrap()
        {
            return Err(format!(
                "{:?} in, a second client took the key ({})",
                start.elapsed(),
                lock.token()
            ));
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(samples)
}

/// The guard's key stays its own for `for_` ([`stays_ours`]) and it is never told it lost it.
async fn assert_watchdog_keeps(server: &RedisServer, guard: &lockkit::LockGuard, for_: Duration) {
    let lock = guard.lock();
    let kept = stays_ours(&server.url(), lock.key(), lock.token(), for_).await;
    assert_eq!(guard.is_lost(), None, "the watchdog gave the lock up");
    let samples = kept.unwrap_or_else(|e| panic!("the watchdog did not keep the key: {e}"));
    assert!(samples > 10, "only {samples} samples in {for_:?}");
}

/// A guard over a lock with little validity left must renew before the key can expire: the key
/// stays the holder's throughout (checked every few milliseconds, directly and by a second
/// client), and the holder is never told it lost it.
#[tokio::test]
async fn watchdog_first_renewal_comes_before_a_late_guard_expires() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:late-guard", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(220)).await;
    let guard = client.guard(lock, Some(WatchdogOptions::new())).unwrap();
    assert_watchdog_keeps(&server, &guard, Duration::from_millis(700)).await;
}

/// An interval close to the TTL must still renew in time, the first renewal included: the key
/// stays the holder's throughout, as above.
#[tokio::test]
async fn watchdog_interval_close_to_ttl_still_renews_in_time() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:tight", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    // A little work before the guard starts, as real code does.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let guard = client
        .guard(
            lock,
            Some(WatchdogOptions::new().interval(Duration::from_millis(290))),
        )
        .unwrap();
    assert_watchdog_keeps(&server, &guard, Duration::from_millis(900)).await;
}

/// `extend` keeps the drift the lock was taken with.
#[tokio::test]
async fn extend_keeps_the_callers_drift() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::builder(Duration::from_secs(2))
        .drift_fixed(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut lock = client.acquire("lock:drift", &opts).await.unwrap();
    let before = lock.remaining_validity();
    assert!(before <= Duration::from_millis(1480), "{before:?}");
    let sent = Instant::now();
    assert_eq!(
        client
            .extend(&mut lock, Duration::from_secs(2))
            .await
            .unwrap(),
        ExtendOutcome::Extended
    );
    // TTL 2 s − 0.01 × 2 s − 500 ms = 1.48 s from the extend's send time, never 1.98 s.
    let validity = lock.valid_until().saturating_duration_since(sent);
    // (The library stamps its send time a moment after `sent`: allow 50 ms, far below 500 ms.)
    assert!(
        validity <= Duration::from_millis(1530),
        "validity after extend: {validity:?}"
    );
}

/// A fenced acquire refuses a TTL the drift allowance eats whole, as every other acquire does.
#[tokio::test]
async fn fenced_acquire_refuses_a_ttl_at_or_below_the_drift() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let r = client
        .try_acquire_fenced("lock:f", "lock:f:fence", Duration::from_millis(2))
        .await;
    assert!(
        matches!(r, Err(Error::InvalidOptions { field: "ttl", .. })),
        "{r:?}"
    );
}

/// One key refused in a batch (an ACL without that key) must not leave the others held.
#[tokio::test]
async fn a_batch_with_one_refused_key_leaves_nothing_held() {
    let server = RedisServer::start();
    server
        .inline(
            "ACL SETUSER locker on >lockpw resetkeys ~lock:* resetchannels -@all \
             +set +get +del +pexpire +incr +evalsha +eval +script|load +ping",
        )
        .unwrap();
    let url = format!("redis://locker:lockpw@127.0.0.1:{}", server.port());
    let client = LockClient::connect(&url).await.unwrap();
    let r = client
        .acquire_many(&["lock:b1", "other:b2", "lock:b3"], Duration::from_secs(30))
        .await;
    assert!(r.is_err(), "{r:?}");
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    for key in ["lock:b1", "lock:b3"] {
        let v: Option<String> = redis::cmd("GET").arg(key).query(&mut admin).unwrap();
        assert_eq!(v, None, "{key} is still held after the batch failed");
    }
}

/// Issue 10, defect 9: a `guard.release()` cancelled (by a timeout or a `select!`) while its
/// compare-and-delete was lost on the network used to leave nothing behind it (the guard counted
/// as released before the await), so the key stayed held for its whole TTL. The guard's drop now
/// finishes the release in the background.
#[tokio::test]
async fn cancelled_guard_release_whose_command_was_lost_still_frees_the_key() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect(&relay.url()).await.unwrap();
    let key = "lock:cancelled-release";
    let lock = client
        .try_acquire(key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let guard = client.guard(lock, None).unwrap();
    // The network loses what the client sends: the release cannot finish, and is cancelled.
    relay.swallow();
    let cancelled = tokio::time::timeout(Duration::from_millis(200), guard.release()).await;
    assert!(cancelled.is_err(), "a lost release finished: {cancelled:?}");
    // The connection drops and comes back, well inside the TTL.
    relay.restore();
    let mut direct = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let held = |c: &mut redis::Connection| redis::cmd("EXISTS").arg(key).query::<bool>(c).unwrap();
    // The guard's background release keeps trying for a few seconds; the TTL is 60 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    while held(&mut direct) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !held(&mut direct),
        "the cancelled release left the key held for its TTL"
    );
}

/// Every key in `keys` on `server` is gone within 10 s (of a 30 s TTL).
async fn all_freed(server: &RedisServer, keys: &[&str]) -> Vec<String> {
    let mut direct = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut held = |keys: &[&str]| -> Vec<String> {
        keys.iter()
            .filter(|k| {
                redis::cmd("EXISTS")
                    .arg(**k)
                    .query::<bool>(&mut direct)
                    .unwrap()
            })
            .map(|k| k.to_string())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !held(keys).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held(keys)
}

/// An acquire dropped while its command is on the wire (a timeout or `select!` around it, an
/// HTTP client gone): the command lands when the server gets to it and takes the lock for
/// nobody. It must not stay held for its whole TTL (30 s here) — for a plain, fenced, batched or
/// Redlock acquire alike.
#[tokio::test]
async fn an_acquire_dropped_mid_attempt_leaves_no_lock_behind() {
    let servers = RedisServer::start_many(3);
    let server = &servers[0];
    let client = LockClient::connect(&server.url()).await.unwrap();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = lockkit::Redlock::connect_with(
        &urls,
        lockkit::RedlockOptions::new()
            .restart_rule(false)
            .node_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(30);
    for s in &servers {
        s.pause().unwrap();
    }
    let tasks = [
        {
            let c = client.clone();
            tokio::spawn(async move { c.try_acquire("drop:plain", ttl).await.map(drop) })
        },
        {
            let c = client.clone();
            tokio::spawn(async move {
                c.try_acquire_fenced("{drop:f}:lock", "{drop:f}:fence", ttl)
                    .await
                    .map(drop)
            })
        },
        {
            let c = client.clone();
            tokio::spawn(
                async move { c.acquire_many(&["drop:m1", "drop:m2"], ttl).await.map(drop) },
            )
        },
        tokio::spawn(async move {
            let opts = LockOptions::new(ttl).unwrap();
            redlock.try_acquire("drop:redlock", &opts).await.map(drop)
        }),
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    for t in tasks {
        t.abort();
        assert!(t.await.unwrap_err().is_cancelled());
    }
    for s in &servers {
        s.resume().unwrap();
    }
    let keys = [
        "drop:plain",
        "{drop:f}:lock",
        "drop:m1",
        "drop:m2",
        "drop:redlock",
    ];
    assert_eq!(all_freed(server, &keys).await, Vec::<String>::new());
    for s in &servers[1..] {
        assert_eq!(all_freed(s, &["drop:redlock"]).await, Vec::<String>::new());
    }
}

/// A fair waiter that gives up leaves the queue: one more command. Against a server that
/// answers nothing (frozen) that command must not carry the acquire past its deadline by a
/// response timeout more than a plain acquire takes (it did: the leave was awaited in full).
#[tokio::test]
async fn a_fair_give_up_against_a_frozen_server_ends_no_later_than_a_plain_one() {
    let server = RedisServer::start();
    let timeout = Duration::from_secs(3);
    let url = server.url();
    let connect = || {
        LockClient::connect_with(
            &url,
            lockkit::ClientOptions::new()
                .wait(lockkit::WaitMode::Poll)
                .response_timeout(Some(timeout)),
        )
    };
    let (plain_client, fair_client) = (connect().await.unwrap(), connect().await.unwrap());
    let opts = |fair| {
        LockOptions::builder(Duration::from_secs(30))
            .fair(fair)
            .retry(
                lockkit::RetryOptions::new()
                    .delay(Duration::from_millis(10))
                    .deadline(Some(Duration::from_secs(1))),
            )
            .build()
            .unwrap()
    };
    server.pause().unwrap();
    let t0 = Instant::now();
    let plain_err = plain_client
        .acquire("frozen", &opts(false))
        .await
        .unwrap_err();
    let plain_took = t0.elapsed();
    let t0 = Instant::now();
    let fair_err = fair_client
        .acquire("frozen", &opts(true))
        .await
        .unwrap_err();
    let fair_took = t0.elapsed();
    server.resume().unwrap();
    assert_eq!(plain_err.kind(), lockkit::ErrorKind::Timeout, "{plain_err}");
    assert_eq!(fair_err.kind(), lockkit::ErrorKind::Timeout, "{fair_err}");
    // Both spent one response timeout on an attempt the frozen server never answered; the fair
    // give-up must not wait out a second one for its leave.
    assert!(
        fair_took < plain_took + timeout / 2,
        "fair give-up took {fair_took:?}, plain {plain_took:?} (deadline 1 s, response timeout {timeout:?})"
    );
}

/// A fair waiter whose attempt timed out (the server stalled by `DEBUG SLEEP`) goes on under a
/// new ticket, at the back of the queue. It must join the queue again at its next attempt, a
/// retry pause later, not wait out a third of its lease first while later arrivals go ahead
/// (it did: with a 9 s lease its new ticket stayed out of the queue for 3 s).
#[tokio::test]
async fn a_fair_waiter_under_a_new_ticket_queues_again_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let key = "lock:redrawn";
    let [queue, _] = lockkit::fair_queue_keys(key);
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut queued = async || -> usize {
        redis::cmd("ZCARD")
            .arg(&queue)
            .query_async(&mut conn)
            .await
            .unwrap()
    };
    let holder = LockClient::connect(&url).await.unwrap();
    let held = holder
        .try_acquire(key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let fair = |lease: Duration| {
        LockOptions::builder(Duration::from_secs(30))
            .fair(true)
            .queue_lease(lease)
            .retry(
                lockkit::RetryOptions::new()
                    .delay(Duration::from_millis(10))
                    .deadline(Some(Duration::from_secs(30))),
            )
            .build()
            .unwrap()
    };
    // The head of the queue, from another client.
    let head = LockClient::connect(&url).await.unwrap();
    let first = fair(Duration::from_secs(60));
    let head_task = tokio::spawn(async move {
        let lock = head.acquire(key, &first).await.unwrap();
        head.release(&lock).await.unwrap()
    });
    while queued().await != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The waiter, second in line, renews its place every 3 s (a third of its 9 s lease).
    let waiter = LockClient::connect_with(
        &url,
        lockkit::ClientOptions::new().response_timeout(Some(Duration::from_millis(300))),
    )
    .await
    .unwrap();
    assert_eq!(waiter.wait_mode().0, lockkit::WaitMode::Notify);
    let second = fair(Duration::from_secs(9));
    let waiter_task = tokio::spawn(async move {
        let lock = waiter.acquire(key, &second).await.unwrap();
        waiter.release(&lock).await.unwrap()
    });
    while queued().await != 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let queued_at = Instant::now();
    // The server stalls across its renewal (due 3 s after it queued): the renewal times out,
    // its outcome unknown, and the waiter draws a new ticket.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    let stall = tokio::task::spawn_blocking(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(1)
            .exec(&mut c)
            .unwrap();
    });
    stall.await.unwrap();
    // Once the server answers again (3.7 s), the stale ticket is left and the new one queued
    // at the waiter's next attempt, a pause later; not at its next renewal, 3 s later.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(queued_at.elapsed())).await;
    assert_eq!(
        queued().await,
        2,
        "the waiter is not back in the queue {:?} after it first queued",
        queued_at.elapsed()
    );
    holder.release(&held).await.unwrap();
    assert!(head_task.await.unwrap().is_released());
    assert!(waiter_task.await.unwrap().is_released());
}

/// A batch of acquires dropped while its pipeline is held up on the network (a relay delays it
/// 600 ms), over 2 connections: the background compare-and-deletes of its keys must reach the
/// server after the pipeline, never before it. They went over each token's own connection,
/// half of them not the pipeline's: those overtook it, found nothing, and their keys stayed
/// held for the whole TTL.
#[tokio::test]
async fn a_batch_dropped_mid_attempt_over_several_connections_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect_with(
        &relay.url(),
        lockkit::ClientOptions::new()
            .connections(2)
            .wait(lockkit::WaitMode::Poll),
    )
    .await
    .unwrap();
    let keys: Vec<String> = (0..16).map(|i| format!("lock:dropped-batch:{i}")).collect();
    relay.set_delay(Duration::from_millis(600));
    let batch = {
        let (client, keys) = (client.clone(), keys.clone());
        tokio::spawn(async move {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            client.acquire_many(&refs, Duration::from_secs(30)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Only the batch's pipeline is late: whatever is sent from now on goes through at once.
    relay.set_delay(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(50)).await;
    batch.abort();
    assert!(batch.await.unwrap_err().is_cancelled());
    // The pipeline has landed by now, and every clean-up after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let held: Vec<&String> = keys
        .iter()
        .filter(|k| redis::cmd("EXISTS").arg(k).query::<bool>(&mut c).unwrap())
        .collect();
    assert!(
        held.is_empty(),
        "{} of 16 keys held for their 30 s TTL: {held:?}",
        held.len()
    );
}

/// Issue 26, defect 3: a single attempt honours `min_validity` as the retry loop does. Through
/// a relay that delays each way by 100 ms, a 30 s lock with `min_validity` 29.6 s comes back
/// with about 29.5 s left (30 s − 302 ms of drift − the round trip): too little. Every
/// single-attempt API answers "not acquired" or an error, never that lock, and gives back what
/// it took at once (the key is free long before its 30 s TTL). A batch whose TTL is shorter than
/// the round trip would hand back locks already expired: it hands back none.
#[tokio::test]
async fn no_single_attempt_hands_back_a_lock_with_less_than_min_validity() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect(&relay.url()).await.unwrap();
    relay.set_delay(Duration::from_millis(100));
    let opts = LockOptions::builder(Duration::from_secs(30))
        .min_validity(Duration::from_millis(29_600))
        .build()
        .unwrap();
    // The keys are free: "busy" (`Ok(None)`) is no refusal here, it would be a wrong answer.
    let refused = |what: &str, got: lockkit::Result<Option<lockkit::Lock>>| match got {
        Ok(Some(lock)) => panic!(
            "{what} handed back a lock with {:?} left; min_validity is 29.6 s",
            lock.remaining_validity()
        ),
        Ok(None) => panic!("{what} answered busy (Ok(None)) for a free key it took"),
        Err(e) => assert_eq!(
            e.kind(),
            lockkit::ErrorKind::TooLittleValidity,
            "{what}: {e}"
        ),
    };
    refused(
        "try_acquire_with",
        client.try_acquire_with("spent:one", &opts).await,
    );
    refused("attempt", client.attempt("spent:attempt", &opts).await);
    refused(
        "try_acquire_fenced_with",
        client
            .try_acquire_fenced_with("spent:fenced", "spent:fence", &opts)
            .await,
    );
    match client
        .acquire_many(&["spent:b1", "spent:b2"], Duration::from_millis(150))
        .await
    {
        Ok(got) => panic!(
            "acquire_many answered {got:?} for free keys it took with a 150 ms TTL after a 200 ms \
             round trip"
        ),
        Err(e) => assert_eq!(e.kind(), lockkit::ErrorKind::TooLittleValidity, "{e}"),
    }
    relay.set_delay(Duration::ZERO);
    let keys = ["spent:one", "spent:attempt", "spent:fenced"];
    assert_eq!(all_freed(&server, &keys).await, Vec::<String>::new());
}

/// Issue 35, defect 1: an extend whose answer comes back after the renewed validity ended is
/// not `Extended`. The reply is held up 700 ms on its way back (a relay), the TTL is 500 ms: the
/// key expires 500 ms after the script ran, and a second client takes it at once. Like
/// Redlock's, the extend must check the validity it brings: the lock is lost (it answered
/// `Extended`, with `is_valid() == false`, while the other client held the key).
#[tokio::test]
async fn an_extend_answered_after_the_renewed_validity_ended_is_not_extended() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect(&relay.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let key = "lock:late-extend";
    let ttl = Duration::from_millis(500);
    let mut lock = client.try_acquire(key, ttl).await.unwrap().unwrap();
    relay.set_delays(Duration::ZERO, Duration::from_millis(700));
    let taker = tokio::spawn(async move {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            let got = other
                .try_acquire(key, Duration::from_secs(30))
                .await
                .unwrap();
            if let Some(lock) = got {
                return Some((lock, start.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        None
    });
    let outcome = client.extend(&mut lock, ttl).await.unwrap();
    let (_, taken_after) = taker.await.unwrap().expect("nobody took the expired key");
    assert_ne!(
        outcome,
        ExtendOutcome::Extended,
        "extend answered Extended (is_valid {}) although another client took the key {taken_after:?} in",
        lock.is_valid()
    );
    assert_eq!(outcome, ExtendOutcome::NotHeld);
}

/// Issue 35, defect 4: a release whose connection was cut right after its command reached the
/// server is sent once more; meanwhile a waiter took the key its first attempt released. The
/// answer is `Released` (the lock was ours until we released it), not `HeldByOther`, which
/// counts a lost lock and made callers roll back work that was protected (5 of 5 rounds).
#[tokio::test]
async fn a_resent_release_whose_first_attempt_ran_is_released() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect_with(&relay.url(), ClientOptions::new().wait(WaitMode::Poll))
        .await
        .unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let waiting_opts = LockOptions::builder(Duration::from_secs(30))
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(5))
                .jitter(Duration::ZERO)
                .deadline(Some(Duration::from_secs(10))),
        )
        .build()
        .unwrap();
    for round in 0..3 {
        let key = format!("lock:resent-release:{round}");
        let lock = client
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move { waiter.acquire(&key, &waiting_opts).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The first release runs and its reply is lost; the second goes over a new connection
        // through a slow network, so it runs after the waiter has taken the key.
        relay.drop_after(lock.token().as_bytes());
        relay.set_delay(Duration::from_millis(300));
        let outcome = client.release(&lock).await;
        relay.set_delay(Duration::ZERO);
        let taken = waiting
            .await
            .unwrap()
            .expect("the waiter never got the key");
        assert_eq!(
            outcome.unwrap(),
            ReleaseOutcome::Released,
            "round {round}: the release that freed the key for the waiter"
        );
        waiter.release(&taken).await.unwrap();
    }
}
