//! `lockkit bench --faults delay=...,drop=...,blackhole=...`: the network faults of the load
//! generator are the proxy's `faults` plugin (`lockkit_proxy::faults`), in a proxy started
//! in-process in front of each node. [`ProxyFaults`] is what the `lockkit` binary hands to
//! `lockkit_loadgen::bench::bench_with`.
//!
//! Each proxy listens on a loopback port and the lock clients connect there (plainly: the proxy
//! logs in upstream with the URL's user, password and database, over TLS if the URL says so).
//! Faults are off until the measurement starts, so connecting and the bench's first lock pass
//! untouched; each run (script mode) then gets a fresh plugin with the run's seed, its blackhole
//! windows counted from the start of the measurement and recorded as `blackhole` events.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use lockkit_loadgen::faults::network::BoxFuture;
use lockkit_loadgen::faults::{FaultKind, FaultLog, NetworkFaultInjector, NetworkFaultPath};
use lockkit_report::faults::{FaultsOptions, NetworkFaultCounts};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use lockkit_proxy::faults::{mix, Faults};
use lockkit_proxy::{Action, ConnInfo, Plugin, PluginCommand, Proxy, Upstream};

/// How long disarming waits for the blackhole events under way to be recorded.
const RECORD_TIMEOUT: Duration = Duration::from_secs(2);

/// The proxy as `lockkit bench`'s network faults.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ProxyFaults;

impl NetworkFaultInjector for ProxyFaults {
    fn start<'a>(
        &'a self,
        urls: &'a [String],
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn NetworkFaultPath>>> {
        Box::pin(async move {
            let mut nodes = Vec::with_capacity(urls.len());
            for url in urls {
                let upstream = Upstream::from_url(url)?;
                let switch = Arc::new(Switch::default());
                let plugins: Vec<Arc<dyn Plugin>> = vec![switch.clone()];
                let proxy = Proxy::start("127.0.0.1:0", upstream, plugins)
                    .await
                    .with_context(|| {
                        format!("listening on loopback for {}", lockkit::redact_url(url))
                    })?;
                let node = lockkit_loadgen::target::host_port(url)
                    .map_or_else(|| lockkit::redact_url(url), |(h, p)| format!("{h}:{p}"));
                nodes.push(FaultNode {
                    proxy,
                    switch,
                    node,
                });
            }
            Ok(Box::new(Path {
                nodes,
                recorders: Mutex::new(Vec::new()),
            }) as Box<dyn NetworkFaultPath>)
        })
    }
}

/// One node's proxy.
#[derive(Debug)]
struct FaultNode {
    proxy: Proxy,
    switch: Arc<Switch>,
    /// `host:port` of the node, for the events.
    node: String,
}

#[derive(Debug)]
struct Path {
    nodes: Vec<FaultNode>,
    recorders: Mutex<Vec<JoinHandle<()>>>,
}

impl NetworkFaultPath for Path {
    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://{}", n.proxy.addr()))
            .collect()
    }

    fn arm(&self, options: FaultsOptions, log: Arc<FaultLog>, stop: watch::Receiver<bool>) {
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (i, n) in self.nodes.iter().enumerate() {
            // The first node on the run's seed (as `--plugin faults:...,seed=N` would be); the
            // others on seeds of their own, so their windows and drops do not coincide.
            let seed = if i == 0 {
                options.seed
            } else {
                mix(&[options.seed, i as u64])
            };
            let faults = Arc::new(Faults::starting_at(
                FaultsOptions { seed, ..options },
                log.start(),
            ));
            n.switch.set(Some(Arc::clone(&faults)));
            if options.blackhole.is_some() {
                recorders.push(tokio::spawn(record_windows(
                    faults,
                    Arc::clone(&log),
                    n.node.clone(),
                    stop.clone(),
                )));
            }
        }
    }

    fn disarm(&self) -> BoxFuture<'_, NetworkFaultCounts> {
        Box::pin(async move {
            let mut total = NetworkFaultCounts::default();
            for n in &self.nodes {
                if let Some(f) = n.switch.set(None) {
                    let c = f.counts();
                    total.commands += c.commands;
                    total.delayed += c.delayed;
                    total.dropped_before_send += c.dropped_before_send;
                    total.dropped_reply_lost += c.dropped_reply_lost;
                    total.blackholed += c.blackholed;
                }
            }
            let recorders: Vec<JoinHandle<()>> = std::mem::take(
                &mut *self
                    .recorders
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            for r in recorders {
                let abort = r.abort_handle();
                if tokio::time::timeout(RECORD_TIMEOUT, r).await.is_err() {
                    abort.abort();
                }
            }
            total
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            for n in self.nodes {
                n.proxy.stop().await;
            }
        })
    }
}

/// Records each blackhole window of `faults` in `log` when it ends, or cut short when `stop`
/// fires; ends with the run (one window per period, so the loop is bounded by the run's length).
async fn record_windows(
    faults: Arc<Faults>,
    log: Arc<FaultLog>,
    node: String,
    mut stop: watch::Receiver<bool>,
) {
    for k in 0..u64::from(u32::MAX) {
        let Some((start, end)) = faults.blackhole_window(k) else {
            return;
        };
        let whole = tokio::select! {
            _ = tokio::time::sleep_until(end.into()) => true,
            _ = stop.wait_for(|s| *s) => false,
        };
        let now = Instant::now();
        if now <= start {
            return;
        }
        log.record(
            FaultKind::Blackhole,
            start,
            end.min(now) - start,
            Some(node.clone()),
        );
        if !whole {
            return;
        }
    }
}

/// The `faults` plugin of the run under way, or none (everything passes).
#[derive(Debug, Default)]
struct Switch {
    current: RwLock<Option<Arc<Faults>>>,
}

impl Switch {
    /// Puts `faults` in place; the one it replaces.
    fn set(&self, faults: Option<Arc<Faults>>) -> Option<Arc<Faults>> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *current, faults)
    }
}

impl Plugin for Switch {
    fn name(&self) -> &str {
        "faults"
    }

    fn commands(&self) -> Vec<String> {
        vec!["*".to_string()]
    }

    fn wants_reply(&self, _cmd: &PluginCommand<'_>) -> bool {
        false
    }

    fn on_command(&self, conn: &ConnInfo, cmd: &PluginCommand<'_>) -> Action {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some(f) => f.on_command(conn, cmd),
            None => Action::Pass,
        }
    }
}
