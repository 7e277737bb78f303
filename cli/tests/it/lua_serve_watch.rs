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
