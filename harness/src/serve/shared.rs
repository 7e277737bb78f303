//! What every connection shares: one [`Harness`] (keyspace, script cache, function library,
//! virtual clock) behind an async mutex, the running script, the scripting settings.
//!
//! A script runs on a blocking thread while its connection holds the harness. Other
//! connections wait for the harness; once the script has run past `busy-reply-threshold`
//! they are answered `-BUSY` instead (what Redis does from its script-timeout hook), except
//! for the commands Redis allows then (`SCRIPT KILL`, `FUNCTION KILL`, `FUNCTION STATS`...).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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
    seq: u64,
    /// EVAL-family (else FCALL).
    eval: bool,
    /// The SHA or the function name, for the kill message.
    name: String,
    /// The command, for FUNCTION STATS.
    argv: Vec<Vec<u8>>,
    started: Instant,
    /// Past the threshold: other connections are answered BUSY.
    busy: bool,
    /// SCRIPT KILL / FUNCTION KILL stopped it.
    killed: bool,
}

#[derive(Debug)]
struct State {
    busy_threshold: Duration,
    running: Option<Running>,
    seq: u64,
    /// Libraries and functions loaded, for FUNCTION STATS while a script runs.
    libraries: (usize, usize),
    /// When the harness clock was last moved to the wall clock (wall mode).
    synced: Instant,
}

/// The state every connection shares.
#[derive(Debug)]
pub struct Shared {
    harness: Arc<tokio::sync::Mutex<Harness>>,
    stop: StopHandle,
    state: Mutex<State>,
    busy: Notify,
    clients: AtomicU64,
    clock: ClockMode,
}

/// Whether `argv` runs a script (EVAL, EVALSHA, FCALL and their `_RO` forms).
fn script_kind(argv: &[Vec<u8>]) -> Option<(bool, String)> {
    let name = String::from_utf8_lossy(argv.first()?).to_ascii_lowercase();
    let target = argv.get(1)?;
    match name.as_str() {
        "eval" | "eval_ro" => Some((true, crate::sha1hex(target))),
        "evalsha" | "evalsha_ro" => {
            Some((true, String::from_utf8_lossy(target).to_ascii_lowercase()))
        }
        "fcall" | "fcall_ro" => Some((false, String::from_utf8_lossy(target).into_owned())),
        _ => None,
    }
}

impl Shared {
    /// The shared state over `harness`.
    pub fn new(harness: Harness, busy_threshold: Duration, clock: ClockMode) -> Arc<Shared> {
        let stop = harness.stop_handle();
        Arc::new(Shared {
            harness: Arc::new(tokio::sync::Mutex::new(harness)),
            stop,
            state: Mutex::new(State {
                busy_threshold,
                running: None,
                seq: 0,
                libraries: (0, 0),
                synced: Instant::now(),
            }),
            busy: Notify::new(),
            clients: AtomicU64::new(0),
            clock,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic never happens while the lock is held; recover the data if one did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new client id (CLIENT ID), from 1 up.
    pub fn next_client_id(&self) -> u64 {
        self.clients.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `busy-reply-threshold` (alias `lua-time-limit`).
    pub fn busy_threshold(&self) -> Duration {
        self.state().busy_threshold
    }

    /// Sets `busy-reply-threshold`.
    pub fn set_busy_threshold(&self, d: Duration) {
        self.state().busy_threshold = d;
    }

    /// The BUSY error to answer now, if a script runs past the threshold.
    pub fn busy_reply(&self) -> Option<Reply> {
        let st = self.state();
        match &st.running {
            Some(r) if r.busy => Some(Reply::err(if r.eval { BUSY_EVAL } else { BUSY_FUNCTION })),
            _ => None,
        }
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL, with Redis's checks in Redis's order.
    pub fn kill(&self, eval: bool) -> Reply {
        let mut st = self.state();
        let Some(r) = st.running.as_mut().filter(|r| r.busy) else {
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
    pub fn function_stats_busy(&self) -> Reply {
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
    pub async fn execute(self: &Arc<Self>, batch: Vec<Vec<Vec<u8>>>) -> Result<Vec<Reply>, Reply> {
        let notified = self.busy.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(busy) = self.busy_reply() {
            return Err(busy);
        }
        let guard = tokio::select! {
            g = self.harness.clone().lock_owned() => g,
            _ = notified => {
                return Err(self.busy_reply().unwrap_or_else(|| Reply::err(BUSY_EVAL)));
            }
        };
        let me = self.clone();
        let handle = tokio::runtime::Handle::current();
        let joined = tokio::task::spawn_blocking(move || {
            let mut h = guard;
            let replies: Vec<Reply> = batch
                .iter()
                .map(|argv| me.run_one(&mut h, argv, &handle))
                .collect();
            let libs = h.libraries();
            me.state().libraries = (libs.len(), libs.iter().map(|l| l.functions.len()).sum());
            replies
        })
        .await;
        joined.map_err(|e| Reply::err(format!("ERR harness: the command failed: {e}")))
    }

    fn run_one(
        self: &Arc<Self>,
        h: &mut Harness,
        argv: &[Vec<u8>],
        rt: &tokio::runtime::Handle,
    ) -> Reply {
        if self.clock == ClockMode::Wall {
            let mut st = self.state();
            let now = Instant::now();
            h.advance(now.duration_since(st.synced));
            st.synced = now;
        }
        let Some((eval, name)) = script_kind(argv) else {
            return h.call_argv(argv);
        };
        let (seq, threshold) = {
            let mut st = self.state();
            st.seq += 1;
            st.running = Some(Running {
                seq: st.seq,
                eval,
                name: name.clone(),
                argv: argv.to_vec(),
                started: Instant::now(),
                busy: false,
                killed: false,
            });
            (st.seq, st.busy_threshold)
        };
        let me = self.clone();
        let timer = rt.spawn(async move {
            tokio::time::sleep(threshold).await;
            if let Some(r) = me.state().running.as_mut().filter(|r| r.seq == seq) {
                r.busy = true;
            }
            me.busy.notify_waiters();
        });
        let reply = h.call_argv(argv);
        timer.abort();
        let killed = self.state().running.take().is_some_and(|r| r.killed);
        if killed && h.stopped() {
            // Redis adds `, on @user_script:LINE.`: the line where the hook stopped it,
            // which the harness does not know.
            return Reply::err(format!(
                "ERR Script killed by user with SCRIPT KILL... script: {name}."
            ));
        }
        reply
    }

    /// Moves the virtual clock: `advance` milliseconds forward, or to `set` Unix milliseconds.
    /// Answers the clock afterwards (Unix milliseconds).
    pub async fn clock(&self, advance_ms: Option<u64>, set_ms: Option<u64>) -> Result<i64, Reply> {
        if let Some(busy) = self.busy_reply() {
            return Err(busy);
        }
        let mut h = self.harness.lock().await;
        if let Some(ms) = advance_ms {
            h.advance(Duration::from_millis(ms));
        }
        if let Some(ms) = set_ms {
            h.set_time(std::time::UNIX_EPOCH + Duration::from_millis(ms));
        }
        let now = h.now();
        Ok(now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64))
    }
}
