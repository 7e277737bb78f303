//! The Rust API and the harness-only behaviour (time limit, memory cap, clock, log), which a
//! real server cannot be compared against.

use std::time::Duration;

use lockkit_harness::{Harness, HarnessOptions, Reply};

fn lua(name: &str) -> String {
    format!("{}/../lua/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn runaway_script_is_stopped_by_the_time_limit() {
    let opts = HarnessOptions::new().time_limit(Duration::from_millis(100));
    let mut h = Harness::with_options(opts).unwrap();
    let r = h.eval("while true do end", &[], &[]);
    match &r {
        Reply::Error(e) => assert!(e.contains("time limit of 100 ms"), "{e}"),
        other => panic!("expected an error, got {other:?}"),
    }
    // pcall cannot swallow it, and the harness keeps working afterwards.
    let r = h.eval(
        "while true do pcall(function() while true do end end) end",
        &[],
        &[],
    );
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("time limit")),
        "{r:?}"
    );
    assert_eq!(h.eval("return 1", &[], &[]), Reply::Int(1));
}

#[test]
fn memory_hungry_script_hits_the_cap() {
    // A time limit far above the work: on a loaded machine a debug build may take longer
    // than Redis's 5 s to fill 8 MiB, and this test is about the memory cap.
    let opts = HarnessOptions::new()
        .memory_limit(8 << 20)
        .time_limit(Duration::from_secs(120));
    let mut h = Harness::with_options(opts).unwrap();
    let r = h.eval(
        "local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 100) .. i end return #t",
        &[],
        &[],
    );
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("memory cap")),
        "{r:?}"
    );
    assert_eq!(h.eval("return 2", &[], &[]), Reply::Int(2));
}

#[test]
fn redis_calls_leave_the_memory_cap_and_the_time_limit_in_force() {
    // `redis.call` lifts the cap while its command runs and its reply is built: the cap must
    // be back after every way a call ends (a reply, an error raised or answered, arguments
    // refused), so the allocation after it is stopped.
    let opts = HarnessOptions::new()
        .memory_limit(8 << 20)
        .time_limit(Duration::from_secs(120));
    let mut h = Harness::with_options(opts).unwrap();
    for call in [
        "redis.call('SET', KEYS[1], 'v')",
        "redis.pcall('HGET', KEYS[1], 'f')",
        "pcall(redis.call, 'HGET', KEYS[1], 'f')",
        "redis.pcall('SET', {}, 1)",
        "pcall(redis.call)",
    ] {
        let script = format!(
            "{call} local t = {{}} for i = 1, 1e8 do t[i] = string.rep('x', 100) .. i end return #t"
        );
        let r = h.eval(&script, &["k"], &[]);
        assert!(
            matches!(&r, Reply::Error(e) if e.contains("memory cap")),
            "{call}: {r:?}"
        );
    }
    // A reply that would take the heap past the cap stops the script, pcall or not.
    // (Three different values: Lua keeps one copy of equal strings.)
    for (i, c) in ["a", "b", "c"].iter().enumerate() {
        let big = c.repeat(3 << 20);
        let key = format!("big{i}");
        assert_eq!(
            h.call(&[&b"SET"[..], key.as_bytes(), big.as_bytes()]),
            Reply::ok()
        );
    }
    for call in ["redis.call", "redis.pcall"] {
        let script =
            format!("local t = {{}} for i = 1, 3 do t[i] = {call}('GET', KEYS[i]) end return #t");
        let r = h.eval(&script, &["big0", "big1", "big2"], &[]);
        assert!(
            matches!(&r, Reply::Error(e) if e.contains("memory cap")),
            "{call}: {r:?}"
        );
    }
    // Past the time limit a call is refused, and nothing of the script catches that.
    let opts = HarnessOptions::new().time_limit(Duration::from_millis(100));
    let mut h = Harness::with_options(opts).unwrap();
    for script in [
        "while true do redis.pcall('PING') end",
        "while true do pcall(redis.call, 'GET', 'k') end",
    ] {
        let r = h.eval(script, &[], &[]);
        assert!(
            matches!(&r, Reply::Error(e) if e.contains("time limit of 100 ms")),
            "{script}: {r:?}"
        );
    }
    assert_eq!(
        h.eval("return redis.call('PING')", &[], &[]),
        Reply::Status("PONG".into())
    );
}

