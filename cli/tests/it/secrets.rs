//! A password never appears: every artifact of `lockkit bench` (stdout, stderr, the JSON
//! report, every HdrHistogram log), `lockkit probe`, `lockkit lua exec --url`, and the error
//! paths (wrong password, unreachable host, malformed URL, a password only in REDIS_URL) are
//! searched for it, in plain and in percent-encoded form.

use crate::common;

use std::path::Path;

use common::{Lockkit, Run};

use lockkit_test_support::{free_port, RedisServer, ServerOptions};

/// Distinctive, with characters that must be percent-encoded in a URL.
const PASSWORD: &str = "Zq7:s3cr@t/pw";
const ENCODED: &str = "Zq7%3As3cr%40t%2Fpw";
const USER_PASSWORD: &str = "acl-Pw-93hf";

fn lockkit(args: &[&str], env_url: Option<&str>, stdin: Option<&str>) -> Run {
    Lockkit::new(args).redis_url(env_url).stdin(stdin).run()
}

/// Fails if any secret (or a telling part of one) is in `text`.
fn assert_clean(what: &str, text: &str) {
    for secret in [PASSWORD, ENCODED, "s3cr", USER_PASSWORD, "wrong-Pw-x1"] {
        assert!(
            !text.contains(secret),
            "{what} shows a password ({secret}):\n{text}"
        );
    }
    assert!(!text.contains("panicked"), "{what}:\n{text}");
}

fn assert_output_clean(what: &str, out: &Run) {
    assert_clean(&format!("{what} stdout"), &out.stdout);
    assert_clean(&format!("{what} stderr"), &out.stderr);
}

/// Every file under `dir`, searched.
fn assert_files_clean(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert_clean(
            &path.display().to_string(),
            &String::from_utf8_lossy(&bytes),
        );
        n += 1;
    }
    n
}

fn server() -> RedisServer {
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), PASSWORD.into()],
        password: Some(PASSWORD.into()),
        ..ServerOptions::default()
    });
    let ok = server
        .inline(&format!(
            "ACL SETUSER locker on >{USER_PASSWORD} ~lockkit:* +@all"
        ))
        .unwrap();
    assert!(ok.starts_with("+OK"), "{ok}");
    server
}

#[test]
fn bench_with_a_password_in_the_url_prints_and_writes_no_password() {
    let server = server();
    let port = server.port();
    let url = format!("redis://:{ENCODED}@127.0.0.1:{port}");
    let acl_url = format!("redis://locker:{USER_PASSWORD}@127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let short = ["--duration", "1s", "--warmup", "0", "--clients", "2"];

    // Terminal summary (not --quiet), JSON and logs, for a password and for an ACL user.
    for u in [&url, &acl_url] {
        let mut args = vec!["bench", "--url", u, "--out", &out];
        args.extend(short);
        let r = lockkit(&args, None, None);
        assert!(r.success(), "{}", r.stderr);
        assert!(r.stdout.contains(":***@127.0.0.1"));
        assert_output_clean("bench", &r);
    }
    // --json and a password only in REDIS_URL.
    let json = dir.path().join("named.json");
    let mut args = vec!["bench", "--json", json.to_str().unwrap()];
    args.extend(short);
    let r = lockkit(&args, Some(&url), None);
    assert!(r.success(), "{}", r.stderr);
    assert_output_clean("bench via REDIS_URL", &r);
    let report = std::fs::read_to_string(&json).unwrap();
    assert!(
        report.contains(&format!("redis://:***@127.0.0.1:{port}")),
        "{report}"
    );

    let files = assert_files_clean(dir.path());
    assert!(
        files >= 6,
        "the JSON reports and their logs were searched ({files})"
    );
}

#[test]
fn probe_and_lua_exec_with_a_password_show_no_password() {
    let server = server();
    let url = format!("redis://:{ENCODED}@127.0.0.1:{}", server.port());
    let r = lockkit(&["probe", "--url", &url], None, None);
    assert!(r.success(), "{}", r.stderr);
    assert!(r.stdout.contains("***"));
    assert_output_clean("probe", &r);
    let r = lockkit(&["probe"], Some(&url), None);
    assert!(r.success());
    assert_output_clean("probe via REDIS_URL", &r);

    let r = lockkit(
        &["lua", "exec", "--url", &url, "-"],
        None,
        Some("PING\nCONFIG GET requirepass\n"),
    );
    assert!(r.success(), "{}", r.stderr);
    // The server itself answers CONFIG GET with the password: that is the user asking for
    // it, so only stderr is searched here.
    assert_clean("lua exec stderr", &r.stderr);
}

#[test]
fn error_paths_show_no_password() {
    let server = server();
    let port = server.port();
    let dead = free_port().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let cases = [
        format!("redis://:wrong-Pw-x1@127.0.0.1:{port}"),
        format!("redis://locker:wrong-Pw-x1@127.0.0.1:{port}"),
        format!("redis://:{ENCODED}@127.0.0.1:{dead}"),
        format!("redis://locker:{USER_PASSWORD}@127.0.0.1:{dead}"),
        format!("redis://:{ENCODED}@127.0.0.1:99999"),
        format!("rediss://:{ENCODED}@127.0.0.1:{port}"),
        format!("http://:{ENCODED}@127.0.0.1:{port}"),
    ];
    for url in &cases {
        let r = lockkit(&["bench", "--url", url, "--out", &out], None, None);
        assert!(!r.success(), "{url}");
        assert_output_clean(&format!("bench {url}"), &r);
        let r = lockkit(&["bench", "--out", &out], Some(url), None);
        assert!(!r.success(), "{url}");
        assert_output_clean(&format!("bench REDIS_URL={url}"), &r);
        let r = lockkit(&["probe", "--url", url], None, None);
        assert!(!r.success(), "{url}");
        assert_output_clean(&format!("probe {url}"), &r);
        let r = lockkit(&["lua", "exec", "--url", url, "-"], None, Some("PING\n"));
        assert!(!r.success(), "{url}");
        assert_output_clean(&format!("lua exec {url}"), &r);
    }
    assert_eq!(assert_files_clean(dir.path()), 0, "nothing written");
}
