//! `observe` against real lock clients through the proxy: lockkit's own, and redis-py's `Lock`
//! (installed from PyPI by the set-up when missing). Hold times are checked against the
//! client's own clock: the proxy's window lies inside the client's outer window (before the
//! acquire call, after the release returned) and contains its inner one (after the acquire
//! returned, before the release call) — a causal bound, not a timing assumption.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use lockkit::{LockClient, Locker, ReleaseOutcome};
use lockkit_proxy::observe::LockPatternReport;
use lockkit_test_support::RedisServer;

fn pattern<'a>(locks: &'a [LockPatternReport], name: &str) -> &'a LockPatternReport {
    locks
        .iter()
        .find(|l| l.pattern == name)
        .unwrap_or_else(|| panic!("no pattern {name} in {locks:#?}"))
}

/// HdrHistogram keeps 3 significant digits: a recorded value may read up to 0.1% off.
fn within(us: u64, lo: u64, hi: u64) -> bool {
    let slack = |v: u64| v / 1000 + 1;
    us + slack(us) >= lo && us <= hi + slack(hi)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkit_locks_through_the_proxy_are_counted_with_their_hold_times() {
    let server = RedisServer::start();
    let (proxy, observe) = start_observed(&server.url()).await;
    let url = format!("redis://{}", proxy.addr());
    let client = LockClient::connect(&url)
        .await
        .expect("connect through the proxy");
    let (mut inner_min, mut outer_max) = (u64::MAX, 0);
    for i in 0..20 {
        let key = format!("lock:orders:{i}");
        let t0 = Instant::now();
        let lock = client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a free key");
        let t1 = Instant::now();
        assert!(client
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none());
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t2 = Instant::now();
        assert_eq!(
            client.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
        let t3 = Instant::now();
        inner_min = inner_min.min((t2 - t1).as_micros() as u64);
        outer_max = outer_max.max((t3 - t0).as_micros() as u64);
    }
    // A lock that expires while held: its release finds it gone.
    let lock = client
        .try_acquire("lock:orders:late", Duration::from_millis(20))
        .await
        .unwrap()
        .expect("free");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    let report = observe_report(proxy, &observe).await;
    assert_eq!(report.schema, "lockkit.observe/1");
    let p = pattern(&report.locks, "lock:orders:{id}");
    assert_eq!((p.acquired, p.contended), (20, 20), "{p:#?}");
    assert_eq!((p.released, p.released_not_held), (20, 0), "{p:#?}");
    assert_eq!(p.hold_us.count, 20);
    assert!(
        within(p.hold_us.p50, inner_min, outer_max) && within(p.hold_us.max, inner_min, outer_max),
        "observed {:?} outside the client's [{inner_min}, {outer_max}] us",
        p.hold_us
    );
    assert_eq!((p.ttl_ms.min, p.ttl_ms.max), (Some(5000), Some(5000)));
    assert!(p.recommended_ttl_ms.is_some());
    let late = pattern(&report.locks, "lock:orders:late");
    assert_eq!((late.acquired, late.released_not_held), (1, 1), "{late:#?}");
    assert!(
        late.hold_us.max >= 60_000,
        "slept 60 ms while holding: {late:?}"
    );
    assert!(report.commands.get("SET").copied().unwrap_or(0) >= 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkit_fair_locks_through_the_proxy_are_counted() {
    // Fair mode's scripts: acquire_fair.lua (taken, or queued: contended), release_fair.lua
    // (a release of the lock key only, not of the queue keys beside it) and leave_fair.lua (a
    // waiter giving up its place: not a release).
    let server = RedisServer::start();
    let (proxy, observe) = start_observed(&server.url()).await;
    let url = format!("redis://{}", proxy.addr());
    let connect = || {
        LockClient::connect_with(
            &url,
            lockkit::ClientOptions::new().wait(lockkit::WaitMode::Poll),
        )
    };
    let (holder, other) = (connect().await.unwrap(), connect().await.unwrap());
    let fair = |retry| {
        lockkit::LockOptions::builder(Duration::from_secs(5))
            .fair(true)
            .retry(retry)
            .build()
            .unwrap()
    };
    let once = fair(lockkit::RetryOptions::none());
    for i in 0..10 {
        let key = format!("lock:fair:{i}");
        let lock = holder.acquire(&key, &once).await.expect("a free key");
        // One attempt: queued behind the holder, then leaves the queue.
        let busy = other.acquire(&key, &once).await.unwrap_err();
        assert_eq!(busy.kind(), lockkit::ErrorKind::Busy, "{busy}");
        assert_eq!(
            holder.release(&lock).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let report = observe_report(proxy, &observe).await;
    let p = pattern(&report.locks, "lock:fair:{id}");
    assert_eq!((p.acquired, p.contended), (10, 10), "{p:#?}");
    assert_eq!((p.released, p.released_not_held), (10, 0), "{p:#?}");
    assert_eq!(p.hold_us.count, 10);
    assert_eq!((p.ttl_ms.min, p.ttl_ms.max), (Some(5000), Some(5000)));
    assert_eq!(
        report.locks.len(),
        1,
        "only the lock keys: {:#?}",
        report.locks
    );
}

const REDIS_PY_LOCKS: &str = r#"
import sys, time, redis
port, n, hold_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
r = redis.Redis(host="127.0.0.1", port=port)
inner_min, outer_max, contended = 10**12, 0, 0
for i in range(n):
    lock = r.lock(f"invoice:{1000 + i}:lock", timeout=10, blocking=False)
    t0 = time.perf_counter()
    assert lock.acquire()
    t1 = time.perf_counter()
    if not r.lock(f"invoice:{1000 + i}:lock", timeout=10, blocking=False).acquire():
        contended += 1
    time.sleep(hold_ms / 1000)
    t2 = time.perf_counter()
    lock.release()
    t3 = time.perf_counter()
    inner_min = min(inner_min, int((t2 - t1) * 1e6))
    outer_max = max(outer_max, int((t3 - t0) * 1e6))
print(inner_min, outer_max, contended)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_locks_are_counted_with_the_hold_times_they_really_had() {
    let server = RedisServer::start();
    let (proxy, observe) = start_observed(&server.url()).await;
    let port = proxy.addr().port().to_string();
    let text = run_python(REDIS_PY_LOCKS, &[&port, "15", "8"]).await;
    let nums: Vec<u64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let [inner_min, outer_max, contended] = nums[..] else {
        panic!("{text}")
    };
    assert_eq!(contended, 15);
    let report = observe_report(proxy, &observe).await;
    let p = pattern(&report.locks, "invoice:{id}:lock");
    assert_eq!((p.acquired, p.contended), (15, 15), "{p:#?}");
    assert_eq!((p.released, p.released_not_held), (15, 0), "{p:#?}");
    assert_eq!(p.hold_us.count, 15);
    assert!(inner_min >= 8_000);
    assert!(
        within(p.hold_us.p50, inner_min, outer_max) && within(p.hold_us.max, inner_min, outer_max),
        "observed {:?} outside redis-py's [{inner_min}, {outer_max}] us",
        p.hold_us
    );
    assert_eq!(p.ttl_ms.max, Some(10_000));
    // redis-py sent EVALSHA for a script the server had not seen: its NOSCRIPT, then the body.
    assert!(
        report.commands.contains_key("SCRIPT"),
        "{:?}",
        report.commands
    );
}
