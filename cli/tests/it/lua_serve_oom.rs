//! `CONFIG SET maxmemory` and `min-replicas-to-write` in `lockkit lua serve`: the same command
//! sequences, sent to the built binary and to a real redis-server 7.0, must get the same
//! replies (deny-oom and write commands, scripts with and without flags, functions, FUNCTION
//! LOAD).

use crate::common;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

const F_WRITE: &str =
    "#!lua name=w\nredis.register_function('w', function(k) return redis.call('set', k[1], '1') end)";
const F_ALLOW: &str = "#!lua name=a\nredis.register_function{function_name='a', callback=function(k) return redis.call('set', k[1], '2') end, flags={'allow-oom'}}";
const F_RO: &str = "#!lua name=r\nredis.register_function{function_name='r', callback=function() return 'hello' end, flags={'no-writes'}}";

/// Scenarios named after what they check; each starts from an empty keyspace and ends with
/// `CONFIG SET maxmemory 0` and `min-replicas-to-write 0`.
const SCENARIOS: &[(&str, &[&[&str]])] = &[
    (
        "deny-oom commands are refused past maxmemory, reads and deletes are not",
        &[
            &["SET", "x", "123"],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["CONFIG", "GET", "maxmemory"],
            &["SET", "y", "1"],
            &["LPUSH", "l", "a"],
            &["GET", "x"],
            &["DEL", "x"],
            &["CONFIG", "SET", "maxmemory", "0"],
            &["CONFIG", "GET", "maxmemory"],
            &["SET", "y", "1"],
        ],
    ),
    (
        "a script without flags is refused at its first deny-oom command, reads run",
        &[
            &["SET", "x", "123"],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["EVAL", "redis.call('set','x',1) return 1", "1", "x"],
            &["EVAL", "return redis.call('get','x')", "1", "x"],
            &[
                "EVAL",
                "local t = redis.pcall('set','x','y') return t['err']",
                "1",
                "x",
            ],
            &["EVAL_RO", "return redis.call('get','x')", "1", "x"],
        ],
    ),
    (
        "a script with a shebang is refused before it runs unless allow-oom or no-writes",
        &[
            &["SET", "x", "123"],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["EVAL", "#!lua flags=\nreturn 1", "0"],
            &["EVAL", "#!lua\nreturn 1", "0"],
            &[
                "EVAL",
                "#!lua flags=allow-oom\nredis.call('set','x',1) return 1",
                "1",
                "x",
            ],
            &["GET", "x"],
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('get','x')",
                "1",
                "x",
            ],
            &[
                "EVAL_RO",
                "#!lua flags=no-writes\nreturn redis.call('get','x')",
                "1",
                "x",
            ],
        ],
    ),
    (
        "functions: FUNCTION LOAD is refused, FCALL unless allow-oom or no-writes",
        &[
            &["FUNCTION", "FLUSH"],
            &["FUNCTION", "LOAD", F_WRITE],
            &["FUNCTION", "LOAD", F_ALLOW],
            &["FUNCTION", "LOAD", F_RO],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["FUNCTION", "LOAD", "REPLACE", F_WRITE],
            &["FCALL", "w", "1", "k"],
            &["FCALL", "a", "1", "k"],
            &["FCALL", "r", "0"],
            &["FCALL_RO", "r", "0"],
            &["GET", "k"],
            &["FUNCTION", "DELETE", "w"],
            &["CONFIG", "SET", "maxmemory", "0"],
            &["FUNCTION", "FLUSH"],
        ],
    ),
    (
        "a memory value with a unit, and a bad one",
        &[
            &["CONFIG", "SET", "maxmemory", "100mb"],
            &["CONFIG", "GET", "maxmemory"],
            &["SET", "y", "1"],
            &["CONFIG", "SET", "maxmemory", "1kb"],
            &["CONFIG", "GET", "maxmemory"],
            &["SET", "y", "1"],
            &["CONFIG", "SET", "maxmemory", "lots"],
        ],
    ),
    (
        "min-replicas-to-write: writes and scripts that may write answer NOREPLICAS",
        &[
            &["SET", "x", "some value"],
            &["CONFIG", "SET", "min-replicas-to-write", "1"],
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('get','x')",
                "1",
                "x",
            ],
            &["EVAL", "return redis.call('get','x')", "1", "x"],
            &["EVAL", "#!lua\nreturn redis.call('get','x')", "1", "x"],
            &["EVAL", "return redis.call('set','x',1)", "1", "x"],
            &["SET", "y", "1"],
            &["GET", "x"],
            &["CONFIG", "SET", "min-replicas-to-write", "x"],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["SET", "y", "1"],
            &["CONFIG", "SET", "min-replicas-to-write", "0"],
            &["CONFIG", "SET", "maxmemory", "0"],
            &["SET", "y", "1"],
        ],
    ),
];

fn run(port: u16, steps: &[&[&str]]) -> Vec<Reply> {
    let mut c = Client::to(port);
    c.call(&[b"FLUSHALL"]);
    let replies = steps
        .iter()
        .map(|argv| {
            let argv: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
            c.call(&argv)
        })
        .collect();
    c.call(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    c.call(&[b"CONFIG", b"SET", b"min-replicas-to-write", b"0"]);
    replies
}

#[test]
fn maxmemory_answers_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
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
