//! No client's bytes reach another client's replies, whatever they are: the proxy reads each
//! request once, as redis-server reads it, and decides from that one reading. An empty command
//! name from a client that has not logged in, a command smuggled past a reading that differs
//! from Redis's (a length line ended by `\r` and any byte), a command that gets no reply: none
//! of them shifts the replies of the clients sharing an upstream connection. `QUIT` costs no
//! upstream connection; RESP3 clients share as RESP2 ones do.

use crate::common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lockkit_proxy::{ClientAuth, Proxy, ProxyOptions, Upstream};
use lockkit_test_support::{connections_received, RedisServer};

const CLIENT_PW: &str = "client-pw";

async fn start(upstream: &str, auth: ClientAuth) -> Proxy {
    Proxy::start_with(
        "127.0.0.1:0",
        Upstream::from_url(upstream).expect("a valid URL"),
        vec![],
        ProxyOptions::new().client_auth(auth).shared_connections(1),
    )
    .await
    .expect("the proxy starts")
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// What the logged-in clients saw.
#[derive(Debug, Default)]
struct Tally {
    replies: AtomicU64,
    foreign: AtomicU64,
    malformed: AtomicU64,
    lost: AtomicU64,
}

impl Tally {
    fn counts(&self) -> [u64; 4] {
        [
            self.replies.load(Ordering::Relaxed),
            self.foreign.load(Ordering::Relaxed),
            self.malformed.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
        ]
    }

    /// Counts one reply that should have been `want`; false once the connection is lost.
    fn check(&self, got: std::io::Result<Vec<u8>>, want: &[u8]) -> bool {
        match got {
            Ok(got) if got == want => {}
            Ok(got) if String::from_utf8_lossy(&got).contains("secret-of-") => {
                self.foreign.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        self.replies.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Client `i`: logs in, sets its own value, then GETs it until `stop`, checking each reply.
fn getter(port: u16, i: usize, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut c = raw_conn(port);
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut r = Replies::default();
    let key = format!("iso:{i}");
    let value = format!("secret-of-{i}");
    c.write_all(&[cmd(&["AUTH", CLIENT_PW]), cmd(&["SET", &key, &value])].concat())
        .unwrap();
    for _ in 0..2 {
        if !tally.check(r.next(&mut c), b"+OK\r\n") {
            return;
        }
    }
    let want = bulk(&value);
    while !stop.load(Ordering::Relaxed) {
        c.write_all(&cmd(&["GET", &key])).unwrap();
        if !tally.check(r.next(&mut c), &want) {
            return;
        }
    }
}

/// Every form of an empty command name (and `*-0`, which Redis closes the connection for).
const EMPTY_NAMES: [&[u8]; 6] = [
    b"*1\r\n$0\r\n\r\n",
    b"\"\"\r\n",
    b"''\n",
    b"*2\r\n$0\r\n\r\n$1\r\nx\r\n",
    b"*1\r\n$0\r\nXY",
    b"*-0\r\n",
];

/// What redis-server 7.0.15 answers each of [`EMPTY_NAMES`] before login: it checks that a
/// command exists before it checks the login.
const EMPTY_NAME_REPLIES: [&[u8]; 6] = [
    b"-ERR unknown command '', with args beginning with: \r\n",
    b"-ERR unknown command '', with args beginning with: \r\n",
    b"-ERR unknown command '', with args beginning with: \r\n",
    b"-ERR unknown command '', with args beginning with: 'x' \r\n",
    b"-ERR unknown command '', with args beginning with: \r\n",
    b"-ERR Protocol error: invalid multibulk length\r\n",
];

/// 20 logged-in clients GET their own values while an anonymous client sends empty command
/// names (and, with `slow_script`, while another client keeps the shared connection busy with
/// a slow script): what each logged-in client saw, and what the anonymous one got.
async fn empty_names_under_load(slow_script: bool) -> ([u64; 4], Vec<String>) {
    let server = RedisServer::start();
    let auth = ClientAuth::new().requirepass(CLIENT_PW).unwrap();
    let proxy = start(&server.url(), auth).await;
    let port = proxy.addr().port();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let getters: Vec<_> = (0..20)
        .map(|i| {
            let (stop, tally) = (stop.clone(), tally.clone());
            std::thread::spawn(move || getter(port, i, stop, tally))
        })
        .collect();
    let slow = slow_script.then(|| {
        let (stop, tally) = (stop.clone(), tally.clone());
        std::thread::spawn(move || {
            let mut c = raw_conn(port);
            c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut r = Replies::default();
            let busy = "local t = redis.call('TIME') while true do local n = redis.call('TIME') if (n[1] - t[1]) * 1000000 + n[2] - t[2] > 150000 then return 1 end end";
            c.write_all(&cmd(&["AUTH", CLIENT_PW])).unwrap();
            if !tally.check(r.next(&mut c), b"+OK\r\n") {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                c.write_all(&cmd(&["EVAL", busy, "0"])).unwrap();
                if !tally.check(r.next(&mut c), b":1\r\n") {
                    return;
                }
            }
        })
    });
    let attacker = tokio::task::spawn_blocking(move || {
        let mut wrong = Vec::new();
        let until = Instant::now() + Duration::from_millis(2500);
        let mut round = 0;
        while Instant::now() < until {
            let i = round % EMPTY_NAMES.len();
            round += 1;
            let mut c = raw_conn(port);
            let got = read_until_quiet(&mut c, EMPTY_NAMES[i], Duration::from_millis(150));
            if got != EMPTY_NAME_REPLIES[i] {
                wrong.push(format!(
                    "{:?} got {:?}",
                    String::from_utf8_lossy(EMPTY_NAMES[i]),
                    String::from_utf8_lossy(&got)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        wrong
    });
    let wrong = attacker.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for g in getters {
        g.join().unwrap();
    }
    if let Some(s) = slow {
        s.join().unwrap();
    }
    let counts = tally.counts();
    proxy.stop().await;
    (counts, wrong)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_command_names_from_an_anonymous_client_shift_no_ones_replies() {
    let ([replies, foreign, malformed, lost], wrong) = empty_names_under_load(false).await;
    assert!(replies > 100, "the clients ran: {replies}");
    assert_eq!(
        (foreign, malformed, lost),
        (0, 0, 0),
        "foreign, malformed, lost of {replies} replies"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_command_names_shift_no_ones_replies_behind_a_slow_script() {
    let ([replies, foreign, malformed, lost], wrong) = empty_names_under_load(true).await;
    assert!(replies > 20, "the clients ran: {replies}");
    assert_eq!(
        (foreign, malformed, lost),
        (0, 0, 0),
        "foreign, malformed, lost of {replies} replies"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A command that would block (or turn the debugger on) for every client of the shared
/// connection, hidden from a second reading by a length line that ends in `\r` and any byte:
/// redis-server reads it all the same.
const SMUGGLED: [&[u8]; 3] = [
    b"*6\r\n$5\r\nXREAD\r\n$5\rXBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$3\r\niso\r\n$1\r\n$\r\n",
    b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\rXSTREAMS\r\n$3\r\niso\r\n$1\r\n$\r\n",
    b"*3\r\n$6\r\nSCRIPT\r\n$5\rXDEBUG\r\n$3\r\nYES\r\n",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smuggled_blocking_command_or_debugger_never_reaches_the_shared_connection() {
    let server = RedisServer::start();
    for smuggled in SMUGGLED {
        let proxy = Proxy::start_with(
            "127.0.0.1:0",
            Upstream::from_url(&server.url()).unwrap(),
            vec![],
            ProxyOptions::new().op_timeout(Duration::from_secs(20)),
        )
        .await
        .unwrap();
        let port = proxy.addr().port();
        let shown = String::from_utf8_lossy(smuggled).into_owned();
        tokio::task::spawn_blocking(move || {
            // Someone on the shared connection first, so the smuggler joins it.
            let mut other = raw_conn(port);
            let mut r = Replies::default();
            other.write_all(&cmd(&["PING"])).unwrap();
            assert_eq!(r.next(&mut other).unwrap(), b"+PONG\r\n");
            let mut smuggler = raw_conn(port);
            smuggler.write_all(smuggled).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            // The others' lock traffic goes on.
            other
                .set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            for i in 0..5 {
                let key = format!("lock:{i}");
                other
                    .write_all(&cmd(&["SET", &key, "tok", "NX", "PX", "10000"]))
                    .unwrap();
                let got = r.next(&mut other);
                assert_eq!(
                    got.as_deref()
                        .map(String::from_utf8_lossy)
                        .map_err(|e| e.kind()),
                    Ok("+OK\r\n".into()),
                    "after {shown:?}"
                );
                other.write_all(&cmd(&["EVAL", "return 7", "0"])).unwrap();
                let got = r.next(&mut other);
                assert_eq!(
                    got.as_deref()
                        .map(String::from_utf8_lossy)
                        .map_err(|e| e.kind()),
                    Ok(":7\r\n".into()),
                    "after {shown:?}"
                );
            }
        })
        .await
        .unwrap();
        proxy.stop().await;
        let flushed = redis_cli(server.port(), &["FLUSHALL"], "");
        assert_eq!(flushed, "OK\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quit_is_answered_by_the_proxy_without_an_upstream_connection() {
    let server = RedisServer::start();
    let proxy = start(&server.url(), ClientAuth::new()).await;
    let port = proxy.addr().port();
    let before = connections_received(&server);
    let got = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        for _ in 0..100 {
            let mut c = raw_conn(port);
            let sent = [cmd(&["GET", "nothing"]), cmd(&["QUIT"])].concat();
            all.push(read_until_quiet(&mut c, &sent, Duration::from_secs(5)));
        }
        all
    })
    .await
    .unwrap();
    for g in &got {
        assert_eq!(g, b"$-1\r\n+OK\r\n", "{}", String::from_utf8_lossy(g));
    }
    // Those the proxy opened (the one asking is not counted).
    let opened = connections_received(&server) - before - 1;
    assert!(
        opened <= 5,
        "100 clients doing GET then QUIT made {opened} upstream connections"
    );
    proxy.stop().await;
}

const RESP3_CLIENTS: &str = r#"
import sys, redis
port = int(sys.argv[1])
clients = [redis.Redis(host="127.0.0.1", port=port, protocol=3, client_name=f"app{i}") for i in range(20)]
for i, c in enumerate(clients):
    c.set(f"k{i}", i)
    c.hset(f"h{i}", mapping={"f": i})
for i, c in enumerate(clients):
    assert int(c.get(f"k{i}")) == i
    assert c.get(f"missing{i}") is None
    assert c.hgetall(f"h{i}") in ({b"f": str(i).encode()}, {"f": str(i)}), c.hgetall(f"h{i}")
    assert c.client_getname() in (f"app{i}", f"app{i}".encode()), c.client_getname()
    assert c.connection_pool.get_connection().protocol in (3, "3")
print("ok")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_resp3_clients_share_a_handful_of_upstream_connections() {
    let server = RedisServer::start();
    let proxy = start(&server.url(), ClientAuth::new()).await;
    let before = connections_received(&server);
    let port = proxy.addr().port().to_string();
    assert_eq!(run_python(RESP3_CLIENTS, &[&port]).await, "ok\n");
    let opened = connections_received(&server) - before - 1;
    assert!(
        opened <= 4,
        "20 RESP3 clients made {opened} upstream connections"
    );
    proxy.stop().await;
}
