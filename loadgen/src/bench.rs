//! `lockkit bench`: set up the target(s), run each script mode (module `run`), measure the
//! ceiling, write the reports.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use lockkit::{ClientOptions, LockClient, Redlock, RedlockOptions, ScriptMode};
use lockkit_redis_proc::{RedisServer, ServerOptions};
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

use crate::config::{BenchConfig, Primitive};
use crate::faults::{FaultTargets, NetworkFaultInjector, NetworkFaultPath};
use crate::locker::Fencer;
use crate::run::{round3, BenchRun};
use crate::target::{self, connect_hint, throwaway_hint};
use lockkit::Locker;
use lockkit_report::bench::{self as report, Report};
use lockkit_report::exit;
use lockkit_report::files::{self, IntervalLog};
use lockkit_report::stats::Op;
use lockkit_report::units::{format_duration, format_rate};

/// One finished run (one script mode) and where its report went.
#[derive(Debug)]
pub struct RunResult {
    /// The JSON report's path.
    pub json_path: PathBuf,
    /// The report.
    pub report: Report,
}

/// What a benchmark found: one run per script mode. Whether that is a failure (violations, lost
/// locks, an interruption) is the caller's call: `lockkit bench` maps it to its exit code.
#[derive(Debug)]
pub struct Outcome {
    /// Each run's report and where it went, in script-mode order.
    pub runs: Vec<RunResult>,
}

impl Outcome {
    /// Whether Ctrl-C stopped a run (its report, of what ran, is written).
    pub fn interrupted(&self) -> bool {
        self.runs.iter().any(|r| r.report.interrupted)
    }

    /// Mutual-exclusion violations the safety checker found, over all runs.
    pub fn violations(&self) -> u64 {
        self.runs.iter().map(|r| r.report.safety.violations).sum()
    }

    /// Leases that ran out under their holders, over all runs.
    pub fn lost_locks(&self) -> u64 {
        self.runs.iter().map(|r| r.report.safety.lost_locks).sum()
    }
}

/// Builds the runtime (`threads` workers) and runs the benchmark `config` describes.
///
/// # Errors
/// A configuration that does not hold together, an unusable target or output folder, no
/// redis-server to start; each error is one line naming the cause and the fix.
pub fn bench(config: BenchConfig) -> anyhow::Result<Outcome> {
    bench_with(config, None)
}

/// [`bench()`], with `network` carrying out `--faults delay/drop/blackhole` (the `lockkit` binary
/// passes the proxy's; without one those faults are refused).
pub fn bench_with(
    config: BenchConfig,
    network: Option<Arc<dyn NetworkFaultInjector>>,
) -> anyhow::Result<Outcome> {
    config.validate().map_err(exit::bad_input)?;
    let threads = config.threads.unwrap_or_else(default_threads);
    // One thread: a current-thread runtime, with no work-stealing or cross-thread wake-ups.
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let rt = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let runs = rt.block_on(run_async_with(config, network))?;
    Ok(Outcome { runs })
}

/// How waiters wait, for the report's `target.wait`: `notify`, `poll`, `poll (why)`; with
/// `--wait fair`, `fair` (woken by the release naming the next in line) or `fair, polling (why)`.
fn wait_label(
    wait: crate::config::WaitStyle,
    (mode, why): (lockkit::WaitMode, Option<&str>),
) -> String {
    match (wait.is_fair(), mode, why) {
        (true, lockkit::WaitMode::Notify, _) => "fair".to_string(),
        (true, _, Some(why)) => format!("fair, polling ({why})"),
        (true, _, None) => "fair, polling".to_string(),
        (false, m, Some(why)) => format!("{} ({why})", m.name()),
        (false, m, None) => m.name().to_string(),
    }
}

/// Takes and frees one lock on the key prefix before measuring, so a user who may not lock
/// there (an ACL limited to other keys or commands) fails at once with one line, instead of a
/// whole run of errors and a report of nothing. Retryable errors are left to the run to count.
async fn preflight<L: Locker>(locker: &L, args: &BenchConfig, target: &str) -> anyhow::Result<()> {
    let key = format!("{}preflight", args.key_prefix);
    let refused = |e: lockkit::Error| {
        exit::unreachable(format!(
            "{target} refused a lock on {key:?}: {e}; the user needs the lock commands on keys \
             {:?} (docs/SECURITY.md: the minimal ACL rule), or pick another --key-prefix",
            format!("{}*", args.key_prefix)
        ))
    };
    let opts = lockkit::LockOptions::new(args.ttl).map_err(exit::bad_input)?;
    match locker.attempt(&key, &opts).await {
        Ok(Some(lock)) => match locker.release(&lock).await {
            Err(e) if !e.is_retryable() => Err(refused(e)),
            _ => Ok(()),
        },
        Err(e) if !e.is_retryable() => Err(refused(e)),
        _ => Ok(()),
    }
}

