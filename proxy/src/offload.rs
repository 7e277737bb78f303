//! Plugins off the clients' path: the hooks of a plugin whose work may take long
//! ([`Plugin::offloaded`]: a Lua plugin) run on a thread of the plugin's own, never on a thread
//! serving connections. A connection waits for its own command's hook (its order is kept: one
//! queue per plugin, first in first out, and a connection sends its next hook only after the
//! last one answered or was queued), while the other connections go on; a client whose traffic
//! the plugin does not declare never waits for it.
//!
//! A plugin's queue holds [`QUEUE`] hooks: past that, a connection waits to queue its
//! `on_command`, and the hooks nobody waits for (`on_reply`, `on_tick`, `on_connect`,
//! `on_close`) are dropped rather than let the proxy's memory grow; so is an `on_reply` whose
//! copies would take the plugin's queued hooks past [`QUEUED_REPLY_BYTES`] of replies and
//! commands (a plugin slower than the traffic it declared misses some replies: counted in
//! `lockkit_proxy_plugin_hooks_dropped_total` and said on stderr when the proxy stops).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// Hooks queued per plugin at most.
pub(crate) const QUEUE: usize = 4096;

/// Bytes of replies and commands the queued `on_reply` hooks of one plugin may hold copies of
/// (200 pipelined GETs of a 16 MB value would otherwise queue 3.2 GB); a reply bigger than
/// this alone is still handed over when nothing else is queued.
pub(crate) const QUEUED_REPLY_BYTES: usize = 64 << 20;

use crate::plugin::{Action, ConnInfo, Plugin, PluginCommand};

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on the plugin thread behind `queue` and waits for its result (`None`: the thread
/// is gone).
async fn ask<R: Send + 'static>(
    queue: &mpsc::Sender<Job>,
    f: impl FnOnce() -> R + Send + 'static,
) -> Option<R> {
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    queue.send(job).await.ok()?;
    rx.await.ok()
}

fn plugin_name(plugins: &[Arc<dyn Plugin>], p: usize) -> &str {
    plugins[p].name()
}

/// The plugin threads of one proxy: one for each offloaded plugin.
#[derive(Debug)]
pub(crate) struct Workers {
    queues: Vec<Option<mpsc::Sender<Job>>>,
    dropped: Vec<AtomicU64>,
    /// Bytes the queued `on_reply` hooks of each plugin hold.
    queued_bytes: Vec<Arc<AtomicUsize>>,
}

/// A command copied for another thread.
struct OwnedCommand {
    name: String,
    args: Vec<Vec<u8>>,
    key: Option<Vec<u8>>,
    index: u64,
    arrived: Instant,
}

impl OwnedCommand {
    fn of(cmd: &PluginCommand<'_>) -> OwnedCommand {
        OwnedCommand {
            name: cmd.name.to_string(),
            args: cmd.args.iter().map(|a| a.to_vec()).collect(),
            key: cmd.key.map(<[u8]>::to_vec),
            index: cmd.index,
            arrived: cmd.arrived,
        }
    }

    /// Calls `f` with the command as plugins see it.
    fn with<R>(&self, f: impl FnOnce(&PluginCommand<'_>) -> R) -> R {
        let args: Vec<&[u8]> = self.args.iter().map(Vec::as_slice).collect();
        f(&PluginCommand {
            name: &self.name,
            args: &args,
            key: self.key.as_deref(),
            index: self.index,
            arrived: self.arrived,
        })
    }
}

impl Workers {
    /// A thread for each plugin of `plugins` that asks for one.
    pub(crate) fn new(plugins: &[Arc<dyn Plugin>]) -> Workers {
        let queues = plugins
            .iter()
            .map(|p| {
                if !p.offloaded() {
                    return None;
                }
                let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
                let spawned = std::thread::Builder::new()
                    .name(format!("lockkit-plugin-{}", p.name()))
                    .spawn(move || {
                        // Ends when the proxy (every sender) is gone.
                        while let Some(job) = rx.blocking_recv() {
                            job();
                        }
                    });
                // No thread to be had: the hooks run inline, as before.
                spawned.ok().map(|_| tx)
            })
            .collect();
        let dropped = plugins.iter().map(|_| AtomicU64::new(0)).collect();
        let queued_bytes = plugins.iter().map(|_| Arc::default()).collect();
        Workers {
            queues,
            dropped,
            queued_bytes,
        }
    }

    /// Hooks of plugin `p` dropped because its queue was full.
    pub(crate) fn dropped(&self, p: usize) -> u64 {
        self.dropped.get(p).map_or(0, |d| d.load(Ordering::Relaxed))
    }

