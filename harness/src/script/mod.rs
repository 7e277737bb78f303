//! The Lua side: Redis 7.0's scripting environment on mlua's vendored Lua 5.1, the script
//! cache, and running a script under the error handler, the time limit and the memory cap.

mod bit;
mod budget;
mod cjson;
mod cmsgpack;
pub(crate) mod convert;
mod fastcall;
mod functions;
mod lib_misc;
mod libargs;
mod patterns;
mod rand48;
mod shebang;
mod structlib;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::{
    Function, HookTriggers, LightUserData, Lua, LuaOptions, MultiValue, StdLib, Table, Value,
    VmState,
};

use crate::commands::{self, Run};
use crate::reply::Reply;
use crate::server::{Caller, Server};

pub use functions::{FunctionInfo, FunctionLibrary};
pub(crate) use shebang::ScriptFlags;

const PRELUDE: &str = include_str!("prelude.lua");

/// The Redis version the environment claims (`redis.REDIS_VERSION`).
pub const REDIS_VERSION: &str = "7.0.15";
const REDIS_VERSION_NUM: i64 = 0x07_00_0f;

/// Per-run state `redis.call` reads: the protocol and the write restrictions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunCtx {
    /// `redis.setresp`: 2 or 3.
    pub resp: u8,
    /// The script or function declared `no-writes`.
    pub no_writes: bool,
    /// Called through EVAL_RO / EVALSHA_RO / FCALL_RO.
    pub ro_call: bool,
    /// A write command succeeded: Redis no longer refuses writes past `maxmemory`.
    pub wrote: bool,
    /// Declared `allow-oom`: deny-oom commands run past a `CONFIG SET maxmemory` limit.
    pub allow_oom: bool,
}

impl Default for RunCtx {
    fn default() -> Self {
        RunCtx {
            resp: 2,
            no_writes: false,
            ro_call: false,
            wrote: false,
            allow_oom: false,
        }
    }
}

/// Whether a script has changed the collector (`collectgarbage('stop')`, `setpause`...) since
/// the last run started.
#[derive(Default)]
struct CollectorChanged(std::cell::Cell<bool>);

/// Lua 5.1's (and Redis's) `LUAI_GCPAUSE` and `LUAI_GCMUL`.
const GC_PAUSE: i32 = 200;
const GC_STEP_MULTIPLIER: i32 = 200;

#[derive(Debug, Default)]
struct Timer {
    deadline: Option<Instant>,
    /// When the running script counts as slow ([`Engine::on_slow_script`]), until it did.
    slow_at: Option<Instant>,
    /// After how long a script counts as slow, and what is called then.
    slow: Option<(Duration, SlowHook)>,
    fired: bool,
    /// How many times a limit was reached: a Lua state whose hook was last set before the
    /// latest time switches its every-instruction hook back.
    fires: u64,
    /// The running script wrote (SCRIPT KILL then answers UNKILLABLE, as Redis does).
    wrote: bool,
}

/// What a script that runs long calls once (see [`Engine::on_slow_script`]).
#[derive(Clone)]
struct SlowHook(Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for SlowHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlowHook")
    }
}

/// Stops the script running in a harness from another thread, as `SCRIPT KILL` does.
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<Mutex<Timer>>);

/// Why [`StopHandle::stop`] did not stop a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRefused {
    /// No script is running.
    NotRunning,
    /// The script already wrote to the keyspace.
    Wrote,
}

impl StopHandle {
    /// Whether the running script wrote to the keyspace.
    pub fn wrote(&self) -> bool {
        self.0.lock().is_ok_and(|t| t.deadline.is_some() && t.wrote)
    }

    /// Moves the running script's deadline to now: it stops at its next hook.
    ///
    /// # Errors
    /// No script runs, or it already wrote (Redis refuses to kill it then).
    pub fn stop(&self) -> Result<(), StopRefused> {
        let mut t = self.0.lock().map_err(|_| StopRefused::NotRunning)?;
        match t.deadline {
            None => Err(StopRefused::NotRunning),
            Some(_) if t.wrote => Err(StopRefused::Wrote),
            Some(_) => {
                t.deadline = Some(Instant::now());
                Ok(())
            }
        }
    }
}