/// Nodes started less than the TTL ago refuse their votes (the delayed-restart rule): a run
/// against them would count nothing but errors until then. Says so, and waits (Ctrl-C ends the
/// wait).
async fn wait_for_fresh_nodes(
    redlock: &Redlock,
    args: &BenchConfig,
    mut stop: watch::Receiver<bool>,
) {
    let wait = redlock.restart_wait().await.unwrap_or_default();
    if wait.is_zero() {
        return;
    }
    if !args.quiet {
        eprintln!(
            "Redlock nodes started less than the TTL ({}) ago refuse votes until they have been \
             up that long (delayed-restart rule): waiting {} before measuring",
            format_duration(args.ttl),
            format_duration(wait),
        );
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        _ = stop.wait_for(|stopped| *stopped) => {}
    }
}

/// Half the cores (at least one): the other half is left to a server on the same machine.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The benchmark inside a runtime; returns each run's report (one per script mode).
pub async fn run_async(args: BenchConfig) -> anyhow::Result<Vec<RunResult>> {
    run_async_with(args, None).await
}

/// [`run_async`], with `network` carrying out `--faults delay/drop/blackhole`.
pub async fn run_async_with(
    args: BenchConfig,
    network: Option<Arc<dyn NetworkFaultInjector>>,
) -> anyhow::Result<Vec<RunResult>> {
    args.validate().map_err(exit::bad_input)?;
    let mut urls = args.urls.clone();
    if urls.is_empty() {
        if let Ok(u) = std::env::var("REDIS_URL") {
            if !u.trim().is_empty() {
                urls.push(u);
            }
        }
    }
    // Before anything is created: a fault lockkit cannot carry out on this target.
    args.check_fault_target(!urls.is_empty())
        .map_err(anyhow::Error::msg)?;
    let out_dir = match &args.json {
        Some(p) => p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from),
        None => args.out.clone(),
    };
    let created = files::check_writable(&out_dir).map_err(exit::bad_input)?;
    if created
        && args.json.is_none()
        && args.out == std::path::Path::new(crate::config::DEFAULT_OUT)
    {
        // The default folder holds runs, not sources: keep it out of any git repository.
        files::write_atomic(&out_dir.join(".gitignore"), b"# lockkit bench runs\n*\n")?;
    }
    let result = bench_into(args, urls, network).await;
    if result.is_err() && created {
        // Nothing was written: leave no empty folder behind either (fails if it is not empty).
        let _ = std::fs::remove_dir(&out_dir);
    }
    result
}

/// Starts `args.nodes` throwaway redis-servers (no `--url` and no `REDIS_URL`), adding their
/// URLs to `urls`, and says so unless `--quiet`.
fn start_throwaway_servers(
    args: &BenchConfig,
    urls: &mut Vec<String>,
) -> anyhow::Result<Vec<RedisServer>> {
    let mut servers = Vec::new();
    for _ in 0..args.nodes {
        let server = RedisServer::try_start(ServerOptions::default())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("no --url and no REDIS_URL: starting a throwaway redis-server")?;
        urls.push(server.url());
        servers.push(server);
    }
    if !args.quiet {
        let ports: Vec<String> = servers.iter().map(|s| s.port().to_string()).collect();
        eprintln!(
            "no --url: started {} throwaway redis-server{} on 127.0.0.1:{} (stopped when the run ends)",
            servers.len(),
            if servers.len() > 1 { "s (Redlock)" } else { "" },
            ports.join(",")
        );
    }
    Ok(servers)
}

