//! The replication stream passes through the proxy byte for byte: `SYNC` answers with an RDB
//! payload that is not a RESP frame (no CRLF after it), then the write commands as they run.

use crate::common;

use std::io::Read;

use common::*;
use lockkit_test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_streams_the_writes_through_the_proxy() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    // No pings on the stream, as the suite sets it: only the RDB and the writes flow.
    server
        .inline("CONFIG SET repl-ping-replica-period 3600")
        .unwrap();
    let mut replica = raw_conn(port);
    let mut got = roundtrip(&mut replica, b"SYNC\r\n", 1).unwrap();
    // Newlines while the server prepares the RDB, then `$<len>\r\n` and the payload.
    let rdb_end = loop {
        let text = &got[..];
        let start = text.iter().position(|&b| b == b'$');
        if let Some(s) = start {
            if let Some(nl) = text[s..].windows(2).position(|w| w == b"\r\n") {
                let len: usize = std::str::from_utf8(&text[s + 1..s + nl])
                    .unwrap()
                    .parse()
                    .unwrap();
                let end = s + nl + 2 + len;
                if got.len() >= end {
                    break end;
                }
            }
        }
        let mut buf = [0u8; 4096];
        let n = replica.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    };
    assert_eq!(redis_cli(port, &["SET", "replicated", "v1"], ""), "OK\n");
    let want = b"$10\r\nreplicated\r\n$2\r\nv1\r\n";
    while !got[rdb_end..].windows(want.len()).any(|w| w == want) {
        let mut buf = [0u8; 4096];
        let n = replica.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed: {}",
            String::from_utf8_lossy(&got[rdb_end..])
        );
        got.extend_from_slice(&buf[..n]);
    }
    proxy.stop().await;
}

/// A primary demoted under the proxy answers `-READONLY`: the shared connection is given up
/// after that reply, and the next command goes on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_after_its_first_readonly() {
    let primary = RedisServer::start();
    let other = RedisServer::start();
    let proxy = start_proxy(&primary.url(), vec![]).await;
    let port = proxy.addr().port();
    assert_eq!(redis_cli(port, &[], "SET k v\n"), "OK\n");
    primary
        .inline(&format!("REPLICAOF 127.0.0.1 {}", other.port()))
        .unwrap();
    let before = lockkit_test_support::connections_received(&primary);
    let out = redis_cli(port, &[], "SET k v2\n");
    assert!(out.contains("READONLY"), "{out}");
    primary.inline("REPLICAOF NO ONE").unwrap();
    assert_eq!(redis_cli(port, &[], "SET k v3\n"), "OK\n");
    // REPLICAOF NO ONE and this question are two; a new shared connection the third.
    let after = lockkit_test_support::connections_received(&primary);
    assert!(
        after - before >= 3,
        "{before} -> {after}: the connection was kept"
    );
    proxy.stop().await;
}
