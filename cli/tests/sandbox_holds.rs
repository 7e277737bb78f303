//! The second round of attacks on the sandbox (issue 31), run as a user runs them: `lockkit lua
//! exec` and `lockkit proxy` with a plugin, through the built binary, so that an abort or a hang
//! of the old code is a failed test (a run killed by a signal, or one that did not finish within
//! a minute), not a dead test run. Where Redis answers, the same lines go to a real
//! redis-server 7.0.15 and the printed replies must match. docs/HARNESS.md "What the sandbox
//! guarantees" names these tests.

mod common;

use std::io::Write;
use std::process::Command;

use common::{wait, Lockkit, Run};
use lockkit_test_support::RedisServer;

/// `lockkit lua exec [flags] -` on `lines`; fails the test on a crash.
fn exec_with(flags: &[&str], lines: &str) -> Run {
    let run = Lockkit::new(&["lua", "exec"])
        .args(flags)
        .arg("-")
        .stdin(Some(lines))
        .run();
    no_crash(&run);
    run
}

fn exec(lines: &str) -> Run {
    exec_with(&[], lines)
}

fn no_crash(run: &Run) {
    assert!(
        run.code.is_some(),
        "lockkit was killed by a signal (crash)\n{}",
        run.all()
    );
    assert!(
        !run.stderr.contains("panicked"),
        "a Rust panic\n{}",
        run.all()
    );
}

/// Runs `lines` offline and against a fresh redis-server: the same output.
fn same_as_redis(lines: &str) -> String {
    let got = exec(lines);
    let server = RedisServer::start();
    let want = Lockkit::new(&["lua", "exec", "--url", &server.url(), "-"])
        .stdin(Some(lines))
        .run();
    assert_eq!(want.code, Some(0), "redis-server run: {}", want.all());
    assert_eq!(
        got.stdout,
        want.stdout,
        "offline (left) and redis-server (right) differ\n{}",
        got.all()
    );
    got.stdout
}

/// `lockkit lua exec -` with its address space limited to `mib` MiB (`ulimit -v`): a Rust-side
/// copy of gigabytes fails to allocate (and aborted the process) instead of filling the
/// machine's memory.
fn exec_in_address_space(mib: u64, lines: &str) -> Run {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {} && exec \"$0\" lua exec --maxmemory 0 -",
            mib * 1024
        ))
        .arg(env!("CARGO_BIN_EXE_lockkit"))
        .current_dir(common::repo())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let run = wait(child, "lockkit lua exec under ulimit -v");
    no_crash(&run);
    run
}

#[test]
fn keyspace_patterns_are_bounded_as_in_redis() {
    // One level of recursion per `*`: 300,000 of them overflowed the stack (abort), and
    // `*a*a...*b` against a 60-character key backtracked for minutes. Redis 7.0.15 answers
    // each in milliseconds (its matcher cuts nesting at 1000 and longer matches).
    let a60 = "a".repeat(60);
    let nested = "*a".repeat(14) + "b";
    same_as_redis(&format!(
        "SET {a60} 1\nSET abc 1\nKEYS {nested}\nSCAN 0 MATCH {nested}\n\
         EVAL \"return redis.call('KEYS', string.rep('*a', 300000))\" 0\n\
         EVAL \"return redis.call('SCAN', 0, 'MATCH', string.rep('*a', 300000))\" 0\n\
         EVAL \"redis.call('SET', string.rep('a', 1100), 1) return 1\" 0\n\
         EVAL \"return #redis.call('KEYS', string.rep('*a', 1000))\" 0\n\
         EVAL \"return #redis.call('KEYS', string.rep('*a', 1001))\" 0\n\
         EVAL \"return #redis.call('KEYS', string.rep('a*', 1001))\" 0\n\
         EVAL \"return #redis.call('KEYS', string.rep('?*', 1050))\" 0\n\
         EVAL \"return #redis.call('KEYS', string.rep('*', 5000) .. 'c')\" 0\n\
         HSET h {a60} 1\nHSCAN h 0 MATCH {nested}\nKEYS *[b-c]\n"
    ));
}

#[test]
fn rust_side_copies_of_script_data_are_bounded() {
    // Each of these built hundreds of megabytes to gigabytes outside the Lua heap, and aborted
    // the process ("memory allocation of ... bytes failed") under an address-space limit.
    let big =
        "local s = string.rep('x', 8 * 1024 * 1024) local t = {} for i = 1, 100 do t[i] = s end";
    for (body, answer) in [
        (
            "local k = {} for i = 1, 100 do k[i] = {[s] = 1} end return #cjson.encode(k)",
            "memory",
        ),
        (
            "local k = {} for i = 1, 100 do k[i] = {[s] = 1} end return #cmsgpack.pack(k)",
            "memory",
        ),
        (
            "return #struct.pack(string.rep('c0', 100), unpack(t))",
            "memory",
        ),
        ("return redis.pcall('RPUSH', 'l', unpack(t))", "memory"),
        (
            "return #string.gsub(string.rep('x', 100), 'x', s)",
            "memory",
        ),
        (
            "return #string.gsub(string.rep('x', 100), 'x', function() return s end)",
            "memory",
        ),
        // Redis's log keeps the line; the harness keeps its first 8 KiB, as it always did.
        ("return redis.log(redis.LOG_WARNING, unpack(t))", "(nil)"),
    ] {
        let run = exec_in_address_space(1024, &format!("EVAL \"{big} {body}\" 0\nPING\n"));
        // Refused at the memory cap, or stopped at the time limit when getting there takes
        // longer (a debug build escapes 256 MB of JSON slowly): bounded either way.
        let first = run.stdout.lines().next().unwrap_or("");
        assert!(
            first.contains(answer) || first.contains("time limit"),
            "{body}\n{}",
            run.all()
        );
    }
}

#[test]
fn one_command_cannot_pass_the_keyspace_limit() {
    // One RPUSH of ten references to a 4 MB string stored 40 MB under a 16 MB limit (the
    // documented bound is twice the limit).
    let run = exec_with(
        &["--maxmemory", "16mb"],
        "EVAL \"local s = string.rep('x', 4 * 1024 * 1024) return redis.pcall('RPUSH', 'l', s, s, s, s, s, s, s, s, s, s)\" 0\nEXISTS l\n\
         EVAL \"local s = string.rep('x', 4 * 1024 * 1024) return redis.pcall('RPUSH', 'l', s, s, s, s)\" 0\n",
    );
    assert_eq!(
        run.stdout,
        "(error) OOM command not allowed when used memory > 'maxmemory'.\n(integer) 0\n(integer) 4\n",
        "{}",
        run.all()
    );
}
