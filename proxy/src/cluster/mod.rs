//! The proxy in front of a Redis Cluster: clients see one standalone Redis, and each of their
//! commands goes to the master that owns its keys' slot.
//!
//! - **Detection** ([`Router::detect`]): at start, the first seed that answers (`--upstream`,
//!   repeatable) is asked `INFO cluster`; `cluster_enabled:1` turns cluster routing on, and the
//!   topology is read from `CLUSTER SHARDS` (`CLUSTER SLOTS` where that is unknown,
//!   [`topology`]).
//! - **Connections**: one shared connection per master and protocol ([`Router::link`]),
//!   opened when first needed, written back to back as the proxy's shared connections are.
//! - **Routing** ([`up`]): the request's keys are read from the one parsed request and the
//!   command's row of Redis's table ([`keys`]); all in one slot: to its master; no key: to a
//!   master (a few commands go to every master and have their replies combined); several
//!   slots: split per slot and merged (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH) or refused with
//!   Redis's own `-CROSSSLOT`.
//! - **Transactions** ([`multi`]): queued in the proxy, sent as `MULTI`...`EXEC` in one write
//!   to the master of their one slot.
//! - **Redirections**: `-MOVED` moves the slot at once, asks for a new topology and sends the
//!   command again on the new master; `-ASK` sends `ASKING` and the command to the target;
//!   `-TRYAGAIN` and `-CLUSTERDOWN` are retried a little later. No `MOVED` or `ASK` reaches a
//!   client. The topology is read again every few seconds and after a connection to a node
//!   fails, from any node known (the seeds, then every master seen), not only the first seed.

pub(crate) mod info;
pub(crate) mod keys;
pub(crate) mod merge;
pub(crate) mod multi;
pub(crate) mod own;
pub(crate) mod server;
pub(crate) mod topology;
pub(crate) mod up;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::upstream::link::{Pool, UpstreamLink};
use crate::upstream::{RespVersion, Upstream};
use topology::{Addr, SlotMap};

/// How often the topology is read again, redirections or not.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Scripts remembered at most.
pub(crate) const MAX_SCRIPTS: usize = 10_000;

/// One master: where it is and the shared connections to it.
#[derive(Debug)]
struct MasterConns {
    pool: Pool,
}

/// The cluster behind a proxy: the slot map, the masters' connections, the seeds.
#[derive(Debug)]
pub(crate) struct Router {
    map: RwLock<Arc<SlotMap>>,
    /// The upstream as the URL says it: every node is reached with its settings.
    template: Upstream,
    /// Every address the topology may be read from besides the masters: the seeds.
    seeds: Vec<Addr>,
    nodes: Mutex<HashMap<Addr, Arc<MasterConns>>>,
    refreshing: AtomicBool,
    /// Scripts seen in `EVAL` and `SCRIPT LOAD`, by SHA1: loaded on a node that answers an
    /// `EVALSHA` with `-NOSCRIPT`.
    scripts: Mutex<HashMap<String, Arc<[u8]>>>,
    stop: watch::Receiver<bool>,
    timeouts: (Duration, Duration),
}

/// `host:port` split; `None` when it does not read so.
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((
        host.trim_start_matches('[').trim_end_matches(']'),
        port.parse().ok()?,
    ))
}

/// The address of an upstream's TCP endpoint (`None`: a Unix socket).
fn addr_of(u: &Upstream) -> Option<Addr> {
    u.tcp_addr().map(|(h, p)| format!("{h}:{p}"))
}

impl Router {
    /// Asks the seeds, in order, whether they run in cluster mode: the first that answers
    /// decides. `Some` (with the topology read) for a cluster, `None` for a standalone server
    /// or when no seed answers (the proxy then works as in front of one server).
    pub(crate) async fn detect(
        seeds: &[Upstream],
        stop: watch::Receiver<bool>,
        timeouts: (Duration, Duration),
    ) -> Option<Arc<Router>> {
        for seed in seeds {
            let Some(addr) = addr_of(seed) else { continue };
            // Asked on a connection of its own: a seed that does not answer must not make the
            // clients' first connections back off.
            let probe = split_addr(&addr).map_or_else(|| seed.clone(), |(h, p)| seed.at(h, p));
            match topology::is_cluster(&probe).await {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => {
                    eprintln!(
                        "lockkit proxy: seed {} not reachable for cluster detection: {e}",
                        seed.shown()
                    );
                    continue;
                }
            }
            let host = split_addr(&addr).map_or("", |(h, _)| h).to_string();
            let map = match topology::fetch(&probe, &host).await {
                Ok(m) => m,
                Err(e) => {
                    eprintln!(
                        "lockkit proxy: cluster seed {} gave no topology: {e}",
                        seed.shown()
                    );
                    SlotMap::from_ranges(&[])
                }
            };
            let router = Arc::new(Router {
                map: RwLock::new(Arc::new(map)),
                template: seed.clone(),
                seeds: seeds.iter().filter_map(addr_of).collect(),
                nodes: Mutex::new(HashMap::new()),
                refreshing: AtomicBool::new(false),
                scripts: Mutex::new(HashMap::new()),
                stop,
                timeouts,
            });
            tokio::spawn(periodic(Arc::downgrade(&router), router.stop.clone()));
            return Some(router);
        }
        None
    }

