//! AUTH, ACL users limited to a key prefix, and TLS, against real redis-servers.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lockkit::Locker;
use lockkit::{Error, LockClient, ReleaseOutcome};
use lockkit_test_support::{RedisServer, ServerOptions};

/// The minimal ACL rule for a lockkit user, as documented in docs/RELIABILITY.md: the lock
/// commands, the commands the scripts run, and nothing else, on the lock key prefix only.
const LOCKER_ACL: &str = "ACL SETUSER locker on >lockpw resetkeys ~lock:* resetchannels -@all \
    +set +get +del +pexpire +incr +evalsha +eval +script|load +ping";

fn server_with_password() -> RedisServer {
    RedisServer::start_with(ServerOptions {
        extra_args: vec!["--requirepass".into(), "s3cret-pw".into()],
        password: Some("s3cret-pw".into()),
        ..ServerOptions::default()
    })
}

#[tokio::test]
async fn password_in_url_authenticates_and_wrong_password_is_a_clear_error() {
    let server = server_with_password();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let lock = client
        .try_acquire("lock:a", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert!(
        !client.target().contains("s3cret-pw"),
        "{}",
        client.target()
    );

    let bad = format!("redis://:wrong-pw@127.0.0.1:{}", server.port());
    let err = LockClient::connect(&bad).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("WRONGPASS") || text.contains("uthentication"),
        "{text}"
    );
    assert!(
        !text.contains("wrong-pw"),
        "the password leaked into the error: {text}"
    );
    assert!(!err.is_retryable());

    let none = format!("redis://127.0.0.1:{}", server.port());
    let err = LockClient::connect(&none).await.unwrap_err();
    assert!(err.to_string().contains("NOAUTH"), "{err}");
}

#[tokio::test]
async fn acl_user_limited_to_lock_prefix_can_lock_and_nothing_else() {
    let server = server_with_password();
    server.inline(LOCKER_ACL).unwrap();
    let url = format!("redis://locker:lockpw@127.0.0.1:{}", server.port());
    let client = LockClient::connect(&url).await.unwrap();
    let mut lock = client
        .try_acquire("lock:acl", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(client
        .extend(&mut lock, Duration::from_secs(5))
        .await
        .unwrap()
        .is_extended());
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    let fenced = client
        .try_acquire_fenced("lock:{f}", "lock:{f}:fence", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fenced.fencing_token(), Some(1));

    // Outside the prefix: refused by the server, reported as an error naming the permission.
    let err = client
        .try_acquire("orders:1", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)));
    assert!(err.to_string().contains("no permissions"), "{err}");

    let bad_user = format!("redis://nobody:lockpw@127.0.0.1:{}", server.port());
    let err = LockClient::connect(&bad_user).await.unwrap_err();
    assert!(err.to_string().contains("uthentication failed"), "{err}");
}

fn openssl(args: &[&str], dir: &Path) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl is installed");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA and a server certificate for 127.0.0.1, made for this test.
fn make_certs(dir: &Path) {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=lockkit test CA",
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
        dir,
    );
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
        dir,
    );
}

#[tokio::test]
async fn tls_server_with_untrusted_certificate_is_refused_by_default() {
    let tmp = tempfile::Builder::new()
        .prefix("lockkit-tls-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    make_certs(dir);
    let tls_port = lockkit_test_support::free_port().unwrap();
    let server = RedisServer::start_with(ServerOptions {
        extra_args: lockkit_test_support::tls_args(tls_port, dir),
        ..ServerOptions::default()
    });
    // The certificate is signed by a CA the client does not trust: refused, clearly.
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let err = LockClient::connect(&url).await.unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
        "{text}"
    );

    // Trusting the test CA explicitly: verified TLS works end to end.
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();
    let opts = lockkit::ClientOptions::new().tls_root_ca(ca);
    let client = LockClient::connect_with(&url, opts).await.unwrap();
    let lock = client
        .try_acquire("lock:tls", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        client.release(&lock).await.unwrap(),
        ReleaseOutcome::Released
    );
    drop(server);
}
