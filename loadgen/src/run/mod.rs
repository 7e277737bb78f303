//! One measured run: spawn the workers, drain their histograms once a second into interval logs,
//! show progress, stop on time, budget or Ctrl-C, and assemble the report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use lockkit::{LockOptions, RetryOptions, ScriptMode};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

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

mod assemble;
use lockkit::Locker;
use lockkit_report::bench::{FencingReport, Report, TimelinePoint};
use lockkit_report::faults::{FaultsOptions, FaultsReport, NetworkFaultCounts};
use lockkit_report::files::IntervalLog;
use lockkit_report::stats::{lock, Interval, Op, SharedStats, TaskStats};
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

/// What the measuring loop's steps share.
struct MeasureLoop<'a> {
    shared: &'a Arc<WorkerShared>,
    progress: &'a Progress,
    /// `--seed`, or one from the clock.
    seed: u64,
}

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

/// The workers of one run and the histograms they record into (one set per runtime thread).
struct WorkerTasks {
    set: JoinSet<()>,
    stats: Vec<SharedStats>,
    /// When the workers' schedule starts.
    t0: Instant,
}

impl WorkerTasks {
    /// Everything recorded since the last drain, as one interval.
    fn drain(&self, retry: bool) -> Interval {
        let mut iv = Interval::default();
        for s in &self.stats {
            lock(s).drain_into(&mut iv);
        }
        copy_time_to_acquire(&mut iv, retry);
        iv
    }

    /// Waits until every worker has returned.
    async fn join_all(&mut self) {
        while self.set.join_next().await.is_some() {}
    }
}

/// The measuring loop's clock: warming up or measuring, and when the next drain is due.
struct Clock {
    warm_end: Instant,
    measuring: bool,
    measure_start: Instant,
    hard_end: Instant,
    next_tick: Instant,
    last_tick: Instant,
}

/// A drain every second.
const TICK: Duration = Duration::from_secs(1);

impl Clock {
    /// Starts at `t0`: measuring at once without a warm-up.
    fn new(t0: Instant, warmup: Duration, duration: Duration) -> Self {
        let warm_end = t0 + warmup;
        let measuring = warmup.is_zero();
        Clock {
            warm_end,
            measuring,
            measure_start: t0,
            hard_end: warm_end + duration,
            next_tick: if measuring { t0 + TICK } else { warm_end },
            last_tick: t0,
        }
    }

    /// The warm-up ended at `now`: measuring starts, for `duration`.
    fn start_measuring(&mut self, now: Instant, duration: Duration) {
        self.measuring = true;
        self.measure_start = now;
        self.hard_end = now + duration;
        self.last_tick = now;
        self.next_tick = now + TICK;
    }

    /// A measured interval was drained at `now`; the next one is due a tick later.
    fn ticked(&mut self, now: Instant) {
        self.last_tick = now;
        self.next_tick += TICK;
        if self.next_tick <= now {
            self.next_tick = now + TICK;
        }
    }

    /// The measured seconds, if the run ended at `end`.
    fn measured_s(&self, end: Instant) -> f64 {
        if self.measuring {
            (end.max(self.measure_start) - self.measure_start).as_secs_f64()
        } else {
            0.0
        }
    }
}

/// What the measuring loop leaves when it stops.
struct Measured {
    clock: Clock,
    rec: Recorded,
    /// CPU seconds when measuring started.
    cpu0: CpuSnapshot,
    /// The fault schedule, if it started.
    faults_task: Option<JoinHandle<()>>,
    /// When `stop_rx` stopped the run (Ctrl-C), if it did.
    stopped_at: Option<Instant>,
}

/// One progress line: this interval's rate, the run's p99 cycle, errors and violations.
fn progress_line(iv: &Interval, len: Duration, total: &Interval, violations: u64) -> String {
    let cyc = total.hist(Op::Cycle);
    format!(
        "cycles/s {:>8}  p99 {:>8}  errors {}  violations {}",
        format_rate(iv.counters.cycles as f64 / len.as_secs_f64().max(1e-9)),
        format_duration(Duration::from_micros(cyc.value_at_quantile(0.99))),
        total.counters.error_total(),
        violations,
    )
}

