//! `COMMAND`, `COMMAND INFO`, `COMMAND DOCS`, `COMMAND GETKEYS` / `GETKEYSANDFLAGS` on
//! `lockkit lua serve` against a real redis-server 7.0.15, in RESP3 (where sets and maps keep
//! their types): the command table cluster clients route by (redis-py's `RedisCluster` reads
//! `COMMAND` when it starts) is the real server's, field for field.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::serve::Serve;
use lockkit_test_support::RedisServer;

/// A RESP3 value as read off the wire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Value {
    /// `+`, `-`, `:`, `_`, `,`, `#`, `(`: its type byte and line.
    Line(u8, String),
    Bulk(Vec<u8>),
    Array(Vec<Value>),
    Set(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

struct Conn {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// A RESP3 connection (`HELLO 3`) to loopback `port`.
    fn resp3(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("read timeout");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut c = Conn { stream, reader };
        assert!(matches!(c.call(&["HELLO", "3"]), Value::Map(_)));
        c
    }

    fn call(&mut self, argv: &[&str]) -> Value {
        let mut out = format!("*{}\r\n", argv.len()).into_bytes();
        for a in argv {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.stream.write_all(&out).expect("send");
        self.read()
    }

    fn read(&mut self) -> Value {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).expect("a reply");
        assert!(line.len() >= 3, "connection closed");
        let kind = line[0];
        let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let n = || text.parse::<usize>().expect("a length");
        match kind {
            b'$' | b'=' => {
                let mut body = vec![0; n() + 2];
                self.reader.read_exact(&mut body).expect("bulk body");
                body.truncate(body.len() - 2);
                Value::Bulk(body)
            }
            b'*' => Value::Array((0..n()).map(|_| self.read()).collect()),
            b'~' => Value::Set((0..n()).map(|_| self.read()).collect()),
            b'%' => Value::Map((0..n()).map(|_| (self.read(), self.read())).collect()),
            _ => Value::Line(kind, text),
        }
    }
}

fn name_of(entry: &Value) -> Vec<u8> {
    match entry {
        Value::Array(fields) => match &fields[0] {
            Value::Bulk(b) => b.clone(),
            other => panic!("a name, got {other:?}"),
        },
        other => panic!("an entry, got {other:?}"),
    }
}

/// An entry with its subcommands in name order (Redis lists them in its hash table's order).
fn sorted_entry(entry: &Value) -> Value {
    let Value::Array(fields) = entry else {
        return entry.clone();
    };
    let mut fields = fields.clone();
    if let Some(Value::Array(subs)) = fields.get_mut(9) {
        subs.sort_by_key(name_of);
    }
    Value::Array(fields)
}

/// A reply of entries, in name order.
fn sorted_entries(v: Value) -> Vec<Value> {
    let Value::Array(entries) = v else {
        panic!("an array of entries, got {v:?}")
    };
    let mut entries: Vec<Value> = entries.iter().map(sorted_entry).collect();
    entries.sort_by_key(name_of);
    entries
}

fn names(v: Value) -> Vec<Value> {
    let Value::Array(mut names) = v else {
        panic!("an array, got {v:?}")
    };
    names.sort();
    names
}

#[test]
fn command_and_command_info_answer_as_redis_7_0_15_field_for_field() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut real = Conn::resp3(redis.port());
    let mut lua = Conn::resp3(serve.port);
    // Every command, every field: name, arity, flags, first/last/step, ACL categories, tips,
    // key specs (notes included), subcommands.
    let want = sorted_entries(real.call(&["COMMAND"]));
    let got = sorted_entries(lua.call(&["COMMAND"]));
    assert_eq!(got.len(), want.len(), "COMMAND's length");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "COMMAND's entry differs");
    }
    assert_eq!(
        lua.call(&["COMMAND", "COUNT"]),
        real.call(&["COMMAND", "COUNT"])
    );
    assert_eq!(
        names(lua.call(&["COMMAND", "LIST"])),
        names(real.call(&["COMMAND", "LIST"]))
    );
    // By name (any case, `parent|sub` for a subcommand), unknown ones nil, in the order asked.
    let asked = [
        "GET",
        "set",
        "eval",
        "fcall_ro",
        "xreadgroup",
        "sort",
        "migrate",
        "keys",
        "mset",
        "config|get",
        "nope",
        "blmpop",
        "georadius",
        "bitfield",
        "lockkit.clock",
    ];
    let argv: Vec<&str> = ["COMMAND", "INFO"].iter().chain(&asked).copied().collect();
    assert_eq!(
        sorted_entries_or_nil(lua.call(&argv)),
        sorted_entries_or_nil(real.call(&argv))
    );
    assert_eq!(
        sorted_entries(lua.call(&["COMMAND", "INFO"])),
        want,
        "COMMAND INFO without names is COMMAND"
    );
}

/// Entries in the order asked (nil for an unknown name), subcommands in name order.
fn sorted_entries_or_nil(v: Value) -> Vec<Value> {
    let Value::Array(entries) = v else {
        panic!("an array, got {v:?}")
    };
    entries.iter().map(sorted_entry).collect()
}

