//! Carrying the schedule out: one task per `--faults` entry, each sleeping to its next event,
//! acting on a server (or asking a holder to pause), and logging what happened.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lockkit_redis_proc::RedisServer;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{FaultKind, FaultList, FaultLog, FaultSpec, Timetable};
use crate::worker::sleep_until;

/// How long one `CLIENT KILL` may take (a frozen node does not answer).
const KILL_TIMEOUT: Duration = Duration::from_secs(2);

/// What the faults act on.
#[derive(Debug)]
pub struct FaultTargets {
    /// The throwaway servers lockkit started (none with `--url`).
    pub servers: Arc<Mutex<Vec<RedisServer>>>,
    /// Every node's URL, in order.
    pub urls: Vec<String>,
}

impl FaultTargets {
    /// Lets every throwaway server run again (SIGCONT; harmless on a running one). The schedule
    /// always resumes what it paused; this is the last word in case a task ended early.
    pub async fn resume_all(&self) {
        let servers = Arc::clone(&self.servers);
        let _ = tokio::task::spawn_blocking(move || {
            for s in lock_servers(&servers).iter() {
                let _ = s.resume();
            }
        })
        .await;
    }
}

fn lock_servers(s: &Mutex<Vec<RedisServer>>) -> std::sync::MutexGuard<'_, Vec<RedisServer>> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A holder pause on offer: the scheduler asks, the first holder inside its critical section
/// takes it, and no other is asked until that one has resumed (one at a time).
#[derive(Debug, Default)]
pub struct HolderPause {
    /// 0: idle; `IN_PROGRESS`: a holder is paused; otherwise the requested pause in µs.
    state: AtomicU64,
}

const IN_PROGRESS: u64 = u64::MAX;

