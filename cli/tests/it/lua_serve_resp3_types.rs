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

/// Values as `unit/type/list`'s `List ziplist of various encodings` builds them (every
/// listpack integer and string width), a small list, and strings short, integer and long.
fn fill_for_dump(c: &mut common::serve::Client) {
    c.call(&[b"FLUSHALL"]);
    let big = [b"x".repeat(31), b"x".repeat(8191), b"x".repeat(65535)];
    let mut argv: Vec<&[u8]> = vec![
        b"LPUSH",
        b"k",
        b"127",
        b"32767",
        b"2147483647",
        b"9223372036854775808",
        b"0",
        b"12",
        b"-5",
        b"-300",
    ];
    argv.extend(big.iter().map(Vec::as_slice));
    c.call(&argv);
    c.call(&[b"RPUSH", b"small", b"a", b"1", b"bc"]);
    c.call(&[b"SET", b"s", b"hello"]);
    c.call(&[b"SET", b"n", b"12345"]);
    c.call(&[b"SET", b"neg", b"-70000"]);
    c.call(&[b"SET", b"long", &b"ab".repeat(100)]);
}

/// DUMP and RESTORE in Redis's format (RDB version 10, CRC-64): a payload either server
/// writes restores on the other to the same value; small values dump to the same bytes;
/// RESTORE's errors (existing key, bad payload) are Redis's.
#[test]
fn dump_payloads_restore_across_lua_serve_and_redis_server() {
    use common::serve::{Client, Reply};
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut r = Client::to(redis.port());
    let mut l = Client::to(serve.port);
    fill_for_dump(&mut r);
    fill_for_dump(&mut l);
    for key in ["s", "n", "neg", "small"] {
        let key = key.as_bytes();
        assert_eq!(
            l.call(&[b"DUMP", key]),
            r.call(&[b"DUMP", key]),
            "DUMP {key:?}"
        );
    }
    for key in ["k", "small", "s", "n", "neg", "long"] {
        let key = key.as_bytes();
        let read = |c: &mut Client, k: &[u8]| match c.call(&[b"TYPE", k]) {
            Reply::Status(t) if t == "list" => c.call(&[b"LRANGE", k, b"0", b"-1"]),
            _ => c.call(&[b"GET", k]),
        };
        let want = read(&mut r, key);
        for redis_first in [true, false] {
            let (from, to) = if redis_first {
                (&mut r, &mut l)
            } else {
                (&mut l, &mut r)
            };
            let Reply::Bulk(payload) = from.call(&[b"DUMP", key]) else {
                panic!("DUMP {key:?} answers a payload");
            };
            assert_eq!(
                to.call(&[b"RESTORE", b"copy", b"0", &payload, b"REPLACE"]),
                common::serve::ok()
            );
            assert_eq!(read(to, b"copy"), want, "RESTORE of {key:?}");
        }
    }
    let Reply::Bulk(mut payload) = r.call(&[b"DUMP", b"s"]) else {
        panic!("DUMP s");
    };
    for c in [&mut r, &mut l] {
        assert_eq!(
            c.call(&[b"RESTORE", b"s", b"0", &payload]),
            Reply::Error("BUSYKEY Target key name already exists.".into())
        );
        assert_eq!(
            c.call(&[b"RESTORE", b"t", b"5000", &payload]),
            common::serve::ok()
        );
        assert!(matches!(c.call(&[b"PTTL", b"t"]), Reply::Int(ms) if ms > 0 && ms <= 5000));
    }
    let last = payload.len() - 1;
    payload[last] ^= 1;
    assert_eq!(
        l.call(&[b"RESTORE", b"u", b"0", &payload]),
        r.call(&[b"RESTORE", b"u", b"0", &payload])
    );
    assert_eq!(l.call(&[b"DUMP", b"none"]), Reply::Nil);
}
