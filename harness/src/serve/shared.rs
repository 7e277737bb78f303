//! What every connection shares: one [`Harness`] (keyspace, script cache, function library,
//! virtual clock) behind an async mutex, the running script, the scripting settings.
//!
//! A command runs on its connection's worker thread while the connection holds the harness
//! (a script too; one that runs long hands the worker over to a new thread, see `worker`). Other
//! connections wait for the harness; once the script has run past `busy-reply-threshold`
//! they are answered `-BUSY` instead (what Redis does from its script-timeout hook), except
//! for the commands Redis allows then (`SCRIPT KILL`, `FUNCTION KILL`, `FUNCTION STATS`...).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use crate::harness::Harness;
use crate::reply::Reply;
use crate::script::{StopHandle, StopRefused};

const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";

/// How the virtual clock moves between commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMode {
    /// Frozen: only `DEBUG SLEEP` and `LOCKKIT.CLOCK` move it.
    Frozen,
    /// Follows the wall clock (plus whatever `DEBUG SLEEP` and `LOCKKIT.CLOCK` added).
    Wall,
}

/// The script a connection is running.
#[derive(Debug, Clone)]
struct Running {
    /// EVAL-family (else FCALL).
    eval: bool,
    /// The SHA or the function name, for the kill message.
    name: String,
    /// The command, for FUNCTION STATS (empty for a script: it shows functions only).
    argv: Vec<Vec<u8>>,
    started: Instant,
    /// When it goes past the threshold: from then on other connections are answered BUSY.
    busy_at: Instant,
    /// SCRIPT KILL / FUNCTION KILL stopped it.
    killed: bool,
}

#[derive(Debug)]
struct State {
    busy_threshold: Duration,
    running: Option<Running>,
    /// Libraries and functions loaded, for FUNCTION STATS while a script runs.
    libraries: (usize, usize),
    /// When the harness clock was last moved to the wall clock (wall mode).
    synced: Instant,
    /// The function libraries as the last DEBUG RELOAD saved them (FUNCTION DUMP's payload).
    saved_functions: Option<Vec<u8>>,
    /// `notify-keyspace-events` as set (its flags), and whether the harness has them yet.
    notify: (u32, bool),
    /// `maxmemory-policy` as CONFIG GET shows it.
    policy: &'static str,
}

/// Distinct error codes INFO errorstats keeps at most; errors with other codes are still
/// counted in the total (Redis 7.0.15 keeps every code).
const MAX_ERROR_CODES: usize = 10_000;

/// Error replies sent to clients, by code (INFO errorstats, `total_error_replies`).
#[derive(Debug, Default)]
struct ErrorStats {
    by_code: BTreeMap<Vec<u8>, u64>,
    total: u64,
}

impl ErrorStats {
    /// Counts every error in `reply`, nested ones too (a script's `{redis.error_reply(...)}`,
    /// EXEC's replies), as Redis counts each error it writes to a client.
    fn count(&mut self, reply: &Reply) {
        match reply {
            Reply::Error(text) => {
                self.total += 1;
                let code = error_code(text.as_bytes());
                if let Some(n) = self.by_code.get_mut(code) {
                    *n += 1;
                } else if self.by_code.len() < MAX_ERROR_CODES {
                    self.by_code.insert(code.to_vec(), 1);
                }
            }
            Reply::Array(items) => items.iter().for_each(|r| self.count(r)),
            Reply::Map(pairs) => pairs.iter().for_each(|(k, v)| {
                self.count(k);
                self.count(v);
            }),
            _ => {}
        }
    }
}

/// The code Redis files an error under: what precedes the first space within the first 32
/// bytes of the reply as sent (`-` and the text), else `ERR`.
fn error_code(text: &[u8]) -> &[u8] {
    // The space is looked for among the 31 bytes after the `-` Redis counts in its 32.
    match text.iter().take(31).position(|&b| b == b' ') {
        Some(end) => &text[..end],
        None => b"ERR",
    }
}

impl Running {
    fn busy(&self) -> bool {
        Instant::now() >= self.busy_at
    }
}

