//! What every connection task of a proxy shares: the upstream, the plugins and which commands
//! each wants, the shared upstream connections, the timeouts, who may log in.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fnv::FnvHashMap;
use tokio::sync::watch;

use crate::auth::ClientAuth;
use crate::client::secrets::Secrets;
use crate::options::ProxyOptions;
use crate::plugin::Plugin;
use crate::tls::ListenerTls;
use crate::upstream::link::Pool;
use crate::upstream::Upstream;

/// What every connection task shares.
#[derive(Debug)]
pub struct ProxyShared {
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
    pub(crate) drain_timeout: Duration,
    /// Who may log in at the proxy.
    pub(crate) client_auth: ClientAuth,
    pub(crate) tls: Option<ListenerTls>,
    /// What no reply may show: the upstream's secrets.
    pub(crate) secrets: Secrets,
}

impl ProxyShared {
    pub(crate) fn new(
        upstream: Upstream,
        plugins: Vec<Arc<dyn Plugin>>,
        options: &ProxyOptions,
        stop: watch::Receiver<bool>,
    ) -> ProxyShared {
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
        ProxyShared {
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
            secrets: Secrets::new(upstream.password()),
            upstream,
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
