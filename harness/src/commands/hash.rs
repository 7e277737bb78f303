//! Hash commands.

use super::{done, int_arg, wrong_arity, wrongtype};
use crate::keyspace::{OrderedHash, Value};
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

/// The hash at `key` for reading: `Ok(None)` when missing.
fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a OrderedHash>, Reply> {
    match s.db.get_mut(key, s.now_ms) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Hash(h) => Ok(Some(h)),
            _ => Err(wrongtype()),
        },
    }
}

/// The hash at `key` for writing, created empty when missing.
fn write<'a>(s: &'a mut Server, key: &[u8]) -> Result<&'a mut OrderedHash, Reply> {
    let now = s.now_ms;
    if s.db.get_mut(key, now).is_none() {
        s.db.set(key, Value::Hash(OrderedHash::default()), None);
    }
    match s.db.get_mut(key, now).map(|e| &mut e.value) {
        Some(Value::Hash(h)) => Ok(h),
        _ => Err(wrongtype()),
    }
}

fn hset_generic(s: &mut Server, a: &[Vec<u8>], name: &str) -> Result<i64, Reply> {
    if a.len() % 2 == 1 {
        return Err(wrong_arity(name));
    }
    let h = write(s, &a[1])?;
    Ok(a[2..]
        .chunks(2)
        .filter(|p| h.insert(&p[0], p[1].clone()))
        .count() as i64)
}

pub(super) fn hset(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(hset_generic(s, a, "hset").map(Reply::Int))
}

pub(super) fn hmset(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(hset_generic(s, a, "hmset").map(|_| Reply::ok()))
}

pub(super) fn hsetnx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let h = write(s, &a[1])?;
        if h.get(&a[2]).is_some() {
            return Ok(Reply::Int(0));
        }
        h.insert(&a[2], a[3].clone());
        Ok(Reply::Int(1))
    })())
}

pub(super) fn hget(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| {
        h.and_then(|h| h.get(&a[2]))
            .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
    }))
}

pub(super) fn hmget(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| {
        Reply::Array(
            a[2..]
                .iter()
                .map(|f| {
                    h.and_then(|h| h.get(f))
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                })
                .collect(),
        )
    }))
}

pub(super) fn hdel(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => 0,
        Some(Value::Hash(h)) => a[2..].iter().filter(|f| h.remove(f)).count(),
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    Reply::Int(n as i64)
}

pub(super) fn hexists(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| Reply::Int(i64::from(h.is_some_and(|h| h.get(&a[2]).is_some())))))
}

pub(super) fn hincrby(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let by = int_arg(&a[3])?;
        let h = write(s, &a[1])?;
        let cur = match h.get(&a[2]) {
            None => 0,
            Some(v) => number::parse_i64(v)
                .ok_or_else(|| Reply::err("ERR hash value is not an integer"))?,
        };
        let new = cur
            .checked_add(by)
            .ok_or_else(|| Reply::err(errors::OVERFLOW))?;
        h.insert(&a[2], new.to_string().into_bytes());
        Ok(Reply::Int(new))
    })())
}

pub(super) fn hgetall(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| {
        Reply::Map(
            h.into_iter()
                .flat_map(|h| h.iter())
                .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                .collect(),
        )
    }))
}

pub(super) fn hkeys(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| {
        Reply::Array(
            h.into_iter()
                .flat_map(|h| h.iter())
                .map(|(f, _)| Reply::Bulk(f.clone()))
                .collect(),
        )
    }))
}

pub(super) fn hvals(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| {
        Reply::Array(
            h.into_iter()
                .flat_map(|h| h.iter())
                .map(|(_, v)| Reply::Bulk(v.clone()))
                .collect(),
        )
    }))
}

pub(super) fn hlen(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|h| Reply::Int(h.map_or(0, |h| h.len() as i64))))
}

pub(super) fn hincrbyfloat(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        if !crate::decimal::is_long_double(&a[3]) {
            return Err(Reply::err(errors::NOT_FLOAT));
        }
        if number::parse_f64(&a[3]).is_some_and(f64::is_infinite) {
            return Err(Reply::err("ERR value is NaN or Infinity"));
        }
        let h = write(s, &a[1])?;
        let cur = match h.get(&a[2]) {
            None => b"0".to_vec(),
            Some(v) if crate::decimal::is_long_double(v) => v.clone(),
            Some(_) => return Err(Reply::err("ERR hash value is not a float")),
        };
        let text = crate::decimal::add_long_double(&cur, &a[3])
            .ok_or_else(|| Reply::err("ERR increment would produce NaN or Infinity"))?;
        h.insert(&a[2], text.clone().into_bytes());
        Ok(Reply::Bulk(text.into_bytes()))
    })())
}

pub(super) fn hstrlen(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(h) => Reply::Int(h.and_then(|h| h.get(&a[2])).map_or(0, |v| v.len() as i64)),
        Err(e) => e,
    }
}

/// `HRANDFIELD key [count [WITHVALUES]]`. Redis picks at random; the harness picks in the
/// hash's order (the first field; the first `count`; for a negative count, fields in order
/// over and over). A count covering the whole hash answers it whole, in order, as Redis does.
pub(super) fn hrandfield(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        if a.len() == 2 {
            return Ok(read(s, &a[1])?
                .and_then(|h| h.iter().next().map(|(f, _)| Reply::Bulk(f.clone())))
                .unwrap_or(Reply::Nil));
        }
        let count = match number::parse_i64(&a[2]) {
            Some(c) if c != i64::MIN => c,
            Some(_) => {
                return Err(Reply::err(
                    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                ))
            }
            None => return Err(Reply::err(errors::NOT_INTEGER)),
        };
        let with_values = match a.len() {
            3 => false,
            4 if a[3].eq_ignore_ascii_case(b"withvalues") => {
                if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                    return Err(Reply::err("ERR value is out of range"));
                }
                true
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        let Some(h) = read(s, &a[1])? else {
            return Ok(Reply::Array(vec![]));
        };
        let fields: Vec<(&Vec<u8>, &Vec<u8>)> = h.iter().collect();
        let n = if count >= 0 {
            (count as usize).min(fields.len())
        } else {
            let n = count.unsigned_abs();
            if n > 10_000_000 {
                return Err(Reply::err(
                    "ERR harness: HRANDFIELD with a count below -10000000 is not emulated",
                ));
            }
            n as usize
        };
        let mut out = Vec::new();
        for (f, v) in fields.iter().cycle().take(n) {
            out.push(Reply::Bulk(f.to_vec()));
            if with_values {
                out.push(Reply::Bulk(v.to_vec()));
            }
        }
        Ok(Reply::Array(out))
    })())
}
