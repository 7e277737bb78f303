//! Argument checks for the Rust-side libraries, with Lua's `luaL_check*` messages, and
//! [`packed`], the one way a Rust function is offered to scripts.

use std::ffi::c_int;

use mlua::{ffi, FromLua, Function, IntoLuaMulti, Lua, MultiValue, Table, Value};

/// A Rust library function's arguments, as [`packed`] passes them: one table
/// `{n = count, ...}`. mlua holds every value it hands to Rust in one of ~8,000 reference
/// slots and panics past them, so a call like `redis.call(unpack(t))` with thousands of
/// strings must not arrive as thousands of values: read from the table, one argument at a
/// time holds a slot, and only while it is looked at.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    t: Table,
    n: usize,
}

impl FromLua for Args {
    fn from_lua(v: Value, _: &Lua) -> mlua::Result<Args> {
        match v {
            Value::Table(t) => {
                let n = t.raw_get::<Option<usize>>("n")?.unwrap_or(0);
                Ok(Args { t, n })
            }
            _ => Err(mlua::Error::runtime(
                "harness: a library function was called without its argument table",
            )),
        }
    }
}

impl Args {
    /// How many arguments were passed (trailing nils included).
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Whether no argument was passed.
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Argument `i` (from 0), `None` past the last one.
    pub(crate) fn get(&self, i: usize) -> Option<Value> {
        (i < self.n).then(|| self.t.raw_get(i + 1).unwrap_or(Value::Nil))
    }

    /// These arguments and a `nil` after them (a C function's mark pushed past its last
    /// argument, which then reads as `nil`, not "no value").
    pub(crate) fn with_nil_mark(&self) -> Args {
        Args {
            t: self.t.clone(),
            n: self.n + 1,
        }
    }

    /// The arguments in order, each read when the iterator reaches it.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.n).map(|i| self.get(i).unwrap_or(Value::Nil))
    }
}

/// Lua's type name for error messages (`got no value` when absent).
pub(super) fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::LightUserData(_)) => "userdata",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// `lua_tonumber`: numbers, and strings that read as numbers.
pub(super) fn to_number(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => {
            let b = s.as_bytes();
            let t = std::str::from_utf8(&b).ok()?.trim();
            if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                return u64::from_str_radix(hex, 16).ok().map(|v| v as f64);
            }
            let lower = t.to_ascii_lowercase();
            if lower.contains("inf") || lower.contains("nan") {
                return None;
            }
            t.parse::<f64>().ok()
        }
        _ => None,
    }
}

/// `luaL_checkint` on a number: `(int)(lua_Integer)x` as Redis's Lua computes it on x86-64
/// (out of range or NaN gives `INT64_MIN`, whose low 32 bits are 0).
pub(super) fn c_int(x: f64) -> i32 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let wide = if x.is_nan() || !(-TWO_63..TWO_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    };
    wide as i32
}

/// `bad argument #n to 'f' (msg)`.
pub(super) fn bad_arg(n: usize, f: &str, msg: &str) -> String {
    format!("bad argument #{n} to '{f}' ({msg})")
}

/// `luaL_checknumber`.
pub(super) fn check_number(args: &Args, n: usize, f: &str) -> Result<f64, String> {
    let v = args.get(n - 1);
    let v = v.as_ref();
    to_number(v).ok_or_else(|| bad_arg(n, f, &format!("number expected, got {}", type_name(v))))
}

/// `luaL_checklstring`: strings, and numbers formatted as Lua does (`%.14g`).
pub(super) fn check_bytes(args: &Args, n: usize, f: &str) -> Result<Vec<u8>, String> {
    let v = args.get(n - 1);
    let v = v.as_ref();
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(crate::number::format_g(*i as f64, 14).into_bytes()),
        Some(Value::Number(x)) => Ok(crate::number::format_g(*x, 14).into_bytes()),
        _ => Err(bad_arg(
            n,
            f,
            &format!("string expected, got {}", type_name(v)),
        )),
    }
}

