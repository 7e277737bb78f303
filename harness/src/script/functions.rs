//! Redis Functions: `FUNCTION LOAD` of a `#!lua name=...` library and `FCALL` of its functions.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mlua::{Function, Lua, Table, Value};

use super::shebang::{parse_flag, ScriptFlags};
use super::{err, libargs, Engine, RunCtx};
use crate::reply::Reply;
use crate::server::Server;

/// One loaded library: its name, its code, the names of its functions.
#[derive(Debug, Clone)]
pub struct FunctionLibrary {
    /// The `name=` from the shebang.
    pub name: String,
    /// The code as loaded.
    pub code: Vec<u8>,
    /// Its functions, in registration order.
    pub functions: Vec<String>,
    /// Each function's description and flags, in the same order (FUNCTION LIST).
    pub details: Vec<FunctionInfo>,
}

/// A registered function as FUNCTION LIST shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its name as registered.
    pub name: String,
    /// The `description` named argument.
    pub description: Option<String>,
    /// The `flags` named argument, as given.
    pub flags: Vec<String>,
}

/// A registered function's name and flags; the function itself lives in a Lua table (a
/// `Function` held in Rust takes one of mlua's ~8,000 reference slots; past them mlua panics).
#[derive(Debug, Clone)]
struct Registered {
    name: String,
    flags: ScriptFlags,
    description: Option<String>,
    flag_names: Vec<String>,
}

/// Loaded libraries and their functions (names compared case-insensitively, as Redis does).
#[derive(Debug, Default, Clone)]
pub(super) struct Registry {
    libraries: BTreeMap<String, FunctionLibrary>,
    functions: HashMap<String, Registered>,
}

fn valid_name(n: &[u8]) -> bool {
    !n.is_empty() && n.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

const BAD_FUNCTION_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// `(name, shebang length)` of a library, or Redis's error text.
fn library_name(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let end = code
        .iter()
        .position(|&c| c == b'\n')
        .ok_or("Invalid library metadata")?;
    let line = String::from_utf8_lossy(&code[..end]);
    let parts = crate::cmdline::split_args(&line).map_err(|_| "Invalid library metadata")?;
    let engine = parts.first().ok_or("Invalid library metadata")?;
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_vec());
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let name = name.ok_or("Library name was not given")?;
    let engine = &engine[2..];
    if !engine.eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "Engine '{}' not found",
            String::from_utf8_lossy(engine)
        ));
    }
    if !valid_name(&name) {
        return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok((String::from_utf8_lossy(&name).into_owned(), end))
}

type PendingRegistrations = Arc<Mutex<Vec<Registered>>>;

/// `redis.register_function`'s arguments: the registration and its callback.
type Registration = (Registered, Function);

/// Reads `redis.register_function`'s arguments, as Redis does (positional or named).
fn read_registration(args: &libargs::Args) -> Result<Registration, String> {
    match args.len() {
        2 => {
            let Some(Value::String(name)) = args.get(0) else {
                return Err("first argument to redis.register_function must be a string".into());
            };
            let Some(Value::Function(f)) = args.get(1) else {
                return Err("second argument to redis.register_function must be a function".into());
            };
            Ok((
                Registered {
                    name: name.to_string_lossy(),
                    flags: ScriptFlags::default(),
                    description: None,
                    flag_names: Vec::new(),
                },
                f,
            ))
        }
        1 => {
            let Some(Value::Table(t)) = args.get(0) else {
                return Err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).".into());
            };
            read_named(&t)
        }
        _ => Err("wrong number of arguments to redis.register_function".into()),
    }
}

fn read_named(t: &Table) -> Result<Registration, String> {
    let (mut name, mut func, mut flags) = (None, None, ScriptFlags::default());
    let (mut description, mut flag_names) = (None, Vec::new());
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        let Value::String(k) = k else {
            return Err(
                "named argument key given to redis.register_function is not a string".into(),
            );
        };
        match (k.to_string_lossy().as_str(), v) {
            ("function_name", Value::String(s)) => name = Some(s.to_string_lossy()),
            ("function_name", _) => {
                return Err("function_name argument given to redis.register_function must be a string".into())
            }
            ("callback", Value::Function(f)) => func = Some(f),
            ("callback", _) => {
                return Err("callback argument given to redis.register_function must be a function".into())
            }
            ("description", Value::String(s)) => description = Some(s.to_string_lossy()),
            ("description", _) => {
                return Err("description argument given to redis.register_function must be a string".into())
            }
            ("flags", Value::Table(list)) => {
                for f in list.sequence_values::<Value>() {
                    match f.map_err(|e| e.to_string())? {
                        Value::String(s) => {
                            parse_flag(&mut flags, &s.as_bytes())
                                .map_err(|_| "unknown flag given".to_string())?;
                            flag_names.push(s.to_string_lossy());
                        }
                        _ => return Err("unknown flag given".into()),
                    }
                }
            }
            ("flags", _) => {
                return Err("flags argument to redis.register_function must be a table representing function flags".into())
            }
            _ => return Err("unknown argument given to redis.register_function".into()),
        }
    }
    Ok((
        Registered {
            name: name.ok_or("redis.register_function must get a function name argument")?,
            flags,
            description,
            flag_names,
        },
        func.ok_or("redis.register_function must get a callback argument")?,
    ))
}

