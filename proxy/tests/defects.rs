//! Defects found by reading the proxy, each pinned by a test: SCRIPT KILL behind the script it
//! kills, a plugin's EXEC answer leaving the upstream in MULTI, UNSUBSCRIBE's extra replies,
//! plugin answers overtaking replies still owed, observe's invented NOSCRIPT, RESET.

mod common;

use std::sync::Arc;

use common::*;
use lockkit_proxy::{Action, Command, ConnInfo, Plugin};
use lockkit_test_support::RedisServer;

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
    fn on_command(&self, _conn: &ConnInfo, _cmd: &Command<'_>) -> Action {
        Action::Reply(self.reply.to_vec())
    }
}

fn answers(name: &'static str, reply: &'static [u8]) -> Vec<Arc<dyn Plugin>> {
    vec![Arc::new(Answers { name, reply })]
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
