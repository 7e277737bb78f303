//! Several scheduler instances, one job run per tick.
//!
//! ```text
//! cargo run --example cron --features tower -- --redis-url redis://127.0.0.1:6379 --instances 3 --ticks 10
//! ```
//! Every instance wakes at each tick boundary (every `--tick-ms`, aligned to the wall clock so
//! that separate processes agree on tick numbers) and tries `SET cron:{job}:{tick} NX PX ttl`.
//! The one that gets it runs the job; the others skip. One line per instance and tick:
//! `tick=N instance=NAME ran|skipped|late|error ...`.
//!
//! Run it as threads (`--instances 3`) or as processes (several `--instances 1 --name a`, `b`,
//! ...); with `--redis-url` given three (or five) times, each tick takes a Redlock.
//!
//! # Sizing the TTL
//! The key carries the tick number, so ticks never block each other, and it is *not* released
//! after the job: a release after a 50 ms job would let an instance that woke 60 ms late take
//! the same tick again. The key must outlive the latest instance that may still try the tick
//! (instances give up on a tick they woke for more than `--max-late-ms` late), and the job itself,
//! so that it is held while the job runs:
//!
//! TTL ≥ max(job time at p99 × safety + acquire/release + pauses,  max-late + margin)
//!
//! The first term is what `lockkit ttl RESULT.json --work-timings FILE` computes: this example
//! writes the job's measured durations to `--timings-out FILE`, one per line in ms.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Parser;
use lockkit::{redact_url, ErrorKind, LockClient, LockOptions, Locker, Redlock, RetryOptions};
use tokio::sync::mpsc;

/// A multi-instance cron scheduler: each tick's job runs exactly once.
#[derive(Debug, Parser)]
struct Opts {
    /// The Redis server; give it 3 or 5 times for Redlock over independent masters.
    #[arg(
        long = "redis-url",
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_urls: Vec<String>,
    /// Scheduler instances in this process (each with its own connections).
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// This process's name in the log (default: its pid).
    #[arg(long)]
    name: Option<String>,
    /// How many ticks to run before exiting.
    #[arg(long, default_value_t = 10)]
    ticks: u64,
    /// The tick period in milliseconds.
    #[arg(long, default_value_t = 1000)]
    tick_ms: u64,
    /// How long the simulated job takes, in milliseconds (plus up to 25% random extra).
    #[arg(long, default_value_t = 200)]
    job_ms: u64,
    /// An instance that wakes later than this after a tick boundary skips that tick.
    #[arg(long)]
    max_late_ms: Option<u64>,
    /// The lock TTL in milliseconds (default: max(2 × job + 100, max-late + 100)).
    #[arg(long)]
    ttl_ms: Option<u64>,
    /// The job's name (part of the lock key).
    #[arg(long, default_value = "report")]
    job: String,
    /// Write each measured job duration (ms, one per line) to this file, replacing it (its
    /// folder is created), for `lockkit ttl RESULT.json --work-timings FILE`.
    #[arg(long)]
    timings_out: Option<std::path::PathBuf>,
}

/// The options of every tick's lock: a few quick retries with random jitter, as the Redlock
/// spec says: instances racing for one tick can split the nodes' votes so that nobody wins a
/// round.
fn tick_lock(ttl: Duration) -> lockkit::Result<LockOptions> {
    let retry = RetryOptions::new()
        .delay(Duration::from_millis(2))
        .jitter(Duration::from_millis(20))
        .max_attempts(Some(4))
        .deadline(Some(ttl / 2));
    LockOptions::builder(ttl).retry(retry).build()
}

/// Takes the tick's lock on any [`Locker`] (one Redis or a Redlock); the lock is left to expire
/// (see "Sizing the TTL"). `false` when another instance holds it.
async fn try_take<L: Locker>(locker: &L, key: &str, opts: &LockOptions) -> lockkit::Result<bool> {
    match locker.acquire(key, opts).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::Busy => Ok(false),
        Err(e) => Err(e),
    }
}

