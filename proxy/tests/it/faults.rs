//! The `faults` plugin in front of a real redis-server: its events are counted and checked
//! against what clients and the server saw; the same seed repeats a run. No timing assertions
//! but lower bounds ("took at least") that cannot fail on a slow machine.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lockkit::{Lock, LockClient, Locker, ReleaseOutcome};
use lockkit_proxy::faults::{Faults, FaultsOptions, FaultsPluginReport};
use lockkit_proxy::{Action, ConnInfo, Plugin, PluginCommand, Proxy};
use lockkit_test_support::RedisServer;

async fn start_faults(upstream: &str, args: &str) -> (Proxy, Arc<Faults>) {
    let faults = Arc::new(Faults::new(FaultsOptions::parse(args).expect(args)));
    let plugins: Vec<Arc<dyn Plugin>> = vec![faults.clone()];
    (start_proxy(upstream, plugins).await, faults)
}

async fn faults_report(proxy: Proxy, faults: &Faults) -> FaultsPluginReport {
    let ctx = proxy.stop().await;
    serde_json::from_value(faults.report(&ctx).expect("faults always reports")).unwrap()
}

/// Reads one `:N\r\n` reply; `None` when the proxy closed the connection first.
fn read_integer(s: &mut TcpStream) -> Option<i64> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        match s.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) => got.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("no reply and no close (a hang?): {e}"),
        }
    }
    let text = std::str::from_utf8(&got).unwrap();
    Some(text.trim_start_matches(':').trim_end().parse().expect(text))
}

/// `n` INCRs of `counter`, one at a time, reconnecting whenever the proxy cuts the connection;
/// each reply (`None`: cut).
fn incr_through(port: u16, n: usize) -> Vec<Option<i64>> {
    let mut out = Vec::with_capacity(n);
    let mut conn: Option<TcpStream> = None;
    for _ in 0..n {
        let s = conn.get_or_insert_with(|| raw_conn(port));
        let reply = match s.write_all(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n") {
            Ok(()) => read_integer(s),
            Err(_) => None,
        };
        if reply.is_none() {
            conn = None;
        }
        out.push(reply);
    }
    out
}