#[test]
fn getkeys_and_getkeysandflags_answer_as_redis() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut real = Conn::resp3(redis.port());
    let mut lua = Conn::resp3(serve.port);
    let lines: &[&[&str]] = &[
        &["SET", "k", "v"],
        &["SET", "k", "v", "GET"],
        &["GET", "k"],
        &["MSET", "a", "1", "b", "2"],
        &["EVAL", "return 1", "2", "x", "y", "arg"],
        &["EVAL", "return 1", "0"],
        &["FCALL_RO", "f", "1", "x"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "STREAMS",
            "s1",
            "s2",
            ">",
            ">",
        ],
        &["BITFIELD", "b", "GET", "u8", "0"],
        &["BITFIELD", "b", "SET", "u8", "0", "1"],
        &["BITFIELD", "b", "OVERFLOW", "SAT", "GET", "u8", "0"],
        &["ZUNIONSTORE", "d", "2", "z1", "z2"],
        &["LMOVE", "a", "b", "LEFT", "RIGHT"],
        &["PFCOUNT", "h1", "h2"],
        &["GETEX", "k", "PX", "10"],
        &["XADD", "s", "*", "f", "v"],
        &["GEORADIUS", "g", "0", "0", "1", "km", "STORE", "d"],
        &["PING"],
        &["SPUBLISH", "ch", "msg"],
        &["SSUBSCRIBE", "a", "b"],
        &["GET"],
        &["NOPE", "x"],
    ];
    for line in lines {
        for sub in ["GETKEYS", "GETKEYSANDFLAGS"] {
            let argv: Vec<&str> = ["COMMAND", sub]
                .iter()
                .chain(line.iter())
                .copied()
                .collect();
            assert_eq!(lua.call(&argv), real.call(&argv), "{argv:?}");
        }
    }
}

/// The `group` of each command's docs, and of its subcommands'.
fn groups(v: &Value, out: &mut Vec<(Value, Value)>) {
    let Value::Map(pairs) = v else {
        panic!("a map, got {v:?}")
    };
    for (name, doc) in pairs {
        let Value::Map(fields) = doc else {
            panic!("docs as a map")
        };
        for (k, v) in fields {
            match k {
                Value::Bulk(b) if b == b"group" => out.push((name.clone(), v.clone())),
                Value::Bulk(b) if b == b"subcommands" => groups(v, out),
                _ => {}
            }
        }
    }
    out.sort();
}

#[test]
fn command_docs_answers_each_commands_group_and_leaves_unknown_names_out() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut real = Conn::resp3(redis.port());
    let mut lua = Conn::resp3(serve.port);
    for argv in [
        &["COMMAND", "DOCS"][..],
        &["COMMAND", "DOCS", "get", "nope", "CONFIG"][..],
    ] {
        let (mut want, mut got) = (Vec::new(), Vec::new());
        groups(&real.call(argv), &mut want);
        groups(&lua.call(argv), &mut got);
        assert_eq!(got, want, "{argv:?}");
    }
    assert_eq!(
        lua.call(&["COMMAND", "DOCS", "nope"]),
        Value::Map(Vec::new())
    );
}

/// INFO commandstats's lines without the times: `cmdstat_x:calls=..,rejected_calls=..,failed_calls=..`.
fn command_counts(info: common::serve::Reply) -> Vec<String> {
    let common::serve::Reply::Bulk(text) = info else {
        panic!("INFO answers a bulk string, got {info:?}")
    };
    let mut lines: Vec<String> = String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .map(|l| {
            let (name, fields) = l.split_once(':').expect("name:fields");
            let kept: Vec<&str> = fields
                .split(',')
                .filter(|f| !f.starts_with("usec"))
                .collect();
            format!("{name}:{}", kept.join(","))
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn info_commandstats_counts_calls_rejections_and_failures_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut counts = Vec::new();
    for port in [redis.port(), serve.port] {
        let mut c = common::serve::Client::to(port);
        let lines: &[&[&str]] = &[
            &["CONFIG", "RESETSTAT"],
            &["SET", "k", "v"],
            &["GET", "k"],
            &["INCR", "k"],
            &["GET"],
            &["LPUSH", "k", "x"],
            &[
                "EVAL",
                "redis.call('set', 'a', '1') return redis.call('get', 'a')",
                "0",
            ],
            &["EVAL", "return redis.pcall('incr', 'k')", "0"],
            &["EVAL", "return redis.call('incr', 'k')", "0"],
            &["MULTI"],
            &["SET", "m", "1"],
            &["INCR", "m"],
            &["EXEC"],
            &["MULTI"],
            &["GET"],
            &["EXEC"],
            &["WATCH"],
            &["CLIENT", "SETNAME", "x"],
            &["PING"],
            &["NOPE"],
            &["CONFIG", "GET", "maxmemory"],
            &["CONFIG", "NOPE"],
            &["RPUSH", "l", "x"],
            &["BLPOP", "l", "1"],
        ];
        for line in lines {
            let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
            c.call(&argv);
        }
        // The subscribed context refuses GET: a rejected call.
        c.call(&[b"SUBSCRIBE", b"ch"]);
        c.call(&[b"GET", b"k"]);
        c.call(&[b"UNSUBSCRIBE"]);
        counts.push(command_counts(c.call(&[b"INFO", b"commandstats"])));
        // Not in INFO's default sections; `all` has it.
        let info = c.call(&[b"INFO"]);
        assert!(command_counts(info).is_empty());
        assert!(!command_counts(c.call(&[b"INFO", b"all"])).is_empty());
    }
    eprintln!("redis-server: {:#?}", counts[0]);
    assert!(counts[0].contains(&"cmdstat_get:calls=2,rejected_calls=3,failed_calls=0".to_string()));
    assert_eq!(counts[1], counts[0]);
}