/// One line: the library error's own text already carries its cause (its source chain would
/// repeat it).
fn connect_error(shown: &[String], e: lockkit::Error) -> anyhow::Error {
    anyhow::anyhow!("connecting to {}: {e}", shown.join(", "))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Plan {
    job: String,
    tick_ms: u64,
    job_ms: u64,
    max_late_ms: u64,
    lock: LockOptions,
    first_tick: u64,
    ticks: u64,
}

/// One scheduler instance: wake at each boundary, try the tick's lock, run the job if won.
async fn scheduler<L: Locker>(
    name: String,
    locker: L,
    plan: &Plan,
    timings: mpsc::UnboundedSender<u64>,
) {
    for tick in plan.first_tick..plan.first_tick + plan.ticks {
        let boundary = tick * plan.tick_ms;
        let now = unix_ms();
        if boundary > now {
            tokio::time::sleep(Duration::from_millis(boundary - now)).await;
        }
        let late = unix_ms().saturating_sub(boundary);
        if late > plan.max_late_ms {
            println!(
                "tick={tick} instance={name} late: woke {late} ms after the boundary; skipping"
            );
            continue;
        }
        let key = format!("cron:{}:{tick}", plan.job);
        match try_take(&locker, &key, &plan.lock).await {
            Ok(true) => {
                let started = std::time::Instant::now();
                let extra = rand_extra(plan.job_ms / 4);
                tokio::time::sleep(Duration::from_millis(plan.job_ms + extra)).await;
                let took = started.elapsed().as_millis() as u64;
                let _ = timings.send(took);
                println!("tick={tick} instance={name} ran the job in {took} ms");
            }
            Ok(false) => println!("tick={tick} instance={name} skipped: another instance has it"),
            Err(e) => {
                println!("tick={tick} instance={name} error: {e}; skipping (never run twice)")
            }
        }
    }
}

fn rand_extra(max: u64) -> u64 {
    if max == 0 {
        0
    } else {
        rand::random_range(0..=max)
    }
}

async fn run(opts: Opts) -> anyhow::Result<()> {
    anyhow::ensure!(opts.instances > 0, "--instances must be at least 1");
    anyhow::ensure!(opts.tick_ms > 0, "--tick-ms must be at least 1");
    let max_late_ms = opts.max_late_ms.unwrap_or(opts.tick_ms / 2);
    let ttl_ms = opts
        .ttl_ms
        .unwrap_or((2 * opts.job_ms + 100).max(max_late_ms + 100));
    // Start at the tick after next, so that instances started together share all ticks.
    let first_tick = unix_ms() / opts.tick_ms + 2;
    let plan = Plan {
        job: opts.job.clone(),
        tick_ms: opts.tick_ms,
        job_ms: opts.job_ms,
        max_late_ms,
        lock: tick_lock(Duration::from_millis(ttl_ms)).context("--ttl-ms")?,
        first_tick,
        ticks: opts.ticks,
    };
    let base = opts
        .name
        .clone()
        .unwrap_or_else(|| std::process::id().to_string());
    let mode = if opts.redis_urls.len() == 1 {
        "single Redis"
    } else {
        "Redlock"
    };
    println!(
        "cron: {} instance(s) of {base}, {mode}, ticks {first_tick}..{}, every {} ms, TTL {ttl_ms} ms, max late {max_late_ms} ms",
        opts.instances,
        first_tick + opts.ticks - 1,
        opts.tick_ms
    );

    let (tx, mut rx) = mpsc::unbounded_channel();
    let plan = std::sync::Arc::new(plan);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=opts.instances {
        // Each instance has its own connections, as separate processes would.
        let (plan, tx) = (plan.clone(), tx.clone());
        let name = format!("{base}-{i}");
        let urls = &opts.redis_urls;
        let shown: Vec<String> = urls.iter().map(|u| redact_url(u)).collect();
        if let [one] = urls.as_slice() {
            let client = LockClient::connect(one)
                .await
                .map_err(|e| connect_error(&shown, e))?;
            tasks.spawn(async move { scheduler(name, client, &plan, tx).await });
        } else {
            let redlock = Redlock::connect(urls)
                .await
                .map_err(|e| connect_error(&shown, e))?;
            tasks.spawn(async move { scheduler(name, redlock, &plan, tx).await });
        }
    }
    drop(tx);
    while let Some(r) = tasks.join_next().await {
        r.context("a scheduler task failed")?;
    }

    let mut timings = Vec::new();
    while let Some(t) = rx.recv().await {
        timings.push(t);
    }
    timings.sort_unstable();
    if let Some(&max) = timings.last() {
        let p99 = timings[(timings.len() * 99).div_ceil(100).saturating_sub(1)];
        println!(
            "cron: {} job run(s) here, p99 {p99} ms, max {max} ms; size the TTL from them with \
             `lockkit ttl RESULT.json --work-timings FILE` (see --timings-out)",
            timings.len()
        );
    }
    if let Some(path) = &opts.timings_out {
        write_timings(path, &timings).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Replaces `path` with one `NNNms` line per timing, whole or not at all (temporary file in
/// the same folder, then rename).
fn write_timings(path: &std::path::Path, timings: &[u64]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let text: String = timings.iter().map(|t| format!("{t}ms\n")).collect();
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