impl HolderPause {
    /// Offers a pause of `d`; `false` if the previous one is still on offer or under way.
    pub fn request(&self, d: Duration) -> bool {
        let us = (d.as_micros() as u64).clamp(1, IN_PROGRESS - 1);
        self.state
            .compare_exchange(0, us, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the pause on offer, if any (one relaxed load when there is none).
    pub fn claim(&self) -> Option<Duration> {
        let v = self.state.load(Ordering::Relaxed);
        if v == 0 || v == IN_PROGRESS {
            return None;
        }
        self.state
            .compare_exchange(v, IN_PROGRESS, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| Duration::from_micros(v))
    }

    /// The paused holder is running again.
    pub fn finish(&self) {
        self.state.store(0, Ordering::Release);
    }
}

/// Runs every entry of `list` until `stop_rx` says the run is over; returns once every paused
/// server has been resumed.
pub async fn run_schedule(
    list: FaultList,
    seed: u64,
    targets: Arc<FaultTargets>,
    holder_pause: Arc<HolderPause>,
    log: Arc<FaultLog>,
    stop_rx: watch::Receiver<bool>,
) {
    let mut set = JoinSet::new();
    for (i, spec) in list.scheduled.into_iter().enumerate() {
        let entry = ScheduledFault {
            spec,
            table: Timetable::new(spec, seed, i),
            targets: Arc::clone(&targets),
            holder_pause: Arc::clone(&holder_pause),
            log: Arc::clone(&log),
            stop_rx: stop_rx.clone(),
        };
        set.spawn(entry.run());
    }
    while set.join_next().await.is_some() {}
}

struct ScheduledFault {
    spec: FaultSpec,
    table: Timetable,
    targets: Arc<FaultTargets>,
    holder_pause: Arc<HolderPause>,
    log: Arc<FaultLog>,
    stop_rx: watch::Receiver<bool>,
}

impl ScheduledFault {
    async fn run(mut self) {
        let start = self.log.start();
        loop {
            let (at, pick) = self.table.next_event();
            if !sleep_until(start + at, &mut self.stop_rx).await {
                return;
            }
            let d = self.spec.duration.unwrap_or_default();
            match self.spec.kind {
                FaultKind::ServerPause => self.server_pause(pick, d).await,
                FaultKind::HolderPause => {
                    // Taken (and logged) by the first holder inside its critical section.
                    if !self.holder_pause.request(d) {
                        self.log
                            .warn("holder-pause: the previous one is still on offer or under way");
                    }
                }
                FaultKind::KillConnections => self.kill_connections(pick).await,
                FaultKind::Restart => self.restart(pick).await,
                // Never on the schedule: the network faults' way to the target records it.
                FaultKind::Blackhole => return,
            }
        }
    }

    /// Runs `f` on throwaway server number `pick % n` off the runtime (signals and restarts
    /// block); returns its `host:port` and what `f` said.
    async fn on_server<T: Send + 'static>(
        &self,
        pick: u64,
        f: impl FnOnce(&mut RedisServer) -> T + Send + 'static,
    ) -> Option<(String, T)> {
        let servers = Arc::clone(&self.targets.servers);
        tokio::task::spawn_blocking(move || {
            let mut s = lock_servers(&servers);
            if s.is_empty() {
                return None;
            }
            let n = s.len() as u64;
            let server = &mut s[(pick % n) as usize];
            let label = format!("127.0.0.1:{}", server.port());
            Some((label, f(server)))
        })
        .await
        .ok()
        .flatten()
    }

    async fn server_pause(&mut self, pick: u64, d: Duration) {
        let began = Instant::now();
        let Some((node, paused)) = self.on_server(pick, |s| s.pause()).await else {
            return;
        };
        if let Err(e) = paused {
            self.log.warn(&format!("server-pause on {node}: {e}"));
            return;
        }
        // Cut short when the run ends, but always resumed.
        let _ = sleep_until(began + d, &mut self.stop_rx).await;
        let resumed = self.on_server(pick, |s| s.resume()).await;
        self.log.record(
            FaultKind::ServerPause,
            began,
            began.elapsed(),
            Some(node.clone()),
        );
        if let Some((_, Err(e))) = resumed {
            self.log.warn(&format!("resuming {node}: {e}"));
        }
    }

    async fn restart(&mut self, pick: u64) {
        let began = Instant::now();
        match self.on_server(pick, |s| s.try_restart()).await {
            Some((node, Ok(()))) => {
                self.log
                    .record(FaultKind::Restart, began, began.elapsed(), Some(node));
            }
            Some((node, Err(e))) => self.log.warn(&format!("restart of {node}: {e}")),
            None => {}
        }
    }

    async fn kill_connections(&mut self, pick: u64) {
        let urls = &self.targets.urls;
        if urls.is_empty() {
            return;
        }
        let url = &urls[(pick % urls.len() as u64) as usize];
        let node = crate::target::host_port(url)
            .map_or_else(|| lockkit::redact_url(url), |(h, p)| format!("{h}:{p}"));
        let began = Instant::now();
        let killed = tokio::time::timeout(KILL_TIMEOUT, async {
            let mut conn = crate::target::info_connection(url).await?;
            // SKIPME (the default) spares this connection.
            let n: u64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .query_async(&mut conn)
                .await?;
            anyhow::Ok(n)
        })
        .await;
        match killed {
            Ok(Ok(_)) => self.log.record(
                FaultKind::KillConnections,
                began,
                Duration::ZERO,
                Some(node),
            ),
            Ok(Err(e)) => self.log.warn(&format!("kill-connections on {node}: {e:#}")),
            Err(_) => self.log.warn(&format!(
                "kill-connections on {node}: no answer in {KILL_TIMEOUT:?}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_pause_is_taken_once_and_offered_again_only_after_it_ends() {
        let p = HolderPause::default();
        assert_eq!(p.claim(), None);
        assert!(p.request(Duration::from_millis(300)));
        assert!(
            !p.request(Duration::from_millis(300)),
            "one on offer already"
        );
        assert_eq!(p.claim(), Some(Duration::from_millis(300)));
        assert_eq!(p.claim(), None, "taken by one holder only");
        assert!(!p.request(Duration::from_millis(300)), "one under way");
        p.finish();
        assert!(p.request(Duration::from_millis(1)));
    }
}
