//! Two instances of `examples/orders.rs` behind "a load balancer" (one request to each), sharing
//! one real redis-server: the duplicate-submit guard holds across processes.

use crate::example_bin;

use std::sync::Barrier;
use std::time::Duration;

use example_bin::{example_binary, get, post, Running};
use lockkit_test_support::{free_port, RedisServer};

/// The handler's delay: long enough that two requests fired together overlap inside it.
const DELAY_MS: &str = "1500";

fn start_instance(redis: &RedisServer) -> (Running, u16) {
    let port = free_port().expect("free port");
    let args = [
        "--port".to_string(),
        port.to_string(),
        "--redis-url".to_string(),
        redis.url(),
        "--delay-ms".to_string(),
        DELAY_MS.to_string(),
    ];
    let mut inst = Running::start(&example_binary("orders"), &args);
    inst.wait_for_line("listening on", Duration::from_secs(60));
    (inst, port)
}

fn order(port: u16, user: &str, body: &str) -> (u16, String) {
    let headers = [("X-User-Id", user), ("Content-Type", "application/json")];
    post(port, "/orders", &headers, body)
}

/// Sends both requests at the same moment, each on its own thread.
fn together(a: (u16, &str, &str), b: (u16, &str, &str)) -> [(u16, String); 2] {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let ta = s.spawn(|| {
            barrier.wait();
            order(a.0, a.1, a.2)
        });
        let tb = s.spawn(|| {
            barrier.wait();
            order(b.0, b.1, b.2)
        });
        [ta.join().unwrap(), tb.join().unwrap()]
    })
}

fn statuses(answers: &[(u16, String)]) -> Vec<u16> {
    let mut s: Vec<u16> = answers.iter().map(|a| a.0).collect();
    s.sort_unstable();
    s
}

#[test]
fn two_instances_admit_one_of_two_identical_orders() {
    let redis = RedisServer::start();
    let (_one, p1) = start_instance(&redis);
    let (_two, p2) = start_instance(&redis);
    let order_body = r#"{"sku":"book-42","qty":1}"#;

    let answers = together((p1, "alice", order_body), (p2, "alice", order_body));
    assert_eq!(statuses(&answers), vec![201, 429], "{answers:?}");
    let refused = answers.iter().find(|a| a.0 == 429).unwrap();
    assert!(refused.1.contains("already being processed"), "{refused:?}");
    let created = answers.iter().find(|a| a.0 == 201).unwrap();
    assert!(created.1.contains(r#""sku":"book-42""#), "{created:?}");

    // The first has answered: the same order is admitted again.
    let (status, _) = order(p2, "alice", order_body);
    assert_eq!(status, 201);

    // Different bodies, and different users, never block each other.
    let answers = together(
        (p1, "alice", r#"{"sku":"book-42","qty":2}"#),
        (p2, "alice", r#"{"sku":"book-42","qty":3}"#),
    );
    assert_eq!(statuses(&answers), vec![201, 201], "{answers:?}");
    let answers = together((p1, "alice", order_body), (p2, "bob", order_body));
    assert_eq!(statuses(&answers), vec![201, 201], "{answers:?}");
}

#[test]
fn a_retry_with_the_same_idempotency_key_gets_the_same_order() {
    let redis = RedisServer::start();
    let (_one, p1) = start_instance(&redis);
    let (_two, p2) = start_instance(&redis);
    let headers = [
        ("X-User-Id", "carol"),
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "checkout-7f3a"),
    ];
    let body = r#"{"sku":"lamp","qty":1}"#;
    let (s1, first) = post(p1, "/orders", &headers, body);
    assert_eq!(s1, 201, "{first}");
    // The client lost that answer and retries, through the other instance.
    let (s2, retry) = post(p2, "/orders", &headers, body);
    assert_eq!(s2, 201, "{retry}");
    assert_eq!(retry, first, "the stored order is replayed, not a new one");
}

#[test]
fn metrics_list_the_lockkit_families_after_one_order() {
    let redis = RedisServer::start();
    let (_one, port) = start_instance(&redis);
    let (status, _) = get(port, "/metrics");
    assert_eq!(status, 200);
    let body = r#"{"sku":"mug","qty":1}"#;
    let (status, created) = order(port, "dave", body);
    assert_eq!(status, 201, "{created}");
    let (status, scrape) = get(port, "/metrics");
    assert_eq!(status, 200);
    // Every family of a single-server locker is listed after one order, those without an event
    // yet at zero (the Redlock ones, `lockkit_redlock_*`, belong to a Redlock; tests/metrics.rs).
    for (family, kind) in [
        ("lockkit_acquire_attempts_total", "counter"),
        ("lockkit_acquire_attempt_duration_seconds", "histogram"),
        ("lockkit_time_to_acquire_seconds", "histogram"),
        ("lockkit_hold_duration_seconds", "histogram"),
        ("lockkit_locks_lost_total", "counter"),
        ("lockkit_noscript_recoveries_total", "counter"),
    ] {
        let line = format!("# TYPE {family} {kind}");
        assert!(scrape.contains(&line), "{line} missing from:\n{scrape}");
        assert!(
            scrape.contains(&format!("# HELP {family} ")),
            "no help for {family} in:\n{scrape}"
        );
    }
    // One attempt that got the lock, one release after the hold, nothing lost.
    let acquired = scrape
        .lines()
        .find(|l| {
            l.starts_with("lockkit_acquire_attempts_total{") && l.contains(r#"outcome="acquired""#)
        })
        .unwrap_or_else(|| panic!("no acquired attempts in:\n{scrape}"));
    assert!(acquired.ends_with(" 1"), "{acquired}");
    for line in [
        r#"lockkit_hold_duration_seconds_count{mode="standalone"} 1"#,
        r#"lockkit_locks_lost_total{mode="standalone",reason="release_not_held"} 0"#,
        "lockkit_noscript_recoveries_total 0",
    ] {
        assert!(scrape.contains(line), "{line} missing from:\n{scrape}");
    }
    // A duplicate while the first is inside the handler: a busy attempt.
    let answers = together((port, "erin", body), (port, "erin", body));
    assert_eq!(statuses(&answers), vec![201, 429], "{answers:?}");
    let (_, scrape) = get(port, "/metrics");
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("lockkit_acquire_attempts_total{")
                && l.contains(r#"outcome="busy""#)
                && l.ends_with(" 1")),
        "{scrape}"
    );
}