#[test]
fn options_are_validated() {
    let e = Harness::with_options(HarnessOptions::new().time_limit(Duration::ZERO)).unwrap_err();
    assert!(e.to_string().contains("time_limit"), "{e}");
    let e = Harness::with_options(HarnessOptions::new().memory_limit(10)).unwrap_err();
    assert!(e.to_string().contains("memory_limit"), "{e}");
}

#[test]
fn clock_is_frozen_until_advanced_and_debug_sleep_moves_it() {
    let mut h = Harness::new().unwrap();
    h.set_with_ttl("lock", "tok", Duration::from_millis(1000));
    assert_eq!(h.ttl("lock"), Some(Some(Duration::from_millis(1000))));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(h.call(&["PTTL", "lock"]), Reply::Int(1000));
    h.advance(Duration::from_millis(400));
    assert_eq!(h.call(&["PTTL", "lock"]), Reply::Int(600));
    assert_eq!(h.call(&["DEBUG", "SLEEP", "0.6"]), Reply::ok());
    assert_eq!(h.call(&["PTTL", "lock"]), Reply::Int(0));
    h.advance(Duration::from_millis(1));
    assert_eq!(h.get("lock"), None);
    let before = h.now();
    h.eval("return redis.call('TIME')", &[], &[]);
    assert_eq!(h.now(), before);
}

#[test]
fn lua_scripts_run_from_files_by_sha() {
    let mut h = Harness::new().unwrap();
    let release = h.load_script(lua("release.lua")).unwrap();
    let extend = h.load_script(lua("extend.lua")).unwrap();
    let acquire = h.load_script(lua("acquire_fenced.lua")).unwrap();
    assert_eq!(
        h.evalsha(&acquire, &["l", "l:f"], &["a", "1000"]),
        Reply::Int(1)
    );
    assert_eq!(
        h.evalsha(&acquire, &["l", "l:f"], &["b", "1000"]),
        Reply::Int(0)
    );
    assert_eq!(h.evalsha(&extend, &["l"], &["a", "5000"]), Reply::Int(1));
    assert_eq!(h.ttl("l"), Some(Some(Duration::from_secs(5))));
    h.advance(Duration::from_millis(5001));
    assert_eq!(h.evalsha(&extend, &["l"], &["a", "5000"]), Reply::Int(0));
    assert_eq!(
        h.evalsha(&acquire, &["l", "l:f"], &["b", "1000"]),
        Reply::Int(2)
    );
    assert_eq!(
        h.evalsha(&release.to_uppercase(), &["l"], &["a"]),
        Reply::Int(-1)
    );
    assert_eq!(h.evalsha(&release, &["l"], &["b"]), Reply::Int(1));
    let snap = h.snapshot();
    assert_eq!(
        snap.keys().cloned().collect::<Vec<_>>(),
        vec![b"l:f".to_vec()]
    );
}

#[test]
fn fair_scripts_serve_in_turn_and_drop_a_waiter_whose_lease_ran_out() {
    let mut h = Harness::new().unwrap();
    let acquire = h.load_script(lua("acquire_fair.lua")).unwrap();
    let release = h.load_script(lua("release_fair.lua")).unwrap();
    let leave = h.load_script(lua("leave_fair.lua")).unwrap();
    let keys = ["l", "{l}:q", "{l}:w"];
    let pair = |a: i64, b: i64| Reply::Array(vec![Reply::Int(a), Reply::Int(b)]);
    let take = |h: &mut Harness, ticket: &str, lease: &str| {
        h.evalsha(&acquire, &keys, &[ticket, "10000", lease, "ch"])
    };
    assert_eq!(take(&mut h, "a", "1000"), pair(0, 10000));
    assert_eq!(take(&mut h, "b", "1000"), pair(1, 10000));
    assert_eq!(take(&mut h, "c", "5000"), pair(2, 10000));
    assert_eq!(take(&mut h, "d", "5000"), pair(3, 10000));
    // Only the holder releases; then it is b's turn, not c's.
    assert_eq!(h.evalsha(&release, &keys, &["c", "ch"]), Reply::Int(-1));
    assert_eq!(h.evalsha(&release, &keys, &["a", "ch"]), Reply::Int(1));
    assert_eq!(take(&mut h, "c", "5000"), pair(2, -2));
    assert_eq!(h.get("l"), None);
    // b never comes back: once its lease is over, c is the head and takes the lock.
    h.advance(Duration::from_millis(1001));
    assert_eq!(take(&mut h, "c", "5000"), pair(0, 10000));
    assert_eq!(h.get("l").as_deref(), Some(&b"c"[..]));
    // d, the head now, gives up: the queue is empty and its keys are gone.
    assert_eq!(h.evalsha(&leave, &keys, &["d", "ch"]), Reply::Int(1));
    assert_eq!(h.evalsha(&leave, &keys, &["d", "ch"]), Reply::Int(0));
    assert_eq!(
        h.snapshot().keys().cloned().collect::<Vec<_>>(),
        vec![b"l".to_vec()]
    );
}

