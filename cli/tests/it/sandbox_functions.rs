//! Issue 40's attacks on function libraries and the keyspace through `lockkit lua serve` with
//! several connections, as users run them: FUNCTION RESTORE payloads (cases 4, 14, 15) and
//! the *STORE commands. Where Redis answers, the same request goes to a real redis-server
//! 7.0.15. docs/HARNESS.md "What the sandbox guarantees" names these tests.

use crate::common;

use common::serve::{function_payload, ok, rdb_len, seal_payload, Client, Reply, Serve};
use lockkit_test_support::RedisServer;

fn pong() -> Reply {
    Reply::Status("PONG".into())
}

/// Case 4: a 20 MB FUNCTION RESTORE payload whose LZF string declared 2^40 bytes made the
/// server reserve 256 times the compressed size (5 GB): under an address-space limit it
/// aborted ("memory allocation of 5368704000 bytes failed"). The declared length is now
/// bounded by what the compressed bytes can give and by the Lua heap's cap, and the answer
/// is Redis's.
#[test]
fn a_restore_payload_declaring_a_huge_lzf_length_is_refused_without_reserving_it() {
    // Literal runs of 32 bytes: 20 MB that decompress to 20 MB, declared as 2^40.
    let runs = (20 << 20) / 33;
    let mut data = Vec::with_capacity(runs * 33);
    for _ in 0..runs {
        data.push(0x1f);
        data.extend_from_slice(&[b'a'; 32]);
    }
    let mut body = vec![245, 0xc3];
    rdb_len(&mut body, data.len() as u64);
    rdb_len(&mut body, 1 << 40);
    body.extend_from_slice(&data);
    drop(data);
    let payload = seal_payload(body);
    let request: [&[u8]; 3] = [b"FUNCTION", b"RESTORE", &payload];

    let redis = RedisServer::start();
    let want = Client::to(redis.port()).call(&request);
    assert_eq!(
        want,
        Reply::Error("ERR Failed loading library payload".into())
    );

    let mut serve = Serve::start_limited(3 << 30, &[]);
    let mut a = serve.connect();
    let mut b = serve.connect();
    a.send(&request);
    let got = a.try_reply();
    assert!(serve.alive(), "lua serve aborted: {got:?}");
    assert_eq!(got.expect("a reply"), want);
    assert_eq!(b.call(&[b"PING"]), pong());
}

/// A library that keeps `mb` megabytes in the Lua heap (its top level builds them) and
/// whose function answers that size and how many times it was called: a library loaded again
/// starts counting from 1.
fn keeping_library(name: &str, mb: usize) -> String {
    format!(
        "#!lua name={name}\n\
         local keep = ('x'):rep({mb} * 1024 * 1024)\n\
         local calls = 0\n\
         redis.register_function('{name}_len', function() calls = calls + 1 return {{#keep, calls}} end)"
    )
}

/// Cases 14 and 15: another client's failed FUNCTION RESTORE flushed every library and loaded
/// them again (under the memory cap and the load time limit, dropping any that failed then):
/// every top level ran again, so a library's state was lost. Before, each FCALL after a
/// failed restore answered `[10485760, 1]` (called once: a new library); Redis answers 2, 3,
/// 4. Now the libraries before the failure are put back as they were.
#[test]
fn another_clients_failed_restore_keeps_every_library_as_it_was() {
    let serve = Serve::start(&[]);
    let redis = RedisServer::start();
    let mut owner = serve.connect();
    let mut other = serve.connect();
    let mut redis_owner = Client::to(redis.port());
    let mut redis_other = Client::to(redis.port());
    let size = Reply::Int(10 << 20);
    for name in ["keep_a", "keep_b"] {
        let code = keeping_library(name, 10);
        let load: [&[u8]; 3] = [b"FUNCTION", b"LOAD", code.as_bytes()];
        assert_eq!(owner.call(&load), Reply::Bulk(name.into()));
        assert_eq!(redis_owner.call(&load), Reply::Bulk(name.into()));
        let function = format!("{name}_len");
        let call: [&[u8]; 3] = [b"FCALL", function.as_bytes(), b"0"];
        let first = Reply::Array(vec![size.clone(), Reply::Int(1)]);
        assert_eq!(owner.call(&call), first);
        assert_eq!(redis_owner.call(&call), first);
    }
    let failing = function_payload(&[
        b"#!lua name=fresh\nredis.register_function('fresh', function() return 1 end)",
        b"#!lua name=broken\nlocal x = nil + 1",
    ]);
    for (calls, policy) in (2..).zip(["FLUSH", "APPEND", "REPLACE"]) {
        let restore: [&[u8]; 4] = [b"FUNCTION", b"RESTORE", &failing, policy.as_bytes()];
        let got = other.call(&restore);
        let want = redis_other.call(&restore);
        assert_eq!(got, want, "{policy}");
        assert!(
            matches!(&got, Reply::Error(e) if e.contains("arithmetic on a nil value")),
            "{policy}: {got:?}"
        );
        for name in ["keep_a", "keep_b"] {
            let function = format!("{name}_len");
            let call: [&[u8]; 3] = [b"FCALL", function.as_bytes(), b"0"];
            let want = Reply::Array(vec![size.clone(), Reply::Int(calls)]);
            assert_eq!(redis_owner.call(&call), want);
            assert_eq!(
                owner.call(&call),
                want,
                "{policy}: another client's failed restore loaded library {name} again"
            );
        }
        let fresh: [&[u8]; 3] = [b"FCALL", b"fresh", b"0"];
        assert_eq!(owner.call(&fresh), redis_owner.call(&fresh), "{policy}");
    }
    assert_eq!(other.call(&[b"PING"]), pong());
}

