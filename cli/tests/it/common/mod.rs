//! Running the built `lockkit` binary from the CLI tests: one helper for all of them.

#![allow(dead_code)] // each test crate uses part of it

pub(crate) mod libraries;
pub(crate) mod serve;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a run may take before it is killed and the test fails (a hang is a failure).
const LIMIT: Duration = Duration::from_secs(60);

/// Reads one line of reply ("" when the peer closed first or said nothing in time).
pub(crate) fn reply_line(c: &mut impl Read) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        match c.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).trim_end().to_string()
}

/// One command in RESP, its arguments as text.
pub(crate) fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Fails the test if `run` was killed by a signal (a crash) or printed a Rust panic.
pub(crate) fn no_crash(run: &Run) {
    assert!(
        run.code.is_some(),
        "lockkit was killed by a signal (crash)\n{}",
        run.all()
    );
    assert!(
        !run.stderr.contains("panicked"),
        "a Rust panic\n{}",
        run.all()
    );
}

/// The repository root (the working directory of every run unless changed).
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a run of the binary left.
#[derive(Debug)]
pub(crate) struct Run {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Exit code 0.
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Everything, for assertion messages.
    pub(crate) fn all(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// One invocation of `lockkit`: no `REDIS_URL` unless given, the repository as working
/// directory, nothing on standard input unless given.
#[derive(Debug, Clone)]
pub(crate) struct Lockkit {
    args: Vec<OsString>,
    stdin: Option<String>,
    redis_url: Option<String>,
    cwd: PathBuf,
}

impl Lockkit {
    pub(crate) fn new<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Lockkit {
        Lockkit {
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
            stdin: None,
            redis_url: None,
            cwd: repo(),
        }
    }

    /// More arguments.
    pub(crate) fn args<S: AsRef<std::ffi::OsStr>>(mut self, more: &[S]) -> Lockkit {
        self.args.extend(more.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// One more argument (a path, say).
    pub(crate) fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Lockkit {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub(crate) fn stdin(mut self, text: Option<&str>) -> Lockkit {
        self.stdin = text.map(str::to_string);
        self
    }

    pub(crate) fn redis_url(mut self, url: Option<&str>) -> Lockkit {
        self.redis_url = url.map(str::to_string);
        self
    }

    pub(crate) fn cwd(mut self, dir: &Path) -> Lockkit {
        self.cwd = dir.to_path_buf();
        self
    }

    /// Starts the process with piped output (for tests that signal it).
    pub(crate) fn spawn(&self) -> Child {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockkit"));
        c.args(&self.args)
            .env_remove("REDIS_URL")
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(u) = &self.redis_url {
            c.env("REDIS_URL", u);
        }
        let mut child = c.spawn().expect("run lockkit");
        let mut input = child.stdin.take().expect("piped stdin");
        if let Some(text) = &self.stdin {
            input.write_all(text.as_bytes()).expect("write stdin");
        }
        drop(input);
        child
    }

    /// Runs to the end (killed, and the test failed, after 60 s).
    pub(crate) fn run(&self) -> Run {
        let child = self.spawn();
        wait(child, &format!("lockkit {:?}", self.args))
    }
}

/// Waits for `child` (at most 60 s) and collects its output.
pub(crate) fn wait(mut child: Child, what: &str) -> Run {
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        let _ = out.read_to_string(&mut o);
        let _ = err.read_to_string(&mut e);
        (o, e)
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = reader.join().unwrap();
    Run {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// Waits at most `limit` for `child`: its output, or `None` (and the child killed) when it
/// was still running then.
pub(crate) fn wait_for(mut child: Child, limit: Duration) -> Option<Run> {
    let deadline = Instant::now() + limit;
    while child.try_wait().ok()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(wait(child, "a finished child"))
}

/// `lockkit args...` with `stdin`, run to the end.
pub(crate) fn lockkit(args: &[&str], stdin: Option<&str>) -> Run {
    Lockkit::new(args).stdin(stdin).run()
}

/// The JSON report in `dir` (the only `.json` there).
pub(crate) fn json_in(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("a JSON report")
}

/// The entries of `dir`, sorted.
pub(crate) fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// `lockkit proxy` started on a free loopback port in front of `upstream`, already listening.
pub(crate) struct ProxyRun {
    /// `None` once waited for.
    child: Option<Child>,
    /// The port it listens on.
    pub port: u16,
}

impl ProxyRun {
    /// Starts `lockkit proxy --listen 127.0.0.1:PORT --upstream URL [extra...] --out DIR` and
    /// waits (at most 5 s) until it accepts connections.
    pub(crate) fn start(upstream: &str, extra: &[&str], out: &Path) -> ProxyRun {
        let port = lockkit_test_support::free_port().unwrap();
        let listen = format!("127.0.0.1:{port}");
        let child = Lockkit::new(&["proxy", "--listen", &listen, "--upstream", upstream])
            .args(extra)
            .arg("--out")
            .arg(out)
            .spawn();
        ProxyRun::wait_listening(child, port)
    }

    /// Starts it as [`ProxyRun::start`] does, under `ulimit -n NOFILE` (through bash).
    pub(crate) fn start_with_nofile(
        nofile: u32,
        upstream: &str,
        extra: &[&str],
        out: &Path,
    ) -> ProxyRun {
        let port = lockkit_test_support::free_port().unwrap();
        let listen = format!("127.0.0.1:{port}");
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_lockkit"))
            .args(["proxy", "--listen", &listen, "--upstream", upstream])
            .args(extra)
            .arg("--out")
            .arg(out)
            .env_remove("REDIS_URL")
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().expect("run lockkit through bash");
        ProxyRun::wait_listening(child, port)
    }

    fn wait_listening(child: Child, port: u16) -> ProxyRun {
        let listen = format!("127.0.0.1:{port}");
        let up = (0..200).any(|_| {
            let ok = std::net::TcpStream::connect(&listen).is_ok();
            if !ok {
                std::thread::sleep(Duration::from_millis(25));
            }
            ok
        });
        assert!(up, "the proxy never listened");
        ProxyRun {
            child: Some(child),
            port,
        }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// A line of its `/proc/PID/status` (`VmRSS`, `VmHWM`) in KiB.
    pub(crate) fn status_kib(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {text}"))
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it with SIGTERM (it writes its reports then) and waits for it to end.
    pub(crate) fn stop(self) -> Run {
        self.signal("TERM")
    }

    /// Sends it `signal` (`TERM`, `KILL`, ...) without waiting.
    pub(crate) fn send(&self, signal: &str) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Sends it `signal` and waits for it to end.
    pub(crate) fn signal(self, signal: &str) -> Run {
        self.send(signal);
        self.wait()
    }

    /// Waits for it to end (at most 60 s).
    pub(crate) fn wait(mut self) -> Run {
        wait(self.child.take().expect("running"), "lockkit proxy")
    }
}

impl Drop for ProxyRun {
    /// A test that failed half-way leaves no proxy behind (it would hold the build lock's
    /// descriptor, inherited from cargo, and every later build would wait for it).
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `redis-cli -p PORT args...`, its standard output.
pub(crate) fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `GET /metrics` on `port`: the body.
pub(crate) fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

/// The value of series `name` whose labels contain `label` (e.g. `command="SET"`), if exported.
pub(crate) fn series(scrape: &str, name: &str, label: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let (s, v) = line.rsplit_once(' ')?;
        let (n, labels) = s.split_once('{').unwrap_or((s, ""));
        (n == name && labels.contains(label)).then(|| v.parse().unwrap())
    })
}

/// A compare-and-delete release, as a lock client sends it with `EVAL`.
pub(crate) const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