#[test]
fn function_library_loads_from_a_file() {
    let mut h = Harness::new().unwrap();
    assert_eq!(
        h.load_library(lua("lockkit.functions.lua")).unwrap(),
        "lockkit"
    );
    let libs = h.libraries();
    assert_eq!(
        libs[0].functions,
        [
            "lockkit_release",
            "lockkit_extend",
            "lockkit_acquire_fenced",
            "lockkit_acquire_fair",
            "lockkit_release_fair",
            "lockkit_leave_fair",
            "lockkit_semaphore_acquire",
            "lockkit_semaphore_release",
            "lockkit_semaphore_extend",
            "lockkit_rw_acquire",
            "lockkit_rw_release",
            "lockkit_rw_extend",
            "lockkit_rw_downgrade",
            "lockkit_fenced_set"
        ]
    );
    assert_eq!(
        h.call(&[
            "FCALL",
            "lockkit_acquire_fenced",
            "2",
            "k",
            "k:f",
            "t",
            "100"
        ]),
        Reply::Int(1)
    );
    assert_eq!(
        h.call(&["FCALL", "lockkit_release", "1", "k", "t"]),
        Reply::Int(1)
    );
}

#[test]
fn bad_script_files_are_clear_errors() {
    let mut h = Harness::new().unwrap();
    let e = h.load_script("/nonexistent/x.lua").unwrap_err().to_string();
    assert!(e.contains("/nonexistent/x.lua"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.lua");
    std::fs::write(&bad, "return (").unwrap();
    let e = h.load_script(&bad).unwrap_err().to_string();
    assert!(
        e.contains("Error compiling script") && e.contains("user_script:1:"),
        "{e}"
    );
}

#[test]
fn redis_log_is_captured_and_unemulated_commands_say_so() {
    let mut h = Harness::new().unwrap();
    h.eval("redis.log(redis.LOG_WARNING, 'lock', 'lost', 3)", &[], &[]);
    let log = h.log();
    assert_eq!((log[0].level, log[0].message.as_str()), (3, "lock lost 3"));
    // A missing key answers nil, as in Redis; an existing key's size is not emulated.
    assert_eq!(h.call(&["MEMORY", "USAGE", "s"]), Reply::Nil);
    h.call(&["SET", "s", "v"]);
    let r = h.call(&["MEMORY", "USAGE", "s"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("'memory|usage' is not emulated")),
        "{r:?}"
    );
    let r = h.eval("return redis.call('MEMORY', 'USAGE', 's')", &[], &[]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("'memory|usage' is not emulated")),
        "{r:?}"
    );
    let r = h.eval("return cjson.encode_sparse_array(true)", &[], &[]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("cjson.encode_sparse_array is not emulated")),
        "{r:?}"
    );
}

#[test]
fn hostile_msgpack_nesting_is_an_error_not_a_crash() {
    let mut h = Harness::new().unwrap();
    let r = h.eval(
        "return cmsgpack.unpack(string.rep(string.char(0x91), 100000) .. string.char(1))",
        &[],
        &[],
    );
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("nested more than 200")),
        "{r:?}"
    );
}

#[test]
fn hostile_json_nesting_is_an_error_not_a_crash() {
    let mut h = Harness::new().unwrap();
    let r = h.eval("return cjson.decode(string.rep('[', 100000))", &[], &[]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("JSON nested deeper than 200")),
        "{r:?}"
    );
}

/// Redis answers one-element arrays down to its Lua stack's limit and then the error, in
/// place; the harness does the same at 200 levels (Redis: about 7,995).
#[test]
fn self_referencing_reply_ends_in_the_stack_limit_error_not_a_crash() {
    let mut h = Harness::new().unwrap();
    let mut r = h.eval("local t = {} t[1] = t return t", &[], &[]);
    let mut levels = 0;
    while let Reply::Array(mut items) = r {
        assert_eq!(items.len(), 1, "one element per level");
        r = items.remove(0);
        levels += 1;
    }
    assert_eq!(r, Reply::err("ERR reached lua stack limit"));
    assert!((100..=8000).contains(&levels), "{levels} levels");
}

