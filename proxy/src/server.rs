//! The listening side: accept clients, give each a task (on the shared upstream connections, or
//! on one of its own with sharing off), tick the plugins, and stop cleanly (every connection
//! closed, every plugin's report collected).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::auth::ClientAuth;
use crate::conn;
use crate::link::Pool;
use crate::plugin::{ConnInfo, Plugin, ReportCtx};
use crate::resp;
use crate::tls::{ListenerTls, HANDSHAKE_TIMEOUT};
use crate::up::Up;
use crate::upstream::Upstream;

/// Shared upstream connections by default.
pub const DEFAULT_SHARED_CONNECTIONS: usize = 1;

/// How a [`Proxy`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyOptions {
    shared_connections: usize,
    op_timeout: Duration,
    drain_timeout: Duration,
    client_auth: ClientAuth,
    tls: Option<ListenerTls>,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            shared_connections: DEFAULT_SHARED_CONNECTIONS,
            op_timeout: crate::DEFAULT_OP_TIMEOUT,
            drain_timeout: crate::DEFAULT_DRAIN_TIMEOUT,
            client_auth: ClientAuth::default(),
            tls: None,
        }
    }
}

impl ProxyOptions {
    /// The defaults: [`DEFAULT_SHARED_CONNECTIONS`] shared upstream connections.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many upstream connections the stateless commands of all clients share (`0`: none,
    /// every client gets a connection of its own, as before sharing existed).
    ///
    /// A client moves to a connection of its own on its first command whose meaning depends on
    /// the connection (MULTI, blocking commands, SUBSCRIBE, AUTH, SELECT, CLIENT, HELLO, ...,
    /// and any command not known to be stateless) and keeps it.
    #[must_use]
    pub fn shared_connections(mut self, n: usize) -> Self {
        self.shared_connections = n;
        self
    }

    /// The users clients log in as at the proxy (none by default: every client is let in).
    /// Every user reaches the upstream as the upstream URL's user.
    #[must_use]
    pub fn client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = auth;
        self
    }

    /// TLS on the listener (`None`, the default: plain TCP).
    #[must_use]
    pub fn tls(mut self, tls: Option<ListenerTls>) -> Self {
        self.tls = tls;
        self
    }

    /// The number of shared upstream connections (`0`: sharing is off).
    pub fn shared_connection_count(&self) -> usize {
        self.shared_connections
    }

    /// How long an upstream request may wait for its reply (default
    /// [`crate::DEFAULT_OP_TIMEOUT`]): past it, its connection is given up and the commands on
    /// it get error replies. Blocking commands and pub/sub on a client's own connection may
    /// wait longer. Zero is taken as one millisecond.
    #[must_use]
    pub fn op_timeout(mut self, d: Duration) -> Self {
        self.op_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// How long [`Proxy::stop`] lets the commands already forwarded get their replies (default
    /// [`crate::DEFAULT_DRAIN_TIMEOUT`]) before it closes what is left.
    #[must_use]
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.drain_timeout = d;
        self
    }
}

/// What every connection task shares.
#[derive(Debug)]
pub struct Shared {
    pub(crate) upstream: Upstream,
    pub(crate) plugins: Vec<Arc<dyn Plugin>>,
    /// Upper-case command name → the plugins that declared it, in `--plugin` order.
    routes: FnvHashMap<Vec<u8>, Vec<usize>>,
    /// The plugins that declared `*`.
    every: Vec<usize>,
    commands: Mutex<FnvHashMap<Vec<u8>, u64>>,
    /// The shared upstream connections (`None`: one of its own for each client).
    pub(crate) pool: Option<Pool>,
    /// How long an upstream request may wait for its reply.
    pub(crate) op_timeout: Duration,
    /// The threads of the plugins whose hooks run off the connections' threads.
    pub(crate) workers: crate::offload::Workers,
    drain_timeout: Duration,
    /// Who may log in at the proxy.
    pub(crate) client_auth: ClientAuth,
    tls: Option<ListenerTls>,
}

