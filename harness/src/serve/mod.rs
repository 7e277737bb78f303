//! The harness as a RESP server (`lockkit lua serve`): many connections, one keyspace, one
//! script cache, one function library and one virtual clock.
//!
//! Each connection is a task (`conn`) that reads requests (`lockkit_resp::RequestParser`, with Redis's limits before login) and writes replies ([`resp`]), answers what belongs
//! to a connection itself (HELLO, AUTH, CLIENT, MULTI/EXEC, CONFIG, the kill commands) and
//! sends the rest to the one shared [`Harness`] (`shared`).
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use lockkit_harness::serve::{ServeOptions, Server};
//! let server = Server::start(ServeOptions::new().listen("127.0.0.1:0")).await?;
//! println!("{}", server.addr().port());
//! server.stop().await;
//! # Ok(()) }
//! ```

mod acl;
mod blocking;
mod clients;
mod cluster;
mod conn;
mod expiry;
mod nulls;
mod pubsub;
mod refusals;
pub mod resp;
mod shared;
mod tuning;
mod watched;
mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use shared::ClockMode;

use crate::harness::{Harness, HarnessOptions};

/// What `lockkit lua serve` starts with.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    listen: String,
    busy_threshold: Duration,
    time_limit: Duration,
    clock: ClockMode,
    requirepass: Option<String>,
    max_clients: usize,
    keyspace_limit: usize,
    strict_keys: Option<bool>,
    pubsub_limit: usize,
    cluster: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: "127.0.0.1:6379".into(),
            busy_threshold: Duration::from_secs(5),
            time_limit: Duration::from_secs(60),
            clock: ClockMode::Frozen,
            requirepass: None,
            max_clients: 1000,
            keyspace_limit: crate::DEFAULT_KEYSPACE_LIMIT,
            strict_keys: None,
            pubsub_limit: pubsub::PUBSUB_LIMIT,
            cluster: 0,
        }
    }
}

impl ServeOptions {
    /// The defaults: `127.0.0.1:6379`, Redis's 5 s `busy-reply-threshold`, scripts stopped
    /// after 60 s, a frozen clock, no password, 1,000 connections, a 256 MiB keyspace, a
    /// subscriber closed past 32 MiB of messages not yet written to it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where to listen (`host:port`; port 0 picks a free one).
    #[must_use]
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = addr.into();
        self
    }

    /// After how long a running script makes other connections answer `-BUSY`
    /// (`busy-reply-threshold`, also `CONFIG SET lua-time-limit`).
    #[must_use]
    pub fn busy_threshold(mut self, d: Duration) -> Self {
        self.busy_threshold = d;
        self
    }

    /// After how long the harness stops a script nobody killed (Redis would run it forever).
    #[must_use]
    pub fn time_limit(mut self, d: Duration) -> Self {
        self.time_limit = d;
        self
    }

    /// How the virtual clock moves between commands.
    #[must_use]
    pub fn clock(mut self, c: ClockMode) -> Self {
        self.clock = c;
        self
    }

    /// The password clients must give with AUTH or HELLO (Redis's `requirepass`).
    #[must_use]
    pub fn requirepass(mut self, pw: Option<String>) -> Self {
        self.requirepass = pw;
        self
    }

    /// How many connections at once (Redis's `maxclients`).
    #[must_use]
    pub fn max_clients(mut self, n: usize) -> Self {
        self.max_clients = n;
        self
    }

    /// Bytes the keyspace may use (`maxmemory` with `noeviction`; 0 for none).
    #[must_use]
    pub fn keyspace_limit(mut self, bytes: usize) -> Self {
        self.keyspace_limit = bytes;
        self
    }

    /// Bytes of messages a subscriber may have queued and not yet written to it before it is
    /// closed (Redis's `client-output-buffer-limit pubsub` hard limit, 32 MiB; 0: no limit).
    #[must_use]
    pub fn pubsub_limit(mut self, bytes: usize) -> Self {
        self.pubsub_limit = bytes;
        self
    }
}

impl ServeOptions {
    /// `--strict-keys`: see [`Harness::set_strict_keys`]. Off by default, on by default
    /// with [`ServeOptions::cluster`].
    #[must_use]
    pub fn strict_keys(mut self, on: bool) -> Self {
        self.strict_keys = Some(on);
        self
    }