/// A seed from the clock, when `--seed` is not given.
fn seed_from_clock() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
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
        stop_rx: watch::Receiver<bool>,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<(Report, Vec<IntervalLog>)> {
        let a = self.args;
        let (run_stop_tx, run_stop_rx) = watch::channel(false);
        let shared = Arc::new(self.worker_shared(run_stop_rx));
        let seed = a.seed.unwrap_or_else(seed_from_clock);
        let mut workers = self.spawn_workers(&locker, &fenced, &rw, &shared, seed)?;
        let progress = Progress::new(a.quiet);
        let run = MeasureLoop {
            shared: &shared,
            progress: &progress,
            seed,
        };
        let mut m = self.measure(&run, &mut workers, info_conns, stop_rx).await;
        let end = m.stopped_at.unwrap_or_else(Instant::now);
        shared.stop.store(true, Ordering::SeqCst);
        let _ = run_stop_tx.send(true);
        let network = self.wind_down(&mut workers, m.faults_task.take()).await;
        progress.finish();
        let iv = workers.drain(a.retry);
        if m.clock.measuring {
            let now = Instant::now();
            m.rec.add(
                &iv,
                m.clock.last_tick - m.clock.measure_start,
                now - m.clock.last_tick,
            );
        }
        let cpu1 = (target::own_cpu(), servers_cpu(info_conns).await);
        let mut report = self.assemble(
            &locker,
            &m.rec.total,
            m.clock.measured_s(end),
            (m.cpu0, cpu1),
            shared.violations(),
            interrupted.load(Ordering::SeqCst),
        )?;
        report.timeline = m.rec.timeline;
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
        Ok((report, m.rec.logs))
    }

    /// What every worker shares: the stop signals, and the safety checker with the rule of
    /// the primitive over the key space the key distribution uses.
    fn worker_shared(&self, stop_rx: watch::Receiver<bool>) -> WorkerShared {
        let a = self.args;
        let keys = match a.key_dist {
            KeyDist::Unique => 0,
            KeyDist::Hot => 1,
            KeyDist::Uniform | KeyDist::Zipf => a.keys,
        };
        let rule = match a.primitive {
            Primitive::Mutex => Rule::Exclusive,
            Primitive::Rwlock => Rule::ReadWrite,
            Primitive::Semaphore => Rule::Permits(u32::try_from(a.permits).unwrap_or(u32::MAX)),
        };
        WorkerShared {
            stop: AtomicBool::new(false),
            stop_rx,
            measuring: AtomicBool::new(a.warmup.is_zero()),
            started: AtomicU64::new(0),
            checker: SafetyChecker::with_rule(
                keys,
                // Each client holds at most one batch of locks at a time.
                a.clients.saturating_mul(a.batch),
                a.threads.unwrap_or_else(crate::bench::default_threads) == 1,
                rule,
            ),
            holder_pause: Arc::new(HolderPause::default()),
            fault_log: OnceLock::new(),
            fencing: a.fencing.then(FencedResource::default),
        }
    }

    /// The options of every lock: the TTL, the retry policy (one attempt per cycle without
    /// `--retry`) and `--wait fair`'s queue in Redis.
    fn lock_options(&self) -> anyhow::Result<LockOptions> {
        let a = self.args;
        let retry = if a.retry {
            RetryOptions::new()
                .delay(a.retry_delay)
                .jitter(a.retry_jitter)
                .deadline(Some(a.retry_deadline))
        } else {
            RetryOptions::none()
        };
        LockOptions::builder(a.ttl)
            .retry(retry)
            .fair(a.wait.is_fair())
            .build()
            .map_err(lockkit_report::exit::bad_input)
    }

    /// Spawns one worker per client, each with its own [`BenchLocker`] and key picker.
    fn spawn_workers<L: Locker>(
        &self,
        locker: &L,
        fenced: &Option<Fencer>,
        rw: &Option<lockkit::RwLock>,
        shared: &Arc<WorkerShared>,
        seed: u64,
    ) -> anyhow::Result<WorkerTasks> {
        let a = self.args;
        let prefix: Arc<str> = a.key_prefix.as_str().into();
        let lock_options = self.lock_options()?;
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
                Arc::clone(&stats[task as usize % shards]),
                Arc::clone(shared),
            ));
        }
        Ok(WorkerTasks { set, stats, t0 })
    }

    /// Starts the fault schedule (`--faults`) at `at`, and arms the network faults on their
    /// path; `None` without `--faults`.
    fn start_faults(&self, run: &MeasureLoop<'_>, at: Instant) -> Option<JoinHandle<()>> {
        let list = self.args.faults.clone()?;
        let print: Option<LinePrinter> =
            (!self.args.quiet).then(|| Box::new(run.progress.line_printer()) as LinePrinter);
        let log = Arc::new(FaultLog::new(at, print));
        let _ = run.shared.fault_log.set(Arc::clone(&log));
        if let (Some(path), Some(options)) = (self.network, list.network) {
            let options = FaultsOptions {
                seed: run.seed,
                ..options
            };
            path.arm(options, Arc::clone(&log), run.shared.stop_rx.clone());
        }
        Some(tokio::spawn(run_schedule(
            list,
            run.seed,
            Arc::clone(self.fault_targets),
            Arc::clone(&run.shared.holder_pause),
            log,
            run.shared.stop_rx.clone(),
        )))
    }

    /// Drains the histograms once a second until the duration is over, `stop_rx` fires or
    /// every worker has returned; the warm-up's intervals are dropped, and measuring (with the
    /// fault schedule) starts when it ends.
    async fn measure(
        &self,
        run: &MeasureLoop<'_>,
        workers: &mut WorkerTasks,
        info_conns: &mut [redis::aio::MultiplexedConnection],
        mut stop_rx: watch::Receiver<bool>,
    ) -> Measured {
        let a = self.args;
        let t0 = workers.t0;
        let clock = Clock::new(t0, a.warmup, a.duration);
        if clock.measuring {
            run.progress.measuring(a.duration);
        } else {
            run.progress.warming_up(a.warmup);
        }
        let mut m = Measured {
            rec: Recorded::starting_now(),
            cpu0: (target::own_cpu(), servers_cpu(info_conns).await),
            faults_task: if clock.measuring {
                self.start_faults(run, t0)
            } else {
                None
            },
            stopped_at: None,
            clock,
        };
        loop {
            let wake = m.clock.next_tick.min(m.clock.hard_end);
            let mut finished = false;
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stop_rx.wait_for(|s| *s) => { m.stopped_at = Some(Instant::now()); }
                _ = workers.join_all() => { finished = true; }
            }
            let now = Instant::now();
            let iv = workers.drain(a.retry);
            let clock = &mut m.clock;
            if !clock.measuring {
                if now >= clock.warm_end {
                    clock.start_measuring(now, a.duration);
                    run.shared.measuring.store(true, Ordering::SeqCst);
                    m.rec = Recorded::starting_now();
                    m.cpu0 = (target::own_cpu(), servers_cpu(info_conns).await);
                    run.progress.measuring(a.duration);
                    m.faults_task = self.start_faults(run, now);
                }
            } else {
                let len = now - clock.last_tick;
                m.rec.add(&iv, clock.last_tick - clock.measure_start, len);
                if !run.progress.is_hidden() {
                    let line = progress_line(&iv, len, &m.rec.total, run.shared.violations());
                    run.progress.update(now - clock.measure_start, line);
                }
                clock.ticked(now);
            }
            if m.stopped_at.is_some() || finished || (m.clock.measuring && now >= m.clock.hard_end)
            {
                return m;
            }
        }
    }

    /// After the stop: disarms the network faults (their counts), lets the fault schedule end
    /// and resumes paused servers, then gives the workers [`DRAIN_TIMEOUT`] to return before
    /// aborting them.
    async fn wind_down(
        &self,
        workers: &mut WorkerTasks,
        faults_task: Option<JoinHandle<()>>,
    ) -> Option<NetworkFaultCounts> {
        let network = match self.network {
            Some(path) => Some(path.disarm().await),
            None => None,
        };
        if let Some(task) = faults_task {
            // Paused servers are resumed before the workers are waited for.
            let _ = tokio::time::timeout(FAULTS_TIMEOUT, task).await;
            self.fault_targets.resume_all().await;
        }
        if tokio::time::timeout(DRAIN_TIMEOUT, workers.join_all())
            .await
            .is_err()
        {
            workers.set.abort_all();
        }
        network
    }
}
