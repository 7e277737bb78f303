//! Bitmap commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS.

use super::strings::MAX_STRING;
use super::{done, int_arg, is, wrongtype};
use crate::keyspace::Value;
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";

fn bit_offset(arg: &[u8]) -> Result<u64, Reply> {
    match number::parse_i64(arg) {
        Some(o) if o >= 0 && (o >> 3) < MAX_STRING => Ok(o as u64),
        _ => Err(Reply::err(BAD_OFFSET)),
    }
}

fn read(s: &mut Server, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(v)) => Ok(Some(v.clone())),
        Some(_) => Err(wrongtype()),
    }
}

fn bit_at(v: &[u8], bit: u64) -> u8 {
    v.get((bit >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (bit & 7))) & 1)
}

pub fn setbit(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let offset = bit_offset(&a[2])?;
        let on = match number::parse_i64(&a[3]) {
            Some(v @ (0 | 1)) => v as u8,
            _ => return Err(Reply::err("ERR bit is not an integer or out of range")),
        };
        let byte = (offset >> 3) as usize;
        let now = s.now_ms;
        let mut v = match read(s, &a[1])? {
            Some(v) => v,
            None => {
                s.db.set(&a[1], Value::Str(vec![]), None);
                vec![]
            }
        };
        if v.len() < byte + 1 {
            v.resize(byte + 1, 0);
        }
        let old = bit_at(&v, offset);
        let mask = 1u8 << (7 - (offset & 7));
        if on == 1 {
            v[byte] |= mask;
        } else {
            v[byte] &= !mask;
        }
        if let Some(e) = s.db.get_mut(&a[1], now) {
            e.value = Value::Str(v);
        }
        Ok(Reply::Int(i64::from(old)))
    })())
}

pub fn getbit(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let offset = bit_offset(&a[2])?;
        Ok(Reply::Int(
            read(s, &a[1])?.map_or(0, |v| i64::from(bit_at(&v, offset))),
        ))
    })())
}

/// Turns `start`/`end` (bytes, or bits with `bits`) into an inclusive bit range, clamped to the
/// string as Redis does; `None` when the range is empty.
fn bit_range(mut start: i64, mut end: i64, len: i64, bits: bool) -> Option<(i64, i64)> {
    let total = if bits { len * 8 } else { len };
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    if start > end {
        return None;
    }
    Some(if bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

fn unit(arg: &[u8]) -> Result<bool, Reply> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(Reply::err(errors::SYNTAX))
    }
}

/// The set bits of `v` from bit `b0` to bit `b1`, inclusive.
fn popcount(v: &[u8], b0: i64, b1: i64) -> i64 {
    (b0 / 8..=b1 / 8)
        .map(|i| {
            let mut byte = v.get(i as usize).copied().unwrap_or(0);
            if i == b0 / 8 {
                byte &= 0xff >> (b0 % 8);
            }
            if i == b1 / 8 {
                byte &= 0xff << (7 - b1 % 8);
            }
            i64::from(byte.count_ones())
        })
        .sum()
}

pub fn bitcount(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let Some(v) = read(s, &a[1])? else {
            return Ok(Reply::Int(0));
        };
        let len = v.len() as i64;
        let range = match a.len() {
            2 => bit_range(0, len - 1, len, false),
            4 | 5 => {
                let start = int_arg(&a[2])?;
                let end = int_arg(&a[3])?;
                if start < 0 && end < 0 && start > end {
                    return Ok(Reply::Int(0));
                }
                let bits = if a.len() == 5 { unit(&a[4])? } else { false };
                bit_range(start, end, len, bits)
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        Ok(Reply::Int(range.map_or(0, |(b0, b1)| popcount(&v, b0, b1))))
    })())
}

pub fn bitpos(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let bit = match number::parse_i64(&a[2]) {
            Some(b @ (0 | 1)) => b as u8,
            Some(_) => return Err(Reply::err("ERR The bit argument must be 1 or 0.")),
            None => return Err(Reply::err(errors::NOT_INTEGER)),
        };
        let Some(v) = read(s, &a[1])? else {
            return Ok(Reply::Int(if bit == 1 { -1 } else { 0 }));
        };
        let len = v.len() as i64;
        let mut end_given = false;
        let range = match a.len() {
            3 => bit_range(0, len - 1, len, false),
            4..=6 => {
                let start = int_arg(&a[3])?;
                let bits = if a.len() == 6 { unit(&a[5])? } else { false };
                let end = if a.len() >= 5 {
                    end_given = true;
                    int_arg(&a[4])?
                } else if bits {
                    len * 8 + 7
                } else {
                    len - 1
                };
                bit_range(start, end, len, bits)
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        let Some((b0, b1)) = range else {
            return Ok(Reply::Int(-1));
        };
        if let Some(p) = (b0..=b1).find(|&b| bit_at(&v, b as u64) == bit) {
            return Ok(Reply::Int(p));
        }
        // Looking for a clear bit past the end of the string finds the padding, unless the
        // caller gave an explicit end.
        Ok(Reply::Int(if bit == 0 && !end_given {
            (b1 | 7) + 1
        } else {
            -1
        }))
    })())
}