/// An error a Rust library function raises into Lua: a Redis error table (`{err = ...}`, as
/// `luaPushError` + `luaError` raise) or a Lua error string (as `luaL_error` raises).
#[derive(Debug, Clone)]
pub(super) enum Raised {
    /// `{err = msg}`.
    Table(String),
    /// A plain Lua error message, position included.
    Text(String),
    /// The harness stopping the script (time limit): nothing of the script may catch it.
    Stop(String),
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raised::Table(m) | Raised::Text(m) | Raised::Stop(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Raised {}

/// The [`Raised`] inside an mlua error, if that is what it is.
pub(super) fn raised(e: &mlua::Error) -> Option<Raised> {
    match e {
        mlua::Error::ExternalError(a) => a.downcast_ref::<Raised>().cloned(),
        mlua::Error::CallbackError { cause, .. } => raised(cause),
        mlua::Error::WithContext { cause, .. } => raised(cause),
        _ => None,
    }
}

/// Whether `e` is a memory error, however mlua wrapped it.
pub(super) fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::WithContext { cause, .. } => is_memory_error(cause),
        _ => false,
    }
}

/// `luaL_where(L, 1)`: `source:line: ` of the caller, or nothing for a C caller. Level 1 is
/// [`packed`]'s C closure; the prelude's own Lua frames (a `gmatch` iterator) are skipped, as
/// the script does not see them.
fn where_(lua: &Lua) -> String {
    let mut level = 2;
    loop {
        let frame = lua.inspect_stack(level, |d| {
            let source = d.source();
            let harness = source.source.as_deref() == Some("=harness");
            let line = d.current_line().unwrap_or(0);
            let src = source.short_src.map(|s| s.into_owned()).unwrap_or_default();
            (harness, src, line)
        });
        match frame {
            Some((true, ..)) => level += 1,
            Some((false, src, line)) if line > 0 => return format!("{src}:{line}: "),
            _ => return String::new(),
        }
    }
}

/// Success with `v`.
pub(super) fn ok(lua: &Lua, v: impl IntoLuaMulti) -> mlua::Result<MultiValue> {
    v.into_lua_multi(lua)
}

/// Raises a Lua error at the caller's line, as `luaL_error` does.
pub(super) fn lua_err(lua: &Lua, msg: impl AsRef<str>) -> mlua::Result<MultiValue> {
    Err(mlua::Error::external(Raised::Text(format!(
        "{}{}",
        where_(lua),
        as_called(lua, msg.as_ref())
    ))))
}

/// `bad argument #n to 'f' (...)` with `f` named as `luaL_argerror` names it: as the caller
/// called it (`pack` for `struct.pack(...)`, `f` for a local `f`, `?` through `pcall`), `self`
/// not counted in a method call. Level 1 is [`packed`]'s C closure, as the script called it.
fn as_called(lua: &Lua, msg: &str) -> String {
    let Some(rest) = msg.strip_prefix("bad argument #") else {
        return msg.to_string();
    };
    let Some((narg, rest)) = rest.split_once(" to '") else {
        return msg.to_string();
    };
    let (Ok(narg), Some((given, extra))) = (narg.parse::<i64>(), rest.split_once("' ")) else {
        return msg.to_string();
    };
    let (name, method) = lua
        .inspect_stack(1, |d| {
            let n = d.names();
            (
                n.name.map(|s| s.into_owned()),
                n.name_what == Some("method"),
            )
        })
        .unwrap_or((None, false));
    let name = name.unwrap_or_else(|| "?".to_string());
    // Already named from this frame (the pattern functions do it themselves).
    if name == given {
        return msg.to_string();
    }
    match (method, narg) {
        (true, 1) => {
            let inner = extra.trim_start_matches('(').trim_end_matches(')');
            format!("calling '{name}' on bad self ({inner})")
        }
        (true, n) => format!("bad argument #{} to '{name}' {extra}", n - 1),
        (false, n) => format!("bad argument #{n} to '{name}' {extra}"),
    }
}

/// Raises a Redis error table `{err = msg}`.
pub(super) fn redis_err(_lua: &Lua, msg: impl Into<String>) -> mlua::Result<MultiValue> {
    Err(mlua::Error::external(Raised::Table(msg.into())))
}

