//! The blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP),
//! LMPOP and ZMPOP, and WAIT, as Redis 7.0 runs them where a client may not block (inside
//! MULTI, in scripts): after Redis's argument checks in Redis's order, they answer at once,
//! a null when no key holds anything. `lua serve` blocks a client on that null (its
//! `serve/blocking.rs`) and runs the command again when another connection writes.

use super::{is, list, wrongtype, zset};
use crate::keyspace::Value;
use crate::reply::{errors, Reply};
use crate::server::Server;

/// A blocking command's timeout in milliseconds (0: forever), checked as Redis's
/// `getTimeoutFromObjectOrReply` checks seconds.
pub(crate) fn timeout_ms(arg: &[u8]) -> Result<u64, Reply> {
    let secs = crate::number::parse_f64(arg)
        .ok_or_else(|| Reply::err("ERR timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    if ms > i64::MAX as f64 {
        return Err(Reply::err("ERR timeout is out of range"));
    }
    if ms < 0.0 {
        return Err(Reply::err("ERR timeout is negative"));
    }
    Ok(ms as u64)
}

/// Where a blocking command's timeout is: its last argument, or the first for BLMPOP and
/// BZMPOP. `None` for other commands.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) fn timeout_index(argv: &[Vec<u8>]) -> Option<usize> {
    let name = String::from_utf8_lossy(argv.first()?).to_ascii_lowercase();
    match name.as_str() {
        "blpop" | "brpop" | "blmove" | "brpoplpush" | "bzpopmin" | "bzpopmax" => {
            Some(argv.len().checked_sub(1)?)
        }
        "blmpop" | "bzmpop" => Some(1),
        _ => None,
    }
}

/// How long a client may block on `argv`, in milliseconds (0: forever): a blocking pop's
/// timeout, or XREAD's and XREADGROUP's `BLOCK`. `None`: not a command that blocks, or one
/// with a timeout Redis refuses.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) fn block_ms(argv: &[Vec<u8>]) -> Option<u64> {
    match timeout_index(argv) {
        Some(at) => timeout_ms(argv.get(at)?).ok(),
        None => super::stream_group::block_ms(argv),
    }
}

/// Whether the null a blocking command answers on timeout is a null array (`*-1` in RESP2),
/// not a null bulk string (BLMOVE, BRPOPLPUSH).
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) fn null_is_array(argv: &[Vec<u8>]) -> bool {
    !(is(&argv[0], "blmove") || is(&argv[0], "brpoplpush"))
}

fn key_of<'a>(s: &mut Server, key: &'a [u8], list: bool) -> Result<Option<&'a [u8]>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::List(_)) if list => Ok(Some(key)),
        Some(Value::ZSet(_)) if !list => Ok(Some(key)),
        Some(_) => Err(wrongtype()),
    }
}

