//! `lockkit proxy` run by an operator: passwords kept off the command line (file and
//! environment forms), the idle timeout, and the listener's certificate replaced on SIGHUP
//! without dropping the connections made before.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cmd, reply_line, Lockkit, ProxyRun};
use lockkit_test_support::RedisServer;

fn connect(port: u16) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn secret_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn auth(port: u16, pw: &str) -> String {
    let mut c = connect(port);
    c.write_all(&cmd(&["AUTH", pw])).unwrap();
    reply_line(&mut c)
}

/// --requirepass-file: the password is read from a file (re-read on SIGHUP), never shown in
/// the process's arguments; a file others may write is refused (exit 2).
#[test]
fn requirepass_file_keeps_the_password_off_the_command_line() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requirepass");
    secret_file(&file, "s3cret-one\n", 0o600);
    let file_arg = file.to_string_lossy().into_owned();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--requirepass-file", &file_arg],
        dir.path(),
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", proxy.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("s3cret"));
    assert_eq!(auth(proxy.port, "s3cret-one"), "+OK");
    assert!(auth(proxy.port, "wrong").starts_with("-WRONGPASS"));
    let mut c = connect(proxy.port);
    c.write_all(&cmd(&["PING"])).unwrap();
    assert!(reply_line(&mut c).starts_with("-NOAUTH"));
    secret_file(&file, "s3cret-two\r\n", 0o600);
    proxy.send("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(auth(proxy.port, "s3cret-two"), "+OK");
    let run = proxy.stop();
    assert!(run.success(), "{}", run.all());
    assert!(!run.all().contains("s3cret"), "{}", run.all());

    secret_file(&file, "s3cret-one\n", 0o666);
    let refused = Lockkit::new(&["proxy", "--quiet", "--upstream", &server.url()])
        .args(&["--listen", "127.0.0.1:0", "--duration", "200ms"])
        .args(&["--requirepass-file", &file_arg])
        .run();
    assert_eq!(refused.code, Some(2), "{}", refused.all());
    assert!(refused.stderr.contains("chmod 600"), "{}", refused.all());
    assert!(!refused.all().contains("s3cret"), "{}", refused.all());
}

/// --metrics-token-file: scrapes need the token read from the file.
#[test]
fn metrics_token_file_protects_the_metrics() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    secret_file(&file, "tok-s3cret\n", 0o600);
    let mport = lockkit_test_support::free_port().unwrap();
    let listen = format!("127.0.0.1:{mport}");
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--metrics-listen",
            &listen,
            "--metrics-token-file",
            &file.to_string_lossy(),
        ],
        dir.path(),
    );
    let scrape = |header: &str| {
        let mut m = connect(mport);
        let req = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n");
        m.write_all(req.as_bytes()).unwrap();
        let mut text = String::new();
        let _ = m.read_to_string(&mut text);
        text.lines().next().unwrap_or_default().to_string()
    };
    let without = scrape("");
    let with = scrape("Authorization: Bearer tok-s3cret\r\n");
    let run = proxy.stop();
    assert!(without.contains(" 401"), "{without} {}", run.all());
    assert!(with.contains(" 200"), "{with} {}", run.all());
}

/// --idle-timeout closes a client that sends nothing, and only it.
#[test]
fn idle_timeout_closes_only_idle_clients() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyRun::start(
        &server.url(),
        &["--quiet", "--idle-timeout", "1s"],
        dir.path(),
    );
    let mut idle = connect(proxy.port);
    idle.write_all(&cmd(&["PING"])).unwrap();
    assert_eq!(reply_line(&mut idle), "+PONG");
    let mut busy = connect(proxy.port);
    for _ in 0..10 {
        busy.write_all(&cmd(&["PING"])).unwrap();
        assert_eq!(
            reply_line(&mut busy),
            "+PONG",
            "a client that keeps talking stays"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = idle.write_all(&cmd(&["PING"]));
    let after = reply_line(&mut idle);
    let run = proxy.stop();
    assert_eq!(after, "", "the idle client was closed: {}", run.all());
}

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A self-signed certificate for 127.0.0.1 named `cn`, in `name.crt` and `name.key`.
fn self_signed(dir: &Path, name: &str, cn: &str) {
    let (key, crt, subj) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN={cn}"),
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &subj,
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
    );
}

/// The subject of the certificate the listener on `port` presents.
fn served_subject(dir: &Path, port: u16) -> String {
    let text = openssl(dir, &["s_client", "-connect", &format!("127.0.0.1:{port}")]);
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_string()
}

/// SIGHUP re-reads --tls-cert and --tls-key: new connections get the new certificate, the
/// connection made before keeps working; a bad key keeps the certificate of before.
#[test]
fn sighup_reloads_the_tls_certificate_and_keeps_connections() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    self_signed(dir.path(), "one", "lockkit-cert-one");
    self_signed(dir.path(), "two", "lockkit-cert-two");
    std::fs::copy(dir.path().join("one.crt"), dir.path().join("tls.crt")).unwrap();
    std::fs::copy(dir.path().join("one.key"), dir.path().join("tls.key")).unwrap();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let proxy = ProxyRun::start(
        &server.url(),
        &[
            "--quiet",
            "--tls-cert",
            &crt.to_string_lossy(),
            "--tls-key",
            &key.to_string_lossy(),
        ],
        dir.path(),
    );
    assert!(served_subject(dir.path(), proxy.port).contains("lockkit-cert-one"));
    let mut before = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect"])
        .arg(format!("127.0.0.1:{}", proxy.port))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_before = before.stdin.take().unwrap();
    let mut from_before = before.stdout.take().unwrap();
    to_before.write_all(&cmd(&["PING"])).unwrap();
    assert_eq!(reply_line(&mut from_before), "+PONG");
    std::fs::copy(dir.path().join("two.crt"), &crt).unwrap();
    std::fs::copy(dir.path().join("two.key"), &key).unwrap();
    proxy.send("HUP");
    std::thread::sleep(Duration::from_millis(500));
    let now = served_subject(dir.path(), proxy.port);
    to_before.write_all(&cmd(&["SET", "k", "v"])).unwrap();
    let kept = reply_line(&mut from_before);
    std::fs::write(&key, "not a key\n").unwrap();
    proxy.send("HUP");
    std::thread::sleep(Duration::from_millis(500));
    let after_bad = served_subject(dir.path(), proxy.port);
    drop(to_before);
    let _ = before.kill();
    let _ = before.wait();
    let run = proxy.stop();
    assert!(now.contains("lockkit-cert-two"), "{now} {}", run.all());
    assert_eq!(
        kept,
        "+OK",
        "the connection made before stays: {}",
        run.all()
    );
    assert!(after_bad.contains("lockkit-cert-two"), "{after_bad}");
    assert!(
        run.stderr.contains("kept the TLS of before"),
        "{}",
        run.all()
    );
}
