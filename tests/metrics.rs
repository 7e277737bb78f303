//! The `metrics` feature against real redis-servers: every `lockkit_*` family is recorded where
//! its event happens, read back through a Prometheus recorder installed for this test binary.
//!
//! The recorder is global, so each test counts under a mode no other test here uses
//! (`standalone` in one, `redlock` in the other).

use std::sync::OnceLock;
use std::time::Duration;

use lockkit::{
    ExtendOutcome, LockClient, LockOptions, Locker, LossReason, Redlock, RedlockOptions,
    ReleaseOutcome, RetryOptions, WatchdogOptions,
};
use lockkit_test_support::RedisServer;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .expect("installing the recorder");
        lockkit::metrics::describe();
        handle
    })
}

/// The value of the series `name` whose labels include every pair of `labels`, if exported.
/// Histograms are read through their `_count` series.
fn value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let (series, v) = line.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
        let matches = n == name
            && labels
                .iter()
                .all(|(k, val)| rest.contains(&format!("{k}=\"{val}\"")));
        matches.then(|| v.parse().expect("a number"))
    })
}

fn count(name: &str, labels: &[(&str, &str)]) -> f64 {
    let scrape = recorder().render();
    value(&scrape, name, labels).unwrap_or_else(|| panic!("{name} {labels:?} not in:\n{scrape}"))
}

fn inspect(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

const SA: (&str, &str) = ("mode", "standalone");

fn lost(reason: &str) -> f64 {
    count("lockkit_locks_lost_total", &[SA, ("reason", reason)])
}

#[tokio::test]
async fn single_server_families_count_each_event_where_it_happens() {
    recorder();
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut c = inspect(&server);
    let ttl = Duration::from_secs(10);
    let opts = LockOptions::builder(ttl)
        .retry(RetryOptions::none())
        .build()
        .unwrap();

    // An acquire through the retry loop: one attempt, one time-to-acquire.
    let lock = client.acquire("m:a", &opts).await.unwrap();
    let acquired = [SA, ("outcome", "acquired")];
    assert_eq!(count("lockkit_acquire_attempts_total", &acquired), 1.0);
    let duration = "lockkit_acquire_attempt_duration_seconds_count";
    assert_eq!(count(duration, &acquired), 1.0);
    assert_eq!(count("lockkit_time_to_acquire_seconds_count", &[SA]), 1.0);
    // Every other series of the mode is there from the first attempt, at zero.
    assert_eq!(count("lockkit_hold_duration_seconds_count", &[SA]), 0.0);
    for reason in [
        "release_not_held",
        "extend_held_by_other",
        "watchdog_max_hold",
    ] {
        assert_eq!(lost(reason), 0.0, "{reason}");
    }
    assert_eq!(count("lockkit_noscript_recoveries_total", &[]), 0.0);

    // Busy, then an error attempt counted by kind.
    assert!(client.try_acquire("m:a", ttl).await.unwrap().is_none());
    let busy = [SA, ("outcome", "busy")];
    assert_eq!(count("lockkit_acquire_attempts_total", &busy), 1.0);
    assert!(client.try_acquire("", ttl).await.is_err());
    let error = [SA, ("outcome", "error"), ("kind", "invalid_input")];
    assert_eq!(count("lockkit_acquire_attempts_total", &error), 1.0);

    // A release: the hold time; releasing again finds the lock gone.
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(count("lockkit_hold_duration_seconds_count", &[SA]), 1.0);
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(lost("release_not_held"), 1.0);

    // Another holder's token: extend and release each count a lost lock.
    let mut lock = client.try_acquire("m:b", ttl).await.unwrap().unwrap();
    redis::cmd("SET")
        .arg("m:b")
        .arg("intruder")
        .exec(&mut c)
        .unwrap();
    assert_eq!(
        client.extend(&mut lock, ttl).await.unwrap(),
        ExtendOutcome::HeldByOther
    );
    assert_eq!(lost("extend_held_by_other"), 1.0);
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(lost("release_held_by_other"), 1.0);
    redis::cmd("DEL").arg("m:b").exec(&mut c).unwrap();
    assert_eq!(
        client.extend(&mut lock, ttl).await.unwrap(),
        ExtendOutcome::NotHeld
    );
    assert_eq!(lost("extend_not_held"), 1.0);

    // A fenced acquire is an attempt too.
    let fenced = client
        .try_acquire_fenced("{m:f}", "{m:f}:fence", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count("lockkit_acquire_attempts_total", &acquired), 3.0);

    // The script cache flushed: the next script call recovers from NOSCRIPT.
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut c).unwrap();
    client.release(&fenced).await.unwrap();
    assert_eq!(count("lockkit_noscript_recoveries_total", &[]), 1.0);

    // A watchdog that finds its key deleted.
    let guard = client
        .lock(
            "m:w",
            &LockOptions::new(Duration::from_millis(300)).unwrap(),
            WatchdogOptions::new(),
        )
        .await
        .unwrap();
    redis::cmd("DEL").arg("m:w").exec(&mut c).unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(reason, LossReason::Expired);
    assert_eq!(lost("watchdog_expired"), 1.0);
}

