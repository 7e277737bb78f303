//! `lockkit lua serve`: the offline harness as a Redis server, for tests in any language.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use lockkit_harness::serve::{ClockMode, ServeOptions, Server};
use lockkit_report::exit::bad_input;
use lockkit_report::units::parse_duration;

/// `lockkit lua serve` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Where to listen (`host:port`). Port 0 picks a free port; the port is printed on
    /// standard output first either way. Only loopback unless --requirepass is given.
    #[arg(long, default_value = "127.0.0.1:6379", conflicts_with = "port")]
    listen: String,
    /// Listen on 127.0.0.1 at this port (0: a free one, printed on standard output).
    #[arg(long)]
    port: Option<u16>,
    /// How long a script runs before other connections are answered -BUSY
    /// (Redis's busy-reply-threshold; CONFIG SET lua-time-limit changes it).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    busy_reply_threshold: Duration,
    /// How long a script may run before the harness stops it (Redis would run it until
    /// SCRIPT KILL).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    script_timeout: Duration,
    /// `frozen`: the virtual clock moves only with DEBUG SLEEP and LOCKKIT.CLOCK; `wall`: it
    /// also follows the wall clock between commands.
    #[arg(long, default_value = "frozen", value_parser = ["frozen", "wall"])]
    clock: String,
    /// The password clients must give (AUTH / HELLO AUTH), as Redis's requirepass.
    #[arg(long, env = "LOCKKIT_SERVE_PASSWORD", hide_env_values = true)]
    requirepass: Option<String>,
    /// Connections at once (Redis's maxclients).
    #[arg(long, default_value_t = 1000)]
    maxclients: usize,
    /// Bytes the keyspace may use before commands that grow it answer OOM (`256mb`, `0`: none).
    #[arg(long, value_parser = crate::lua::parse_bytes)]
    maxmemory: Option<usize>,
    /// Fail a script (EVAL, EVALSHA, FCALL) that touches a key it did not declare in KEYS,
    /// naming the key, as Redis Cluster and Dragonfly fail it in production (on by default
    /// with --cluster).
    #[arg(long)]
    strict_keys: bool,
    /// With --cluster: let scripts touch keys they did not declare.
    #[arg(long, conflicts_with = "strict_keys")]
    no_strict_keys: bool,
    /// Present a Redis Cluster of N masters over the one keyspace: N ports (the listen port
    /// and the next ones, or N free ports with port 0, printed one per line), each owning an
    /// equal range of the 16384 hash slots, answering CLUSTER SLOTS/SHARDS/NODES/INFO/KEYSLOT,
    /// -MOVED for another port's key and -CROSSSLOT across slots.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    cluster: Option<u16>,
}

fn is_loopback(listen: &str) -> anyhow::Result<bool> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| {
            bad_input(format!(
                "--listen {listen}: {e} (use host:port, e.g. 127.0.0.1:0)"
            ))
        })?
        .collect();
    Ok(!addrs.is_empty()
        && addrs.iter().all(|a| match a.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => ip.is_loopback(),
        }))
}

/// Runs the server until Ctrl-C or SIGTERM.
pub(crate) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let listen = match args.port {
        Some(p) => format!("127.0.0.1:{p}"),
        None => args.listen.clone(),
    };
    // Redis's `requirepass ""` is no password at all: an empty one must not open a
    // non-loopback listener that anyone then logs into with `AUTH ""`.
    let requirepass = args.requirepass.clone().filter(|pw| !pw.is_empty());
    if requirepass.is_none() && !is_loopback(&listen)? {
        return Err(bad_input(format!(
            "--listen {listen} is not a loopback address: the server runs any script a client sends; give a non-empty --requirepass (or LOCKKIT_SERVE_PASSWORD) to serve other hosts"
        )));
    }
    if args.busy_reply_threshold.is_zero() || args.script_timeout.is_zero() {
        return Err(bad_input(
            "--busy-reply-threshold and --script-timeout must be positive",
        ));
    }
    let options = ServeOptions::new()
        .listen(listen.clone())
        .busy_threshold(args.busy_reply_threshold)
        .time_limit(args.script_timeout)
        .clock(if args.clock == "wall" {
            ClockMode::Wall
        } else {
            ClockMode::Frozen
        })
        .requirepass(requirepass)
        .max_clients(args.maxclients)
        .cluster(args.cluster.map_or(0, usize::from))
        .keyspace_limit(
            args.maxmemory
                .unwrap_or(lockkit_harness::DEFAULT_KEYSPACE_LIMIT),
        );
    let options = match (args.strict_keys, args.no_strict_keys) {
        (true, _) => options.strict_keys(true),
        (_, true) => options.strict_keys(false),
        _ => options,
    };
    let masters = args.cluster;
    // One worker, as Redis has one thread: commands and scripts run on it (no lock handed
    // between workers, no thread woken per command); a script that runs long hands it over
    // to a new thread (lockkit-harness's `serve`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let server = Server::start(options)
            .await
            .map_err(|e| bad_input(format!("listening on {listen}: {e}")))?;
        let addr = server.addr();
        // The port first, alone on its line: what test fixtures read (with --cluster, each
        // master's port on its own line, in one write).
        let ports: String = server
            .addrs()
            .iter()
            .map(|a| format!("{}\n", a.port()))
            .collect();
        let mut out = std::io::stdout().lock();
        out.write_all(ports.as_bytes())
            .context("writing the port")?;
        out.flush().context("writing the port")?;
        drop(out);
        let face = match masters {
            Some(n) => format!(
                "a cluster of {n} masters on ports {} (one keyspace)",
                ports.trim_end().replace('\n', ", ")
            ),
            None => "one database".into(),
        };
        eprintln!(
            "lockkit lua serve: Redis {} scripting on {addr} ({face}, virtual clock); Ctrl-C stops",
            lockkit_harness::REDIS_VERSION
        );
        wait_for_stop().await?;
        server.stop().await;
        Ok(ExitCode::SUCCESS)
    })
}

async fn wait_for_stop() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}
