//! The sandbox under random hostile scripts and command lines (proptest; cargo fuzz needs a
//! nightly toolchain): no panic, no hang, bounded memory, and the environment intact for the
//! next script. A kept corpus of attacks (`tests/corpus/sandbox/`, one command line per line)
//! is replayed first. Budget: a few seconds in `cargo test` (48 generated cases, each script
//! stopped after 100 ms).

use std::path::Path;
use std::time::Duration;

use lockkit_harness::tooling::run::{exec, CommandTarget};
use lockkit_harness::{Harness, HarnessOptions, Reply};
use proptest::prelude::*;

/// Keyspace limit of the fuzzed harness.
const KEYSPACE: usize = 1 << 20;

fn harness() -> Harness {
    Harness::with_options(
        HarnessOptions::new()
            .time_limit(Duration::from_millis(100))
            .memory_limit(16 << 20)
            .keyspace_limit(KEYSPACE),
    )
    .unwrap()
}

/// Lua statements that poke at every class of attack; a script joins a few of them.
const FRAGMENTS: &[&str] = &[
    "local t = {} for i = 1, 100 do t[i] = i end",
    "redis.call('SET', KEYS[1], ARGV[1])",
    "redis.pcall('INCRBYFLOAT', 'f', ARGV[1])",
    "pcall(unpack, {}, 0, 2^31 - 1)",
    "pcall(unpack, {}, -2^31, 2^31 - 1)",
    "local _, R = pairs(redis) pcall(function() R.call = nil end)",
    "local _, G = pairs(_G) pcall(function() G.redis = nil end)",
    "pcall(function() getmetatable('').__index = {} end)",
    "pcall(function() getmetatable(_G).__index = nil end)",
    "pcall(load(function() return string.dump(function() end) end) or error)",
    "xpcall(function() error({}) end, function(e) return e end)",
    "xpcall(function() error(ARGV[1]) end, function(e) return #e end)",
    "pcall(string.rep, 'x', 2^30)",
    "pcall(string.rep, ARGV[1], 2^31 - 1)",
    "pcall(cjson.encode, {1, 'a', {b = 2}, KEYS})",
    "pcall(cjson.decode, ARGV[1])",
    "pcall(cmsgpack.pack, KEYS, ARGV)",
    "pcall(cmsgpack.unpack, ARGV[1])",
    "redis.log(redis.LOG_WARNING, ARGV[1], string.rep('z', 10000))",
    "pcall(redis.call, 'APPEND', 'a', string.rep('y', 100000))",
    "pcall(redis.call, 'RPUSH', 'l', unpack(KEYS))",
    "if ARGV[1] == 'spin' then while true do end end",
    "if ARGV[1] == 'spin' then xpcall(function() while true do end end, function() while true do end end) end",
    "pcall(error, setmetatable({}, {__index = function() return 'ERR x' end}))",
    "pcall(math.random, 2^40)",
    "pcall(bit.tohex, 1, -2^31)",
    "local s = string.rep('q', 100000) local t = {} for i = 1, 50 do t[i] = s end pcall(cjson.encode, t)",
    "return {1, 'two', {3}, redis.call('GET', KEYS[1])}",
    "return redis.call('LRANGE', 'l', 0, -1)",
    "error(setmetatable({err = 'ERR custom'}, {__index = function() return 'x' end}))",
    "pcall(string.find, string.rep('a', 3000), string.rep('a*', 20) .. 'b')",
    "for w in string.gmatch(ARGV[1], '(%w*)') do redis.pcall('RPUSH', 'l', w) end",
    "pcall(string.gsub, string.rep(ARGV[1], 100), '%w+', function(w) return w:rep(2) end)",
    // Coroutines: a tree that catches its own stop, yields across values, errors inside.
    "local function n(d) return function() while ARGV[1] == 'spin' do if d == 0 then while true do end end pcall(coroutine.resume, coroutine.create(n(d - 1))) end end end pcall(coroutine.wrap(n(3)))",
    "local co = coroutine.create(function(a) local b = coroutine.yield(a) return b, ARGV[1] end) coroutine.resume(co, 1) coroutine.resume(co, KEYS)",
    "pcall(coroutine.wrap(function() redis.call('NOPE') end))",
    "local co = coroutine.wrap(function() for i = 1, 1e9 do coroutine.yield(i) end end) for i = 1, 3000 do co() end",
    // Encoders on a table shared many times (a DAG), and on one string named many times.
    "local t = {} for i = 1, 12 do t = {t, t, t} end pcall(cjson.encode, t)",
    "local t = {} for i = 1, 12 do t = {t, t, t} end pcall(cmsgpack.pack, t)",
    "local s = string.rep('k', 1000000) local t = {} for i = 1, 40 do t[i] = {[s] = ARGV[1]} end pcall(cjson.encode, t) pcall(cmsgpack.pack, t)",
    "local s = string.rep('s', 1000000) local t = {} for i = 1, 40 do t[i] = s end pcall(struct.pack, string.rep('c0', 40), unpack(t)) redis.pcall('RPUSH', 'l', unpack(t)) redis.log(3, unpack(t))",
    "for i = 1, 20 do redis.sha1hex(string.rep(ARGV[1], 100000)) end",
    // Keyspace patterns: deep nesting, backtracking, classes.
    "redis.pcall('KEYS', string.rep('*a', 3000))",
    "redis.pcall('KEYS', string.rep('*' .. ARGV[1], 20) .. 'b')",
    "redis.pcall('SCAN', 0, 'MATCH', string.rep('*[a-' .. ARGV[1], 50))",
    // Read-only tables through the table library, huge positions, the collector.
    "pcall(table.insert, _G, ARGV[1]) pcall(table.insert, string, 1, ARGV[1]) pcall(table.sort, redis)",
    "local t = {ARGV[1]} pcall(table.insert, t, -2^31 + 8, 1) pcall(table.remove, t, -2^31)",
    "collectgarbage('stop') collectgarbage('setpause', 1000)",
    "pcall(function() for _ in string.gfind(string.rep('a', 3000), string.rep('a?', 3000)) do end end)",
    "error(setmetatable({}, {__index = function() error(ARGV[1]) end}))",
];