    /// Queues `job` for plugin `p` unless its queue is full (then it is counted as dropped);
    /// whether it was queued.
    fn try_queue(&self, p: usize, name: &str, queue: &mpsc::Sender<Job>, job: Job) -> bool {
        match queue.try_send(job) {
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.count_drop(p, name);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Ok(()) => true,
        }
    }

    fn count_drop(&self, p: usize, name: &str) {
        self.dropped[p].fetch_add(1, Ordering::Relaxed);
        crate::metrics::plugin_hook_dropped(name);
    }

    /// Waits until every hook queued so far has run (before the reports are read).
    pub(crate) async fn flush(&self) {
        for queue in self.queues.iter().flatten() {
            ask(queue, || ()).await;
        }
    }

    fn queue(&self, p: usize) -> Option<&mpsc::Sender<Job>> {
        self.queues.get(p).and_then(Option::as_ref)
    }

    /// Plugin `p`'s [`Plugin::on_command`], on its thread if it has one.
    pub(crate) async fn on_command(
        &self,
        plugins: &[Arc<dyn Plugin>],
        p: usize,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
    ) -> Action {
        let plugin = &plugins[p];
        let Some(queue) = self.queue(p) else {
            return plugin.on_command(conn, cmd);
        };
        let (plugin, conn, owned) = (plugin.clone(), *conn, OwnedCommand::of(cmd));
        ask(queue, move || owned.with(|c| plugin.on_command(&conn, c)))
            .await
            .unwrap_or(Action::Pass)
    }

    /// Plugin `p`'s [`Plugin::rewrite_reply`], on its thread if it has one.
    pub(crate) async fn rewrite_reply(
        &self,
        plugins: &[Arc<dyn Plugin>],
        p: usize,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        reply: &[u8],
        latency: Duration,
    ) -> Option<Vec<u8>> {
        let plugin = &plugins[p];
        let Some(queue) = self.queue(p) else {
            return plugin.rewrite_reply(conn, cmd, reply, latency);
        };
        let (plugin, conn, owned, reply) =
            (plugin.clone(), *conn, OwnedCommand::of(cmd), reply.to_vec());
        ask(queue, move || {
            owned.with(|c| plugin.rewrite_reply(&conn, c, &reply, latency))
        })
        .await
        .flatten()
    }

    /// Plugin `p`'s [`Plugin::on_reply`], queued on its thread if it has one (nothing waits
    /// for it).
    pub(crate) fn on_reply(
        &self,
        plugins: &[Arc<dyn Plugin>],
        p: usize,
        conn: &ConnInfo,
        cmd: &PluginCommand<'_>,
        reply: &[u8],
        latency: Duration,
    ) {
        let plugin = &plugins[p];
        let Some(queue) = self.queue(p) else {
            plugin.on_reply(conn, cmd, reply, latency);
            return;
        };
        let name = plugin_name(plugins, p);
        // Counted before anything is copied: the copies stay within the plugin's bytes.
        let bytes = reply.len() + cmd.args.iter().map(|a| a.len()).sum::<usize>();
        let held = self.queued_bytes[p].clone();
        let before = held.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before.saturating_add(bytes) > QUEUED_REPLY_BYTES {
            held.fetch_sub(bytes, Ordering::AcqRel);
            self.count_drop(p, name);
            return;
        }
        let (plugin, conn, owned, reply) =
            (plugin.clone(), *conn, OwnedCommand::of(cmd), reply.to_vec());
        let release = held.clone();
        let job: Job = Box::new(move || {
            owned.with(|c| plugin.on_reply(&conn, c, &reply, latency));
            drop(reply);
            release.fetch_sub(bytes, Ordering::AcqRel);
        });
        if !self.try_queue(p, name, queue, job) {
            // The job (and its copies) is gone with the refusal.
            held.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Runs `hook` with plugin `p`, queued on its thread if it has one (nothing waits for it):
    /// [`Plugin::on_tick`], [`Plugin::on_connect`], [`Plugin::on_close`].
    pub(crate) fn run(
        &self,
        plugins: &[Arc<dyn Plugin>],
        p: usize,
        hook: impl FnOnce(&dyn Plugin) + Send + 'static,
    ) {
        let plugin = plugins[p].clone();
        match self.queue(p) {
            Some(queue) => {
                let job: Job = Box::new(move || hook(plugin.as_ref()));
                self.try_queue(p, plugin_name(plugins, p), queue, job);
            }
            None => hook(plugin.as_ref()),
        }
    }
}