#[tokio::test]
async fn redlock_counts_each_lock_once_and_node_errors_and_skipped_votes_by_node() {
    recorder();
    let mut servers = RedisServer::start_many(3);
    let redlock = Redlock::connect_with(
        &servers.iter().map(RedisServer::url).collect::<Vec<_>>(),
        RedlockOptions::new()
            .restart_rule(false)
            .node_timeout(Duration::from_millis(100))
            .breaker_backoff(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let targets = redlock.targets();
    let skipped = |node: &str| count("lockkit_redlock_votes_skipped_total", &[("node", node)]);
    // Every node's skipped votes are exported from connect.
    for node in &targets {
        assert_eq!(skipped(node), 0.0, "{node}");
    }

    let opts = LockOptions::builder(Duration::from_secs(10))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    let rl = ("mode", "redlock");
    let lock = redlock.acquire("r:ok", &opts).await.unwrap();
    redlock.release(&lock).await.unwrap();
    // One lock over three nodes counts once.
    let acquired = [rl, ("outcome", "acquired")];
    assert_eq!(count("lockkit_acquire_attempts_total", &acquired), 1.0);
    assert_eq!(count("lockkit_time_to_acquire_seconds_count", &[rl]), 1.0);
    assert_eq!(count("lockkit_hold_duration_seconds_count", &[rl]), 1.0);

    // Node 3 is gone: each round fails on it. Node 2 is frozen: its requests time out until its
    // breaker opens and its votes are skipped.
    servers[2].kill();
    servers[1].pause().unwrap();
    let mut rounds = 0;
    while redlock.skipped_votes() == 0 && rounds < 20 {
        rounds += 1;
        let lock = redlock
            .try_acquire(&format!("r:{rounds}"), &opts)
            .await
            .unwrap();
        assert!(lock.lock.is_none(), "1 of 3 nodes cannot grant a quorum");
        // Wait out the frozen node's timeout, decided after the round.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let before = redlock.skipped_votes();
    assert!(before > 0, "the breaker never opened in {rounds} rounds");
    let err = redlock.attempt("r:x", &opts).await;
    assert!(err.is_err(), "{err:?}");
    servers[1].resume().unwrap();
    assert_eq!(skipped(&targets[1]), (before + 1) as f64);
    assert_eq!(skipped(&targets[0]), 0.0);
    let timeouts = count(
        "lockkit_redlock_node_errors_total",
        &[("node", &targets[1]), ("kind", "timeout")],
    );
    assert!(timeouts >= 3.0, "{timeouts} timeouts of the frozen node");
    let scrape = recorder().render();
    let dead = scrape
        .lines()
        .filter(|l| {
            l.starts_with("lockkit_redlock_node_errors_total{")
                && l.contains(&format!("node=\"{}\"", targets[2]))
        })
        .count();
    assert!(dead > 0, "no errors of the killed node in:\n{scrape}");
    assert_eq!(
        value(
            &scrape,
            "lockkit_redlock_node_errors_total",
            &[("node", &targets[0])]
        ),
        None,
        "the healthy node never failed"
    );
    // The attempt through the Locker trait failed on node errors, counted once as a Redlock
    // attempt (not once per node).
    let failed = [rl, ("outcome", "error"), ("kind", "quorum_not_reached")];
    assert_eq!(count("lockkit_acquire_attempts_total", &failed), 1.0);
}
