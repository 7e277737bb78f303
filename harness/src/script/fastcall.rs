//! `redis.call` and `redis.pcall` as Lua C functions that read their arguments straight off
//! the Lua stack and push the reply back onto it, without mlua's callback machinery (an
//! argument table, a reference slot and a protected call per value: about 10,000 instructions
//! of a 12,000-instruction `redis.call` of `GET`).
//!
//! Only the common case is done here: a call whose arguments are all strings and numbers
//! within the copy limit, made before the time limit passed. Anything else (no argument, a
//! bad type, too many bytes, the time limit reached) goes, before any side effect, to the
//! mlua path every other library function takes ([`libargs::call_packed`] from this very
//! frame), which answers it exactly as before. The checks a command passes through
//! ([`super::dispatch_from_script`]) and the end of the call ([`super::finish_call`]: the
//! memory cap on the reply, the error raised by `redis.call`) are the same functions on both
//! paths.

use std::ffi::c_int;

use mlua::{ffi, Function, Lua, Table};

use super::libargs::{self, Args};
use super::{budget, dispatch_from_script, finish_call, Called, RunCtx};
use crate::number::format_g;
use crate::reply::Reply;

/// `redis.call` (`raise`) or `redis.pcall`: `slow` is the mlua path for the cases left to it.
pub(crate) fn function(lua: &Lua, raise: bool) -> mlua::Result<Function> {
    let slow = libargs::packed_inner(lua, move |lua, args: Args| {
        super::redis_call(lua, &args, raise)
    })?;
    // The errors of a command that already ran, raised as the mlua path raises them.
    let raiser = lua.create_function(
        |_, (kind, msg): (c_int, Option<mlua::String>)| -> mlua::Result<()> {
            let msg = msg.map(|m| m.to_string_lossy()).unwrap_or_default();
            Err(match kind {
                RAISE_MEMORY => mlua::Error::MemoryError("not enough memory".into()),
                RAISE_STOP => mlua::Error::external(libargs::Raised::Stop(msg)),
                _ => mlua::Error::external(libargs::Raised::Table(msg)),
            })
        },
    )?;
    // SAFETY: the closure takes the three values exec_raw pushed as its upvalues and leaves
    // itself as the one result; `fast_call` keeps to the Lua C API's rules.
    #[allow(unsafe_code)]
    unsafe {
        lua.exec_raw::<Function>((raise, slow, raiser), |state| {
            ffi::lua_pushcclosure(state, fast_call, 3);
        })
    }
}

/// What the raiser raises: a Redis error table (the message), the memory cap's stop, a stop
/// nothing in the script may catch (the message).
const RAISE_TABLE: c_int = 0;
const RAISE_MEMORY: c_int = 1;
const RAISE_STOP: c_int = 2;

/// What [`run`] did.
enum Fast {
    /// The reply is on the stack, alone.
    Pushed,
    /// Nothing: the mlua path is to run (the stack is as the script left it).
    Slow,
    /// The command ran; the two arguments of the raiser (upvalue 3) are alone on the stack.
    Raise,
}

/// The C function: upvalue 1 `raise`, 2 the mlua path, 3 the raiser.
///
/// Nothing here owns Rust memory when a Lua error leaves it by `longjmp` (every Rust value of
/// [`run`] is dropped before it returns).
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn fast_call(state: *mut ffi::lua_State) -> c_int {
    let raise = ffi::lua_toboolean(state, ffi::lua_upvalueindex(1)) != 0;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: called by Lua on a state mlua created; the `Lua` outlives this call.
        let lua = unsafe { Lua::get_or_init_from_ptr(state) };
        // SAFETY: the arguments are on `state`'s stack; see `run`.
        unsafe { run(lua, state, raise) }
    }));
    match outcome {
        Ok(Fast::Pushed) => 1,
        Ok(Fast::Slow) => libargs::call_packed(state, ffi::lua_upvalueindex(2), false),
        Ok(Fast::Raise) => raise_from_here(state),
        // As when mlua gives up on a call: the script ends, nothing of it may go on.
        Err(_) => {
            ffi::lua_pushinteger(state, RAISE_STOP.into());
            ffi::lua_pushstring_(
                state,
                c"harness: redis.call failed inside the harness".as_ptr(),
            );
            raise_from_here(state)
        }
    }
}

