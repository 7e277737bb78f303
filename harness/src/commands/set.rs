//! Set commands: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD. (SMEMBERS and friends are not
//! emulated: Redis 7.0 returns hash-table order for non-integer sets, which cannot be matched.)

use std::collections::HashSet;

use super::wrongtype;
use crate::keyspace::Value;
use crate::reply::Reply;
use crate::server::Server;

fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a HashSet<Vec<u8>>>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Set(m)) => Ok(Some(m)),
        Some(_) => Err(wrongtype()),
    }
}

pub fn sadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

pub fn srem(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => 0,
        Some(Value::Set(m)) => a[2..].iter().filter(|v| m.remove(v.as_slice())).count(),
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    Reply::Int(n as i64)
}

pub fn sismember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => Reply::Int(i64::from(m.is_some_and(|m| m.contains(a[2].as_slice())))),
        Err(e) => e,
    }
}

pub fn smismember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

pub fn scard(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match read(s, &a[1]) {
        Ok(m) => Reply::Int(m.map_or(0, |m| m.len() as i64)),
        Err(e) => e,
    }
}
