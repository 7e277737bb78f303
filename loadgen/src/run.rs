//! One measured run: spawn the workers, drain their histograms once a second into interval logs,
//! show progress, stop on time, budget or Ctrl-C, and assemble the report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use lockkit::{LockOptions, RetryOptions, ScriptMode};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::checker::{Rule, SafetyChecker};
use crate::config::{BenchConfig, KeyDist, Primitive};
use crate::faults::{
    run_schedule, FaultLog, FaultTargets, HolderPause, LinePrinter, NetworkFaultPath,
};
use crate::fencing::FencedResource;
use crate::keys::KeyPicker;
use crate::locker::{BenchLocker, Fencer};
use crate::progress::Progress;
use crate::target::{self, ServerInfo};
use crate::worker::{run_worker, WorkerPlan, WorkerShared};
use lockkit::Locker;
use lockkit_report::bench::{self as report, FencingReport, Report, TimelinePoint};
use lockkit_report::faults::{FaultsOptions, FaultsReport};
use lockkit_report::files::IntervalLog;
use lockkit_report::stats::{lock, Interval, Op, SharedStats, TaskStats};
use lockkit_report::ttl::recommend_from_latency;
use lockkit_report::ttl_advice::work_from_config;
use lockkit_report::units::{format_duration, format_rate};

/// How long workers get to finish their cycle after the run ends before they are aborted.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the fault schedule gets to end (a restart under way finishes first).
const FAULTS_TIMEOUT: Duration = Duration::from_secs(10);

/// Without retries, time_to_acquire is acquire_ok by definition (both count from the cycle's
/// start); workers record it once and it is copied here.
fn copy_time_to_acquire(iv: &mut Interval, retry: bool) {
    if !retry {
        let ok = iv.hist(Op::AcquireOk).clone();
        iv.hists[Op::TimeToAcquire.index()] = ok;
    }
}

/// What the measured intervals add up to: one interval log per operation, the timeline of
/// counters, and the totals.
struct Recorded {
    logs: Vec<IntervalLog>,
    timeline: Vec<TimelinePoint>,
    total: Interval,
}

impl Recorded {
    /// Empty, with log offsets counting from now.
    fn starting_now() -> Self {
        let now = SystemTime::now();
        Recorded {
            logs: Op::ALL.iter().map(|_| IntervalLog::starting(now)).collect(),
            timeline: Vec::new(),
            total: Interval::default(),
        }
    }

    /// Adds one interval (operations without samples skip their log).
    fn add(&mut self, iv: &Interval, start: Duration, len: Duration) {
        for (log, h) in self.logs.iter_mut().zip(&iv.hists) {
            if !h.is_empty() {
                log.push(start, len, h.clone());
            }
        }
        let c = &iv.counters;
        self.timeline.push(TimelinePoint {
            t_s: round3(start.as_secs_f64()),
            len_s: round3(len.as_secs_f64()),
            cycles: c.cycles,
            attempts: c.attempts,
            contended: c.contended,
            errors: c.error_total(),
            lost_locks: c.lost_locks,
        });
        self.total.add(iv);
    }
}

/// Rounds to three decimals (reports show no float noise).
pub(crate) fn round3(x: f64) -> f64 {
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

/// What one run measures and how it is labelled in the report.
pub(crate) struct BenchRun<'a> {
    pub(crate) args: &'a BenchConfig,
    pub(crate) info: &'a ServerInfo,
    pub(crate) redacted: &'a str,
    pub(crate) throwaway: bool,
    pub(crate) mode: ScriptMode,
    pub(crate) date: &'a str,
    pub(crate) nodes: usize,
    /// What `--faults` acts on.
    pub(crate) fault_targets: &'a Arc<FaultTargets>,
    /// The way to the target that carries the network faults (`delay`, `drop`, `blackhole`).
    pub(crate) network: Option<&'a dyn NetworkFaultPath>,
    /// How waiters wait here (`notify`, `poll`, or `poll (why)`), for the report.
    pub(crate) wait: String,
}

