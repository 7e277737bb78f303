//! Redis's conversion rules between replies and Lua values, both ways (`script_lua.c`).

use mlua::{Lua, Table, Value};

use super::libargs::Args;

use crate::number::{format_g, lua_number_to_i64};
use crate::reply::Reply;

/// How deep a returned table may nest before the harness answers Redis's stack-limit error in
/// its place (it recurses on the caller's stack; Redis goes deeper).
const MAX_DEPTH: usize = 200;

/// A command reply as `redis.call` hands it to Lua under protocol `resp` (2 or 3).
pub(crate) fn reply_to_lua(lua: &Lua, r: Reply, resp: u8) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil if resp == 3 => Value::Nil,
        Reply::Nil => Value::Boolean(false),
        Reply::Status(s) => single(lua, "ok", Value::String(lua.create_string(&s)?))?,
        Reply::Error(e) => {
            // The order matters: cjson.encode of this table lists fields in hash order.
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(&e)?)?;
            t.raw_set("ignore_error_stats_update", true)?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, reply_to_lua(lua, item, resp)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) if resp == 3 => {
            // Not presized: Redis builds it with lua_newtable, and the hash part's size
            // decides the order `pairs` visits the keys in.
            let m = lua.create_table()?;
            for (k, v) in pairs {
                m.raw_set(reply_to_lua(lua, k, resp)?, reply_to_lua(lua, v, resp)?)?;
            }
            single(lua, "map", Value::Table(m))?
        }
        Reply::Map(pairs) => reply_to_lua(lua, Reply::Map(pairs).into_resp2(), resp)?,
        Reply::Double(d) if resp == 3 => single(lua, "double", Value::Number(d))?,
        Reply::Double(d) => {
            Value::String(lua.create_string(crate::number::format_double_reply(d))?)
        }
        Reply::Bool(b) if resp == 3 => Value::Boolean(b),
        Reply::BigNumber(n) if resp == 3 => {
            single(lua, "big_number", Value::String(lua.create_string(&n)?))?
        }
        Reply::Verbatim(format, text) if resp == 3 => {
            let v = lua.create_table_with_capacity(0, 2)?;
            v.raw_set("format", lua.create_string(&format)?)?;
            v.raw_set("string", lua.create_string(&text)?)?;
            single(lua, "verbatim_string", Value::Table(v))?
        }
        Reply::Set(items) if resp == 3 => {
            let t = lua.create_table()?;
            for item in items {
                t.raw_set(reply_to_lua(lua, item, resp)?, true)?;
            }
            single(lua, "set", Value::Table(t))?
        }
        other @ (Reply::Bool(_) | Reply::BigNumber(_) | Reply::Verbatim(..) | Reply::Set(_)) => {
            reply_to_lua(lua, other.into_resp2(), resp)?
        }
    })
}

fn single(lua: &Lua, field: &str, v: Value) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set(field, v)?;
    Ok(Value::Table(t))
}

/// Error and status texts cannot carry newlines on the wire: Redis maps them to spaces.
fn one_line(s: &[u8]) -> String {
    String::from_utf8_lossy(s)
        .trim_matches(['\r', '\n'])
        .replace(['\r', '\n'], " ")
}

/// What a script's return value becomes for the client (RESP2), under `redis.setresp(resp)`;
/// `None` when it would take more than `budget` bytes (a table can name one big string
/// millions of times).
pub(crate) fn lua_to_reply(v: &Value, resp: u8, budget: usize) -> Option<Reply> {
    let mut left = budget;
    to_reply(v, resp, 0, &mut left).ok()
}

/// `r` with every map flattened into an array, as scripts' maps reached a client before
/// RESP3 clients were served (doubles stay doubles).
pub(crate) fn flatten_maps(r: Reply) -> Reply {
    match r {
        Reply::Map(pairs) => Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [flatten_maps(k), flatten_maps(v)])
                .collect(),
        ),
        Reply::Array(items) => Reply::Array(items.into_iter().map(flatten_maps).collect()),
        other => other,
    }
}

/// Why a reply could not be built.
enum Stop {
    /// Past the byte budget.
    TooBig,
}

/// Bytes a reply element costs beyond its own bytes.
const ELEMENT_COST: usize = 16;

fn spend(left: &mut usize, n: usize) -> Result<(), Stop> {
    *left = left.checked_sub(n + ELEMENT_COST).ok_or(Stop::TooBig)?;
    Ok(())
}

/// The approximate bytes of `r` (its strings plus a fixed cost per element).
pub(crate) fn reply_size(r: &Reply) -> usize {
    ELEMENT_COST
        + match r {
            Reply::Bulk(b) => b.len(),
            Reply::Status(s) | Reply::Error(s) => s.len(),
            Reply::Array(items) => items.iter().map(reply_size).sum(),
            Reply::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| reply_size(k) + reply_size(v))
                .sum(),
            _ => 0,
        }
}

fn to_reply(v: &Value, resp: u8, depth: usize, left: &mut usize) -> Result<Reply, Stop> {
    if depth > MAX_DEPTH {
        // Redis's answer where its Lua stack ends (about 7,995 levels down), in place.
        return Ok(Reply::err("ERR reached lua stack limit"));
    }
    Ok(match v {
        Value::Nil => Reply::Nil,
        Value::Boolean(b) if resp == 3 => Reply::Bool(*b),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(lua_number_to_i64(*n)),
        Value::String(s) => {
            let b = s.as_bytes();
            spend(left, b.len())?;
            Reply::Bulk(b.to_vec())
        }
        Value::Table(t) => table_to_reply(t, resp, depth, left)?,
        _ => Reply::Nil,
    })
}

