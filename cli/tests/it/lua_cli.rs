//! `lockkit lua exec|test|record` through the built binary, against real redis-server and
//! redis-cli processes.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{lockkit, repo};

use lockkit_test_support::RedisServer;

/// Lines covering every reply shape redis-cli prints: status, errors, integers, nils, bulk
/// strings with escapes, nested and empty arrays, wide indexes, script errors.
const LINES: &str = r#"SET k v
GET k
GET missing
INCR k
RPUSH l a b c d e f g h i j k
LRANGE l 0 -1
EVAL "return {1, {2, {}, {'x', false}}, 'a\nb\x01\"', {ok='FINE'}}" 0
EVAL "return {err='MYERR custom'}" 0
EVAL "return redis.call('INCR', KEYS[1])" 1 k
EVAL "return undefined" 0
HSET h f1 v1 f2 v2
HGETALL h
ZADD z 1.5 a 2 b
ZRANGE z 0 -1 WITHSCORES
NOSUCHCMD x y
PING
3 PING
EVAL "return redis.status_reply('DONE')" 0
"#;

#[test]
fn exec_prints_what_redis_cli_prints() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let cli = Command::new("redis-cli")
        .args(["-p", &port, "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let Ok(mut cli) = cli else {
        panic!("redis-cli is needed for this test (apt-get install redis-tools)");
    };
    cli.stdin
        .take()
        .unwrap()
        .write_all(LINES.as_bytes())
        .unwrap();
    let expected = cli.wait_with_output().unwrap();
    assert!(expected.status.success());
    let offline = lockkit(&["lua", "exec"], Some(LINES));
    assert!(offline.success(), "{}", offline.stderr);
    assert_eq!(offline.stdout, String::from_utf8_lossy(&expected.stdout));
    // The same lines through --url reach the server and print the same way.
    server.inline("FLUSHALL").unwrap();
    let online = lockkit(&["lua", "exec", "--url", &server.url(), "-"], Some(LINES));
    assert_eq!(online.stdout, String::from_utf8_lossy(&expected.stdout));
}

#[test]
fn test_passes_on_recorded_transcripts_and_fails_on_a_changed_reply() {
    let dir = repo().join("tests/transcripts");
    let files: Vec<String> = [
        "release.txt",
        "extend.txt",
        "acquire_fenced.txt",
        "lockkit.functions.txt",
        "fair.txt",
        "semaphore.txt",
        "rwlock.txt",
        "fenced_set.txt",
    ]
    .iter()
    .map(|f| dir.join(f).display().to_string())
    .collect();
    let mut args = vec!["lua", "test"];
    args.extend(files.iter().map(String::as_str));
    let out = lockkit(&args, None);
    assert!(out.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("8 passed, 0 failed"));

    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    let original = std::fs::read_to_string(dir.join("release.txt")).unwrap();
    let changed = original.replacen("(integer) -1", "(integer) 1", 1);
    assert_ne!(changed, original);
    let copy = tmp.join("release.txt");
    std::fs::write(&copy, changed).unwrap();
    let out = lockkit(&["lua", "test", copy.to_str().unwrap()], None);
    assert!(!out.success());
    let report = out.stdout;
    assert!(
        report.contains("FAIL") && report.contains("expected:") && report.contains("(integer) -1"),
        "{report}"
    );
}

/// The transcripts of the shared primitives' scripts (and of the fenced write) give the same replies on a real
/// redis-server as offline (their replies depend on the server's clock only within bounds the
/// transcripts check).
#[test]
fn semaphore_and_rwlock_transcripts_pass_against_a_real_server() {
    let server = RedisServer::start();
    let dir = repo().join("tests/transcripts");
    for name in ["semaphore.txt", "rwlock.txt", "fenced_set.txt"] {
        let file = dir.join(name).display().to_string();
        let out = lockkit(&["lua", "test", &file, "--url", &server.url()], None);
        assert!(out.success(), "{name}: {}{}", out.stdout, out.stderr);
        server.inline("FLUSHALL").unwrap();
        server.inline("FUNCTION FLUSH").unwrap();
    }
}

#[test]
fn record_fills_replies_from_a_server_and_test_then_passes_offline() {
    let server = RedisServer::start();
    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    let t = tmp.join("t.txt");
    std::fs::write(
        &t,
        "# a comment\n> SET lock tok PX 60000\n> EVALFILE lua/release.lua 1 lock other\n\n> EVALFILE lua/release.lua 1 lock tok\n> GET lock\n",
    )
    .unwrap();
    // The file is outside the repository: lua/ is found through the working directory.
    let out = lockkit(
        &["lua", "record", t.to_str().unwrap(), "--url", &server.url()],
        None,
    );
    assert!(out.success(), "{}", out.stderr);
    let recorded = std::fs::read_to_string(&t).unwrap();
    assert_eq!(
        recorded,
        "# a comment\n> SET lock tok PX 60000\nOK\n> EVALFILE lua/release.lua 1 lock other\n(integer) -1\n\n> EVALFILE lua/release.lua 1 lock tok\n(integer) 1\n> GET lock\n(nil)\n"
    );
    // record cleaned up after itself.
    assert!(server.inline("DBSIZE").unwrap().starts_with(":0"));
    let out = lockkit(&["lua", "test", t.to_str().unwrap()], None);
    assert!(out.success(), "{}", out.stdout);
}