/// Calls the raiser with the two values on top of the stack and raises what it raised, from
/// this frame (as [`libargs::call_packed`] does).
#[allow(unsafe_code)]
unsafe fn raise_from_here(state: *mut ffi::lua_State) -> c_int {
    ffi::lua_pushvalue(state, ffi::lua_upvalueindex(3));
    ffi::lua_insert(state, -3);
    ffi::lua_pcall(state, 2, 0, 0);
    ffi::lua_error(state)
}

/// The fast path. No Lua error can be raised in here: the stack is only read before the
/// command runs, and written with the memory cap lifted (mlua's allocator then fails only
/// where the process is out of memory, as for its own unprotected pushes).
#[allow(unsafe_code)]
unsafe fn run(lua: &Lua, state: *mut ffi::lua_State, raise: bool) -> Fast {
    // The time limit first, as for every library function (`libargs::on_the_clock`).
    if super::check_time(lua).is_err() {
        return Fast::Slow;
    }
    let Some(argv) = read_args(state, budget::buffer_limit(lua)) else {
        return Fast::Slow;
    };
    // The arguments are copied: their stack slots are free for the reply (a call of 7,999
    // arguments leaves no room above them, Lua's limit is 8,000 slots per C function).
    ffi::lua_settop(state, 0);
    let ctx = lua.app_data_ref::<RunCtx>().map(|c| *c).unwrap_or_default();
    let uncapped = Uncapped::new(lua);
    let reply = dispatch_from_script(lua, &argv, ctx);
    match finish_call(lua, reply, raise, uncapped.limit) {
        Called::Memory => {
            ffi::lua_pushinteger(state, RAISE_MEMORY.into());
            ffi::lua_pushnil(state);
            Fast::Raise
        }
        Called::Raise(e) => {
            ffi::lua_pushinteger(state, RAISE_TABLE.into());
            push_bytes(state, e.as_bytes());
            Fast::Raise
        }
        Called::Reply(r) => {
            let top = ffi::lua_gettop(state);
            if push_reply(state, &r, ctx.resp) {
                Fast::Pushed
            } else {
                ffi::lua_settop(state, top);
                ffi::lua_pushinteger(state, RAISE_TABLE.into());
                push_bytes(
                    state,
                    b"ERR harness: the reply is nested too deep for the Lua stack",
                );
                Fast::Raise
            }
        }
    }
}

/// The memory cap lifted while a command runs and its reply is built, put back however the
/// call ends (a panic included: a script must not go on without its cap).
struct Uncapped<'a> {
    lua: &'a Lua,
    limit: usize,
}

impl<'a> Uncapped<'a> {
    fn new(lua: &'a Lua) -> Self {
        let limit = lua.set_memory_limit(0).unwrap_or(0);
        Uncapped { lua, limit }
    }
}

impl Drop for Uncapped<'_> {
    fn drop(&mut self) {
        let _ = self.lua.set_memory_limit(self.limit);
    }
}

/// The arguments as a command, as [`super::convert::lua_args`] makes them: `None` for any
/// case it refuses (no argument, a bad type, more than `max` bytes of copies).
#[allow(unsafe_code)]
unsafe fn read_args(state: *mut ffi::lua_State, max: usize) -> Option<Vec<Vec<u8>>> {
    let n = ffi::lua_gettop(state);
    if n <= 0 {
        return None;
    }
    let mut total = 0usize;
    let mut argv = Vec::with_capacity(n as usize);
    for i in 1..=n {
        let arg = match ffi::lua_type(state, i) {
            ffi::LUA_TSTRING => {
                let mut len = 0usize;
                // A string is read as it is: no conversion, no allocation.
                let p = ffi::lua_tolstring(state, i, &mut len);
                total = total.saturating_add(len);
                std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec()
            }
            ffi::LUA_TNUMBER => {
                total = total.saturating_add(24);
                format_g(ffi::lua_tonumber(state, i), 17).into_bytes()
            }
            _ => return None,
        };
        if total > max {
            return None;
        }
        argv.push(arg);
    }
    Some(argv)
}

#[allow(unsafe_code)]
unsafe fn push_bytes(state: *mut ffi::lua_State, b: &[u8]) {
    ffi::lua_pushlstring(state, b.as_ptr().cast(), b.len());
}

