//! Throwaway real `redis-server` processes: for `lockkit bench` without `--url`, for the
//! real-server tests and for the benchmarks.
//!
//! [`RedisServer::start`] spawns a `redis-server` on a free loopback port with no persistence
//! (`--save "" --appendonly no`) and `--enable-debug-command yes`, waits until it answers `PING`,
//! keeps its log so a failing test can show it, and kills and reaps the process on drop.
//! [`RedisServer::restart`] brings it back empty on the same port, [`RedisServer::pause`] and
//! [`RedisServer::resume`] freeze and thaw it (SIGSTOP/SIGCONT), [`RedisCluster`] joins several
//! into a Redis Cluster and [`Nutcracker`] puts twemproxy in front of some.
//! `REDIS_SERVER_BIN` overrides the binary (default: `redis-server` from `PATH`).
//!
//! This crate is a normal dependency of the load generator, so it holds only process
//! management; helpers that exist only for tests live in `tests/support`.
//!
//! ```no_run
//! use lockkit_redis_proc::{RedisServer, ServerOptions};
//!
//! let server = RedisServer::try_start(ServerOptions::default())?;
//! println!("a throwaway server at {}", server.url());
//! // Dropping `server` kills the process and removes its folder.
//! # Ok::<(), lockkit_redis_proc::StartError>(())
//! ```
//!
//! # Errors
//! [`RedisServer::try_start`] and the other `try_*` constructors return a [`StartError`] that
//! says what to install or set when the binary is missing, with the server's log when it
//! started but did not answer.
//!
//! # Panics
//! The `start*` helpers meant for tests panic with the server's log when it cannot start;
//! [`RedisServer::try_start`] returns the error instead (used by the CLI).

use std::fmt;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod cluster;
mod proxy;
pub use cluster::RedisCluster;
pub use proxy::Nutcracker;

