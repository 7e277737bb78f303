//! `lockkit bench`: set up the target, run the workers, collect, report.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use lockkit::{ClientOptions, LockClient, Redlock, RedlockOptions, RetryOptions, ScriptMode};
use lockkit_test_support::{RedisServer, ServerOptions};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::args::{BenchArgs, KeyDist};
use crate::checker::SafetyChecker;
use crate::keys::{zipf_table, KeyPicker};
use crate::locker::Locker;
use crate::report::{self, IntervalLog, Report};
use crate::stats::{lock, Interval, Op, SharedStats, TaskStats};
use crate::target::{self, connect_hint, ServerInfo};
use crate::ttl_cmd::{recommend_from_latency, work_from_config};
use crate::units::{format_duration, format_rate};
use crate::worker::{run_worker, Shared, WorkerPlan};

/// How long workers get to finish their cycle after the run ends before they are aborted.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Exit code of a run stopped with Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// One finished run (one script mode) and where its report went.
#[derive(Debug)]
pub struct RunResult {
    /// The JSON report's path.
    pub json_path: PathBuf,
    /// The report.
    pub report: Report,
}

/// Builds the runtime (`--threads` workers) and runs the benchmark.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    args.validate().map_err(anyhow::Error::msg)?;
    let threads = args.threads.unwrap_or_else(default_threads);
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
    let results = rt.block_on(run_async(args))?;
    Ok(if results.iter().any(|r| r.report.interrupted) {
        ExitCode::from(EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Half the cores (at least one): the other half is left to a server on the same machine.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The benchmark inside a runtime; returns each run's report (one per script mode).
pub async fn run_async(args: BenchArgs) -> anyhow::Result<Vec<RunResult>> {
    args.validate().map_err(anyhow::Error::msg)?;
    let mut urls = args.urls.clone();
    if urls.is_empty() {
        if let Ok(u) = std::env::var("REDIS_URL") {
            if !u.trim().is_empty() {
                urls.push(u);
            }
        }
    }
    let out_dir = match &args.json {
        Some(p) => p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from),
        None => args.out.clone(),
    };
    report::check_writable(&out_dir)?;

    let mut servers = Vec::new();
    if urls.is_empty() {
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
    }
    if urls.len() > 1 && args.ceiling {
        anyhow::bail!("--ceiling measures one server; drop it or use a single server");
    }
    let throwaway = !servers.is_empty();
    let redacted = urls
        .iter()
        .map(|u| lockkit::redact_url(u))
        .collect::<Vec<_>>()
        .join(",");
    let mut info_conns = Vec::with_capacity(urls.len());
    for u in &urls {
        info_conns.push(target::info_connection(u).await?);
    }
    let info = target::server_info(&mut info_conns[0])
        .await
        .with_context(|| format!("connecting to {}", lockkit::redact_url(&urls[0])))?;
    let url = urls[0].clone();

    let (stop_tx, stop_rx) = watch::channel(false);
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (stop_tx, interrupted) = (stop_tx.clone(), Arc::clone(&interrupted));
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Ordering::SeqCst);
                let _ = stop_tx.send(true);
            }
        });
    }

    let (date, stamp) = report::utc_now();
    let modes = args.script_mode.modes();
    let mut runs = Vec::new();
    for mode in &modes {
        if interrupted.load(Ordering::SeqCst) {
            break;
        }
        let opts = ClientOptions::new()
            .connections(args.connections as usize)
            .script_mode(*mode);
        let connect_err = |e: lockkit::Error| {
            let mut msg = connect_hint(&e.to_string());
            if *mode == ScriptMode::Function {
                msg.push_str(" (--script-mode fcall needs Redis 7 or later)");
            }
            anyhow::anyhow!("connecting to {redacted}: {msg}")
        };
        let run = Run {
            args: &args,
            info: &info,
            redacted: &redacted,
            throwaway,
            mode: *mode,
            date: &date,
            nodes: urls.len(),
        };
        let mut rx = stop_rx.clone();
        rx.mark_unchanged();
        let (report, logs) = if urls.len() == 1 {
            let client = LockClient::connect_with(&url, opts)
                .await
                .map_err(connect_err)?;
            run.execute(client, &mut info_conns, rx, &interrupted)
                .await?
        } else {
            let redlock = Redlock::connect_with(&urls, RedlockOptions::new().client(opts))
                .await
                .map_err(connect_err)?;
            run.execute(redlock, &mut info_conns, rx, &interrupted)
                .await?
        };
        runs.push((report, logs, *mode));
    }

    if args.ceiling && !interrupted.load(Ordering::SeqCst) {
        if !args.quiet {
            eprintln!("measuring the server's ceiling with redis-benchmark -P 16 ...");
        }
        if let Some((report, _, _)) = runs.first_mut() {
            // One measurement serves every mode of this run.
            let c = crate::ceiling::measure(&url, report.throughput.cycles_per_s).await?;
            report.ceiling = Some(c);
        }
        let first = runs.first().and_then(|r| r.0.ceiling.clone());
        if let Some(c) = first {
            for (report, _, _) in &mut runs {
                let mut c = c.clone();
                c.ratio = round3(report.throughput.cycles_per_s / c.ceiling_cycles_per_s);
                report.ceiling = Some(c);
            }
        }
    }

    let mut results = Vec::new();
    for (mut report, logs, mode) in runs {
        let suffix = if modes.len() > 1 { mode.name() } else { "" };
        let (json_path, stem) = report::paths(&args.out, args.json.as_ref(), &stamp, suffix);
        for (op, log) in Op::ALL.iter().zip(&logs) {
            if report
                .latency_us
                .get(op.name())
                .is_none_or(|l| l.count == 0)
            {
                continue;
            }
            let path = PathBuf::from(format!("{}.{}.hlog", stem.display(), op.name()));
            report::write_atomic(&path, &log.render(op.name())?)?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            report.histogram_logs.insert(op.name().to_string(), name);
        }
        report::write_atomic(
            &json_path,
            serde_json::to_string_pretty(&report)?.as_bytes(),
        )?;
        if !args.quiet {
            print!("{}", report::summary(&report));
        }
        println!(
            "wrote {} (+ {} histogram logs)",
            json_path.display(),
            report.histogram_logs.len()
        );
        results.push(RunResult { json_path, report });
    }
    if results.len() > 1 && !args.quiet {
        println!("script modes compared:");
        println!(
            "  {:<8} {:>12} {:>10} {:>10} {:>12}",
            "mode", "cycles/s", "release p50", "p99", "server us/cyc"
        );
        for r in &results {
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
    Ok(results)
}

/// Without retries, time_to_acquire is acquire_ok by definition (both count from the cycle's
/// start); workers record it once and it is copied here.
fn copy_time_to_acquire(iv: &mut Interval, retry: bool) {
    if !retry {
        let ok = iv.hist(Op::AcquireOk).clone();
        iv.hists[Op::TimeToAcquire.index()] = ok;
    }
}

/// Appends one interval's histograms to the per-operation logs (operations without samples skip).
fn log_interval(logs: &mut [IntervalLog], iv: &Interval, start: Duration, len: Duration) {
    for (log, h) in logs.iter_mut().zip(&iv.hists) {
        if !h.is_empty() {
            log.push(start, len, h.clone());
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The CPU seconds of every node, added up (`None` if one hides it).
async fn servers_cpu(conns: &mut [redis::aio::MultiplexedConnection]) -> Option<f64> {
    let mut total = 0.0;
    for c in conns.iter_mut() {
        total += target::server_cpu(c).await?;
    }
    Some(total)
}

/// (this tool's, the server's) CPU seconds at one moment.
type CpuSnapshot = (Option<f64>, Option<f64>);

struct Run<'a> {
    args: &'a BenchArgs,
    info: &'a ServerInfo,
    redacted: &'a str,
    throwaway: bool,
    mode: ScriptMode,
    date: &'a str,
    nodes: usize,
}

impl Run<'_> {
    async fn execute<L: Locker>(
        &self,
        locker: L,
        info_conns: &mut [redis::aio::MultiplexedConnection],
        mut stop_rx: watch::Receiver<bool>,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<(Report, Vec<IntervalLog>)> {
        let a = self.args;
        let (run_stop_tx, run_stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            stop_rx: run_stop_rx,
            measuring: AtomicBool::new(a.warmup.is_zero()),
            started: AtomicU64::new(0),
            checker: SafetyChecker::new(match a.key_dist {
                KeyDist::Unique => 0,
                KeyDist::Hot => 1,
                KeyDist::Uniform | KeyDist::Zipf => a.keys,
            }),
        });
        let zipf = (a.key_dist == KeyDist::Zipf).then(|| zipf_table(a.keys, a.zipf_s));
        let prefix: Arc<str> = a.key_prefix.as_str().into();
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let retry = a.retry.then(|| {
            RetryOptions::new()
                .delay(a.retry_delay)
                .jitter(a.retry_jitter)
                .deadline(Some(a.retry_deadline))
        });
        let t0 = Instant::now();
        let mut stats: Vec<SharedStats> = Vec::new();
        let mut set = JoinSet::new();
        for task in 0..a.clients {
            let s: SharedStats = Arc::new(Mutex::new(TaskStats::default()));
            stats.push(Arc::clone(&s));
            let plan = WorkerPlan {
                task,
                clients: a.clients,
                ttl: a.ttl,
                hold: a.hold,
                hold_dist: a.hold_dist,
                retry,
                watchdog: a.watchdog,
                extends: a.extends,
                batch: a.batch,
                rate: a.rate,
                t0,
                cycles: a.cycles,
                key_dist: a.key_dist,
            };
            let keys = KeyPicker::new(
                a.key_dist,
                a.keys,
                zipf.clone(),
                task,
                seed,
                Arc::clone(&prefix),
            );
            set.spawn(run_worker(
                locker.clone(),
                keys,
                plan,
                s,
                Arc::clone(&shared),
            ));
        }

        let progress = !a.quiet && std::io::stderr().is_terminal();
        let tick = Duration::from_secs(1);
        let warm_end = t0 + a.warmup;
        let mut measuring = a.warmup.is_zero();
        let mut measure_start = t0;
        let mut hard_end = warm_end + a.duration;
        let mut next_tick = if measuring { t0 + tick } else { warm_end };
        if progress && !measuring {
            eprint!("\r  warming up for {} ...", format_duration(a.warmup));
        }
        let mut last_tick = t0;
        let fresh_logs = || -> Vec<IntervalLog> {
            let now = SystemTime::now();
            Op::ALL.iter().map(|_| IntervalLog::starting(now)).collect()
        };
        let mut logs = fresh_logs();
        let mut total = Interval::default();
        let mut cpu0 = (target::own_cpu(), servers_cpu(info_conns).await);
        let mut stopped_at = None;
        loop {
            let wake = next_tick.min(hard_end);
            let mut finished = false;
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stop_rx.wait_for(|s| *s) => { stopped_at = Some(Instant::now()); }
                _ = async { while set.join_next().await.is_some() {} } => { finished = true; }
            }
            let now = Instant::now();
            let mut iv = Interval::default();
            for s in &stats {
                lock(s).drain_into(&mut iv);
            }
            copy_time_to_acquire(&mut iv, a.retry);
            if !measuring {
                if now >= warm_end {
                    measuring = true;
                    shared.measuring.store(true, Ordering::SeqCst);
                    measure_start = now;
                    logs = fresh_logs();
                    hard_end = now + a.duration;
                    last_tick = now;
                    next_tick = now + tick;
                    cpu0 = (target::own_cpu(), servers_cpu(info_conns).await);
                }
            } else {
                log_interval(&mut logs, &iv, last_tick - measure_start, now - last_tick);
                total.add(&iv);
                if progress {
                    let cyc = total.hist(Op::Cycle);
                    eprint!(
                        "\r  {:>5.1}s  cycles/s {:>10}  p99 {:>9}  errors {:<6} violations {}   ",
                        (now - measure_start).as_secs_f64(),
                        format_rate(
                            iv.counters.cycles as f64 / (now - last_tick).as_secs_f64().max(1e-9)
                        ),
                        format_duration(Duration::from_micros(cyc.value_at_quantile(0.99))),
                        total.counters.error_total(),
                        shared.checker.violations(),
                    );
                }
                last_tick = now;
                next_tick += tick;
                if next_tick <= now {
                    next_tick = now + tick;
                }
            }
            if stopped_at.is_some() || finished || (measuring && now >= hard_end) {
                break;
            }
        }
        let end = stopped_at.unwrap_or_else(Instant::now);
        shared.stop.store(true, Ordering::SeqCst);
        let _ = run_stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            set.abort_all();
        }
        if progress {
            eprintln!();
        }
        let mut iv = Interval::default();
        for s in &stats {
            lock(s).drain_into(&mut iv);
        }
        copy_time_to_acquire(&mut iv, a.retry);
        if measuring {
            let now = Instant::now();
            log_interval(&mut logs, &iv, last_tick - measure_start, now - last_tick);
            total.add(&iv);
        }
        let cpu1 = (target::own_cpu(), servers_cpu(info_conns).await);
        let duration_s = if measuring {
            (end.max(measure_start) - measure_start).as_secs_f64()
        } else {
            0.0
        };
        let report = self.assemble(
            &locker,
            &total,
            duration_s,
            (cpu0, cpu1),
            shared.checker.violations(),
            interrupted.load(Ordering::SeqCst),
        )?;
        Ok((report, logs))
    }

    fn assemble<L: Locker>(
        &self,
        locker: &L,
        total: &Interval,
        duration_s: f64,
        cpu: (CpuSnapshot, CpuSnapshot),
        violations: u64,
        interrupted: bool,
    ) -> anyhow::Result<Report> {
        let a = self.args;
        let c = &total.counters;
        let per_s = |n: u64| {
            if duration_s > 0.0 {
                n as f64 / duration_s
            } else {
                0.0
            }
        };
        let latency_us = Op::ALL
            .iter()
            .map(|op| {
                (
                    op.name().to_string(),
                    crate::stats::LatencySummary::of(total.hist(*op)),
                )
            })
            .collect();
        let mut config = serde_json::to_value(a)?;
        config["script_mode"] = self.mode.name().into();
        config["hold_us"] = (a.hold.as_micros() as u64).into();
        config["ttl_ms"] = (a.ttl.as_millis() as u64).into();
        config["urls"] = self.nodes.into();
        let (work, basis) = work_from_config(&config);
        let ttl =
            recommend_from_latency(&latency_us, work, &basis, a.pause_budget, a.safety_factor);
        let ((tool0, srv0), (tool1, srv1)) = cpu;
        let tool_cpu_s = tool0.zip(tool1).map(|(x, y)| round3(y - x));
        let server_cpu_s = srv0.zip(srv1).map(|(x, y)| round3(y - x));
        let per_cycle = |s: Option<f64>| {
            s.filter(|_| c.cycles > 0)
                .map(|s| (s * 1e6 / c.cycles as f64 * 100.0).round() / 100.0)
        };
        let mode = if self.info.mode == "standalone" || self.info.mode.is_empty() {
            locker.mode().to_string()
        } else {
            self.info.mode.clone()
        };
        Ok(Report {
            schema: report::SCHEMA.into(),
            interrupted,
            target: report::TargetReport {
                url: self.redacted.to_string(),
                server_version: self.info.version.clone(),
                mode,
                throwaway: self.throwaway,
                script_mode: self.mode.name().into(),
            },
            machine: report::MachineReport {
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                os: report::os_name(),
                tool_version: env!("CARGO_PKG_VERSION").into(),
                date: self.date.to_string(),
            },
            config,
            load: report::LoopReport {
                mode: a.loop_mode().into(),
                rate: a.rate,
                late_starts: c.late_starts,
                latency_from: if a.rate.is_some() {
                    "scheduled start (acquire_ok/acquire_contended of a cycle's first attempt, time_to_acquire, cycle)".into()
                } else {
                    "request send".into()
                },
            },
            duration_s: (duration_s * 1000.0).round() / 1000.0,
            throughput: report::Throughput {
                cycles_per_s: per_s(c.cycles).round(),
                attempts_per_s: per_s(c.attempts).round(),
                cycles: c.cycles,
                attempts: c.attempts,
            },
            contention_rate: if c.attempts > 0 {
                c.contended as f64 / c.attempts as f64
            } else {
                0.0
            },
            latency_us,
            safety: report::Safety {
                violations,
                lost_locks: c.lost_locks,
            },
            errors: report::ErrorsReport {
                total: c.error_total(),
                by_kind: c.errors.clone(),
            },
            ttl: (&ttl).into(),
            cpu: report::CpuReport {
                tool_cpu_s,
                tool_us_per_cycle: per_cycle(tool_cpu_s),
                server_cpu_s,
                server_us_per_cycle: per_cycle(server_cpu_s),
            },
            ceiling: None,
            histogram_logs: Default::default(),
        })
    }
}