fn table_to_reply(t: &Table, resp: u8, depth: usize, left: &mut usize) -> Result<Reply, Stop> {
    spend(left, 0)?;
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Ok(Reply::Error(one_line(&e.as_bytes())));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Ok(Reply::Status(one_line(&s.as_bytes())));
    }
    match t.raw_get::<Value>("double") {
        Ok(Value::Number(d)) => return Ok(Reply::Double(d)),
        Ok(Value::Integer(i)) => return Ok(Reply::Double(i as f64)),
        _ => {}
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        spend(left, s.as_bytes().len())?;
        // A big number is one line: Redis turns CR and LF into spaces.
        return Ok(Reply::BigNumber(
            String::from_utf8_lossy(&s.as_bytes()).replace(['\r', '\n'], " "),
        ));
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        if let Ok(Value::String(s)) = v.raw_get::<Value>("string") {
            spend(left, s.as_bytes().len())?;
            let format = match v.raw_get::<Value>("format") {
                Ok(Value::String(f)) if f.as_bytes().len() == 3 => {
                    String::from_utf8_lossy(&f.as_bytes()).into_owned()
                }
                _ => "txt".to_string(),
            };
            return Ok(Reply::Verbatim(format, s.as_bytes().to_vec()));
        }
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        // A RESP2 client gets it flattened (`into_resp2`), a RESP3 client as a map.
        let mut out = Vec::new();
        for (k, v) in m.pairs::<Value, Value>().flatten() {
            out.push((
                to_reply(&k, resp, depth + 1, left)?,
                to_reply(&v, resp, depth + 1, left)?,
            ));
        }
        return Ok(Reply::Map(out));
    }
    if let Ok(Value::Table(set)) = t.raw_get::<Value>("set") {
        let mut out = Vec::new();
        for (k, _) in set.pairs::<Value, Value>().flatten() {
            out.push(to_reply(&k, resp, depth + 1, left)?);
        }
        return Ok(Reply::Set(out));
    }
    let mut out = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => out.push(to_reply(&v, resp, depth + 1, left)?),
        }
    }
    Ok(Reply::Array(out))
}

/// Why `redis.call`'s arguments could not become a command.
#[derive(Debug)]
pub(crate) enum ArgsError {
    /// No arguments at all.
    Empty,
    /// An argument that is neither a string nor a number.
    BadType,
    /// Copies of the arguments would take more than the bytes allowed.
    TooLarge,
}

/// `redis.call`'s arguments as a command: strings as they are, numbers with `%.17g` (7.0);
/// refused as soon as the copies add up to more than `max` bytes (one string named a hundred
/// times is a hundred copies), so no call holds more than `max` bytes of copies. Each argument
/// is read from the script once (a read through mlua costs as much as the copy).
pub(crate) fn lua_args(args: &Args, max: usize) -> Result<Vec<Vec<u8>>, ArgsError> {
    if args.is_empty() {
        return Err(ArgsError::Empty);
    }
    let mut total = 0usize;
    let mut bad = false;
    let mut argv = Vec::with_capacity(args.len());
    for v in args.iter() {
        total = total.saturating_add(match &v {
            Value::String(s) => s.as_bytes().len(),
            _ => 24,
        });
        if total > max {
            return Err(ArgsError::TooLarge);
        }
        if bad {
            continue;
        }
        match v {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(i) => argv.push(format_g(i as f64, 17).into_bytes()),
            Value::Number(n) => argv.push(format_g(n, 17).into_bytes()),
            _ => {
                // Too large still wins over a bad type, as when the sizes were added first.
                bad = true;
                argv = Vec::new();
            }
        }
    }
    if bad {
        return Err(ArgsError::BadType);
    }
    Ok(argv)
}

#[cfg(test)]
mod args_tests {
    use crate::{Harness, HarnessOptions, Reply};

    fn harness() -> Harness {
        Harness::with_options(HarnessOptions::new().memory_limit(1 << 20)).expect("harness")
    }

    #[test]
    fn arguments_become_a_command_in_one_read() {
        let mut h = harness();
        let r = h.eval(
            "redis.call('SET', KEYS[1], 1.5, 'PX', 60000) return redis.call('GET', KEYS[1])",
            &["k"],
            &[],
        );
        assert_eq!(r, Reply::Bulk(b"1.5".to_vec()));
    }

    #[test]
    fn a_bad_type_is_refused_and_too_many_bytes_win_over_it() {
        let mut h = harness();
        let r = h.eval("return redis.pcall('SET', {}, 'x')['err']", &[], &[]);
        assert_eq!(
            r,
            Reply::Bulk(
                b"ERR Lua redis lib command arguments must be strings or integers".to_vec()
            )
        );
        let r = h.eval(
            "local s = string.rep('x', 300000) return redis.pcall('SET', {}, s, s, s, s)",
            &[],
            &[],
        );
        assert!(
            matches!(&r, Reply::Error(e) if e.contains("memory")),
            "{r:?}"
        );
        assert_eq!(h.call(&["PING"]), Reply::Status("PONG".into()));
    }
}
