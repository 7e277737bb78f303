//! String commands: GET, SET and its options, counters, MGET/MSET, APPEND, STRLEN.

use super::{done, int_arg, is, wrongtype};
use crate::keyspace::Value;
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

/// The string at `key`: `Ok(None)` when missing, `Err` on the wrong type.
fn get_str(s: &mut Server, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    match s.db.get_mut(key, s.now_ms) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Str(v) => Ok(Some(v.clone())),
            _ => Err(wrongtype()),
        },
    }
}

fn bulk_or_nil(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::Nil, Reply::Bulk)
}

pub(super) fn get(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(get_str(s, &a[1]).map(bulk_or_nil))
}

#[derive(Default)]
struct SetOpts {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    /// EX/PX/EXAT/PXAT: (the argument, milliseconds per unit, absolute)
    expire: Option<(usize, i64, bool)>,
}

fn parse_set_opts(a: &[Vec<u8>]) -> Result<SetOpts, Reply> {
    let mut o = SetOpts::default();
    let mut j = 3;
    let syntax = || Reply::err(errors::SYNTAX);
    while j < a.len() {
        let opt = &a[j];
        let has_next = j + 1 < a.len();
        let exp_kind = o.expire.map(|(_, unit, abs)| (unit, abs));
        if is(opt, "nx") && !o.xx {
            o.nx = true;
        } else if is(opt, "xx") && !o.nx {
            o.xx = true;
        } else if is(opt, "get") {
            o.get = true;
        } else if is(opt, "keepttl") && o.expire.is_none() {
            o.keepttl = true;
        } else if has_next && !o.keepttl {
            let kind = if is(opt, "ex") {
                (1000, false)
            } else if is(opt, "px") {
                (1, false)
            } else if is(opt, "exat") {
                (1000, true)
            } else if is(opt, "pxat") {
                (1, true)
            } else {
                return Err(syntax());
            };
            if exp_kind.is_some_and(|k| k != kind) {
                return Err(syntax());
            }
            o.expire = Some((j + 1, kind.0, kind.1));
            j += 1;
        } else {
            return Err(syntax());
        }
        j += 1;
    }
    Ok(o)
}

/// The absolute expiry for an EX/PX/EXAT/PXAT argument, or Redis's error.
fn expire_ms(s: &Server, arg: &[u8], unit: i64, absolute: bool, cmd: &str) -> Result<i64, Reply> {
    let v = int_arg(arg)?;
    let bad = || Reply::err(format!("ERR invalid expire time in '{cmd}' command"));
    if v <= 0 || (unit == 1000 && v > i64::MAX / 1000) {
        return Err(bad());
    }
    let mut ms = v * unit;
    if !absolute {
        ms = ms.checked_add(s.now_ms).ok_or_else(bad)?;
    }
    if ms <= 0 {
        return Err(bad());
    }
    Ok(ms)
}

pub(super) fn set(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let o = parse_set_opts(a)?;
        let when = match o.expire {
            Some((idx, unit, abs)) => Some(expire_ms(s, &a[idx], unit, abs, "set")?),
            None => None,
        };
        let old = if o.get { get_str(s, &a[1])? } else { None };
        let found = s.db.exists(&a[1], s.now_ms);
        if (o.nx && found) || (o.xx && !found) {
            return Ok(if o.get { bulk_or_nil(old) } else { Reply::Nil });
        }
        let keep = if o.keepttl {
            s.db.get_mut(&a[1], s.now_ms).and_then(|e| e.expire_at_ms)
        } else {
            None
        };
        s.db.set(&a[1], Value::Str(a[2].clone()), when.or(keep));
        Ok(if o.get { bulk_or_nil(old) } else { Reply::ok() })
    })())
}

pub(super) fn setnx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if s.db.exists(&a[1], s.now_ms) {
        return Reply::Int(0);
    }
    s.db.set(&a[1], Value::Str(a[2].clone()), None);
    Reply::Int(1)
}

fn setex_generic(s: &mut Server, a: &[Vec<u8>], unit: i64, cmd: &str) -> Reply {
    done((|| {
        let when = expire_ms(s, &a[2], unit, false, cmd)?;
        s.db.set(&a[1], Value::Str(a[3].clone()), Some(when));
        Ok(Reply::ok())
    })())
}