/// Success, or a Lua error at the caller's line; past the time limit, the harness's stop (a
/// long call that gave up on the clock, see [`super::budget::Budget::step`]).
pub(super) fn answer(lua: &Lua, r: Result<MultiValue, String>) -> mlua::Result<MultiValue> {
    match r {
        Ok(m) => Ok(m),
        Err(e) => {
            super::check_time(lua)?;
            lua_err(lua, e)
        }
    }
}

/// The C side of [`packed`]: collects the arguments into one table `{n = count, ...}`, calls
/// upvalue 1 with it, and returns its results; with upvalue 2 true, its one result is such a
/// table, spread into results here. Errors are caught and raised again from this frame, so
/// that the script's error position is one level up, as for a C library function.
///
/// Nothing here owns Rust memory: a Lua error may leave it by `longjmp`.
///
/// With `super::fastcall`, the crate's `unsafe` code. A safe mlua callback cannot do this job: mlua turns
/// every argument into a value holding one of its ~8,000 reference slots before the callback
/// runs, and panics past them; a Lua-side wrapper would do it safely but shows in the stack
/// (a script's `return f(x)` tail call would lose its error position, which Redis reports).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn packed_call(state: *mut ffi::lua_State) -> c_int {
    let spread = ffi::lua_toboolean(state, ffi::lua_upvalueindex(2)) != 0;
    call_packed(state, ffi::lua_upvalueindex(1), spread)
}

/// [`packed_call`]'s work, from the frame of the C function that runs it: calls the mlua
/// function at `func` (an upvalue index) with this frame's arguments as one table
/// `{n = count, ...}` and returns its results (spread, see [`packed_spread`]). Also the path
/// of `redis.call`'s fast version for what it leaves to mlua (`super::fastcall`).
///
/// # Safety
/// Called from a Lua C function with its arguments alone on the stack; `func` holds an mlua
/// function. Nothing here owns Rust memory: a Lua error may leave it by `longjmp`.
#[allow(unsafe_code)]
pub(crate) unsafe fn call_packed(state: *mut ffi::lua_State, func: c_int, spread: bool) -> c_int {
    let n = ffi::lua_gettop(state);
    ffi::lua_pushvalue(state, func);
    ffi::lua_createtable(state, n, 1);
    for i in 1..=n {
        ffi::lua_pushvalue(state, i);
        ffi::lua_rawseti_(state, -2, i);
    }
    ffi::lua_pushstring_(state, c"n".as_ptr());
    ffi::lua_pushinteger(state, ffi::lua_Integer::from(n));
    ffi::lua_rawset(state, -3);
    if ffi::lua_pcall(state, 1, ffi::LUA_MULTRET, 0) != 0 {
        ffi::lua_error(state);
    }
    // [`reraise`]: the callee asks for a Lua value to be raised as it is.
    if ffi::lua_gettop(state) >= n + 2
        && ffi::lua_type(state, n + 1) == ffi::LUA_TLIGHTUSERDATA
        && ffi::lua_touserdata(state, n + 1) == reraise_mark()
    {
        ffi::lua_pushvalue(state, n + 2);
        ffi::lua_error(state);
    }
    if !spread {
        return ffi::lua_gettop(state) - n;
    }
    // Spread: the table alone at slot 1, then its items (the callee checked the count
    // against Redis's own stack limits).
    ffi::lua_replace(state, 1);
    ffi::lua_settop(state, 1);
    ffi::lua_pushstring_(state, c"n".as_ptr());
    ffi::lua_rawget(state, 1);
    let count = c_int::try_from(ffi::lua_tointeger(state, -1)).unwrap_or(0);
    ffi::lua_settop(state, 1);
    if count > 0 && ffi::lua_checkstack(state, count) == 0 {
        ffi::lua_pushstring_(state, c"stack overflow (too many results)".as_ptr());
        ffi::lua_error(state);
    }
    for i in 1..=count {
        ffi::lua_rawgeti_(state, 1, i);
    }
    count
}

static RERAISE: u8 = 0;

fn reraise_mark() -> *mut std::ffi::c_void {
    std::ptr::addr_of!(RERAISE) as *mut std::ffi::c_void
}

