//! What every connection task of a proxy shares: the upstream, the plugins and which commands
//! each wants, the shared upstream connections, the timeouts, who may log in.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
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

/// Distinct command names counted at most (Redis 7.0 has about 240 commands and
/// subcommands): past it, the rest share [`OTHER_NAME`].
pub(crate) const MAX_COUNTED_NAMES: usize = 512;

/// Names Redis does not know that a connection counts apart before they share
/// [`OTHER_NAME`].
pub(crate) const MAX_UNKNOWN_NAMES: usize = 16;

/// The bucket of names past the bounds.
pub(crate) const OTHER_NAME: &[u8] = b"(other)";

/// The key a new name is counted under in a table of `len` names: itself while the table
/// has room (a name Redis does not know only among the first [`MAX_UNKNOWN_NAMES`]),
/// [`OTHER_NAME`] past it.
pub(crate) fn bounded_name(name: &[u8], known: bool, len: usize) -> Vec<u8> {
    let room = if known {
        MAX_COUNTED_NAMES
    } else {
        MAX_UNKNOWN_NAMES
    };
    if len < room {
        name.to_vec()
    } else {
        OTHER_NAME.to_vec()
    }
}

/// What every connection task shares.
#[derive(Debug)]
pub struct ProxyShared {
    pub(crate) upstream: Upstream,
    pub(crate) plugins: Vec<Arc<dyn Plugin>>,
    /// The plugin that is the built-in command metrics ([`Plugin::counts_commands`]), if any.
    command_metrics: Option<usize>,
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
    /// Who may log in at the proxy (replaced by [`ProxyShared::reload_auth`]).
    auth: RwLock<Arc<ClientAuth>>,
    /// The listener's TLS (replaced by [`ProxyShared::reload_tls`]).
    listener_tls: RwLock<Option<ListenerTls>>,
    /// What no reply may show: the upstream's secrets.
    pub(crate) secrets: Secrets,
    /// Clients served at once at most.
    pub(crate) max_clients: usize,
    /// How long a client may stay without logging in (when it has to).
    pub(crate) login_timeout: Duration,
    /// The largest request held: a client that sends a bigger one is closed.
    pub(crate) query_buffer_limit: usize,
    /// The most held of the replies owed to one client (`None`: no limit).
    pub(crate) output_buffer_limit: Option<usize>,
    /// Every client's replies held, and their cap.
    pub(crate) clients_memory: Arc<crate::upstream::outbuf::ClientsMemory>,
    /// Idle clients are closed after this long.
    pub(crate) idle_timeout: Option<Duration>,
    /// The cluster behind the proxy, when the upstream is a cluster node.
    pub(crate) cluster: Option<Arc<crate::cluster::Router>>,
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
        let command_metrics = plugins.iter().position(|p| p.counts_commands());
        for (i, p) in plugins.iter().enumerate() {
            if Some(i) == command_metrics {
                // Counted and timed by each connection itself.
                continue;
            }
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
            let timeouts = (options.op_timeout, options.slow_timeout);
            Pool::new(n, upstream.clone(), stop, timeouts)
        });
        ProxyShared {
            plugins,
            command_metrics,
            routes,
            every,
            commands: Mutex::new(FnvHashMap::default()),
            pool,
            op_timeout: options.op_timeout,
            drain_timeout: options.drain_timeout,
            workers,
            auth: RwLock::new(Arc::new(options.client_auth.clone())),
            listener_tls: RwLock::new(options.tls.clone()),
            secrets: Secrets::new(upstream.password()),
            max_clients: options.max_clients,
            login_timeout: options.login_timeout,
            idle_timeout: options.idle_timeout,
            query_buffer_limit: options.query_buffer_limit,
            output_buffer_limit: options.output_buffer_limit,
            clients_memory: Arc::new(crate::upstream::outbuf::ClientsMemory::new(
                options.maxmemory_clients,
            )),
            upstream,
            cluster: None,
        }
    }

    /// Whether the proxy routes to a Redis Cluster (detected at start).
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// Who may log in now.
    pub(crate) fn client_auth(&self) -> Arc<ClientAuth> {
        self.auth
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The listener's TLS now (`None`: plain TCP).
    pub(crate) fn tls(&self) -> Option<ListenerTls> {
        self.listener_tls
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// New users for the logins from now on (clients logged in stay logged in).
    ///
    /// # Errors
    /// Clients did not have to log in at start, or would not have to with `auth`: a reload
    /// cannot turn client authentication on or off.
    pub fn reload_auth(&self, auth: ClientAuth) -> Result<(), String> {
        let mut now = self.auth.write().unwrap_or_else(PoisonError::into_inner);
        if now.is_required() != auth.is_required() {
            return Err("a reload cannot turn client authentication on or off".into());
        }
        *now = Arc::new(auth);
        Ok(())
    }

    /// A new certificate and key for the TLS handshakes from now on.
    ///
    /// # Errors
    /// The listener serves plain TCP.
    pub fn reload_tls(&self, tls: ListenerTls) -> Result<(), String> {
        let mut now = self
            .listener_tls
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if now.is_none() {
            return Err("the listener serves plain TCP".into());
        }
        *now = Some(tls);
        Ok(())
    }

    /// The built-in command metrics, when they are on.
    pub(crate) fn command_metrics(&self) -> Option<&dyn Plugin> {
        self.plugins.get(self.command_metrics?).map(|p| &**p)
    }

    /// The plugins that want command `name` (upper case).
    pub(crate) fn plugins_for(&self, name: &[u8]) -> &[usize] {
        self.routes.get(name).map_or(&self.every, Vec::as_slice)
    }

    /// Adds (and empties) a connection's command counts. Names past [`MAX_COUNTED_NAMES`]
    /// are counted as [`OTHER_NAME`].
    pub(crate) fn add_counts(&self, counts: &mut FnvHashMap<Vec<u8>, u64>) {
        let mut all = self.commands.lock().unwrap_or_else(PoisonError::into_inner);
        for (k, v) in counts.drain() {
            if let Some(c) = all.get_mut(&k) {
                *c += v;
            } else if all.len() < MAX_COUNTED_NAMES {
                all.insert(k, v);
            } else {
                *all.entry(OTHER_NAME.to_vec()).or_default() += v;
            }
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
