//! Live metrics: `--metrics-listen ADDR` serves Prometheus text at `/metrics`, recorded through
//! the [`metrics`] facade and rendered by `metrics-exporter-prometheus`, except the two
//! histograms: the proxy keeps those itself as fixed buckets of atomic counts (`durations.rs`:
//! the exporter would hold every sample until its upkeep) and appends them in the same format.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `lockkit_proxy_connections_open` | gauge | | client connections open now |
//! | `lockkit_proxy_connections_accepted_total` | counter | | client connections accepted |
//! | `lockkit_proxy_connections_refused_total` | counter | | client connections that could not be accepted, or failed the listener's TLS handshake |
//! | `lockkit_proxy_commands_total` | counter | `command` | commands by name |
//! | `lockkit_proxy_command_duration_seconds` | histogram | `command` | proxy → server → proxy, from the read that brought the command to the read that brought its reply |
//! | `lockkit_proxy_upstream_errors_total` | counter | `kind` (`connect`, `timeout`, `lost`) | upstream connections that failed |
//! | `lockkit_proxy_upstream_reconnects_total` | counter | | shared upstream connections opened again after one failed |
//! | `lockkit_proxy_clients_closed_for_memory_total` | counter | | clients closed for the replies held for them (output buffer limit, `--maxmemory-clients`, a shared connection left waiting) |
//! | `lockkit_proxy_plugin_faults_total` | counter | `plugin` | Lua plugin hooks that failed (error, time or memory limit) |
//! | `lockkit_proxy_plugin_hooks_dropped_total` | counter | `plugin` | hooks nobody waits for (`on_reply`, ...) dropped because the plugin's queue was full |
//! | `lockkit_proxy_lock_acquired_total` | counter | `pattern` | `observe`: acquisitions per lock pattern |
//! | `lockkit_proxy_lock_contended_total` | counter | `pattern` | `observe`: acquire attempts that found the lock taken |
//! | `lockkit_proxy_lock_hold_seconds` | histogram | `pattern` | `observe`: how long locks were held |
//! | `lockkit_proxy_lock_recommended_ttl_seconds` | gauge | `pattern` | `observe`: the TTL `lockkit ttl --observed` would recommend now |
//! | `lockkit_proxy_hot_key_commands` | gauge | `key` | `observe:top=N`: commands on each of the window's top keys so far |
//! | `lockkit_proxy_big_value_bytes` | gauge | `key` | `observe:top=N`: the window's largest replies, by key |
//!
//! Command names are labels only for the names of Redis 7.0's command table, at most
//! [`MAX_COMMAND_LABELS`] distinct ones; any other name (a module's, a made-up one) counts under
//! `other`. Lock patterns are bounded by `observe` (1,000, then `{other}`). Keys are labels
//! only of the two `top` gauges: at most N each per window; a key that left the top reads 0,
//! and its series goes after [`KEY_SERIES_KEPT`] without an update (gauges not updated for that
//! long are dropped; the proxy's own gauges are refreshed every second).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ::metrics::{Counter, Histogram};
use anyhow::Context;
use fnv::FnvHashMap;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::durations::BUCKETS;
use crate::plugin::{ConnInfo, Plugin, PluginCommand};

/// Distinct command names given a label of their own.
pub const MAX_COMMAND_LABELS: usize = 400;

static ON: AtomicBool = AtomicBool::new(false);

/// How long a gauge not updated stays exported (a key's `top` series after it left the top).
pub const KEY_SERIES_KEPT: Duration = Duration::from_secs(60);

/// The keys of the `top` gauges set at the last tick.
static TOP_KEYS: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

/// Client connections open now.
static OPEN: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Sets the gauges that change only on events again (so they are not taken for idle).
pub(crate) fn refresh() {
    if on() {
        ::metrics::gauge!("lockkit_proxy_connections_open")
            .set(OPEN.load(Ordering::Relaxed) as f64);
    }
}

