//! WATCH / UNWATCH with MULTI / EXEC across connections of `lockkit lua serve`: the same
//! command sequences, sent over two raw RESP connections to the built binary and to a real
//! redis-server 7.0, must get the same replies.

use crate::common;

use std::thread::sleep;
use std::time::Duration;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

/// One step of a scenario: which connection sends what, or a pause (wall time, for keys
/// that expire: the server runs with `--clock wall`).
#[derive(Clone, Copy)]
enum Step {
    A(&'static [&'static str]),
    B(&'static [&'static str]),
    Sleep(u64),
}
use Step::{Sleep, A, B};

/// Scenarios named after what they check; each starts from an empty keyspace.
const SCENARIOS: &[(&str, &[Step])] = &[
    (
        "an unmodified watched key lets EXEC run",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            A(&["MULTI"]),
            A(&["INCR", "x"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a write of another connection fails EXEC",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["SET", "x", "2"]),
            A(&["MULTI"]),
            A(&["INCR", "x"]),
            A(&["EXEC"]),
            A(&["GET", "x"]),
        ],
    ),
    (
        "the same value written again still fails EXEC",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["SET", "x", "1"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "the watcher's own write fails its EXEC",
        &[
            A(&["WATCH", "x"]),
            A(&["SET", "x", "1"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a missing watched key created by another connection fails EXEC",
        &[
            A(&["WATCH", "x"]),
            B(&["RPUSH", "x", "a"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "one key of five modified fails EXEC",
        &[
            A(&["WATCH", "a", "b", "x", "c", "d"]),
            B(&["SET", "x", "2"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "writes that change nothing do not fail EXEC",
        &[
            A(&["SADD", "s", "m"]),
            A(&["WATCH", "s", "missing"]),
            B(&["SADD", "s", "m"]),
            B(&["DEL", "missing"]),
            B(&["GET", "s"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a script of another connection writing the key fails EXEC",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["EVAL", "return redis.call('INCR', KEYS[1])", "1", "x"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "EXPIRE of a watched key fails EXEC",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["EXPIRE", "x", "100"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "another transaction's write fails EXEC",
        &[
            A(&["WATCH", "x"]),
            B(&["MULTI"]),
            B(&["SET", "x", "b"]),
            B(&["EXEC"]),
            A(&["MULTI"]),
            A(&["SET", "x", "a"]),
            A(&["EXEC"]),
            A(&["GET", "x"]),
        ],
    ),
    (
        "EXEC clears the watches, failed or not",
        &[
            A(&["WATCH", "x"]),
            B(&["SET", "x", "1"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            B(&["SET", "x", "2"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["WATCH", "x"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            B(&["SET", "x", "3"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "UNWATCH forgets the watches",
        &[
            A(&["WATCH", "x"]),
            B(&["SET", "x", "1"]),
            A(&["UNWATCH"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["UNWATCH"]),
        ],
    ),
    (
        "DISCARD clears the watches and the dirty flag",
        &[
            A(&["WATCH", "x"]),
            B(&["SET", "x", "1"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["DISCARD"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "WATCH inside MULTI is refused",
        &[
            A(&["MULTI"]),
            A(&["WATCH", "x"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["WATCH"]),
        ],
    ),
    (
        "FLUSHALL touches watched keys that exist",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["FLUSHALL"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "FLUSHALL does not touch watched keys that do not exist",
        &[
            B(&["SET", "y", "1"]),
            A(&["WATCH", "x"]),
            B(&["FLUSHALL"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "FLUSHDB touches watched keys that exist",
        &[
            A(&["SET", "x", "1"]),
            A(&["WATCH", "x"]),
            B(&["FLUSHDB"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a watched key that expires before EXEC fails it",
        &[
            A(&["SET", "x", "1", "PX", "50"]),
            A(&["WATCH", "x"]),
            Sleep(300),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a watched key that expires and is read by another connection fails EXEC",
        &[
            A(&["SET", "x", "1", "PX", "50"]),
            A(&["WATCH", "x"]),
            Sleep(300),
            B(&["GET", "x"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
    (
        "a key already expired when watched, then deleted, does not fail EXEC",
        &[
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
            A(&["SET", "x", "1", "PX", "20"]),
            Sleep(300),
            A(&["WATCH", "x"]),
            B(&["DEL", "x"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]),
        ],
    ),
    (
        "a key already expired when watched, then set again, fails EXEC",
        &[
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
            A(&["SET", "x", "1", "PX", "20"]),
            Sleep(300),
            A(&["WATCH", "x"]),
            B(&["SET", "x", "2"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]),
        ],
    ),
    (
        "a key already expired when watched, then flushed, does not fail EXEC",
        &[
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
            A(&["SET", "x", "1", "PX", "20"]),
            Sleep(300),
            A(&["WATCH", "x"]),
            B(&["FLUSHALL"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
            A(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"]),
        ],
    ),
    (
        "past maxmemory every command queued in MULTI is refused with OOM and EXEC aborts",
        &[
            A(&["SET", "x", "123"]),
            B(&["CONFIG", "SET", "maxmemory", "1"]),
            A(&["MULTI"]),
            A(&["SET", "y", "1"]),
            A(&["GET", "x"]),
            A(&["EXEC"]),
            A(&["MULTI"]),
            A(&["SET", "y", "1"]),
            A(&["DISCARD"]),
            B(&["CONFIG", "SET", "maxmemory", "0"]),
            A(&["EXISTS", "y"]),
            A(&["MULTI"]),
            A(&["SET", "y", "1"]),
            B(&["CONFIG", "SET", "maxmemory", "1"]),
            A(&["LPUSH", "l", "v"]),
            B(&["CONFIG", "SET", "maxmemory", "0"]),
            A(&["SET", "z", "1"]),
            A(&["EXEC"]),
            A(&["EXISTS", "y", "z", "l"]),
        ],
    ),
    (
        "maxmemory reached after queueing: EXEC aborts with OOM if a deny-oom command is queued",
        &[
            A(&["SET", "x", "value"]),
            A(&["MULTI"]),
            A(&["GET", "x"]),
            A(&["PING"]),
            B(&["CONFIG", "SET", "maxmemory", "1"]),
            A(&["EXEC"]),
            B(&["CONFIG", "SET", "maxmemory", "0"]),
            A(&["MULTI"]),
            A(&["SET", "x", "1"]),
            A(&["GET", "x"]),
            B(&["CONFIG", "SET", "maxmemory", "1"]),
            A(&["EXEC"]),
            B(&["CONFIG", "SET", "maxmemory", "0"]),
            A(&["GET", "x"]),
        ],
    ),
    (
        "a transaction refused while queueing still clears the watches",
        &[
            A(&["WATCH", "x"]),
            A(&["MULTI"]),
            A(&["NOSUCHCOMMAND"]),
            A(&["EXEC"]),
            B(&["SET", "x", "1"]),
            A(&["MULTI"]),
            A(&["PING"]),
            A(&["EXEC"]),
        ],
    ),
];

/// The replies of every step of `steps` (pauses give none), with a fresh pair of connections.
fn run(port: u16, steps: &[Step]) -> Vec<Reply> {
    let mut a = Client::to(port);
    let mut b = Client::to(port);
    a.call(&[b"FLUSHALL"]);
    let mut replies = Vec::new();
    for step in steps {
        let (c, argv) = match step {
            A(argv) => (&mut a, argv),
            B(argv) => (&mut b, argv),
            Sleep(ms) => {
                sleep(Duration::from_millis(*ms));
                continue;
            }
        };
        let argv: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
        replies.push(c.call(&argv));
    }
    b.call(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    replies
}

#[test]
fn watch_and_exec_answer_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&["--clock", "wall"]);
    let mut differ = Vec::new();
    for (name, steps) in SCENARIOS {
        let want = run(redis.port(), steps);
        let got = run(serve.port, steps);
        if want != got {
            differ.push(format!(
                "{name}:\n  redis-server: {want:?}\n  lua serve:    {got:?}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} scenarios differ:\n{}",
        differ.len(),
        SCENARIOS.len(),
        differ.join("\n")
    );
}

/// On the frozen virtual clock a watched key expires when LOCKKIT.CLOCK moves past its TTL.
#[test]
fn a_watched_key_expired_by_the_virtual_clock_fails_exec() {
    let serve = Serve::start(&[]);
    let mut a = serve.connect();
    assert_eq!(
        a.call(&[b"SET", b"x", b"1", b"PX", b"1000"]),
        common::serve::ok()
    );
    assert_eq!(a.call(&[b"WATCH", b"x"]), common::serve::ok());
    a.call(&[b"LOCKKIT.CLOCK", b"ADVANCE", b"999"]);
    assert_eq!(a.call(&[b"MULTI"]), common::serve::ok());
    a.call(&[b"PING"]);
    assert_eq!(
        a.call(&[b"EXEC"]),
        Reply::Array(vec![Reply::Status("PONG".into())])
    );
    assert_eq!(a.call(&[b"WATCH", b"x"]), common::serve::ok());
    a.call(&[b"LOCKKIT.CLOCK", b"ADVANCE", b"2"]);
    assert_eq!(a.call(&[b"MULTI"]), common::serve::ok());
    a.call(&[b"PING"]);
    assert_eq!(a.call(&[b"EXEC"]), Reply::Nil);
}

/// The bytes of EXEC's reply after queueing commands that answer nulls of both kinds (a
/// counted LPOP, BLPOP, LMPOP and XREAD answer a null array; GET a null bulk string), in
/// RESP2 and, after HELLO 3, in RESP3.
fn exec_nulls(port: u16, resp3: bool) -> Vec<u8> {
    let mut c = Client::to(port);
    c.call(&[b"DEL", b"none"]);
    if resp3 {
        c.send(&[b"HELLO", b"3"]);
        c.raw_reply();
    }
    c.call(&[b"MULTI"]);
    for argv in [
        &[&b"LPOP"[..], b"none", b"2"][..],
        &[b"BLPOP", b"none", b"0"],
        &[b"LMPOP", b"1", b"none", b"LEFT"],
        &[b"XREAD", b"STREAMS", b"none", b"0"],
        &[b"GET", b"none"],
        &[b"RPOP", b"none"],
    ] {
        c.call(argv);
    }
    c.send(&[b"EXEC"]);
    c.raw_reply()
}

#[test]
fn exec_encodes_nested_null_arrays_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    for resp3 in [false, true] {
        let want = exec_nulls(redis.port(), resp3);
        let got = exec_nulls(serve.port, resp3);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "EXEC's reply (RESP{})",
            if resp3 { 3 } else { 2 }
        );
    }
}

/// Redis's `EXEC and script timeout` (unit/multi): an EXEC that arrives while a script runs
/// past `lua-time-limit` answers `EXECABORT ... BUSY` and leaves the transaction, so that
/// after SCRIPT KILL the connection is out of MULTI and nothing it queued ran.
fn exec_while_busy(port: u16) -> Vec<Reply> {
    let mut a = Client::to(port);
    let mut b = Client::to(port);
    let mut script = Client::to(port);
    b.call(&[b"CONFIG", b"SET", b"lua-time-limit", b"10"]);
    b.call(&[b"SET", b"xx", b"1"]);
    let mut replies = vec![a.call(&[b"MULTI"]), a.call(&[b"INCR", b"xx"])];
    script.send(&[b"EVAL", b"while true do end", b"0"]);
    sleep(Duration::from_millis(200));
    replies.push(a.call(&[b"INCR", b"xx"]));
    replies.push(a.call(&[b"EXEC"]));
    replies.push(b.call(&[b"SCRIPT", b"KILL"]));
    // Redis adds the line the script was stopped at, which the harness does not know.
    let killed = script.reply();
    assert!(
        matches!(&killed, Reply::Error(e) if e.starts_with("ERR Script killed by user with SCRIPT KILL")),
        "the script's reply: {killed:?}"
    );
    replies.push(b.call(&[b"GET", b"xx"]));
    replies.push(a.call(&[b"PING", b"asdf"]));
    b.call(&[b"CONFIG", b"SET", b"lua-time-limit", b"5000"]);
    replies
}

#[test]
fn exec_during_a_busy_script_aborts_the_transaction_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    assert_eq!(exec_while_busy(serve.port), exec_while_busy(redis.port()));
}
