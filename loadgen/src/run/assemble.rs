//! The report of one run, from what it measured: the target, the machine, the configuration,
//! throughput, latency, safety, errors, the TTL advice and CPU.

use lockkit::Locker;
use lockkit_report::bench::{self as report, Report};
use lockkit_report::stats::{Interval, Op, TaskCounters};
use lockkit_report::ttl::recommend_from_latency;
use lockkit_report::ttl_advice::work_from_config;

use super::{round3, BenchRun, CpuSnapshot};

impl BenchRun<'_> {
    /// The run's configuration as the report records it: the options, plus the script mode,
    /// hold and TTL in plain units and the number of nodes.
    fn config_json(&self) -> anyhow::Result<serde_json::Value> {
        let a = self.args;
        let mut config = serde_json::to_value(a)?;
        config["script_mode"] = self.mode.name().into();
        config["hold_us"] = (a.hold.as_micros() as u64).into();
        config["ttl_ms"] = (a.ttl.as_millis() as u64).into();
        config["urls"] = self.nodes.into();
        Ok(config)
    }

    /// How load was offered (closed or open loop) and where latency counts from.
    fn load_report(&self, late_starts: u64) -> report::LoopReport {
        let a = self.args;
        report::LoopReport {
            mode: a.loop_mode().into(),
            rate: a.rate,
            late_starts,
            latency_from: if a.rate.is_some() {
                "scheduled start (acquire_ok/acquire_contended of a cycle's first attempt, time_to_acquire, cycle)".into()
            } else {
                "request send".into()
            },
        }
    }

    /// The target as measured: its URL (redacted), version, topology, script mode and wait.
    fn target_report<L: Locker>(&self, locker: &L) -> report::TargetReport {
        let mode = if self.info.mode == "standalone" || self.info.mode.is_empty() {
            locker.mode().to_string()
        } else {
            self.info.mode.clone()
        };
        report::TargetReport {
            url: self.redacted.to_string(),
            server_version: self.info.version.clone(),
            mode,
            throwaway: self.throwaway,
            script_mode: self.mode.name().into(),
            wait: self.wait.clone(),
        }
    }

    /// The report of a run that measured `total` over `duration_s`, without what only the run
    /// knows (timeline, fencing, max holders, faults).
    pub(super) fn assemble<L: Locker>(
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
        let latency_us = Op::ALL
            .iter()
            .map(|op| {
                (
                    op.name().to_string(),
                    lockkit_report::stats::LatencySummary::of(total.hist(*op)),
                )
            })
            .collect();
        let config = self.config_json()?;
        let (work, basis) = work_from_config(&config);
        let ttl =
            recommend_from_latency(&latency_us, work, &basis, a.pause_budget, a.safety_factor);
        Ok(Report {
            schema: report::SCHEMA.into(),
            interrupted,
            target: self.target_report(locker),
            machine: report::MachineReport {
                cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
                os: report::os_name(),
                tool_version: env!("CARGO_PKG_VERSION").into(),
                date: self.date.to_string(),
            },
            config,
            load: self.load_report(c.late_starts),
            duration_s: (duration_s * 1000.0).round() / 1000.0,
            throughput: throughput(c, duration_s),
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
            cpu: cpu_report(cpu, c.cycles),
            ceiling: None,
            histogram_logs: Default::default(),
            timeline: Vec::new(),
            faults: None,
        })
    }
}

/// Cycles and attempts, in all and per second of `duration_s`.
fn throughput(c: &TaskCounters, duration_s: f64) -> report::Throughput {
    let per_s = |n: u64| {
        if duration_s > 0.0 {
            n as f64 / duration_s
        } else {
            0.0
        }
    };
    report::Throughput {
        cycles_per_s: per_s(c.cycles).round(),
        attempts_per_s: per_s(c.attempts).round(),
        cycles: c.cycles,
        attempts: c.attempts,
        attempts_per_lock: if c.cycles > 0 {
            (c.attempts as f64 / c.cycles as f64 * 100.0).round() / 100.0
        } else {
            0.0
        },
    }
}

/// The tool's and the servers' CPU seconds between two snapshots, in all and per cycle.
fn cpu_report(cpu: (CpuSnapshot, CpuSnapshot), cycles: u64) -> report::CpuReport {
    let ((tool0, srv0), (tool1, srv1)) = cpu;
    let tool_cpu_s = tool0.zip(tool1).map(|(x, y)| round3(y - x));
    let server_cpu_s = srv0.zip(srv1).map(|(x, y)| round3(y - x));
    let per_cycle = |s: Option<f64>| {
        s.filter(|_| cycles > 0)
            .map(|s| (s * 1e6 / cycles as f64 * 100.0).round() / 100.0)
    };
    report::CpuReport {
        tool_cpu_s,
        tool_us_per_cycle: per_cycle(tool_cpu_s),
        server_cpu_s,
        server_us_per_cycle: per_cycle(server_cpu_s),
    }
}