/// Whether a recorder was installed by [`install`] (the hooks do nothing otherwise).
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Installs the Prometheus recorder (once per process) and describes the proxy's metrics.
///
/// # Errors
/// Another recorder is installed already.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .idle_timeout(MetricKindMask::GAUGE, Some(KEY_SERIES_KEPT))
        .set_buckets(&BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    describe();
    // Series exist from the start, at zero, so rates and alerts work before the first event.
    ::metrics::gauge!("lockkit_proxy_connections_open").set(0.0);
    ::metrics::counter!("lockkit_proxy_connections_accepted_total").absolute(0);
    ::metrics::counter!("lockkit_proxy_connections_refused_total").absolute(0);
    ::metrics::counter!("lockkit_proxy_upstream_reconnects_total").absolute(0);
    ::metrics::counter!("lockkit_proxy_clients_closed_for_memory_total").absolute(0);
    for kind in ["connect", "timeout", "lost"] {
        ::metrics::counter!("lockkit_proxy_upstream_errors_total", "kind" => kind).absolute(0);
    }
    ON.store(true, Ordering::Relaxed);
    Ok(handle)
}

fn describe() {
    use ::metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!("lockkit_proxy_connections_open", "Client connections open");
    describe_counter!(
        "lockkit_proxy_connections_accepted_total",
        "Client connections accepted"
    );
    describe_counter!(
        "lockkit_proxy_connections_refused_total",
        "Client connections that could not be accepted"
    );
    describe_counter!("lockkit_proxy_commands_total", "Commands by name");
    // The two histograms (command durations, lock holds) are `crate::durations`', help included.
    describe_counter!(
        "lockkit_proxy_upstream_errors_total",
        "Upstream connections that failed, by kind (connect, timeout, lost)"
    );
    describe_counter!(
        "lockkit_proxy_clients_closed_for_memory_total",
        "Clients closed for the replies held for them"
    );
    describe_counter!(
        "lockkit_proxy_upstream_reconnects_total",
        "Shared upstream connections opened again after one failed"
    );
    describe_counter!(
        "lockkit_proxy_plugin_faults_total",
        "Plugin hooks that failed (error, time limit, memory cap), by plugin"
    );
    describe_counter!(
        "lockkit_proxy_plugin_hooks_dropped_total",
        "Plugin hooks nobody waits for, dropped because the plugin's queue was full, by plugin"
    );
    describe_counter!(
        "lockkit_proxy_lock_acquired_total",
        "observe: lock acquisitions by key pattern"
    );
    describe_counter!(
        "lockkit_proxy_lock_contended_total",
        "observe: acquire attempts that found the lock taken, by key pattern"
    );
    describe_gauge!(
        "lockkit_proxy_hot_key_commands",
        "observe top=N: commands on the current window's hottest keys"
    );
    describe_gauge!(
        "lockkit_proxy_big_value_bytes",
        Unit::Bytes,
        "observe top=N: the current window's largest replies, by key"
    );
    describe_gauge!(
        "lockkit_proxy_lock_recommended_ttl_seconds",
        Unit::Seconds,
        "observe: the recommended TTL per key pattern as of now"
    );
}

/// Serves `GET /metrics` on `listen` with `handle`'s rendering (and runs its upkeep); the
/// address bound.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(listen: &str, handle: PrometheusHandle) -> std::io::Result<SocketAddr> {
    serve_with_token(listen, handle, None).await
}

/// Whether key names are labels (`observe:top=N`'s gauges): off unless asked for.
static KEYS: AtomicBool = AtomicBool::new(false);

/// Key names as labels of the `top` gauges (`lockkit proxy --metrics-keys`); without it those
/// gauges are not exported.
pub fn show_keys(on: bool) {
    KEYS.store(on, Ordering::Relaxed);
}

/// As [`serve`], and with `token`, `/metrics` answers only requests that send
/// `Authorization: Bearer TOKEN` (401 otherwise). `/health` and `/ready` answer `200` to
/// anyone: the proxy runs and accepts clients.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve_with_token(
    listen: &str,
    handle: PrometheusHandle,
    token: Option<String>,
) -> std::io::Result<SocketAddr> {
    let token: Option<std::sync::Arc<str>> = token.map(Into::into);
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let handle = handle.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(10),
                    answer(conn, &handle, token.as_deref()),
                )
                .await;
            });
        }
    });
    Ok(addr)
}

