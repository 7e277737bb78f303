//! Keyspace notifications of `lockkit lua serve` (`notify-keyspace-events`): a subscriber to
//! `__key*@0__:*` must receive the same events, in the same order, from the built binary as
//! from a real redis-server 7.0 for the same writes (commands, a script, a key expiring as
//! the clock passes its deadline).

use crate::common;

use std::thread::sleep;
use std::time::Duration;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

fn call(c: &mut Client, words: &[&str]) -> Reply {
    let a: Vec<&[u8]> = words.iter().map(|s| s.as_bytes()).collect();
    c.call(&a)
}

/// The writes, by connection B; `None`: a pause (redis-server expires keys in the
/// background, a tenth of a second or so after their deadline).
const WRITES: &[Option<&[&str]>] = &[
    Some(&["SET", "s", "1"]),
    Some(&["SET", "s", "2", "EX", "100"]),
    Some(&["SET", "s", "3", "NX"]),
    Some(&["INCR", "n"]),
    Some(&["INCRBYFLOAT", "n", "1.5"]),
    Some(&["APPEND", "s", "x"]),
    Some(&["MSET", "a", "1", "b", "2"]),
    Some(&["DEL", "a", "b", "missing"]),
    Some(&["EXPIRE", "s", "100"]),
    Some(&["PERSIST", "s"]),
    Some(&["RENAME", "s", "t"]),
    Some(&["RPUSH", "l", "1", "2"]),
    Some(&["LPOP", "l"]),
    Some(&["RPOPLPUSH", "l", "m"]),
    Some(&["HSET", "h", "f", "v"]),
    Some(&["HDEL", "h", "f"]),
    Some(&["SADD", "set", "a", "b"]),
    Some(&["SADD", "set", "a"]),
    Some(&["SREM", "set", "a"]),
    Some(&["ZADD", "z", "1", "a", "2", "b"]),
    Some(&["ZINCRBY", "z", "1", "a"]),
    Some(&["ZREM", "z", "a"]),
    Some(&["ZPOPMIN", "z"]),
    Some(&[
        "EVAL",
        "redis.call('SET', KEYS[1], 'v'); redis.call('DEL', KEYS[1])",
        "1",
        "fromscript",
    ]),
    Some(&["EXPIRE", "t", "0"]),
    Some(&["SET", "soon", "v", "PX", "100"]),
    Some(&["DEBUG", "SLEEP", "0.2"]),
    None,
    Some(&["PUBLISH", "done", "x"]),
];

/// Every message the subscriber gets until `done`.
fn run(port: u16) -> (Vec<Reply>, Vec<Reply>) {
    let mut b = Client::to(port);
    assert_eq!(call(&mut b, &["FLUSHALL"]), common::serve::ok());
    let mut replies = vec![
        call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        call(&mut b, &["CONFIG", "GET", "notify-keyspace-events"]),
        call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", "Kx?"]),
    ];
    let mut a = Client::to(port);
    call(&mut a, &["PSUBSCRIBE", "__key*@0__:*"]);
    a.send(&[b"SUBSCRIBE", b"done"]);
    let _ = a.reply();
    for w in WRITES {
        match w {
            Some(words) => replies.push(call(&mut b, words)),
            None => sleep(Duration::from_millis(400)),
        }
    }
    let mut messages = Vec::new();
    loop {
        let m = a.reply();
        let end = matches!(&m, Reply::Array(items) if items.first() == Some(&Reply::Bulk(b"message".to_vec())));
        messages.push(m);
        if end {
            break;
        }
    }
    replies.push(call(
        &mut b,
        &["CONFIG", "SET", "notify-keyspace-events", ""],
    ));
    (replies, messages)
}

#[test]
fn keyspace_events_reach_subscribers_as_redis_sends_them() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let (want_replies, want) = run(redis.port());
    let (got_replies, got) = run(serve.port);
    assert_eq!(got_replies, want_replies, "the replies differ");
    eprintln!("{} messages compared", want.len());
    let differ: Vec<String> = (0..want.len().max(got.len()))
        .filter(|&i| want.get(i) != got.get(i))
        .map(|i| {
            format!(
                "message {i}: redis-server {:?}, lua serve {:?}",
                want.get(i),
                got.get(i)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} messages differ:\n{}",
        differ.len(),
        want.len(),
        differ.join("\n")
    );
}

#[test]
fn an_expired_event_follows_the_virtual_clock() {
    let serve = Serve::start(&[]);
    let mut b = serve.connect();
    call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    let mut a = serve.connect();
    call(&mut a, &["SUBSCRIBE", "__keyevent@0__:expired"]);
    call(&mut b, &["SET", "lock:a", "tok", "PX", "5000"]);
    call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "5001"]);
    assert_eq!(
        a.reply(),
        Reply::Array(vec![
            Reply::Bulk(b"message".to_vec()),
            Reply::Bulk(b"__keyevent@0__:expired".to_vec()),
            Reply::Bulk(b"lock:a".to_vec()),
        ])
    );
}