/// Known open from round two: SORT ... STORE with GET patterns, COPY and the other *STORE
/// commands were not bounded before they ran. Under `--maxmemory 64mb`, SORT of a list of
/// 1,000 elements with `GET big*` (a 1 MB value) stored 1,000 copies: 1.1 GB of RSS (and 2.7
/// GB for the reply without STORE); SUNIONSTORE of one set named 300 times copied it 300
/// times. Now what they copy and build is checked against the keyspace's room (twice
/// maxmemory, less what it holds) first, with an OOM error that says so.
#[test]
fn store_commands_are_bounded_before_they_run() {
    let mut serve = Serve::start(&["--maxmemory", "64mb"]);
    let mut c = serve.connect();
    assert_eq!(c.call(&[b"SET", b"big", &vec![b'x'; 1 << 20]]), ok());
    let mut push: Vec<&[u8]> = vec![b"RPUSH", b"list"];
    push.extend(std::iter::repeat_n(b"".as_slice(), 1000));
    assert_eq!(c.call(&push), Reply::Int(1000));
    let oom = |r: Reply, what: &str| match r {
        Reply::Error(e) if e.starts_with("OOM harness: ") => {}
        other => panic!("{what}: {other:?}"),
    };
    oom(
        c.call(&[
            b"SORT", b"list", b"BY", b"nosort", b"GET", b"big*", b"STORE", b"dst",
        ]),
        "SORT STORE",
    );
    oom(
        c.call(&[
            b"SORT", b"list", b"BY", b"nosort", b"GET", b"big*", b"GET", b"#",
        ]),
        "SORT GET",
    );
    assert_eq!(c.call(&[b"EXISTS", b"dst"]), Reply::Int(0));
    let members: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("{i:0100}").into_bytes())
        .collect();
    let mut sadd: Vec<&[u8]> = vec![b"SADD", b"s"];
    sadd.extend(members.iter().map(Vec::as_slice));
    assert_eq!(c.call(&sadd), Reply::Int(10_000));
    let mut union: Vec<&[u8]> = vec![b"SUNIONSTORE", b"u"];
    union.extend(std::iter::repeat_n(b"s".as_slice(), 300));
    oom(c.call(&union), "SUNIONSTORE of one set 300 times");
    // Within the bound they answer as Redis does.
    assert_eq!(
        c.call(&[b"SUNIONSTORE", b"u", b"s", b"s"]),
        Reply::Int(10_000)
    );
    assert_eq!(c.call(&[b"COPY", b"big", b"big2"]), Reply::Int(1));
    assert_eq!(
        c.call(&[
            b"SORT", b"list", b"BY", b"nosort", b"LIMIT", b"0", b"10", b"GET", b"big*", b"STORE",
            b"dst"
        ]),
        Reply::Int(10)
    );
    let (rss, peak) = serve.rss_kib();
    eprintln!("lua serve --maxmemory 64mb: VmRSS {rss} KiB, VmHWM {peak} KiB");
    assert!(peak < 600 * 1024, "VmHWM {peak} KiB");
    assert!(serve.alive());
}

/// Case 13: function libraries used up the Lua memory cap of every other script (one shared
/// heap): two libraries keeping 100 MB each made an unrelated EVAL of 80 MB fail at the
/// 256 MB cap ("exceeded the Lua memory cap of 268435456 bytes"). Redis runs functions in a Lua state of their own; so does the harness now,
/// each state under its own cap. Redis answers the same.
#[test]
fn function_libraries_do_not_use_up_the_memory_of_scripts() {
    let serve = Serve::start(&[]);
    let redis = RedisServer::start();
    let mut c = serve.connect();
    let mut r = Client::to(redis.port());
    // Distinct contents: Lua keeps one copy of equal strings.
    for (name, fill) in [("hold_a", 'a'), ("hold_b", 'b')] {
        let code = format!(
            "#!lua name={name}\n\
             local keep = nil\n\
             redis.register_function('{name}', function()\n\
               if not keep then keep = string.rep('{fill}', 100 * 1024 * 1024) end\n\
               return #keep\n\
             end)"
        );
        let load: [&[u8]; 3] = [b"FUNCTION", b"LOAD", code.as_bytes()];
        assert_eq!(c.call(&load), Reply::Bulk(name.into()));
        assert_eq!(r.call(&load), Reply::Bulk(name.into()));
        let call: [&[u8]; 3] = [b"FCALL", name.as_bytes(), b"0"];
        assert_eq!(c.call(&call), Reply::Int(100 << 20));
        assert_eq!(r.call(&call), Reply::Int(100 << 20));
    }
    let eval: [&[u8]; 3] = [
        b"EVAL",
        b"local s = string.rep('e', 80 * 1024 * 1024) return #s",
        b"0",
    ];
    assert_eq!(r.call(&eval), Reply::Int(80 << 20));
    assert_eq!(
        c.call(&eval),
        Reply::Int(80 << 20),
        "the libraries' memory made an unrelated EVAL fail"
    );
    // The libraries still hold theirs, and a script's failure at the cap leaves them alone.
    let hog: [&[u8]; 3] = [
        b"EVAL",
        b"local t = {} for i = 1, 1e9 do t[i] = string.rep('h', 1024 * 1024) .. i end",
        b"0",
    ];
    match c.call(&hog) {
        Reply::Error(e) => assert!(e.contains("memory cap"), "{e}"),
        other => panic!("{other:?}"),
    }
    for name in ["hold_a", "hold_b"] {
        let call: [&[u8]; 3] = [b"FCALL", name.as_bytes(), b"0"];
        assert_eq!(c.call(&call), Reply::Int(100 << 20));
    }
}