/// A table `{[field] = value on top}`, as `convert::single` builds it.
#[allow(unsafe_code)]
unsafe fn wrap_single(state: *mut ffi::lua_State, field: &std::ffi::CStr) {
    ffi::lua_createtable(state, 0, 1);
    ffi::lua_pushstring_(state, field.as_ptr());
    ffi::lua_pushvalue(state, -3);
    ffi::lua_rawset(state, -3);
    ffi::lua_replace(state, -2);
}

/// Pushes `r` as [`super::convert::reply_to_lua`] builds it (the same values, tables made
/// with the same sizes, fields set in the same order); `false` when the Lua stack cannot
/// grow for a nesting this deep.
#[allow(unsafe_code)]
unsafe fn push_reply(state: *mut ffi::lua_State, r: &Reply, resp: u8) -> bool {
    if ffi::lua_checkstack(state, 4) == 0 {
        return false;
    }
    match r {
        Reply::Int(i) => ffi::lua_pushnumber(state, *i as f64),
        Reply::Bulk(b) => push_bytes(state, b),
        Reply::Nil if resp == 3 => ffi::lua_pushnil(state),
        Reply::Nil => ffi::lua_pushboolean(state, 0),
        Reply::Status(s) => {
            push_bytes(state, s.as_bytes());
            wrap_single(state, c"ok");
        }
        Reply::Error(e) => {
            ffi::lua_createtable(state, 0, 0);
            ffi::lua_pushstring_(state, c"err".as_ptr());
            push_bytes(state, e.as_bytes());
            ffi::lua_rawset(state, -3);
            ffi::lua_pushstring_(state, c"ignore_error_stats_update".as_ptr());
            ffi::lua_pushboolean(state, 1);
            ffi::lua_rawset(state, -3);
        }
        Reply::Array(items) => {
            ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(0), 0);
            for (i, item) in items.iter().enumerate() {
                if !push_reply(state, item, resp) {
                    return false;
                }
                ffi::lua_rawseti_(state, -2, c_int::try_from(i + 1).unwrap_or(c_int::MAX));
            }
        }
        Reply::Map(pairs) if resp == 3 => {
            ffi::lua_createtable(state, 0, 0);
            for (k, v) in pairs {
                if !push_key(state, k, resp) || !push_reply(state, v, resp) {
                    return false;
                }
                ffi::lua_rawset(state, -3);
            }
            wrap_single(state, c"map");
        }
        Reply::Double(d) if resp == 3 => {
            ffi::lua_pushnumber(state, *d);
            wrap_single(state, c"double");
        }
        Reply::Double(d) => push_bytes(state, crate::number::format_double_reply(*d).as_bytes()),
        Reply::Bool(b) if resp == 3 => ffi::lua_pushboolean(state, c_int::from(*b)),
        Reply::BigNumber(n) if resp == 3 => {
            push_bytes(state, n.as_bytes());
            wrap_single(state, c"big_number");
        }
        Reply::Verbatim(format, text) if resp == 3 => {
            ffi::lua_createtable(state, 0, 2);
            ffi::lua_pushstring_(state, c"format".as_ptr());
            push_bytes(state, format.as_bytes());
            ffi::lua_rawset(state, -3);
            ffi::lua_pushstring_(state, c"string".as_ptr());
            push_bytes(state, text);
            ffi::lua_rawset(state, -3);
            wrap_single(state, c"verbatim_string");
        }
        Reply::Set(items) if resp == 3 => {
            ffi::lua_createtable(state, 0, 0);
            for item in items {
                if !push_key(state, item, resp) {
                    return false;
                }
                ffi::lua_pushboolean(state, 1);
                ffi::lua_rawset(state, -3);
            }
            wrap_single(state, c"set");
        }
        other @ (Reply::Map(_)
        | Reply::Bool(_)
        | Reply::BigNumber(_)
        | Reply::Verbatim(..)
        | Reply::Set(_)) => return push_reply(state, &other.clone().into_resp2(), resp),
    }
    true
}

