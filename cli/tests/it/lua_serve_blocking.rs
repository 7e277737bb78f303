//! Blocking commands across connections of `lockkit lua serve`: the same steps, sent over raw
//! connections to the built binary and to a real redis-server 7.0, must get the same replies
//! (who is woken, in which order, with what); and timeouts that follow the virtual clock,
//! tested without sleeping.

use crate::common;

use std::thread::sleep;
use std::time::Duration;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

/// One step: a connection sends a command and reads its reply, only sends it (it blocks:
/// the next step waits until the server counts it in INFO's `blocked_clients`), or reads the
/// reply it waited for. `UnblockA(how)`: B unblocks A by A's id.
#[derive(Clone, Copy)]
enum Step {
    A(&'static [&'static str]),
    B(&'static [&'static str]),
    SendA(&'static [&'static str]),
    SendC(&'static [&'static str]),
    ReadA,
    ReadC,
    UnblockA(&'static str),
    /// A disconnects (and a new A connects) once the server no longer counts it blocked.
    CloseA,
}
use Step::{CloseA, ReadA, ReadC, SendA, SendC, UnblockA, A, B};

/// Consumer `c` of group `grp` waiting forever for new entries of stream `q`.
const XREADGROUP_C_BLOCKS: &[&str] = &[
    "XREADGROUP",
    "GROUP",
    "grp",
    "c",
    "BLOCK",
    "0",
    "STREAMS",
    "q",
    ">",
];