/// The answer of a [`packed`] function that raises `v` as the Lua error value itself, as a C
/// function's `lua_error` would (mlua would wrap it: a table raised by a Lua callback the
/// function called would reach the script as text).
pub(super) fn reraise(v: Value) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([
        Value::LightUserData(mlua::LightUserData(reraise_mark())),
        v,
    ]))
}

/// `f` as a library function for scripts: it gets its arguments as one [`Args`] table, so
/// that no number of arguments can exhaust mlua's reference slots.
pub(super) fn packed<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, Args) -> mlua::Result<MultiValue> + mlua::MaybeSend + 'static,
{
    closure(lua, packed_inner(lua, f)?, false)
}

/// The mlua function inside a [`packed`] one (it takes the [`Args`] table): for a C function
/// that runs it itself through [`call_packed`].
pub(crate) fn packed_inner<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, Args) -> mlua::Result<MultiValue> + mlua::MaybeSend + 'static,
{
    lua.create_function(on_the_clock(f))
}

/// `f`, refused once the time limit has passed: a script calling one long Rust function in a
/// loop (`redis.sha1hex` of 100 MB) is stopped at the next call, not after the 1,000
/// instructions the hook waits for.
fn on_the_clock<F>(
    f: F,
) -> impl Fn(&Lua, Args) -> mlua::Result<MultiValue> + mlua::MaybeSend + 'static
where
    F: Fn(&Lua, Args) -> mlua::Result<MultiValue> + mlua::MaybeSend + 'static,
{
    move |lua, args| {
        super::check_time(lua)?;
        f(lua, args)
    }
}

/// [`packed`] for a function with any number of results: `f` answers one table
/// `{n = count, ...}` (see [`Results`]) and the caller gets its items as results.
pub(super) fn packed_spread<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, Args) -> mlua::Result<MultiValue> + mlua::MaybeSend + 'static,
{
    closure(lua, lua.create_function(on_the_clock(f))?, true)
}

#[allow(unsafe_code)]
fn closure(lua: &Lua, f: Function, spread: bool) -> mlua::Result<Function> {
    // SAFETY: the closure takes the two values exec_raw pushed as its upvalues and leaves
    // itself as the one result; `packed_call` keeps to the Lua C API's rules.
    unsafe {
        lua.exec_raw::<Function>((f, spread), |state| {
            ffi::lua_pushcclosure(state, packed_call, 2);
        })
    }
}

/// Results for a [`packed_spread`] function, collected into one table as they come, so
/// that no more than one is held by Rust at a time.
pub(super) struct Results {
    t: Table,
    n: usize,
}

impl Results {
    /// An empty list of results.
    pub(super) fn new(lua: &Lua) -> mlua::Result<Results> {
        Ok(Results {
            t: lua.create_table()?,
            n: 0,
        })
    }

    /// How many results so far.
    pub(super) fn len(&self) -> usize {
        self.n
    }

    /// Adds one result.
    pub(super) fn push(&mut self, v: Value) -> mlua::Result<()> {
        self.n += 1;
        self.t.raw_set(self.n, v)
    }

    /// Replaces result `i` (from 1, at most [`Results::len`]).
    pub(super) fn set(&mut self, i: usize, v: Value) -> mlua::Result<()> {
        debug_assert!((1..=self.n).contains(&i));
        self.t.raw_set(i, v)
    }

    /// Removes the last result.
    pub(super) fn pop(&mut self) -> mlua::Result<Value> {
        if self.n == 0 {
            return Ok(Value::Nil);
        }
        let v = self.t.raw_get(self.n)?;
        self.t.raw_set(self.n, Value::Nil)?;
        self.n -= 1;
        Ok(v)
    }

    /// The last result.
    pub(super) fn last(&self) -> Option<Value> {
        (self.n > 0).then(|| self.t.raw_get(self.n).unwrap_or(Value::Nil))
    }

    /// The answer [`packed_spread`] expects.
    pub(super) fn into_multi(self) -> mlua::Result<MultiValue> {
        self.t.raw_set("n", self.n)?;
        Ok(MultiValue::from_iter([Value::Table(self.t)]))
    }
}

/// Lua 5.1's `LUAI_MAXCSTACK`: the most values a C function may have on its stack
/// (arguments included); `lua_checkstack` refuses past it.
pub(super) const MAX_C_STACK: usize = 8000;
