//! List commands: LPUSH, RPUSH, LPOP, RPOP, LLEN, LRANGE.

use std::collections::VecDeque;

use super::{done, int_arg, wrong_arity, wrongtype};
use crate::keyspace::Value;
use crate::number;
use crate::reply::Reply;
use crate::server::Server;

fn push(s: &mut Server, a: &[Vec<u8>], left: bool) -> Reply {
    let now = s.now_ms;
    if s.db.get_mut(&a[1], now).is_none() {
        s.db.set(&a[1], Value::List(VecDeque::new()), None);
    }
    match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        Some(Value::List(l)) => {
            for v in &a[2..] {
                if left {
                    l.push_front(v.clone());
                } else {
                    l.push_back(v.clone());
                }
            }
            Reply::Int(l.len() as i64)
        }
        _ => wrongtype(),
    }
}

pub(super) fn lpush(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    push(s, a, true)
}

pub(super) fn rpush(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    push(s, a, false)
}

fn pop(s: &mut Server, a: &[Vec<u8>], left: bool, name: &str) -> Reply {
    if a.len() > 3 {
        return wrong_arity(name);
    }
    let count = match a.get(2) {
        None => None,
        Some(c) => match number::parse_i64(c) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
    };
    let now = s.now_ms;
    let reply = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => return Reply::Nil,
        Some(Value::List(l)) => match count {
            None => {
                let v = if left { l.pop_front() } else { l.pop_back() };
                v.map_or(Reply::Nil, Reply::Bulk)
            }
            Some(n) => Reply::Array(
                (0..n)
                    .map_while(|_| if left { l.pop_front() } else { l.pop_back() })
                    .map(Reply::Bulk)
                    .collect(),
            ),
        },
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    reply
}

pub(super) fn lpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    pop(s, a, true, "lpop")
}

pub(super) fn rpop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    pop(s, a, false, "rpop")
}

pub(super) fn llen(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match s.db.get_mut(&a[1], s.now_ms).map(|e| &e.value) {
        None => Reply::Int(0),
        Some(Value::List(l)) => Reply::Int(l.len() as i64),
        Some(_) => wrongtype(),
    }
}

/// Redis's index clamping for LRANGE and ZRANGE: the inclusive range, or `None` when empty.
pub(crate) fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((start as usize, end as usize))
}

pub(super) fn lrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let start = int_arg(&a[2])?;
        let end = int_arg(&a[3])?;
        match s.db.get_mut(&a[1], s.now_ms).map(|e| &e.value) {
            None => Ok(Reply::Array(vec![])),
            Some(Value::List(l)) => Ok(Reply::Array(match clamp_range(start, end, l.len()) {
                None => vec![],
                Some((lo, hi)) => l.range(lo..=hi).map(|v| Reply::Bulk(v.clone())).collect(),
            })),
            Some(_) => Err(wrongtype()),
        }
    })())
}

pub(super) fn lindex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let idx = int_arg(&a[2])?;
        match s.db.get_mut(&a[1], s.now_ms).map(|e| &e.value) {
            None => Ok(Reply::Nil),
            Some(Value::List(l)) => {
                let i = if idx < 0 { l.len() as i64 + idx } else { idx };
                Ok(usize::try_from(i)
                    .ok()
                    .and_then(|i| l.get(i))
                    .map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
            }
            Some(_) => Err(wrongtype()),
        }
    })())
}

pub(super) fn ltrim(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let start = int_arg(&a[2])?;
        let end = int_arg(&a[3])?;
        let now = s.now_ms;
        match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => return Ok(Reply::ok()),
            Some(Value::List(l)) => {
                let kept: VecDeque<Vec<u8>> = match clamp_range(start, end, l.len()) {
                    None => VecDeque::new(),
                    Some((lo, hi)) => l.range(lo..=hi).cloned().collect(),
                };
                *l = kept;
            }
            Some(_) => return Err(wrongtype()),
        }
        s.db.drop_if_empty(&a[1]);
        Ok(Reply::ok())
    })())
}