/// A compiled EVAL script: its flags and where the function is in `Engine::compiled`, a Lua
/// table, because every `Function` held in Rust takes one of mlua's ~8,000 reference slots
/// (past them mlua panics). The slot is a number: looking the SHA-1 up there would make a Lua
/// string of it on every run (under the memory cap, a protected call: 2,900 instructions).
#[derive(Debug, Clone, Copy)]
struct Compiled {
    flags: ScriptFlags,
    slot: i64,
}

/// Limits on one script run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Wall-clock time after which a running script is stopped.
    pub time_limit: Duration,
    /// Bytes the Lua heap may use.
    pub memory_limit: usize,
}

/// The Lua state with Redis's environment, the script cache and the function libraries.
///
/// Function libraries live in a Lua state of their own (a second `Engine`, made at the first
/// FUNCTION LOAD), as Redis keeps them apart from EVAL's: each has its own heap under its own
/// memory cap, so libraries keeping memory never make an unrelated script fail. The server
/// (keyspace, clock, log) is handed to that state while function code runs.
#[derive(Debug)]
pub(crate) struct Engine {
    lua: Lua,
    globals: Table,
    run: Function,
    run_fn: Function,
    load_env: Function,
    scripts: HashMap<String, Compiled, fnv::FnvBuildHasher>,
    /// [`Compiled::slot`] → compiled function.
    compiled: Table,
    /// The slot the next compiled script takes (never reused, SCRIPT FLUSH included).
    next_slot: i64,
    /// Lower-case function name → the callback a library registered.
    function_bodies: Table,
    functions: functions::Registry,
    limits: Limits,
    timer: Arc<Mutex<Timer>>,
    /// `math.random`'s generator, one for both states as in Redis (a C global).
    rand: Arc<Mutex<rand48::Rand48>>,
    /// The timer's `fires` when this state's hook was last set to its normal pace.
    hook_fires: std::cell::Cell<u64>,
    /// The functions' state (`None` until a library is loaded); always `None` in that state.
    functions_state: Option<Box<Engine>>,
    /// This is the functions' state of another engine.
    is_functions_state: bool,
    /// The last run was stopped by the harness (time limit, memory cap), not by the script.
    stopped: std::cell::Cell<bool>,
    /// The client speaks RESP3: a script's maps and doubles reach it as such.
    pub(crate) client_resp3: std::cell::Cell<bool>,
}

/// Where a run comes from, for error messages and write rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// EVAL / EVALSHA.
    Eval,
    /// EVAL_RO / EVALSHA_RO.
    EvalRo,
}

fn err(msg: impl Into<String>) -> Reply {
    Reply::Error(msg.into())
}

/// SHA-1 of `body` in lower-case hex, as `SCRIPT LOAD` answers.
pub fn sha1hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

impl Engine {
    /// A fresh Lua state holding `server`, with Redis's environment.
    pub(crate) fn new(server: Server, limits: Limits) -> mlua::Result<Engine> {
        let timer = Arc::new(Mutex::new(Timer::default()));
        let rand = Arc::new(Mutex::new(rand48::Rand48::default()));
        Engine::build(server, limits, timer, rand)
    }

