//! Defects found by reading the proxy, each pinned by a test: SCRIPT KILL behind the script it
//! kills, a plugin's EXEC answer leaving the upstream in MULTI, UNSUBSCRIBE's extra replies,
//! plugin answers overtaking replies still owed, observe's invented NOSCRIPT, RESET.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lockkit_proxy::{Action, ConnInfo, Plugin, PluginCommand};
use lockkit_test_support::{RedisServer, ServerOptions};

/// Answers every command named `name` itself with `reply`.
#[derive(Debug)]
struct Answers {
    name: &'static str,
    reply: &'static [u8],
}

impl Plugin for Answers {
    fn name(&self) -> &str {
        "answers"
    }
    fn commands(&self) -> Vec<String> {
        vec![self.name.to_string()]
    }
    fn on_command(&self, _conn: &ConnInfo, _cmd: &PluginCommand<'_>) -> Action {
        Action::Reply(self.reply.to_vec())
    }
}

fn answers(name: &'static str, reply: &'static [u8]) -> Vec<Arc<dyn Plugin>> {
    vec![Arc::new(Answers { name, reply })]
}

/// A server with a password, and the URL that logs in and selects database 2.
fn server_with_password_on_db_2() -> (RedisServer, String) {
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), "Up-pw".into()],
        password: Some("Up-pw".into()),
        ..ServerOptions::default()
    });
    let url = format!("redis://:Up-pw@127.0.0.1:{}/2", server.port());
    (server, url)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_kill_does_not_queue_behind_the_script_it_kills() {
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--busy-reply-threshold".into(), "100".into()],
        ..ServerOptions::default()
    });
    let proxy = start_proxy(&server.url(), vec![]).await;
    let port = proxy.addr().port();
    let mut busy = raw_conn(port);
    use std::io::Write;
    busy.write_all(b"*3\r\n$4\r\nEVAL\r\n$14\r\nwhile 1 do end\r\n$1\r\n0\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut killer = raw_conn(port);
    let got = roundtrip(&mut killer, b"*2\r\n$6\r\nSCRIPT\r\n$4\r\nKILL\r\n", 5);
    assert_eq!(
        got.as_deref().map(text).map_err(|e| e.kind()),
        Ok("+OK\r\n".to_string())
    );
    let got = roundtrip(&mut busy, b"", 1).unwrap();
    assert!(text(&got).contains("Script killed"), "{}", text(&got));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_answering_exec_leaves_no_transaction_open_upstream() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), answers("EXEC", b"*0\r\n")).await;
    let mut c = raw_conn(proxy.addr().port());
    let got = roundtrip(
        &mut c,
        b"MULTI\r\nSET a 1\r\nEXEC\r\nGET a\r\n",
        "+OK\r\n+QUEUED\r\n".len() + 1,
    )
    .unwrap();
    let mut got = got;
    while !text(&got).ends_with("1\r\n") && !text(&got).ends_with("QUEUED\r\n") {
        got.extend(roundtrip(&mut c, b"", 1).unwrap());
        if text(&got).matches("\r\n").count() >= 6 {
            break;
        }
    }
    assert!(
        text(&got).ends_with("$1\r\n1\r\n"),
        "GET after EXEC: {}",
        text(&got)
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_without_subscriptions_gets_its_replies_in_their_place() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), answers("ECHO", b"$5\r\nlocal\r\n")).await;
    let mut c = raw_conn(proxy.addr().port());
    let unsub = |ch: &str| {
        format!(
            "*3\r\n$11\r\nunsubscribe\r\n${}\r\n{ch}\r\n:0\r\n",
            ch.len()
        )
    };
    let want_head = format!("{}{}", unsub("a"), unsub("b"));
    let sent = b"UNSUBSCRIBE a b\r\nECHO x\r\nGET k\r\n";
    let mut got = roundtrip(&mut c, sent, want_head.len()).unwrap();
    while !text(&got).ends_with("$-1\r\n") {
        let more = roundtrip(&mut c, b"", 1).unwrap();
        assert!(!more.is_empty(), "closed: {}", text(&got));
        got.extend(more);
    }
    let got = text(&got);
    assert!(got.starts_with(&want_head), "{got}");
    let tail = &got[want_head.len()..];
    // The ECHO answered by the plugin, or by the server once replies no longer pair.
    assert!(
        tail == "$5\r\nlocal\r\n$-1\r\n" || tail == "$1\r\nx\r\n$-1\r\n",
        "{got}"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_answer_never_overtakes_replies_still_owed() {
    let server = RedisServer::start();
    let proxy = start_proxy(&server.url(), answers("ECHO", b"$5\r\nlocal\r\n")).await;
    let mut c = raw_conn(proxy.addr().port());
    let sent = b"INCR n\r\nINCR n\r\nINCR n\r\nECHO x\r\nSUBSCRIBE ch\r\n";
    let want = ":1\r\n:2\r\n:3\r\n$5\r\nlocal\r\n*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";
    let got = roundtrip(&mut c, sent, want.len()).unwrap();
    assert_eq!(text(&got), want);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_passes_an_evalsha_it_has_not_seen_to_the_server() {
    let server = RedisServer::start();
    let sha = server.inline("SCRIPT LOAD \"return 7\"").unwrap();
    let sha = sha.lines().last().unwrap().trim().to_string();
    let (proxy, _observe) = start_observed(&server.url()).await;
    let mut c = raw_conn(proxy.addr().port());
    let cmd = format!("EVALSHA {sha} 0\r\n");
    let got = roundtrip(&mut c, cmd.as_bytes(), 4).unwrap();
    assert_eq!(text(&got), ":7\r\n");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_gives_the_client_a_fresh_connection_on_the_urls_login_and_database() {
    let (_server, url) = server_with_password_on_db_2();
    let proxy = start_proxy(&url, vec![]).await;
    let port = proxy.addr().port();
    let out = redis_cli(
        port,
        &[],
        "SELECT 5\nCLIENT SETNAME app\nRESET\nSET k v\nCLIENT GETNAME\nCLIENT INFO\n",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..5], ["OK", "OK", "RESET", "OK", ""], "{out}");
    assert!(out.contains(" db=2 "), "the URL's database again: {out}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_leaves_pub_sub_for_a_fresh_connection() {
    let (_server, url) = server_with_password_on_db_2();
    for shared in [1, 0] {
        let proxy = lockkit_proxy::Proxy::start_with(
            "127.0.0.1:0",
            lockkit_proxy::Upstream::from_url(&url).unwrap(),
            vec![],
            lockkit_proxy::ProxyOptions::new().shared_connections(shared),
        )
        .await
        .unwrap();
        let mut c = raw_conn(proxy.addr().port());
        let sent = b"SUBSCRIBE ch\r\nRESET\r\nSET k v\r\nCLIENT INFO\r\n";
        let mut got = roundtrip(&mut c, sent, 1).unwrap();
        while !text(&got).contains(" db=") || !text(&got).ends_with("\r\n") {
            let more = roundtrip(&mut c, b"", 1).unwrap();
            assert!(!more.is_empty(), "closed: {}", text(&got));
            got.extend(more);
        }
        let got = text(&got);
        let want = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n+RESET\r\n+OK\r\n$";
        assert!(got.starts_with(want), "shared {shared}: {got}");
        assert!(got.contains(" db=2 "), "shared {shared}: {got}");
        proxy.stop().await;
    }
}