/// The state every connection shares.
#[derive(Debug)]
pub(super) struct ServeShared {
    harness: Arc<tokio::sync::Mutex<Harness>>,
    stop: StopHandle,
    state: Mutex<State>,
    clients: AtomicU64,
    connected: AtomicU64,
    started: Instant,
    clock: ClockMode,
    errors: Mutex<ErrorStats>,
    /// INFO commandstats: the harness's figures, which the connections count into too.
    command_stats: crate::command_stats::CommandStats,
    watches: Arc<Mutex<super::watched::Watches>>,
    hub: Arc<Mutex<super::pubsub::Subscribers>>,
    blocked: Arc<Mutex<super::blocking::Blocked>>,
    /// The encoding thresholds CONFIG SET stored (read back only).
    tuning: Mutex<super::tuning::Tuning>,
    /// Whether `maxmemory` is set (above 0), so that a transaction checks the keyspace.
    maxmemory_on: AtomicBool,
}

/// Whether `argv` runs a script (EVAL, EVALSHA, FCALL and their `_RO` forms).
fn script_kind(argv: &[Vec<u8>]) -> Option<(bool, String)> {
    let name = argv.first()?;
    let target = argv.get(1)?;
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("evalsha") || is("evalsha_ro") {
        Some((true, String::from_utf8_lossy(target).to_ascii_lowercase()))
    } else if is("eval") || is("eval_ro") {
        Some((true, crate::sha1hex(target)))
    } else if is("fcall") || is("fcall_ro") {
        Some((false, String::from_utf8_lossy(target).into_owned()))
    } else {
        None
    }
}

