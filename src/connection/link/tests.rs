//! The link against real servers: replies in order, timeouts, reconnects, backlog.

use std::time::Duration;

use super::*;
use lockkit_test_support::{connections_received, connects_while_frozen};

fn endpoint(url: &str, response_timeout: Option<Duration>) -> Endpoint {
    let info = crate::url::parse_url(url).unwrap();
    Endpoint::new(info, None, Duration::from_secs(2), response_timeout, 0).unwrap()
}

async fn link_to(
    server: &lockkit_test_support::RedisServer,
    response_timeout: Option<Duration>,
) -> Link {
    Link::connect(endpoint(&server.url(), response_timeout))
        .await
        .unwrap()
}

async fn query<T: redis::FromRedisValue>(link: &Link, cmd: &mut Cmd) -> RedisResult<T> {
    cmd.query_async(&mut link.clone()).await
}

#[tokio::test]
async fn concurrent_calls_each_get_their_own_reply() {
    let server = lockkit_test_support::RedisServer::start();
    let link = link_to(&server, Some(Duration::from_secs(5))).await;
    let calls = (0..2_000).map(|i| {
        let link = link.clone();
        async move {
            let key = format!("k{i}");
            let value = format!("v{i}-{}", "x".repeat(i % 97));
            let () = query(&link, redis::cmd("SET").arg(&key).arg(&value))
                .await
                .unwrap();
            let got: String = query(&link, redis::cmd("GET").arg(&key)).await.unwrap();
            assert_eq!(got, value);
            i
        }
    });
    let done = futures_util::future::join_all(calls).await;
    assert_eq!(done.len(), 2_000);
    // A pipeline: its replies in order, as one call.
    let mut pipe = redis::pipe();
    pipe.cmd("GET")
        .arg("k1")
        .cmd("GET")
        .arg("k2")
        .cmd("INCR")
        .arg("n");
    let (a, b, n): (String, String, i64) = pipe.query_async(&mut link.clone()).await.unwrap();
    assert_eq!((a.as_str(), b.as_str(), n), ("v1-x", "v2-xx", 1));
    // A reply larger than the read buffer arrives in pieces.
    let big = "y".repeat(3 << 20);
    let () = query(&link, redis::cmd("SET").arg("big").arg(&big))
        .await
        .unwrap();
    let got: String = query(&link, redis::cmd("GET").arg("big")).await.unwrap();
    assert_eq!(got.len(), big.len());
}