/// `redis.register_function` for one FUNCTION LOAD; it refuses once `open` is cleared (a
/// function that kept it and calls it later, as Redis's "malicious access" test does).
fn register_fn(
    lua: &Lua,
    pending: PendingRegistrations,
    funcs: Table,
    open: Arc<AtomicBool>,
) -> mlua::Result<Function> {
    libargs::packed(lua, move |lua, args: libargs::Args| {
        if !open.load(Ordering::Relaxed) {
            return libargs::redis_err(
                lua,
                "ERR redis.register_function can only be called on FUNCTION LOAD command",
            );
        }
        let (reg, func) = match read_registration(&args) {
            Ok(r) => r,
            Err(e) => return libargs::redis_err(lua, format!("ERR {e}")),
        };
        if !valid_name(reg.name.as_bytes()) {
            return libargs::redis_err(lua, format!("ERR {BAD_FUNCTION_NAME}"));
        }
        let Ok(mut p) = pending.lock() else {
            return libargs::redis_err(lua, "ERR harness: registration state poisoned");
        };
        if p.iter().any(|r| r.name.eq_ignore_ascii_case(&reg.name)) {
            return libargs::redis_err(lua, "ERR Function already exists in the library");
        }
        funcs.raw_set(reg.name.to_ascii_lowercase(), func)?;
        p.push(reg);
        libargs::ok(lua, ())
    })
}

/// The function libraries as they were before a change that may fail (FUNCTION RESTORE):
/// the registry and the table of compiled callbacks, put back as they were, so a failure
/// neither drops a library nor runs its top level again.
#[derive(Debug)]
pub(crate) struct SavedFunctions {
    registry: Registry,
    bodies: Table,
}

/// The server handed from one Lua state to another while the other runs code (the functions'
/// state), and handed back when this guard goes, however that code ended.
struct ServerHandedOver {
    from: Lua,
    to: Lua,
}

impl ServerHandedOver {
    fn new(from: &Lua, to: &Lua) -> ServerHandedOver {
        if let Some(server) = from.remove_app_data::<Server>() {
            to.set_app_data(server);
        }
        ServerHandedOver {
            from: from.clone(),
            to: to.clone(),
        }
    }
}

impl Drop for ServerHandedOver {
    fn drop(&mut self) {
        if let Some(server) = self.to.remove_app_data::<Server>() {
            self.from.set_app_data(server);
        }
    }
}

impl Engine {
    /// Runs `f` in the functions' state (made on first use) with the server handed to it;
    /// the server comes back however `f` ends. In that state itself, `f` runs on it.
    pub(crate) fn in_functions<R>(&mut self, f: impl FnOnce(&mut Engine) -> R) -> mlua::Result<R> {
        if self.is_functions_state {
            return Ok(f(self));
        }
        let state = match &mut self.functions_state {
            Some(state) => state,
            none => {
                let mut state = Engine::build(
                    Server::default(),
                    self.limits,
                    self.timer.clone(),
                    self.rand.clone(),
                )?;
                state.is_functions_state = true;
                none.insert(Box::new(state))
            }
        };
        state.client_resp3.set(self.client_resp3.get());
        let r = {
            let _moved = ServerHandedOver::new(&self.lua, &state.lua);
            f(state)
        };
        self.stopped.set(state.stopped.get());
        Ok(r)
    }

    /// The functions' state, if a library was ever loaded (for reading its registry).
    pub(crate) fn functions_state(&self) -> Option<&Engine> {
        if self.is_functions_state {
            Some(self)
        } else {
            self.functions_state.as_deref()
        }
    }

