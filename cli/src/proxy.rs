//! `lockkit proxy --listen ADDR --upstream URL [--plugin ...]... [--out DIR] [--duration D]`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lockkit_report::exit;
use lockkit_report::units::parse_duration;

use lockkit_proxy::faults::{Faults, FaultsOptions};
use lockkit_proxy::observe::{Observe, ObserveOptions};
use lockkit_proxy::snapshot::{self, ReportFiles};
use lockkit_proxy::{ClientAuth, ListenerTls, Plugin, Proxy, ProxyOptions, Upstream};
use metrics_exporter_prometheus::PrometheusHandle;

/// Run a pass-through proxy in front of a Redis server, with plugins.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProxyArgs {
    /// Where applications connect (host:port).
    #[arg(long, default_value = "127.0.0.1:7000", value_name = "ADDR")]
    pub listen: String,

    /// The Redis server behind the proxy: redis://, rediss:// (TLS), redis+unix://, user and
    /// password in the URL (default: $REDIS_URL). Given again: more nodes of the same Redis
    /// Cluster (seeds), asked in turn whether they run in cluster mode at start and for the
    /// topology later; every node is reached with the first URL's user, password and TLS.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        value_name = "URL",
        required = true
    )]
    pub upstream: Vec<String>,

    /// Client authentication and protected mode.
    #[command(flatten)]
    pub access: crate::proxy_access::AccessArgs,

    /// A plugin, in order (repeatable): `observe` (lock hold times per key pattern;
    /// `observe:top=10,window=10s` also the hottest keys and biggest values per window),
    /// `faults:delay=5ms~2ms,drop=1%,blackhole=300ms/5s,seed=7` (network faults, seeded) or a
    /// Lua plugin FILE.lua, optionally followed by :ARGS (docs/PROXY.md).
    #[arg(long = "plugin", value_name = "NAME[:ARGS]|FILE.lua")]
    pub plugins: Vec<String>,

    /// Where the plugins' reports go (`observe-<date>.json`, ...).
    #[arg(long, default_value = "lockkit-results", value_name = "DIR")]
    pub out: PathBuf,

    /// Stop after this long (default: run until Ctrl-C or SIGTERM).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,

    /// No live table, no progress lines (the reports are still written).
    #[arg(long)]
    pub quiet: bool,

    /// Worker threads serving connections (default 1: on a machine the proxy shares with the
    /// server, one thread costs the least CPU per request, since the clients' tasks and the
    /// shared upstream connection's task never wake each other across threads; give a proxy on
    /// cores of its own more).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Upstream connections that the stateless commands of all clients share, so the server
    /// reads them in batches. A client moves to a connection of its own on its first command
    /// that depends on the connection (MULTI, blocking commands, SUBSCRIBE, AUTH, SELECT,
    /// CLIENT, HELLO, ...). 0: every client gets its own from the start.
    #[arg(long, default_value_t = lockkit_proxy::DEFAULT_SHARED_CONNECTIONS, value_name = "N")]
    pub shared_connections: usize,

    /// Write the reports while running too, this often (same file names, replaced atomically),
    /// so a crash or SIGKILL loses at most this much; 0: only at stop.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub snapshot_every: Duration,

    /// How long an upstream request may wait for its reply: past it, the connection is given
    /// up, the commands on it get an error reply, and the next ones go on a new connection
    /// (blocking commands and pub/sub on a client's own connection may wait longer).
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub op_timeout: Duration,

    /// How long a known-slow command (EVAL, EVALSHA, FCALL, KEYS, FLUSHALL, ...) on a shared
    /// upstream connection may go without a reply before the connection is given up. Other
    /// commands have --op-timeout counted from the server's last reply, so those queued behind
    /// a slow one wait for it, as with Redis direct.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub slow_timeout: Duration,

    /// On SIGTERM or Ctrl-C: how long the commands already forwarded may take to get their
    /// replies before the remaining connections are closed (no new connections meanwhile).
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub drain_timeout: Duration,

    /// Clients served at once (Redis's `maxclients`); one more is answered
    /// `-ERR max number of clients reached` and closed. Lowered, with a warning, to what the
    /// open-file limit allows (2 descriptors a client, 32 kept).
    #[arg(long, default_value_t = lockkit_proxy::DEFAULT_MAX_CLIENTS, value_name = "N")]
    pub max_clients: usize,

    /// A client that has to log in (--requirepass, --user, --users-file) and has not within
    /// this long is closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub login_timeout: Duration,

    /// The largest request a client may send (Redis's `client-query-buffer-limit`): requests
    /// are held whole before they go upstream, so one bigger closes the client (logged).
    /// Bytes, or with kb, mb, gb (1024-based).
    #[arg(long, default_value = "1gb", value_parser = crate::proxy_ops::parse_bytes, value_name = "BYTES")]
    pub client_query_buffer_limit: usize,

    /// The most held of the replies owed to one client and not yet written to it (Redis's
    /// `client-output-buffer-limit` for normal clients, hard limit): a client past it is
    /// closed (logged). 0, the default, as Redis's `normal 0 0 0`: no limit; the replies held
    /// for one client on a shared connection are bounded anyway (past 32 MiB the shared
    /// connection waits for it; one that takes none for --op-timeout meanwhile is closed).
    #[arg(long, default_value = "0", value_parser = crate::proxy_ops::parse_bytes, value_name = "BYTES")]
    pub client_output_buffer_limit: usize,

    /// The most the replies held for all clients together may take (Redis's
    /// `maxmemory-clients`): past it, the client holding most is closed (logged). 0, the
    /// default: no cap.
    #[arg(long, default_value = "0", value_parser = crate::proxy_ops::parse_bytes, value_name = "BYTES")]
    pub maxmemory_clients: usize,

    /// Close a client idle this long (Redis's `timeout`): no command and no reply owed;
    /// pub/sub and blocked clients are not idle. Default: never.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Option<Duration>,

    /// Exit (code 3) when the upstream cannot be reached at start. Without it the proxy starts
    /// anyway and connects when it can (with back-off), answering clients with an error
    /// meanwhile; a refused password exits 3 either way.
    #[arg(long)]
    pub require_upstream: bool,

    /// Serve live metrics in Prometheus text format at http://ADDR/metrics (lockkit_proxy_*:
    /// connections, commands and their latency, upstream errors, plugin faults, observe's
    /// figures; docs/PROXY.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,

    /// Scrapes of /metrics must send `Authorization: Bearer TOKEN` (/health and /ready need
    /// none). Needed for a --metrics-listen address other hosts reach.
    #[arg(
        long,
        env = "LOCKKIT_PROXY_METRICS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub metrics_token: Option<String>,

    /// --metrics-token read from a file (its first line): kept off the command line and the
    /// environment, as a mounted secret.
    #[arg(
        long,
        env = "LOCKKIT_PROXY_METRICS_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "metrics_token"
    )]
    pub metrics_token_file: Option<PathBuf>,

    /// Serve /metrics on an address other hosts reach without a token: anyone who reaches it
    /// reads the proxy's figures.
    #[arg(long)]
    pub metrics_insecure: bool,

    /// Key names as labels (`observe:top=N`'s hot keys and big values); off by default, since
    /// key names may hold what the keys are about.
    #[arg(long)]
    pub metrics_keys: bool,
}