    fn build(
        server: Server,
        limits: Limits,
        timer: Arc<Mutex<Timer>>,
        rand: Arc<Mutex<rand48::Rand48>>,
    ) -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        lua.set_app_data(server);
        lua.set_app_data(RunCtx::default());
        lua.set_app_data(limits);
        lua.set_app_data(CollectorChanged::default());
        let internals = lua.create_table()?;
        internals.set("globals", lua.globals())?;
        internals.set("call", fastcall::function(&lua, true)?)?;
        internals.set("pcall", fastcall::function(&lua, false)?)?;
        internals.set("bit", bit::create(&lua)?)?;
        internals.set(
            "raised",
            lua.create_function(|_, v: Value| {
                Ok(match v {
                    Value::Error(e) => match libargs::raised(&e) {
                        Some(libargs::Raised::Table(m)) => (Some("table"), Some(m)),
                        Some(libargs::Raised::Text(m)) => (Some("text"), Some(m)),
                        Some(libargs::Raised::Stop(m)) => (Some("stop"), Some(m)),
                        None if libargs::is_memory_error(&e) => {
                            (Some("memory"), Some("not enough memory".to_string()))
                        }
                        None => (Some("text"), Some(e.to_string())),
                    },
                    _ => (None, None),
                })
            })?,
        )?;
        internals.set(
            "gc_changed",
            lua.create_function(|lua, ()| {
                if let Some(changed) = lua.app_data_ref::<CollectorChanged>() {
                    changed.0.set(true);
                }
                Ok(())
            })?,
        )?;
        let (enc, dec, cjson_settings) = cjson::create(&lua)?;
        internals.set("cjson_encode", enc)?;
        internals.set("cjson_decode", dec)?;
        internals.set("cjson_settings", cjson_settings)?;
        internals.set("null", LightUserData(std::ptr::null_mut()))?;
        internals.set("version", REDIS_VERSION)?;
        internals.set("version_num", REDIS_VERSION_NUM)?;
        lib_misc::register(&lua, &internals, rand.clone())?;
        patterns::register(&lua, &internals)?;
        let [pack, unpack, size] = structlib::create(&lua)?;
        internals.set("struct_pack", pack)?;
        internals.set("struct_unpack", unpack)?;
        internals.set("struct_size", size)?;
        let [pack, unpack, unpack_one, unpack_limit] = cmsgpack::create(&lua)?;
        internals.set("msgpack_pack", pack)?;
        internals.set("msgpack_unpack", unpack)?;
        internals.set("msgpack_unpack_one", unpack_one)?;
        internals.set("msgpack_unpack_limit", unpack_limit)?;
        let (_env, run, run_fn, globals, load_env): (Table, Function, Function, Table, Function) =
            lua.load(PRELUDE).set_name("=harness").call(internals)?;
        lua.set_app_data(timer.clone());
        install_hook(&lua, &timer, HOOK_EVERY)?;
        // The cap is armed only while Lua code runs (see `capped`): mlua protects every API
        // call while a limit is set, which would slow down preparing each call.
        let compiled = lua.create_table()?;
        let function_bodies = lua.create_table()?;
        Ok(Engine {
            lua,
            globals,
            run,
            run_fn,
            load_env,
            scripts: HashMap::default(),
            compiled,
            next_slot: 1,
            function_bodies,
            functions: functions::Registry::default(),
            limits,
            timer,
            rand,
            hook_fires: std::cell::Cell::new(0),
            functions_state: None,
            is_functions_state: false,
            stopped: std::cell::Cell::new(false),
            client_resp3: std::cell::Cell::new(false),
        })
    }

    /// The server state (keyspace, clock, log).
    pub(crate) fn server(&self) -> mlua::AppDataRef<'_, Server> {
        self.lua
            .app_data_ref::<Server>()
            .expect("the server is stored at construction and handed back after each use")
    }

    /// The server state, mutably.
    pub(crate) fn server_mut(&self) -> mlua::AppDataRefMut<'_, Server> {
        self.lua
            .app_data_mut::<Server>()
            .expect("the server is stored at construction and handed back after each use")
    }

    /// The Lua state (for [`crate::Sandbox`], which runs other code in this environment).
    pub(crate) fn lua(&self) -> &Lua {
        &self.lua
    }

    /// Compiles `body` into the cache (SCRIPT LOAD): its SHA-1, or Redis's error.
    pub(crate) fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1hex(body);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, skip) =
            shebang::parse_script_shebang(body).map_err(|e| err(format!("ERR {e}")))?;
        let func = self
            .compile(&body[skip..], "@user_script")
            .map_err(|e| err(format!("ERR Error compiling script (new function): {e}")))?;
        let slot = self.next_slot;
        self.compiled
            .raw_set(slot, func)
            .map_err(|e| err(format!("ERR harness: {e}")))?;
        self.next_slot += 1;
        self.scripts.insert(sha.clone(), Compiled { flags, slot });
        Ok(sha)
    }

    /// Compiles Lua text into a function of the script environment; the error is Lua's message.
    pub(crate) fn compile(&self, code: &[u8], name: &str) -> Result<Function, String> {
        // Redis 7.0 removed Lua's bytecode loader: a chunk starting with ESC is parsed as text.
        let code: Vec<u8> = if code.first() == Some(&0x1b) {
            [b" ".as_slice(), code].concat()
        } else {
            code.to_vec()
        };
        let env: Table = self.globals.raw_get("_G").map_err(|e| e.to_string())?;
        self.capped(|| {
            self.lua
                .load(code)
                .set_name(name)
                .set_environment(env)
                .into_function()
        })
        .map_err(|e| match e {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
        .map_err(|m| m.trim_end_matches(['\r', '\n']).replace(['\r', '\n'], " "))
    }

    /// Whether `sha` (any case) is cached.
    pub(crate) fn exists(&self, sha: &[u8]) -> bool {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.scripts.contains_key(&sha)
    }

    /// Empties the script cache (SCRIPT FLUSH).
    pub(crate) fn flush(&mut self) {
        self.scripts.clear();
        // Redis starts a new Lua state: lua-cjson's settings go back to their defaults.
        cjson::reset_config(&self.lua);
        if let Ok(t) = self.lua.create_table() {
            self.compiled = t;
        }
    }

    /// Runs cached script `sha` (any case) with `keys` and `argv`.
    pub(crate) fn run(
        &mut self,
        sha: &[u8],
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        entry: Entry,
    ) -> Reply {
        // Most callers pass the lower-case SHA SCRIPT LOAD answered: look that up without
        // allocating, and fold case only when it misses.
        let exact = std::str::from_utf8(sha)
            .ok()
            .and_then(|s| self.scripts.get_key_value(s));
        let folded;
        let (sha, script) = match exact {
            Some((k, v)) => (k.as_str(), v),
            None => {
                folded = String::from_utf8_lossy(sha).to_ascii_lowercase();
                match self.scripts.get(&folded) {
                    Some(v) => (folded.as_str(), v),
                    None => return err("NOSCRIPT No matching script. Please use EVAL."),
                }
            }
        };
        let ro = entry == Entry::EvalRo;
        if script.flags.shebang {
            if let Some(e) = self.refused_before_run(script.flags) {
                return e;
            }
        }
        if ro && script.flags.shebang && !script.flags.no_writes {
            return err("ERR Can not execute a script with write flag using *_ro command.");
        }
        if let Err(e) = self.set_keys_argv(keys, argv) {
            return err(format!("ERR harness: {e}"));
        }
        let ctx = RunCtx {
            resp: 2,
            no_writes: script.flags.no_writes,
            ro_call: ro,
            wrote: false,
            allow_oom: script.flags.allow_oom,
        };
        let slot = script.slot;
        self.invoke(sha, ctx, |e| {
            let func: Function = e.compiled.raw_get(slot)?;
            e.run.call::<(bool, Value)>(func)
        })
    }

    /// Redis refuses a script that declared flags (a shebang, every function) before it runs
    /// when the server is past `maxmemory`, unless it declared `allow-oom` or `no-writes`.
    /// Remembers a run's KEYS for `--strict-keys`.
    pub(crate) fn declare_keys(&self, keys: &[Vec<u8>]) {
        let mut server = self.server_mut();
        if server.strict_keys {
            server.script_keys = keys.to_vec();
        }
    }

    /// Also one that may write while `min-replicas-to-write` replicas are missing.
    pub(crate) fn refused_before_run(&self, flags: ScriptFlags) -> Option<Reply> {
        let mut server = self.server_mut();
        if !flags.allow_oom && !flags.no_writes && server.db.over_config_max() {
            return Some(err(crate::keyspace::OOM));
        }
        if !flags.no_writes && server.min_replicas_to_write > 0 {
            return Some(err(crate::keyspace::NOREPLICAS));
        }
        None
    }

    fn set_keys_argv(&self, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> mlua::Result<()> {
        self.declare_keys(keys);
        fastcall::set_sequences(&self.lua, &self.globals, [("KEYS", keys), ("ARGV", argv)])
    }

    fn sequence(&self, items: &[Vec<u8>]) -> mlua::Result<Table> {
        fastcall::sequence(&self.lua, items)
    }

    /// Runs `call` with the time limit armed and turns its outcome into the client's reply.
    fn invoke(
        &self,
        name: &str,
        ctx: RunCtx,
        call: impl FnOnce(&Engine) -> mlua::Result<(bool, Value)>,
    ) -> Reply {
        if let Some(mut c) = self.lua.app_data_mut::<RunCtx>() {
            *c = ctx;
        }
        self.stopped.set(false);
        self.arm_timer(self.limits.time_limit);
        // A safety net: no script is known to reach a panic in mlua (Rust functions take
        // their arguments through `libargs::packed`, so thousands of them cannot exhaust its
        // reference slots), but mlua unwinds the Lua state cleanly if one does, so it would
        // end this script with an error and nothing else.
        let mut panicked = false;
        let outcome = self.capped(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(self))).unwrap_or_else(
                |p| {
                    panicked = true;
                    let why = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Err(mlua::Error::runtime(format!(
                        "script {name} was stopped: the Lua binding gave up ({why})"
                    )))
                },
            )
        });
        let fired = self.disarm_timer();
        self.stopped.set(fired || panicked);
        {
            let mut server = self.server_mut();
            let slept = std::mem::take(&mut server.slept_in_script_us);
            server.advance_us(slept);
        }
        let resp = self.lua.app_data_ref::<RunCtx>().map_or(2, |c| c.resp);
        let reply = if fired {
            err(format!(
                "ERR harness: script {name} ran past the time limit of {} ms and was stopped \
                 (Redis would keep running it and answer BUSY until SCRIPT KILL)",
                self.limits.time_limit.as_millis()
            ))
        } else {
            match outcome {
                Ok((true, v)) => convert::lua_to_reply(&v, resp, self.limits.memory_limit)
                    .unwrap_or_else(|| self.memory_error(name)),
                Ok((false, v)) => self.error_reply(&v, name),
                Err(e) if libargs::is_memory_error(&e) => self.memory_error(name),
                Err(e) => err(format!("ERR harness: {e}")),
            }
        };
        if let Some(mut c) = self.lua.app_data_mut::<RunCtx>() {
            *c = RunCtx::default();
        }
        if self.client_resp3.get() {
            reply
        } else {
            reply.into_resp2()
        }
    }

    /// Starts the clock on a run of Lua code that may take at most `limit`, with the
    /// collector as Redis leaves it: a script that stopped it or slowed it down must not leave
    /// the next one to fail at the memory cap.
    pub(crate) fn arm_timer(&self, limit: Duration) {
        let changed = self
            .lua
            .app_data_ref::<CollectorChanged>()
            .is_some_and(|c| c.0.replace(false));
        if changed {
            self.lua.gc_restart();
            self.lua.gc_inc(GC_PAUSE, GC_STEP_MULTIPLIER, 0);
        }
        let fires = match self.timer.lock() {
            Ok(mut t) => {
                let now = Instant::now();
                t.deadline = Some(now + limit);
                t.slow_at = t.slow.as_ref().map(|(after, _)| now + *after);
                t.wrote = false;
                t.fired = false;
                t.fires
            }
            Err(_) => self.hook_fires.get(),
        };
        // A stop switched the hook of the state it happened in to every instruction; the
        // timer is shared by both states, so each compares the count with its own.
        if fires != self.hook_fires.get() {
            self.hook_fires.set(fires);
            let _ = install_hook(&self.lua, &self.timer, HOOK_EVERY);
        }
    }

    /// Stops the clock; whether the limit was hit.
    pub(crate) fn disarm_timer(&self) -> bool {
        match self.timer.lock() {
            Ok(mut t) => {
                t.deadline = None;
                t.slow_at = None;
                t.fired
            }
            Err(_) => false,
        }
    }

    /// Runs `f` with the Lua heap capped at the memory limit.
    pub(crate) fn capped<R>(&self, f: impl FnOnce() -> R) -> R {
        let _ = self.lua.set_memory_limit(self.limits.memory_limit);
        let r = f();
        let _ = self.lua.set_memory_limit(0);
        r
    }

    /// Bytes the Lua heap may use while code runs.
    pub(crate) fn memory_limit(&self) -> usize {
        self.limits.memory_limit
    }

    /// (scripts in the cache, bytes of the Lua heap).
    pub(crate) fn cache_figures(&self) -> (usize, usize) {
        (self.scripts.len(), self.lua.used_memory())
    }

    /// Calls `hook` once in each run of Lua code (script, function, library load) that runs
    /// for longer than `after`, from the thread running it, at the time-limit hook.
    pub(crate) fn on_slow_script(&self, after: Duration, hook: Arc<dyn Fn() + Send + Sync>) {
        if let Ok(mut t) = self.timer.lock() {
            t.slow = Some((after, SlowHook(hook)));
        }
    }

    /// A handle that stops the running script from another thread.
    pub(crate) fn stop_handle(&self) -> StopHandle {
        StopHandle(self.timer.clone())
    }

    /// Whether the harness stopped the last script it ran (time limit, memory cap): a signal
    /// no reply text can fake.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Forgets the last stop (a new command starts).
    pub(crate) fn clear_stopped(&self) {
        self.stopped.set(false);
    }

    fn memory_error(&self, name: &str) -> Reply {
        self.stopped.set(true);
        // Collect the script's garbage with the cap lifted, so the next script starts clean.
        let _ = self.lua.gc_collect();
        let _ = self.lua.gc_collect();
        err(format!(
            "ERR harness: script {name} exceeded the Lua memory cap of {} bytes (Redis has no \
             per-script cap)",
            self.limits.memory_limit
        ))
    }

    /// The reply for a script that raised `v` (luaCallFunction's error path).
    fn error_reply(&self, v: &Value, name: &str) -> Reply {
        match v {
            Value::Table(t) => {
                // `run` copied the fields into a plain table: raw reads run no script code.
                let msg = match t.raw_get::<Value>("err") {
                    Ok(Value::String(s)) => s.to_string_lossy(),
                    Ok(Value::Integer(i)) => i.to_string(),
                    Ok(Value::Number(n)) => crate::number::format_g(n, 14),
                    _ => {
                        return err(
                            "ERR harness: the script raised a table without an 'err' string \
                             (Redis 7.0.15 crashes on this)",
                        )
                    }
                };
                let source: Option<String> = t.raw_get("source").ok();
                let line: Option<Value> = t.raw_get("line").ok();
                let line = match line {
                    Some(Value::Integer(i)) => Some(i.to_string()),
                    Some(Value::Number(n)) => Some(crate::number::format_g(n, 14)),
                    Some(Value::String(s)) => Some(s.to_string_lossy()),
                    _ => None,
                };
                let mut full = msg;
                if let (Some(source), Some(line)) = (source, line) {
                    full.push_str(&format!(" script: {name}, on {source}:{line}."));
                }
                Reply::Error(one_line(&full))
            }
            Value::String(s) if s.to_string_lossy() == "not enough memory" => {
                self.memory_error(name)
            }
            Value::Error(e) if libargs::is_memory_error(e) => self.memory_error(name),
            other => {
                let text = match other {
                    Value::String(s) => s.to_string_lossy(),
                    _ => "execution failure".to_string(),
                };
                let text: String = text.chars().take(100).collect();
                Reply::Error(one_line(&format!(
                    "ERR Error running script {name}, {text}"
                )))
            }
        }
    }
}

