//! Set commands.
//!
//! Order: Redis 7.0 keeps a set of at most 512 integers as a sorted `intset` and answers in
//! ascending order; every other set is a hash table answered in an order that changes with the
//! table's seed. The harness answers integer sets as Redis does, and every other set in bytewise
//! order (a documented, deterministic stand-in for Redis's hash order). Random picks (SPOP,
//! SRANDMEMBER) take members in that same order.

use std::collections::HashSet;

use super::{done, int_arg, is, wrongtype};
use crate::keyspace::Value;
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

type Set = HashSet<Vec<u8>>;

/// Redis's `set-max-intset-entries`.
const MAX_INTSET_ENTRIES: usize = 512;

fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a Set>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Set(m)) => Ok(Some(m)),
        Some(_) => Err(wrongtype()),
    }
}

/// Whether Redis would keep `set` as an intset.
pub(crate) fn is_intset(set: &Set) -> bool {
    set.len() <= MAX_INTSET_ENTRIES && set.iter().all(|m| number::parse_i64(m).is_some())
}

/// The members in the order the harness answers (see the module doc).
pub(crate) fn ordered(set: &Set) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = set.iter().cloned().collect();
    if is_intset(set) {
        v.sort_by_key(|m| number::parse_i64(m).unwrap_or_default());
    } else {
        v.sort();
    }
    v
}

fn array(set: &Set) -> Reply {
    Reply::Array(ordered(set).into_iter().map(Reply::Bulk).collect())
}

pub(super) fn sadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    if s.db.get_mut(&a[1], now).is_none() {
        s.db.set(&a[1], Value::Set(HashSet::new()), None);
    }
    match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        Some(Value::Set(m)) => {
            Reply::Int(a[2..].iter().filter(|v| m.insert(v.to_vec())).count() as i64)
        }
        _ => wrongtype(),
    }
}

pub(super) fn srem(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => 0,
        Some(Value::Set(m)) => a[2..].iter().filter(|v| m.remove(v.as_slice())).count(),
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    Reply::Int(n as i64)
}

pub(super) fn sismember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => Reply::Int(i64::from(m.is_some_and(|m| m.contains(a[2].as_slice())))),
        Err(e) => e,
    }
}

pub(super) fn smismember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => Reply::Array(
            a[2..]
                .iter()
                .map(|v| Reply::Int(i64::from(m.is_some_and(|m| m.contains(v.as_slice())))))
                .collect(),
        ),
        Err(e) => e,
    }
}

pub(super) fn scard(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => Reply::Int(m.map_or(0, |m| m.len() as i64)),
        Err(e) => e,
    }
}

pub(super) fn smembers(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => m.map_or(Reply::Array(vec![]), array),
        Err(e) => e,
    }
}

/// Every set named in `keys` (a missing key is `None`), or WRONGTYPE if any is not a set;
/// the copies must fit in the keyspace's room first (a key named 1,000 times is copied 1,000
/// times).
fn sets(s: &mut Server, name: &[u8], keys: &[Vec<u8>]) -> Result<Vec<Option<Set>>, Reply> {
    s.db.check_copies(&String::from_utf8_lossy(name), keys)
        .map_err(Reply::Error)?;
    keys.iter()
        .map(|k| read(s, k).map(|m| m.cloned()))
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

fn combine(sets: Vec<Option<Set>>, op: SetOp) -> Set {
    let mut it = sets.into_iter();
    let first = it.next().flatten().unwrap_or_default();
    match op {
        SetOp::Inter => it.fold(first, |acc, s| {
            let s = s.unwrap_or_default();
            acc.into_iter().filter(|m| s.contains(m)).collect()
        }),
        SetOp::Union => it.fold(first, |mut acc, s| {
            acc.extend(s.unwrap_or_default());
            acc
        }),
        SetOp::Diff => it.fold(first, |mut acc, s| {
            for m in s.unwrap_or_default() {
                acc.remove(&m);
            }
            acc
        }),
    }
}

fn set_op(s: &mut Server, name: &[u8], keys: &[Vec<u8>], op: SetOp) -> Result<Set, Reply> {
    let all = sets(s, name, keys)?;
    if op == SetOp::Inter && all.iter().any(Option::is_none) {
        return Ok(Set::new());
    }
    Ok(combine(all, op))
}

fn store(s: &mut Server, dst: &[u8], result: Set) -> Reply {
    let n = result.len() as i64;
    let now = s.now_ms;
    s.db.remove(dst, now);
    if n > 0 {
        s.db.set(dst, Value::Set(result), None);
    }
    Reply::Int(n)
}

pub(super) fn sinter(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(set_op(s, &a[0], &a[1..], SetOp::Inter).map(|r| array(&r)))
}

pub(super) fn sunion(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(set_op(s, &a[0], &a[1..], SetOp::Union).map(|r| array(&r)))
}

pub(super) fn sdiff(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(set_op(s, &a[0], &a[1..], SetOp::Diff).map(|r| array(&r)))
}

fn op_store(s: &mut Server, a: &[Vec<u8>], op: SetOp) -> Reply {
    match set_op(s, &a[0], &a[2..], op) {
        Ok(r) => store(s, &a[1], r),
        Err(e) => e,
    }
}

pub(super) fn sinterstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    op_store(s, a, SetOp::Inter)
}