/// The exit codes as `lockkit proxy --help` shows them.
pub(crate) const EXIT_HELP: &str = "Exit codes:
  0    stopped by --duration or SIGTERM, reports written
  1    any other failure (a report that cannot be written, ...)
  2    bad input: a flag value, a URL that does not parse, an unknown plugin, an unwritable --out
  3    the upstream server cannot be used: a refused password; unreachable with --require-upstream
  130  stopped with Ctrl-C (the reports are written)";

/// Builds the plugin `spec` names.
///
/// # Errors
/// An unknown name, a Lua file that does not load, bad plugin arguments.
pub(crate) fn plugin_from_spec(spec: &str, live: bool) -> anyhow::Result<Arc<dyn Plugin>> {
    let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
    if name.ends_with(".lua") {
        return Ok(Arc::new(lockkit_proxy::lua::LuaPlugin::load(
            Path::new(name),
            args,
        )?));
    }
    match name {
        "observe" => Ok(Arc::new(Observe::new(
            ObserveOptions::parse(args, live).map_err(anyhow::Error::msg)?,
        ))),
        "faults" => Ok(Arc::new(Faults::new(
            FaultsOptions::parse(args).map_err(anyhow::Error::msg)?,
        ))),
        _ => anyhow::bail!(
            "unknown plugin `{spec}`: use `observe`, `faults:...` or the path of a Lua plugin (FILE.lua)"
        ),
    }
}

/// How the proxy was stopped.
enum Stopped {
    Duration,
    CtrlC,
    Term,
}

async fn wait_for_stop(duration: Option<Duration>) -> Stopped {
    let limit = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = limit => Stopped::Duration,
        r = tokio::signal::ctrl_c() => match r {
            Ok(()) => Stopped::CtrlC,
            Err(_) => std::future::pending().await,
        },
        _ = term => Stopped::Term,
    }
}

