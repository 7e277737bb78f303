//! Stream reads and consumer groups in `lockkit lua serve` (XREAD, XREADGROUP, XGROUP, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM, XINFO): the same command sequences, sent to the built binary
//! and to a real redis-server 7.0, must get the same replies. Idle times and Redis's radix-tree
//! node count are set to 0 by a script on both sides (wall time and Redis's internals).

use crate::common;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

/// XPENDING's extended form with each entry's idle time zeroed.
const PENDING: &str = "local r = redis.call('xpending', KEYS[1], ARGV[1], '-', '+', 100) for _, e in ipairs(r) do e[3] = 0 end return r";
/// XINFO CONSUMERS with each consumer's idle time zeroed.
const CONSUMERS: &str = "local r = redis.call('xinfo', 'consumers', KEYS[1], ARGV[1]) for _, c in ipairs(r) do c[6] = 0 end return r";
/// XINFO STREAM without radix-tree-nodes.
const STREAM: &str = "local r = redis.call('xinfo', 'stream', KEYS[1]) r[6] = 0 return r";

const SETUP: &[&str] = &["XADD", "s", "1-1", "a", "1"];

/// Scenarios named after what they check; each starts from an empty keyspace.
const SCENARIOS: &[(&str, &[&[&str]])] = &[
    (
        "XGROUP CREATE: MKSTREAM, $, BUSYGROUP, ENTRIESREAD, errors",
        &[
            &["XGROUP", "CREATE", "s", "g", "$"],
            &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
            &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
            &["XADD", "s", "1-1", "a", "1"],
            &["XADD", "s", "2-1", "b", "2"],
            &["XGROUP", "CREATE", "s", "g2", "$"],
            &["XGROUP", "CREATE", "s", "g3", "0"],
            &["XGROUP", "CREATE", "s", "g4", "-"],
            &["XGROUP", "CREATE", "s", "g6", "1", "ENTRIESREAD", "5"],
            &["XGROUP", "CREATE", "s", "g7", "1", "ENTRIESREAD", "-2"],
            &["XGROUP", "CREATE", "s", "g8", "1", "BOGUS"],
            &["XINFO", "GROUPS", "s"],
            &["SET", "str", "x"],
            &["XGROUP", "CREATE", "str", "g", "$"],
        ],
    ),
    (
        "XGROUP SETID, CREATECONSUMER, DELCONSUMER, DESTROY",
        &[
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XGROUP", "CREATE", "s", "g", "0"],
            &["XGROUP", "SETID", "s", "g", "1-1", "ENTRIESREAD", "1"],
            &["XGROUP", "SETID", "s", "nog", "0"],
            &["XGROUP", "SETID", "nokey", "g", "0"],
            &["XGROUP", "CREATECONSUMER", "s", "g", "c1"],
            &["XGROUP", "CREATECONSUMER", "s", "g", "c1"],
            &["XGROUP", "CREATECONSUMER", "s", "nog", "c1"],
            &["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"],
            &["XGROUP", "DELCONSUMER", "s", "g", "zz"],
            &["XGROUP", "DELCONSUMER", "s", "g", "c2"],
            &["XINFO", "GROUPS", "s"],
            &["XGROUP", "DESTROY", "s", "nog"],
            &["XGROUP", "DESTROY", "s", "g"],
            &["XINFO", "GROUPS", "s"],
        ],
    ),
    (
        "XREAD: from an ID, $, COUNT, several streams, errors",
        &[
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XADD", "t", "5-0", "c", "3"],
            &["XREAD", "STREAMS", "s", "0"],
            &["XREAD", "COUNT", "1", "STREAMS", "s", "t", "0", "0"],
            &["XREAD", "STREAMS", "s", "$"],
            &["XREAD", "STREAMS", "s", "t", "2-1", "0"],
            &["XREAD", "STREAMS", "nokey", "0"],
            &["XREAD", "STREAMS", "s", "t", "0"],
            &["XREAD", "COUNT", "x", "STREAMS", "s", "0"],
            &["XREAD", "FOO", "STREAMS", "s", "0"],
            &["XREAD", "STREAMS", "s", ">"],
            &["XREAD", "STREAMS", "s", "+"],
            &["XREAD", "BLOCK", "10", "STREAMS", "s", "0"],
        ],
    ),
    (
        "XREADGROUP: new entries, history, NOACK, NOGROUP, $",
        &[
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XADD", "s", "3-1", "c", "3"],
            &["XGROUP", "CREATE", "s", "g", "0"],
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c1",
                "COUNT",
                "1",
                "STREAMS",
                "s",
                ">",
            ],
            &["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"],
            &["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"],
            &["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0"],
            &["XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", "0"],
            &["XDEL", "s", "2-1"],
            &["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "0"],
            &["XADD", "s", "4-1", "d", "4"],
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c3",
                "NOACK",
                "STREAMS",
                "s",
                ">",
            ],
            &["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"],
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$"],
            &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "t", ">"],
            &["EVAL", PENDING, "1", "s", "g"],
            &["XPENDING", "s", "g"],
            &["EVAL", CONSUMERS, "1", "s", "g"],
            &["XINFO", "GROUPS", "s"],
        ],
    ),
    (
        "XACK and XPENDING",
        &[
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XGROUP", "CREATE", "s", "g", "0"],
            &["XPENDING", "s", "g"],
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c1",
                "COUNT",
                "1",
                "STREAMS",
                "s",
                ">",
            ],
            &["XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"],
            &["XPENDING", "s", "g"],
            &["XPENDING", "s", "nog"],
            &["XPENDING", "nokey", "g"],
            &["XPENDING", "s", "g", "-", "+", "10", "c9"],
            &["XPENDING", "s", "g", "IDLE", "999999", "-", "+", "10"],
            &["XPENDING", "s", "g", "-", "+"],
            &["XACK", "s", "g", "1-1", "9-9"],
            &["XACK", "s", "g", "bad"],
            &["XACK", "s", "nog", "2-1"],
            &["XACK", "nokey", "g", "2-1"],
            &["XPENDING", "s", "g"],
            &["EVAL", PENDING, "1", "s", "g"],
        ],
    ),
    (
        "XCLAIM and XAUTOCLAIM",
        &[
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XADD", "s", "3-1", "c", "3"],
            &["XGROUP", "CREATE", "s", "g", "0"],
            &["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"],
            &["XCLAIM", "s", "g", "c2", "0", "1-1"],
            &["XCLAIM", "s", "g", "c3", "0", "2-1", "JUSTID"],
            &["XCLAIM", "s", "g", "c3", "0", "9-9"],
            &["XCLAIM", "s", "g", "c3", "3600000", "3-1"],
            &[
                "XCLAIM",
                "s",
                "g",
                "c4",
                "0",
                "3-1",
                "RETRYCOUNT",
                "7",
                "LASTID",
                "5-0",
            ],
            &["XCLAIM", "s", "g", "c4", "0", "1-1", "BOGUS"],
            &["XCLAIM", "s", "nog", "c4", "0", "1-1"],
            &["EVAL", PENDING, "1", "s", "g"],
            &["XDEL", "s", "2-1"],
            &["XAUTOCLAIM", "s", "g", "c5", "0", "0", "COUNT", "1"],
            &["XAUTOCLAIM", "s", "g", "c5", "0", "0", "COUNT", "10"],
            &["XAUTOCLAIM", "s", "g", "c6", "0", "0", "JUSTID"],
            &["XAUTOCLAIM", "s", "g", "c6", "0", "0", "COUNT", "0"],
            &["XAUTOCLAIM", "s", "nog", "c6", "0", "0"],
            &["EVAL", PENDING, "1", "s", "g"],
            &["XINFO", "GROUPS", "s"],
        ],
    ),
    (
        "XINFO STREAM and errors",
        &[
            &["XINFO", "STREAM", "nokey"],
            SETUP,
            &["XADD", "s", "2-1", "b", "2"],
            &["XGROUP", "CREATE", "s", "g", "$"],
            &["XDEL", "s", "1-1"],
            &["EVAL", STREAM, "1", "s"],
            &["XINFO", "GROUPS", "s"],
            &["XINFO", "CONSUMERS", "s", "nog"],
            &["XTRIM", "s", "MAXLEN", "0"],
            &["EVAL", STREAM, "1", "s"],
            &["XINFO", "GROUPS", "s"],
        ],
    ),
    (
        "scripts: XREAD and XREADGROUP run, BLOCK is refused",
        &[
            &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
            &[
                "EVAL",
                "return redis.pcall('xread','STREAMS','s','$')",
                "1",
                "s",
            ],
            &[
                "EVAL",
                "return redis.pcall('xread','BLOCK',0,'STREAMS','s','$')",
                "1",
                "s",
            ],
            &[
                "EVAL",
                "return redis.pcall('xreadgroup','group','g','c','STREAMS','s','>')",
                "1",
                "s",
            ],
            &[
                "EVAL",
                "return redis.pcall('xreadgroup','group','g','c','BLOCK',0,'STREAMS','s','>')",
                "1",
                "s",
            ],
        ],
    ),
];

fn run(port: u16, steps: &[&[&str]]) -> Vec<Reply> {
    let mut c = Client::to(port);
    c.call(&[b"FLUSHALL"]);
    steps
        .iter()
        .map(|argv| {
            let argv: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
            c.call(&argv)
        })
        .collect()
}

#[test]
fn consumer_groups_answer_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let mut differ = Vec::new();
    for (name, steps) in SCENARIOS {
        let want = run(redis.port(), steps);
        let got = run(serve.port, steps);
        if want != got {
            let steps_differing: Vec<String> = want
                .iter()
                .zip(&got)
                .zip(steps.iter())
                .filter(|((w, g), _)| w != g)
                .map(|((w, g), s)| {
                    format!("  {s:?}\n    redis-server: {w:?}\n    lua serve:    {g:?}")
                })
                .collect();
            differ.push(format!("{name}:\n{}", steps_differing.join("\n")));
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