const SCENARIOS: &[(&str, &[Step])] = &[
    (
        "the first client blocked is served first",
        &[
            SendA(&["BLPOP", "q", "0"]),
            SendC(&["BLPOP", "q", "0"]),
            B(&["RPUSH", "q", "x", "y", "z"]),
            ReadA,
            ReadC,
            B(&["LRANGE", "q", "0", "-1"]),
        ],
    ),
    (
        "BRPOP over several keys wakes on the one written",
        &[
            SendA(&["BRPOP", "k1", "k2", "0"]),
            B(&["LPUSH", "k2", "a", "b"]),
            ReadA,
            B(&["LRANGE", "k2", "0", "-1"]),
        ],
    ),
    (
        "a BLMOVE that wakes feeds the BLPOP blocked on its destination",
        &[
            SendA(&["BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"]),
            SendC(&["BLPOP", "dst", "0"]),
            B(&["RPUSH", "src", "v", "w"]),
            ReadA,
            ReadC,
            B(&["LRANGE", "src", "0", "-1"]),
            B(&["EXISTS", "dst"]),
        ],
    ),
    (
        "BRPOPLPUSH and BLMPOP",
        &[
            SendA(&["BRPOPLPUSH", "s", "d", "0"]),
            B(&["LPUSH", "s", "1"]),
            ReadA,
            B(&["LRANGE", "d", "0", "-1"]),
            SendA(&["BLMPOP", "0", "2", "a", "b", "RIGHT", "COUNT", "2"]),
            B(&["RPUSH", "b", "1", "2", "3"]),
            ReadA,
            B(&["LRANGE", "b", "0", "-1"]),
        ],
    ),
    (
        "BZPOPMIN, BZPOPMAX and BZMPOP",
        &[
            SendA(&["BZPOPMIN", "z", "0"]),
            B(&["ZADD", "z", "2", "two", "1", "one", "3", "three"]),
            ReadA,
            SendA(&["BZPOPMAX", "y", "v", "0"]),
            B(&["ZADD", "x", "1", "a"]),
            B(&["ZADD", "v", "5", "five", "4", "four"]),
            ReadA,
            A(&["BZMPOP", "0", "3", "y", "v", "z", "MIN", "COUNT", "5"]),
            SendA(&["BZMPOP", "0", "1", "w", "MAX", "COUNT", "2"]),
            B(&["ZADD", "w", "1", "p", "2", "q", "3", "r"]),
            ReadA,
            B(&["ZRANGE", "w", "0", "-1", "WITHSCORES"]),
        ],
    ),
    (
        "what answers at once: data there, errors, MULTI, scripts, WAIT",
        &[
            A(&["RPUSH", "l", "1", "2"]),
            A(&["BLPOP", "none", "l", "0"]),
            A(&["BRPOP", "l", "0.5"]),
            A(&["SET", "s", "x"]),
            A(&["BLPOP", "s", "0"]),
            A(&["BLPOP", "l", "-1"]),
            A(&["BLPOP", "l", "abc"]),
            A(&["BLMOVE", "a", "b", "UP", "LEFT", "0"]),
            A(&["BLMPOP", "0", "0", "l", "LEFT"]),
            A(&["BLMPOP", "0", "1", "l", "UP"]),
            A(&["BLMPOP", "0", "1", "l", "LEFT", "COUNT", "0"]),
            A(&["BLMPOP", "0", "3", "l", "LEFT"]),
            A(&["BZMPOP", "0", "1", "z", "MIN", "COUNT", "1", "COUNT", "2"]),
            A(&["BZMPOP", "-1", "1", "z", "MIN"]),
            A(&["LMPOP", "1", "none", "LEFT"]),
            A(&["RPUSH", "m", "1", "2", "3"]),
            A(&["LMPOP", "2", "none", "m", "LEFT", "COUNT", "2"]),
            A(&["ZADD", "zz", "1", "a"]),
            A(&["ZMPOP", "1", "zz", "MAX"]),
            A(&["ZMPOP", "1", "zz", "MAX"]),
            A(&["MULTI"]),
            A(&["BLPOP", "empty", "0"]),
            A(&["BLMOVE", "empty", "x", "LEFT", "LEFT", "0"]),
            A(&["EXEC"]),
            A(&[
                "EVAL",
                "return redis.call('BLPOP', KEYS[1], 0)",
                "1",
                "empty",
            ]),
            A(&[
                "EVAL",
                "return redis.call('BZMPOP', 0, 1, KEYS[1], 'MIN')",
                "1",
                "empty",
            ]),
            A(&["WAIT", "0", "0"]),
            A(&["WAIT", "0", "100"]),
            A(&["WAIT", "x", "0"]),
            A(&["WAIT", "0", "-1"]),
        ],
    ),
    (
        "CLIENT UNBLOCK: TIMEOUT, ERROR, nobody blocked",
        &[
            SendA(&["BLPOP", "q", "0"]),
            UnblockA("TIMEOUT"),
            ReadA,
            SendA(&["BLMOVE", "q", "r", "LEFT", "LEFT", "0"]),
            UnblockA("TIMEOUT"),
            ReadA,
            SendA(&["BZPOPMIN", "q", "0"]),
            UnblockA("ERROR"),
            ReadA,
            UnblockA("TIMEOUT"),
            B(&["CLIENT", "UNBLOCK", "x"]),
            B(&["CLIENT", "UNBLOCK", "1", "SOMETIME"]),
            B(&["RPUSH", "q", "still here"]),
            B(&["LRANGE", "q", "0", "-1"]),
        ],
    ),
    (
        "XREAD BLOCK: woken by XADD, $ is the last ID at the call, every reader served",
        &[
            B(&["XADD", "s", "1-1", "f", "v"]),
            A(&["XREAD", "BLOCK", "0", "STREAMS", "s", "0"]),
            SendA(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]),
            SendC(&[
                "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "t", "s", "$", "1-1",
            ]),
            B(&["XADD", "s", "2-1", "f", "w"]),
            ReadA,
            ReadC,
            SendA(&["XREAD", "BLOCK", "0", "STREAMS", "t", "s", "$", "$"]),
            B(&["SET", "other", "x"]),
            B(&["XADD", "t", "1-5", "g", "x"]),
            ReadA,
            B(&["XLEN", "s"]),
        ],
    ),
    (
        "XREADGROUP BLOCK: consumers served in order, each new entry once",
        &[
            B(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            SendA(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "alice",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ]),
            SendC(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "bob",
                "COUNT",
                "1",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ]),
            B(&["XADD", "q", "1-1", "a", "1"]),
            ReadA,
            B(&["XADD", "q", "2-1", "b", "2"]),
            ReadC,
            B(&["XPENDING", "q", "grp"]),
            A(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "alice",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                "0",
            ]),
            SendA(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "alice",
                "NOACK",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ]),
            B(&["XADD", "q", "3-1", "c", "3"]),
            ReadA,
            B(&["XPENDING", "q", "grp"]),
        ],
    ),
    (
        "XREAD and XREADGROUP BLOCK answering at once: MULTI, scripts, errors",
        &[
            A(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            A(&["MULTI"]),
            A(&["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]),
            A(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ]),
            A(&["EXEC"]),
            A(&[
                "EVAL",
                "return redis.pcall('XREAD', 'BLOCK', 0, 'STREAMS', KEYS[1], '$')",
                "1",
                "q",
            ]),
            A(&["XREAD", "BLOCK", "-1", "STREAMS", "q", "$"]),
            A(&["XREAD", "BLOCK", "x", "STREAMS", "q", "$"]),
            A(&[
                "XREADGROUP",
                "GROUP",
                "nogrp",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                ">",
            ]),
            A(&[
                "XREADGROUP",
                "GROUP",
                "grp",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "q",
                "$",
            ]),
            A(&["XADD", "q", "1-1", "a", "1"]),
        ],
    ),
    (
        "XREAD and XREADGROUP BLOCK: CLIENT UNBLOCK",
        &[
            A(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            SendA(&["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]),
            UnblockA("TIMEOUT"),
            ReadA,
            SendA(XREADGROUP_C_BLOCKS),
            UnblockA("ERROR"),
            ReadA,
            B(&["XADD", "q", "1-1", "a", "1"]),
            B(&["XPENDING", "q", "grp"]),
        ],
    ),
    (
        "XREADGROUP BLOCK: its stream deleted or overwritten, its group destroyed",
        &[
            B(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            SendA(XREADGROUP_C_BLOCKS),
            B(&["DEL", "q"]),
            ReadA,
            B(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            SendA(XREADGROUP_C_BLOCKS),
            B(&["SET", "q", "x"]),
            ReadA,
            B(&["DEL", "q"]),
            B(&["XGROUP", "CREATE", "q", "grp", "$", "MKSTREAM"]),
            SendA(XREADGROUP_C_BLOCKS),
            B(&["XGROUP", "DESTROY", "q", "grp"]),
            B(&["XGROUP", "CREATE", "q", "other", "$"]),
            B(&["XADD", "q", "1-1", "a", "1"]),
            ReadA,
            SendA(&["XREAD", "BLOCK", "0", "STREAMS", "q", "$"]),
            B(&["DEL", "q"]),
            B(&["XADD", "q", "1-2", "a", "2"]),
            ReadA,
        ],
    ),
    (
        "a blocked client that disconnects takes nothing",
        &[
            SendA(&["BLPOP", "q", "0"]),
            CloseA,
            B(&["RPUSH", "q", "kept"]),
            B(&["LRANGE", "q", "0", "-1"]),
        ],
    ),
];

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn call(c: &mut Client, words: &[&str]) -> Reply {
    let a = argv(words);
    c.call(&a.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

fn send(c: &mut Client, words: &[&str]) {
    let a = argv(words);
    c.send(&a.iter().map(Vec::as_slice).collect::<Vec<_>>());
}

fn client_id(c: &mut Client) -> String {
    match call(c, &["CLIENT", "ID"]) {
        Reply::Int(id) => id.to_string(),
        other => panic!("CLIENT ID answered {other:?}"),
    }
}

/// Waits until the server counts `n` blocked clients (INFO clients).
fn until_blocked(c: &mut Client, n: usize) {
    let started = std::time::Instant::now();
    loop {
        let Reply::Bulk(info) = call(c, &["INFO", "clients"]) else {
            panic!("INFO clients answered no text");
        };
        let text = String::from_utf8_lossy(&info).into_owned();
        let blocked = text
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        if blocked == Some(n) {
            return;
        }
        assert!(
            started.elapsed() < common::serve::STUCK,
            "blocked_clients stays {blocked:?}, not {n}"
        );
        sleep(Duration::from_millis(2));
    }
}

fn run(port: u16, steps: &[Step]) -> Vec<Reply> {
    let mut b = Client::to(port);
    assert_eq!(call(&mut b, &["FLUSHALL"]), common::serve::ok());
    let mut a = Client::to(port);
    let mut c = Client::to(port);
    let mut a_id = client_id(&mut a);
    let mut replies = Vec::new();
    // Sent and not yet read: the clients blocked.
    let mut waiting = 0;
    for step in steps {
        let r = match *step {
            A(w) => call(&mut a, w),
            B(w) => call(&mut b, w),
            SendA(w) | SendC(w) => {
                send(
                    if matches!(step, SendA(_)) {
                        &mut a
                    } else {
                        &mut c
                    },
                    w,
                );
                waiting += 1;
                until_blocked(&mut b, waiting);
                continue;
            }
            ReadA | ReadC => {
                waiting -= 1;
                if matches!(step, ReadA) {
                    a.reply()
                } else {
                    c.reply()
                }
            }
            UnblockA(how) => call(&mut b, &["CLIENT", "UNBLOCK", &a_id, how]),
            CloseA => {
                drop(std::mem::replace(&mut a, Client::to(port)));
                waiting -= 1;
                until_blocked(&mut b, waiting);
                a_id = client_id(&mut a);
                continue;
            }
        };
        replies.push(r);
    }
    replies
}

#[test]
fn blocking_commands_wake_and_answer_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut differ = Vec::new();
    for (name, steps) in SCENARIOS {
        let want = run(redis.port(), steps);
        let got = run(serve.port, steps);
        for i in 0..want.len().max(got.len()) {
            if want.get(i) != got.get(i) {
                differ.push(format!(
                    "{name}, reply {i}: redis-server {:?}, lua serve {:?}",
                    want.get(i),
                    got.get(i)
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} replies differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn timeouts_follow_the_virtual_clock_without_sleeping() {
    let serve = Serve::start(&[]);
    let mut a = serve.connect();
    let mut b = serve.connect();
    // 5 s timeout: 4.999 s later it still waits (the push reaches it), at 5 s it times out.
    send(&mut a, &["BLPOP", "q", "5"]);
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "4999"]),
        Reply::Int(_)
    ));
    assert_eq!(call(&mut b, &["RPUSH", "q", "x"]), Reply::Int(1));
    assert_eq!(
        a.reply(),
        Reply::Array(vec![Reply::Bulk(b"q".to_vec()), Reply::Bulk(b"x".to_vec())])
    );
    send(&mut a, &["BLPOP", "q", "5"]);
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "5000"]),
        Reply::Int(_)
    ));
    assert_eq!(a.reply(), Reply::Nil);
    // DEBUG SLEEP moves the clock too; a BLMOVE times out with a null bulk string.
    send(&mut a, &["BLMOVE", "q", "r", "LEFT", "LEFT", "0.25"]);
    until_blocked(&mut b, 1);
    assert_eq!(
        call(&mut b, &["DEBUG", "SLEEP", "0.3"]),
        common::serve::ok()
    );
    assert_eq!(a.reply(), Reply::Nil);
    // A timeout of 0 waits whatever the clock does.
    send(&mut a, &["BZPOPMIN", "z", "0"]);
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "86400000"]),
        Reply::Int(_)
    ));
    assert_eq!(call(&mut b, &["ZADD", "z", "1", "m"]), Reply::Int(1));
    assert_eq!(
        a.reply(),
        Reply::Array(vec![
            Reply::Bulk(b"z".to_vec()),
            Reply::Bulk(b"m".to_vec()),
            Reply::Bulk(b"1".to_vec())
        ])
    );
}

