//! A client's connections and what goes with them: the set of connections (which one a call
//! takes: `affinity.rs`), the script cache (`script_cache.rs`) and script calls' encoding
//! (`script_cmd.rs`), the counters (`stats.rs`), the release-notification hub.

mod affinity;
mod script_cache;
mod script_cmd;
mod stats;

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use super::hub::{open_hub, Hub};
use crate::connection::{self as conn, Conn, Topology};
use crate::error::Result;
use crate::keys;
use crate::options::{ClientOptions, WaitMode};

pub(crate) use self::script_cmd::{script_cmd, with_channel, ScriptCall, ScriptCmd};
pub use self::stats::ClientStats;
use self::stats::Counters;

pub(crate) struct Inner {
    conns: Vec<Conn>,
    topology: Topology,
    next: AtomicUsize,
    pub(crate) options: ClientOptions,
    pub(crate) counters: Counters,
    target: String,
    warned_preload: AtomicBool,
    /// Acquire with `SET ... NX GET` (a Redis 7 cluster, whose client re-sends after a drop).
    set_nx_get: bool,
    /// The release notifications waiters are woken by (`None`: they poll).
    hub: Option<Hub>,
    /// Why waiters poll although notification was asked for.
    polling_because: Option<String>,
    /// How long a release's "released" marker lives, in ms ([`Connections::released_marker`]).
    marker_ms: String,
}

/// The connection side of a [`LockClient`](crate::LockClient): a set of auto-reconnecting
/// multiplexed connections, the script cache state and counters.
#[derive(Clone)]
pub(crate) struct Connections(pub(crate) Arc<Inner>);

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("target", &self.0.target)
            .field("connections", &self.0.conns.len())
            .field("script_mode", &self.0.options.script_mode)
            .finish()
    }
}

impl Connections {
    pub(crate) async fn connect(url: &str, mut options: ClientOptions) -> Result<Connections> {
        let (conns, topology, set_nx_get) = conn::open_detecting(url, &options).await?;
        if topology == Topology::Proxy {
            options.proxy = Some(true);
        }
        let (hub, polling_because) = match options.wait {
            WaitMode::Poll => (None, None),
            WaitMode::Notify => match open_hub(url, &options, topology, conns[0].clone()).await? {
                Ok(hub) => (Some(hub), None),
                Err(why) => {
                    tracing::info!(target = %crate::url::redact_url(url), why, "release notification unavailable; waiters poll");
                    (None, Some(why))
                }
            },
        };
        let wait = (hub, polling_because);
        let this = Self::assemble(url, options, conns, topology, set_nx_get, wait);
        // Within the connect timeout too: a server that stops answering now fails the connect.
        let limit = this.0.options.connect_timeout;
        match tokio::time::timeout(limit, this.preload()).await {
            Ok(preloaded) => preloaded?,
            Err(_) => {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting: loading the scripts: no answer within the connect timeout ({limit:?})"),
                ))
                .into())
            }
        }
        Ok(this)
    }

    /// Connections that are established on first use (for a Redlock node that is down at
    /// start-up); scripts then reach the server through the `NOSCRIPT` recovery path.
    pub(crate) fn lazy(url: &str, options: ClientOptions) -> Result<Connections> {
        let conns = conn::open_lazy(url, &options)?;
        let topology = if options.proxy == Some(true) {
            Topology::Proxy
        } else {
            Topology::Standalone
        };
        Ok(Self::assemble(
            url,
            options,
            conns,
            topology,
            false,
            (None, None),
        ))
    }

    fn assemble(
        url: &str,
        options: ClientOptions,
        conns: Vec<Conn>,
        topology: Topology,
        set_nx_get: bool,
        (hub, polling_because): (Option<Hub>, Option<String>),
    ) -> Connections {
        let marker_ms = options.resend_window().as_millis().max(1).to_string();
        Connections(Arc::new(Inner {
            marker_ms,
            conns,
            next: AtomicUsize::new(0),
            options,
            counters: Counters::default(),
            target: crate::url::redact_url(url),
            warned_preload: AtomicBool::new(false),
            topology,
            set_nx_get,
            hub,
            polling_because,
        }))
    }

    /// The release notifications, when waiters are woken by them.
    pub(crate) fn hub(&self) -> Option<&Hub> {
        self.0.hub.as_ref()
    }

    /// Why waiters poll although notification was asked for.
    pub(crate) fn polling_because(&self) -> Option<&str> {
        self.0.polling_because.as_deref()
    }

    /// How scripts are called (`EVALSHA`, `EVAL` or `FCALL`).
    pub(crate) fn script_mode(&self) -> crate::options::ScriptMode {
        self.0.options.script_mode
    }

    /// The channel a release of `key` publishes on: on one server only (a cluster would
    /// broadcast every release to all its nodes; a proxy does not carry pub/sub), and not for a
    /// Redlock node (Redlock's waiters poll: nobody would hear it).
    pub(crate) fn release_channel(&self, key: &str) -> Option<String> {
        (self.0.topology == Topology::Standalone && self.0.options.publish_releases)
            .then(|| super::notify::release_channel(key))
    }

    /// Where a release of `key` leaves its "released" marker: in a cluster only, whose client
    /// re-sends a command that may already have run (after a dropped connection or a timeout),
    /// so that the repeat answers "released" instead of "not held". `None` elsewhere (lockkit's
    /// own connections never re-send), and for a key whose braces make no hash tag (no name
    /// shares its slot).
    pub(crate) fn released_marker(&self, key: &str) -> Option<String> {
        if self.0.topology != Topology::Cluster {
            return None;
        }
        let marker = crate::keys::companion_key(key, "released");
        (keys::key_slot(marker.as_bytes()) == keys::key_slot(key.as_bytes())).then_some(marker)
    }

    /// What the target is: one server, a proxy, or a cluster.
    pub(crate) fn topology(&self) -> Topology {
        self.0.topology
    }

    pub(crate) fn target(&self) -> &str {
        &self.0.target
    }

    /// Whether acquires use `SET ... NX GET` to recognise their own re-sent `SET`.
    pub(crate) fn set_nx_get(&self) -> bool {
        self.0.set_nx_get
    }

    /// Whether the client treats its target as a proxy (set, or detected at connect).
    pub(crate) fn is_proxy(&self) -> bool {
        self.0.topology == Topology::Proxy
    }
}