    /// Keeps the libraries as they are now; later loads go to a copy of the callback table.
    ///
    /// # Errors
    /// Lua could not copy the table (memory).
    pub(crate) fn save_functions(&mut self) -> mlua::Result<SavedFunctions> {
        if !self.is_functions_state {
            return self.in_functions(Engine::save_functions)?;
        }
        let copy = self.lua.create_table()?;
        for pair in self.function_bodies.pairs::<Value, Value>() {
            let (k, v) = pair?;
            copy.raw_set(k, v)?;
        }
        Ok(SavedFunctions {
            registry: self.functions.clone(),
            bodies: std::mem::replace(&mut self.function_bodies, copy),
        })
    }

    /// Puts back the libraries [`save_functions`](Self::save_functions) kept, as they were.
    pub(crate) fn put_back_functions(&mut self, saved: SavedFunctions) {
        if !self.is_functions_state {
            let _ = self.in_functions(|f| f.put_back_functions(saved));
            return;
        }
        self.functions = saved.registry;
        self.function_bodies = saved.bodies;
    }

    /// `FUNCTION LOAD [REPLACE] code`: the library name, or Redis's error.
    pub(crate) fn function_load(&mut self, code: &[u8], replace: bool) -> Reply {
        if !self.is_functions_state {
            return self
                .in_functions(|f| f.function_load(code, replace))
                .unwrap_or_else(|e| err(format!("ERR harness: {e}")));
        }
        match self.try_function_load(code, replace) {
            Ok(name) => Reply::Bulk(name.into_bytes()),
            Err(e) => err(format!("ERR {e}")),
        }
    }