pub(super) fn setex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    setex_generic(s, a, 1000, "setex")
}

pub(super) fn psetex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    setex_generic(s, a, 1, "psetex")
}

pub(super) fn getset(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let old = get_str(s, &a[1])?;
        s.db.set(&a[1], Value::Str(a[2].clone()), None);
        Ok(bulk_or_nil(old))
    })())
}

pub(super) fn getdel(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let old = get_str(s, &a[1])?;
        if old.is_some() {
            s.db.remove(&a[1], s.now_ms);
        }
        Ok(bulk_or_nil(old))
    })())
}

pub(super) fn mget(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Array(
        a[1..]
            .iter()
            .map(|k| bulk_or_nil(get_str(s, k).ok().flatten()))
            .collect(),
    )
}

pub(super) fn mset(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if a.len().is_multiple_of(2) {
        return super::wrong_arity("mset");
    }
    for pair in a[1..].chunks(2) {
        s.db.set(&pair[0], Value::Str(pair[1].clone()), None);
    }
    Reply::ok()
}

pub(super) fn msetnx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if a.len().is_multiple_of(2) {
        return super::wrong_arity("msetnx");
    }
    let now = s.now_ms;
    if a[1..].chunks(2).any(|p| s.db.exists(&p[0], now)) {
        return Reply::Int(0);
    }
    for pair in a[1..].chunks(2) {
        s.db.set(&pair[0], Value::Str(pair[1].clone()), None);
    }
    Reply::Int(1)
}

pub(super) fn append(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match s.db.get_mut(&a[1], s.now_ms) {
        None => {
            s.db.set(&a[1], Value::Str(a[2].clone()), None);
            Reply::Int(a[2].len() as i64)
        }
        Some(e) => match &mut e.value {
            Value::Str(v) if v.len() + a[2].len() > crate::keyspace::MAX_STRING => {
                Reply::err(errors::STRING_TOO_LONG)
            }
            Value::Str(v) => {
                v.extend_from_slice(&a[2]);
                Reply::Int(v.len() as i64)
            }
            _ => wrongtype(),
        },
    }
}

pub(super) fn strlen(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(get_str(s, &a[1]).map(|v| Reply::Int(v.map_or(0, |v| v.len() as i64))))
}

/// Adds `by` to the integer at `key`, keeping its TTL.
fn incr_by(s: &mut Server, key: &[u8], by: i64) -> Reply {
    done((|| {
        let (cur, ttl) = match s.db.get_mut(key, s.now_ms) {
            None => (0, None),
            Some(e) => match &e.value {
                Value::Str(v) => (
                    number::parse_i64(v).ok_or_else(|| Reply::err(errors::NOT_INTEGER))?,
                    e.expire_at_ms,
                ),
                _ => return Err(wrongtype()),
            },
        };
        let new = cur
            .checked_add(by)
            .ok_or_else(|| Reply::err(errors::OVERFLOW))?;
        s.db.set(key, Value::Str(new.to_string().into_bytes()), ttl);
        Ok(Reply::Int(new))
    })())
}

pub(super) fn incr(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    incr_by(s, &a[1], 1)
}

pub(super) fn decr(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    incr_by(s, &a[1], -1)
}

pub(super) fn incrby(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match int_arg(&a[2]) {
        Ok(by) => incr_by(s, &a[1], by),
        Err(e) => e,
    }
}

pub(super) fn decrby(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match int_arg(&a[2]) {
        Ok(i64::MIN) => Reply::err("ERR decrement would overflow"),
        Ok(by) => incr_by(s, &a[1], -by),
        Err(e) => e,
    }
}

pub(super) fn incrbyfloat(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (cur, ttl) = match s.db.get_mut(&a[1], s.now_ms) {
            None => (b"0".to_vec(), None),
            Some(e) => match &e.value {
                Value::Str(v) => (v.clone(), e.expire_at_ms),
                _ => return Err(wrongtype()),
            },
        };
        if !crate::decimal::is_long_double(&cur) || !crate::decimal::is_long_double(&a[2]) {
            return Err(Reply::err(errors::NOT_FLOAT));
        }
        let text = crate::decimal::add_long_double(&cur, &a[2])
            .ok_or_else(|| Reply::err("ERR increment would produce NaN or Infinity"))?;
        s.db.set(&a[1], Value::Str(text.clone().into_bytes()), ttl);
        Ok(Reply::Bulk(text.into_bytes()))
    })())
}

