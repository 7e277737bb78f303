//! Argument checks for the Rust-side libraries, with Lua's `luaL_check*` messages, and the
//! `(ok, ...)` answer convention the prelude's `wrap` turns into results or errors.

use mlua::{IntoLuaMulti, Lua, MultiValue, Value};

/// Lua's type name for error messages (`got no value` when absent).
pub fn type_name(v: Option<&Value>) -> &'static str {
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
pub fn to_number(v: Option<&Value>) -> Option<f64> {
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
pub fn c_int(x: f64) -> i32 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let wide = if x.is_nan() || !(-TWO_63..TWO_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    };
    wide as i32
}

/// `bad argument #n to 'f' (msg)`.
pub fn bad_arg(n: usize, f: &str, msg: &str) -> String {
    format!("bad argument #{n} to '{f}' ({msg})")
}

/// `luaL_checknumber`.
pub fn check_number(args: &MultiValue, n: usize, f: &str) -> Result<f64, String> {
    let v = args.get(n - 1);
    to_number(v).ok_or_else(|| bad_arg(n, f, &format!("number expected, got {}", type_name(v))))
}

/// `luaL_checklstring`: strings, and numbers formatted as Lua does (`%.14g`).
pub fn check_bytes(args: &MultiValue, n: usize, f: &str) -> Result<Vec<u8>, String> {
    let v = args.get(n - 1);
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
pub enum Raised {
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
pub fn raised(e: &mlua::Error) -> Option<Raised> {
    match e {
        mlua::Error::ExternalError(a) => a.downcast_ref::<Raised>().cloned(),
        mlua::Error::CallbackError { cause, .. } => raised(cause),
        mlua::Error::WithContext { cause, .. } => raised(cause),
        _ => None,
    }
}

/// Whether `e` is a memory error, however mlua wrapped it.
pub fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::WithContext { cause, .. } => is_memory_error(cause),
        _ => false,
    }
}

/// `luaL_where(L, 1)`: `source:line: ` of the caller, or nothing for a C caller.
fn where_(lua: &Lua) -> String {
    lua.inspect_stack(1, |d| {
        let line = d.current_line().unwrap_or(0);
        let src = d
            .source()
            .short_src
            .map(|s| s.into_owned())
            .unwrap_or_default();
        if line > 0 {
            format!("{src}:{line}: ")
        } else {
            String::new()
        }
    })
    .unwrap_or_default()
}

/// Success with `v`.
pub fn ok(lua: &Lua, v: impl IntoLuaMulti) -> mlua::Result<MultiValue> {
    v.into_lua_multi(lua)
}

/// Raises a Lua error at the caller's line, as `luaL_error` does.
pub fn lua_err(lua: &Lua, msg: impl AsRef<str>) -> mlua::Result<MultiValue> {
    Err(mlua::Error::external(Raised::Text(format!(
        "{}{}",
        where_(lua),
        msg.as_ref()
    ))))
}

/// Raises a Redis error table `{err = msg}`.
pub fn redis_err(_lua: &Lua, msg: impl Into<String>) -> mlua::Result<MultiValue> {
    Err(mlua::Error::external(Raised::Table(msg.into())))
}

/// Success, or a Lua error at the caller's line.
pub fn answer(lua: &Lua, r: Result<MultiValue, String>) -> mlua::Result<MultiValue> {
    match r {
        Ok(m) => Ok(m),
        Err(e) => lua_err(lua, e),
    }
}
