//! The Rust side of `redis.sha1hex`, `redis.log`, `redis.setresp`, `redis.set_repl`,
//! `redis.acl_check_cmd`, `math.random`, and the `frame` helper of the error handler.

use std::sync::{Arc, Mutex};

use mlua::{Lua, MultiValue, Table, Value};

use super::libargs::{
    answer, c_int, check_bytes, check_number, lua_err, ok, packed, redis_err, to_number, Args,
};
use super::rand48::Rand48;
use super::RunCtx;
use crate::server::{LogLine, Server, MAX_LOG_LINE};

/// Registers the helpers on the prelude's internals table `i`.
pub(super) fn register(lua: &Lua, i: &Table, rng: Arc<Mutex<Rand48>>) -> mlua::Result<()> {
    // string.rep builds its result in one C loop the time limit cannot interrupt: one that
    // would not fit under the memory cap is refused before any work.
    i.set(
        "string_rep",
        packed(lua, |lua, args: Args| {
            let r = check_bytes(&args, 1, "rep").and_then(|s| {
                let n = c_int(check_number(&args, 2, "rep")?);
                Ok((s, usize::try_from(n).unwrap_or(0)))
            });
            let (s, n) = match r {
                Ok(v) => v,
                Err(e) => return lua_err(lua, e),
            };
            let cap = lua
                .app_data_ref::<super::Limits>()
                .map_or(usize::MAX, |l| l.memory_limit);
            let size = s.len().saturating_mul(n);
            if lua.used_memory().saturating_add(size) > cap {
                return Err(mlua::Error::MemoryError("not enough memory".into()));
            }
            ok(lua, lua.create_string(s.repeat(n))?)
        })?,
    )?;
    i.set(
        "sha1hex",
        packed(lua, |lua, args: Args| {
            if args.len() != 1 {
                return redis_err(lua, "ERR wrong number of arguments");
            }
            let mut sha = sha1_smol::Sha1::new();
            match args.get(0).unwrap_or(Value::Nil) {
                // In slices, looking at the clock between them: 100 MB is a long C call.
                Value::String(s) => {
                    for chunk in s.as_bytes().chunks(1 << 20) {
                        super::check_time(lua)?;
                        sha.update(chunk);
                    }
                }
                Value::Integer(n) => sha.update(crate::number::format_g(n as f64, 14).as_bytes()),
                Value::Number(n) => sha.update(crate::number::format_g(n, 14).as_bytes()),
                _ => {}
            }
            ok(lua, sha.digest().to_string())
        })?,
    )?;
    i.set(
        "log",
        packed(lua, |lua, args: Args| {
            if args.len() < 2 {
                return redis_err(lua, "ERR redis.log() requires two arguments or more.");
            }
            let level = match to_number(args.get(0).as_ref()) {
                Some(l) if (0.0..=3.0).contains(&l) => l as i64,
                Some(_) => return redis_err(lua, "ERR Invalid debug level."),
                None => return redis_err(lua, "ERR First argument must be a number (log level)."),
            };
            // The log keeps the first MAX_LOG_LINE bytes of a line: build no more (a few bytes
            // past it, so that the cut falls where it falls on the whole line).
            let mut message = String::new();
            let mut first = true;
            for v in args.iter().skip(1) {
                if message.len() > MAX_LOG_LINE {
                    break;
                }
                let part = match v {
                    Value::String(s) => {
                        let b = s.as_bytes();
                        String::from_utf8_lossy(&b[..b.len().min(MAX_LOG_LINE + 8)]).into_owned()
                    }
                    Value::Integer(n) => crate::number::format_g(n as f64, 14),
                    Value::Number(n) => crate::number::format_g(n, 14),
                    _ => continue,
                };
                if !first {
                    message.push(' ');
                }
                first = false;
                message.push_str(&part);
            }
            if let Some(mut s) = lua.app_data_mut::<Server>() {
                s.push_log(LogLine { level, message });
            }
            ok(lua, ())
        })?,
    )?;
    i.set(
        "setresp",
        packed(lua, |lua, args: Args| {
            if args.len() != 1 {
                return redis_err(lua, "ERR redis.setresp() requires one argument.");
            }
            match to_number(args.get(0).as_ref()) {
                Some(v) if v == 2.0 || v == 3.0 => {
                    if let Some(mut ctx) = lua.app_data_mut::<RunCtx>() {
                        ctx.resp = v as u8;
                    }
                    ok(lua, ())
                }
                _ => redis_err(lua, "ERR RESP version must be 2 or 3."),
            }
        })?,
    )?;
    i.set(
        "set_repl",
        packed(lua, |lua, args: Args| {
            if args.len() != 1 {
                return redis_err(lua, "ERR redis.set_repl() requires two arguments.");
            }
            match to_number(args.get(0).as_ref()) {
                Some(v) if (0.0..=3.0).contains(&v) && v.fract() == 0.0 => ok(lua, ()),
                _ => redis_err(lua, "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
            }
        })?,
    )?;
    i.set(
        "acl_check_cmd",
        packed(lua, |lua, args: Args| {
            let argv = match super::convert::lua_args(&args, super::budget::buffer_limit(lua)) {
                Ok(a) => a,
                Err(super::convert::ArgsError::TooLarge) => {
                    return Err(mlua::Error::MemoryError("not enough memory".into()))
                }
                Err(_) => {
                    return redis_err(
                        lua,
                        "ERR Please specify at least one argument for this redis lib call",
                    )
                }
            };
            match crate::commands::lookup(&argv[0]) {
                Some(spec) if crate::commands::arity_ok(spec.arity, argv.len()) => ok(lua, true),
                Some(_) => redis_err(
                    lua,
                    "ERR Wrong number of args calling Redis command from script",
                ),
                None => redis_err(lua, "ERR Invalid command passed to redis.acl_check_cmd()"),
            }
        })?,
    )?;
    let r1 = rng.clone();
    i.set(
        "random",
        packed(lua, move |lua, args: Args| {
            let r = r1.lock().map(|mut g| g.next_unit()).unwrap_or(0.0);
            let res = match args.len() {
                0 => Ok(r),
                1 => check_number(&args, 1, "random").and_then(|u| {
                    let u = c_int(u);
                    if u < 1 {
                        Err("bad argument #1 to 'random' (interval is empty)".into())
                    } else {
                        Ok((r * f64::from(u)).floor() + 1.0)
                    }
                }),
                2 => check_number(&args, 1, "random").and_then(|l| {
                    let u = c_int(check_number(&args, 2, "random")?);
                    let l = c_int(l);
                    if l > u {
                        Err("bad argument #2 to 'random' (interval is empty)".into())
                    } else {
                        Ok((r * (f64::from(u) - f64::from(l) + 1.0)).floor() + f64::from(l))
                    }
                }),
                _ => Err("wrong number of arguments".into()),
            };
            match res {
                Ok(v) => ok(lua, v),
                Err(e) => lua_err(lua, e),
            }
        })?,
    )?;
    i.set(
        "randomseed",
        packed(lua, move |lua, args: Args| {
            let r = check_number(&args, 1, "randomseed").map(|seed| {
                if let Ok(mut g) = rng.lock() {
                    g.seed(seed as i32);
                }
                MultiValue::new()
            });
            answer(lua, r)
        })?,
    )?;
    i.set(
        "frame",
        lua.create_function(|lua, level: usize| {
            Ok(lua
                .inspect_stack(level, |d| {
                    let src = d.source();
                    (
                        src.what.to_string(),
                        src.source.map(|s| s.into_owned()),
                        d.current_line().map(|l| l as i64).unwrap_or(-1),
                    )
                })
                .map_or((None, None, None), |(w, s, l)| (Some(w), s, Some(l))))
        })?,
    )?;
    Ok(())
}