/// Whether the request's headers hold `Authorization: Bearer TOKEN` (compared in constant time
/// for tokens of one length).
fn bearer_is(req: &[u8], token: &str) -> bool {
    let head = req.split(|&b| b == b'\n');
    head.filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = line.split_at(colon);
        name.eq_ignore_ascii_case(b"authorization")
            .then(|| value[1..].trim_ascii())
    })
    .any(|v| {
        if v.len() < 7 || !v[..7].eq_ignore_ascii_case(b"bearer ") {
            return false;
        }
        let given = &v[7..];
        given.len() == token.len()
            && given
                .iter()
                .zip(token.as_bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// Answers one HTTP/1.x request and closes.
async fn answer(
    mut conn: TcpStream,
    handle: &PrometheusHandle,
    token: Option<&str>,
) -> std::io::Result<()> {
    let mut req = Vec::with_capacity(1024);
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        if req.len() > 16 * 1024 || conn.read_buf(&mut req).await? == 0 {
            break;
        }
    }
    let line = req.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let path = path.map(|p| p.split(|&b| b == b'?').next().unwrap_or_default());
    let authorized = token.is_none_or(|t| bearer_is(&req, t));
    let (status, kind, body) = match (method, path) {
        (Some(b"GET" | b"HEAD"), Some(b"/health" | b"/ready")) => {
            ("200 OK", "text/plain; charset=utf-8", "ok\n".to_string())
        }
        (Some(b"GET" | b"HEAD"), Some(b"/metrics")) if !authorized => (
            "401 Unauthorized",
            "text/plain; charset=utf-8",
            "lockkit proxy: /metrics needs Authorization: Bearer TOKEN\n".to_string(),
        ),
        (Some(b"GET" | b"HEAD"), Some(b"/metrics")) => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", {
                let mut body = handle.render();
                crate::durations::render(&mut body);
                body
            })
        }
        (Some(b"GET" | b"HEAD"), _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "lockkit proxy: metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "lockkit proxy: GET /metrics\n".to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    if method != Some(b"HEAD") {
        conn.write_all(body.as_bytes()).await?;
    }
    conn.shutdown().await
}

/// A client connection was accepted (the returned guard counts it open until dropped).
pub(crate) fn connection_accepted() -> OpenConnection {
    if on() {
        ::metrics::counter!("lockkit_proxy_connections_accepted_total").increment(1);
        OPEN.fetch_add(1, Ordering::Relaxed);
        refresh();
    }
    OpenConnection
}

/// Counts a connection open while it lives.
#[derive(Debug)]
pub(crate) struct OpenConnection;

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if on() {
            OPEN.fetch_sub(1, Ordering::Relaxed);
            refresh();
        }
    }
}

/// A client connection could not be accepted.
pub(crate) fn connection_refused() {
    if on() {
        ::metrics::counter!("lockkit_proxy_connections_refused_total").increment(1);
    }
}

/// An upstream connection failed: `connect`, `timeout` or `lost`.
pub(crate) fn upstream_error(kind: &'static str) {
    if on() {
        ::metrics::counter!("lockkit_proxy_upstream_errors_total", "kind" => kind).increment(1);
    }
}

/// A client was closed for the memory its replies held (its output buffer limit,
/// `--maxmemory-clients`, or a shared connection left waiting for it).
pub(crate) fn client_closed_for_memory() {
    if on() {
        ::metrics::counter!("lockkit_proxy_clients_closed_for_memory_total").increment(1);
    }
}

/// A shared upstream connection is opened again after one failed.
pub(crate) fn upstream_reconnect() {
    if on() {
        ::metrics::counter!("lockkit_proxy_upstream_reconnects_total").increment(1);
    }
}

/// A hook of plugin `name` failed.
pub(crate) fn plugin_fault(name: &str) {
    if on() {
        ::metrics::counter!("lockkit_proxy_plugin_faults_total", "plugin" => name.to_string())
            .increment(1);
    }
}

/// A hook of plugin `name` was dropped: its queue was full.
pub(crate) fn plugin_hook_dropped(name: &str) {
    if on() {
        ::metrics::counter!("lockkit_proxy_plugin_hooks_dropped_total", "plugin" => name.to_string())
            .increment(1);
    }
}

/// `observe`'s figures of one pattern, exported about once a second.
pub(crate) fn lock_pattern(pattern: &str, acquired: u64, contended: u64, ttl: Option<Duration>) {
    if !on() {
        return;
    }
    let p = pattern.to_string();
    ::metrics::counter!("lockkit_proxy_lock_acquired_total", "pattern" => p.clone())
        .absolute(acquired);
    ::metrics::counter!("lockkit_proxy_lock_contended_total", "pattern" => p.clone())
        .absolute(contended);
    if let Some(ttl) = ttl {
        ::metrics::gauge!("lockkit_proxy_lock_recommended_ttl_seconds", "pattern" => p)
            .set(ttl.as_secs_f64());
    }
}