pub(super) fn lrem(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let count = int_arg(&a[2])?;
        let now = s.now_ms;
        let removed = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => 0,
            Some(Value::List(l)) => {
                let limit = if count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let mut removed = 0;
                let mut keep = vec![true; l.len()];
                let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
                    Box::new((0..l.len()).rev())
                } else {
                    Box::new(0..l.len())
                };
                for i in order {
                    if removed == limit {
                        break;
                    }
                    if l[i] == a[3] {
                        keep[i] = false;
                        removed += 1;
                    }
                }
                let mut i = 0;
                l.retain(|_| {
                    i += 1;
                    keep[i - 1]
                });
                removed
            }
            Some(_) => return Err(wrongtype()),
        };
        s.db.drop_if_empty(&a[1]);
        Ok(Reply::Int(removed as i64))
    })())
}

/// LEFT or RIGHT, as `getListPositionFromObjectOrReply` reads it.
fn side(b: &[u8]) -> Result<bool, Reply> {
    if super::is(b, "left") {
        Ok(true)
    } else if super::is(b, "right") {
        Ok(false)
    } else {
        Err(Reply::err(crate::reply::errors::SYNTAX))
    }
}

fn lmove_generic(s: &mut Server, src: &[u8], dst: &[u8], from_left: bool, to_left: bool) -> Reply {
    let now = s.now_ms;
    match s.db.get_mut(src, now).map(|e| &e.value) {
        None => return Reply::Nil,
        Some(Value::List(_)) => {}
        Some(_) => return wrongtype(),
    }
    match s.db.get_mut(dst, now).map(|e| &e.value) {
        None | Some(Value::List(_)) => {}
        Some(_) => return wrongtype(),
    }
    let value = match s.db.get_mut(src, now).map(|e| &mut e.value) {
        Some(Value::List(l)) => {
            if from_left {
                l.pop_front()
            } else {
                l.pop_back()
            }
        }
        _ => None,
    };
    let Some(value) = value else {
        return Reply::Nil;
    };
    if src == dst {
        // A rotation in place, as Redis does it: the key (and its TTL) never goes away, even
        // when the list has one element.
        if let Some(Value::List(l)) = s.db.get_mut(src, now).map(|e| &mut e.value) {
            if to_left {
                l.push_front(value.clone());
            } else {
                l.push_back(value.clone());
            }
        }
        return Reply::Bulk(value);
    }
    s.db.drop_if_empty(src);
    if s.db.get_mut(dst, now).is_none() {
        s.db.set(dst, Value::List(VecDeque::new()), None);
    }
    if let Some(Value::List(l)) = s.db.get_mut(dst, now).map(|e| &mut e.value) {
        if to_left {
            l.push_front(value.clone());
        } else {
            l.push_back(value.clone());
        }
    }
    Reply::Bulk(value)
}

pub(super) fn rpoplpush(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    lmove_generic(s, &a[1], &a[2], false, true)
}

pub(super) fn lmove(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match (side(&a[3]), side(&a[4])) {
        (Ok(from), Ok(to)) => lmove_generic(s, &a[1], &a[2], from, to),
        (Err(e), _) | (_, Err(e)) => e,
    }
}

fn pushx(s: &mut Server, a: &[Vec<u8>], left: bool) -> Reply {
    let now = s.now_ms;
    match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => Reply::Int(0),
        Some(Value::List(l)) => {
            for v in &a[2..] {
                if left {
                    l.push_front(v.clone());
                } else {
                    l.push_back(v.clone());
                }
            }
            Reply::Int(l.len() as i64)
        }
        Some(_) => wrongtype(),
    }
}

pub(super) fn lpushx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    pushx(s, a, true)
}

pub(super) fn rpushx(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    pushx(s, a, false)
}

pub(super) fn lset(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let idx = int_arg(&a[2])?;
        let now = s.now_ms;
        match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => Err(Reply::err("ERR no such key")),
            Some(Value::List(l)) => {
                let i = if idx < 0 { l.len() as i64 + idx } else { idx };
                match usize::try_from(i).ok().and_then(|i| l.get_mut(i)) {
                    Some(slot) => {
                        *slot = a[3].clone();
                        Ok(Reply::ok())
                    }
                    None => Err(Reply::err("ERR index out of range")),
                }
            }
            Some(_) => Err(wrongtype()),
        }
    })())
}
