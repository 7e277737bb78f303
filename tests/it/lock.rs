//! The lock client against a real redis-server (spawned by tests/support on a free port).

use std::time::{Duration, Instant};

use lockkit::Locker;
use lockkit::{
    ClientOptions, Error, ExtendOutcome, LockClient, LockOptions, LossReason, ReleaseOutcome,
    RetryOptions, WatchdogOptions,
};
use lockkit_test_support::{DelayRelay, RedisServer};

fn inspect(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn get(conn: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

/// `calls=N` of one command in INFO commandstats (0 if never called).
fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map(|v| v.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

#[tokio::test]
async fn try_acquire_sets_token_with_ttl_and_second_attempt_gets_none() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:a", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("free key is taken");
    let mut c = inspect(&server);
    assert_eq!(get(&mut c, "lock:a").as_deref(), Some(lock.token()));
    let ttl = pttl(&mut c, "lock:a");
    assert!(ttl > 4000 && ttl <= 5000, "PTTL {ttl}");
    assert!(lock.remaining_validity() <= Duration::from_millis(5000 - 52));
    assert!(client
        .try_acquire("lock:a", Duration::from_secs(5))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(get(&mut c, "lock:a"), None);
}

#[tokio::test]
async fn two_clients_racing_exactly_one_wins_every_round() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    for round in 0..200 {
        let key = format!("race:{round}");
        let (ra, rb) = tokio::join!(
            a.try_acquire(&key, Duration::from_secs(5)),
            b.try_acquire(&key, Duration::from_secs(5))
        );
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(
            ra.is_some() ^ rb.is_some(),
            "round {round}: both or neither won"
        );
    }
}

/// The same race where it can go wrong: each client reaches the server through its own relay
/// with up to 12 ms of jitter each way (response timeout 20 ms: some replies are lost, their
/// acquires cleaned up), and every tenth round one client's connection is cut right after its
/// `SET` reached the server. Never both win; a winner's token is the one in the key; a round
/// nobody won leaves nothing held (its key is free within seconds, far inside the 30 s TTL).
#[tokio::test]
async fn two_clients_racing_through_a_faulty_network_never_both_win() {
    let server = RedisServer::start();
    let jitter = Duration::from_millis(12);
    let relays = [
        DelayRelay::start(server.port(), Duration::ZERO, jitter).unwrap(),
        DelayRelay::start(server.port(), Duration::ZERO, jitter).unwrap(),
    ];
    let options = ClientOptions::new().response_timeout(Some(Duration::from_millis(20)));
    let mut clients = Vec::new();
    for r in &relays {
        // The handshake itself may meet a late reply: a few tries.
        let mut tries = 0;
        let client = loop {
            match LockClient::connect_with(&r.url(), options.clone()).await {
                Ok(c) => break c,
                Err(_) if tries < 20 => tries += 1,
                Err(e) => panic!("connecting through the relay: {e}"),
            }
        };
        clients.push(client);
    }
    let mut c = inspect(&server);
    let (mut won, mut failed, mut unwon) = (0, 0, Vec::new());
    for round in 0..60 {
        let key = format!("race:faulty:{round}");
        if round % 10 == 5 {
            relays[round % 2].drop_after(key.as_bytes());
        }
        let ttl = Duration::from_secs(30);
        let (ra, rb) = tokio::join!(
            clients[0].try_acquire(&key, ttl),
            clients[1].try_acquire(&key, ttl)
        );
        failed += usize::from(ra.is_err()) + usize::from(rb.is_err());
        let (ra, rb) = (ra.ok().flatten(), rb.ok().flatten());
        assert!(
            !(ra.is_some() && rb.is_some()),
            "round {round}: both clients hold the lock"
        );
        match ra.or(rb) {
            Some(lock) => {
                won += 1;
                assert_eq!(
                    get(&mut c, &key).as_deref(),
                    Some(lock.token()),
                    "round {round}: the winner's token is not in the key"
                );
            }
            None => unwon.push(key),
        }
    }
    assert!(
        failed > 0,
        "no fault hit a call: the test raced on a healthy network"
    );
    assert!(won > 0, "no round was won");
    let deadline = Instant::now() + Duration::from_secs(10);
    while unwon.iter().any(|k| get(&mut c, k).is_some()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held: Vec<_> = unwon.iter().filter(|k| get(&mut c, k).is_some()).collect();
    assert!(
        held.is_empty(),
        "rounds nobody won left keys held: {held:?}"
    );
}

#[tokio::test]
async fn release_with_foreign_token_is_noop() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let old = client
        .try_acquire("lock:f", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    client.release(&old).await.unwrap();
    let current = client
        .try_acquire("lock:f", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(old.token(), current.token());
    // `old` now carries a token that is not in the key: its release must not delete it.
    assert_eq!(
        client.release(&old).await.unwrap(),
        ReleaseOutcome::HeldByOther
    );
    let mut c = inspect(&server);
    assert_eq!(get(&mut c, "lock:f").as_deref(), Some(current.token()));
}

#[tokio::test]
async fn expired_lock_retaken_by_other_is_not_released_or_extended_by_first() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut first = client
        .try_acquire("lock:e", Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!first.is_valid());
    let second = client
        .try_acquire("lock:e", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("expired lock can be taken");
    assert_eq!(
        client.release(&first).await.unwrap(),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(
        client
            .extend(&mut first, Duration::from_secs(60))
            .await
            .unwrap(),
        ExtendOutcome::HeldByOther
    );
    let mut c = inspect(&server);
    assert_eq!(get(&mut c, "lock:e").as_deref(), Some(second.token()));
    assert!(
        pttl(&mut c, "lock:e") <= 5000,
        "first holder's extend must not touch the TTL"
    );
}

#[tokio::test]
async fn release_after_expiry_reports_not_held() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut lock = client
        .try_acquire("lock:x", Duration::from_millis(50))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        client
            .extend(&mut lock, Duration::from_secs(1))
            .await
            .unwrap(),
        ExtendOutcome::NotHeld
    );
}

#[tokio::test]
async fn extend_resets_ttl_and_validity() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    // A non-default drift, so a validity recomputed with the default one shows.
    let opts = LockOptions::builder(Duration::from_secs(1))
        .drift_fixed(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut lock = client
        .try_acquire_with("lock:ext", &opts)
        .await
        .unwrap()
        .unwrap();
    let before = lock.valid_until();
    let sent = Instant::now();
    assert_eq!(
        client
            .extend(&mut lock, Duration::from_secs(30))
            .await
            .unwrap(),
        ExtendOutcome::Extended
    );
    assert!(lock.valid_until() > before + Duration::from_secs(20));
    // 30 s − 1% − 300 ms from the extend's send time; the default drift would give 29.698 s.
    let validity = lock.valid_until().saturating_duration_since(sent);
    assert!(validity <= Duration::from_millis(29_450), "{validity:?}");
    assert_eq!(lock.options().drift(), Duration::from_millis(600));
    let mut c = inspect(&server);
    assert!(pttl(&mut c, "lock:ext") > 29_000);
}

#[tokio::test]
async fn noscript_after_script_flush_recovers_in_one_extra_round_trip() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:n", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let mut c = inspect(&server);
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut c).unwrap();
    let evals_before = command_calls(&mut c, "eval");
    let evalsha_before = command_calls(&mut c, "evalsha");
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(command_calls(&mut c, "evalsha") - evalsha_before, 1);
    assert_eq!(command_calls(&mut c, "eval") - evals_before, 1);
    assert_eq!(client.stats().noscript_recoveries, 1);
    // The EVAL cached the script again: the next call is a plain EVALSHA.
    let lock = client
        .try_acquire("lock:n", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(command_calls(&mut c, "eval") - evals_before, 1);
    assert_eq!(client.stats().noscript_recoveries, 1);
}

#[tokio::test]
async fn server_restart_reconnects_and_recovers_scripts() {
    let mut server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut lock = client
        .try_acquire("lock:r", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    server.restart();
    // The first call after the restart may meet the dead socket; the manager reconnects.
    let mut outcome = None;
    for _ in 0..20 {
        match client.extend(&mut lock, Duration::from_secs(5)).await {
            Ok(o) => {
                outcome = Some(o);
                break;
            }
            Err(e) => {
                assert!(e.is_retryable(), "unexpected non-retryable error: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // The restarted server has an empty keyspace and script cache.
    assert_eq!(outcome, Some(ExtendOutcome::NotHeld));
    assert!(client.stats().noscript_recoveries >= 1);
    let lock = client
        .try_acquire("lock:r", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
}

#[tokio::test]
async fn watchdog_keeps_lock_alive_for_several_ttls() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_millis(300)).unwrap();
    let guard = client
        .lock("lock:w", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(guard.is_lost(), None);
    let mut c = inspect(&server);
    assert_eq!(get(&mut c, "lock:w").as_deref(), Some(guard.lock().token()));
    assert!(guard.lock().is_valid());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(get(&mut c, "lock:w"), None);
}

#[tokio::test]
async fn watchdog_reports_loss_when_key_deleted_behind_its_back() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_millis(300)).unwrap();
    let guard = client
        .lock("lock:d", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    let mut c = inspect(&server);
    redis::cmd("DEL").arg("lock:d").exec(&mut c).unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("loss reported within one renewal interval");
    assert_eq!(reason, LossReason::Expired);
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    // Someone else's token in the key is reported as stolen.
    let guard = client
        .lock("lock:s", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    redis::cmd("SET")
        .arg("lock:s")
        .arg("intruder")
        .exec(&mut c)
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert_eq!(reason, LossReason::Stolen);
}

#[tokio::test]
async fn watchdog_max_hold_bounds_renewal() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_millis(300)).unwrap();
    let guard = client
        .lock(
            "lock:m",
            &opts,
            WatchdogOptions::new().max_hold(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .unwrap();
    assert_eq!(reason, LossReason::MaxHoldReached);
    let held = t0.elapsed();
    assert!(held >= Duration::from_millis(400), "{held:?}");
    let mut c = inspect(&server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        get(&mut c, "lock:m"),
        None,
        "key expired at the max-hold bound"
    );
}

#[tokio::test]
async fn dropped_guard_releases_in_background() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_secs(30)).unwrap();
    let guard = client
        .lock("lock:drop", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    drop(guard);
    let mut c = inspect(&server);
    let mut freed = false;
    for _ in 0..50 {
        if get(&mut c, "lock:drop").is_none() {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "a dropped guard inside a runtime releases its lock");
}

#[tokio::test]
async fn acquire_many_takes_n_keys_in_one_round_trip() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("many:{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut c = inspect(&server);
    // Pre-take two keys so the result shows which were busy.
    redis::cmd("SET")
        .arg("many:3")
        .arg("x")
        .exec(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg("many:97")
        .arg("x")
        .exec(&mut c)
        .unwrap();
    let reads_before = info_field(&mut c, "stats", "total_reads_processed");
    let got = client
        .acquire_many(&refs, Duration::from_secs(5))
        .await
        .unwrap();
    let reads = info_field(&mut c, "stats", "total_reads_processed") - reads_before;
    assert_eq!(got.len(), 100);
    assert!(got[3].is_none() && got[97].is_none());
    assert_eq!(got.iter().filter(|l| l.is_some()).count(), 98);
    // One read for the whole pipeline, one for the INFO that measures it (socket chunking may
    // split a large pipeline in two). 100 sequential acquires would cost at least 100.
    assert!(reads <= 3, "acquire_many took {reads} server reads");
    let taken: Vec<lockkit::Lock> = got.into_iter().flatten().collect();
    let outcomes = client.release_many(&taken).await.unwrap();
    assert!(outcomes.iter().all(|o| o.is_released()));
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 2);

    // The same 100 acquires one by one, for contrast: each is its own round trip.
    let reads_before = info_field(&mut c, "stats", "total_reads_processed");
    for k in &refs {
        let _ = client.try_acquire(k, Duration::from_secs(5)).await.unwrap();
    }
    let reads = info_field(&mut c, "stats", "total_reads_processed") - reads_before;
    assert!(reads >= 100, "sequential acquires took {reads} reads");
}

#[tokio::test]
async fn acquire_all_releases_what_it_took_when_one_key_is_busy() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut c = inspect(&server);
    redis::cmd("SET")
        .arg("all:2")
        .arg("x")
        .exec(&mut c)
        .unwrap();
    let got = client
        .acquire_all(&["all:1", "all:2", "all:3"], Duration::from_secs(5))
        .await
        .unwrap();
    assert!(got.is_none());
    assert_eq!(get(&mut c, "all:1"), None);
    assert_eq!(get(&mut c, "all:3"), None);
    assert_eq!(get(&mut c, "all:2").as_deref(), Some("x"));
    redis::cmd("DEL").arg("all:2").exec(&mut c).unwrap();
    let got = client
        .acquire_all(&["all:1", "all:2", "all:3"], Duration::from_secs(5))
        .await
        .unwrap()
        .expect("all free");
    assert_eq!(got.len(), 3);
}

#[tokio::test]
async fn acquire_retries_until_holder_releases() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let held = client
        .try_acquire("lock:q", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let releaser = client.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        releaser.release(&held).await.unwrap();
    });
    let retry = RetryOptions::new()
        .delay(Duration::from_millis(20))
        .jitter(Duration::from_millis(10))
        .deadline(Some(Duration::from_secs(3)));
    let opts = LockOptions::builder(Duration::from_secs(2))
        .retry(retry)
        .build()
        .unwrap();
    let t0 = Instant::now();
    let lock = client.acquire("lock:q", &opts).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(190));
    // Validity counts from the successful attempt, minus the drift allowance.
    assert!(lock.remaining_validity() <= Duration::from_millis(2000 - 22));
    assert!(lock.remaining_validity() > Duration::from_millis(1500));
}

#[tokio::test]
async fn acquire_gives_up_at_deadline_with_attempt_count() {
    let server = RedisServer::start();
    // Polling: an attempt every 20 ms until the deadline.
    let client = LockClient::connect_with(
        &server.url(),
        lockkit::ClientOptions::new().wait(lockkit::WaitMode::Poll),
    )
    .await
    .unwrap();
    let _held = client
        .try_acquire("lock:busy", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let retry = RetryOptions::new()
        .delay(Duration::from_millis(20))
        .jitter(Duration::ZERO)
        .deadline(Some(Duration::from_millis(200)));
    let opts = LockOptions::builder(Duration::from_secs(1))
        .retry(retry)
        .build()
        .unwrap();
    match client.acquire("lock:busy", &opts).await {
        Err(Error::AcquireTimeout {
            attempts, elapsed, ..
        }) => {
            assert!(attempts >= 3, "{attempts}");
            assert!(elapsed <= Duration::from_millis(400), "{elapsed:?}");
        }
        other => panic!("expected AcquireTimeout, got {other:?}"),
    }
    // Woken by releases (none comes): one attempt, a wait to the deadline, one last attempt.
    let notified = LockClient::connect(&server.url()).await.unwrap();
    match notified.acquire("lock:busy", &opts).await {
        Err(Error::AcquireTimeout {
            attempts, elapsed, ..
        }) => {
            assert_eq!(attempts, 2);
            assert!(elapsed <= Duration::from_millis(400), "{elapsed:?}");
        }
        other => panic!("expected AcquireTimeout, got {other:?}"),
    }
    let opts = opts
        .to_builder()
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    assert!(matches!(
        client.acquire("lock:busy", &opts).await,
        Err(Error::AcquireTimeout { attempts: 1, .. })
    ));
}

#[tokio::test]
async fn bad_options_are_rejected_naming_the_field() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let field = |r: lockkit::Result<_>| match r {
        Err(Error::InvalidOptions { field, .. }) => field,
        other => panic!("expected InvalidOptions, got {:?}", other.map(|_: ()| ())),
    };
    let zero = client.try_acquire("k", Duration::ZERO).await.map(|_| ());
    assert_eq!(field(zero), "ttl");
    // 2 ms: the drift allowance (0.01 x TTL + 2 ms) leaves no validity at all.
    let tiny = client
        .try_acquire("k", Duration::from_millis(2))
        .await
        .map(|_| ());
    assert_eq!(field(tiny), "ttl");
    let huge = client
        .try_acquire("k", Duration::from_secs(400 * 24 * 3600))
        .await
        .map(|_| ());
    assert_eq!(field(huge), "ttl");
    // Lock options are checked once, when built, not by every acquire.
    let opts = LockOptions::builder(Duration::from_secs(1))
        .retry(
            RetryOptions::new()
                .delay(Duration::from_secs(5))
                .deadline(Some(Duration::from_secs(1))),
        )
        .build();
    assert_eq!(field(opts.map(|_| ())), "retry.delay");
    let wd = WatchdogOptions::new().interval(Duration::from_secs(2));
    let opts = LockOptions::new(Duration::from_secs(1)).unwrap();
    assert_eq!(
        field(client.lock("k", &opts, wd).await.map(|_| ())),
        "watchdog.interval"
    );
    let bad = LockClient::connect_with(&server.url(), ClientOptions::new().connections(0)).await;
    assert_eq!(field(bad.map(|_| ())), "connections");
    assert!(matches!(
        client.try_acquire("", Duration::from_secs(1)).await,
        Err(Error::InvalidKey { .. })
    ));
}

#[tokio::test]
async fn redis_error_is_an_error_not_false() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut c = inspect(&server);
    let lock = client
        .try_acquire("lock:other", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let mut wrong = lock.clone();
    // Replace the lock's key with a hash: GET in the scripts now raises WRONGTYPE.
    client.release(&lock).await.unwrap();
    redis::cmd("DEL").arg("lock:other").exec(&mut c).unwrap();
    redis::cmd("HSET")
        .arg("lock:other")
        .arg("f")
        .arg("v")
        .exec(&mut c)
        .unwrap();
    let err = client.release(&wrong).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = client
        .extend(&mut wrong, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)));
}

#[tokio::test]
async fn keys_with_newlines_nul_and_unicode_round_trip_exactly() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let key = "lock:\r\n*3\r\n$3\r\nDEL\0 🔒 \"quoted\" {tag}";
    let lock = client
        .try_acquire(key, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let mut c = inspect(&server);
    assert_eq!(get(&mut c, key).as_deref(), Some(lock.token()));
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
}

/// Issue 26, item 8: the loss signal of a guard without a watchdog. Nothing renews the lock, so
/// it is lost when its validity ends, and the holder must be told then (the docs promise that
/// the guard tells the holder the moment the lock is lost); it used to never resolve.
#[tokio::test]
async fn a_guard_without_watchdog_signals_the_loss_when_validity_ends() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:unwatched", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    let valid_until = lock.valid_until();
    let guard = client.guard(lock, None).unwrap();
    let mut signal = guard.loss_signal();
    assert_eq!(signal.is_lost(), None, "lost while still valid");
    let reason = tokio::time::timeout(Duration::from_secs(5), signal.lost())
        .await
        .expect("no loss signalled 5 s into a 300 ms lock without a watchdog");
    assert_eq!(reason, LossReason::Expired);
    assert!(
        std::time::Instant::now() >= valid_until,
        "signalled before the validity ended"
    );
    // A guard released while valid never signals a loss.
    let lock = client
        .try_acquire("lock:unwatched2", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    let guard2 = client.guard(lock, None).unwrap();
    let signal2 = guard2.loss_signal();
    assert!(guard2.release().await.unwrap().is_released());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(signal2.is_lost(), None);
    drop(guard);
}
