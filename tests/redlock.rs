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

/// A Redlock over servers this test just started. They hold nothing from before, so the
/// delayed-restart rule (which would refuse them for a TTL after start) is off here; the restart
/// tests below turn it on.
async fn fresh(servers: &[RedisServer]) -> Redlock {
    fresh_with(servers, RedlockOptions::new()).await
}

async fn fresh_with(servers: &[RedisServer], options: RedlockOptions) -> Redlock {
    Redlock::connect_with(&urls(servers), options.restart_rule(false))
        .await
        .unwrap()
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
    let redlock = fresh(&servers).await;
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
    let redlock = fresh(&servers).await;
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
    let redlock = fresh(&servers).await;
    let lock = redlock.acquire("k-start", &opts(5000)).await.unwrap();
    assert!(lock.is_valid());
}

#[tokio::test]
async fn majority_down_fails_cleanly_with_per_node_errors() {
    let mut servers = RedisServer::start_many(3);
    let redlock = fresh(&servers).await;
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

/// The Redlock spec's restart scenario: node 3 is down, A takes the lock on nodes 1 and 2, node 1
/// restarts empty, node 3 comes back. Without the delayed-restart rule B wins on nodes 1 and 3
/// while A still holds its quorum; with it (the default) B is refused, and says why.
#[tokio::test]
async fn node_restarted_empty_does_not_vote_until_a_ttl_has_passed() {
    let mut servers = RedisServer::start_many(3);
    let ttl = 10_000;
    let a = fresh(&servers).await;
    servers[2].kill();
    let held = a.acquire("k3", &opts(ttl)).await.unwrap();
    servers[0].restart();
    servers[2].restart();

    // B with the rule (the default): nodes 1 and 3 started less than a TTL ago; refused.
    let b = Redlock::connect(&urls(&servers)).await.unwrap();
    let round = b.try_acquire("k3", &opts(ttl)).await.unwrap();
    assert!(
        round.lock.is_none(),
        "B won while A holds the lock: {round:?}"
    );
    let restarted = round
        .node_errors
        .iter()
        .filter(|e| matches!(*e.error, Error::NodeRestarted { .. }))
        .count();
    assert!(restarted >= 2, "{:?}", round.node_errors);
    assert!(
        round.node_errors[0].to_string().contains("restarted"),
        "{}",
        round.node_errors[0]
    );
    let err = b.acquire("k3", &opts(ttl)).await.unwrap_err();
    assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached, "{err}");
    assert_eq!(holder(&servers[1], "k3").as_deref(), Some(held.token()));

    // Without the rule, B would win on the two nodes that forgot or never saw A's lock.
    let unsafe_b = fresh(&servers).await;
    let round = unsafe_b.try_acquire("k3", &opts(ttl)).await.unwrap();
    assert!(
        round.lock.is_some(),
        "the scenario no longer shows the hazard: {round:?}"
    );
}

#[tokio::test]
async fn two_redlock_clients_racing_never_both_win() {
    let servers = RedisServer::start_many(5);
    let a = fresh(&servers).await;
    let b = fresh(&servers).await;
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
    let redlock = fresh_with(
        &servers,
        RedlockOptions::new().node_timeout(Duration::from_millis(100)),
    )
    .await;
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
