//! Reports that survive a crash: every report the proxy writes at stop is also written while it
//! runs, every `--snapshot-every` (atomically: a temporary file renamed over the same name), so
//! a SIGKILL or the OOM killer loses at most one interval of what the plugins observed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plugin::{Plugin, ReportCtx};
use crate::server::Proxy;
use crate::shared::ProxyShared;

/// How often the reports are written while the proxy runs, by default.
pub const DEFAULT_SNAPSHOT_EVERY: Duration = Duration::from_secs(10);

/// Where one run's reports go: `DIR/<plugin>-<stamp>.json`, the stamp fixed when the run began,
/// so each snapshot replaces the one before and the report written at stop replaces the last.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    out: PathBuf,
    stamp: String,
}

impl ReportFiles {
    /// The files of a run that begins now, in `out`.
    pub fn new(out: &Path) -> ReportFiles {
        let (_, stamp) = lockkit_report::bench::utc_now();
        ReportFiles {
            out: out.to_path_buf(),
            stamp,
        }
    }

    /// The path of plugin `name`'s report.
    pub fn path(&self, name: &str) -> PathBuf {
        self.out.join(format!("{name}-{}.json", self.stamp))
    }

    /// Writes each report (temporary file, then renamed over its name); the paths written.
    ///
    /// # Errors
    /// A report that cannot be written.
    pub fn write(&self, reports: &[(String, serde_json::Value)]) -> anyhow::Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        for (name, value) in reports {
            let path = self.path(name);
            let text = serde_json::to_vec_pretty(value)?;
            lockkit_report::files::write_atomic(&path, &text)?;
            written.push(path);
        }
        Ok(written)
    }
}

/// What a running proxy's reports are made from, readable while it serves.
#[derive(Debug, Clone)]
pub struct Reporter {
    shared: Arc<ProxyShared>,
    started: Instant,
}

impl Reporter {
    pub(crate) fn new(shared: Arc<ProxyShared>, started: Instant) -> Reporter {
        Reporter { shared, started }
    }

    /// The report context as of now (commands counted so far, time since the start).
    pub fn ctx(&self) -> ReportCtx {
        ReportCtx {
            target: self.shared.upstream.shown().to_string(),
            duration: self.started.elapsed(),
            commands: self.shared.command_counts(),
        }
    }

    /// The plugins' reports as of now.
    pub fn reports(&self) -> Vec<(String, serde_json::Value)> {
        Proxy::reports(self.plugins(), &self.ctx())
    }

    /// The proxy's plugins.
    pub fn plugins(&self) -> &[Arc<dyn Plugin>] {
        &self.shared.plugins
    }
}

/// Writes the reports into `files` every `every` until `stop` fires (or its sender is dropped);
/// a write under way is finished first, so the caller's final write comes after the last
/// snapshot. A write that fails is said once on stderr (until one succeeds again) and tried
/// again at the next interval.
pub async fn every(
    every: Duration,
    reporter: Reporter,
    files: ReportFiles,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => return,
        }
        // A Lua plugin's report hook may take its time: off the connections' threads.
        let (files, reporter) = (files.clone(), reporter.clone());
        let r = tokio::task::spawn_blocking(move || files.write(&reporter.reports())).await;
        match r {
            Ok(Ok(_)) => failing = false,
            Ok(Err(e)) if !failing => {
                failing = true;
                eprintln!("lockkit proxy: snapshot not written: {e:#}");
            }
            _ => {}
        }
    }
}