/// Arguments that reach the edges of number parsing and sizes.
const ARGS: &[&str] = &[
    "spin",
    "1e-9223372036854775808",
    "1.5e-9223372036854775808",
    "2e9223372036854775807",
    "abc",
    "5",
    "-0",
    "{\"a\":[1,2,{\"b\":null}]}",
    "\u{1b}LuaQ",
    "",
];

fn script() -> impl Strategy<Value = String> {
    prop::collection::vec(0..FRAGMENTS.len(), 1..5).prop_map(|ix| {
        ix.into_iter()
            .map(|i| FRAGMENTS[i])
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..ARGS.len()).prop_map(|i| ARGS[i].to_string()),
        "[a-z0-9]{0,6}",
    ]
}

/// One command: an EVAL of a generated script, or a plain command on the same keys.
fn command() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        3 => (script(), arg(), arg()).prop_map(|(s, k, a)| vec!["EVAL".into(), s, "1".into(), format!("k{k}"), a]),
        1 => (arg(), arg()).prop_map(|(k, v)| vec!["SET".into(), format!("k{k}"), v]),
        1 => (arg(), arg()).prop_map(|(k, v)| vec!["APPEND".into(), format!("k{k}"), v.repeat(1000)]),
        1 => arg().prop_map(|v| vec!["INCRBYFLOAT".into(), "f".into(), v]),
        1 => arg().prop_map(|v| vec!["RPUSH".into(), "l".into(), v]),
        1 => Just(vec!["FLUSHALL".into()]),
        1 => glob().prop_map(|p| vec!["KEYS".into(), p]),
        1 => glob().prop_map(|p| vec!["SCAN".into(), "0".into(), "MATCH".into(), p]),
    ]
}

/// Keyspace patterns: stars, classes, escapes and letters of the keys, some repeated to depth.
fn glob() -> impl Strategy<Value = String> {
    prop_oneof![
        "[*?ak0-9\\\\\\[\\]^-]{0,16}",
        ("[*?ak\\[\\]]{1,4}", 1..3000usize).prop_map(|(p, n)| p.repeat(n)),
    ]
}

/// The environment every script starts from: the real `redis.call`, string methods and
/// read-only globals.
fn assert_intact(h: &mut Harness) {
    let r = h.eval(
        "local ok = pcall(function() undefined_global = 1 end) return {type(redis.call), ('ab'):upper(), tostring(ok), redis.call('PING')['ok'], tostring(rawget(_G, 1))}",
        &[],
        &[],
    );
    let want = Reply::Array(vec![
        Reply::Bulk(b"function".to_vec()),
        Reply::Bulk(b"AB".to_vec()),
        Reply::Bulk(b"false".to_vec()),
        Reply::Bulk(b"PONG".to_vec()),
        Reply::Bulk(b"nil".to_vec()),
    ]);
    assert_eq!(r, want, "the environment changed");
}

fn keyspace_bytes(h: &Harness) -> usize {
    h.snapshot()
        .iter()
        .map(|(k, v)| k.len() + format!("{:?}", v.value).len())
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_scripts_never_panic_hang_or_grow_without_bound(cmds in prop::collection::vec(command(), 1..6)) {
        let mut h = harness();
        for c in &cmds {
            let reply = h.call(c);
            // Errors are fine; a panic fails the test, a hang never returns.
            let _ = reply;
        }
        // Twice the limit (a script that already wrote may go on to it) plus one command.
        prop_assert!(keyspace_bytes(&h) < 4 * KEYSPACE, "{} bytes", keyspace_bytes(&h));
        assert_intact(&mut h);
    }
}

/// Replays every kept attack: it runs to its end or to a harness stop, never panics, and the
/// next script finds the environment intact.
#[test]
fn kept_corpus_of_attacks_replays_without_harm() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/sandbox");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut target = CommandTarget::Offline(Box::new(harness()));
        let mut out = Vec::new();
        // A harness stop is an Err from exec: fine; a panic is not.
        let _ = exec(
            &mut target,
            &text,
            &path.display().to_string(),
            &dir,
            &mut out,
        );
        if let CommandTarget::Offline(h) = &mut target {
            assert_intact(h);
        }
        seen += 1;
    }
    assert!(seen >= 10, "the corpus holds {seen} files");
}
