//! The library on its worst day, against real redis-servers: killed connections, a paused
//! server, a slow network, a killed holder process. Every loop is bounded in count and time.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockkit::Locker;
use lockkit::{ClientOptions, LockClient, LockOptions, LossReason, RetryOptions, WatchdogOptions};
use lockkit_test_support::{connects_while_frozen, DelayRelay, RedisServer};

fn conn(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_leave_no_ghost_locks() {
    kill_connections_mid_run(1).await;
}

/// A kill closes every connection at once: the retry of a release must not land on a sibling
/// connection that is just as dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_leave_no_ghost_locks_over_several_connections() {
    kill_connections_mid_run(4).await;
}

async fn kill_connections_mid_run(connections: usize) {
    let server = RedisServer::start();
    let client = LockClient::connect_with(
        &server.url(),
        ClientOptions::new()
            .connections(connections)
            .response_timeout(Some(Duration::from_millis(500))),
    )
    .await
    .unwrap();
    let stop_at = Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u32, 0u32);
            let mut i = 0u32;
            while Instant::now() < stop_at && i < 100_000 {
                i += 1;
                let key = format!("ghost:{t}:{}", i % 50);
                match client.try_acquire(&key, Duration::from_secs(30)).await {
                    Ok(Some(lock)) => match client.release(&lock).await {
                        Ok(_) => ok += 1,
                        Err(_) => errors += 1,
                    },
                    Ok(None) => {}
                    Err(_) => errors += 1,
                }
            }
            (ok, errors)
        }));
    }
    let mut c = conn(&server);
    let mut killed = 0i64;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        killed += redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query::<i64>(&mut c)
            .unwrap();
    }
    let mut total_ok = 0;
    for t in tasks {
        total_ok += t.await.unwrap().0;
    }
    assert!(killed >= 5, "connections were killed ({killed})");
    assert!(
        total_ok > 100,
        "work went on between kills ({total_ok} cycles)"
    );
    // Locks have a 30 s TTL: any left behind would still be there. Give the background
    // clean-ups a moment, then the keyspace must be empty.
    let deadline = Instant::now() + Duration::from_secs(5);
    while dbsize(&mut c) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dbsize(&mut c), 0, "ghost locks left after CLIENT KILL");
}

