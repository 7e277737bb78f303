//! The listening side: accept clients, give each a task (on the shared upstream connections, or
//! on one of its own with sharing off), tick the plugins, and stop cleanly (every connection
//! closed, every plugin's report collected).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client;
use crate::options::ProxyOptions;
use crate::plugin::{ConnInfo, Plugin, ReportCtx};
use crate::resp;
use crate::shared::ProxyShared;
use crate::tls::HANDSHAKE_TIMEOUT;
use crate::upstream::route::Up;
use crate::upstream::Upstream;

/// A running proxy: its address, and the handle that stops it.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<ReportCtx>,
    shared: Arc<ProxyShared>,
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
        let mut seeds = vec![upstream.clone()];
        for url in &options.seeds {
            let seed = Upstream::from_url(url).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            seeds.push(seed);
        }
        let timeouts = (options.op_timeout, options.slow_timeout);
        let cluster = crate::cluster::Router::detect(&seeds, closed_rx.clone(), timeouts).await;
        let mut shared = ProxyShared::new(upstream, plugins, &options, closed_rx);
        shared.cluster = cluster;
        let shared = Arc::new(shared);
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

    /// What its connections share: [`ProxyShared::reload_auth`] and
    /// [`ProxyShared::reload_tls`] replace the users and the certificate while it runs.
    pub fn shared(&self) -> &Arc<ProxyShared> {
        &self.shared
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
    shared: Arc<ProxyShared>,
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
                if tasks.len() >= shared.max_clients {
                    while tasks.try_join_next().is_some() {}
                }
                if tasks.len() >= shared.max_clients {
                    // As Redis: the error, then the connection closes (in a task: a client
                    // that reads nothing holds up no one).
                    crate::metrics::connection_refused();
                    let tls = shared.tls().is_some();
                    tokio::spawn(refuse(client, tls));
                    continue;
                }
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

/// Redis's answer to a client past `maxclients`; plain text only on a plain listener (a TLS
/// client is closed without it).
async fn refuse(mut client: TcpStream, tls: bool) {
    if !tls {
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            client.write_all(b"-ERR max number of clients reached\r\n"),
        )
        .await;
    }
    let _ = client.shutdown().await;
}

async fn handle(
    client: TcpStream,
    info: ConnInfo,
    shared: Arc<ProxyShared>,
    stop: watch::Receiver<bool>,
) {
    let _ = client.set_nodelay(true);
    let Some(tls) = shared.tls() else {
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
    shared: Arc<ProxyShared>,
    stop: watch::Receiver<bool>,
) where
    CR: tokio::io::AsyncRead + Unpin,
    CW: tokio::io::AsyncWrite + Unpin,
{
    if let Some(up) = Up::cluster(info.id, &shared) {
        client::serve(shared, info, (cr, cw), up, stop).await;
        return;
    }
    if shared.pool.is_some() {
        let up = Up::shared(info.id, &shared);
        client::serve(shared, info, (cr, cw), up, stop).await;
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
    client::serve(shared, info, (cr, cw), Up::own(upstream), stop).await;
}
