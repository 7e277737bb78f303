//! More of the data-type commands: LINSERT, LPOS, ZMSCORE, and HSCAN / SSCAN / ZSCAN (which
//! answer the whole value at once with cursor 0, as Redis does for its small encodings).

use super::introspect::{glob_match, scan_cursor};
use super::{done, int_arg, is, set, wrongtype};
use crate::keyspace::Value;
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

pub(super) fn linsert(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let after = if is(&a[2], "after") {
            true
        } else if is(&a[2], "before") {
            false
        } else {
            return Err(Reply::err(errors::SYNTAX));
        };
        let now = s.now_ms;
        let list = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => return Ok(Reply::Int(0)),
            Some(Value::List(l)) => l,
            Some(_) => return Err(wrongtype()),
        };
        let Some(i) = list.iter().position(|e| *e == a[3]) else {
            return Ok(Reply::Int(-1));
        };
        list.insert(if after { i + 1 } else { i }, a[4].clone());
        Ok(Reply::Int(list.len() as i64))
    })())
}

/// Redis's `getPositiveLongFromObjectOrReply` with a message: it answers the message for a
/// value that is not an integer too.
fn positive(b: &[u8], msg: &str) -> Result<i64, Reply> {
    match number::parse_i64(b) {
        Some(v) if v >= 0 => Ok(v),
        _ => Err(Reply::err(format!("ERR {msg}"))),
    }
}

pub(super) fn lpos(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (mut rank, mut count, mut maxlen) = (1i64, -1i64, 0i64);
        let mut j = 3;
        while j < a.len() {
            let more = a.len() - 1 - j;
            if is(&a[j], "rank") && more > 0 {
                j += 1;
                // Redis 7.0.15 takes any long here, LONG_MIN included.
                rank = int_arg(&a[j])?;
                if rank == 0 {
                    return Err(Reply::err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                         second ... or use negative to start from the end of the list",
                    ));
                }
            } else if is(&a[j], "count") && more > 0 {
                j += 1;
                count = positive(&a[j], "COUNT can't be negative")?;
            } else if is(&a[j], "maxlen") && more > 0 {
                j += 1;
                maxlen = positive(&a[j], "MAXLEN can't be negative")?;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            j += 1;
        }
        let from_tail = rank < 0;
        // As C negates it: LONG_MIN stays negative, and then every match counts.
        let rank = if from_tail { rank.wrapping_neg() } else { rank };
        let now = s.now_ms;
        let list = match s.db.get_mut(&a[1], now).map(|e| &e.value) {
            None => {
                return Ok(if count != -1 {
                    Reply::Array(vec![])
                } else {
                    Reply::Nil
                })
            }
            Some(Value::List(l)) => l,
            Some(_) => return Err(wrongtype()),
        };
        let order: Box<dyn Iterator<Item = (usize, &Vec<u8>)>> = if from_tail {
            Box::new(list.iter().enumerate().rev())
        } else {
            Box::new(list.iter().enumerate())
        };
        let (mut matches, mut out) = (0i64, Vec::new());
        for (scanned, (i, e)) in order.enumerate() {
            if maxlen != 0 && scanned as i64 >= maxlen {
                break;
            }
            if *e == a[2] {
                matches += 1;
                if matches >= rank {
                    out.push(Reply::Int(i as i64));
                    if count == -1
                        || (count != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= count)
                    {
                        break;
                    }
                }
            }
        }
        Ok(if count == -1 {
            out.pop().unwrap_or(Reply::Nil)
        } else {
            Reply::Array(out)
        })
    })())
}

pub(super) fn zmscore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    match s.db.get_mut(&a[1], now).map(|e| &e.value) {
        None => Reply::Array(a[2..].iter().map(|_| Reply::Nil).collect()),
        Some(Value::ZSet(z)) => Reply::Array(
            a[2..]
                .iter()
                .map(|m| z.score(m).map_or(Reply::Nil, Reply::Double))
                .collect(),
        ),
        Some(_) => wrongtype(),
    }
}

/// HSCAN / SSCAN / ZSCAN key cursor [MATCH pattern] [COUNT count]: the whole value with cursor
/// 0, as Redis answers for a listpack hash or sorted set and an intset (a larger value Redis
/// walks by cursor in its hash table's order; the harness still answers it whole, in its own
/// order).
pub(super) fn scan_value(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        scan_cursor(&a[2])?;
        let now = s.now_ms;
        let pairs: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            match s.db.get_mut(&a[1], now).map(|e| &e.value) {
                None => return Ok(Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])),
                Some(Value::Hash(h)) if is(&a[0], "hscan") => h
                    .iter()
                    .map(|(f, v)| (f.clone(), Some(v.clone())))
                    .collect(),
                Some(Value::Set(m)) if is(&a[0], "sscan") => {
                    set::ordered(m).into_iter().map(|e| (e, None)).collect()
                }
                Some(Value::ZSet(z)) if is(&a[0], "zscan") => z
                    .iter()
                    .map(|(m, sc)| {
                        (
                            m.clone(),
                            Some(number::format_double_reply(sc).into_bytes()),
                        )
                    })
                    .collect(),
                Some(_) => return Err(wrongtype()),
            };
        let mut pattern = None;
        let mut i = 3;
        while i < a.len() {
            let more = a.len() - i - 1;
            if is(&a[i], "count") && more >= 1 {
                if int_arg(&a[i + 1])? < 1 {
                    return Err(Reply::err(errors::SYNTAX));
                }
            } else if is(&a[i], "match") && more >= 1 {
                pattern = Some(&a[i + 1]);
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            i += 2;
        }
        let mut out = Vec::new();
        for (k, v) in pairs {
            if pattern.is_some_and(|p| p != b"*" && !glob_match(p, &k, false)) {
                continue;
            }
            out.push(Reply::Bulk(k));
            if let Some(v) = v {
                out.push(Reply::Bulk(v));
            }
        }
        Ok(Reply::Array(vec![Reply::bulk("0"), Reply::Array(out)]))
    })())
}