/// Checks every `--upstream` URL; the first is the server (or the first seed) to connect to.
fn parse_upstreams(urls: &[String]) -> anyhow::Result<Upstream> {
    let first = urls.first().map_or("", String::as_str);
    let upstream = Upstream::from_url(first)
        .map_err(|e| crate::exit::lock_failure(&e, format!("--upstream: {e}")))?;
    for seed in urls.iter().skip(1) {
        Upstream::from_url(seed)
            .map_err(|e| crate::exit::lock_failure(&e, format!("--upstream: {e}")))?;
    }
    Ok(upstream)
}

/// The `--plugin`s in order; with any, `--out` must be writable for their reports.
fn load_plugins(args: &ProxyArgs, live: bool) -> anyhow::Result<Vec<Arc<dyn Plugin>>> {
    let mut plugins = Vec::new();
    for spec in &args.plugins {
        plugins.push(
            plugin_from_spec(spec, live)
                .map_err(|e| exit::bad_input(format!("--plugin {spec}: {e:#}")))?,
        );
    }
    if !plugins.is_empty() {
        lockkit_report::files::check_writable(&args.out).map_err(exit::bad_input)?;
    }
    Ok(plugins)
}

/// `--metrics-listen`: its recorder and the token scrapes must send.
struct MetricsSetup {
    listen: String,
    handle: PrometheusHandle,
    token: Option<String>,
}

/// With `--metrics-listen`: reads the token (from `--metrics-token-file` or
/// `--metrics-token`), refuses an address other hosts reach without one (unless
/// `--metrics-insecure`), installs the recorder and puts the command metrics first among the
/// plugins, so they count every command, even one a later plugin answers itself.
fn set_up_metrics(
    args: &ProxyArgs,
    plugins: &mut Vec<Arc<dyn Plugin>>,
) -> anyhow::Result<Option<MetricsSetup>> {
    let token = match &args.metrics_token_file {
        Some(file) => Some(
            crate::proxy_access::read_secret_file("--metrics-token-file", file)
                .map_err(exit::bad_input)?,
        ),
        None => args.metrics_token.clone().filter(|t| !t.is_empty()),
    };
    let Some(listen) = &args.metrics_listen else {
        return Ok(None);
    };
    if token.is_none() && !args.metrics_insecure && !crate::proxy_access::is_loopback(listen) {
        return Err(exit::bad_input(format!(
            "--metrics-listen {listen} is reachable from other hosts: give scrapers a \
             token with --metrics-token TOKEN (or $LOCKKIT_PROXY_METRICS_TOKEN), or \
             pass --metrics-insecure to serve it to anyone who reaches it"
        )));
    }
    let handle = lockkit_proxy::metrics::install()?;
    plugins.insert(
        0,
        Arc::new(lockkit_proxy::metrics::CommandMetrics::default()) as _,
    );
    Ok(Some(MetricsSetup {
        listen: listen.clone(),
        handle,
        token,
    }))
}

/// `--max-clients` (lowered to what the open-file limit allows, with a warning),
/// `--threads` and `--op-timeout`, checked.
fn check_limits(args: &ProxyArgs) -> anyhow::Result<(usize, usize)> {
    if args.max_clients == 0 {
        return Err(exit::bad_input("--max-clients must be at least 1"));
    }
    let (max_clients, lowered) =
        crate::proxy_ops::fit_max_clients(args.max_clients, args.shared_connections);
    if let Some(warning) = lowered {
        eprintln!("{warning}");
    }
    let threads = args.threads.unwrap_or(1);
    if threads == 0 {
        return Err(exit::bad_input("--threads must be at least 1"));
    }
    if args.op_timeout.is_zero() {
        return Err(exit::bad_input("--op-timeout must be more than 0"));
    }
    Ok((max_clients, threads))
}

/// The runtime serving connections on `threads` threads.
fn build_runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    // One thread: a current-thread runtime, which serves the connections woken together in
    // the order their bytes arrived. A multi-thread runtime runs the last one woken first (its
    // LIFO slot): a command could overtake one another client sent just before it.
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The proxy's options from the flags, with the client login and TLS already read.
fn proxy_options(
    args: &ProxyArgs,
    client_auth: ClientAuth,
    tls: Option<ListenerTls>,
    max_clients: usize,
) -> ProxyOptions {
    ProxyOptions::new()
        .shared_connections(args.shared_connections)
        .op_timeout(args.op_timeout)
        .slow_timeout(args.slow_timeout)
        .drain_timeout(args.drain_timeout)
        .client_auth(client_auth)
        .tls(tls)
        .max_clients(max_clients)
        .login_timeout(args.login_timeout)
        .idle_timeout(args.idle_timeout)
        .query_buffer_limit(args.client_query_buffer_limit)
        .output_buffer_limit(Some(args.client_output_buffer_limit).filter(|&b| b > 0))
        .maxmemory_clients(Some(args.maxmemory_clients).filter(|&b| b > 0))
        .seeds(args.upstream.iter().skip(1).cloned().collect())
}