impl ServeShared {
    /// The shared state over `harness`.
    pub(super) fn new(
        mut harness: Harness,
        busy_threshold: Duration,
        clock: ClockMode,
    ) -> Arc<ServeShared> {
        let stop = harness.stop_handle();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            harness.on_slow_script(super::worker::SLOW_SCRIPT, move || {
                super::worker::hand_over(&rt)
            });
        }
        let command_stats = harness.command_stats();
        let hub = Arc::new(Mutex::new(super::pubsub::Subscribers::default()));
        let delivery = hub.clone();
        harness.set_publisher(move |channel, message| {
            let hub = delivery.lock().unwrap_or_else(|p| p.into_inner());
            hub.publish(channel, message)
        });
        let delivery = hub.clone();
        harness.set_shard_publisher(move |channel, message| {
            let hub = delivery.lock().unwrap_or_else(|p| p.into_inner());
            hub.spublish(channel, message)
        });
        Arc::new(ServeShared {
            harness: Arc::new(tokio::sync::Mutex::new(harness)),
            stop,
            state: Mutex::new(State {
                busy_threshold,
                running: None,
                libraries: (0, 0),
                synced: Instant::now(),
                saved_functions: None,
                notify: (0, true),
                policy: "noeviction",
            }),
            clients: AtomicU64::new(0),
            connected: AtomicU64::new(0),
            started: Instant::now(),
            clock,
            errors: Mutex::new(ErrorStats::default()),
            command_stats,
            watches: Arc::new(Mutex::new(super::watched::Watches::default())),
            hub,
            blocked: Arc::default(),
            tuning: Mutex::default(),
            maxmemory_on: AtomicBool::new(false),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic never happens while the lock is held; recover the data if one did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn watches(&self) -> MutexGuard<'_, super::watched::Watches> {
        self.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// WATCH `keys` for connection `client`.
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn watch(
        self: &Arc<Self>,
        client: u64,
        keys: Vec<Vec<u8>>,
    ) -> Result<(), Reply> {
        let me = self.clone();
        self.with_harness(move |h| {
            me.sync_clock(h);
            me.watches().watch(h, client, &keys);
        })
        .await
    }

    /// Forgets what connection `client` watches (UNWATCH, DISCARD, RESET, EXECABORT, a
    /// closed connection).
    pub(super) fn unwatch(&self, client: u64) {
        self.watches().unwatch(client);
    }

    /// Whether connection `client` watches any key.
    pub(super) fn watching(&self, client: u64) -> bool {
        self.watches().watching(client)
    }

    /// The blocked clients.
    pub(super) fn blocked(&self) -> MutexGuard<'_, super::blocking::Blocked> {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The encoding thresholds CONFIG SET stored.
    pub(super) fn tuning(&self) -> MutexGuard<'_, super::tuning::Tuning> {
        self.tuning.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `CONFIG SET notify-keyspace-events`; false for a character Redis does not know.
    pub(super) fn set_notify(&self, flags: &[u8]) -> bool {
        match crate::notify::parse_flags(flags) {
            Some(f) => {
                self.state().notify = (f, false);
                true
            }
            None => false,
        }
    }

    /// `notify-keyspace-events` as CONFIG GET shows it.
    pub(super) fn notify_events(&self) -> String {
        crate::notify::format_flags(self.state().notify.0)
    }

    /// Whether `expired` events are enabled (and go to keyspace or keyevent channels).
    pub(super) fn expired_events_on(&self) -> bool {
        crate::notify::expired_events_on(self.state().notify.0)
    }

    /// Before and after commands: the harness gets the notification flags set since, and
    /// the keys past their expiry on the clock go with their `expired` events.
    fn keyspace_events(&self, h: &mut Harness) {
        let mut st = self.state();
        if !st.notify.1 {
            st.notify.1 = true;
            let _ = h.set_notify_flags(crate::notify::format_flags(st.notify.0).as_bytes());
        }
        drop(st);
        h.expire_due();
    }

    /// Whether the clock follows the wall clock.
    pub(super) fn wall_clock(&self) -> bool {
        self.clock == ClockMode::Wall
    }

    /// Moves the clock on to the wall clock (wall mode), timing out who is due.
    pub(super) async fn tick(self: &Arc<Self>) {
        let me = self.clone();
        let _ = self.with_harness(move |h| me.sync_clock(h)).await;
    }

    /// The subscriptions of every connection.
    pub(super) fn hub(&self) -> MutexGuard<'_, super::pubsub::Subscribers> {
        self.hub.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn errors(&self) -> MutexGuard<'_, ErrorStats> {
        self.errors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts the errors of a reply sent to a client (INFO errorstats).
    pub(super) fn count_errors(&self, reply: &Reply) {
        if matches!(reply, Reply::Error(_) | Reply::Array(_) | Reply::Map(_)) {
            self.errors().count(reply);
        }
    }

    /// CONFIG RESETSTAT: the error and command counts start again from nothing.
    pub(super) fn reset_stats(&self) {
        *self.errors() = ErrorStats::default();
        self.command_stats.reset();
    }

    /// Counts a command a connection answered itself (the harness counts its own):
    /// `rejected` when it was refused before it ran.
    pub(super) fn count_command(
        &self,
        name: &'static str,
        took: Duration,
        reply: &Reply,
        rejected: bool,
    ) {
        if rejected {
            self.command_stats.rejected(name);
        } else {
            let failed = matches!(reply, Reply::Error(_));
            self.command_stats.called(name, took, failed);
        }
    }

    /// A new client id (CLIENT ID), from 1 up.
    pub(super) fn next_client_id(&self) -> u64 {
        self.clients.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A client connected (`true`) or left.
    pub(super) fn connected(&self, up: bool) {
        if up {
            self.connected.fetch_add(1, Ordering::Relaxed);
        } else {
            self.connected.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// How many clients are connected now.
    pub(super) fn connections(&self) -> u64 {
        self.connected.load(Ordering::Relaxed)
    }

    /// `busy-reply-threshold` (alias `lua-time-limit`).
    pub(super) fn busy_threshold(&self) -> Duration {
        self.state().busy_threshold
    }

    /// Sets `busy-reply-threshold`.
    pub(super) fn set_busy_threshold(&self, d: Duration) {
        self.state().busy_threshold = d;
    }

    /// The BUSY error to answer now, if a script runs past the threshold.
    pub(super) fn busy_reply(&self) -> Option<Reply> {
        let st = self.state();
        match &st.running {
            Some(r) if r.busy() => Some(Reply::err(if r.eval { BUSY_EVAL } else { BUSY_FUNCTION })),
            _ => None,
        }
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL, with Redis's checks in Redis's order.
    pub(super) fn kill(&self, eval: bool) -> Reply {
        let mut st = self.state();
        let Some(r) = st.running.as_mut().filter(|r| r.busy()) else {
            return Reply::err(NOTBUSY);
        };
        if self.stop.wrote() {
            return Reply::err(UNKILLABLE);
        }
        if r.eval != eval {
            return Reply::err(if r.eval { BUSY_EVAL } else { BUSY_FUNCTION });
        }
        match self.stop.stop() {
            Err(StopRefused::Wrote) => Reply::err(UNKILLABLE),
            Err(StopRefused::NotRunning) => Reply::err(NOTBUSY),
            Ok(()) => {
                r.killed = true;
                Reply::ok()
            }
        }
    }

    /// FUNCTION STATS while a script runs (the harness is held by it).
    pub(super) fn function_stats_busy(&self) -> Reply {
        let st = self.state();
        let running = match &st.running {
            Some(r) if !r.eval => Reply::Map(vec![
                (Reply::bulk("name"), Reply::bulk(&r.name)),
                (
                    Reply::bulk("command"),
                    Reply::Array(r.argv.iter().map(Reply::bulk).collect()),
                ),
                (
                    Reply::bulk("duration_ms"),
                    Reply::Int(r.started.elapsed().as_millis() as i64),
                ),
            ]),
            _ => Reply::Nil,
        };
        let (libs, funcs) = st.libraries;
        crate::function_admin::stats_reply(running, libs, funcs)
    }

    /// Runs `batch` (one command, or a transaction's) on the harness, atomically.
    ///
    /// # Errors
    /// The BUSY reply when a script of another connection runs past the threshold.
    pub(super) async fn execute(
        self: &Arc<Self>,
        batch: Vec<Vec<Vec<u8>>>,
        resp3: bool,
    ) -> Result<Vec<Reply>, Reply> {
        let run = self.execute_watched(batch, resp3, None).await?;
        Ok(run.unwrap_or_default())
    }

    /// [`execute`](Self::execute) for the EXEC of connection `watcher`, if it watches keys:
    /// `None` (the batch not run) when a key it watches was written or expired since.
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn execute_watched(
        self: &Arc<Self>,
        batch: Vec<Vec<Vec<u8>>>,
        resp3: bool,
        watcher: Option<u64>,
    ) -> Result<Option<Vec<Reply>>, Reply> {
        let run = self.execute_as(batch, resp3, watcher, None).await?;
        Ok(run.map(|(replies, _)| replies))
    }

    /// Runs one command of connection `client` outside MULTI: a blocking command that finds
    /// nothing blocks it (see `blocking`), answered through the [`Wait`](super::blocking::Wait).
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn execute_blocking(
        self: &Arc<Self>,
        argv: Vec<Vec<u8>>,
        resp3: bool,
        client: u64,
    ) -> Result<(Reply, Option<super::blocking::Wait>), Reply> {
        let run = self
            .execute_as(vec![argv], resp3, None, Some(client))
            .await?;
        let (mut replies, wait) = run.unwrap_or_default();
        Ok((replies.pop().unwrap_or(Reply::Nil), wait))
    }

    async fn execute_as(
        self: &Arc<Self>,
        batch: Vec<Vec<Vec<u8>>>,
        resp3: bool,
        watcher: Option<u64>,
        blocker: Option<u64>,
    ) -> Result<Option<(Vec<Reply>, Option<super::blocking::Wait>)>, Reply> {
        // Held by nobody, no script runs: no BUSY to answer, nothing to wait for.
        let guard = match self.harness.clone().try_lock_owned() {
            Ok(g) => g,
            Err(_) => self.wait_for_harness().await?,
        };
        let me = self.clone();
        let run = move || me.run_batch(guard, &batch, resp3, watcher, blocker);
        // The command runs on the connection's own worker thread, as Redis runs it on its one
        // thread: a hop to a blocking thread and back cost more than most commands. A script
        // that runs long hands this worker over to a new thread (`worker::hand_over`), which
        // serves the other connections meanwhile (BUSY, SCRIPT KILL). A current-thread
        // runtime cannot hand over: there the command runs on a blocking thread.
        let failed = |e: String| Reply::err(format!("ERR harness: the command failed: {e}"));
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread
        {
            return tokio::task::spawn_blocking(run)
                .await
                .map_err(|e| failed(e.to_string()));
        }
        let _on_worker = super::worker::OnWorker::enter();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
            .map_err(|p| failed(panic_text(&*p)))
    }

    /// Waits for the harness while another connection holds it: `Err(BUSY)` once a script
    /// runs past the threshold. Each waiter looks at the running script when it would go
    /// past the threshold, or a threshold from now when none runs: a script that starts
    /// meanwhile is seen no later than its own threshold, and no script start wakes anyone.
    async fn wait_for_harness(&self) -> Result<OwnedMutexGuard<Harness>, Reply> {
        if let Some(busy) = self.busy_reply() {
            return Err(busy);
        }
        let lock = self.harness.clone().lock_owned();
        tokio::pin!(lock);
        loop {
            let look = {
                let st = self.state();
                match &st.running {
                    Some(r) => r.busy_at,
                    None => Instant::now() + st.busy_threshold.max(Duration::from_millis(1)),
                }
            };
            tokio::select! {
                g = &mut lock => return Ok(g),
                () = tokio::time::sleep_until(look.into()) => {
                    if let Some(busy) = self.busy_reply() {
                        return Err(busy);
                    }
                }
            }
        }
    }

    /// Runs `batch` holding the harness (see [`execute_as`](Self::execute_as)).
    fn run_batch(
        self: &Arc<Self>,
        mut h: OwnedMutexGuard<Harness>,
        batch: &[Vec<Vec<u8>>],
        resp3: bool,
        watcher: Option<u64>,
        blocker: Option<u64>,
    ) -> Option<(Vec<Reply>, Option<super::blocking::Wait>)> {
        self.sync_clock(&mut h);
        self.keyspace_events(&mut h);
        if let Some(id) = watcher {
            if !self.watches().exec_allowed(&mut h, id) {
                return None;
            }
        }
        let replies: Vec<Reply> = batch
            .iter()
            .map(|argv| {
                let reply = self.run_one(&mut h, argv, resp3);
                self.watches().touched(&mut h);
                reply
            })
            .collect();
        // Only FUNCTION changes the libraries (FUNCTION STATS reads the counts).
        if batch.iter().any(|a| {
            a.first()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"function"))
        }) {
            let libs = h.libraries();
            self.state().libraries = (libs.len(), libs.iter().map(|l| l.functions.len()).sum());
        }
        let wait = match (blocker, batch.first(), replies.first()) {
            (Some(id), Some(argv), Some(r)) => self.blocked().block(&mut h, id, argv, resp3, r),
            _ => None,
        };
        self.keyspace_events(&mut h);
        self.blocked().wake(&mut h);
        self.watches().touched(&mut h);
        Some((replies, wait))
    }

    /// In wall mode, moves the harness clock on by the wall time since it last did.
    fn sync_clock(&self, h: &mut Harness) {
        if self.clock == ClockMode::Wall {
            let mut st = self.state();
            let now = Instant::now();
            h.advance(now.duration_since(st.synced));
            st.synced = now;
        }
    }

    fn run_one(self: &Arc<Self>, h: &mut Harness, argv: &[Vec<u8>], resp3: bool) -> Reply {
        self.sync_clock(h);
        let Some((eval, name)) = script_kind(argv) else {
            return h.call_argv_as(argv, resp3);
        };
        {
            let mut st = self.state();
            let started = Instant::now();
            st.running = Some(Running {
                eval,
                name: name.clone(),
                // Only FUNCTION STATS shows it, for a function.
                argv: if eval { Vec::new() } else { argv.to_vec() },
                started,
                busy_at: started + st.busy_threshold,
                killed: false,
            });
        }
        // Whatever way the call ends, the script no longer runs: no connection may be left
        // answered BUSY by a script that is gone.
        let running = ScriptRunGuard { shared: self };
        let reply = h.call_argv_as(argv, resp3);
        let killed = running.end().is_some_and(|r| r.killed);
        if killed && h.stopped() {
            // Redis adds `, on @user_script:LINE.`: the line where the hook stopped it,
            // which the harness does not know.
            return Reply::err(format!(
                "ERR Script killed by user with SCRIPT KILL... script: {name}."
            ));
        }
        reply
    }
}

/// The running script's record, cleared when dropped (see `run_one`).
struct ScriptRunGuard<'a> {
    shared: &'a ServeShared,
}

impl ScriptRunGuard<'_> {
    /// The record of the script that ended.
    fn end(self) -> Option<Running> {
        self.shared.state().running.take()
    }
}

impl Drop for ScriptRunGuard<'_> {
    fn drop(&mut self) {
        self.shared.state().running = None;
    }
}

impl ServeShared {
    /// Runs `f` on the harness when no script of another connection is busy.
    ///
    /// # Errors
    /// The BUSY reply.
    async fn with_harness<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Harness) -> R + Send + 'static,
    ) -> Result<R, Reply> {
        if let Some(busy) = self.busy_reply() {
            return Err(busy);
        }
        let guard = self.harness.clone().lock_owned().await;
        let watches = self.watches.clone();
        let blocked = self.blocked.clone();
        let flags = {
            let mut st = self.state();
            (!std::mem::replace(&mut st.notify.1, true)).then_some(st.notify.0)
        };
        tokio::task::spawn_blocking(move || {
            let mut h = guard;
            if let Some(f) = flags {
                let _ = h.set_notify_flags(crate::notify::format_flags(f).as_bytes());
            }
            let r = f(&mut h);
            h.expire_due();
            (blocked.lock().unwrap_or_else(|p| p.into_inner())).wake(&mut h);
            watches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .touched(&mut h);
            r
        })
        .await
        .map_err(|e| Reply::err(format!("ERR harness: the command failed: {e}")))
    }

    /// Moves the virtual clock: `advance` milliseconds forward, or to `set` Unix milliseconds.
    /// Answers the clock afterwards (Unix milliseconds).
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn clock(
        &self,
        advance_ms: Option<u64>,
        set_ms: Option<u64>,
    ) -> Result<i64, Reply> {
        self.with_harness(move |h| {
            if let Some(ms) = advance_ms {
                h.advance(Duration::from_millis(ms));
            }
            if let Some(ms) = set_ms {
                h.set_time(std::time::UNIX_EPOCH + Duration::from_millis(ms));
            }
            h.now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        })
        .await
    }

    /// `DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE]` for the function libraries: the keyspace
    /// would come back as it is (nothing is lost by a save and a load), so only the libraries
    /// move: saved (unless NOSAVE), flushed (unless NOFLUSH), loaded back (MERGE: replacing).
    pub(super) async fn debug_reload(self: &Arc<Self>, argv: &[Vec<u8>]) -> Reply {
        let (mut merge, mut noflush, mut nosave) = (false, false, false);
        for a in &argv[2..] {
            match String::from_utf8_lossy(a).to_ascii_lowercase().as_str() {
                "merge" => merge = true,
                "noflush" => noflush = true,
                "nosave" => nosave = true,
                _ => {
                    return Reply::err(
                        "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.",
                    )
                }
            }
        }
        if nosave && !noflush {
            return Reply::err("ERR harness: DEBUG RELOAD NOSAVE without NOFLUSH is not emulated (the keyspace is never saved)");
        }
        let me = self.clone();
        let r = self
            .with_harness(move |h| {
                if !nosave {
                    if let Reply::Bulk(p) = h.call(&["FUNCTION", "DUMP"]) {
                        me.state().saved_functions = Some(p);
                    }
                }
                let Some(payload) = me.state().saved_functions.clone() else {
                    return Reply::err("ERR Error trying to load the RDB dump, check server logs.");
                };
                if !noflush {
                    h.call(&["FUNCTION", "FLUSH"]);
                }
                let policy: &[u8] = if merge { b"REPLACE" } else { b"APPEND" };
                match h.call(&[b"FUNCTION".as_slice(), b"RESTORE", &payload, policy]) {
                    Reply::Error(_) => {
                        Reply::err("ERR Error trying to load the RDB dump, check server logs.")
                    }
                    _ => Reply::ok(),
                }
            })
            .await;
        r.unwrap_or_else(|busy| busy)
    }

    /// `CONFIG SET maxmemory`: see [`Harness::set_config_maxmemory`].
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn set_maxmemory(&self, bytes: usize) -> Result<(), Reply> {
        self.with_harness(move |h| h.set_config_maxmemory(bytes))
            .await?;
        self.maxmemory_on.store(bytes > 0, Ordering::Relaxed);
        Ok(())
    }

    /// `maxmemory-policy` as CONFIG GET shows it.
    pub(super) fn maxmemory_policy(&self) -> &'static str {
        self.state().policy
    }

    /// `CONFIG SET maxmemory-policy`: Redis's error for a name that is no policy.
    ///
    /// # Errors
    /// That error, or the BUSY reply.
    pub(super) async fn set_maxmemory_policy(&self, name: Vec<u8>) -> Result<(), Reply> {
        match self
            .with_harness(move |h| h.set_maxmemory_policy(&name))
            .await?
        {
            Ok(shown) => {
                self.state().policy = shown;
                Ok(())
            }
            Err(e) => Err(Reply::err(e)),
        }
    }

    /// Whether `maxmemory` is set and the keyspace is past it (Redis's out-of-memory state).
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn over_maxmemory(&self) -> Result<bool, Reply> {
        if !self.maxmemory_on.load(Ordering::Relaxed) {
            return Ok(false);
        }
        self.with_harness(Harness::over_maxmemory).await
    }

    /// `CONFIG SET min-replicas-to-write`.
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn set_min_replicas(&self, n: i64) -> Result<(), Reply> {
        self.with_harness(move |h| h.set_min_replicas_to_write(n))
            .await
    }

    /// `maxmemory` as `CONFIG GET` and INFO answer it.
    ///
    /// # Errors
    /// The BUSY reply.
    pub(super) async fn maxmemory(&self) -> Result<usize, Reply> {
        self.with_harness(|h| h.config_maxmemory()).await
    }

    /// INFO for the sections the server knows (server, clients, memory, cluster...); an
    /// error naming a section it does not emulate. `cluster`: a port of the cluster face.
    pub(super) async fn info(
        &self,
        sections: Vec<String>,
        port: u16,
        maxmemory: usize,
        cluster: bool,
    ) -> Reply {
        const KNOWN: [&str; 7] = [
            "server",
            "clients",
            "memory",
            "stats",
            "commandstats",
            "errorstats",
            "cluster",
        ];
        let all = sections.is_empty()
            || sections
                .iter()
                .any(|s| matches!(s.as_str(), "default" | "all" | "everything"));
        if !all {
            if let Some(other) = sections.iter().find(|s| !KNOWN.contains(&s.as_str())) {
                return Reply::err(format!(
                    "ERR harness: INFO {other} is not emulated (only server, clients, memory, stats, commandstats, errorstats and cluster)"
                ));
            }
        }
        let want = |s: &str| all || sections.iter().any(|x| x == s);
        let figures = match self.with_harness(|h| h.memory_figures()).await {
            Ok(f) => f,
            Err(busy) => return busy,
        };
        let (scripts, lua, keyspace, _keys) = figures;
        let mut out = String::new();
        if want("server") {
            out.push_str(&format!(
                "# Server\r\nredis_version:{}\r\nredis_mode:{}\r\nos:lockkit-harness\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{port}\r\nuptime_in_seconds:{}\r\n",
                crate::REDIS_VERSION,
                if cluster { "cluster" } else { "standalone" },
                std::process::id(),
                self.started.elapsed().as_secs()
            ));
        }
        if want("clients") {
            out.push_str(&format!(
                "{}# Clients\r\nconnected_clients:{}\r\nblocked_clients:{}\r\n",
                if out.is_empty() { "" } else { "\r\n" },
                self.connected.load(Ordering::Relaxed),
                self.blocked().count(),
            ));
        }
        if want("memory") {
            out.push_str(&format!(
                "{}# Memory\r\nused_memory:{}\r\nused_memory_lua:{lua}\r\nused_memory_vm_eval:{lua}\r\nnumber_of_cached_scripts:{scripts}\r\nmaxmemory:{maxmemory}\r\nmaxmemory_policy:{}\r\n",
                if out.is_empty() { "" } else { "\r\n" },
                keyspace + lua,
                self.maxmemory_policy()
            ));
        }
        let errors = self.errors();
        if want("stats") {
            out.push_str(&format!(
                "{}# Stats\r\ntotal_error_replies:{}\r\n",
                if out.is_empty() { "" } else { "\r\n" },
                errors.total
            ));
        }
        // Not a default section: `all`, `everything` or its name bring it, as in Redis.
        if (sections.iter()).any(|s| matches!(s.as_str(), "all" | "everything" | "commandstats")) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            out.push_str("# Commandstats\r\n");
            out.push_str(&self.command_stats.lines());
        }
        if want("errorstats") {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            out.push_str("# Errorstats\r\n");
            for (code, n) in &errors.by_code {
                out.push_str(&format!(
                    "errorstat_{}:count={n}\r\n",
                    String::from_utf8_lossy(code)
                ));
            }
        }
        if want("cluster") {
            out.push_str(&format!(
                "{}# Cluster\r\ncluster_enabled:{}\r\n",
                if out.is_empty() { "" } else { "\r\n" },
                u8::from(cluster)
            ));
        }
        Reply::Bulk(out.into_bytes())
    }
}

/// What a panic carried, for the error reply.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}