impl Shared {
    fn new(
        upstream: Upstream,
        plugins: Vec<Arc<dyn Plugin>>,
        options: &ProxyOptions,
        stop: watch::Receiver<bool>,
    ) -> Shared {
        let mut routes: FnvHashMap<Vec<u8>, Vec<usize>> = FnvHashMap::default();
        let mut every = Vec::new();
        for (i, p) in plugins.iter().enumerate() {
            for c in p.commands() {
                if c == "*" {
                    every.push(i);
                } else {
                    routes
                        .entry(c.to_ascii_uppercase().into_bytes())
                        .or_default()
                        .push(i);
                }
            }
        }
        // A plugin that wants everything also sees the declared names, in plugin order.
        for list in routes.values_mut() {
            list.extend(every.iter().copied());
            list.sort_unstable();
            list.dedup();
        }
        let upstream = upstream.with_user_timeout(options.op_timeout);
        let workers = crate::offload::Workers::new(&plugins);
        let pool = (options.shared_connections > 0).then(|| {
            let n = options.shared_connections;
            Pool::new(n, upstream.clone(), stop, options.op_timeout)
        });
        Shared {
            upstream,
            plugins,
            routes,
            every,
            commands: Mutex::new(FnvHashMap::default()),
            pool,
            op_timeout: options.op_timeout,
            drain_timeout: options.drain_timeout,
            workers,
            client_auth: options.client_auth.clone(),
            tls: options.tls.clone(),
        }
    }

    /// The plugins that want command `name` (upper case).
    pub(crate) fn plugins_for(&self, name: &[u8]) -> &[usize] {
        self.routes.get(name).map_or(&self.every, Vec::as_slice)
    }

    /// Adds (and empties) a connection's command counts.
    pub(crate) fn add_counts(&self, counts: &mut FnvHashMap<Vec<u8>, u64>) {
        let mut all = self.commands.lock().unwrap_or_else(PoisonError::into_inner);
        for (k, v) in counts.drain() {
            *all.entry(k).or_default() += v;
        }
    }

    /// Commands seen so far, by name.
    pub fn command_counts(&self) -> BTreeMap<String, u64> {
        let all = self.commands.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter()
            .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), *v))
            .collect()
    }
}

/// A running proxy: its address, and the handle that stops it.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<ReportCtx>,
    shared: Arc<Shared>,
    started: Instant,
}