/// Instructions between two looks at the clock while a script runs.
const HOOK_EVERY: u32 = 1000;

/// Arms the time-limit hook. Once the limit passes it fires on every instruction (as Redis
/// switches to a line hook after SCRIPT KILL), so a `pcall` in a loop cannot swallow it.
fn install_hook(lua: &Lua, timer: &Arc<Mutex<Timer>>, every: u32) -> mlua::Result<()> {
    let t = timer.clone();
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(every),
        move |lua, _| {
            check_deadline(lua, &t)?;
            Ok(VmState::Continue)
        },
    )
}

/// The time-limit check of the hook, for long loops in Rust that a script started (pattern
/// matching): an error that stops the script once the limit has passed.
pub(crate) fn check_time(lua: &Lua) -> mlua::Result<()> {
    let timer = lua.app_data_ref::<Arc<Mutex<Timer>>>().map(|t| t.clone());
    match timer {
        Some(t) => check_deadline(lua, &t),
        None => Ok(()),
    }
}

fn check_deadline(lua: &Lua, t: &Arc<Mutex<Timer>>) -> mlua::Result<()> {
    let mut g = t
        .lock()
        .map_err(|_| mlua::Error::runtime("timer poisoned"))?;
    let now = Instant::now();
    if g.slow_at.is_some_and(|at| now >= at) {
        g.slow_at = None;
        if let Some((_, hook)) = g.slow.clone() {
            drop(g);
            (hook.0)();
            g = t
                .lock()
                .map_err(|_| mlua::Error::runtime("timer poisoned"))?;
        }
    }
    match g.deadline {
        Some(d) if now >= d => {
            let first = !g.fired;
            g.fired = true;
            if first {
                g.fires += 1;
            }
            drop(g);
            if first {
                install_hook(lua, t, 1)?;
            }
            Err(mlua::Error::external(libargs::Raised::Stop(
                "harness: script time limit reached".into(),
            )))
        }
        _ => Ok(()),
    }
}