/// Tries the upstream once at start: a refused login (or `--require-upstream`) is an error,
/// an unreachable server only a warning (the proxy connects when it can).
async fn check_upstream(upstream: &Upstream, require: bool) -> anyhow::Result<()> {
    let Err(e) = upstream.connect().await else {
        return Ok(());
    };
    let refused_login = ["WRONGPASS", "NOAUTH", "invalid password", "AUTH"]
        .iter()
        .any(|w| e.to_string().contains(w));
    if require || refused_login {
        return Err(exit::unreachable(format!(
            "upstream {}: {e}; check that the server runs and the URL's password",
            upstream.shown()
        )));
    }
    eprintln!(
        "lockkit proxy: upstream {} not reachable yet ({e}): starting anyway; clients get \
         an error until it is (--require-upstream exits instead)",
        upstream.shown()
    );
    Ok(())
}

/// Runs the proxy until `--duration`, Ctrl-C or SIGTERM, then writes the plugins' reports.
pub(crate) fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let upstream = parse_upstreams(&args.upstream)?;
    let client_auth = args.access.client_auth().map_err(exit::bad_input)?;
    let tls = args.access.listener_tls().map_err(exit::bad_input)?;
    args.access
        .check_protected(&args.listen, &client_auth)
        .map_err(exit::bad_input)?;
    let live = !args.quiet && std::io::stdout().is_terminal();
    let mut plugins = load_plugins(&args, live)?;
    let metrics = set_up_metrics(&args, &mut plugins)?;
    let (max_clients, threads) = check_limits(&args)?;
    let runtime = build_runtime(threads)?;
    let options = proxy_options(&args, client_auth, tls, max_clients);
    runtime.block_on(serve(args, upstream, plugins, options, metrics))
}

/// Inside the runtime: checks the upstream, serves `/metrics`, starts the proxy (and its
/// snapshots and SIGHUP reloads), waits for the stop, and writes the plugins' reports.
async fn serve(
    args: ProxyArgs,
    upstream: Upstream,
    plugins: Vec<Arc<dyn Plugin>>,
    options: ProxyOptions,
    metrics: Option<MetricsSetup>,
) -> anyhow::Result<ExitCode> {
    check_upstream(&upstream, args.require_upstream).await?;
    let shown = upstream.shown().to_string();
    if let Some(m) = metrics {
        lockkit_proxy::metrics::show_keys(args.metrics_keys);
        let listen = m.listen;
        let addr = lockkit_proxy::metrics::serve_with_token(&listen, m.handle, m.token)
            .await
            .map_err(|e| exit::bad_input(format!("--metrics-listen {listen}: {e}")))?;
        if !args.quiet {
            eprintln!("lockkit proxy: metrics at http://{addr}/metrics");
        }
    }
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("installing the SIGHUP handler")?;
    let proxy = Proxy::start_with(&args.listen, upstream, plugins, options)
        .await
        .map_err(|e| exit::bad_input(format!("--listen {}: {e}", args.listen)))?;
    crate::proxy_ops::reload_on_sighup(hup, args.access.clone(), proxy.shared().clone());
    if !args.quiet {
        eprintln!(
            "lockkit proxy: listening on {} -> {shown} (Ctrl-C stops and writes the reports)",
            proxy.addr()
        );
    }
    let files = ReportFiles::new(&args.out);
    let snapshots = (!args.snapshot_every.is_zero() && !proxy.plugins().is_empty()).then(|| {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = snapshot::every(args.snapshot_every, proxy.reporter(), files.clone(), rx);
        (tx, tokio::spawn(task))
    });
    let how = wait_for_stop(args.duration).await;
    if let Some((tx, task)) = snapshots {
        let _ = tx.send(());
        let _ = task.await;
    }
    let plugins: Vec<Arc<dyn Plugin>> = proxy.plugins().to_vec();
    let ctx = proxy.stop().await;
    let reports = Proxy::reports(&plugins, &ctx);
    for path in files.write(&reports)? {
        println!("wrote {}", path.display());
    }
    Ok(match how {
        Stopped::CtrlC => ExitCode::from(exit::INTERRUPTED),
        Stopped::Duration | Stopped::Term => ExitCode::SUCCESS,
    })
}