impl Proxy {
    /// Listens on `listen` and serves until [`Proxy::stop`], with the default options.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(
        listen: &str,
        upstream: Upstream,
        plugins: Vec<Arc<dyn Plugin>>,
    ) -> std::io::Result<Proxy> {
        Proxy::start_with(listen, upstream, plugins, ProxyOptions::default()).await
    }

    /// Listens on `listen` and serves until [`Proxy::stop`].
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start_with(
        listen: &str,
        upstream: Upstream,
        plugins: Vec<Arc<dyn Plugin>>,
        options: ProxyOptions,
    ) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        // The shared connections close after the clients' connections drained.
        let (closed, closed_rx) = watch::channel(false);
        let shared = Arc::new(Shared::new(upstream, plugins, &options, closed_rx));
        let task = tokio::spawn(accept_loop(listener, shared.clone(), stop_rx, closed));
        Ok(Proxy {
            addr,
            stop,
            task,
            shared,
            started: Instant::now(),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The plugins it runs.
    pub fn plugins(&self) -> &[Arc<dyn Plugin>] {
        &self.shared.plugins
    }

    /// What its reports are made from while it runs (for snapshots).
    pub fn reporter(&self) -> crate::snapshot::Reporter {
        crate::snapshot::Reporter::new(self.shared.clone(), self.started)
    }

    /// Stops accepting, lets every command already forwarded get its reply (up to the drain
    /// timeout, [`ProxyOptions::drain_timeout`]), closes every connection and returns what the
    /// reports are written from. Commands a client sent that were not forwarded yet are not;
    /// a connection in pub/sub or MONITOR mode closes at once.
    pub async fn stop(self) -> ReportCtx {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(ctx) => ctx,
            Err(_) => ReportCtx {
                target: self.shared.upstream.shown().to_string(),
                duration: Duration::ZERO,
                commands: self.shared.command_counts(),
            },
        }
    }

    /// Every plugin's report, by plugin name (those that have one).
    pub fn reports(
        plugins: &[Arc<dyn Plugin>],
        ctx: &ReportCtx,
    ) -> Vec<(String, serde_json::Value)> {
        plugins
            .iter()
            .filter_map(|p| p.report(ctx).map(|r| (p.name().to_string(), r)))
            .collect()
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    closed: watch::Sender<bool>,
) -> ReportCtx {
    let started = Instant::now();
    let next_id = AtomicU64::new(1);
    let mut tasks = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, peer)) = accepted else {
                    // Out of file descriptors and the like: wait a little, keep serving.
                    crate::metrics::connection_refused();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let info = ConnInfo { id: next_id.fetch_add(1, Ordering::Relaxed), peer: Some(peer) };
                let open = crate::metrics::connection_accepted();
                let task = handle(client, info, shared.clone(), stop.clone());
                let shared = shared.clone();
                let each = move |hook: fn(&dyn Plugin, &ConnInfo)| {
                    for p in 0..shared.plugins.len() {
                        shared.workers.run(&shared.plugins, p, move |p| hook(p, &info));
                    }
                };
                each(|p, c| p.on_connect(c));
                tasks.spawn(async move {
                    task.await;
                    each(|p, c| p.on_close(c));
                    drop(open);
                });
            }
            _ = tick.tick() => {
                crate::metrics::refresh();
                for p in 0..shared.plugins.len() {
                    shared.workers.run(&shared.plugins, p, |p| p.on_tick());
                }
                while tasks.try_join_next().is_some() {}
            }
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    // Each connection drains: it reads no more commands, passes on the replies owed, closes.
    let _ = tokio::time::timeout(shared.drain_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let _ = closed.send(true);
    // The plugins' threads finish what was queued before the reports are read.
    let _ = tokio::time::timeout(shared.drain_timeout, shared.workers.flush()).await;
    for (p, plugin) in shared.plugins.iter().enumerate() {
        let n = shared.workers.dropped(p);
        if n > 0 {
            eprintln!(
                "lockkit proxy: plugin {}: {n} hooks dropped (its queue was full: the plugin is slower than the traffic it declared)",
                plugin.name()
            );
        }
    }
    ReportCtx {
        target: shared.upstream.shown().to_string(),
        duration: started.elapsed(),
        commands: shared.command_counts(),
    }
}

async fn handle(
    client: TcpStream,
    info: ConnInfo,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let _ = client.set_nodelay(true);
    let Some(tls) = shared.tls.clone() else {
        return serve_client(client.into_split(), info, shared, stop).await;
    };
    // A client that fails the handshake (no certificate, a wrong one) is simply closed.
    if let Ok(Ok(stream)) =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(client)).await
    {
        serve_client(tokio::io::split(stream), info, shared, stop).await;
    } else {
        crate::metrics::connection_refused();
    }
}

async fn serve_client<CR, CW>(
    (cr, mut cw): (CR, CW),
    info: ConnInfo,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) where
    CR: tokio::io::AsyncRead + Unpin,
    CW: tokio::io::AsyncWrite + Unpin,
{
    if shared.pool.is_some() {
        let up = Up::shared();
        conn::serve(shared, info, (cr, cw), up, stop).await;
        return;
    }
    let upstream = match shared.upstream.connect().await {
        Ok(u) => u,
        Err(e) => {
            crate::metrics::upstream_error("connect");
            let msg = format!(
                "ERR lockkit proxy: upstream {} unusable: {e}",
                shared.upstream.shown()
            );
            let _ = cw.write_all(&resp::error_reply(&msg)).await;
            let _ = cw.shutdown().await;
            return;
        }
    };
    conn::serve(shared, info, (cr, cw), Up::own(upstream), stop).await;
}
