//! Hostile scripts against the offline sandbox, run as a user runs them: `lockkit lua exec`
//! (the built binary, so a crash or a hang of the old code is a failed test, not a dead suite).
//! Where Redis answers, the same lines go to a real redis-server and the printed replies must
//! match. docs/HARNESS.md "What the sandbox guarantees" names these tests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_test_support::RedisServer;

/// What one `lockkit lua exec` run printed and how it ended.
#[derive(Debug)]
struct Run {
    stdout: String,
    stderr: String,
    /// The exit code; `None` when a signal ended it (a crash) or the guard killed it (a hang).
    code: Option<i32>,
    hung: bool,
}

/// Far beyond any answer the sandbox should take: only a hang gets here.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn lockkit(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockkit"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockkit");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut s).ok();
        s
    });
    let start = Instant::now();
    let mut hung = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > HANG_GUARD {
            hung = true;
            child.kill().ok();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        stdout: String::from_utf8_lossy(&out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
        code: status.code(),
        hung,
    }
}

/// `lockkit lua exec` offline on `lines`; fails the test on a crash or a hang.
fn offline(lines: &str) -> Run {
    let run = lockkit(&["lua", "exec", "-"], lines);
    assert!(!run.hung, "lua exec hung; printed so far:\n{}", run.stdout);
    assert!(
        run.code.is_some(),
        "lua exec was killed by a signal (crash); stderr:\n{}",
        run.stderr
    );
    run
}

/// Addresses differ between processes; everything else must not.
fn without_addresses(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        out.push_str("0x?");
        rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
    }
    out.push_str(rest);
    out
}

/// Runs `lines` offline and against a fresh redis-server: the same output, line for line.
fn same_as_redis(lines: &str) -> String {
    let got = offline(lines);
    let server = RedisServer::start();
    let want = lockkit(&["lua", "exec", "--url", &server.url(), "-"], lines);
    assert_eq!(want.code, Some(0), "redis-server run: {}", want.stderr);
    assert_eq!(
        without_addresses(&got.stdout),
        without_addresses(&want.stdout),
        "offline (left) and redis-server (right) differ; stderr: {}",
        got.stderr
    );
    assert_eq!(got.code, Some(0), "{}", got.stderr);
    got.stdout
}

#[test]
fn protected_tables_stay_read_only_through_pairs_next_and_getmetatable() {
    let out = same_as_redis(
        r#"EVAL "local _, R = pairs(redis) R.call = function() return 'hijacked' end return 1" 0
EVAL "local R = select(2, pairs(_G)) R.redis = {} return 1" 0
EVAL "for _, lib in ipairs({'string', 'table', 'math', 'cjson', 'bit', 'struct', 'cmsgpack', 'coroutine'}) do local _, t = pairs(_G[lib]) pcall(function() t.x = 1 end) end return 1" 0
EVAL "local k, v = next(redis) return type(v)" 0
EVAL "getmetatable('').__index = {upper = function() return 'pwn' end} return 1" 0
EVAL "local mt = getmetatable('') mt.__index.upper = function() return 'pwn' end return 1" 0
EVAL "setmetatable(getmetatable(''), {}) return 1" 0
EVAL "rawset(getmetatable(''), '__index', {}) return 1" 0
EVAL "return tostring(getmetatable(redis))" 0
EVAL "return type(getmetatable(_G))" 0
EVAL "getmetatable(_G).__index = function() return 1 end return 1" 0
EVAL "return rawget(getmetatable(''), '__index') == string" 0
EVAL "return redis.call('SET', 'canary', 'written')" 0
GET canary
EVAL "return ('a'):upper()" 0
EVAL "return pcall(undefined_global)" 0
"#,
    );
    // Every later script still writes through the real redis.call and the real string library.
    assert!(
        out.contains("\"written\"") && out.contains("\"A\""),
        "{out}"
    );
    assert!(!out.contains("hijacked") && !out.contains("pwn"), "{out}");
}

#[test]
fn function_libraries_cannot_change_the_environment_of_later_scripts() {
    same_as_redis(
        r##"FUNCTION LOAD "#!lua name=evil\nredis.register_function('f', function() local _, R = pairs(redis) local ok = pcall(function() R.call = function() return 'hijacked' end end) local ok2 = pcall(function() getmetatable('').__index = {} end) return {ok and 1 or 0, ok2 and 1 or 0} end)"
FCALL f 0
EVAL "return redis.call('SET', 'k', 'v')" 0
FCALL f 0
EVAL "return ('x'):rep(3)" 0
"##,
    );
}