impl BenchRun<'_> {
    /// Runs the workload on `locker` until the duration, the cycle budget or `stop_rx`; with
    /// `fenced` (`--fencing`), every acquire draws a fencing token from it.
    pub(crate) async fn execute<L: Locker>(
        &self,
        locker: L,
        fenced: Option<Fencer>,
        rw: Option<lockkit::RwLock>,
        info_conns: &mut [redis::aio::MultiplexedConnection],
        mut stop_rx: watch::Receiver<bool>,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<(Report, Vec<IntervalLog>)> {
        let a = self.args;
        let (run_stop_tx, run_stop_rx) = watch::channel(false);
        let shared = Arc::new(WorkerShared {
            stop: AtomicBool::new(false),
            stop_rx: run_stop_rx,
            measuring: AtomicBool::new(a.warmup.is_zero()),
            started: AtomicU64::new(0),
            checker: SafetyChecker::with_rule(
                match a.key_dist {
                    KeyDist::Unique => 0,
                    KeyDist::Hot => 1,
                    KeyDist::Uniform | KeyDist::Zipf => a.keys,
                },
                // Each client holds at most one batch of locks at a time.
                a.clients.saturating_mul(a.batch),
                a.threads.unwrap_or_else(crate::bench::default_threads) == 1,
                match a.primitive {
                    Primitive::Mutex => Rule::Exclusive,
                    Primitive::Rwlock => Rule::ReadWrite,
                    Primitive::Semaphore => {
                        Rule::Permits(u32::try_from(a.permits).unwrap_or(u32::MAX))
                    }
                },
            ),
            holder_pause: Arc::new(HolderPause::default()),
            fault_log: OnceLock::new(),
            fencing: a.fencing.then(FencedResource::default),
        });
        let prefix: Arc<str> = a.key_prefix.as_str().into();
        let seed = a.seed.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        // Without --retry, one attempt per cycle. Checked once, for every worker.
        let retry = if a.retry {
            RetryOptions::new()
                .delay(a.retry_delay)
                .jitter(a.retry_jitter)
                .deadline(Some(a.retry_deadline))
        } else {
            RetryOptions::none()
        };
        // `--wait fair`: acquires take turns through the queue in Redis.
        let lock_options = LockOptions::builder(a.ttl)
            .retry(retry)
            .fair(a.wait.is_fair())
            .build()
            .map_err(lockkit_report::exit::bad_input)?;
        let t0 = Instant::now();
        // One set of histograms per runtime thread, shared by the tasks it runs, not one per
        // task: 50 tasks' histograms do not stay in the CPU's caches, and recording into them
        // cost more of the tool's CPU than any other single function.
        let shards = tokio::runtime::Handle::current()
            .metrics()
            .num_workers()
            .clamp(1, a.clients.max(1) as usize);
        let stats: Vec<SharedStats> = (0..shards)
            .map(|_| Arc::new(Mutex::new(TaskStats::default())))
            .collect();
        let mut set = JoinSet::new();
        for task in 0..a.clients {
            let s = Arc::clone(&stats[task as usize % shards]);
            let plan = WorkerPlan {
                task,
                clients: a.clients,
                lock: lock_options,
                hold: a.hold,
                hold_dist: a.hold_dist,
                retry: a.retry,
                watchdog: a.watchdog,
                extends: a.extends,
                batch: a.batch,
                rate: a.rate,
                t0,
                cycles: a.cycles,
                key_dist: a.key_dist,
                read_ratio: a.read_ratio,
            };
            let keys = KeyPicker::new(
                a.key_dist,
                a.keys,
                a.zipf_s,
                task,
                seed,
                Arc::clone(&prefix),
            );
            set.spawn(run_worker(
                BenchLocker::new(locker.clone(), fenced.clone(), &a.key_prefix)
                    .with_rwlock(rw.clone()),
                keys,
                plan,
                s,
                Arc::clone(&shared),
            ));
        }

        let progress = Progress::new(a.quiet);
        let tick = Duration::from_secs(1);
        let warm_end = t0 + a.warmup;
        let mut measuring = a.warmup.is_zero();
        let mut measure_start = t0;
        let mut hard_end = warm_end + a.duration;
        let mut next_tick = if measuring { t0 + tick } else { warm_end };
        if measuring {
            progress.measuring(a.duration);
        } else {
            progress.warming_up(a.warmup);
        }
        let mut last_tick = t0;
        let mut rec = Recorded::starting_now();
        let mut cpu0 = (target::own_cpu(), servers_cpu(info_conns).await);
        let start_faults = |at: Instant| {
            let list = a.faults.clone()?;
            let print: Option<LinePrinter> =
                (!a.quiet).then(|| Box::new(progress.line_printer()) as LinePrinter);
            let log = Arc::new(FaultLog::new(at, print));
            let _ = shared.fault_log.set(Arc::clone(&log));
            if let (Some(path), Some(options)) = (self.network, list.network) {
                let options = FaultsOptions { seed, ..options };
                path.arm(options, Arc::clone(&log), shared.stop_rx.clone());
            }
            Some(tokio::spawn(run_schedule(
                list,
                seed,
                Arc::clone(self.fault_targets),
                Arc::clone(&shared.holder_pause),
                log,
                shared.stop_rx.clone(),
            )))
        };
        let mut faults_task = if measuring { start_faults(t0) } else { None };
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
                    rec = Recorded::starting_now();
                    hard_end = now + a.duration;
                    last_tick = now;
                    next_tick = now + tick;
                    cpu0 = (target::own_cpu(), servers_cpu(info_conns).await);
                    progress.measuring(a.duration);
                    faults_task = start_faults(measure_start);
                }
            } else {
                rec.add(&iv, last_tick - measure_start, now - last_tick);
                if !progress.is_hidden() {
                    let cyc = rec.total.hist(Op::Cycle);
                    progress.update(
                        now - measure_start,
                        format!(
                            "cycles/s {:>8}  p99 {:>8}  errors {}  violations {}",
                            format_rate(
                                iv.counters.cycles as f64
                                    / (now - last_tick).as_secs_f64().max(1e-9)
                            ),
                            format_duration(Duration::from_micros(cyc.value_at_quantile(0.99))),
                            rec.total.counters.error_total(),
                            shared.violations(),
                        ),
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
        let network = match self.network {
            Some(path) => Some(path.disarm().await),
            None => None,
        };
        if let Some(task) = faults_task {
            // Paused servers are resumed before the workers are waited for.
            let _ = tokio::time::timeout(FAULTS_TIMEOUT, task).await;
            self.fault_targets.resume_all().await;
        }
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            set.abort_all();
        }
        progress.finish();
        let mut iv = Interval::default();
        for s in &stats {
            lock(s).drain_into(&mut iv);
        }
        copy_time_to_acquire(&mut iv, a.retry);
        if measuring {
            let now = Instant::now();
            rec.add(&iv, last_tick - measure_start, now - last_tick);
        }
        let cpu1 = (target::own_cpu(), servers_cpu(info_conns).await);
        let duration_s = if measuring {
            (end.max(measure_start) - measure_start).as_secs_f64()
        } else {
            0.0
        };
        let mut report = self.assemble(
            &locker,
            &rec.total,
            duration_s,
            (cpu0, cpu1),
            shared.violations(),
            interrupted.load(Ordering::SeqCst),
        )?;
        report.timeline = rec.timeline;
        report.safety.fencing = shared.fencing.as_ref().map(|f| FencingReport {
            lease_overlaps: shared.checker.violations(),
            ..f.report()
        });
        report.safety.max_holders = shared.checker.max_holders();
        report.faults = a.faults.as_ref().map(|list| FaultsReport {
            seed,
            schedule: list.to_string(),
            events: shared
                .fault_log
                .get()
                .map(|l| l.events())
                .unwrap_or_default(),
            network: network.filter(|_| list.network.is_some()),
        });
        Ok((report, rec.logs))
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
        let recovered = Some(locker.stats());
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
                    lockkit_report::stats::LatencySummary::of(total.hist(*op)),
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
                wait: self.wait.clone(),
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
                attempts_per_lock: if c.cycles > 0 {
                    (c.attempts as f64 / c.cycles as f64 * 100.0).round() / 100.0
                } else {
                    0.0
                },
            },
            contention_rate: if c.attempts > 0 {
                c.contended as f64 / c.attempts as f64
            } else {
                0.0
            },
            latency_us,
            safety: report::Safety {
                violations,
                max_holders: 0,
                lost_locks: c.lost_locks,
                watchdog_lost: c.watchdog_lost,
                fencing: None,
            },
            errors: report::ErrorsReport {
                total: c.error_total(),
                by_kind: c.errors.clone(),
                recovered: report::Recovered {
                    noscript: recovered.map(|s| s.noscript_recoveries),
                    unknown_outcome_cleanups: recovered.map(|s| s.unknown_outcome_cleanups),
                },
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
            timeline: Vec::new(),
            faults: None,
        })
    }
}