pub(super) fn sunionstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    op_store(s, a, SetOp::Union)
}

pub(super) fn sdiffstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    op_store(s, a, SetOp::Diff)
}

pub(super) fn sintercard(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let numkeys = match number::parse_i64(&a[1]) {
            Some(n) if n >= 1 => n as usize,
            _ => return Err(Reply::err("ERR numkeys should be greater than 0")),
        };
        if numkeys > a.len() - 2 {
            return Err(Reply::err(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        let mut limit = 0usize;
        let mut j = 2 + numkeys;
        while j < a.len() {
            if is(&a[j], "limit") && j + 1 < a.len() {
                j += 1;
                limit = match number::parse_i64(&a[j]) {
                    Some(n) if n >= 0 => n as usize,
                    _ => return Err(Reply::err("ERR LIMIT can't be negative")),
                };
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            j += 1;
        }
        let n = set_op(s, &a[0], &a[2..2 + numkeys], SetOp::Inter)?.len();
        Ok(Reply::Int(if limit > 0 { n.min(limit) } else { n } as i64))
    })())
}

pub(super) fn smove(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let now = s.now_ms;
        if s.db.get_mut(&a[1], now).is_none() {
            return Ok(Reply::Int(0));
        }
        read(s, &a[1])?;
        read(s, &a[2])?;
        if a[1] == a[2] {
            return Ok(Reply::Int(i64::from(
                read(s, &a[1])?.is_some_and(|m| m.contains(&a[3])),
            )));
        }
        let removed = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            Some(Value::Set(m)) => m.remove(&a[3]),
            _ => false,
        };
        if !removed {
            return Ok(Reply::Int(0));
        }
        s.db.drop_if_empty(&a[1]);
        if s.db.get_mut(&a[2], now).is_none() {
            s.db.set(&a[2], Value::Set(Set::new()), None);
        }
        if let Some(Value::Set(m)) = s.db.get_mut(&a[2], now).map(|e| &mut e.value) {
            m.insert(a[3].clone());
        }
        Ok(Reply::Int(1))
    })())
}

/// `count` for SPOP / SRANDMEMBER: `None` without one.
fn count_arg(a: &[Vec<u8>]) -> Result<Option<i64>, Reply> {
    match a.len() {
        2 => Ok(None),
        3 => int_arg(&a[2]).map(Some),
        _ => Err(Reply::err(errors::SYNTAX)),
    }
}

/// The most members a negative SRANDMEMBER count may ask for (Redis would try any).
const MAX_REPEATS: u64 = 10_000_000;

pub(super) fn spop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let count = match a.len() {
            2 => None,
            3 => match number::parse_i64(&a[2]) {
                Some(c) if c >= 0 => Some(c),
                _ => return Err(Reply::err("ERR value is out of range, must be positive")),
            },
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        let Some(set) = read(s, &a[1])? else {
            return Ok(match count {
                None => Reply::Nil,
                Some(_) => Reply::Array(vec![]),
            });
        };
        let order = ordered(set);
        let take = count.map_or(1, |c| c as usize).min(order.len());
        let picked: Vec<Vec<u8>> = order.into_iter().take(take).collect();
        let now = s.now_ms;
        if let Some(Value::Set(m)) = s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            for p in &picked {
                m.remove(p);
            }
        }
        s.db.drop_if_empty(&a[1]);
        Ok(match count {
            None => picked.into_iter().next().map_or(Reply::Nil, Reply::Bulk),
            Some(_) => Reply::Array(picked.into_iter().map(Reply::Bulk).collect()),
        })
    })())
}

pub(super) fn srandmember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let count = count_arg(a)?;
        let Some(set) = read(s, &a[1])? else {
            return Ok(match count {
                None => Reply::Nil,
                Some(_) => Reply::Array(vec![]),
            });
        };
        let order = ordered(set);
        Ok(match count {
            None => order.into_iter().next().map_or(Reply::Nil, Reply::Bulk),
            Some(c) if c >= 0 => Reply::Array(
                order
                    .into_iter()
                    .take(c as usize)
                    .map(Reply::Bulk)
                    .collect(),
            ),
            Some(c) if c.unsigned_abs() > MAX_REPEATS => {
                return Err(Reply::err(format!(
                    "ERR harness: SRANDMEMBER with a count below -{MAX_REPEATS} is not emulated"
                )))
            }
            Some(c) => Reply::Array(
                order
                    .iter()
                    .cycle()
                    .take(c.unsigned_abs() as usize)
                    .cloned()
                    .map(Reply::Bulk)
                    .collect(),
            ),
        })
    })())
}
