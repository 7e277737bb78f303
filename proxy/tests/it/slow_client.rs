//! A client that pipelines many `GET bigkey` and never reads its socket, in front of a real
//! redis-server: the proxy must stop reading that client (and that client's replies from
//! upstream) once its writes to the client block, instead of buffering the replies. Other
//! clients keep being served, and the proxy's memory stays near one reply's size.
//!
//! This file holds one test on purpose: it reads the peak memory of its own process
//! (`VmHWM` in /proc/self/status), which a test running beside it would disturb.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use lockkit_test_support::RedisServer;

/// The value every GET asks for.
const VALUE: usize = 256 * 1024;
/// GETs the slow client sends: 1 GiB of replies in all, far more than any sane buffer.
const GETS: usize = 4096;
/// What the proxy may add to the process's peak memory while the slow client stalls: a few
/// replies in flight and the runtime's own, nowhere near the 1 GiB a buffering proxy holds.
const BOUND: u64 = 64 * 1024 * 1024;

/// A line of /proc/self/status in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    kb * 1024
}

/// Reads one bulk reply of `len` bytes (header, body, CRLF) whole.
fn read_bulk(s: &mut TcpStream, len: usize) -> Vec<u8> {
    let header = format!("${len}\r\n");
    let mut got = vec![0u8; header.len() + len + 2];
    s.read_exact(&mut got).expect("the whole reply arrives");
    assert!(got.starts_with(header.as_bytes()));
    got
}

/// The server's `total_net_output_bytes`: how much it has written to its clients.
fn server_output_bytes(port: u16) -> u64 {
    let info = redis_cli(port, &["INFO", "stats"], "");
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_net_output_bytes in {info}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_up_no_one_and_memory_stays_bounded() {
    let server = RedisServer::start();
    let sport = server.port();
    let mut direct = raw_conn(sport);
    let mut set = format!("*3\r\n$3\r\nSET\r\n$6\r\nbigkey\r\n${VALUE}\r\n").into_bytes();
    set.extend(std::iter::repeat_n(b'v', VALUE));
    set.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut direct, &set, 5).unwrap(), b"+OK\r\n");

    let (proxy, _observe) = start_observed(&server.url()).await;
    let port = proxy.addr().port();
    let baseline = status_bytes("VmRSS:");

    let outcome = tokio::task::spawn_blocking(move || {
        // The slow client: every GET sent at once, its socket never read.
        let mut slow = raw_conn(port);
        slow.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let gets = b"*2\r\n$3\r\nGET\r\n$6\r\nbigkey\r\n".repeat(GETS);
        slow.write_all(&gets)
            .expect("~120 KB of commands fit in the socket buffers");

        // Wait (bounded) until the server stops writing: the proxy stopped reading its replies,
        // or (a buffering proxy) has taken all of them.
        let all = (GETS * VALUE) as u64;
        let start_out = server_output_bytes(sport);
        let mut last = start_out;
        let mut still = 0;
        let began = Instant::now();
        while still < 5 && began.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(200));
            let now = server_output_bytes(sport);
            // INFO's own replies count too: a few KB per look is standing still.
            if now - last < 64 * 1024 {
                still += 1;
            } else {
                still = 0;
            }
            last = now;
            if now - start_out >= all {
                break;
            }
        }
        let sent_to_proxy = last - start_out;

        // Meanwhile another client is served: round trips, and a big reply read whole.
        let mut other = raw_conn(port);
        for _ in 0..50 {
            assert_eq!(roundtrip(&mut other, b"PING\r\n", 7).unwrap(), b"+PONG\r\n");
        }
        other
            .write_all(b"*2\r\n$3\r\nGET\r\n$6\r\nbigkey\r\n")
            .unwrap();
        let reply = read_bulk(&mut other, VALUE);
        assert!(reply.ends_with(b"vv\r\n"));

        let peak = status_bytes("VmHWM:");
        drop(slow);
        (sent_to_proxy, peak)
    })
    .await
    .unwrap();
    let (sent_to_proxy, peak) = outcome;
    proxy.stop().await;

    let grown = peak.saturating_sub(baseline);
    eprintln!(
        "server wrote {} MiB to the proxy for the slow client; the process's peak grew {} MiB over {} MiB",
        sent_to_proxy >> 20,
        grown >> 20,
        baseline >> 20
    );
    assert!(
        grown < BOUND,
        "the proxy buffered what its client does not read: the peak grew {} MiB (bound {} MiB), the server wrote {} MiB",
        grown >> 20,
        BOUND >> 20,
        sent_to_proxy >> 20
    );
    // The server stopped well before all replies went out: the proxy pushed back.
    assert!(
        sent_to_proxy < (GETS * VALUE) as u64 / 4,
        "server wrote {} MiB",
        sent_to_proxy >> 20
    );
}
