//! Shared set-up of the proxy tests: a real server, the proxy in-process, redis-cli.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use lockkit_proxy::observe::{Observe, ObserveOptions, ObserveReport};
use lockkit_proxy::{Plugin, Proxy, Upstream};

/// A proxy in front of `upstream` with `plugins`.
pub(crate) async fn start_proxy(upstream: &str, plugins: Vec<Arc<dyn Plugin>>) -> Proxy {
    Proxy::start(
        "127.0.0.1:0",
        Upstream::from_url(upstream).expect("a valid URL"),
        plugins,
    )
    .await
    .expect("the proxy starts")
}

/// A proxy with `observe` in front of `upstream`.
pub(crate) async fn start_observed(upstream: &str) -> (Proxy, Arc<Observe>) {
    let observe = Arc::new(Observe::new(ObserveOptions::default()));
    let proxy = start_proxy(upstream, vec![observe.clone()]).await;
    (proxy, observe)
}

/// Stops the proxy and returns observe's report, read back as the file would be.
pub(crate) async fn observe_report(proxy: Proxy, observe: &Observe) -> ObserveReport {
    let ctx = proxy.stop().await;
    let value = observe.report(&ctx).expect("observe always reports");
    serde_json::from_value(value).expect("the report has the observe schema")
}

/// Runs redis-cli against `port` with `args` and `stdin`; its stdout (stderr appended).
pub(crate) fn redis_cli(port: u16, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli runs (apt-get install redis-tools)");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(stdin.as_bytes())
        .expect("redis-cli reads its input");
    let out = child.wait_with_output().expect("redis-cli finishes");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

/// A raw connection with a read timeout, so a test fails instead of hanging.
pub(crate) fn raw_conn(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("the proxy accepts");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `bytes` and reads until `want` bytes arrived or the peer closed; what arrived.
pub(crate) fn roundtrip(s: &mut TcpStream, bytes: &[u8], want: usize) -> std::io::Result<Vec<u8>> {
    s.write_all(bytes)?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < want {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

pub(crate) use lockkit_test_support::python_with_redis;

/// Runs the Python `script` with redis-py and `args` (off the async runtime); its stdout.
///
/// # Panics
/// The script fails (its stderr is shown).
pub(crate) async fn run_python(script: &str, args: &[&str]) -> String {
    let script = script.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        python_with_redis()
            .arg("-c")
            .arg(&script)
            .args(&args)
            .output()
            .expect("python3 runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One command as RESP.
pub(crate) fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Replies read one complete frame at a time from a connection (lockkit's own reply scanner
/// decides where a frame ends).
#[derive(Debug, Default)]
pub(crate) struct Replies {
    buf: Vec<u8>,
}

impl Replies {
    /// The next complete reply; an error on a read timeout, `UnexpectedEof` when the peer
    /// closed first, `InvalidData` for bytes that are not RESP.
    pub(crate) fn next(&mut self, s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        let mut chunk = [0u8; 4096];
        loop {
            match lockkit::resp::frame_len(&self.buf) {
                Ok(Some(len)) => return Ok(self.buf.drain(..len).collect()),
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{e}: {:?}", String::from_utf8_lossy(&self.buf)),
                    ))
                }
            }
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Everything `s` sends after `bytes` until it closes or stays quiet for `quiet`.
pub(crate) fn read_until_quiet(s: &mut TcpStream, bytes: &[u8], quiet: Duration) -> Vec<u8> {
    s.write_all(bytes).expect("the peer takes the bytes");
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Redis's suite runs one unit at a time in this process: `redis_suite.rs` and `cluster_suite.rs`
/// each had a test binary of its own, so never ran at once, before the tests became one binary.
pub(crate) static SUITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Redis 7.0.15's test suite (`$REDIS_TESTS`, else `../shared/redis-tests` beside the clone, as
/// in CI, else /work/shared/redis-tests), when it and `tclsh` are there.
pub(crate) fn redis_suite() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("REDIS_TESTS").map(PathBuf::from),
        Some(manifest.join("../../shared/redis-tests")),
        Some(PathBuf::from("/work/shared/redis-tests")),
    ];
    let have_tcl = Command::new("tclsh")
        .arg("/dev/null")
        .status()
        .is_ok_and(|s| s.success());
    have_tcl
        .then(|| {
            candidates
                .into_iter()
                .flatten()
                .find(|p| p.join("run-external.sh").is_file())
        })
        .flatten()
}

/// A connection to `port` (a proxy in front of a cluster, or a node) that waits up to 30 s for
/// a reply (blocking commands through the proxy wait longer than redis-rs's default).
pub(crate) async fn conn(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection")
}

/// The command `args` on `c`, its reply as `T`.
pub(crate) async fn q<T: redis::FromRedisValue>(
    c: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}