/// The first of `keys` holding a list (`list`) or a sorted set; WRONGTYPE at the first key
/// of another type before it.
fn first_ready<'a>(
    s: &mut Server,
    keys: &'a [Vec<u8>],
    list: bool,
) -> Result<Option<&'a [u8]>, Reply> {
    for k in keys {
        if let Some(k) = key_of(s, k, list)? {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// `[key, popped...]`: one element (BLPOP, BZPOPMIN) or `count` of them as an array (the
/// MPOP forms); None when no key holds any.
fn pop_first(
    s: &mut Server,
    keys: &[Vec<u8>],
    list: bool,
    left_or_min: bool,
    count: Option<u64>,
) -> Reply {
    let key = match first_ready(s, keys, list) {
        Ok(Some(k)) => k.to_vec(),
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let n = count.unwrap_or(1).to_string().into_bytes();
    let argv = [b"pop".to_vec(), key.clone(), n];
    let popped = match (list, left_or_min) {
        (true, true) => list::lpop(s, &argv),
        (true, false) => list::rpop(s, &argv),
        (false, true) => zset::zpopmin(s, &argv),
        (false, false) => zset::zpopmax(s, &argv),
    };
    let Reply::Array(items) = popped else {
        return popped;
    };
    let mut out = vec![Reply::Bulk(key)];
    match (count, list) {
        (None, _) => out.extend(items),
        (Some(_), true) => out.push(Reply::Array(items)),
        (Some(_), false) => {
            let mut pairs = Vec::new();
            let mut it = items.into_iter();
            while let (Some(m), Some(sc)) = (it.next(), it.next()) {
                pairs.push(Reply::Array(vec![m, sc]));
            }
            out.push(Reply::Array(pairs));
        }
    }
    Reply::Array(out)
}

fn blocking_pop(s: &mut Server, a: &[Vec<u8>], list: bool, left_or_min: bool) -> Reply {
    if let Err(e) = timeout_ms(&a[a.len() - 1]) {
        return e;
    }
    pop_first(s, &a[1..a.len() - 1], list, left_or_min, None)
}

pub(crate) fn blpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    blocking_pop(s, a, true, true)
}

pub(crate) fn brpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    blocking_pop(s, a, true, false)
}

pub(crate) fn bzpopmin(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    blocking_pop(s, a, false, true)
}

pub(crate) fn bzpopmax(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    blocking_pop(s, a, false, false)
}

fn range_arg(b: &[u8], what: &str) -> Result<u64, Reply> {
    match crate::number::parse_i64(b) {
        Some(n) if n >= 1 => Ok(n as u64),
        _ => Err(Reply::err(format!("ERR {what} should be greater than 0"))),
    }
}

/// LMPOP / BLMPOP / ZMPOP / BZMPOP: `numkeys` at `at`, checked as Redis's
/// `lmpopGenericCommand` / `zmpopGenericCommand` (numkeys, where, COUNT, then the timeout).
fn mpop(s: &mut Server, a: &[Vec<u8>], at: usize, list: bool) -> Reply {
    let mut run = || -> Result<Reply, Reply> {
        let numkeys = range_arg(&a[at], "numkeys")? as usize;
        let where_at = at.saturating_add(numkeys).saturating_add(1);
        if where_at >= a.len() {
            return Err(Reply::err(errors::SYNTAX));
        }
        let (first, second) = if list {
            ("left", "right")
        } else {
            ("min", "max")
        };
        let left_or_min = if is(&a[where_at], first) {
            true
        } else if is(&a[where_at], second) {
            false
        } else {
            return Err(Reply::err(errors::SYNTAX));
        };
        let mut count = None;
        let mut j = where_at + 1;
        while j < a.len() {
            if count.is_none() && is(&a[j], "count") && j + 1 < a.len() {
                count = Some(range_arg(&a[j + 1], "count")?);
                j += 2;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
        }
        if at == 2 {
            timeout_ms(&a[1])?;
        }
        Ok(pop_first(
            s,
            &a[at + 1..where_at],
            list,
            left_or_min,
            Some(count.unwrap_or(1)),
        ))
    };
    run().unwrap_or_else(|e| e)
}

pub(crate) fn lmpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    mpop(s, a, 1, true)
}

pub(crate) fn blmpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    mpop(s, a, 2, true)
}

pub(crate) fn zmpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    mpop(s, a, 1, false)
}

pub(crate) fn bzmpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    mpop(s, a, 2, false)
}

/// BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout.
pub(crate) fn blmove(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    for side in &a[3..5] {
        if !is(side, "left") && !is(side, "right") {
            return Reply::err(errors::SYNTAX);
        }
    }
    if let Err(e) = timeout_ms(&a[5]) {
        return e;
    }
    list::lmove(s, &a[..5])
}

/// BRPOPLPUSH src dst timeout.
pub(crate) fn brpoplpush(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if let Err(e) = timeout_ms(&a[3]) {
        return e;
    }
    list::rpoplpush(s, &a[..3])
}

/// WAIT numreplicas timeout: a server without replicas answers 0 (at once, where Redis
/// would block a non-zero `numreplicas` until the timeout).
pub(crate) fn wait(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if crate::number::parse_i64(&a[1]).is_none() {
        return Reply::err(errors::NOT_INTEGER);
    }
    match crate::number::parse_i64(&a[2]) {
        Some(n) if n < 0 => Reply::err("ERR timeout is negative"),
        Some(_) => Reply::Int(0),
        None => Reply::err("ERR timeout is not an integer or out of range"),
    }
}
