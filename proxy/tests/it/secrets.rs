//! No reply through the proxy holds the upstream's password or its TLS key passphrases,
//! whatever form the request takes: `CONFIG GET` with globs and several patterns, in either
//! protocol, inside MULTI/EXEC, after a command that gets no reply, after `CLIENT REPLY SKIP`,
//! with length lines that end in `\r` and any byte (which redis-server reads all the same).

use crate::common;

use std::time::Duration;

use common::*;
use lockkit_test_support::{RedisServer, ServerOptions};

const UPSTREAM_PW: &str = "Up-s3cret-77";
const TLS_PW: &str = "Tls-k3y-pass-88";
const TLS_CLIENT_PW: &str = "Tls-cl1ent-pass-99";

fn server() -> RedisServer {
    RedisServer::start_with(ServerOptions {
        extra_args: vec![
            "--requirepass".into(),
            UPSTREAM_PW.into(),
            "--masterauth".into(),
            UPSTREAM_PW.into(),
            "--tls-key-file-pass".into(),
            TLS_PW.into(),
            "--tls-client-key-file-pass".into(),
            TLS_CLIENT_PW.into(),
        ],
        password: Some(UPSTREAM_PW.into()),
        ..ServerOptions::default()
    })
}

/// Each probe: the bytes sent on a fresh connection.
fn probes() -> Vec<(&'static str, Vec<u8>)> {
    let config_get = |pattern: &str| cmd(&["CONFIG", "GET", pattern]);
    vec![
        (
            "CR-ended length line on an argument",
            b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$11\rXrequirepass\r\n".to_vec(),
        ),
        (
            "CR-ended length line on the name",
            b"*3\r\n$6\rXCONFIG\r\n$3\r\nGET\r\n$11\r\nrequirepass\r\n".to_vec(),
        ),
        (
            "CR-ended length line on the subcommand",
            b"*3\r\n$6\r\nCONFIG\r\n$3\rXGET\r\n$10\r\nmasterauth\r\n".to_vec(),
        ),
        (
            "CR-ended count line",
            b"*3\rX$6\r\nCONFIG\r\n$3\r\nGET\r\n$6\r\n*pass*\r\n".to_vec(),
        ),
        (
            "REPLCONF GETACK, which gets no reply",
            [cmd(&["REPLCONF", "GETACK", "*"]), config_get("requirepass")].concat(),
        ),
        (
            "REPLCONF ACK, which gets no reply",
            [
                cmd(&["REPLCONF", "ACK", "0"]),
                cmd(&["PING"]),
                config_get("*"),
            ]
            .concat(),
        ),
        (
            "an empty name (multibulk)",
            [b"*1\r\n$0\r\n\r\n".to_vec(), config_get("requirepass")].concat(),
        ),
        (
            "an empty name (inline) and an empty request",
            [b"\"\"\r\n*0\r\n".to_vec(), config_get("masterauth")].concat(),
        ),
        (
            "CLIENT REPLY SKIP",
            [
                cmd(&["CLIENT", "REPLY", "SKIP"]),
                config_get("requirepass"),
                config_get("requirepass"),
            ]
            .concat(),
        ),
        (
            "MULTI/EXEC",
            [
                cmd(&["MULTI"]),
                config_get("requirepass"),
                config_get("*pass*"),
                cmd(&["EXEC"]),
            ]
            .concat(),
        ),
        (
            "HELLO 3 (RESP3 maps)",
            [cmd(&["HELLO", "3"]), config_get("*pass*"), config_get("*")].concat(),
        ),
        ("a glob: *pass*", config_get("*pass*")),
        (
            "several patterns",
            cmd(&["CONFIG", "GET", "tls-*", "masterauth", "require?ass"]),
        ),
        (
            "upper case",
            cmd(&["config", "get", "TLS-KEY-FILE-PASS", "REQUIREPASS"]),
        ),
        (
            "a pattern cut at a NUL byte",
            b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$9\r\n*pass\0xyz\r\n".to_vec(),
        ),
        (
            "inline, with brackets and escapes",
            b"config get \"requirepas[s]\" 'tls-client-key-file-\\pass' m?st*\r\n".to_vec(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_probes_never_show_the_upstream_password_or_tls_passphrases() {
    let server = server();
    let url = format!("redis://:{UPSTREAM_PW}@127.0.0.1:{}", server.port());
    for shared in [1, 0] {
        let proxy = lockkit_proxy::Proxy::start_with(
            "127.0.0.1:0",
            lockkit_proxy::Upstream::from_url(&url).unwrap(),
            vec![],
            lockkit_proxy::ProxyOptions::new().shared_connections(shared),
        )
        .await
        .unwrap();
        let port = proxy.addr().port();
        let leaks = tokio::task::spawn_blocking(move || {
            let mut leaks = Vec::new();
            let probes = probes();
            assert_eq!(probes.len(), 16);
            for (what, bytes) in probes {
                let mut c = raw_conn(port);
                let got = read_until_quiet(&mut c, &bytes, Duration::from_millis(300));
                let text = String::from_utf8_lossy(&got).into_owned();
                if [UPSTREAM_PW, TLS_PW, TLS_CLIENT_PW]
                    .iter()
                    .any(|s| text.contains(s))
                {
                    leaks.push(format!("{what}: {text:?}"));
                }
            }
            leaks
        })
        .await
        .unwrap();
        assert!(leaks.is_empty(), "shared {shared}: {leaks:#?}");
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_replies_do_not_pair_config_get_answers_plain_names_and_refuses_patterns() {
    let server = server();
    let url = format!("redis://:{UPSTREAM_PW}@127.0.0.1:{}", server.port());
    let proxy = lockkit_proxy::Proxy::start(
        "127.0.0.1:0",
        lockkit_proxy::Upstream::from_url(&url).unwrap(),
        vec![],
    )
    .await
    .unwrap();
    let port = proxy.addr().port();
    let got = tokio::task::spawn_blocking(move || {
        let mut c = raw_conn(port);
        let sent = [
            cmd(&["HELLO", "3"]),
            cmd(&["SUBSCRIBE", "ch"]),
            cmd(&["CONFIG", "GET", "maxmemory"]),
            cmd(&["CONFIG", "GET", "*pass*"]),
            cmd(&["CONFIG", "GET", "RequirePass"]),
        ]
        .concat();
        read_until_quiet(&mut c, &sent, Duration::from_millis(300))
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&got);
    // A RESP3 subscriber may run other commands: a plain name is answered by the server...
    assert!(
        text.contains("%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"),
        "{text}"
    );
    // ... a pattern or a secret's name, whose reply could not be told apart to scrub, is not.
    assert_eq!(
        text.matches("lockkit-proxy-refuses:CONFIG-GET").count(),
        2,
        "{text}"
    );
    assert!(
        !text.contains(UPSTREAM_PW) && !text.contains(TLS_PW),
        "{text}"
    );
    proxy.stop().await;
}