/// How long a server gets to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a server could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The binary was not found or could not be executed.
    NotFound {
        /// The binary that was tried.
        bin: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The process started but did not answer in time, or exited.
    NotReady {
        /// The binary that was tried.
        bin: String,
        /// What went wrong.
        reason: String,
        /// The server's log, for the message.
        log: String,
    },
    /// Setting up the temporary directory or a free port failed.
    Io(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NotFound { bin, source } => write!(
                f,
                "cannot run `{bin}` ({source}); install it (Debian/Ubuntu: `apt-get install -y redis-server`), \
                 set REDIS_SERVER_BIN to its path, or pass --url to measure an existing server"
            ),
            StartError::NotReady { bin, reason, log } => {
                write!(f, "`{bin}` did not become ready: {reason}\n--- server log ---\n{log}")
            }
            StartError::Io(e) => write!(f, "preparing a local redis-server: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Options for a spawned server; `Default` is a plain standalone server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Extra `--name value` arguments passed after the defaults, e.g. `["--requirepass", "pw"]`.
    pub extra_args: Vec<String>,
    /// Reuse this port (after a restart); `None` picks a free one.
    pub port: Option<u16>,
    /// The password the readiness check authenticates with (when `requirepass` is set).
    pub password: Option<String>,
}

/// A running `redis-server`; killed and reaped on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    bin: String,
    options: ServerOptions,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

/// A loopback port that was free a moment ago (bind to port 0, read it, close).
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn unique_dir() -> std::io::Result<PathBuf> {
    // A new folder of our own under the system's temporary directory (never an existing one left
    // by an earlier process); removed by the owner's `Drop`.
    Ok(tempfile::Builder::new()
        .prefix("lockkit-redis-")
        .tempdir()?
        .keep())
}

/// Sends one inline command and reads the first reply line (enough for PING/AUTH readiness).
fn inline_command(addr: SocketAddr, line: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(line.as_bytes())?;
    let mut buf = [0u8; 256];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

impl RedisServer {
    /// Starts a default server, panicking with its log if it cannot (for tests).
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with options, panicking with its log if it cannot (for tests).
    pub fn start_with(options: ServerOptions) -> RedisServer {
        match Self::try_start(options) {
            Ok(server) => server,
            Err(e) => panic!("redis-proc: {e}"),
        }
    }

    /// Starts `n` independent servers (for quorum tests).
    pub fn start_many(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| Self::start()).collect()
    }

    /// Starts a server, returning why it could not start.
    pub fn try_start(options: ServerOptions) -> Result<RedisServer, StartError> {
        let dir = unique_dir().map_err(StartError::Io)?;
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            bin: binary(),
            options,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        // A port picked as free can be taken by someone else before the server binds it:
        // retry a few times with a fresh port unless the caller pinned one.
        let attempts = if self.options.port.is_some() { 1 } else { 5 };
        let mut last = None;
        for _ in 0..attempts {
            let port = match self.options.port {
                Some(p) => p,
                None => free_port().map_err(StartError::Io)?,
            };
            match self.spawn_on(port) {
                Ok(()) => return Ok(()),
                Err(e @ StartError::NotFound { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StartError::Io(std::io::Error::other("no attempt made"))))
    }

    fn spawn_on(&mut self, port: u16) -> Result<(), StartError> {
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--port")
            .arg(port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--enable-debug-command")
            .arg("yes")
            .arg("--daemonize")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| StartError::NotFound {
            bin: self.bin.clone(),
            source,
        })?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + START_TIMEOUT;
        let probe = match &self.options.password {
            Some(pw) => format!("AUTH {pw}\r\nPING\r\n"),
            None => "PING\r\n".to_string(),
        };
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                return Err(StartError::NotReady {
                    bin: self.bin.clone(),
                    reason: format!("exited with {status} on port {port}"),
                    log: format!("{}{stderr}", read_log(&log)),
                });
            }
            if let Ok(reply) = inline_command(addr, &probe) {
                if reply.contains("PONG") || reply.starts_with("+OK") {
                    break;
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(StartError::NotReady {
                    bin: self.bin.clone(),
                    reason: format!("no PONG on port {port} within {START_TIMEOUT:?}"),
                    log: read_log(&log),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.port = port;
        self.child = Some(child);
        Ok(())
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `redis://127.0.0.1:PORT` URL of this server (with the password when one is set).
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The OS process id, for signals (SIGSTOP/SIGCONT) in fault tests.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The working directory (holds the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read_log(&self.log_path())
    }

    /// Kills the server (SIGKILL) and reaps it; the port stays reserved for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Kills the server and starts a fresh one on the same port (empty dataset, empty script cache),
    /// panicking with its log if it cannot (for tests).
    pub fn restart(&mut self) {
        if let Err(e) = self.try_restart() {
            panic!("redis-proc: restart failed: {e}");
        }
    }

    /// Kills the server and starts a fresh one on the same port (empty dataset, empty script
    /// cache), returning why it could not come back.
    pub fn try_restart(&mut self) -> Result<(), StartError> {
        self.kill();
        let port = self.port;
        self.options.port = Some(port);
        // The old socket may linger briefly; retry binding for a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.spawn_on(port) {
                Ok(()) => return Ok(()),
                Err(e @ StartError::NotFound { .. }) => return Err(e),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Freezes the process (SIGSTOP): it keeps its connections but answers nothing until
    /// [`resume`](Self::resume), as a server stopped by a VM pause or a debugger would.
    pub fn pause(&self) -> std::io::Result<()> {
        self.signal("-STOP")
    }

    /// Lets a [`pause`](Self::pause)d process run again (SIGCONT); harmless on a running one.
    pub fn resume(&self) -> std::io::Result<()> {
        self.signal("-CONT")
    }

    /// Sends a signal through `kill(1)` (this workspace forbids `unsafe`, so no `libc::kill`).
    fn signal(&self, sig: &str) -> std::io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| std::io::Error::other("the server is not running"))?;
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("kill {sig} {pid}: {status}")))
        }
    }

    /// Sends a raw inline command (e.g. `"SCRIPT FLUSH"`) and returns the first reply bytes.
    ///
    /// For test set-up only; the library under test never goes through this.
    pub fn inline(&self, line: &str) -> std::io::Result<String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut cmd = String::new();
        if let Some(pw) = &self.options.password {
            cmd.push_str(&format!("AUTH {pw}\r\n"));
        }
        cmd.push_str(line);
        cmd.push_str("\r\n");
        let reply = inline_command(addr, &cmd)?;
        Ok(match &self.options.password {
            Some(_) => reply.strip_prefix("+OK\r\n").unwrap_or(&reply).to_string(),
            None => reply,
        })
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_answers_and_dies_on_drop() {
        let server = RedisServer::start();
        let port = server.port();
        assert!(server.inline("PING").unwrap().contains("PONG"));
        drop(server);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }

    #[test]
    fn missing_binary_is_a_clear_error() {
        let mut s = RedisServer {
            child: None,
            port: 0,
            dir: unique_dir().unwrap(),
            bin: "/nonexistent/redis-server".into(),
            options: ServerOptions::default(),
        };
        let err = s.spawn().unwrap_err().to_string();
        assert!(err.contains("apt-get install -y redis-server"), "{err}");
    }

    #[test]
    fn restart_keeps_port_and_empties_data() {
        let mut server = RedisServer::start();
        let port = server.port();
        server.inline("SET k v").unwrap();
        server.restart();
        assert_eq!(server.port(), port);
        assert!(server.inline("GET k").unwrap().starts_with("$-1"));
    }

    #[test]
    fn paused_server_answers_nothing_until_resumed() {
        let server = RedisServer::start();
        server.pause().unwrap();
        // The kernel still accepts the connection; the frozen process never replies.
        assert!(server.inline("PING").is_err());
        server.resume().unwrap();
        assert!(server.inline("PING").unwrap().contains("PONG"));
    }
}
