//! `DEBUG PROTOCOL` and RESP3's types (booleans, big numbers, verbatim strings, sets, maps,
//! doubles, null) through `lockkit lua serve`: called directly and from scripts under
//! `redis.setresp(2)` and `(3)`, by RESP2 and RESP3 clients, the bytes on the wire must be
//! redis-server 7.0's (as Redis's own unit/scripting reads them in raw mode).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::serve::Serve;
use lockkit_test_support::RedisServer;

const TYPES: [&str; 12] = [
    "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib", "verbatim",
    "true", "false",
];

fn command(argv: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", argv.len()).into_bytes();
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends `argv` then PING, and answers the raw bytes before PING's reply.
fn raw(s: &mut TcpStream, argv: &[&str]) -> String {
    let mut out = command(argv);
    out.extend_from_slice(&command(&["PING"]));
    s.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !got.ends_with(b"+PONG\r\n") {
        assert!(Instant::now() < deadline, "no reply to {argv:?}");
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed after {argv:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got.truncate(got.len() - 7);
    String::from_utf8_lossy(&got).into_owned()
}

/// Every call, with its raw reply, from a client speaking `proto`.
fn replies(port: u16, proto: u8) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    raw(&mut s, &["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1"]);
    // HELLO's own reply names the server: not compared.
    raw(&mut s, &["HELLO", &proto.to_string()]);
    let mut out = Vec::new();
    let mut call = |argv: &[&str]| {
        let r = raw(&mut s, argv);
        out.push(format!("{argv:?} -> {r:?}"));
    };
    for t in TYPES {
        if !(t == "attrib" && proto == 3) {
            call(&["DEBUG", "PROTOCOL", t]);
        }
        for resp in [2, 3] {
            let script =
                format!("redis.setresp({resp}); return redis.call('debug', 'protocol', '{t}')");
            call(&["EVAL", &script, "0"]);
        }
    }
    call(&["DEBUG", "PROTOCOL", "nosuch"]);
    call(&["EVAL", "return {big_number='123\\r\\n123'}", "0"]);
    call(&[
        "EVAL",
        "return {verbatim_string={format='txt', string='a\\nb'}}",
        "0",
    ]);
    call(&["EVAL", "redis.setresp(3) return true", "0"]);
    call(&["EVAL", "redis.setresp(3) return false", "0"]);
    call(&["EVAL", "return {set={a=true}}", "0"]);
    raw(&mut s, &["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0"]);
    out
}

#[test]
fn resp3_types_reach_clients_as_redis_sends_them() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut differ = Vec::new();
    for proto in [2, 3] {
        let want = replies(redis.port(), proto);
        let got = replies(serve.port, proto);
        for (w, g) in want.iter().zip(&got) {
            if w != g {
                differ.push(format!(
                    "RESP{proto}\n  redis-server: {w}\n  lua serve:    {g}"
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} calls differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// Stream reads, from a client speaking `proto`: raw replies (RESP3 gets maps).
fn stream_reads(port: u16, proto: u8) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    raw(&mut s, &["HELLO", &proto.to_string()]);
    raw(&mut s, &["FLUSHALL"]);
    let calls: &[&[&str]] = &[
        &["XADD", "s", "1-1", "a", "1"],
        &["XADD", "t", "1-2", "b", "2"],
        &["XGROUP", "CREATE", "s", "g", "0"],
        &["XREAD", "STREAMS", "s", "t", "0", "0"],
        &["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "0"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"],
        &["XREAD", "STREAMS", "nokey", "0"],
        &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"],
        &[
            "EVAL",
            "return redis.call('XREAD', 'STREAMS', KEYS[1], 0)",
            "1",
            "s",
        ],
    ];
    calls
        .iter()
        .map(|argv| format!("{argv:?} -> {:?}", raw(&mut s, argv)))
        .collect()
}

#[test]
fn stream_reads_answer_maps_to_resp3_clients_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut differ = Vec::new();
    for proto in [2, 3] {
        let want = stream_reads(redis.port(), proto);
        let got = stream_reads(serve.port, proto);
        for (w, g) in want.iter().zip(&got) {
            if w != g {
                differ.push(format!(
                    "RESP{proto}\n  redis-server: {w}\n  lua serve:    {g}"
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} calls differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