/// [`push_reply`] for a table key: `false` for nil or NaN, which Lua refuses as keys (mlua's
/// `raw_set` answers an error there).
#[allow(unsafe_code)]
unsafe fn push_key(state: *mut ffi::lua_State, r: &Reply, resp: u8) -> bool {
    if !push_reply(state, r, resp) {
        return false;
    }
    let t = ffi::lua_type(state, -1);
    let nan = t == ffi::LUA_TNUMBER && ffi::lua_tonumber(state, -1).is_nan();
    t != ffi::LUA_TNIL && !nan
}

/// A new table `{items...}` of Lua strings (KEYS, ARGV), built in one protected call: through
/// mlua each string took a reference slot and a table write of its own (3,400 instructions
/// for a one-key KEYS).
pub(crate) fn sequence(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    // SAFETY: pushes one table; exec_raw runs this protected (a memory error is an `Err`),
    // and nothing here owns Rust memory.
    #[allow(unsafe_code)]
    unsafe {
        lua.exec_raw::<Table>((), |state| push_sequence(state, items))
    }
}

/// `table[name] = {items...}` for each pair, raw, in one protected call.
pub(crate) fn set_sequences<const N: usize>(
    lua: &Lua,
    table: &Table,
    named: [(&str, &[Vec<u8>]); N],
) -> mlua::Result<()> {
    // SAFETY: as in `sequence`; the table exec_raw pushed is at the top when this starts.
    #[allow(unsafe_code)]
    unsafe {
        lua.exec_raw::<()>(table, |state| {
            let t = ffi::lua_gettop(state);
            for (name, items) in &named {
                push_bytes(state, name.as_bytes());
                push_sequence(state, items);
                ffi::lua_rawset(state, t);
            }
            ffi::lua_settop(state, t - 1);
        })
    }
}

#[allow(unsafe_code)]
unsafe fn push_sequence(state: *mut ffi::lua_State, items: &[Vec<u8>]) {
    ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(0), 0);
    for (i, item) in items.iter().enumerate() {
        push_bytes(state, item);
        ffi::lua_rawseti_(state, -2, c_int::try_from(i + 1).unwrap_or(c_int::MAX));
    }
}

#[cfg(test)]
mod tests {
    use mlua::{Lua, Value};

    use super::push_reply;
    use crate::reply::Reply;
    use crate::script::convert::reply_to_lua;

    /// A value as Lua sees it, tables in the order `next` visits them (which the hash part's
    /// size decides, and cjson.encode follows).
    const DUMP: &str = r#"
        local function dump(v)
          if type(v) ~= 'table' then return type(v) .. ':' .. tostring(v) end
          local out = {}
          for k, x in pairs(v) do out[#out + 1] = dump(k) .. '=' .. dump(x) end
          return '{' .. table.concat(out, ',') .. '}'
        end
        return dump(...)
    "#;

    #[test]
    fn the_fast_path_hands_scripts_what_reply_to_lua_does() {
        let lua = Lua::new();
        let dump: mlua::Function = lua.load(DUMP).into_function().unwrap();
        let s = |t: &str| Reply::Bulk(t.as_bytes().to_vec());
        let every = Reply::Array(vec![
            Reply::Int(-7),
            s("bulk"),
            Reply::Nil,
            Reply::Status("OK".into()),
            Reply::Error("ERR no".into()),
            Reply::Array(vec![s("a"), Reply::Array(vec![Reply::Int(1)])]),
            Reply::Map(vec![
                (s("f1"), s("v1")),
                (s("f2"), Reply::Int(2)),
                (s("f3"), Reply::Nil),
            ]),
            Reply::Double(1.5),
            Reply::Double(f64::INFINITY),
            Reply::Bool(true),
            Reply::Bool(false),
            Reply::BigNumber("1234567890123456789012".into()),
            Reply::Verbatim("txt".into(), b"some text".to_vec()),
            Reply::Set(vec![s("m1"), s("m2"), s("m3")]),
        ]);
        for resp in [2, 3] {
            let slow = reply_to_lua(&lua, every.clone(), resp).unwrap();
            #[allow(unsafe_code)]
            let fast: Value =
                unsafe { lua.exec_raw((), |state| assert!(push_reply(state, &every, resp))) }
                    .unwrap();
            let (slow, fast): (String, String) =
                (dump.call(slow).unwrap(), dump.call(fast).unwrap());
            assert_eq!(fast, slow, "RESP{resp}");
            assert!(slow.contains("verbatim") == (resp == 3), "{slow}");
        }
    }
}