#[tokio::test]
async fn a_transaction_answers_with_its_replies_or_its_first_queueing_error() {
    let server = lockkit_test_support::RedisServer::start();
    let link = link_to(&server, Some(Duration::from_secs(5))).await;
    let mut tx = redis::pipe();
    tx.atomic().cmd("SET").arg("t").arg(5).cmd("INCR").arg("t");
    let (set, n): (String, i64) = tx.query_async(&mut link.clone()).await.unwrap();
    assert_eq!((set.as_str(), n), ("OK", 6));
    // Refused while queueing: the transaction is aborted, the refusal is the answer.
    let mut bad = redis::pipe();
    bad.atomic().cmd("INCR").arg("t").cmd("NO-SUCH-COMMAND");
    let err = bad
        .query_async::<Value>(&mut link.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown command"), "{err}");
    // Every reply of both was read: the next call gets its own.
    let n: i64 = query(&link, redis::cmd("GET").arg("t")).await.unwrap();
    assert_eq!(n, 6);
}

#[tokio::test]
async fn a_late_reply_is_never_taken_for_the_next_calls_answer() {
    let server = lockkit_test_support::RedisServer::start();
    server.inline("SET k mine").unwrap();
    let link = link_to(&server, Some(Duration::from_millis(100))).await;
    // Answered after 300 ms: the call times out at 100 ms (an unknown outcome).
    let err = query::<Value>(&link, redis::cmd("DEBUG").arg("SLEEP").arg("0.3"))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    // The server is still asleep; once it is awake, the late `OK` is on its way.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The next call on the same connection gets its own reply, not the late `OK`.
    let got: String = query(&link, redis::cmd("GET").arg("k")).await.unwrap();
    assert_eq!(got, "mine");
    // A call dropped before its reply came does not shift the replies either.
    let slow = redis::cmd("DEBUG").arg("SLEEP").arg("0.05").clone();
    let dropped = tokio::time::timeout(
        Duration::from_millis(5),
        query::<Value>(&link, &mut slow.clone()),
    )
    .await;
    assert!(dropped.is_err(), "the sleep outlasted 5 ms");
    let got: String = query(&link, redis::cmd("GET").arg("k")).await.unwrap();
    assert_eq!(got, "mine");
}

#[tokio::test]
async fn calls_in_flight_fail_when_the_server_goes_and_the_next_reconnects() {
    let mut server = lockkit_test_support::RedisServer::start();
    let link = Link::connect(endpoint(&server.url(), None)).await.unwrap();
    let in_flight = tokio::spawn({
        let link = link.clone();
        async move { query::<Value>(&link, redis::cmd("DEBUG").arg("SLEEP").arg("2")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill();
    let err = in_flight.await.unwrap().unwrap_err();
    assert!(crate::error::unknown_outcome(&err), "{err}");
    let err = query::<String>(&link, &mut redis::cmd("PING"))
        .await
        .unwrap_err();
    assert!(err.is_connection_refusal(), "{err}");
    server.restart();
    let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn callers_dropped_while_reconnecting_share_one_connect_attempt() {
    let server = lockkit_test_support::RedisServer::start();
    let link = link_to(&server, None).await;
    // The link's connection dies (SKIPME: not the connection that asks), so the next call
    // must reconnect.
    server.inline("CLIENT KILL TYPE normal").unwrap();
    for _ in 0..500 {
        if link.live().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        link.live().is_none(),
        "the killed connection still looks live"
    );
    // Frozen: the kernel still completes the TCP handshake, the login is never answered.
    // Every call gives up long before the connect timeout (2 s): each is dropped while a
    // connect is under way.
    const CALLS: u64 = 50;
    let (dropped, connects) =
        connects_while_frozen(&server, CALLS, Duration::from_millis(10), |_| {
            let link = link.clone();
            async move { query::<Value>(&link, &mut redis::cmd("PING")).await }
        })
        .await;
    assert_eq!(dropped, CALLS, "a call to a frozen server ended on its own");
    assert!(
        connects <= 3,
        "{connects} connects for {CALLS} calls dropped while reconnecting"
    );
    // Once the server answers, the shared attempt (or a new one) gives a working link.
    let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn a_failed_connect_attempt_is_every_waiting_callers_error() {
    let server = lockkit_test_support::RedisServer::start();
    let info = crate::url::parse_url(&server.url()).unwrap();
    let endpoint = Endpoint::new(info, None, Duration::from_millis(500), None, 0).unwrap();
    let link = Link::lazy(endpoint);
    let before = connections_received(&server);
    server.pause().unwrap();
    // Twenty callers at once, none of them dropped: all wait for one attempt, which the
    // frozen server makes time out.
    let calls = (0..20).map(|_| {
        let link = link.clone();
        async move { query::<Value>(&link, &mut redis::cmd("PING")).await }
    });
    let outcomes = tokio::time::timeout(
        Duration::from_secs(30),
        futures_util::future::join_all(calls),
    )
    .await;
    server.resume().unwrap();
    let connects = connections_received(&server) - before - 1;
    let outcomes = outcomes.expect("callers still waited 30 s into a 500 ms connect timeout");
    for outcome in outcomes {
        let err = outcome.expect_err("a frozen server answered");
        assert!(
            err.is_timeout() && err.to_string().contains("connecting"),
            "{err}"
        );
    }
    assert!(connects <= 3, "{connects} connects for 20 waiting callers");
    // The failure is not remembered: the next call connects again.
    let pong: String = query(&link, &mut redis::cmd("PING")).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn a_frozen_server_does_not_make_the_client_buffer_without_bound() {
    let server = lockkit_test_support::RedisServer::start();
    // Kept although it goes silent: this is about what waits on it meanwhile.
    let endpoint = endpoint(&server.url(), Some(Duration::from_millis(50)));
    let link = Link::connect(endpoint.keeping_silent_connections())
        .await
        .unwrap();
    server.pause().unwrap();
    // 64 MiB of SETs at a server that reads nothing: the kernel's buffers fill, then
    // the connection's own backlog; past its cap calls fail at once, unsent.
    let value = "v".repeat(64 << 10);
    let mut refused = 0;
    for i in 0..1024 {
        let mut set = redis::cmd("SET");
        set.arg(format!("k{i}")).arg(&value);
        let call = query::<Value>(&link, &mut set);
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_millis(20), call).await {
            if e.to_string().contains("backlog") {
                refused += 1;
            }
        }
    }
    let backlog = lock(&link.live().unwrap().queue).out.len();
    server.resume().unwrap();
    assert!(
        backlog <= MAX_BACKLOG + (64 << 10) + 100,
        "backlog {backlog}"
    );
    assert!(refused > 0, "no call was refused");
}

#[tokio::test]
async fn a_call_waiting_behind_a_full_socket_still_times_out() {
    let server = lockkit_test_support::RedisServer::start();
    let link = Link::connect(endpoint(&server.url(), Some(Duration::from_millis(200))))
        .await
        .unwrap();
    server.pause().unwrap();
    // SETs the frozen server never reads, until the kernel's buffers are full and commands
    // wait in the connection's own buffer, unsent (each call is dropped after a moment).
    let value = "v".repeat(256 << 10);
    let mut queued_unsent = false;
    for i in 0..256 {
        let mut set = redis::cmd("SET");
        set.arg(format!("k{i}")).arg(&value);
        let _ =
            tokio::time::timeout(Duration::from_millis(5), query::<Value>(&link, &mut set)).await;
        if !lock(&link.live().unwrap().queue).out.is_empty() {
            queued_unsent = true;
            break;
        }
    }
    assert!(queued_unsent, "the kernel took 64 MiB of commands");
    // This call waits in the connection's buffer too: it must still fail with a timeout
    // once the response timeout has passed, not wait for as long as the server is frozen.
    let waited = tokio::time::timeout(
        Duration::from_secs(3),
        query::<Value>(&link, &mut redis::cmd("PING")),
    )
    .await;
    server.resume().unwrap();
    match waited {
        Ok(Err(e)) => assert!(e.is_timeout(), "{e}"),
        Ok(Ok(v)) => panic!("a frozen server answered: {v:?}"),
        Err(_) => panic!("the call still waited 3 s into a 200 ms response timeout"),
    }
}

/// Issue 35, defect 2: a silent connection that is given up is reset, not closed. A
/// graceful close lets the kernel go on delivering what it had queued (for as long as
/// `TCP_USER_TIMEOUT` when the network black-holed it): a `SET` delivered after its clean-up
/// ran on the new connection holds its key for the whole TTL. An abort (`SO_LINGER` 0)
/// drops what is queued. The server here accepts and reads, never answers, and reports how
/// the connection ended.
#[tokio::test]
async fn a_silent_connection_that_is_given_up_is_reset_not_closed() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ended = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return "closed in order (FIN)".to_string(),
                Ok(_) => continue,
                Err(e) => return format!("{:?}", e.kind()),
            }
        }
    });
    // No password and no CLIENT SETINFO: the connection is up without a round trip.
    let info = crate::url::parse_url(&format!("redis://127.0.0.1:{port}")).unwrap();
    let quiet = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(quiet);
    let endpoint = Endpoint::new(
        info,
        None,
        Duration::from_secs(2),
        Some(Duration::from_millis(100)),
        0,
    )
    .unwrap();
    let link = Link::connect(endpoint).await.unwrap();
    // Calls time out until the connection counts as silent and is given up (bounded).
    for _ in 0..100 {
        if ended.is_finished() {
            break;
        }
        let mut ping = redis::cmd("PING");
        let call = query::<Value>(&link, &mut ping);
        let _ = tokio::time::timeout(Duration::from_millis(300), call).await;
    }
    assert_eq!(ended.join().unwrap(), "ConnectionReset");
}