#[test]
fn a_library_that_never_finishes_loading_times_out() {
    let mut h = Harness::new().unwrap();
    let r = h.call(&["FUNCTION", "LOAD", "#!lua name=spin\nwhile true do end"]);
    assert_eq!(
        r,
        Reply::err("ERR Error registering functions: ERR FUNCTION LOAD timeout")
    );
    assert_eq!(h.eval("return 3", &[], &[]), Reply::Int(3));
}

#[test]
fn redis_log_keeps_a_bounded_tail() {
    // Not about the time limit: room for a loaded machine running a debug build.
    let opts = HarnessOptions::new().time_limit(Duration::from_secs(120));
    let mut h = Harness::with_options(opts).unwrap();
    let r = h.eval(
        "for i = 1, 12000 do redis.log(redis.LOG_WARNING, i, string.rep('y', 20000)) end return 1",
        &[],
        &[],
    );
    assert_eq!(r, Reply::Int(1));
    let log = h.log();
    assert_eq!(log.len(), 10_000);
    assert!(log.iter().all(|l| l.message.len() <= 8 * 1024));
    assert!(
        log[0].message.starts_with("2001 "),
        "{}",
        &log[0].message[..10]
    );
    assert!(log[9_999].message.starts_with("12000 "));
}

/// Issue 40, case 10: a proxy plugin's hook (a `Sandbox` call, 50 ms) that ran one
/// `cmsgpack.unpack` of a 16 MB map held each command 4-7 s: the decoders never looked at the
/// clock. They do now, so the call is stopped near its limit. The 16 MB value is built before
/// the call, under a generous limit, as a plugin would receive it.
#[test]
fn a_sandbox_call_decoding_a_big_value_is_stopped_at_its_time_limit() {
    let mut sb = lockkit_harness::Sandbox::new(Duration::from_secs(30), 256 << 20).unwrap();
    let hooks = sb
        .load(
            b"local n = 8000000 \
              local m = '\\223' .. struct.pack('>I4', n) .. string.rep('\\1\\1', n) \
              return { hook = function() cmsgpack.unpack(m) return 1 end }",
            "=plugin",
            (),
        )
        .unwrap();
    let mlua::Value::Table(t) = hooks else {
        panic!("a table of hooks")
    };
    let hook: mlua::Function = t.get("hook").unwrap();
    sb.set_time_limit(Duration::from_millis(50));
    let e = sb
        .call(&hook, ())
        .expect_err("a 16 MB map decoded within 50 ms");
    assert!(e.stopped, "{e}");
}

/// Case 15 of issue 40: a failed FUNCTION RESTORE flushed the libraries and loaded each
/// again, running every library's top level once more (up to 500 ms each, holding the
/// server). Now the libraries before it are put back as they were: no top level runs again.
#[test]
fn a_failed_restore_does_not_run_the_libraries_again() {
    let mine = "#!lua name=mine\n\
                redis.log(redis.LOG_WARNING, 'top level of mine ran')\n\
                redis.register_function('mine', function() return 'mine' end)";
    let mut h = Harness::new().unwrap();
    assert_eq!(
        h.call(&["FUNCTION", "LOAD", mine]),
        Reply::Bulk(b"mine".to_vec())
    );
    // Another library named `mine`: APPEND fails on it (as in Redis, without changing anything).
    let mut other = Harness::new().unwrap();
    other.call(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=mine\nredis.register_function('theirs', function() return 1 end)",
    ]);
    let Reply::Bulk(payload) = other.call(&["FUNCTION", "DUMP"]) else {
        panic!("FUNCTION DUMP answers a payload");
    };
    let ran = |h: &Harness| {
        h.log()
            .iter()
            .filter(|l| l.message == "top level of mine ran")
            .count()
    };
    for _ in 0..3 {
        let r = h.call(&[b"FUNCTION".as_slice(), b"RESTORE", &payload, b"APPEND"]);
        assert_eq!(r, Reply::Error("ERR Library mine already exists".into()));
    }
    assert_eq!(ran(&h), 1, "the top level ran again: {:?}", h.log());
    assert_eq!(
        h.call(&["FCALL", "mine", "0"]),
        Reply::Bulk(b"mine".to_vec())
    );
    assert_eq!(
        h.call(&["FCALL", "theirs", "0"]),
        Reply::Error("ERR Function not found".into())
    );
}