/// One INFO connection per node that answers, and the index of the first that did. One node
/// must answer; of several (Redlock), a quorum: a node that is down now is what Redlock is
/// for, so the run starts while a quorum answers and warns of the others.
async fn info_connections(urls: &[String]) -> anyhow::Result<(Vec<MultiplexedConnection>, usize)> {
    if urls.len() == 1 {
        return Ok((vec![target::info_connection(&urls[0]).await?], 0));
    }
    let mut info_conns = Vec::with_capacity(urls.len());
    let mut first_reachable = None;
    let mut down = Vec::new();
    for (i, u) in urls.iter().enumerate() {
        match target::info_connection(u).await {
            Ok(c) => {
                info_conns.push(c);
                first_reachable.get_or_insert(i);
            }
            Err(e) => down.push(format!("{e:#}")),
        }
    }
    let quorum = lockkit::quorum_of(urls.len());
    if info_conns.len() < quorum {
        return Err(exit::unreachable(format!(
            "only {} of {} Redlock nodes answer, a quorum needs {quorum}: {}",
            info_conns.len(),
            urls.len(),
            down.join("; ")
        )));
    }
    for d in &down {
        eprintln!("warning: Redlock node down at start (the run goes on with a quorum): {d}");
    }
    Ok((info_conns, first_reachable.unwrap_or(0)))
}

/// What stops a run: Ctrl-C sets `interrupted` and sends `true` on `rx`.
struct StopSignal {
    rx: watch::Receiver<bool>,
    interrupted: Arc<AtomicBool>,
}

impl StopSignal {
    /// Listens for Ctrl-C from now on.
    fn on_ctrl_c() -> Self {
        let (stop_tx, rx) = watch::channel(false);
        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&interrupted);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                flag.store(true, Ordering::SeqCst);
                let _ = stop_tx.send(true);
            }
        });
        StopSignal { rx, interrupted }
    }

    /// Whether Ctrl-C came.
    fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// A receiver that sees only stops from now on.
    fn fresh_rx(&self) -> watch::Receiver<bool> {
        let mut rx = self.rx.clone();
        rx.mark_unchanged();
        rx
    }
}

/// A measured run's report and interval logs, and its script mode.
type ModeRun = (Report, Vec<IntervalLog>, ScriptMode);

async fn bench_into(
    args: BenchConfig,
    mut urls: Vec<String>,
    network: Option<Arc<dyn NetworkFaultInjector>>,
) -> anyhow::Result<Vec<RunResult>> {
    let servers = if urls.is_empty() {
        start_throwaway_servers(&args, &mut urls)?
    } else {
        Vec::new()
    };
    if urls.len() > 1 && args.ceiling {
        return Err(exit::bad_input(
            "--ceiling measures one server; drop it or use a single server",
        ));
    }
    let throwaway = !servers.is_empty();
    let redacted = urls
        .iter()
        .map(|u| lockkit::redact_url(u))
        .collect::<Vec<_>>()
        .join(",");
    let (mut info_conns, first) = info_connections(&urls).await?;
    let info = target::server_info(&mut info_conns[0]).await.map_err(|e| {
        exit::unreachable(format!(
            "connecting to {}: {e:#}",
            lockkit::redact_url(&urls[first])
        ))
    })?;
    let net_path = start_network_faults(&args, &info, &urls, network).await?;
    // The lock clients go through the network faults; INFO, CLIENT KILL and the ceiling do not.
    let lock_urls = net_path.as_ref().map_or_else(|| urls.clone(), |p| p.urls());
    let fault_targets = Arc::new(FaultTargets {
        servers: Arc::new(Mutex::new(servers)),
        urls: urls.clone(),
    });
    let stop = StopSignal::on_ctrl_c();
    let (date, stamp) = report::utc_now();
    let modes = args.script_mode.modes();
    let mut runs = Vec::new();
    for mode in &modes {
        if stop.interrupted() {
            break;
        }
        let mut run = BenchRun {
            args: &args,
            info: &info,
            redacted: &redacted,
            throwaway,
            mode: *mode,
            date: &date,
            nodes: urls.len(),
            fault_targets: &fault_targets,
            network: net_path.as_deref(),
            wait: String::new(),
        };
        let (report, logs) = run_mode(&mut run, &lock_urls, &mut info_conns, &stop).await?;
        runs.push((report, logs, *mode));
    }
    if let Some(path) = net_path {
        path.close().await;
    }
    if args.ceiling && !stop.interrupted() {
        add_ceiling(&args, &urls[0], &mut runs).await?;
    }
    let mut results = Vec::new();
    for (report, logs, mode) in runs {
        let suffix = if modes.len() > 1 { mode.name() } else { "" };
        results.push(write_run(&args, report, &logs, &stamp, suffix)?);
    }
    if results.len() > 1 && !args.quiet {
        print_comparison(&results);
    }
    Ok(results)
}

