//! The same bytes get the same replies through the proxy as from redis-server direct: every
//! stream of lockkit-resp's differential corpus (the quirks of Redis's reader: `\r`-ended
//! length lines, unchecked trailers, NULs, empty requests, protocol errors), and the commands
//! the proxy carries out or follows itself (`CLIENT REPLY`, `REPLCONF`, QUIT inside MULTI, the
//! refusals Redis gives before it runs a command, an HTTP request), with sharing on and off.

use crate::common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use lockkit_proxy::{Proxy, ProxyOptions, Upstream};
use lockkit_test_support::RedisServer;

/// Streams whose replies depend on no connection's number or the clock.
const STREAMS: &[&[u8]] = &[
    b"CLIENT REPLY SKIP\r\nPING a\r\nPING b\r\n",
    b"CLIENT REPLY SKIP\r\n*0\r\nPING a\r\n",
    b"CLIENT REPLY SKIP\r\n\r\nPING a\r\n",
    b"CLIENT REPLY OFF\r\nPING\r\nCLIENT REPLY SKIP\r\nCLIENT REPLY ON\r\nPING a\r\n",
    b"CLIENT REPLY SKIP\r\nCLIENT REPLY ON\r\nPING a\r\n",
    b"CLIENT REPLY SKIP\r\nNOSUCH\r\nPING a\r\n",
    b"CLIENT REPLY SKIP\r\nCLIENT REPLY SKIP\r\nPING a\r\nPING b\r\n",
    b"CLIENT REPLY x\r\nCLIENT REPLY\r\nPING\r\n",
    b"SET same:k v\r\nCLIENT REPLY OFF\r\nGET same:k\r\nCLIENT REPLY ON\r\nGET same:k\r\n",
    b"CLIENT REPLY OFF\r\n*1\r\nfoo\r\n",
    b"CLIENT REPLY SKIP\r\nSUBSCRIBE ch\r\nPING\r\n",
    b"CLIENT REPLY OFF\r\nSUBSCRIBE ch\r\nPING\r\nCLIENT REPLY ON\r\nPING\r\n",
    b"MULTI\r\nCLIENT REPLY OFF\r\nPING\r\nEXEC\r\nPING x\r\n",
    b"REPLCONF GETACK *\r\nPING\r\nECHO x\r\n",
    b"REPLCONF ACK 0\r\nPING\r\n",
    b"REPLCONF x\r\nPING\r\n",
    b"MULTI\r\nSET same:q 1\r\nQUIT\r\nPING\r\n",
    b"GET same:none\r\nQUIT\r\nPING\r\n",
    b"\"\"\r\nnosuch a b\r\nCONFIG NOSUCH\r\nCONFIG\r\nGET\r\nCLIENT NOSUCH x\r\n",
    b"*1\r\n$4\r\nPOST\r\nPING\r\n",
    b"SUBSCRIBE ch\r\nPING\r\nUNSUBSCRIBE\r\nPING\r\n",
    b"SUBSCRIBE ch\r\nCONFIG GET maxmemory\r\n",
    b"WATCH same:w\r\nMULTI\r\nGET same:w\r\nEXEC\r\nDISCARD\r\nEXEC\r\nMULTI\r\nMULTI\r\nDISCARD\r\n",
    b"CONFIG GET maxmemory\r\nMULTI\r\nCONFIG GET maxmemory\r\nEXEC\r\n",
    b"SELECT 1\r\nSET same:db x\r\nRESET\r\nGET same:db\r\n",
    b"AUTH x\r\nPING\r\n",
    b"SCRIPT DEBUG NO\r\nPING\r\n",
    b"*3\r\n$4\r\nECHO\r\n$1\r\na\r\n$1\r\nb\r\nECHO\r\n",
    b"MULTI\r\n\"\"\r\nSET same:m 1\r\nEXEC\r\nGET same:m\r\n",
    b"MULTI\r\nAUTH\r\nGET same:m2\r\nEXEC\r\nMULTI\r\nGET\r\nEXEC\r\n",
];

/// What the server at `port` answers `bytes` on a new connection, until it closes (then
/// `<closed>` is appended) or stays quiet for 250 ms.
fn exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut c = raw_conn(port);
    c.write_all(bytes).expect("the peer takes the bytes");
    c.set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => {
                got.extend_from_slice(b"<closed>");
                return got;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                got.extend_from_slice(b"<closed>");
                return got;
            }
            Err(_) => return got,
        }
    }
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../resp/tests/corpus");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("lockkit-resp's corpus")
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bytes_get_the_same_replies_through_the_proxy() {
    let server = RedisServer::start();
    let mut streams: Vec<(String, Vec<u8>)> = corpus();
    assert!(streams.len() > 20);
    streams.extend(
        STREAMS
            .iter()
            .map(|s| (s.escape_ascii().to_string(), s.to_vec())),
    );
    for shared in [1, 0] {
        let proxy = Proxy::start_with(
            "127.0.0.1:0",
            Upstream::from_url(&server.url()).unwrap(),
            vec![],
            ProxyOptions::new().shared_connections(shared),
        )
        .await
        .unwrap();
        let (direct, through) = (server.port(), proxy.addr().port());
        let streams = streams.clone();
        // Every stream on connections of its own, all at once (no two share a key).
        let differences = tokio::task::spawn_blocking(move || {
            let runs: Vec<_> = streams
                .into_iter()
                .map(|(name, bytes)| {
                    std::thread::spawn(move || {
                        let want = exchange(direct, &bytes);
                        let got = exchange(through, &bytes);
                        (want != got).then(|| {
                            format!(
                                "{name}: direct {:?}, through the proxy {:?}",
                                String::from_utf8_lossy(&want),
                                String::from_utf8_lossy(&got)
                            )
                        })
                    })
                })
                .collect();
            runs.into_iter()
                .filter_map(|r| r.join().unwrap())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        assert!(differences.is_empty(), "shared {shared}: {differences:#?}");
        proxy.stop().await;
    }
}