#[test]
fn a_bad_line_stops_everything_before_anything_runs() {
    let server = RedisServer::start();
    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    let t = tmp.join("bad.txt");
    std::fs::write(&t, "> SET first 1\nOK\n> SET \"unbalanced 1\n").unwrap();
    let out = lockkit(
        &["lua", "test", t.to_str().unwrap(), "--url", &server.url()],
        None,
    );
    assert!(!out.success());
    let err = &out.stderr;
    assert!(
        err.contains("bad.txt:3:") && err.contains("unbalanced quotes"),
        "{err}"
    );
    assert!(
        server.inline("EXISTS first").unwrap().starts_with(":0"),
        "nothing may run"
    );

    std::fs::write(&t, "> SET k v\n> FROBFILE x.lua 0\n").unwrap();
    let out = lockkit(&["lua", "test", t.to_str().unwrap()], None);
    assert!(
        out.stderr.contains("bad.txt:2: unknown directive FROBFILE"),
        "{}",
        out.stderr
    );

    std::fs::write(&t, "> EVALFILE no/such.lua 0\n").unwrap();
    let out = lockkit(&["lua", "test", t.to_str().unwrap()], None);
    assert!(
        out.stderr
            .contains("bad.txt:1: file not found: no/such.lua"),
        "{}",
        out.stderr
    );

    std::fs::write(&t, "stray reply line\n").unwrap();
    let out = lockkit(&["lua", "test", t.to_str().unwrap()], None);
    assert!(!out.success());
    assert!(
        out.stderr.contains("bad.txt:1: expected a command"),
        "{}",
        out.stderr
    );

    let out = lockkit(&["lua", "exec", "/no/such/file.txt"], None);
    assert!(!out.success());
    assert!(out.stderr.contains("/no/such/file.txt"));

    let out = lockkit(&["lua", "exec"], Some("SET a 1\nGET \"a\n"));
    assert!(!out.success());
    assert!(out.stderr.contains("-:2:"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "nothing runs after a parse error");
}

#[test]
fn a_script_with_a_syntax_error_is_reported_with_its_line() {
    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    std::fs::write(tmp.join("broken.lua"), "local x = 1\nreturn x +\n").unwrap();
    let root = tmp.display().to_string();
    let out = lockkit(
        &["lua", "exec", "--root", &root, "-"],
        Some(&format!("EVALFILE {}/broken.lua 0\n", tmp.display())),
    );
    assert!(out.success());
    assert_eq!(
        out.stdout,
        "(error) ERR Error compiling script (new function): user_script:3: unexpected symbol near '<eof>'\n"
    );
}

/// A server started as Debian's packaged one runs: DEBUG refused.
fn server_without_debug() -> RedisServer {
    RedisServer::start_with(lockkit_test_support::ServerOptions {
        extra_args: vec!["--enable-debug-command".into(), "no".into()],
        ..Default::default()
    })
}

#[test]
fn record_refuses_an_error_reply_the_transcript_did_not_expect_and_leaves_the_file() {
    let server = server_without_debug();
    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    let t = tmp.join("release.txt");
    let original = std::fs::read_to_string(repo().join("tests/transcripts/release.txt")).unwrap();
    std::fs::write(&t, &original).unwrap();
    let debug_line = original
        .lines()
        .position(|l| l.starts_with("> DEBUG SLEEP"))
        .expect("release.txt sleeps")
        + 1;
    let out = lockkit(
        &["lua", "record", t.to_str().unwrap(), "--url", &server.url()],
        None,
    );
    let err = &out.stderr;
    assert!(!out.success(), "{}{err}", out.stdout);
    assert!(
        err.contains(&format!("release.txt:{debug_line}:"))
            && err.contains("DEBUG command not allowed")
            && err.contains("--enable-debug-command local"),
        "{err}"
    );
    assert!(!out.stdout.contains("recorded"), "{}", out.stdout);
    assert_eq!(
        std::fs::read_to_string(&t).unwrap(),
        original,
        "file untouched"
    );

    // A fresh line (nothing recorded yet) that the server refuses for its configuration is
    // refused too: it would record the server's set-up, not the script's behaviour.
    std::fs::write(&t, "> SET k v\n> DEBUG SLEEP 0\n").unwrap();
    let out = lockkit(
        &["lua", "record", t.to_str().unwrap(), "--url", &server.url()],
        None,
    );
    assert!(!out.success());
    assert!(out.stderr.contains("release.txt:2:"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&t).unwrap(),
        "> SET k v\n> DEBUG SLEEP 0\n"
    );

    // `lua test --url` names the same cause.
    let out = lockkit(
        &[
            "lua",
            "test",
            repo()
                .join("tests/transcripts/release.txt")
                .to_str()
                .unwrap(),
            "--url",
            &server.url(),
        ],
        None,
    );
    assert!(!out.success());
    assert!(
        out.stdout.contains("--enable-debug-command local"),
        "{}",
        out.stdout
    );
}

#[test]
fn record_keeps_an_error_reply_the_transcript_expects() {
    let server = RedisServer::start();
    let tmp_dir = tempfile::tempdir().unwrap();
    let tmp = tmp_dir.path();
    let t = tmp.join("t.txt");
    std::fs::write(
        &t,
        "> SET k v\n> INCR k\n(error) ERR old text\n> EVAL \"return redis.call('nosuch')\" 0\n",
    )
    .unwrap();
    let out = lockkit(
        &["lua", "record", t.to_str().unwrap(), "--url", &server.url()],
        None,
    );
    assert!(out.success(), "{}", out.stderr);
    let recorded = std::fs::read_to_string(&t).unwrap();
    assert!(
        recorded.contains("(error) ERR value is not an integer"),
        "{recorded}"
    );
    assert!(recorded.contains("Unknown Redis command"), "{recorded}");
}