/// The messages a `PSUBSCRIBE *` subscriber gets after `config` is set and `writes` run, up
/// to the `done` message published last.
fn messages_after(port: u16, config: &str, writes: &[&[&str]]) -> Vec<Reply> {
    let mut b = Client::to(port);
    call(&mut b, &["FLUSHALL"]);
    call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", config]);
    let mut a = Client::to(port);
    call(&mut a, &["PSUBSCRIBE", "*"]);
    for w in writes {
        call(&mut b, w);
    }
    call(&mut b, &["PUBLISH", "done", "x"]);
    let mut messages = Vec::new();
    loop {
        let m = a.reply();
        let end = matches!(&m, Reply::Array(items) if items.get(2) == Some(&Reply::Bulk(b"done".to_vec())));
        if end {
            break;
        }
        messages.push(m);
    }
    call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", ""]);
    messages
}

/// Redis's `stream events test` (unit/pubsub): XGROUP CREATE ... MKSTREAM, CREATECONSUMER,
/// XREADGROUP and XCLAIM creating consumers, DELCONSUMER, XAUTOCLAIM of a known consumer.
#[test]
fn consumer_group_events_reach_subscribers_as_redis_sends_them() {
    let writes: &[&[&str]] = &[
        &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
        &["XGROUP", "CREATECONSUMER", "s", "g", "Bob"],
        &["XGROUP", "CREATECONSUMER", "s", "g", "Bob"],
        &["XADD", "s", "1", "f", "A"],
        &["XREADGROUP", "GROUP", "g", "Alice", "STREAMS", "s", ">"],
        &["XCLAIM", "s", "g", "Mike", "0", "1-0", "FORCE"],
        &["XGROUP", "DELCONSUMER", "s", "g", "Lee"],
        &["XAUTOCLAIM", "s", "g", "Bob", "0", "1-0"],
        &["XGROUP", "DELCONSUMER", "s", "g", "Bob"],
        &["XGROUP", "SETID", "s", "g", "0"],
        &["XGROUP", "DESTROY", "s", "g"],
        &["XTRIM", "s", "MAXLEN", "0"],
        &["XDEL", "s", "1-0"],
    ];
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    for config in ["Kt", "Et"] {
        let want = messages_after(redis.port(), config, writes);
        let got = messages_after(serve.port, config, writes);
        assert_eq!(got, want, "the messages with flags {config}");
    }
}

/// On `--clock wall` a key past its TTL is expired in the background, as Redis's active
/// expiry does (ten times a second), with its `expired` event: nothing has to touch it.
#[test]
fn background_expiry_sends_expired_events_on_the_wall_clock() {
    let redis = RedisServer::start();
    let serve = Serve::start(&["--clock", "wall"]);
    for port in [redis.port(), serve.port] {
        let mut b = Client::to(port);
        call(&mut b, &["FLUSHALL"]);
        call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
        let mut a = Client::to(port);
        call(&mut a, &["PSUBSCRIBE", "*"]);
        call(&mut b, &["PSETEX", "foo", "100", "1"]);
        assert_eq!(
            a.reply(),
            Reply::Array(vec![
                Reply::Bulk(b"pmessage".to_vec()),
                Reply::Bulk(b"*".to_vec()),
                Reply::Bulk(b"__keyevent@0__:expired".to_vec()),
                Reply::Bulk(b"foo".to_vec()),
            ]),
            "the server on port {port}"
        );
        call(&mut b, &["CONFIG", "SET", "notify-keyspace-events", ""]);
    }
}

/// Redis's `evicted events` and `new key test` (unit/pubsub): past `maxmemory` with an
/// `allkeys-*` policy the key is evicted with an `evicted` event; a key a command creates
/// sends `new` (not when it is written again).
#[test]
fn evicted_and_new_events_reach_subscribers_as_redis_sends_them() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let evicting: &[&[&str]] = &[
        &["SET", "foo", "bar"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
        &["CONFIG", "GET", "maxmemory-policy"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    ];
    let creating: &[&[&str]] = &[
        &["SET", "foo", "bar"],
        &["SET", "foo", "baz"],
        &["SET", "bar", "bar"],
        &["RPUSH", "l", "a"],
        &["RPUSH", "l", "b"],
        &["RENAME", "l", "l2"],
    ];
    for (config, writes) in [("Ee", evicting), ("En", creating)] {
        let want = messages_after(redis.port(), config, writes);
        let got = messages_after(serve.port, config, writes);
        assert!(!want.is_empty(), "redis-server sent no {config} event");
        assert_eq!(got, want, "the messages with flags {config}");
    }
    let mut c = serve.connect();
    let mut r = Client::to(redis.port());
    assert_eq!(
        call(&mut c, &["CONFIG", "SET", "maxmemory-policy", "lru"]),
        call(&mut r, &["CONFIG", "SET", "maxmemory-policy", "lru"])
    );
}