/// `client` takes a lock (so it is connected), then its connections are killed on `server`,
/// and it has had the time to see them close.
async fn used_then_killed(client: &LockClient, server: &RedisServer) {
    assert!(client
        .try_acquire("lock:warm", Duration::from_secs(30))
        .await
        .unwrap()
        .is_some());
    assert!(server
        .inline("CLIENT KILL TYPE normal")
        .unwrap()
        .starts_with(':'));
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Calls given up after a few milliseconds, against a server that accepts TCP and never
/// answers, while the client has to reconnect: one connect attempt for all of them, not a
/// reconnect storm of one each.
#[tokio::test]
async fn calls_timed_out_while_reconnecting_to_a_frozen_server_make_one_connect() {
    let server = RedisServer::start();
    let client = LockClient::connect_with(&server.url(), ClientOptions::new().connections(1))
        .await
        .unwrap();
    // The client's connection dies, and the client sees it close before the server freezes.
    used_then_killed(&client, &server).await;
    const CALLS: u64 = 50;
    let (dropped, connects) =
        connects_while_frozen(&server, CALLS, Duration::from_millis(10), |i| {
            let client = client.clone();
            async move {
                client
                    .try_acquire(&format!("lock:frozen{i}"), Duration::from_secs(30))
                    .await
            }
        })
        .await;
    assert_eq!(dropped, CALLS, "a call to a frozen server ended on its own");
    assert!(
        connects <= 3,
        "{connects} connects for {CALLS} calls timed out while reconnecting"
    );
    // The server answers again: so does the client.
    assert!(client
        .try_acquire("lock:after", Duration::from_secs(30))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn paused_server_past_ttl_is_reported_as_lost_to_watchdog_holders() {
    let server = RedisServer::start();
    // The default 2 s response timeout is far longer than the 400 ms TTL: the watchdog must
    // still give up at the validity deadline, not when the reply times out.
    let client = LockClient::connect(&server.url()).await.unwrap();
    let opts = LockOptions::new(Duration::from_millis(400)).unwrap();
    let guard = client
        .lock("lock:paused", &opts, WatchdogOptions::new())
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    let valid_until = guard.lock().valid_until();
    signal(pid, "STOP");
    // Look half a TTL after the validity ended: long before the 2 s response timeout could have
    // fired, so only a watchdog bounded by the validity has told the holder by then.
    tokio::time::sleep_until((valid_until + Duration::from_millis(200)).into()).await;
    let during = guard.is_lost();
    signal(pid, "CONT");
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the holder learns its lock is gone");
    // While the server was frozen, renewals timed out and the validity ran out: the holder was
    // told before the server came back.
    assert_eq!(during, Some(LossReason::Unreachable));
    assert_eq!(reason, LossReason::Unreachable);
}

#[tokio::test]
async fn slow_network_shrinks_validity_fires_timeouts_and_bounds_retries() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(
        server.port(),
        Duration::from_millis(40),
        Duration::from_millis(10),
    )
    .unwrap();
    let client = LockClient::connect_with(
        &relay.url(),
        ClientOptions::new().response_timeout(Some(Duration::from_millis(400))),
    )
    .await
    .unwrap();
    // Validity counts from the moment the SET was sent: one slow round trip (>= 80 ms) is gone.
    let ttl = Duration::from_millis(1000);
    let lock = client.try_acquire("lock:slow", ttl).await.unwrap().unwrap();
    let drift = LockOptions::new(ttl).unwrap().drift();
    assert!(
        lock.remaining_validity() <= ttl - drift - Duration::from_millis(80),
        "{:?}",
        lock.remaining_validity()
    );
    client.release(&lock).await.unwrap();

    // Slower than the response timeout: the call fails with a timeout, not a hang.
    relay.set_delay(Duration::from_millis(300));
    let t0 = Instant::now();
    let err = client
        .try_acquire("lock:slow2", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.is_unknown_outcome(), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3));

    // Retrying acquire stays within its deadline and attempt count even when every call fails.
    let opts = LockOptions::builder(Duration::from_secs(5))
        .retry(
            RetryOptions::new()
                .delay(Duration::from_millis(10))
                .jitter(Duration::ZERO)
                .deadline(Some(Duration::from_millis(900)))
                .max_attempts(Some(3)),
        )
        .build()
        .unwrap();
    let t0 = Instant::now();
    let mut attempts = CountAttempts::default();
    // When every attempt failed, the last attempt's error comes back (not "still busy").
    match client
        .acquire_observed("lock:slow3", &opts, &mut attempts)
        .await
    {
        Err(e) => assert_eq!(e.kind(), lockkit::ErrorKind::Timeout, "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!((1..=3).contains(&attempts.0), "{} attempts", attempts.0);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());

    // Back to normal speed: the ghost of the timed-out SET was cleaned up, the key is free.
    relay.set_delay(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut c = conn(&server);
    let left: Option<String> = redis::cmd("GET").arg("lock:slow2").query(&mut c).unwrap();
    assert_eq!(
        left, None,
        "a SET whose reply timed out was left holding the key"
    );
}

/// The child half of `killed_holder_locks_free_after_ttl_never_before`: acquires, says so, and
/// waits to be killed.
#[tokio::test]
async fn holder_child_process() {
    let Ok(url) = std::env::var("LOCKKIT_HOLDER_URL") else {
        return; // Only does something when started by the parent test.
    };
    let client = LockClient::connect(&url).await.unwrap();
    let lock = client
        .try_acquire("lock:held-by-child", Duration::from_millis(1500))
        .await
        .unwrap()
        .unwrap();
    println!("HOLDING {}", lock.token());
    tokio::time::sleep(Duration::from_secs(30)).await;
}

#[test]
fn killed_holder_locks_free_after_ttl_never_before() {
    let server = RedisServer::start();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            // The test's name in this binary: its module path without the crate's name.
            &format!(
                "{}::holder_child_process",
                module_path!().split_once("::").unwrap().1
            ),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("LOCKKIT_HOLDER_URL", server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let token = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest may print `test holder_child_process ... ` on the same line first.
        .find_map(|l| l.split_once("HOLDING ").map(|(_, t)| t.trim().to_string()))
        .expect("child acquired the lock");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = Instant::now();
    let mut c = conn(&server);
    let key = "lock:held-by-child";
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut c).unwrap();
    assert!(pttl > 0 && pttl <= 1500, "{pttl}");
    // Until the TTL runs out the key keeps the dead holder's token and nobody else gets in
    // early: checked every few milliseconds (directly, and by a `SET NX` of another token)
    // while the server still counts more than 20 ms of TTL left.
    let mut samples = 0;
    loop {
        let (held, left): (Option<String>, i64) = redis::pipe()
            .cmd("GET")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .query(&mut c)
            .unwrap();
        if left <= 20 {
            break;
        }
        assert_eq!(
            held.as_deref(),
            Some(token.as_str()),
            "{left} ms before its TTL ran out, the key no longer held the dead holder's token"
        );
        let taken: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("intruder")
            .arg("NX")
            .arg("PX")
            .arg(5000)
            .query(&mut c)
            .unwrap();
        assert_eq!(
            taken, None,
            "another holder got in {left} ms before the TTL ran out"
        );
        samples += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(samples > 20, "only {samples} samples over {pttl} ms");
    // And then it is free.
    std::thread::sleep(
        Duration::from_millis(pttl as u64 + 100).saturating_sub(killed_at.elapsed()),
    );
    let held: Option<String> = redis::cmd("GET").arg(key).query(&mut c).unwrap();
    assert_eq!(held, None);
}

/// Counts the retry loop's attempts.
#[derive(Default)]
struct CountAttempts(u32);

impl lockkit::AcquireObserver for CountAttempts {
    fn on_attempt(&mut self, _: lockkit::AttemptOutcome, _: Instant, _: Duration) {
        self.0 += 1;
    }
}

/// Issue 26, defect 5: a client made on one runtime (a `static` client first used by one
/// `#[tokio::test]`, a sync wrapper with a runtime per request) outlives it. The task that
/// drives its connection dies with that runtime: a call in flight then must end (an error),
/// not wait forever, and the next call must get a working connection on the caller's runtime.
#[test]
fn calls_outlive_the_runtime_that_made_the_connection() {
    let server = RedisServer::start();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = first
        .block_on(LockClient::connect_with(
            &server.url(),
            ClientOptions::new().response_timeout(Some(Duration::from_secs(1))),
        ))
        .unwrap();
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A call in flight on the first runtime's connection when that runtime goes.
    server.pause().unwrap();
    let in_flight = second.spawn({
        let client = client.clone();
        async move {
            client
                .try_acquire("rt:in-flight", Duration::from_secs(5))
                .await
        }
    });
    second.block_on(async { tokio::time::sleep(Duration::from_millis(100)).await });
    drop(first);
    server.resume().unwrap();
    let ended =
        second.block_on(async { tokio::time::timeout(Duration::from_secs(10), in_flight).await });
    assert!(
        ended.is_ok(),
        "a call in flight when the connection's runtime shut down still waited 10 s (response timeout 1 s)"
    );
    // The next calls connect again, on this runtime.
    let next = client.try_acquire("rt:next", Duration::from_secs(5));
    let lock = second
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), next).await })
        .expect("the next call still waited 10 s")
        .unwrap()
        .expect("rt:next is free");
    second.block_on(client.release(&lock)).unwrap();
}

/// Issue 26, defect 4: the connection goes silent without a reset (a relay stops forwarding on
/// its open connections, closes none, and serves new ones), as when the server's host dies or a
/// NAT entry is dropped. Every call on it times out; the client must replace it and succeed
/// again, not time out until the kernel gives up (about 15 minutes). Bounded: 20 s of tries.
#[tokio::test]
async fn a_silent_connection_is_replaced_and_calls_succeed_again() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let client = LockClient::connect_with(
        &relay.url(),
        ClientOptions::new().response_timeout(Some(Duration::from_millis(200))),
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(5);
    assert!(client.try_acquire("silent:0", ttl).await.unwrap().is_some());
    relay.stall();
    let start = Instant::now();
    let (mut failed, mut succeeded) = (0, false);
    for i in 1..=400 {
        match client.try_acquire(&format!("silent:{i}"), ttl).await {
            Ok(Some(_)) => {
                succeeded = true;
                break;
            }
            _ => failed += 1,
        }
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        failed > 0,
        "the stalled connection answered: the test did not stall it"
    );
    assert!(
        succeeded,
        "{failed} calls failed over 20 s on a silent connection and none succeeded: it was never replaced"
    );
}

/// Issue 26, defect 6: the client must reconnect (its connection was killed) to a server that
/// is now frozen (SIGSTOP: the kernel accepts, nobody answers). No acquire command is ever sent,
/// so the failure is not an unknown outcome: no clean-up runs (which would wait for a second
/// connect cycle), and the acquire ends within its retry deadline plus one response timeout,
/// while the server is still frozen.
#[tokio::test]
async fn an_acquire_that_never_sent_its_command_is_not_an_unknown_outcome() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    used_then_killed(&client, &server).await;
    let opts = LockOptions::builder(Duration::from_secs(30))
        .retry(RetryOptions::new().deadline(Some(Duration::from_secs(3))))
        .build()
        .unwrap();
    server.pause().unwrap();
    // Deadline 3 s, response timeout 2 s (the defaults): 8 s is far past both.
    let ended =
        tokio::time::timeout(Duration::from_secs(8), client.acquire("unsent:k", &opts)).await;
    server.resume().unwrap();
    let err = match ended {
        Ok(Ok(_)) => panic!("a frozen server granted a lock"),
        Ok(Err(e)) => e,
        Err(_) => {
            panic!("the acquire was still waiting 8 s into a 3 s deadline (response timeout 2 s)")
        }
    };
    assert!(!err.is_unknown_outcome(), "nothing was sent, yet: {err}");
    assert_eq!(
        client.stats().unknown_outcome_cleanups,
        0,
        "clean-ups ran for commands never sent"
    );
}