    /// The slot map now.
    pub(crate) fn map(&self) -> Arc<SlotMap> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The master of `slot` now.
    pub(crate) fn master(&self, slot: u16) -> Option<Addr> {
        self.map().master(slot).map(str::to_string)
    }

    /// The masters now (the seed when none is known).
    pub(crate) fn masters(&self) -> Vec<Addr> {
        let m = self.map();
        if m.masters.is_empty() {
            return self.seeds.iter().take(1).cloned().collect();
        }
        // Only those that own slots (a master that lost all its slots stays in the list).
        let mut owning: Vec<bool> = vec![false; m.masters.len()];
        for i in m.owner.iter().flatten() {
            owning[usize::from(*i)] = true;
        }
        (m.masters.iter().zip(owning))
            .filter(|(_, o)| *o)
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// `-MOVED slot addr`: the slot is served by `addr` from now on.
    pub(crate) fn moved(&self, slot: u16, addr: &str) {
        let mut held = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if held.master(slot) == Some(addr) {
            return;
        }
        let map = Arc::make_mut(&mut held);
        let i = map.index_of(addr);
        if let Some(o) = map.owner.get_mut(usize::from(slot)) {
            *o = Some(i);
        }
    }

    /// Keeps a script's body under its SHA1 (at most [`MAX_SCRIPTS`]; past it, the oldest are
    /// forgotten all at once, as `SCRIPT FLUSH` would).
    pub(crate) fn remember_script(&self, body: &[u8]) {
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        let mut scripts = self.scripts.lock().unwrap_or_else(PoisonError::into_inner);
        if scripts.contains_key(&sha) {
            return;
        }
        if scripts.len() >= MAX_SCRIPTS {
            scripts.clear();
        }
        scripts.insert(sha, Arc::from(body));
    }

    /// `SCRIPT FLUSH`: no script is loaded again on `-NOSCRIPT` until seen again.
    pub(crate) fn forget_scripts(&self) {
        (self.scripts.lock().unwrap_or_else(PoisonError::into_inner)).clear();
    }

    /// The body of the script `sha` (lower case), if seen.
    pub(crate) fn script(&self, sha: &str) -> Option<Arc<[u8]>> {
        let scripts = self.scripts.lock().unwrap_or_else(PoisonError::into_inner);
        scripts.get(sha).cloned()
    }

    /// The live shared connection to `addr` for protocol `resp`, opened when needed.
    pub(crate) fn link(&self, addr: &str, id: u64, resp: RespVersion) -> Option<UpstreamLink> {
        let node = {
            let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
            match nodes.get(addr) {
                Some(n) => n.clone(),
                None => {
                    let (host, port) = split_addr(addr)?;
                    let upstream = self.template.at(host, port);
                    let pool = Pool::new(1, upstream, self.stop.clone(), self.timeouts);
                    let n = Arc::new(MasterConns { pool });
                    nodes.insert(addr.to_string(), n.clone());
                    n
                }
            }
        };
        Some(node.pool.link(id, resp))
    }

    /// A client's own connection to `addr` (opened when first used): blocking commands at
    /// its head have [`own::BLOCK_ALLOWANCE`].
    pub(crate) fn own_pool(&self, addr: &str) -> Option<Pool> {
        let (host, port) = split_addr(addr)?;
        let upstream = self.template.at(host, port);
        let timeouts = (self.timeouts.0, own::BLOCK_ALLOWANCE);
        Some(Pool::new(1, upstream, self.stop.clone(), timeouts))
    }

    /// Reads the topology again soon (once at a time), off the caller's path.
    pub(crate) fn refresh_soon(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.refresh().await;
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// Reads the topology from the first node that gives a whole one: the masters known, then
    /// the seeds. Keeps the map it has when none does.
    pub(crate) async fn refresh(&self) -> bool {
        let mut candidates = self.masters();
        for s in &self.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        let mut partial = None;
        for addr in candidates {
            let Some((host, port)) = split_addr(&addr) else {
                continue;
            };
            let node = self.template.at(host, port);
            if let Ok(map) = topology::fetch(&node, host).await {
                if map.covers_all() {
                    *self.map.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
                    return true;
                }
                partial.get_or_insert(map);
            }
        }
        if let Some(map) = partial {
            *self.map.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
            return true;
        }
        false
    }
}

/// Reads the topology every [`REFRESH_EVERY`] until the proxy stops.
async fn periodic(router: std::sync::Weak<Router>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(REFRESH_EVERY) => {}
            _ = stop.changed() => return,
        }
        let Some(r) = router.upgrade() else { return };
        if !r.refreshing.swap(true, Ordering::AcqRel) {
            r.refresh().await;
            r.refreshing.store(false, Ordering::Release);
        }
    }
}
