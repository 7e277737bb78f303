//! `observe:top=N` in front of a real redis-server: the hottest keys and the biggest values of
//! each window land in the report, with the commands that got them.

use crate::common;

use std::sync::Arc;

use common::{redis_cli, start_proxy};
use lockkit_proxy::observe::{Observe, ObserveOptions};
use lockkit_proxy::Plugin;
use lockkit_test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_keys_and_big_values_of_the_window_are_in_the_report() {
    let server = RedisServer::start();
    let options = ObserveOptions::parse("top=2,window=1m", false).unwrap();
    let observe = Arc::new(Observe::new(options));
    let proxy = start_proxy(&server.url(), vec![observe.clone()]).await;
    let port = proxy.addr().port();
    let big = "x".repeat(100_000);
    tokio::task::spawn_blocking(move || {
        let mut lines = String::new();
        for i in 0..30 {
            lines.push_str("INCR hot:1\n");
            if i % 2 == 0 {
                lines.push_str("GET warm:1\n");
            }
            lines.push_str(&format!("GET cold:{i}\n"));
        }
        lines.push_str(&format!(
            "SET big:1 {big}\nGET big:1\nAUTH secret-password\n"
        ));
        redis_cli(port, &[], &lines);
    })
    .await
    .unwrap();
    let ctx = proxy.stop().await;
    let report = observe.report(&ctx).unwrap();
    assert_eq!(report["schema"], "lockkit.observe/1");
    let w = &report["top"][0];
    assert_eq!(w["window_s"], 60.0, "{w}");
    assert_eq!(w["hot_keys"][0]["key"], "hot:1", "{w}");
    assert_eq!(w["hot_keys"][0]["commands"], 30, "{w}");
    assert_eq!(w["hot_keys"][1]["key"], "warm:1", "{w}");
    assert_eq!(w["big_values"][0]["key"], "big:1", "{w}");
    assert_eq!(w["big_values"][0]["command"], "GET", "{w}");
    assert!(
        w["big_values"][0]["bytes"].as_u64().unwrap() > 100_000,
        "{w}"
    );
    assert!(!report.to_string().contains("secret-password"));
    // The report still reads as lockkit.observe/1 (`lockkit ttl --observed` reads it).
    let _: lockkit_proxy::observe::ObserveReport = serde_json::from_value(report).unwrap();
}

#[test]
fn observe_options_say_what_is_wrong() {
    assert_eq!(ObserveOptions::parse("", false).unwrap().top, 0);
    assert_eq!(ObserveOptions::parse("top=10", false).unwrap().top, 10);
    for (bad, says) in [
        ("top=0", "from 1 to 1000"),
        ("top=x", "from 1 to 1000"),
        ("window=10s", "goes with top=N"),
        ("top=5,window=1ms", "at least 100ms"),
        ("hot", "unknown option `hot`"),
    ] {
        let e = ObserveOptions::parse(bad, false).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