/// Measures one script mode: connects its client (one node) or Redlock (several) through
/// `lock_urls`, checks that it may lock, and runs the workload with the primitive asked for.
async fn run_mode(
    run: &mut BenchRun<'_>,
    lock_urls: &[String],
    info_conns: &mut [MultiplexedConnection],
    stop: &StopSignal,
) -> anyhow::Result<(Report, Vec<IntervalLog>)> {
    let args = run.args;
    let mode = run.mode;
    let opts = ClientOptions::new()
        .connections(args.connections as usize)
        .script_mode(mode)
        .wait(args.wait.mode());
    let redacted = run.redacted;
    let connect_err = |e: lockkit::Error| {
        let mut msg = throwaway_hint(connect_hint(&e.to_string()));
        if mode == ScriptMode::Function {
            msg.push_str(" (--script-mode fcall needs Redis 7 or later)");
        }
        lock_failure(&e, format!("connecting to {redacted}: {msg}"))
    };
    let rx = stop.fresh_rx();
    let interrupted = &stop.interrupted;
    if lock_urls.len() > 1 {
        // Servers this run started itself hold no lock from before: the delayed-restart rule
        // would only refuse them for a TTL after start. Servers given with --url keep it.
        let rl_opts = RedlockOptions::new()
            .client(opts)
            .node_timeout(args.node_timeout)
            .restart_rule(!run.throwaway)
            .longest_ttl(args.ttl);
        let redlock = Redlock::connect_with(lock_urls, rl_opts)
            .await
            .map_err(connect_err)?;
        wait_for_fresh_nodes(&redlock, args, stop.rx.clone()).await;
        preflight(&redlock, args, redacted).await?;
        run.wait = match args.wait.is_fair() {
            true => {
                "poll (redlock; fair unavailable: no queue across independent nodes)".to_string()
            }
            false => "poll (redlock)".to_string(),
        };
        // --fencing with several nodes was refused by BenchConfig::validate.
        return run
            .execute(redlock, None, None, info_conns, rx, interrupted)
            .await;
    }
    let client = LockClient::connect_with(&lock_urls[0], opts)
        .await
        .map_err(connect_err)?;
    preflight(&client, args, redacted).await?;
    run.wait = wait_label(args.wait, client.wait_mode());
    match args.primitive {
        Primitive::Mutex => {
            let fenced = args.fencing.then(|| Fencer::Mutex(client.clone()));
            run.execute(client, fenced, None, info_conns, rx, interrupted)
                .await
        }
        Primitive::Semaphore => {
            let permits = u32::try_from(args.permits).unwrap_or(u32::MAX);
            let sem = lockkit::Semaphore::new(client, permits)
                .map_err(lockkit_report::exit::bad_input)?;
            let fenced = args.fencing.then(|| Fencer::Semaphore(sem.clone()));
            run.execute(sem, fenced, None, info_conns, rx, interrupted)
                .await
        }
        Primitive::Rwlock => {
            let rw = lockkit::RwLock::new(client.clone());
            let fenced = args.fencing.then_some(Fencer::RwLock);
            run.execute(client, fenced, Some(rw), info_conns, rx, interrupted)
                .await
        }
    }
}

/// `--ceiling`: measures the server at `url` once with redis-benchmark and gives every run the
/// ceiling and its own ratio to it.
async fn add_ceiling(args: &BenchConfig, url: &str, runs: &mut [ModeRun]) -> anyhow::Result<()> {
    if !args.quiet {
        eprintln!("measuring the server's ceiling with redis-benchmark -P 16 ...");
    }
    if let Some((report, _, _)) = runs.first_mut() {
        // One measurement serves every mode of this run.
        let c = crate::ceiling::measure(url, report.throughput.cycles_per_s).await?;
        report.ceiling = Some(c);
    }
    let first = runs.first().and_then(|r| r.0.ceiling.clone());
    if let Some(c) = first {
        for (report, _, _) in runs.iter_mut() {
            let mut c = c.clone();
            c.ratio = round3(report.throughput.cycles_per_s / c.ceiling_cycles_per_s);
            report.ceiling = Some(c);
        }
    }
    Ok(())
}

