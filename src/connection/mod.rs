//! Opening connections: one server, a proxy in front of servers, or a Redis Cluster, told
//! apart by asking the target itself.
//!
//! The connection layer, one folder: `Conn` and opening it (this file); [`link`], lockkit's own
//! pipelined connection to one server; [`connector`], opening a socket and logging in
//! (`lockkit::net`); [`pool`], a client's connections with their affinity, the script cache and the counters; [`hub`], the
//! release-notification connection and how it stays alive; [`notify`], the waiters it wakes
//! (`lockkit::wait`).

pub(crate) mod cluster;
pub mod connector;
pub(crate) mod hub;
pub(crate) mod link;
pub mod notify;
pub(crate) mod pool;
pub(crate) mod subscriber;

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClientBuilder;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use self::cluster::ClusterConn;
use self::link::{Endpoint, Link};
use crate::command::Command;
use crate::error::Result;
use crate::options::ClientOptions;
use crate::url::redact_url;

/// What kind of target a client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// One Redis server (or a replica set's primary).
    Standalone,
    /// A proxy such as twemproxy that refuses `CLIENT SETINFO`, `SCRIPT LOAD`, `INFO`.
    Proxy,
    /// A Redis Cluster: commands are routed by key slot.
    Cluster,
}

impl Topology {
    /// The name used in reports: `standalone`, `proxy`, `cluster`.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Proxy => "proxy",
            Topology::Cluster => "cluster",
        }
    }
}

/// One multiplexed connection: to a server (auto-reconnecting), or to a whole cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(Link),
    Cluster(ClusterConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// One command's reply, a server error as `Err`: what `cmd.query_async::<Value>` gives, but
    /// on one server without redis-rs's boxed future, and for a command lockkit encodes itself
    /// straight into the connection's buffer (its hot commands); a cluster, whose client routes
    /// redis-rs's commands, gets it as a `Cmd`.
    pub(crate) async fn query_with(&self, command: &impl Command) -> redis::RedisResult<Value> {
        match self {
            Conn::Single(link) => link
                .query_with(|out| command.write(out))
                .await?
                .extract_error(),
            Conn::Cluster(c) => cluster_query(c, command.cmd()).await?.extract_error(),
        }
    }
}

impl Conn {
    /// The connection to one server that this is, or `None` for a cluster's (redis-rs's).
    pub(crate) fn link(&self) -> Option<&Link> {
        match self {
            Conn::Single(link) => Some(link),
            Conn::Cluster(_) => None,
        }
    }

    /// [`query_with`](Self::query_with), with the number of the connection it went out on
    /// ([`Link::query_on`]); a cluster's connections are redis-rs's and have none (`0`).
    pub(crate) async fn query_on(
        &self,
        command: &impl Command,
    ) -> redis::RedisResult<(Value, u64)> {
        match self {
            Conn::Single(link) => {
                let (v, epoch) = link.query_on(|out| command.write(out)).await?;
                Ok((v.extract_error()?, epoch))
            }
            Conn::Cluster(c) => Ok((cluster_query(c, command.cmd()).await?.extract_error()?, 0)),
        }
    }

    /// Until when a command sent over this connection at `sent` may still reach the server
    /// late ([`Link::late_delivery_until`]); `None` for a cluster, whose connections are
    /// redis-rs's and say nothing of it.
    pub(crate) fn late_delivery_until(
        &self,
        sent: std::time::Instant,
    ) -> Option<std::time::Instant> {
        match self {
            Conn::Single(link) => link.late_delivery_until(sent),
            Conn::Cluster(_) => None,
        }
    }

    /// The number of the live connection, `None` while there is none (always `Some(0)` for a
    /// cluster).
    pub(crate) fn epoch(&self) -> Option<u64> {
        match self {
            Conn::Single(link) => link.epoch(),
            Conn::Cluster(_) => Some(0),
        }
    }
}

