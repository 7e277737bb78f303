//! TLS on the listener: `redis-cli --tls` reaches the proxy; with a client CA, only a client
//! with a certificate it signed does. Certificates are made at test time with the openssl CLI.

use crate::common;

use std::path::Path;
use std::process::Command;

use lockkit_proxy::{ListenerTls, Proxy, ProxyOptions, Upstream};
use lockkit_test_support::RedisServer;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl req` arguments for a new P-256 key, unencrypted, written to the file that follows.
const NEW_EC_KEY: [&str; 7] = [
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
];

/// A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it.
fn make_certs(dir: &Path) {
    let ca = [
        "ca.key",
        "-x509",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=lockkit test CA",
    ];
    openssl(dir, &[&NEW_EC_KEY[..], &ca].concat());
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let file = |ending: &str| format!("{name}.{ending}");
        std::fs::write(dir.join(file("ext")), ext).unwrap();
        let (key, csr, crt, ext) = (file("key"), file("csr"), file("crt"), file("ext"));
        let request = [key.as_str(), "-out", &csr, "-subj", "/CN=lockkit test"];
        openssl(dir, &[&NEW_EC_KEY[..], &request].concat());
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

fn redis_cli_tls(port: u16, dir: &Path, extra: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(dir.join("ca.crt"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(extra)
        .current_dir(dir)
        .output()
        .expect("redis-cli runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

async fn start(upstream: &str, tls: ListenerTls) -> Proxy {
    Proxy::start_with(
        "127.0.0.1:0",
        Upstream::from_url(upstream).unwrap(),
        vec![],
        ProxyOptions::new().tls(Some(tls)),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_tls_reaches_the_proxy() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let p = |f: &str| dir.path().join(f);
    let tls = ListenerTls::from_pem_files(&p("server.crt"), &p("server.key"), None).unwrap();
    let proxy = start(&server.url(), tls).await;
    let port = proxy.addr().port();
    assert_eq!(redis_cli_tls(port, dir.path(), &["SET", "k", "v"]), "OK\n");
    assert_eq!(redis_cli_tls(port, dir.path(), &["GET", "k"]), "v\n");
    // Plain TCP gets no Redis reply.
    let plain = common::redis_cli(port, &["PING"], "");
    assert!(!plain.contains("PONG"), "{plain}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_clients_with_its_certificates_get_in() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let p = |f: &str| dir.path().join(f);
    let tls = ListenerTls::from_pem_files(&p("server.crt"), &p("server.key"), Some(&p("ca.crt")))
        .unwrap();
    assert!(tls.requires_client_certs());
    let proxy = start(&server.url(), tls).await;
    let port = proxy.addr().port();
    let refused = redis_cli_tls(port, dir.path(), &["PING"]);
    assert!(!refused.contains("PONG"), "{refused}");
    let cert = ["--cert", "client.crt", "--key", "client.key", "PING"];
    assert_eq!(redis_cli_tls(port, dir.path(), &cert), "PONG\n");
    proxy.stop().await;
}

#[test]
fn bad_pem_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let e = ListenerTls::from_pem_files(&empty, &empty, None).unwrap_err();
    assert!(
        e.contains("empty.pem") && e.contains("no certificate"),
        "{e}"
    );
    let e = ListenerTls::from_pem_files(&dir.path().join("none.pem"), &empty, None).unwrap_err();
    assert!(e.contains("none.pem"), "{e}");
}