fn one_line(s: &str) -> String {
    s.trim_matches(['\r', '\n']).replace(['\r', '\n'], " ")
}

/// `redis.call` (`raise`) and `redis.pcall`: runs one command from inside a script.
fn redis_call(lua: &Lua, args: &libargs::Args, raise: bool) -> mlua::Result<MultiValue> {
    // The cap guards Lua code; the reply of a command is bounded by the keyspace. Lifting it
    // here lets mlua build the reply without a protected call per value.
    let limit = lua.set_memory_limit(0).unwrap_or(0);
    let r = redis_call_uncapped(lua, args, raise, limit);
    let _ = lua.set_memory_limit(limit);
    r
}

fn redis_call_uncapped(
    lua: &Lua,
    args: &libargs::Args,
    raise: bool,
    limit: usize,
) -> mlua::Result<MultiValue> {
    let ctx = lua.app_data_ref::<RunCtx>().map(|c| *c).unwrap_or_default();
    let reply = match convert::lua_args(args, budget::buffer_limit(lua)) {
        Ok(argv) => dispatch_from_script(lua, &argv, ctx),
        Err(e) => {
            let msg = match e {
                convert::ArgsError::TooLarge => {
                    return Err(mlua::Error::MemoryError("not enough memory".into()))
                }
                convert::ArgsError::Empty => {
                    "ERR Please specify at least one argument for this redis lib call"
                }
                convert::ArgsError::BadType => {
                    "ERR Lua redis lib command arguments must be strings or integers"
                }
            };
            if raise {
                return Err(mlua::Error::external(libargs::Raised::Table(msg.into())));
            }
            let t = lua.create_table()?;
            t.raw_set("err", msg)?;
            return Ok(MultiValue::from_iter([Value::Table(t)]));
        }
    };
    match finish_call(lua, reply, raise, limit) {
        Called::Memory => Err(mlua::Error::MemoryError("not enough memory".into())),
        Called::Raise(e) => Err(mlua::Error::external(libargs::Raised::Table(e))),
        Called::Reply(r) => Ok(MultiValue::from_iter([convert::reply_to_lua(
            lua, r, ctx.resp,
        )?])),
    }
}