/// Redis's `proto-max-bulk-len` default: the largest string SETRANGE and SETBIT may make.
pub(crate) const MAX_STRING: i64 = 512 * 1024 * 1024;

/// `checkStringLength`: refuses a string longer than [`MAX_STRING`].
pub(crate) fn check_string_length(offset: i64, append: usize) -> Result<(), Reply> {
    if offset.saturating_add(append as i64) > MAX_STRING {
        return Err(Reply::err(
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    Ok(())
}

pub(super) fn getrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let mut start = int_arg(&a[2])?;
        let mut end = int_arg(&a[3])?;
        let Some(v) = get_str(s, &a[1])? else {
            return Ok(Reply::Bulk(vec![]));
        };
        let len = v.len() as i64;
        if start < 0 && end < 0 && start > end {
            return Ok(Reply::Bulk(vec![]));
        }
        if start < 0 {
            start += len;
        }
        if end < 0 {
            end += len;
        }
        start = start.max(0);
        end = end.max(0);
        if end >= len {
            end = len - 1;
        }
        if start > end || len == 0 {
            return Ok(Reply::Bulk(vec![]));
        }
        Ok(Reply::Bulk(v[start as usize..=end as usize].to_vec()))
    })())
}

pub(super) fn setrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let offset = int_arg(&a[2])?;
        if offset < 0 {
            return Err(Reply::err("ERR offset is out of range"));
        }
        let value = &a[3];
        let now = s.now_ms;
        let cur = get_str(s, &a[1])?;
        let Some(mut cur) = cur else {
            if value.is_empty() {
                return Ok(Reply::Int(0));
            }
            check_string_length(offset, value.len())?;
            let mut v = vec![0u8; offset as usize];
            v.extend_from_slice(value);
            let n = v.len();
            s.db.set(&a[1], Value::Str(v), None);
            return Ok(Reply::Int(n as i64));
        };
        if value.is_empty() {
            return Ok(Reply::Int(cur.len() as i64));
        }
        check_string_length(offset, value.len())?;
        let end = offset as usize + value.len();
        if cur.len() < end {
            cur.resize(end, 0);
        }
        cur[offset as usize..end].copy_from_slice(value);
        let n = cur.len();
        if let Some(e) = s.db.get_mut(&a[1], now) {
            e.value = Value::Str(cur);
        }
        Ok(Reply::Int(n as i64))
    })())
}

pub(super) fn getex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        // (argument index, ms per unit, absolute) or PERSIST
        let mut expire: Option<(usize, i64, bool)> = None;
        let mut persist = false;
        let mut j = 2;
        while j < a.len() {
            let has_next = j + 1 < a.len();
            let kind = if is(&a[j], "ex") {
                Some((1000, false))
            } else if is(&a[j], "px") {
                Some((1, false))
            } else if is(&a[j], "exat") {
                Some((1000, true))
            } else if is(&a[j], "pxat") {
                Some((1, true))
            } else {
                None
            };
            match kind {
                Some((unit, abs)) if has_next && expire.is_none() && !persist => {
                    expire = Some((j + 1, unit, abs));
                    j += 1;
                }
                None if is(&a[j], "persist") && expire.is_none() && !persist => persist = true,
                _ => return Err(Reply::err(errors::SYNTAX)),
            }
            j += 1;
        }
        let Some(v) = get_str(s, &a[1])? else {
            return Ok(Reply::Nil);
        };
        let now = s.now_ms;
        if let Some((idx, unit, abs)) = expire {
            let when = expire_ms(s, &a[idx], unit, abs, "getex")?;
            if abs && when <= now {
                s.db.remove(&a[1], now);
            } else if let Some(e) = s.db.get_mut(&a[1], now) {
                e.expire_at_ms = Some(when);
            }
        } else if persist {
            if let Some(e) = s.db.get_mut(&a[1], now) {
                e.expire_at_ms = None;
            }
        }
        Ok(Reply::Bulk(v))
    })())
}
