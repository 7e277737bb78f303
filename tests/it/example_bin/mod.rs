//! Building and running the `examples/` binaries from integration tests.

#![allow(dead_code)] // each test crate uses part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

/// Builds `examples/{name}.rs` (with the `tower` and `metrics` features) into this test's target dir once, and
/// returns the binary's path. Cargo has no `CARGO_BIN_EXE_` for examples, hence the nested build.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    // .../target/debug/deps/<this test> -> .../target/debug
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir
        .parent()
        .expect("target dir above the profile dir")
        .to_path_buf();
    BUILT.get_or_init(|| {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args([
            "build",
            "--quiet",
            "--features",
            "tower,metrics",
            "--examples",
        ]);
        if profile_dir.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo
            .args(["-p", "lockkit", "--manifest-path", manifest])
            .env("CARGO_TARGET_DIR", &target_dir)
            .status()
            .expect("running cargo build --examples");
        assert!(status.success(), "cargo build --examples failed");
    });
    let bin = profile_dir.join("examples").join(name);
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// A running example process: killed and reaped on drop; its stdout lines are collected.
pub(crate) struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Running {
    pub(crate) fn start(bin: &PathBuf, args: &[String]) -> Running {
        let mut child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits (at most `limit`) for a stdout line containing `needle`.
    pub(crate) fn wait_for_line(&mut self, needle: &str, limit: Duration) -> String {
        loop {
            match self.lines.recv_timeout(limit) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e}); output so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for the process to exit by itself (at most `limit`) and returns all its stdout.
    pub(crate) fn wait_exit(mut self, limit: Duration) -> Vec<String> {
        loop {
            match self.lines.recv_timeout(limit) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("process did not finish ({e}):\n{}", self.seen.join("\n")),
            }
        }
        let status = self.child.wait().expect("wait");
        assert!(
            status.success(),
            "exited with {status}:\n{}",
            self.seen.join("\n")
        );
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 POST over a fresh connection; returns the status code and the body.
pub(crate) fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    request("POST", port, path, headers, body)
}

/// One HTTP/1.1 GET over a fresh connection; returns the status code and the body.
pub(crate) fn get(port: u16, path: &str) -> (u16, String) {
    request("GET", port, path, &[], "")
}

fn request(
    method: &str,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}