#[test]
fn unpack_of_a_huge_range_is_an_error_not_a_crash() {
    same_as_redis(
        r#"EVAL "return select('#', unpack({}, 0, 2^31-1))" 0
EVAL "return {pcall(unpack, {}, 0, 2^31-1)}" 0
EVAL "return {pcall(unpack, {}, -2^31, 2^31-1)}" 0
EVAL "return select('#', unpack({}, 1, 7997))" 0
EVAL "return {pcall(unpack, {}, 1, 7998)}" 0
EVAL "return select('#', unpack({}, 2^40, 2^40+2))" 0
EVAL "return {unpack({1, 2, 3}, '2')}" 0
EVAL "return {pcall(unpack, {}, 'x')}" 0
EVAL "return {pcall(unpack)}" 0
EVAL "local t = {} for i = 1, 7999 do t[i] = i end return redis.call('RPUSH', 'l', unpack(t))" 0
EVAL "local t = {} for i = 1, 7999 do t[i] = i end return redis.pcall('RPUSH', 'l', unpack(t))" 0
"#,
    );
}

#[test]
fn bytecode_is_refused_by_load_with_a_reader_as_by_loadstring() {
    let out = same_as_redis(
        r#"EVAL "local s = string.dump(function() return 1 end) local done = false local f, e = load(function() if done then return nil end done = true return s end) return {type(f), tostring(e)}" 0
EVAL "local s = string.dump(function() return 1 end) local i = 0 local f, e = load(function() i = i + 1 return s:sub(i, i) end) return {type(f), tostring(e)}" 0
EVAL "local f, e = loadstring(string.dump(function() return 1 end)) return {type(f), tostring(e)}" 0
EVAL "local n = 0 return {load(function() n = n + 1 if n == 1 then return 'return ' elseif n == 2 then return 42 end end)()}" 0
EVAL "return {load(function() return {} end)}" 0
EVAL "return {pcall(load, 5)}" 0
"#,
    );
    assert!(out.contains("unexpected symbol near 'char(27)'"), "{out}");
}

#[test]
fn xpcall_handlers_get_what_redis_passes_them() {
    same_as_redis(
        r#"EVAL "return {xpcall(function() redis.call('NOPE') end, function(e) return cjson.encode(e) end)}" 0
EVAL "return {xpcall(function() return math.random(0) end, function(e) return type(e) end)}" 0
EVAL "return {xpcall(function() return bit.tohex() end, function(e) return e end)}" 0
EVAL "return {xpcall(function() return cjson.decode('{') end, function(e) return e end)}" 0
EVAL "return {xpcall(function() error({x = 1}) end, function(e) return type(e) end)}" 0
EVAL "return {xpcall(function() error('x') end, function(e) error('y') end)}" 0
EVAL "return {xpcall(function() return 1, 2 end, print)}" 0
EVAL "return {pcall(xpcall, function() end)}" 0
"#,
    );
}

#[test]
fn math_random_and_bit_tohex_convert_out_of_range_numbers_as_redis_does() {
    same_as_redis(
        r#"EVAL "return math.random(2^40)" 0
EVAL "return math.random(2^40 + 5) <= 5" 0
EVAL "return math.random(2^31)" 0
EVAL "return math.random(3, 2^32 + 1)" 0
EVAL "return bit.tohex(1, -2^31)" 0
EVAL "return bit.tohex(255, 2^31)" 0
EVAL "return bit.tohex(255, -2^31 + 1)" 0
"#,
    );
}

#[test]
fn a_script_cannot_fake_the_harness_stop_signal() {
    let run = offline(
        "EVAL \"return redis.error_reply('ERR harness: script x ran past the time limit of 5000 ms and was stopped')\" 0\n\
         EVAL \"return redis.error_reply('ERR harness: script x exceeded the Lua memory cap of 1 bytes')\" 0\n\
         SET after ok\nGET after\n",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.ends_with("OK\n\"ok\"\n"), "{}", run.stdout);
}

#[test]
fn thousands_of_distinct_scripts_do_not_exhaust_the_lua_binding() {
    // Each cached script used to hold one of mlua's ~8,000 reference slots: the 7,990th
    // distinct EVAL panicked.
    let lines: String = (0..8_100)
        .map(|i| format!("EVAL \"return {i}\" 0\n"))
        .collect();
    let run = offline(&lines);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.ends_with("(integer) 8099\n"), "{}", run.stderr);
}

#[test]
fn thousands_of_string_arguments_end_the_script_not_the_process() {
    let run = offline(
        "EVAL \"local t = {} for i = 1, 7997 do t[i] = 'v' .. i end return redis.call('RPUSH', 'l', unpack(t))\" 0\n\
         EVAL \"local t = {} for i = 1, 7997 do t[i] = 'v' .. i end return {pcall(redis.log, 0, unpack(t))}\" 0\n\
         PING\n",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stdout);
    assert!(lines[0].starts_with("(error) ERR "), "{}", run.stdout);
    assert_eq!(lines[2], "PONG");
}
