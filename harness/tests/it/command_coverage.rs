//! Issue 15's figure, measured: every command and subcommand in Redis 7.0.15's table
//! (`harness/data/commands-7.0.15.tsv`, which is `COMMAND LIST` with subcommands) is called
//! from a script twice — with no arguments, and with one missing key — on two real servers and
//! on the harness, each call on an empty keyspace and an empty slow log. Calls whose reply differs between the two
//! servers (TIME, INFO, CLIENT LIST...) are left out; of the rest, the test counts how many the
//! harness answers byte for byte as Redis does, prints the figure, and fails if it drops below
//! the floor recorded in docs/HARNESS.md.
//!
//! `LOCKKIT_COVERAGE_LIST=1 cargo test -p lockkit-harness --test it command_coverage:: -- --nocapture`
//! also prints every call the harness answers differently.

use std::time::SystemTime;

use lockkit_harness::tooling::format::format_reply;
use lockkit_harness::tooling::remote::Remote;
use lockkit_harness::Harness;
use lockkit_test_support::RedisServer;

/// The figure after issue 15's work (docs/HARNESS.md); the test fails below it.
const FLOOR: usize = 720;

const SCRIPT: &str = "return redis.call(unpack(ARGV))";

fn names() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/commands-7.0.15.tsv");
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').next().unwrap_or_default().to_string())
        .collect()
}

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn harness_answers_like_redis_for_every_command_called_from_a_script() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let mut remotes: Vec<Remote> = servers
        .iter()
        .map(|s| Remote::connect(&s.url()).expect("connect"))
        .collect();
    let mut h = Harness::new().expect("harness");
    let flush = argv(&["FLUSHALL"]);
    // The slow log is server state that earlier calls leave behind (PFSELFTEST takes tens of
    // milliseconds), as keys are: each call starts without it, as on a fresh server.
    let reset_slowlog = argv(&["SLOWLOG", "RESET"]);
    let (mut stable, mut same) = (0usize, 0usize);
    let mut differ = Vec::new();
    for name in names() {
        let words: Vec<&str> = name.split('|').collect();
        for extra in [None, Some("missing")] {
            let mut call = vec!["EVAL", SCRIPT, "0"];
            call.extend(&words);
            call.extend(extra);
            let call = argv(&call);
            let mut real = Vec::new();
            for r in &mut remotes {
                r.call(&flush).expect("FLUSHALL");
                r.call(&reset_slowlog).expect("SLOWLOG RESET");
                real.push(format_reply(&r.call(&call).expect("server reachable")));
            }
            h.call_argv(&flush);
            h.set_time(SystemTime::now());
            let mine = format_reply(&h.call_argv(&call));
            if real[0] != real[1] {
                continue;
            }
            stable += 1;
            if mine == real[0] {
                same += 1;
            } else {
                differ.push(format!(
                    "{} {}\n  redis:   {}  harness: {}",
                    words.join(" "),
                    extra.unwrap_or(""),
                    real[0],
                    mine
                ));
            }
        }
    }
    if std::env::var_os("LOCKKIT_COVERAGE_LIST").is_some() {
        for d in &differ {
            eprintln!("{d}");
        }
    }
    eprintln!(
        "command coverage: the harness answers {same} of {stable} script calls as Redis 7.0.15 does"
    );
    assert!(
        stable > 600,
        "only {stable} calls were stable across two servers"
    );
    assert!(
        same >= FLOOR,
        "the harness answers {same} of {stable} calls as Redis does, below the floor of {FLOOR}"
    );
}