fn counter_on(server: &RedisServer) -> i64 {
    let out = redis_cli(server.port(), &["GET", "counter"], "");
    out.trim().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_cuts_connections_before_or_after_the_server_ran_the_command() {
    let server = RedisServer::start();
    let (proxy, faults) = start_faults(&server.url(), "drop=100%,seed=11").await;
    let port = proxy.addr().port();
    let replies = tokio::task::spawn_blocking(move || incr_through(port, 40))
        .await
        .unwrap();
    assert!(replies.iter().all(Option::is_none), "{replies:?}");
    let report = faults_report(proxy, &faults).await;
    assert_eq!(report.counts.commands, 40);
    assert_eq!(
        report.counts.dropped_before_send + report.counts.dropped_reply_lost,
        40
    );
    assert!(
        report.counts.dropped_before_send > 0 && report.counts.dropped_reply_lost > 0,
        "{report:?}"
    );
    // Exactly the commands whose reply was lost ran on the server.
    assert_eq!(counter_on(&server), report.counts.dropped_reply_lost as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_drops_the_same_commands_again() {
    let server = RedisServer::start();
    let mut runs = Vec::new();
    for _ in 0..2 {
        redis_cli(server.port(), &["DEL", "counter"], "");
        let (proxy, faults) = start_faults(&server.url(), "drop=10%,seed=5").await;
        let port = proxy.addr().port();
        let replies = tokio::task::spawn_blocking(move || incr_through(port, 300))
            .await
            .unwrap();
        let report = faults_report(proxy, &faults).await;
        let answered = replies.iter().filter(|r| r.is_some()).count() as u64;
        assert_eq!(report.counts.commands, 300);
        assert_eq!(
            answered + report.counts.dropped_before_send + report.counts.dropped_reply_lost,
            300,
            "{report:?}"
        );
        assert!(
            report.counts.dropped_before_send + report.counts.dropped_reply_lost > 0,
            "{report:?}"
        );
        // The server ran the answered commands and those whose reply was lost, no others.
        assert_eq!(
            counter_on(&server),
            (answered + report.counts.dropped_reply_lost) as i64
        );
        runs.push((
            replies,
            report.counts.dropped_before_send,
            report.counts.dropped_reply_lost,
        ));
    }
    assert_eq!(
        runs[0], runs[1],
        "the same seed, the same traffic: the same faults"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_holds_every_command_one_at_a_time_or_pipelined() {
    let server = RedisServer::start();
    let (proxy, faults) = start_faults(&server.url(), "delay=30ms~10ms,seed=1").await;
    let port = proxy.addr().port();
    tokio::task::spawn_blocking(move || {
        let mut c = raw_conn(port);
        for _ in 0..10 {
            let t = Instant::now();
            assert_eq!(roundtrip(&mut c, b"PING\r\n", 7).unwrap(), b"+PONG\r\n");
            assert!(
                t.elapsed() >= Duration::from_millis(20),
                "{:?}",
                t.elapsed()
            );
        }
        // 16 commands in one write: each is held to its own arrival + delay, not one after
        // the other, so the lower bound is one delay (the upper bound is not asserted).
        let pipeline = b"PING\r\n".repeat(16);
        let t = Instant::now();
        let got = roundtrip(&mut c, &pipeline, 7 * 16).unwrap();
        assert_eq!(got, b"+PONG\r\n".repeat(16));
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
    })
    .await
    .unwrap();
    let report = faults_report(proxy, &faults).await;
    assert_eq!(
        (report.counts.commands, report.counts.delayed),
        (26, 26),
        "{report:?}"
    );
    assert_eq!(
        report.counts.dropped_before_send + report.counts.dropped_reply_lost,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_windows_hold_what_is_sent_inside_them() {
    let server = RedisServer::start();
    let (proxy, faults) = start_faults(&server.url(), "blackhole=100ms/300ms,seed=3").await;
    let port = proxy.addr().port();
    let began = Instant::now();
    let pings = tokio::task::spawn_blocking(move || {
        let mut c = raw_conn(port);
        let mut n = 0u64;
        // At least four whole periods of one client pinging, bounded in count too.
        while began.elapsed() < Duration::from_millis(1300) && n < 200_000 {
            assert_eq!(roundtrip(&mut c, b"PING\r\n", 7).unwrap(), b"+PONG\r\n");
            n += 1;
        }
        n
    })
    .await
    .unwrap();
    let report = faults_report(proxy, &faults).await;
    assert_eq!(report.counts.commands, pings);
    assert!(report.blackhole_windows >= 4, "{report:?}");
    // One client waiting on each reply: a window holds its first command until it ends, and
    // the next is sent after it; so each window hit held exactly one command.
    assert!(report.blackhole_windows_hit >= 1, "{report:?}");
    assert!(
        report.blackhole_windows_hit <= report.blackhole_windows,
        "{report:?}"
    );
    assert_eq!(
        report.counts.blackholed, report.blackhole_windows_hit,
        "{report:?}"
    );
    // Each hit held its command for some part of a 100 ms window; at least four periods of
    // 300 ms ran, so the whole run took at least that long.
    assert!(began.elapsed() >= Duration::from_millis(1200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_and_lockkit_locks_pass_through_delay_and_blackhole() {
    let server = RedisServer::start();
    let (proxy, faults) =
        start_faults(&server.url(), "delay=2ms~1ms,blackhole=50ms/200ms,seed=8").await;
    let port = proxy.addr().port();
    let out = tokio::task::spawn_blocking(move || {
        redis_cli(port, &[], "MULTI\nSET a 1\nINCR a\nEXEC\nGET a\n")
    })
    .await
    .unwrap();
    assert_eq!(out, "OK\nQUEUED\nQUEUED\nOK\n2\n2\n", "{out}");
    let client = lockkit::LockClient::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .expect("lockkit connects through the proxy");
    for i in 0..20 {
        let key = format!("job:{i}");
        let lock = client
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .expect("no error")
            .expect("free key");
        assert_eq!(
            client.release(&lock).await.expect("released"),
            lockkit::ReleaseOutcome::Released
        );
    }
    let report = faults_report(proxy, &faults).await;
    assert_eq!(report.counts.delayed, report.counts.commands, "{report:?}");
    assert!(report.counts.commands >= 45, "{report:?}");
}

/// Loses the reply of the next script call (a release) carrying the armed token, once: the
/// server runs it and the client's connection is cut, as `drop` does.
#[derive(Debug, Default)]
struct LoseReleaseReply {
    token: Mutex<Option<Vec<u8>>>,
    lost: AtomicU64,
}

impl LoseReleaseReply {
    fn arm(&self, lock: &Lock) {
        *self.token.lock().unwrap() = Some(lock.token().as_bytes().to_vec());
    }
}

impl Plugin for LoseReleaseReply {
    fn name(&self) -> &str {
        "lose-release-reply"
    }

    fn commands(&self) -> Vec<String> {
        ["EVALSHA", "EVAL", "FCALL"].map(String::from).to_vec()
    }

    fn wants_reply(&self, _cmd: &PluginCommand<'_>) -> bool {
        false
    }

    fn on_command(&self, _conn: &ConnInfo, cmd: &PluginCommand<'_>) -> Action {
        let mut token = self.token.lock().unwrap();
        if token.as_deref().is_some_and(|t| cmd.args.contains(&t)) {
            *token = None;
            self.lost.fetch_add(1, Ordering::Relaxed);
            return Action::LoseReply;
        }
        Action::Pass
    }
}

async fn lose_release_replies(server: &RedisServer) -> (Proxy, Arc<LoseReleaseReply>, LockClient) {
    let plugin = Arc::new(LoseReleaseReply::default());
    let proxy = start_proxy(&server.url(), vec![plugin.clone()]).await;
    let client = LockClient::connect(&format!("redis://{}", proxy.addr()))
        .await
        .expect("lockkit connects through the proxy");
    (proxy, plugin, client)
}

async fn take(client: &LockClient, key: &str, ttl: Duration) -> Lock {
    client
        .try_acquire(key, ttl)
        .await
        .expect("no error")
        .expect("free key")
}

/// Releases `lock` with the first attempt's reply lost; the re-sent attempt's outcome.
async fn release_losing_reply(
    plugin: &LoseReleaseReply,
    client: &LockClient,
    lock: &Lock,
) -> ReleaseOutcome {
    let lost = plugin.lost.load(Ordering::Relaxed);
    plugin.arm(lock);
    let outcome = client
        .release(lock)
        .await
        .expect("the re-sent release answers");
    assert_eq!(
        plugin.lost.load(Ordering::Relaxed),
        lost + 1,
        "a reply was lost"
    );
    outcome
}

fn exists(server: &RedisServer, key: &str) -> String {
    redis_cli(server.port(), &["EXISTS", key], "")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_resent_after_its_reply_was_lost_is_released_not_a_lost_lock() {
    let server = RedisServer::start();
    let (proxy, plugin, client) = lose_release_replies(&server).await;
    let lock = take(&client, "lock:reply-lost", Duration::from_secs(30)).await;
    // The first compare-and-delete ran and its reply was lost; the re-sent one finds the key
    // gone, while the lock was still valid: it can only have been our own first release.
    let outcome = release_losing_reply(&plugin, &client, &lock).await;
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert_eq!(exists(&server, "lock:reply-lost"), "0");

    // The same for a batch of releases.
    let locks: Vec<Lock> = client
        .acquire_many(&["lock:batch:1", "lock:batch:2"], Duration::from_secs(30))
        .await
        .expect("no error")
        .into_iter()
        .map(|l| l.expect("free key"))
        .collect();
    plugin.arm(&locks[1]);
    let outcomes = client
        .release_many(&locks)
        .await
        .expect("re-sent batch answers");
    assert_eq!(plugin.lost.load(Ordering::Relaxed), 2);
    assert_eq!(
        outcomes,
        [ReleaseOutcome::Released, ReleaseOutcome::Released]
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_release_of_an_expired_lock_is_still_not_held() {
    let server = RedisServer::start();
    let (proxy, plugin, client) = lose_release_replies(&server).await;
    let lock = take(&client, "lock:expired", Duration::from_millis(100)).await;
    // Past the TTL: the key expired on the server and the lock's validity is over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(exists(&server, "lock:expired"), "0");
    let outcome = release_losing_reply(&plugin, &client, &lock).await;
    assert_eq!(outcome, ReleaseOutcome::NotHeld);
    proxy.stop().await;
}