/// How a command run by `redis.call` or `redis.pcall` ends for the script.
pub(crate) enum Called {
    /// The reply would take the Lua heap past its cap: the script is stopped.
    Memory,
    /// `redis.call`'s error: raised as a Redis error table.
    Raise(String),
    /// Handed to the script.
    Reply(Reply),
}

/// The end of a `redis.call` (`raise`) or `redis.pcall` whose command answered `reply`, under
/// a memory cap of `limit` bytes (0: none).
pub(crate) fn finish_call(lua: &Lua, reply: Reply, raise: bool, limit: usize) -> Called {
    // The reply is built with the cap lifted, so it must fit under the cap before it is.
    if limit > 0
        && lua
            .used_memory()
            .saturating_add(convert::reply_size(&reply))
            > limit
    {
        return Called::Memory;
    }
    match (reply, raise) {
        (Reply::Error(e), true) => Called::Raise(e),
        (r, _) => Called::Reply(r),
    }
}

pub(crate) fn dispatch_from_script(lua: &Lua, argv: &[Vec<u8>], ctx: RunCtx) -> Reply {
    let spec = match commands::resolve(argv, Caller::Script) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // One borrow of the server for every check and the command (each borrow of mlua's app
    // data costs a lock and a reference count: four of them were 2% of `lua exec`).
    let Some(mut server) = lua.app_data_mut::<Server>() else {
        return err("ERR harness: command unavailable inside a script");
    };
    if spec.noscript && !server.allow_noscript {
        return err("ERR This Redis command is not allowed from script");
    }
    if spec.write && (ctx.no_writes || ctx.ro_call) {
        return err("ERR Write commands are not allowed from read-only scripts.");
    }
    if let Some(e) = undeclared_key(&server, argv) {
        return e;
    }
    if spec.write && server.min_replicas_to_write > 0 {
        return err(crate::keyspace::NOREPLICAS);
    }
    let Run::Plain(f) = spec.run else {
        return err("ERR harness: command unavailable inside a script");
    };
    let room = if ctx.wrote || ctx.allow_oom {
        server
            .db
            .check_memory_after_write(spec.deny_oom, spec.name, argv)
    } else {
        server.db.check_memory(spec.deny_oom, spec.name, argv)
    };
    if let Err(e) = room {
        return Reply::Error(e);
    }
    let before = crate::notify::before(&server, spec.name, argv);
    let started = std::time::Instant::now();
    let reply = {
        let mut flag = InScript::enter(&mut server);
        commands::run_caught(f, flag.server(), argv)
    };
    let failed = matches!(reply, Reply::Error(_));
    (server.command_stats).called(spec.name, started.elapsed(), failed);
    if let Some(b) = before {
        crate::notify::after(&server, spec.name, argv, &reply, b);
    }
    drop(server);
    // Only the first write marks the run (both marks stay until the next run).
    if spec.write && !ctx.wrote && !matches!(reply, Reply::Error(_)) {
        if let Some(mut c) = lua.app_data_mut::<RunCtx>() {
            c.wrote = true;
        }
        if let Some(t) = lua.app_data_ref::<Arc<Mutex<Timer>>>() {
            if let Ok(mut t) = t.lock() {
                t.wrote = true;
            }
        }
    }
    reply
}

/// Under `--strict-keys`, the error for the first key of `argv` the running script did not
/// declare in KEYS.
fn undeclared_key(server: &Server, argv: &[Vec<u8>]) -> Option<Reply> {
    if !server.strict_keys {
        return None;
    }
    let key = commands::command_keys(argv)
        .into_iter()
        .find(|k| !server.script_keys.contains(k))?;
    Some(err(format!(
        "ERR Script attempted to access key '{}', which is not declared in KEYS (lockkit lua serve --strict-keys; Redis Cluster and Dragonfly refuse such scripts)",
        String::from_utf8_lossy(&key)
    )))
}

/// The "in a script" flag of the server, set while a script's command runs and cleared when
/// this guard goes, however the command ended: a command that failed or panicked must not
/// leave every later command (of every connection) running as if called from a script.
struct InScript<'a>(&'a mut Server);

impl<'a> InScript<'a> {
    fn enter(server: &'a mut Server) -> Self {
        server.in_script = true;
        InScript(server)
    }

    fn server(&mut self) -> &mut Server {
        self.0
    }
}

impl Drop for InScript<'_> {
    fn drop(&mut self) {
        self.0.in_script = false;
    }
}