#[test]
fn with_the_wall_clock_a_timeout_passes_by_itself() {
    let serve = Serve::start(&["--clock", "wall"]);
    let mut a = serve.connect();
    let started = std::time::Instant::now();
    assert_eq!(call(&mut a, &["BLPOP", "q", "0.2"]), Reply::Nil);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(call(&mut a, &["PING"]), Reply::Status("PONG".into()));
}

#[test]
fn xread_block_times_out_on_the_virtual_clock() {
    let serve = Serve::start(&[]);
    let mut a = serve.connect();
    let mut b = serve.connect();
    // BLOCK 5000: 4999 ms later the XADD still reaches it; at 5000 ms it times out.
    send(&mut a, &["XREAD", "BLOCK", "5000", "STREAMS", "s", "$"]);
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "4999"]),
        Reply::Int(_)
    ));
    assert!(matches!(
        call(&mut b, &["XADD", "s", "1-1", "f", "v"]),
        Reply::Bulk(_)
    ));
    let entry = Reply::Array(vec![
        Reply::Bulk(b"1-1".to_vec()),
        Reply::Array(vec![Reply::Bulk(b"f".to_vec()), Reply::Bulk(b"v".to_vec())]),
    ]);
    assert_eq!(
        a.reply(),
        Reply::Array(vec![Reply::Array(vec![
            Reply::Bulk(b"s".to_vec()),
            Reply::Array(vec![entry.clone()])
        ])])
    );
    call(&mut b, &["XGROUP", "CREATE", "s", "g", "$"]);
    send(
        &mut a,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "5000",
            "STREAMS",
            "s",
            ">",
        ],
    );
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "5000"]),
        Reply::Int(_)
    ));
    assert_eq!(a.reply(), Reply::Nil);
    // BLOCK 0 waits whatever the clock does.
    send(&mut a, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    until_blocked(&mut b, 1);
    assert!(matches!(
        call(&mut b, &["LOCKKIT.CLOCK", "ADVANCE", "86400000"]),
        Reply::Int(_)
    ));
    assert!(matches!(
        call(&mut b, &["XADD", "s", "2-1", "f", "w"]),
        Reply::Bulk(_)
    ));
    assert!(matches!(a.reply(), Reply::Array(_)));
}

#[test]
fn xread_block_with_the_wall_clock_times_out_by_itself() {
    let serve = Serve::start(&["--clock", "wall"]);
    let mut a = serve.connect();
    let started = std::time::Instant::now();
    assert_eq!(
        call(&mut a, &["XREAD", "BLOCK", "200", "STREAMS", "s", "$"]),
        Reply::Nil
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(call(&mut a, &["PING"]), Reply::Status("PONG".into()));
}
