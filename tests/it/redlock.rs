//! Redlock over 3 and 5 real redis-servers: node loss, majority loss, restarts, races.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockkit::Locker;
use lockkit::{
    ClientOptions, Error, ExtendOutcome, LockOptions, LossReason, Redlock, RedlockOptions,
    RetryOptions, WatchdogOptions,
};
use lockkit_test_support::{DelayRelay, RedisServer};

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
    LockOptions::builder(Duration::from_millis(ttl_ms))
        .retry(RetryOptions::none())
        .build()
        .unwrap()
}

fn holder(server: &RedisServer, key: &str) -> Option<String> {
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut c).unwrap()
}

/// Background clean-ups (stragglers of a decided round) finish within a few seconds.
async fn assert_eventually_free(server: &RedisServer, key: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while holder(server, key).is_some() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(holder(server, key), None, "{key} still held");
}

#[tokio::test]
async fn acquires_on_all_nodes_and_releases_everywhere() {
    let servers = RedisServer::start_many(3);
    let redlock = fresh(&servers).await;
    assert_eq!(redlock.quorum(), 2);
    let lock = redlock.acquire("cron:tick:1", &opts(5000)).await.unwrap();
    // The round ends at quorum; the third grant may still be on its way.
    let holding = servers
        .iter()
        .filter(|s| holder(s, "cron:tick:1").as_deref() == Some(lock.token()))
        .count();
    assert!(holding >= 2, "only {holding} nodes hold the token");
    // Validity = TTL - elapsed - drift (0.01 * 5000 + 2 = 52 ms).
    assert!(lock.remaining_validity() <= Duration::from_millis(5000 - 52));
    let out = redlock.release_detailed(&lock).await.unwrap();
    assert!(out.released >= 2, "{out:?}");
    assert_eq!(out.released + out.pending, 3, "{out:?}");
    assert!(out.node_errors.is_empty());
    // Stragglers finish in the background; nothing is left behind.
    for s in &servers {
        assert_eventually_free(s, "cron:tick:1").await;
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
    // The dead node's refusal may come before or after the quorum: listed or not awaited.
    assert_eq!(
        attempt.node_errors.len() + attempt.pending,
        1,
        "{attempt:?}"
    );
    for e in &attempt.node_errors {
        assert!(e.node.contains(&servers[1].port().to_string()), "{e}");
    }
    let out = redlock
        .release_detailed(attempt.lock.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(out.released, 2);
    assert_eq!(out.node_errors.len() + out.pending, 1, "{out:?}");
    for e in &out.node_errors {
        assert!(
            matches!(
                e.kind(),
                lockkit::ErrorKind::ConnectionRefused
                    | lockkit::ErrorKind::Io
                    | lockkit::ErrorKind::Timeout
            ),
            "{e:?}"
        );
    }
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
    let opts = LockOptions::builder(Duration::from_millis(5000))
        .retry(retry)
        .build()
        .unwrap();
    let err = redlock.acquire("k2", &opts).await.unwrap_err();
    match &err {
        Error::QuorumNotReached {
            acquired,
            needed,
            node_errors,
            ..
        } => {
            // Two refusals settle the round; the survivor's grant may come after that.
            assert!(*acquired <= 1, "{acquired}");
            assert_eq!((*needed, node_errors.len()), (2, 2));
            assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached);
            let text = err.to_string();
            assert!(text.contains(&servers[0].port().to_string()), "{text}");
            assert!(text.contains(&servers[2].port().to_string()), "{text}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    // The surviving node's partial acquisition was rolled back (a late grant in the background).
    assert_eventually_free(&servers[1], "k2").await;
}

/// At least two nodes refused the round as restarted (or were still pending: the round is
/// decided at quorum, a restarted node's refusal may come after it).
fn assert_refused_by_two_restarted_nodes(round: &lockkit::RedlockAttempt) {
    let restarted = round
        .node_errors
        .iter()
        .filter(|e| matches!(*e.error, Error::NodeRestarted { .. }))
        .count();
    assert!(restarted + round.pending >= 2, "{round:?}");
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
    assert_refused_by_two_restarted_nodes(&round);
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

/// The same race on a multi-threaded runtime, each client's rounds in tasks of their own: the
/// connections' tasks, which hand each reply to its vote (`src/redlock/direct.rs`), and the
/// votes run on different threads. Never both win, and the winner releases on a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redlock_clients_racing_on_two_threads_never_both_win() {
    let servers = RedisServer::start_many(5);
    let (a, b) = (fresh(&servers).await, fresh(&servers).await);
    let mut wins = 0;
    for round in 0..100 {
        let key = format!("race-threads:{round}");
        let run = |r: Redlock, key: String| {
            tokio::spawn(async move { r.try_acquire(&key, &opts(5000)).await.unwrap() })
        };
        let (ha, hb) = (run(a.clone(), key.clone()), run(b.clone(), key));
        let (ra, rb) = (ha.await.unwrap(), hb.await.unwrap());
        assert!(
            !(ra.lock.is_some() && rb.lock.is_some()),
            "round {round}: both clients hold the lock"
        );
        // The winner releases from a task of its own too: on a quorum of the nodes.
        for (r, attempt) in [(&a, ra), (&b, rb)] {
            if let Some(lock) = attempt.lock {
                wins += 1;
                let r = r.clone();
                let released = tokio::spawn(async move { r.release_detailed(&lock).await })
                    .await
                    .unwrap()
                    .unwrap();
                assert!(released.released >= 3, "round {round}: {released:?}");
            }
        }
    }
    assert!(wins > 50, "only {wins} of 100 rounds had a winner");
}

/// The same race where votes split and go astray: each client reaches each node through its own
/// relay, slower than the other client's on every other node, with jitter (node timeout 20 ms:
/// some votes time out and are undone), and one node is killed halfway. Never both win, and a
/// winner's token is on a quorum of the nodes.
#[tokio::test]
async fn two_redlock_clients_racing_through_a_faulty_network_never_both_win() {
    let mut servers = RedisServer::start_many(5);
    // Each client has its own relay to each node, 6 ms slower than the other's on every other
    // node, plus up to 8 ms of jitter: the votes split between the clients.
    let relays = |late: usize| -> Vec<DelayRelay> {
        servers
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let delay = Duration::from_millis(if k % 2 == late { 6 } else { 0 });
                DelayRelay::start(s.port(), delay, Duration::from_millis(8)).unwrap()
            })
            .collect()
    };
    let (relays_a, relays_b) = (relays(0), relays(1));
    let options = RedlockOptions::new()
        .restart_rule(false)
        .node_timeout(Duration::from_millis(20));
    let urls_of = |r: &[DelayRelay]| r.iter().map(DelayRelay::url).collect::<Vec<_>>();
    let a = Redlock::connect_with(&urls_of(&relays_a), options.clone())
        .await
        .unwrap();
    let b = Redlock::connect_with(&urls_of(&relays_b), options)
        .await
        .unwrap();
    let (mut wins, mut node_errors) = (0, 0);
    for round in 0..60 {
        if round == 30 {
            servers[4].kill();
        }
        let key = format!("race:faulty:{round}");
        let o = opts(30_000);
        let (ra, rb) = tokio::join!(a.try_acquire(&key, &o), b.try_acquire(&key, &o));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        node_errors += ra.node_errors.len() + rb.node_errors.len();
        assert!(
            !(ra.lock.is_some() && rb.lock.is_some()),
            "round {round}: both clients hold the lock"
        );
        if let Some(lock) = ra.lock.as_ref().or(rb.lock.as_ref()) {
            wins += 1;
            let alive = if round < 30 { 5 } else { 4 };
            let holding = || {
                servers[..alive]
                    .iter()
                    .filter(|s| holder(s, &key).as_deref() == Some(lock.token()))
                    .count()
            };
            // A grant still on its way counts once it lands: look again for a moment.
            let mut held = holding();
            for _ in 0..50 {
                if held >= 3 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                held = holding();
            }
            let holding = held;
            assert!(
                holding >= 3,
                "round {round}: the winner holds {holding} nodes"
            );
        }
    }
    assert!(
        node_errors > 0,
        "no fault hit a vote: the test raced on a healthy network"
    );
    assert!(wins > 0, "no round was won");
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

/// SIGSTOPs a server and SIGCONTs it on drop, so a failing assertion never leaves it frozen.
struct Frozen(u32);

impl Frozen {
    fn stop(server: &RedisServer) -> Frozen {
        let pid = server.pid().expect("server running");
        signal(pid, "STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(ok.success(), "kill -{sig} {pid}");
}

#[tokio::test]
async fn quorum_round_ends_without_waiting_for_a_frozen_node() {
    let servers = RedisServer::start_many(3);
    // A node timeout far longer than any healthy round: waiting for the frozen node would show.
    let node_timeout = Duration::from_secs(20);
    let redlock = fresh_with(&servers, RedlockOptions::new().node_timeout(node_timeout)).await;
    let frozen = Frozen::stop(&servers[2]);
    let started = std::time::Instant::now();

    let attempt = redlock
        .try_acquire("frozen:1", &opts(30_000))
        .await
        .unwrap();
    let lock = attempt
        .lock
        .expect("two healthy nodes of three are a quorum");
    assert_eq!(attempt.acquired, 2);
    // The frozen node's vote was not awaited, not counted as an error.
    assert_eq!(attempt.pending, 1, "{:?}", attempt.node_errors);
    assert!(attempt.node_errors.is_empty());

    let held = redlock
        .extend(&mut lock.clone(), Duration::from_secs(30))
        .await;
    assert_eq!(held.unwrap(), ExtendOutcome::Extended);

    let out = redlock.release_detailed(&lock).await.unwrap();
    assert_eq!((out.released, out.pending), (2, 1), "{out:?}");
    assert!(
        started.elapsed() < node_timeout,
        "a round waited for the frozen node"
    );

    // A lost round (a quorum refuses) is decided without the frozen node too.
    let other = fresh(&servers[..2]).await;
    let held = other.acquire("frozen:2", &opts(30_000)).await.unwrap();
    let lost = redlock
        .try_acquire("frozen:2", &opts(30_000))
        .await
        .unwrap();
    assert!(lost.lock.is_none());
    assert_eq!((lost.acquired, lost.pending), (0, 1), "{lost:?}");
    drop(frozen);
    // Once the node thaws, its late grant for the lost round is given back in the background.
    assert_eventually_free(&servers[2], "frozen:2").await;
    assert_eq!(
        holder(&servers[0], "frozen:2").as_deref(),
        Some(held.token())
    );
}

/// A Redlock over `servers` (100 ms node timeout, breaker back-off `backoff`) with node `frozen`
/// SIGSTOPped and its breaker open.
async fn with_open_breaker(
    servers: &[RedisServer],
    frozen: usize,
    backoff: Duration,
) -> (Redlock, Frozen) {
    let redlock = fresh_with(
        servers,
        RedlockOptions::new()
            .node_timeout(Duration::from_millis(100))
            .breaker_backoff(backoff),
    )
    .await;
    let stopped = Frozen::stop(&servers[frozen]);
    // Rounds are decided at quorum, so the frozen node's timeouts land in the background; wait
    // for each before the next round, until the breaker has seen enough of them.
    for i in 0..20 {
        let key = format!("breaker:{i}");
        let lock = redlock.acquire(&key, &opts(10_000)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        redlock.release(&lock).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        if redlock.skipped_votes() > 0 {
            return (redlock, stopped);
        }
    }
    panic!("the breaker never opened");
}

#[tokio::test]
async fn node_that_keeps_timing_out_is_skipped_as_a_failed_vote() {
    let servers = RedisServer::start_many(3);
    let (redlock, _frozen) = with_open_breaker(&servers, 1, Duration::from_secs(60)).await;
    let before = redlock.skipped_votes();
    let attempt = redlock
        .try_acquire("breaker:x", &opts(10_000))
        .await
        .unwrap();
    assert!(attempt.lock.is_some());
    assert_eq!(redlock.skipped_votes(), before + 1);
    // Skipped: a failed vote at once, not a pending request.
    assert_eq!(attempt.pending, 0, "{attempt:?}");
    assert_eq!(attempt.node_errors.len(), 1);
    assert!(
        attempt.node_errors[0].to_string().contains("circuit open"),
        "{}",
        attempt.node_errors[0]
    );
}

/// A lock whose `SET` skipped a node (its breaker was open) cannot be on that node: its release
/// does not go there. Before, every release also went to the frozen node and waited in its
/// connection (or opened a new connection to it, one per release, when it was frozen from the
/// start): most of the tool's CPU in a bench with one frozen node of three.
#[tokio::test]
async fn a_release_skips_the_nodes_its_lock_was_never_sent_to() {
    let servers = RedisServer::start_many(3);
    let (redlock, _frozen) = with_open_breaker(&servers, 2, Duration::from_secs(60)).await;
    let attempt = redlock
        .try_acquire("unsent:x", &opts(10_000))
        .await
        .unwrap();
    assert_eq!((attempt.acquired, attempt.pending), (2, 0), "{attempt:?}");
    let mut lock = attempt.lock.expect("two healthy nodes of three");
    // Extending asks only the nodes that may hold the lock; the skipped one cannot.
    assert_eq!(
        redlock
            .extend(&mut lock, Duration::from_secs(10))
            .await
            .unwrap(),
        ExtendOutcome::Extended
    );
    let out = redlock.release_detailed(&lock).await.unwrap();
    // Not sent, not waited for, not an error: the node never had our token.
    assert_eq!(
        (out.released, out.not_held, out.pending),
        (2, 1, 0),
        "{out:?}"
    );
    assert!(out.node_errors.is_empty(), "{out:?}");
}

/// After the back-off, one request goes to the node as a trial (half-open); the others are still
/// skipped until it answers or times out. Before, every request went to the node again until
/// one of them timed out: a whole node timeout of requests queued at a frozen node each time
/// the back-off ended.
#[tokio::test]
async fn after_the_back_off_one_trial_request_goes_to_the_node_and_the_rest_stay_skipped() {
    let servers = RedisServer::start_many(3);
    let backoff = Duration::from_millis(500);
    let (redlock, _frozen) = with_open_breaker(&servers, 2, backoff).await;
    // Every request still out to the frozen node has timed out, and the back-off has passed.
    tokio::time::sleep(backoff + Duration::from_millis(700)).await;
    let rounds = (0..10).map(|i| {
        let redlock = redlock.clone();
        async move {
            redlock
                .try_acquire(&format!("probe:x{i}"), &opts(10_000))
                .await
                .unwrap()
        }
    });
    let attempts = futures_util::future::join_all(rounds).await;
    let sent = attempts.iter().filter(|a| a.pending == 1).count();
    let skipped = attempts
        .iter()
        .filter(|a| {
            a.node_errors.len() == 1 && a.node_errors[0].to_string().contains("circuit open")
        })
        .count();
    assert_eq!((sent, skipped), (1, 9), "{attempts:?}");
    assert!(attempts.iter().all(|a| a.lock.is_some()), "{attempts:?}");
}

/// A release whose quorum could not be decided because nodes failed (one down, one frozen) is
/// an error, not "the lock had expired": the frozen node still holds our token. Before the fix
/// it came back as `Ok(NotHeld)`, which a caller (and `lockkit bench`, as a lost lock) reads as
/// a lock that ran out under its holder.
#[tokio::test]
async fn a_release_undecided_by_node_failures_is_an_error_not_not_held() {
    let mut servers = RedisServer::start_many(3);
    let redlock = fresh_with(
        &servers,
        RedlockOptions::new().node_timeout(Duration::from_millis(200)),
    )
    .await;
    let lock = redlock
        .try_acquire("undecided", &opts(30_000))
        .await
        .unwrap()
        .lock
        .expect("all three nodes are up");
    servers[1].kill();
    let frozen = Frozen::stop(&servers[2]);
    let err = redlock.release(&lock).await.unwrap_err();
    assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached, "{err}");
    // The healthy node did release; the frozen one runs the queued release when it resumes.
    assert_eq!(holder(&servers[0], "undecided"), None);
    drop(frozen);

    // Where a quorum of nodes answers that the token is gone, the lock is reported as lost.
    let lock = redlock
        .try_acquire("expired", &opts(30_000))
        .await
        .unwrap()
        .lock
        .expect("nodes 1 and 3 are a quorum");
    for s in [&servers[0], &servers[2]] {
        s.inline("DEL expired").unwrap();
    }
    assert_eq!(
        redlock.release(&lock).await.unwrap(),
        lockkit::ReleaseOutcome::NotHeld
    );
}

/// Two nodes started just now, the delayed-restart rule on: the first refusal already decides
/// the round (a quorum of 2 can no longer be reached) while the other node's vote is pending.
/// That round was lost to node failures, not to another holder: an error a caller pauses on,
/// never `Ok(None)` ("contended"), which `lockkit bench` retried at once, round after round,
/// without yielding (a 2 s Redlock bench against fresh `--url` servers spun for the whole TTL).
#[tokio::test]
async fn a_round_lost_to_restarted_nodes_is_an_error_not_contention() {
    let servers = RedisServer::start_many(2);
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    for _ in 0..20 {
        let err = redlock
            .attempt("fresh", &opts(3_600_000))
            .await
            .expect_err("refused by restarted nodes, not contended");
        assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached, "{err}");
        assert!(err.to_string().contains("restarted"), "{err}");
    }
    assert_eq!(holder(&servers[0], "fresh"), None);
    assert_eq!(holder(&servers[1], "fresh"), None);
}

/// A refusal costs no round trip, so without a yield a round where every node refuses would
/// never give the runtime its thread back: on one thread, nothing else would run while a caller
/// tries again and again. A task spawned before ten refused rounds has run by their end.
#[tokio::test]
async fn refused_rounds_let_other_tasks_run() {
    let servers = RedisServer::start_many(2);
    let redlock = Redlock::connect(&urls(&servers)).await.unwrap();
    // The first round reads each node's uptime (a round trip); the later ones refuse at once.
    let _ = redlock.attempt("fresh", &opts(3_600_000)).await;
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    for _ in 0..10 {
        let err = redlock
            .attempt("fresh", &opts(3_600_000))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), lockkit::ErrorKind::QuorumNotReached, "{err}");
    }
    assert!(ran.load(Ordering::SeqCst));
}

/// With more than one connection per node, the compare-and-delete that undoes a timed-out `SET`
/// of a lost round must reach the node after that `SET`, never before it: over another
/// connection it overtook a `SET` held up on the network (one lost packet, re-sent), found
/// nothing to delete, and the `SET` landed afterwards and held the key for its whole TTL.
#[tokio::test]
async fn the_undo_of_a_timed_out_set_never_overtakes_it() {
    let server = RedisServer::start();
    let relay = DelayRelay::start(server.port(), Duration::ZERO, Duration::ZERO).unwrap();
    let redlock = Redlock::connect_with(
        &[relay.url()],
        RedlockOptions::new()
            .restart_rule(false)
            .node_timeout(Duration::from_millis(100))
            .client(ClientOptions::new().connections(2)),
    )
    .await
    .unwrap();
    let key = "cron:overtaken";
    // The round's SET is held up for 600 ms, far past the node timeout: the round is lost and
    // the SET's outcome unknown, so an undo follows.
    relay.set_delay(Duration::from_millis(600));
    let round = tokio::spawn(async move { redlock.try_acquire(key, &opts(30_000)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Only that SET is late: whatever is sent from now on goes through at once.
    relay.set_delay(Duration::ZERO);
    let attempt = round.await.unwrap().unwrap();
    assert!(attempt.lock.is_none(), "a timed-out round was won");
    assert_eq!(attempt.node_errors.len(), 1);
    // The late SET has landed by now; its undo must have come after it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        holder(&server, key),
        None,
        "the lost round's SET holds the key (30 s TTL): its undo overtook it"
    );
}

/// Until every server of `servers` reports (in whole seconds) an uptime of at least `secs`.
async fn wait_uptime(servers: &[RedisServer], secs: u64) {
    for s in servers {
        loop {
            let mut c = redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
            let up: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if up >= secs {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// X (no restart rule of its own) takes K on every node for a minute; then nodes 1 and 2
/// restart empty, so only node 3 still holds it. Returns X's token.
async fn x_holds_k_and_two_nodes_forget_it(servers: &mut [RedisServer]) -> String {
    let x = fresh(servers).await;
    let held = x.acquire("K", &opts(60_000)).await.unwrap();
    servers[0].restart();
    servers[1].restart();
    held.token().to_string()
}

/// Y's round for K did not win, and node 3 still holds X's token.
fn assert_one_holder(servers: &[RedisServer], round: &lockkit::RedlockAttempt, x: &str) {
    assert!(
        round.lock.is_none(),
        "two holders: Y took K on the restarted nodes while X holds it: {round:?}"
    );
    assert_eq!(holder(&servers[2], "K").as_deref(), Some(x));
}

/// Issue 26, defect 1: Y used every node (and read each one's start) while they had been up for
/// long enough; two of them then restart empty while Y sits idle, and Y's connections to them
/// come back on their own at its next call. The start time Y read before belongs to the old
/// process: the restarted nodes must not vote until Y knows they have been up for its TTL, or Y
/// takes the key X still holds on the third node.
#[tokio::test]
async fn a_node_restarted_while_the_client_sat_idle_does_not_vote() {
    let mut servers = RedisServer::start_many(3);
    let ttl = Duration::from_millis(1000);
    wait_uptime(&servers, 2).await;
    let y = Redlock::connect(&urls(&servers)).await.unwrap();
    let warm = y.acquire("warm", &opts(1000)).await.unwrap();
    y.release(&warm).await.unwrap();
    let x = x_holds_k_and_two_nodes_forget_it(&mut servers).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let round = y
        .try_acquire("K", &LockOptions::builder(ttl).build().unwrap())
        .await
        .unwrap();
    assert_one_holder(&servers, &round, &x);
    // Refused for the reason under test, not any failure (a node timeout on a loaded machine).
    assert_refused_by_two_restarted_nodes(&round);
}

/// Issue 26, defect 2: X holds K for a minute; two nodes restart empty; Y, which has asked for a
/// minute-long lock before, asks for K with a 1 s TTL once the nodes have been up for 2 s. The
/// rule must measure uptime against the longest TTL in use (here: the longest Y used), not the
/// requesting lock's, or Y wins while X's lock is live.
#[tokio::test]
async fn the_restart_rule_measures_against_the_longest_ttl_the_client_used() {
    let mut servers = RedisServer::start_many(3);
    let x = x_holds_k_and_two_nodes_forget_it(&mut servers).await;
    let y = Redlock::connect(&urls(&servers)).await.unwrap();
    // A minute-long lock on another key: refused by the fresh nodes, but Y has used that TTL.
    let _ = y.try_acquire("other", &opts(60_000)).await.unwrap();
    wait_uptime(&servers, 2).await;
    let round = y.try_acquire("K", &opts(1000)).await.unwrap();
    assert_one_holder(&servers, &round, &x);
    assert_refused_by_two_restarted_nodes(&round);
}

/// Issue 26, defect 2: the longest TTL any client uses on the nodes is an option; a client
/// that never used that TTL itself still refuses the votes of nodes up for less.
#[tokio::test]
async fn the_restart_rule_honours_the_configured_longest_ttl() {
    let mut servers = RedisServer::start_many(3);
    let x = x_holds_k_and_two_nodes_forget_it(&mut servers).await;
    wait_uptime(&servers, 2).await;
    let y = Redlock::connect_with(
        &urls(&servers),
        RedlockOptions::new().longest_ttl(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let round = y.try_acquire("K", &opts(1000)).await.unwrap();
    assert_one_holder(&servers, &round, &x);
    assert_refused_by_two_restarted_nodes(&round);
    // A node up for less than the longest TTL refuses; its wait is what it has left.
    let wait = y.restart_wait().await.unwrap();
    assert!(
        wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
}

/// Issue 35, defect 7: a single Redlock attempt in which a quorum granted the lock but the
/// round trip (relays adding 100 ms each way) left no more than `min_validity` (29.6 s of a
/// 30 s TTL) answers `TooLittleValidity`, as `LockClient`'s single attempt does and
/// docs/LIBRARY.md promises, not `Ok(None)`, which says "busy" for a free key. What the nodes
/// granted is given back at once.
#[tokio::test]
async fn a_quorum_granted_with_too_little_validity_is_too_little_validity_not_busy() {
    let servers = RedisServer::start_many(3);
    let relays: Vec<DelayRelay> = servers
        .iter()
        .map(|s| DelayRelay::start(s.port(), Duration::ZERO, Duration::ZERO).unwrap())
        .collect();
    let urls: Vec<String> = relays.iter().map(DelayRelay::url).collect();
    let redlock = Redlock::connect_with(
        &urls,
        RedlockOptions::new()
            .restart_rule(false)
            .node_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    for r in &relays {
        r.set_delay(Duration::from_millis(100));
    }
    let spent = LockOptions::builder(Duration::from_secs(30))
        .min_validity(Duration::from_millis(29_600))
        .build()
        .unwrap();
    let got = redlock.attempt("spent:redlock", &spent).await;
    for r in &relays {
        r.set_delay(Duration::ZERO);
    }
    match got {
        Err(e) => assert_eq!(e.kind(), lockkit::ErrorKind::TooLittleValidity, "{e}"),
        Ok(lock) => panic!("a quorum granted the free key, and the attempt answered {lock:?}"),
    }
    for s in &servers {
        assert_eventually_free(s, "spent:redlock").await;
    }
}
