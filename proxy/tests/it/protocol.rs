//! Malformed requests get what redis-server gives them: the replies owed, then its very
//! `-ERR Protocol error: ...` line, then the connection closes. Each case is sent to the server
//! direct and through the proxy, and the two answers must be the same bytes.

use crate::common;

use std::io::{Read, Write};

use common::*;
use lockkit_test_support::RedisServer;

/// Sends `bytes` and reads until the peer closes; what arrived (an error if it never closes).
fn until_closed(port: u16, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = raw_conn(port);
    s.write_all(bytes)?;
    let mut got = Vec::new();
    s.read_to_end(&mut got)?;
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_are_answered_as_redis_answers_them_then_closed() {
    let server = RedisServer::start();
    for shared in [1, 0] {
        let proxy = lockkit_proxy::Proxy::start_with(
            "127.0.0.1:0",
            lockkit_proxy::Upstream::from_url(&server.url()).unwrap(),
            vec![],
            lockkit_proxy::ProxyOptions::new().shared_connections(shared),
        )
        .await
        .unwrap();
        let cases: [&[u8]; 9] = [
            b"*3000000000\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n",
            b"*1\r\nfoo\r\n",
            b"set \"\"\"test-key\"\"\" test-value\r\nping\r\n",
            // Replies owed come first.
            b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n:1\r\nPING\r\n",
            b"\r\n*-10\r\nPING\r\n*1\r\nx\r\n",
        ];
        for case in cases {
            let direct = until_closed(server.port(), case).unwrap();
            let through = until_closed(proxy.addr().port(), case);
            assert_eq!(
                through
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .map_err(|e| e.kind()),
                Ok(String::from_utf8_lossy(&direct)),
                "shared {shared}: {}",
                String::from_utf8_lossy(case)
            );
        }
        // An inline request with no end: closed once past 64 KB.
        let long = vec![b'A'; 70 * 1024];
        let through = until_closed(proxy.addr().port(), &long).unwrap();
        assert_eq!(through, b"-ERR Protocol error: too big inline request\r\n");
        proxy.stop().await;
    }
}