    fn try_function_load(&mut self, code: &[u8], replace: bool) -> Result<String, String> {
        let (name, skip) = library_name(code)?;
        if self.functions.libraries.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let pending: PendingRegistrations = Arc::default();
        let pending_funcs = self.lua.create_table().map_err(|e| e.to_string())?;
        let open = Arc::new(AtomicBool::new(true));
        let register = register_fn(
            &self.lua,
            pending.clone(),
            pending_funcs.clone(),
            open.clone(),
        )
        .map_err(|e| e.to_string())?;
        // The shared environment, as the library's functions will see it; its top level's view
        // is switched on only around running it, so no early return can leave it on.
        let env: Table = self
            .load_env
            .call(Value::Nil)
            .map_err(|e| format!("harness: {e}"))?;
        let body = &code[skip..];
        let chunk = self
            .lua
            .load(body)
            .set_name("@user_function")
            .set_environment(env)
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => {
                    format!("Error compiling function: {message}")
                }
                other => format!("Error compiling function: {other}"),
            })?;
        self.load_env
            .call::<Table>(register)
            .map_err(|e| format!("harness: {e}"))?;
        // Redis gives a library's top-level code 500 ms (LOAD_TIMEOUT_MS).
        self.arm_timer(std::time::Duration::from_millis(500));
        let outcome = self.capped(|| self.run.call::<(bool, Value)>(chunk));
        let timed_out = self.disarm_timer();
        open.store(false, Ordering::Relaxed);
        let _ = self.load_env.call::<Value>(Value::Nil);
        if timed_out {
            return Err("Error registering functions: ERR FUNCTION LOAD timeout".into());
        }
        match outcome {
            Ok((true, _)) => {}
            Ok((false, v)) => {
                let msg = match &v {
                    Value::Table(t) => t.raw_get::<String>("err").unwrap_or_default(),
                    Value::String(s) => s.to_string_lossy(),
                    _ => String::new(),
                };
                return Err(format!("Error registering functions: {msg}"));
            }
            Err(e) => return Err(format!("harness: {e}")),
        }
        let registered = pending.lock().map(|p| p.clone()).unwrap_or_default();
        if registered.is_empty() {
            return Err("No functions registered".into());
        }
        for r in &registered {
            if let Some(existing) = self.functions.functions.get(&r.name.to_ascii_lowercase()) {
                let owner = self.functions.libraries.values().find(|l| {
                    l.functions
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(&existing.name))
                });
                if owner.is_none_or(|l| l.name != name) {
                    return Err(format!("Function {} already exists", r.name));
                }
            }
        }
        self.function_delete_library(&name);
        for r in &registered {
            let key = r.name.to_ascii_lowercase();
            let func: Value = pending_funcs
                .raw_get(key.as_str())
                .map_err(|e| e.to_string())?;
            self.function_bodies
                .raw_set(key.as_str(), func)
                .map_err(|e| e.to_string())?;
            self.functions.functions.insert(key, r.clone());
        }
        self.functions.libraries.insert(
            name.clone(),
            FunctionLibrary {
                name: name.clone(),
                code: code.to_vec(),
                functions: registered.iter().map(|r| r.name.clone()).collect(),
                details: registered
                    .iter()
                    .map(|r| FunctionInfo {
                        name: r.name.clone(),
                        description: r.description.clone(),
                        flags: r.flag_names.clone(),
                    })
                    .collect(),
            },
        );
        Ok(name)
    }

    fn function_delete_library(&mut self, name: &str) -> bool {
        match self.functions.libraries.remove(name) {
            Some(lib) => {
                for f in lib.functions {
                    let key = f.to_ascii_lowercase();
                    let _ = self.function_bodies.raw_set(key.as_str(), Value::Nil);
                    self.functions.functions.remove(&key);
                }
                true
            }
            None => false,
        }
    }

    /// `FUNCTION DELETE name`.
    pub(crate) fn function_delete(&mut self, name: &[u8]) -> Reply {
        if !self.is_functions_state {
            return match self.functions_state {
                Some(_) => self
                    .in_functions(|f| f.function_delete(name))
                    .unwrap_or_else(|e| err(format!("ERR harness: {e}"))),
                None => err("ERR Library not found"),
            };
        }
        if self.function_delete_library(&String::from_utf8_lossy(name)) {
            Reply::ok()
        } else {
            err("ERR Library not found")
        }
    }

    /// `FUNCTION FLUSH`.
    pub(crate) fn function_flush(&mut self) {
        if !self.is_functions_state {
            if self.functions_state.is_some() {
                let _ = self.in_functions(Engine::function_flush);
            }
            return;
        }
        self.functions = Registry::default();
        if let Ok(t) = self.lua.create_table() {
            self.function_bodies = t;
        }
    }

    /// The loaded libraries.
    pub(crate) fn libraries(&self) -> Vec<FunctionLibrary> {
        self.functions_state().map_or_else(Vec::new, |f| {
            f.functions.libraries.values().cloned().collect()
        })
    }

    /// `FCALL` / `FCALL_RO` of function `name` with `keys` and `argv` (numkeys already checked).
    pub(crate) fn fcall(
        &mut self,
        name: &[u8],
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        ro: bool,
    ) -> Reply {
        if !self.is_functions_state {
            return match self.functions_state {
                Some(_) => self
                    .in_functions(|f| f.fcall(name, keys, argv, ro))
                    .unwrap_or_else(|e| err(format!("ERR harness: {e}"))),
                None => err("ERR Function not found"),
            };
        }
        let key = String::from_utf8_lossy(name).to_ascii_lowercase();
        let Some(f) = self.functions.functions.get(&key).cloned() else {
            return err("ERR Function not found");
        };
        if let Some(e) = self.refused_before_run(f.flags) {
            return e;
        }
        if ro && !f.flags.no_writes {
            return err("ERR Can not execute a script with write flag using *_ro command.");
        }
        let tables = (|| -> mlua::Result<(Table, Table)> {
            self.globals.raw_set("KEYS", Value::Nil)?;
            self.globals.raw_set("ARGV", Value::Nil)?;
            Ok((self.sequence(keys)?, self.sequence(argv)?))
        })();
        let (k, a) = match tables {
            Ok(t) => t,
            Err(e) => return err(format!("ERR harness: {e}")),
        };
        self.declare_keys(keys);
        let ctx = RunCtx {
            resp: 2,
            no_writes: f.flags.no_writes,
            ro_call: ro,
            wrote: false,
            allow_oom: f.flags.allow_oom,
        };
        self.invoke(&f.name, ctx, move |e| {
            let func: Function = e.function_bodies.raw_get(key.as_str())?;
            e.run_fn.call::<(bool, Value)>((func, k, a))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_metadata_errors() {
        assert_eq!(library_name(b"#!lua name=lib\nx").unwrap().0, "lib");
        assert_eq!(
            library_name(b"return 1").unwrap_err(),
            "Missing library metadata"
        );
        assert_eq!(
            library_name(b"#!lua\nx").unwrap_err(),
            "Library name was not given"
        );
        assert_eq!(
            library_name(b"#!js name=a\n").unwrap_err(),
            "Engine 'js' not found"
        );
        assert_eq!(
            library_name(b"#!lua name=a foo=b\n").unwrap_err(),
            "Invalid metadata value given: foo=b"
        );
    }
}