/// Puts the network faults of `--faults` (if any) between the lock clients and `urls`.
async fn start_network_faults(
    args: &BenchConfig,
    info: &target::ServerInfo,
    urls: &[String],
    network: Option<Arc<dyn NetworkFaultInjector>>,
) -> anyhow::Result<Option<Box<dyn NetworkFaultPath>>> {
    let Some(list) = args.faults.as_ref().filter(|f| f.network.is_some()) else {
        return Ok(None);
    };
    let entries = list.network.map(|n| n.entries()).unwrap_or_default();
    if info.mode == "cluster" {
        return Err(exit::bad_input(format!(
            "--faults {entries}: the network faults go through lockkit proxy, which does not proxy Redis Cluster (MOVED/ASK would lead the clients around it); use a standalone server or several --url (Redlock)"
        )));
    }
    let Some(injector) = network else {
        return Err(exit::bad_input(format!(
            "--faults {entries}: the network faults need lockkit proxy in-process; run them through the `lockkit` binary (this build of the load generator has no proxy)"
        )));
    };
    let path = injector
        .start(urls)
        .await
        .context("starting lockkit proxy for the network faults")?;
    Ok(Some(path))
}

/// Writes one run's interval logs, its JSON and its HTML page (each file atomically), prints
/// its summary.
fn write_run(
    args: &BenchConfig,
    mut report: Report,
    logs: &[IntervalLog],
    stamp: &str,
    suffix: &str,
) -> anyhow::Result<RunResult> {
    let (json_path, stem) = files::paths(&args.out, args.json.as_ref(), stamp, suffix);
    for (op, log) in Op::ALL.iter().zip(logs) {
        if report
            .latency_us
            .get(op.name())
            .is_none_or(|l| l.count == 0)
        {
            continue;
        }
        let path = PathBuf::from(format!("{}.{}.hlog", stem.display(), op.name()));
        files::write_atomic(&path, &log.render(op.name())?)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        report.histogram_logs.insert(op.name().to_string(), name);
    }
    files::write_atomic(
        &json_path,
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    let html = lockkit_report::html::html_path(&json_path);
    lockkit_report::html::write_for_run(&json_path, &html)?;
    if !args.quiet {
        print!("{}", report::summary(&report));
    }
    println!(
        "wrote {} (+ {} histogram logs) and {}",
        json_path.display(),
        report.histogram_logs.len(),
        html.display()
    );
    Ok(RunResult { json_path, report })
}

/// The table comparing script modes (`--script-mode all`).
fn print_comparison(results: &[RunResult]) {
    println!("script modes compared:");
    println!(
        "  {:<8} {:>12} {:>10} {:>10} {:>12}",
        "mode", "cycles/s", "release p50", "p99", "server us/cyc"
    );
    for r in results {
        let l = r
            .report
            .latency_us
            .get("release")
            .copied()
            .unwrap_or_default();
        println!(
            "  {:<8} {:>12} {:>11} {:>10} {:>12}",
            r.report.target.script_mode,
            format_rate(r.report.throughput.cycles_per_s),
            format_duration(Duration::from_micros(l.p50)),
            format_duration(Duration::from_micros(l.p99)),
            r.report
                .cpu
                .server_us_per_cycle
                .map_or("-".into(), |v| format!("{v:.2}")),
        );
    }
}

/// Bad input for a lock-library error of kind `InvalidInput` (a URL that does not parse, an
/// option out of range), an unusable target for everything else.
fn lock_failure(e: &lockkit::Error, message: String) -> anyhow::Error {
    if e.kind() == lockkit::ErrorKind::InvalidInput {
        exit::bad_input(message)
    } else {
        exit::unreachable(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_label_names_fair_mode_and_why_it_polls() {
        use crate::config::WaitStyle;
        use lockkit::WaitMode;
        assert_eq!(
            wait_label(WaitStyle::Fair, (WaitMode::Notify, None)),
            "fair"
        );
        assert_eq!(
            wait_label(WaitStyle::Fair, (WaitMode::Poll, Some("a cluster target"))),
            "fair, polling (a cluster target)"
        );
        assert_eq!(
            wait_label(WaitStyle::Notify, (WaitMode::Notify, None)),
            "notify"
        );
        assert_eq!(
            wait_label(WaitStyle::Notify, (WaitMode::Poll, Some("twemproxy"))),
            "poll (twemproxy)"
        );
    }
}
