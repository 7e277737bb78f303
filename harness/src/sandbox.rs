//! The harness's sandbox for Lua code that is not a Redis script: a proxy plugin, say.
//!
//! The very environment scripts run in (Redis 7.0's globals, no `io`, `os`, `require`,
//! `loadfile` or `debug`, read-only globals, bytecode refused), under the same time limit (a
//! hook that, once the limit passes, fires on every instruction so `pcall` cannot swallow it)
//! and the same memory cap. `redis.call` inside it runs against the harness's own in-memory
//! keyspace, private to this sandbox, never a real server.
//!
//! ```
//! use std::time::Duration;
//! use lockkit_harness::Sandbox;
//!
//! let sb = Sandbox::new(Duration::from_millis(50), 8 << 20).unwrap();
//! let hooks = sb.load(b"local n = 0; return { bump = function(k) n = n + k; return n end }", "=demo", ()).unwrap();
//! let bump: mlua::Function = match hooks { mlua::Value::Table(t) => t.get("bump").unwrap(), _ => unreachable!() };
//! assert_eq!(sb.call(&bump, 2).unwrap(), mlua::Value::Integer(2));
//! let e = sb.load(b"while true do end", "=loop", ()).unwrap_err();
//! assert!(e.stopped, "{e}");
//! ```

use std::time::{Duration, SystemTime};

use mlua::{Function, IntoLuaMulti, Lua, Value};

use crate::reply::Reply;
use crate::script::{convert, Engine, Limits};
use crate::server::Server;
use crate::HarnessError;

/// Lua code that failed or was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxError {
    /// What happened, one line.
    pub message: String,
    /// Stopped by the sandbox (time limit, memory cap), not by the code's own error.
    pub stopped: bool,
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SandboxError {}

/// Redis's scripting environment for other code, with a time limit and a memory cap.
#[derive(Debug)]
pub struct Sandbox {
    engine: Engine,
    limits: Limits,
}

impl Sandbox {
    /// A fresh sandbox: each call may run `time_limit`, the Lua heap may use `memory_limit`
    /// bytes (at least 1 MiB), and so may the private keyspace `redis.call` writes to (as
    /// Redis's `maxmemory` with `noeviction`: a write command past it answers
    /// `OOM command not allowed when used memory > 'maxmemory'.`; one command never carries it
    /// past twice that).
    ///
    /// # Errors
    /// A zero time limit, a cap under 1 MiB, or a Lua state that cannot be created.
    pub fn new(time_limit: Duration, memory_limit: usize) -> Result<Sandbox, HarnessError> {
        if time_limit.is_zero() {
            return Err(HarnessError::InvalidOptions {
                field: "time_limit",
                reason: "must be positive",
            });
        }
        if memory_limit < (1 << 20) {
            return Err(HarnessError::InvalidOptions {
                field: "memory_limit",
                reason: "must be at least 1 MiB",
            });
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let limits = Limits {
            time_limit,
            memory_limit,
        };
        // The private keyspace is bounded as the heap is: a write past `memory_limit` bytes of
        // keys answers Redis's OOM error (`maxmemory` with `noeviction`), so a plugin storing
        // a value per command cannot grow the process without end.
        let mut server = Server::new(now);
        server.db.set_max_memory(memory_limit);
        Ok(Sandbox {
            engine: Engine::new(server, limits)?,
            limits,
        })
    }

    /// Changes the time limit of later calls (a plugin's top level may get longer than its
    /// hooks); zero is ignored.
    pub fn set_time_limit(&mut self, time_limit: Duration) {
        if !time_limit.is_zero() {
            self.limits.time_limit = time_limit;
        }
    }

    /// The Lua state, to build arguments and read results.
    pub fn lua(&self) -> &Lua {
        self.engine.lua()
    }

    /// Compiles `code` in the environment and runs it with `args` (its `...`) under the
    /// limits; its first return value.
    ///
    /// # Errors
    /// A syntax error, a runtime error, or a stop at a limit.
    pub fn load(
        &self,
        code: &[u8],
        name: &str,
        args: impl IntoLuaMulti,
    ) -> Result<Value, SandboxError> {
        let f = self.engine.compile(code, name).map_err(|m| SandboxError {
            message: m,
            stopped: false,
        })?;
        self.call(&f, args)
    }

    /// Calls `f` with `args` under the limits; its first return value.
    ///
    /// # Errors
    /// A runtime error, or a stop at a limit.
    pub fn call(&self, f: &Function, args: impl IntoLuaMulti) -> Result<Value, SandboxError> {
        self.engine.arm_timer(self.limits.time_limit);
        // mlua gives up on some calls by panicking after unwinding the Lua state cleanly: that
        // ends this call with an error and nothing else (as a script's run does).
        let r = self.engine.capped(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call::<Value>(args)))
        });
        let fired = self.engine.disarm_timer();
        match r {
            Ok(Ok(v)) => Ok(v),
            _ if fired => Err(SandboxError {
                message: format!(
                    "stopped at the time limit of {} ms",
                    self.limits.time_limit.as_millis()
                ),
                stopped: true,
            }),
            Ok(Err(e)) => {
                let memory = matches!(e, mlua::Error::MemoryError(_));
                // After a memory stop, collect with the cap lifted so the next call starts clean.
                if memory {
                    let _ = self.lua().gc_collect();
                }
                let text = e.to_string();
                let first = text.lines().next().unwrap_or("").to_string();
                Err(SandboxError {
                    message: if memory {
                        format!(
                            "exceeded the memory cap of {} bytes",
                            self.limits.memory_limit
                        )
                    } else {
                        first
                    },
                    stopped: memory,
                })
            }
            Err(_) => Err(SandboxError {
                message: "the Lua binding gave up on this call".into(),
                stopped: true,
            }),
        }
    }

    /// A Lua value read with the rules of a script's return value (`{ok=...}` a status,
    /// `{err=...}` an error, a number an integer, `false` nil, a sequence an array).
    pub fn to_reply(&self, v: &Value) -> Option<Reply> {
        convert::lua_to_reply(v, 2, self.limits.memory_limit).map(convert::flatten_maps)
    }

    /// A reply as `redis.call` would hand it to Lua.
    ///
    /// # Errors
    /// The Lua state is out of memory.
    pub fn reply_to_lua(&self, r: Reply) -> mlua::Result<Value> {
        convert::reply_to_lua(self.lua(), r, 2)
    }
}
