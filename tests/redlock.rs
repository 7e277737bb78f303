//! Redlock over 3 and 5 real redis-servers: node loss, majority loss, restarts, races.

use std::time::Duration;

use lockkit::Locker;
use lockkit::{
    Error, ExtendOutcome, LockOptions, LossReason, Redlock, RedlockOptions, RetryOptions,
    WatchdogOptions,
};
use lockkit_test_support::RedisServer;

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).retry(RetryOptions::none())
}

fn holder(server: &RedisServer, key: &str) -> Option<String> {
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut c).unwrap()
}

#[tokio::test]
async fn acquires_on_all_nodes_and_releases_everywhere() {
    let servers = RedisServer::start_many(3);
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    assert_eq!(redlock.quorum(), 2);
    let lock = redlock.acquire("cron:tick:1", &opts(5000)).await.unwrap();
    for s in &servers {
        assert_eq!(holder(s, "cron:tick:1").as_deref(), Some(lock.token()));
    }
    // Validity = TTL - elapsed - drift (0.01 * 5000 + 2 = 52 ms).
    assert!(lock.remaining_validity() <= Duration::from_millis(5000 - 52));
    let out = redlock.release_detailed(&lock).await.unwrap();
    assert_eq!(out.released, 3);
    assert!(out.node_errors.is_empty());
    for s in &servers {
        assert_eq!(holder(s, "cron:tick:1"), None);
    }
}

#[tokio::test]
async fn one_node_down_still_reaches_quorum() {
    let mut servers = RedisServer::start_many(3);
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    servers[1].kill();
    let attempt = redlock.try_acquire("k1", &opts(5000)).await.unwrap();
    assert!(attempt.lock.is_some(), "{attempt:?}");
    assert_eq!(attempt.acquired, 2);
    assert_eq!(attempt.node_errors.len(), 1);
    assert!(attempt.node_errors[0]
        .node
        .contains(&servers[1].port().to_string()));
    let out = redlock
        .release_detailed(attempt.lock.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(out.released, 2);
    assert_eq!(out.node_errors.len(), 1);
    assert!(
        matches!(
            out.node_errors[0].kind(),
            lockkit::ErrorKind::ConnectionRefused
                | lockkit::ErrorKind::Io
                | lockkit::ErrorKind::Timeout
        ),
        "{:?}",
        out.node_errors[0]
    );
}

#[tokio::test]
async fn node_down_at_startup_does_not_fail_connect() {
    let mut servers = RedisServer::start_many(3);
    servers[2].kill();
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    let lock = redlock.acquire("k-start", &opts(5000)).await.unwrap();
    assert!(lock.is_valid());
}

#[tokio::test]
async fn majority_down_fails_cleanly_with_per_node_errors() {
    let mut servers = RedisServer::start_many(3);
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    servers[0].kill();
    servers[2].kill();
    let retry = RetryOptions::new()
        .delay(Duration::from_millis(10))
        .jitter(Duration::from_millis(10))
        .max_attempts(Some(3));
    let err = redlock
        .acquire("k2", &opts(5000).retry(retry))
        .await
        .unwrap_err();
    match &err {
        Error::QuorumNotReached {
            acquired,
            needed,
            node_errors,
            ..
        } => {
            assert_eq!((*acquired, *needed, node_errors.len()), (1, 2, 2));
            assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached);
            let text = err.to_string();
            assert!(text.contains(&servers[0].port().to_string()), "{text}");
            assert!(text.contains(&servers[2].port().to_string()), "{text}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    // The surviving node's partial acquisition was rolled back.
    assert_eq!(holder(&servers[1], "k2"), None);
}

#[tokio::test]
async fn restarted_node_gives_no_stale_success() {
    let mut servers = RedisServer::start_many(3);
    let a = Redlock::connect(&urls(&servers)).await.unwrap();
    let b = Redlock::connect(&urls(&servers)).await.unwrap();
    let held = a.acquire("k3", &opts(10_000)).await.unwrap();
    // Node 0 restarts empty (no persistence): it would grant k3 again, but one node is no quorum.
    servers[0].restart();
    let mut granted = None;
    for _ in 0..5 {
        let attempt = b.try_acquire("k3", &opts(10_000)).await.unwrap();
        assert!(
            attempt.lock.is_none(),
            "b won while a holds a quorum: {attempt:?}"
        );
        granted = Some(attempt.acquired);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(granted.unwrap() <= 1);
    // b's partial grant on the restarted node was released, so a still holds its quorum.
    assert_eq!(holder(&servers[0], "k3"), None);
    assert_eq!(holder(&servers[1], "k3").as_deref(), Some(held.token()));
}

#[tokio::test]
async fn two_redlock_clients_racing_never_both_win() {
    let servers = RedisServer::start_many(5);
    let a = Redlock::connect(&urls(&servers)).await.unwrap();
    let b = Redlock::connect(&urls(&servers)).await.unwrap();
    assert_eq!(a.quorum(), 3);
    let mut wins = 0;
    for round in 0..100 {
        let key = format!("race:{round}");
        let o = opts(5000);
        let (ra, rb) = tokio::join!(a.try_acquire(&key, &o), b.try_acquire(&key, &o));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(
            !(ra.lock.is_some() && rb.lock.is_some()),
            "round {round}: both clients hold the lock"
        );
        wins += usize::from(ra.lock.is_some()) + usize::from(rb.lock.is_some());
    }
    // Split votes (neither wins) are allowed; most rounds must still have a winner.
    assert!(wins > 50, "only {wins} of 100 rounds had a winner");
}

#[tokio::test]
async fn extend_needs_quorum_and_watchdog_renews_redlock() {
    let mut servers = RedisServer::start_many(3);
    let redlock = Redlock::connect_with(
        &urls(&servers),
        RedlockOptions::new().node_timeout(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let mut lock = redlock.acquire("k4", &opts(2000)).await.unwrap();
    assert_eq!(
        redlock
            .extend(&mut lock, Duration::from_secs(3))
            .await
            .unwrap(),
        ExtendOutcome::Extended
    );
    // Delete the key on two nodes: a quorum no longer holds it, so extend must fail.
    for s in &servers[..2] {
        let mut c = redis::Client::open(s.url())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("DEL").arg("k4").exec(&mut c).unwrap();
    }
    assert_eq!(
        redlock
            .extend(&mut lock, Duration::from_secs(3))
            .await
            .unwrap(),
        ExtendOutcome::NotHeld
    );

    let guard = redlock
        .lock("k5", &opts(300), WatchdogOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(guard.is_lost(), None);
    assert!(servers.iter().all(|s| holder(s, "k5").is_some()));
    // Lose two nodes: renewals can no longer reach a quorum and the holder is told.
    servers[0].kill();
    servers[1].kill();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("loss reported");
    assert_eq!(reason, LossReason::Unreachable);
}