/// `observe:top=N`'s current window: its hot keys and big values as gauges; a key that left
/// the top is set to 0 once (its series then goes after [`KEY_SERIES_KEPT`]).
pub(crate) fn top_window(w: &crate::observe::TopWindow) {
    if !on() || !KEYS.load(Ordering::Relaxed) {
        return;
    }
    const HOT: &str = "lockkit_proxy_hot_key_commands";
    const BIG: &str = "lockkit_proxy_big_value_bytes";
    let mut now: Vec<(&'static str, String)> = Vec::new();
    for h in &w.hot_keys {
        ::metrics::gauge!(HOT, "key" => h.key.clone()).set(h.commands as f64);
        now.push((HOT, h.key.clone()));
    }
    for b in &w.big_values {
        ::metrics::gauge!(BIG, "key" => b.key.clone()).set(b.bytes as f64);
        now.push((BIG, b.key.clone()));
    }
    let mut before = TOP_KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    for (name, key) in before.iter().filter(|k| !now.contains(k)) {
        ::metrics::gauge!(*name, "key" => key.clone()).set(0.0);
    }
    *before = now;
}

/// One lock of `pattern` held for `hold`.
pub(crate) fn lock_held(pattern: &str, hold: Duration) {
    if on() {
        crate::durations::record(&crate::durations::LOCK_HOLD, pattern, hold);
    }
}

/// The built-in plugin behind `lockkit_proxy_commands_total` and
/// `lockkit_proxy_command_duration_seconds`. The proxy does not run it as hooks
/// ([`Plugin::counts_commands`]): each connection counts its commands and times their replies
/// itself, with the handles this gives it, and hands them over in batches (counts once per
/// read from the client, durations once per read from upstream, timed from the read that
/// brought the command to the read that brought its reply).
#[derive(Debug, Default)]
pub struct CommandMetrics {
    handles: Mutex<FnvHashMap<String, (Counter, Histogram)>>,
}

impl CommandMetrics {
    /// The counter and histogram of command `name` (made on its first use): a connection keeps
    /// them ([`crate::client`]'s per-connection metrics) and looks nothing up per command.
    pub(crate) fn handles(&self, name: &str) -> (Counter, Histogram) {
        let mut out = None;
        self.with_handles(name, |h| out = Some(h.clone()));
        out.unwrap_or_else(|| unreachable!("with_handles calls its closure"))
    }

    /// Calls `f` with the counter and histogram of command `name` (made on its first use).
    fn with_handles(&self, name: &str, f: impl FnOnce(&(Counter, Histogram))) {
        let mut all = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = all.get(name) {
            return f(h);
        }
        let plain = name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        // A name Redis's table does not know shares `other` (clients can make up any number).
        let known = crate::client::spec::is_known_command(name.as_bytes());
        let label = if plain && known && all.len() < MAX_COMMAND_LABELS {
            name
        } else {
            "other"
        };
        if let Some(h) = all.get(label) {
            return f(h);
        }
        let h = (
            ::metrics::counter!("lockkit_proxy_commands_total", "command" => label.to_string()),
            crate::durations::histogram(&crate::durations::COMMAND_DURATION, label),
        );
        f(&h);
        all.insert(label.to_string(), h);
    }
}

impl Plugin for CommandMetrics {
    fn name(&self) -> &str {
        "metrics"
    }

    fn commands(&self) -> Vec<String> {
        vec!["*".to_string()]
    }

    /// It times replies by the command's name: nothing else of a command is kept for it.
    fn reply_reads_args(&self) -> bool {
        false
    }

    /// Each connection counts and times its commands itself, in batches, rather than through
    /// the hooks below (which stay, for a caller that drives the plugin directly).
    fn counts_commands(&self) -> bool {
        true
    }

    fn command_handles(&self, name: &str) -> Option<(Counter, Histogram)> {
        Some(self.handles(name))
    }

    fn on_command(&self, _conn: &ConnInfo, cmd: &PluginCommand<'_>) -> crate::Action {
        self.with_handles(cmd.name, |h| h.0.increment(1));
        crate::Action::Pass
    }

    fn on_reply(
        &self,
        _conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        _reply: &[u8],
        latency: Duration,
    ) {
        self.with_handles(cmd.name, |h| h.1.record(latency.as_secs_f64()));
    }
}
