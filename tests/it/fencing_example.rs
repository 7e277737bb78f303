//! `examples/fencing.rs` against a real redis-server: for a mutex, a semaphore's permit and a
//! read-write lock's writer, the paused holder's late write is refused by `fenced_set` in Redis
//! and by `FencingCheckLayer` (409), while the fresh holders' writes land.

use crate::example_bin;

use std::time::Duration;

use example_bin::{example_binary, Running};
use lockkit_test_support::RedisServer;

#[test]
fn the_paused_holders_late_write_is_refused_by_both_resources_for_every_primitive() {
    let server = RedisServer::start();
    let bin = example_binary("fencing");
    let args = ["--redis-url".to_string(), server.url()];
    // wait_exit asserts exit 0: every stale write refused, every fresh one accepted.
    let lines = Running::start(&bin, &args).wait_exit(Duration::from_secs(60));
    let text = lines.join("\n");
    for kind in ["mutex", "semaphore", "rwlock"] {
        let stale: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with(kind) && l.ends_with("(A woke up)"))
            .collect();
        assert_eq!(stale.len(), 1, "{text}");
        assert!(stale[0].contains("fenced_set refused, HTTP 409"), "{text}");
        assert!(stale[0].contains("stale fencing token"), "{text}");
        let fresh = lines
            .iter()
            .filter(|l| l.starts_with(kind) && l.contains(" B token "));
        assert!(
            fresh.clone().count() == 1
                && fresh
                    .clone()
                    .all(|l| l.contains("fenced_set accepted, HTTP 200")),
            "{text}"
        );
    }
    // The semaphore's other permit (slot 2) writes on while slot 1 changes hands.
    assert!(
        text.contains("(slot 2): fenced_set accepted, HTTP 200"),
        "{text}"
    );
    // A second run against the same server still works: tokens only grow.
    let again = Running::start(&bin, &args).wait_exit(Duration::from_secs(60));
    assert_eq!(again.len(), lines.len(), "{}", again.join("\n"));
}
