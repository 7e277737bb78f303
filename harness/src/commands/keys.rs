//! Key commands: DEL, EXISTS, TYPE, the EXPIRE family, TTL, PERSIST, DBSIZE, FLUSHALL.

use super::{done, int_arg, is};
use crate::reply::Reply;
use crate::server::Server;

pub(super) fn del(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    Reply::Int(a[1..].iter().filter(|k| s.db.remove(k, now)).count() as i64)
}

pub(super) fn exists(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    Reply::Int(a[1..].iter().filter(|k| s.db.exists(k, now)).count() as i64)
}

pub(super) fn type_cmd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let name =
        s.db.get_mut(&a[1], s.now_ms)
            .map_or("none", |e| e.value.type_name());
    Reply::Status(name.to_string())
}

#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_expire_flags(a: &[Vec<u8>]) -> Result<ExpireFlags, Reply> {
    let mut f = ExpireFlags::default();
    for opt in &a[3..] {
        if is(opt, "nx") {
            f.nx = true;
        } else if is(opt, "xx") {
            f.xx = true;
        } else if is(opt, "gt") {
            f.gt = true;
        } else if is(opt, "lt") {
            f.lt = true;
        } else {
            return Err(Reply::err(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(Reply::err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(Reply::err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

fn expire_generic(s: &mut Server, a: &[Vec<u8>], unit: i64, relative: bool, cmd: &str) -> Reply {
    done((|| {
        let flags = parse_expire_flags(a)?;
        let mut when = int_arg(&a[2])?;
        let bad = || Reply::err(format!("ERR invalid expire time in '{cmd}' command"));
        if unit == 1000 {
            if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
                return Err(bad());
            }
            when *= 1000;
        }
        let base = if relative { s.now_ms } else { 0 };
        if when > i64::MAX - base {
            return Err(bad());
        }
        when += base;
        let now = s.now_ms;
        let Some(entry) = s.db.get_mut(&a[1], now) else {
            return Ok(Reply::Int(0));
        };
        let cur = entry.expire_at_ms;
        let refuse = (flags.nx && cur.is_some())
            || (flags.xx && cur.is_none())
            || (flags.gt && cur.is_none_or(|c| when <= c))
            || (flags.lt && cur.is_some_and(|c| when >= c));
        if refuse {
            return Ok(Reply::Int(0));
        }
        if when <= now {
            s.db.remove(&a[1], now);
        } else {
            entry.expire_at_ms = Some(when);
        }
        Ok(Reply::Int(1))
    })())
}

pub(super) fn expire(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expire_generic(s, a, 1000, true, "expire")
}

pub(super) fn pexpire(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expire_generic(s, a, 1, true, "pexpire")
}

pub(super) fn expireat(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expire_generic(s, a, 1000, false, "expireat")
}

pub(super) fn pexpireat(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expire_generic(s, a, 1, false, "pexpireat")
}

/// -2 missing, -1 no expiry, else the remaining milliseconds (never negative).
fn remaining_ms(s: &mut Server, key: &[u8]) -> Option<Option<i64>> {
    let now = s.now_ms;
    s.db.get_mut(key, now)
        .map(|e| e.expire_at_ms.map(|t| (t - now).max(0)))
}

pub(super) fn ttl(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Int(match remaining_ms(s, &a[1]) {
        None => -2,
        Some(None) => -1,
        Some(Some(ms)) => (ms + 500) / 1000,
    })
}

pub(super) fn pttl(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Int(match remaining_ms(s, &a[1]) {
        None => -2,
        Some(None) => -1,
        Some(Some(ms)) => ms,
    })
}

fn expiretime_generic(s: &mut Server, a: &[Vec<u8>], unit: i64) -> Reply {
    let now = s.now_ms;
    Reply::Int(match s.db.get_mut(&a[1], now) {
        None => -2,
        Some(e) => e.expire_at_ms.map_or(-1, |t| t / unit),
    })
}

pub(super) fn expiretime(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expiretime_generic(s, a, 1000)
}

pub(super) fn pexpiretime(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    expiretime_generic(s, a, 1)
}

pub(super) fn persist(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    match s.db.get_mut(&a[1], now) {
        Some(e) if e.expire_at_ms.is_some() => {
            e.expire_at_ms = None;
            Reply::Int(1)
        }
        _ => Reply::Int(0),
    }
}

pub(super) fn dbsize(s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    Reply::Int(s.db.len(s.now_ms) as i64)
}

pub(super) fn flushall(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match &a[1..] {
        [] => {}
        [opt] if is(opt, "sync") || is(opt, "async") => {}
        _ => return Reply::err(crate::reply::errors::SYNTAX),
    }
    s.db.clear();
    Reply::ok()
}

pub(super) fn touch(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    exists(s, a)
}

fn rename_generic(s: &mut Server, a: &[Vec<u8>], nx: bool) -> Reply {
    let now = s.now_ms;
    let Some(entry) = s.db.get_mut(&a[1], now).map(|e| e.clone()) else {
        return Reply::err("ERR no such key");
    };
    if a[1] == a[2] {
        return if nx { Reply::Int(0) } else { Reply::ok() };
    }
    if nx && s.db.exists(&a[2], now) {
        return Reply::Int(0);
    }
    s.db.remove(&a[1], now);
    s.db.set(&a[2], entry.value, entry.expire_at_ms);
    if nx {
        Reply::Int(1)
    } else {
        Reply::ok()
    }
}

pub(super) fn rename(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    rename_generic(s, a, false)
}

pub(super) fn renamenx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    rename_generic(s, a, true)
}

/// `COPY source destination [DB n] [REPLACE]`; only database 0 exists offline.
pub(super) fn copy(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let mut replace = false;
        let mut db = 0i64;
        let mut j = 3;
        while j < a.len() {
            if is(&a[j], "replace") {
                replace = true;
            } else if is(&a[j], "db") && j + 1 < a.len() {
                db = match crate::number::parse_i64(&a[j + 1]) {
                    Some(n) if i32::try_from(n).is_ok() => n,
                    _ => return Err(Reply::err(crate::reply::errors::NOT_INTEGER)),
                };
                j += 1;
            } else {
                return Err(Reply::err(crate::reply::errors::SYNTAX));
            }
            j += 1;
        }
        if !(0..16).contains(&db) {
            return Err(Reply::err("ERR DB index is out of range"));
        }
        if db != 0 {
            return Err(Reply::err(
                "ERR harness: COPY to another database is not emulated (only database 0)",
            ));
        }
        if a[1] == a[2] {
            return Err(Reply::err(
                "ERR source and destination objects are the same",
            ));
        }
        let now = s.now_ms;
        s.db.check_copies("copy", &a[1..2]).map_err(Reply::Error)?;
        let Some(entry) = s.db.get_mut(&a[1], now).map(|e| e.clone()) else {
            return Ok(Reply::Int(0));
        };
        if s.db.exists(&a[2], now) && !replace {
            return Ok(Reply::Int(0));
        }
        s.db.set(&a[2], entry.value, entry.expire_at_ms);
        Ok(Reply::Int(1))
    })())
}

/// `OBJECT ENCODING key`: the encoding Redis 7.0 gives a value built by plain writes
/// (a string grown by APPEND, SETRANGE or SETBIT is `raw` in Redis whatever its length).
pub(super) fn object_encoding(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    use crate::keyspace::Value;
    let now = s.now_ms;
    let Some(e) = s.db.get_mut(&a[2], now) else {
        return Reply::Nil;
    };
    let small = |n: usize, longest: usize| n <= 128 && longest <= 64;
    let enc = match &e.value {
        Value::Str(v) if v.len() <= 20 && crate::number::parse_i64(v).is_some() => "int",
        Value::Str(v) if v.len() <= 44 => "embstr",
        Value::Str(_) => "raw",
        Value::Hash(h) => {
            let longest = h.iter().map(|(f, v)| f.len().max(v.len())).max();
            if small(h.len(), longest.unwrap_or(0)) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Value::List(_) => "quicklist",
        Value::Set(m) => {
            if super::set::is_intset(m) {
                "intset"
            } else {
                "hashtable"
            }
        }
        Value::ZSet(z) => {
            let longest = z.iter().map(|(m, _)| m.len()).max();
            if small(z.len(), longest.unwrap_or(0)) {
                "listpack"
            } else {
                "skiplist"
            }
        }
        Value::Stream(_) => "stream",
    };
    Reply::Bulk(enc.as_bytes().to_vec())
}
