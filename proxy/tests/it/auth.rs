//! Clients log in at the proxy, and nothing the proxy hands a client reveals the upstream's
//! password: `-NOAUTH` before login, AUTH and HELLO AUTH as Redis takes them, `CONFIG GET` of
//! `requirepass`/`masterauth` answered without the secret.

use crate::common;

use common::*;
use lockkit_proxy::{ClientAuth, Proxy, ProxyOptions, Upstream};
use lockkit_test_support::{RedisServer, ServerOptions};

const UPSTREAM_PW: &str = "Up-s3cret-77";

fn server_with_password() -> RedisServer {
    RedisServer::start_with(ServerOptions {
        extra_args: vec![
            "--requirepass".into(),
            UPSTREAM_PW.into(),
            "--masterauth".into(),
            UPSTREAM_PW.into(),
        ],
        password: Some(UPSTREAM_PW.into()),
        ..ServerOptions::default()
    })
}

fn url_of(server: &RedisServer) -> String {
    format!("redis://:{UPSTREAM_PW}@127.0.0.1:{}", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_get_through_the_proxy_never_shows_the_upstream_password() {
    let server = server_with_password();
    let proxy = start_proxy(&url_of(&server), vec![]).await;
    let port = proxy.addr().port();
    for input in [
        "CONFIG GET requirepass\n",
        "CONFIG GET masterauth\n",
        "CONFIG GET *\n",
        "CONFIG GET *PASS* maxmemory\n",
        "MULTI\nCONFIG GET requirepass\nEXEC\n",
        "HELLO 3\nCONFIG GET *auth\n",
    ] {
        let out = redis_cli(port, &[], input);
        assert!(!out.contains(UPSTREAM_PW), "{input:?} showed it: {out}");
    }
    let out = redis_cli(port, &[], "CONFIG GET requirepass\n");
    assert_eq!(out, "requirepass\n\n", "{out}");
    proxy.stop().await;
}

async fn start_with_auth(upstream: &str, auth: ClientAuth, shared: usize) -> Proxy {
    Proxy::start_with(
        "127.0.0.1:0",
        Upstream::from_url(upstream).expect("a valid URL"),
        vec![],
        ProxyOptions::new()
            .client_auth(auth)
            .shared_connections(shared),
    )
    .await
    .expect("the proxy starts")
}

fn users() -> ClientAuth {
    ClientAuth::new()
        .requirepass("client-pw")
        .unwrap()
        .user_spec("orders:orders-pw")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_must_log_in_before_any_command_reaches_the_upstream() {
    let server = server_with_password();
    for shared in [1, 0] {
        let proxy = start_with_auth(&url_of(&server), users(), shared).await;
        let port = proxy.addr().port();
        let out = redis_cli(
            port,
            &[],
            "SET k v\nCONFIG GET requirepass\nAUTH nope\nAUTH orders client-pw\nGET k\n",
        );
        // redis-cli, not on a terminal, prints a blank line after each error.
        assert_eq!(
            out,
            "NOAUTH Authentication required.\n\n\
             NOAUTH Authentication required.\n\n\
             WRONGPASS invalid username-password pair or user is disabled.\n\n\
             WRONGPASS invalid username-password pair or user is disabled.\n\n\
             NOAUTH Authentication required.\n\n",
            "shared {shared}"
        );
        let before = redis_cli(
            server.port(),
            &["--no-auth-warning", "-a", UPSTREAM_PW],
            "GET k\n",
        );
        assert_eq!(before, "\n", "nothing reached the server");
        let out = redis_cli(port, &[], "AUTH client-pw\nSET k v\nGET k\nAUTH orders orders-pw\nGET k\nCONFIG GET requirepass\n");
        assert_eq!(out, "OK\nOK\nv\nOK\nv\nrequirepass\n\n", "shared {shared}");
        // redis-cli's own login, and the AUTH argument count as Redis checks it.
        let out = redis_cli(
            port,
            &[
                "--no-auth-warning",
                "--user",
                "orders",
                "--pass",
                "orders-pw",
                "GET",
                "k",
            ],
            "",
        );
        assert_eq!(out, "v\n");
        let out = redis_cli(port, &[], "AUTH\nAUTH a b c\n");
        assert_eq!(
            out,
            "ERR wrong number of arguments for 'auth' command\n\nERR syntax error\n\n"
        );
        proxy.stop().await;
        redis_cli(
            server.port(),
            &["--no-auth-warning", "-a", UPSTREAM_PW, "FLUSHALL"],
            "",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_auth_logs_in_and_the_rest_of_hello_reaches_the_upstream() {
    let server = server_with_password();
    let proxy = start_with_auth(&url_of(&server), users(), 1).await;
    let mut c = raw_conn(proxy.addr().port());
    let hello = |args: &[&str]| {
        let mut out = format!("*{}\r\n", args.len() + 1);
        for a in std::iter::once(&"HELLO").chain(args) {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        out
    };
    let got = roundtrip(&mut c, hello(&["3"]).as_bytes(), 40).unwrap();
    assert!(
        got.starts_with(b"-NOAUTH HELLO must be called with the client already authenticated"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let mut c = raw_conn(proxy.addr().port());
    let got = roundtrip(&mut c, hello(&["4"]).as_bytes(), 10).unwrap();
    assert_eq!(got, b"-NOPROTO unsupported protocol version\r\n");
    let got = roundtrip(
        &mut c,
        hello(&["3", "AUTH", "orders", "bad"]).as_bytes(),
        10,
    )
    .unwrap();
    assert_eq!(
        got,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    let got = roundtrip(
        &mut c,
        hello(&["3", "AUTH", "orders", "orders-pw", "SETNAME", "app1"]).as_bytes(),
        // A RESP3 map: server, version, proto 3, ... read until its last field.
        1,
    )
    .unwrap();
    assert!(
        got.starts_with(b"%7\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut rest = roundtrip(&mut c, b"*2\r\n$6\r\nCLIENT\r\n$7\r\nGETNAME\r\n", 0).unwrap();
    let text = loop {
        let text = String::from_utf8_lossy(&rest).into_owned();
        if text.contains("app1") {
            break text;
        }
        rest.extend(roundtrip(&mut c, b"", 1).unwrap());
    };
    assert!(text.ends_with("$4\r\napp1\r\n"), "{text}");
    assert!(!text.contains(UPSTREAM_PW) && !text.contains("orders-pw"));
    proxy.stop().await;
}