    /// `--cluster N`: N masters on N ports over the one keyspace, each owning an equal range
    /// of the hash slots (0: a standalone server). The ports are the listen port and the
    /// next N - 1 ones, or N free ports when the listen port is 0.
    #[must_use]
    pub fn cluster(mut self, masters: usize) -> Self {
        self.cluster = masters;
        self
    }
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What every connection task reads: the shared harness and the server's settings.
#[derive(Debug)]
struct Ctx {
    shared: Arc<shared::ServeShared>,
    requirepass: Option<String>,
    pubsub_limit: usize,
    port: u16,
    /// With `--cluster`: which master of the cluster face this port is.
    cluster: Option<cluster::ClusterPort>,
    /// ACL users other than `default`.
    users: std::sync::Mutex<acl::Users>,
    /// The connections of this port (CLIENT LIST).
    clients: std::sync::Mutex<clients::Clients>,
}

impl Ctx {
    fn clients(&self) -> std::sync::MutexGuard<'_, clients::Clients> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Server {
    /// Binds and starts serving.
    ///
    /// # Errors
    /// The address cannot be bound, an option is out of range, or Lua cannot start.
    pub async fn start(options: ServeOptions) -> std::io::Result<Server> {
        let invalid = |e: crate::HarnessError| std::io::Error::other(e.to_string());
        let mut harness = Harness::with_options(
            HarnessOptions::new()
                .time_limit(options.time_limit)
                .keyspace_limit(options.keyspace_limit),
        )
        .map_err(invalid)?;
        harness.set_strict_keys(options.strict_keys.unwrap_or(options.cluster > 0));
        let listeners = bind(&options.listen, options.cluster).await?;
        let addrs = listeners
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?;
        let members = (options.cluster > 0)
            .then(|| cluster::members(&addrs.iter().map(SocketAddr::port).collect::<Vec<_>>()));
        let shared = shared::ServeShared::new(harness, options.busy_threshold, options.clock);
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        if options.clock == ClockMode::Wall {
            tasks.push(tokio::spawn(expiry::run(shared.clone(), stop_rx.clone())));
        }
        for (i, (listener, addr)) in listeners.into_iter().zip(&addrs).enumerate() {
            let ctx = Arc::new(Ctx {
                shared: shared.clone(),
                requirepass: options.requirepass.clone(),
                users: std::sync::Mutex::default(),
                clients: std::sync::Mutex::default(),
                pubsub_limit: options.pubsub_limit,
                port: addr.port(),
                cluster: members.clone().map(|m| cluster::ClusterPort::new(m, i)),
            });
            let slots = Arc::new(Semaphore::new(options.max_clients.max(1)));
            tasks.push(tokio::spawn(accept_loop(
                listener,
                ctx,
                slots,
                stop_rx.clone(),
            )));
        }
        Ok(Server { addrs, stop, tasks })
    }

    /// The address it listens on (with `--cluster`, the first master's).
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every address it listens on: one, or each master's with `--cluster`.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Closes the listeners and every connection.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The listener, or with `masters` > 0 one per master: on the listen port and the next ones,
/// or each on a free port when the listen port is 0.
async fn bind(listen: &str, masters: usize) -> std::io::Result<Vec<TcpListener>> {
    if masters == 0 {
        return Ok(vec![TcpListener::bind(listen).await?]);
    }
    if masters > 16384 {
        return Err(std::io::Error::other(
            "a cluster has at most 16384 masters (one slot each)",
        ));
    }
    let base = tokio::net::lookup_host(listen)
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{listen} names no address")))?;
    let mut listeners = Vec::with_capacity(masters);
    for i in 0..masters {
        let mut addr = base;
        if base.port() != 0 {
            let port = u16::try_from(usize::from(base.port()) + i).map_err(|_| {
                std::io::Error::other(format!(
                    "{masters} masters from port {} go past port 65535",
                    base.port()
                ))
            })?;
            addr.set_port(port);
        }
        listeners.push(TcpListener::bind(addr).await?);
    }
    Ok(listeners)
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<Ctx>,
    slots: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((socket, peer)) = accepted else { continue };
                let permit = slots.clone().try_acquire_owned().ok();
                let id = permit.is_some().then(|| ctx.shared.next_client_id());
                let ctx = ctx.clone();
                let stop = stop.clone();
                conns.spawn(async move {
                    conn::serve(socket, peer, ctx, id, stop).await;
                    drop(permit);
                });
            }
        }
    }
    conns.shutdown().await;
}

/// A memory value as Redis's CONFIG SET reads it: bytes, or `k`/`kb`/`m`/`mb`/`g`/`gb` (any
/// case; `k` is 1,000, `kb` 1,024).
fn memory_bytes(v: &[u8]) -> Option<usize> {
    let s = String::from_utf8_lossy(v).to_ascii_lowercase();
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: usize = match &s[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}
