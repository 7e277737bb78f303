//! Bitmap commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITFIELD, BITFIELD_RO, BITOP.

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

pub(super) fn setbit(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

pub(super) fn getbit(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

pub(super) fn bitcount(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

pub(super) fn bitpos(s: &mut Server, a: &[Vec<u8>]) -> Reply {
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

/// BITFIELD's overflow behaviour.
#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

fn field_type(arg: &[u8]) -> Result<(bool, u32), Reply> {
    let bad = || {
        Reply::err(
            "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not \
             supported but i64 is.",
        )
    };
    let signed = match arg.first() {
        Some(b'i' | b'I') => true,
        Some(b'u' | b'U') => false,
        _ => return Err(bad()),
    };
    match number::parse_i64(&arg[1..]) {
        Some(b) if b >= 1 && b <= if signed { 64 } else { 63 } => Ok((signed, b as u32)),
        _ => Err(bad()),
    }
}

fn field_offset(arg: &[u8], bits: u32) -> Result<u64, Reply> {
    let hash = arg.first() == Some(&b'#');
    let digits = if hash { &arg[1..] } else { arg };
    let mut o = number::parse_i64(digits).ok_or_else(|| Reply::err(BAD_OFFSET))?;
    if hash {
        o = o.wrapping_mul(i64::from(bits));
    }
    if o < 0 || (o >> 3) >= MAX_STRING {
        return Err(Reply::err(BAD_OFFSET));
    }
    Ok(o as u64)
}

fn get_unsigned(v: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0u64, |acc, j| (acc << 1) | u64::from(bit_at(v, offset + j)))
}

fn get_signed(v: &[u8], offset: u64, bits: u32) -> i64 {
    let mut value = get_unsigned(v, offset, bits);
    if bits < 64 && value & (1u64 << (bits - 1)) != 0 {
        value |= u64::MAX << bits;
    }
    value as i64
}

fn set_unsigned(v: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let on = (value >> (u64::from(bits) - 1 - j)) & 1 == 1;
        let bit = offset + j;
        let mask = 1u8 << (7 - (bit & 7));
        let byte = &mut v[(bit >> 3) as usize];
        if on {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: whether `value + incr` leaves `bits` bits, and the
/// value to store instead (wrapped or saturated).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> (bool, u64) {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = (value as i64).wrapping_neg();
    let wrap = || value.wrapping_add(incr as u64) & !(u64::MAX.checked_shl(bits).unwrap_or(0));
    if value > max || (incr > 0 && incr > maxincr) {
        return (true, if ow == Overflow::Wrap { wrap() } else { max });
    }
    if incr < 0 && incr < minincr {
        return (true, if ow == Overflow::Wrap { wrap() } else { 0 });
    }
    (false, 0)
}

/// Redis's `checkSignedBitfieldOverflow`.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> (bool, i64) {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1u64 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        return (true, if ow == Overflow::Wrap { wrap() } else { max });
    }
    if value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr) {
        return (true, if ow == Overflow::Wrap { wrap() } else { min });
    }
    (false, 0)
}

pub(super) fn bitfield(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    bitfield_generic(s, a, false)
}

pub(super) fn bitfield_ro(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    bitfield_generic(s, a, true)
}

fn bitfield_generic(s: &mut Server, a: &[Vec<u8>], ro_command: bool) -> Reply {
    done((|| {
        let mut ops = Vec::new();
        let mut overflow = Overflow::Wrap;
        let mut highest: Option<u64> = None;
        let mut j = 2;
        while j < a.len() {
            let rem = a.len() - j - 1;
            let sub = &a[j];
            let op = if is(sub, "get") && rem >= 2 {
                FieldOp::Get
            } else if is(sub, "set") && rem >= 3 {
                FieldOp::Set
            } else if is(sub, "incrby") && rem >= 3 {
                FieldOp::Incrby
            } else if is(sub, "overflow") && rem >= 1 {
                let o = &a[j + 1];
                overflow = if is(o, "wrap") {
                    Overflow::Wrap
                } else if is(o, "sat") {
                    Overflow::Sat
                } else if is(o, "fail") {
                    Overflow::Fail
                } else {
                    return Err(Reply::err("ERR Invalid OVERFLOW type specified"));
                };
                j += 2;
                continue;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            };
            let (signed, bits) = field_type(&a[j + 1])?;
            let offset = field_offset(&a[j + 2], bits)?;
            let mut value = 0;
            if op != FieldOp::Get {
                value =
                    number::parse_i64(&a[j + 3]).ok_or_else(|| Reply::err(errors::NOT_INTEGER))?;
                let top = offset + u64::from(bits) - 1;
                highest = Some(highest.map_or(top, |h| h.max(top)));
            }
            ops.push(Field {
                op,
                signed,
                bits,
                offset,
                value,
                overflow,
            });
            j += if op == FieldOp::Get { 3 } else { 4 };
        }
        if ro_command && highest.is_some() {
            return Err(Reply::err(
                "ERR BITFIELD_RO only supports the GET subcommand",
            ));
        }
        let now = s.now_ms;
        let mut v = match highest {
            None => read(s, &a[1])?.unwrap_or_default(),
            Some(top) => {
                let need = (top >> 3) as usize + 1;
                let mut v = match read(s, &a[1])? {
                    Some(v) => v,
                    None => {
                        s.db.set(&a[1], Value::Str(vec![]), None);
                        vec![]
                    }
                };
                if v.len() < need {
                    v.resize(need, 0);
                }
                v
            }
        };
        let mut out = Vec::with_capacity(ops.len());
        for f in &ops {
            if f.op == FieldOp::Get {
                out.push(Reply::Int(if f.signed {
                    get_signed(&v, f.offset, f.bits)
                } else {
                    get_unsigned(&v, f.offset, f.bits) as i64
                }));
                continue;
            }
            let (overflowed, retval, newval) = if f.signed {
                let old = get_signed(&v, f.offset, f.bits);
                if f.op == FieldOp::Incrby {
                    let (o, w) = signed_overflow(old, f.value, f.bits, f.overflow);
                    let new = if o { w } else { old.wrapping_add(f.value) };
                    (o, new, new as u64)
                } else {
                    let (o, w) = signed_overflow(f.value, 0, f.bits, f.overflow);
                    (o, old, if o { w } else { f.value } as u64)
                }
            } else {
                let old = get_unsigned(&v, f.offset, f.bits);
                if f.op == FieldOp::Incrby {
                    let (o, w) = unsigned_overflow(old, f.value, f.bits, f.overflow);
                    let new = if o {
                        w
                    } else {
                        old.wrapping_add(f.value as u64)
                    };
                    (o, new as i64, new)
                } else {
                    let (o, w) = unsigned_overflow(f.value as u64, 0, f.bits, f.overflow);
                    (o, old as i64, if o { w } else { f.value as u64 })
                }
            };
            if overflowed && f.overflow == Overflow::Fail {
                out.push(Reply::Nil);
            } else {
                out.push(Reply::Int(retval));
                set_unsigned(&mut v, f.offset, f.bits, newval);
            }
        }
        if highest.is_some() {
            if let Some(e) = s.db.get_mut(&a[1], now) {
                e.value = Value::Str(v);
            }
        }
        Ok(Reply::Array(out))
    })())
}

/// BITOP AND / OR / XOR / NOT destkey key...: missing keys are empty strings, shorter ones are
/// padded with zero bytes, the result replaces the destination (TTL gone) or deletes it when
/// empty; answers the result's length.
pub(super) fn bitop(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let op = if is(&a[1], "and") {
            0
        } else if is(&a[1], "or") {
            1
        } else if is(&a[1], "xor") {
            2
        } else if is(&a[1], "not") {
            3
        } else {
            return Err(Reply::err(errors::SYNTAX));
        };
        if op == 3 && a.len() != 4 {
            return Err(Reply::err(
                "ERR BITOP NOT must be called with a single source key.",
            ));
        }
        s.db.check_copies("bitop", &a[3..]).map_err(Reply::Error)?;
        let mut srcs = Vec::with_capacity(a.len() - 3);
        for key in &a[3..] {
            srcs.push(read(s, key)?.unwrap_or_default());
        }
        let maxlen = srcs.iter().map(Vec::len).max().unwrap_or(0);
        let now = s.now_ms;
        if maxlen == 0 {
            s.db.remove(&a[2], now);
            return Ok(Reply::Int(0));
        }
        let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
        let res: Vec<u8> = (0..maxlen)
            .map(|i| {
                let mut out = byte(&srcs[0], i);
                if op == 3 {
                    out = !out;
                }
                for src in &srcs[1..] {
                    let b = byte(src, i);
                    match op {
                        0 => out &= b,
                        1 => out |= b,
                        _ => out ^= b,
                    }
                }
                out
            })
            .collect();
        s.db.set(&a[2], Value::Str(res), None);
        Ok(Reply::Int(maxlen as i64))
    })())
}