/// A command over a cluster connection, boxed: it stays out of the futures of the one-server
/// path, which carry only the pointer.
fn cluster_query(
    c: &ClusterConn,
    cmd: Cmd,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<Value>> + Send>> {
    let mut c = c.clone();
    Box::pin(async move { c.req_packed_command(&cmd).await })
}

fn tls_certs(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// The URL's connection settings, with the library name (`CLIENT SETINFO`) unless `proxy`.
pub(crate) fn connection_info(url: &str, proxy: bool) -> Result<redis::ConnectionInfo> {
    let info = crate::url::parse_url(url)?;
    let settings = info.redis_settings().clone();
    let settings = if proxy {
        settings.set_skip_set_lib_name()
    } else {
        settings.set_lib_name("lockkit", env!("CARGO_PKG_VERSION"))
    };
    Ok(info.set_redis_settings(settings))
}

/// Where lockkit's own pipelined connections ([`Link`]) go, and how.
fn endpoint(url: &str, options: &ClientOptions, proxy: bool) -> Result<Endpoint> {
    Ok(Endpoint::new(
        connection_info(url, proxy)?,
        options.tls_root_ca.as_deref(),
        options.connect_timeout,
        options.response_timeout,
        options.reconnect_retries,
    )?)
}

/// Opens `options.connections` connections to `url` and says what the target is.
///
/// A connection closed during the handshake means a proxy (unless `options.proxy` says
/// otherwise); `cluster_enabled:1` in `INFO cluster` means a cluster, whichever node the URL names.
pub(crate) async fn open(url: &str, options: &ClientOptions) -> Result<(Vec<Conn>, Topology)> {
    let (conns, topology, _) = open_detecting(url, options).await?;
    Ok((conns, topology))
}

/// [`open`], also saying whether acquires should use `SET ... NX GET`: in a cluster of Redis 7.0
/// or later, where the cluster client re-sends a command after a dropped connection and a plain
/// `SET NX` would then report our own landed lock as busy.
pub(crate) async fn open_detecting(
    url: &str,
    options: &ClientOptions,
) -> Result<(Vec<Conn>, Topology, bool)> {
    options.validate()?;
    let mut proxy = options.proxy == Some(true);
    let first = Link::connect(endpoint(url, options, proxy)?);
    let first = match within(options, "opening a connection", first).await {
        Ok(c) => c,
        Err(e) if options.proxy.is_none() && closed_by_peer(&e) => {
            tracing::warn!(
                target = %redact_url(url),
                "the server closed the connection during the handshake; assuming a proxy \
                 (no CLIENT SETINFO, no SCRIPT LOAD: scripts go by EVAL once per backend)"
            );
            proxy = true;
            let again = Link::connect(endpoint(url, options, proxy)?);
            within(options, "opening a connection", again).await?
        }
        Err(e) => return Err(e.into()),
    };
    if proxy {
        return Ok((
            grow(first, url, options, proxy).await?,
            Topology::Proxy,
            false,
        ));
    }
    let mut probe = first.clone();
    // An ACL user without +info is fine: such a locked-down user is on a plain server (a
    // cluster client would need CLUSTER SLOTS, which it would not have either).
    let mut info_cluster = redis::cmd("INFO");
    info_cluster.arg("cluster");
    let asked = info_cluster.query_async(&mut probe);
    let info: String = match within(options, "INFO cluster", asked).await {
        Ok(info) => info,
        Err(e) if e.code() == Some("NOPERM") => String::new(),
        Err(e) => return Err(e.into()),
    };
    if !info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Ok((
            grow(first, url, options, proxy).await?,
            Topology::Standalone,
            false,
        ));
    }
    let mut info_server = redis::cmd("INFO");
    info_server.arg("server");
    let asked = info_server.query_async(&mut probe);
    let server: String = within(options, "INFO server", asked)
        .await
        .unwrap_or_default();
    let set_nx_get = server
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok())
        .is_some_and(|major| major >= 7);
    drop(first);
    let mut builder = ClusterClientBuilder::new(vec![url])
        .connection_timeout(options.connect_timeout)
        .retries(options.reconnect_retries as u32)
        .tcp_settings(connector::redis_tcp_settings());
    if let Some(t) = options.response_timeout {
        builder = builder.response_timeout(t);
    }
    if let Some(ca) = &options.tls_root_ca {
        builder = builder.certs(tls_certs(ca));
    }
    let cluster = builder.build()?;
    let opened = (0..options.connections)
        .map(|_| ClusterConn::open(cluster.clone(), options.connect_timeout));
    let opened = within(options, "opening the cluster's connections", async {
        futures_util::future::try_join_all(opened).await
    });
    let conns = opened.await?.into_iter().map(Conn::Cluster).collect();
    Ok((conns, Topology::Cluster, set_nx_get))
}

/// `step` of opening a client, within the connect timeout: a server that accepts and then
/// answers nothing fails the connect in that time, at whichever step it went silent.
pub(crate) async fn within<T>(
    options: &ClientOptions,
    what: &str,
    step: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(options.connect_timeout, step).await {
        Ok(done) => done,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "connecting: {what}: no answer within the connect timeout ({:?})",
                options.connect_timeout
            ),
        )
        .into()),
    }
}

/// The target accepted the connection and then closed it, as twemproxy does on a command it
/// does not know. redis-rs counts a refused connection (nothing listens) as "dropped" too; that
/// is no proxy, and guessing one would hide the real cause.
fn closed_by_peer(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal()
}

/// The first connection and the others, opened side by side within the connect timeout.
async fn grow(first: Link, url: &str, options: &ClientOptions, proxy: bool) -> Result<Vec<Conn>> {
    let endpoint = endpoint(url, options, proxy)?;
    let others = (1..options.connections).map(|_| Link::connect(endpoint.clone()));
    let others = within(options, "opening connections", async {
        futures_util::future::try_join_all(others).await
    })
    .await?;
    Ok(std::iter::once(first)
        .chain(others)
        .map(Conn::Single)
        .collect())
}

/// Connections established on first use (a Redlock node that is down at start-up).
pub(crate) fn open_lazy(url: &str, options: &ClientOptions) -> Result<Vec<Conn>> {
    options.validate()?;
    let endpoint = endpoint(url, options, options.proxy == Some(true))?;
    Ok((0..options.connections)
        .map(|_| Conn::Single(Link::lazy(endpoint.clone())))
        .collect())
}
