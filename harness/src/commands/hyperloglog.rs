//! HyperLogLog: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST, on strings holding Redis 7.0's own
//! encoding byte for byte (the `HYLL` header, the sparse opcodes and when they turn dense, the
//! 6-bit dense registers, the cached cardinality), so that GET, COPY and a real server reading
//! the value all agree.

use super::{done, is, wrongtype};
use crate::keyspace::Value;
use crate::reply::Reply;
use crate::server::Server;

const P: u32 = 14;
const Q: u32 = 64 - P;
const REGISTERS: usize = 1 << P;
const HDR: usize = 16;
const DENSE_SIZE: usize = HDR + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's `hll-sparse-max-bytes` default.
const SPARSE_MAX_BYTES: usize = 3000;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// Redis's MurmurHash64A (little-endian reads), seed `0xadc83b19`.
fn murmur64a(key: &[u8]) -> u64 {
    const M: u64 = 0xc6a4a7935bd1e995;
    const R: u32 = 47;
    let mut h: u64 = 0xadc8_3b19 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the length of its run of zeros plus one.
fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let b0 = u16::from(regs[byte]);
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & 63) as u8
}

fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let v = u32::from(v);
    regs[byte] &= !((63u32 << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(next) = regs.get_mut(byte + 1) {
        *next &= !((63u32 >> (8 - fb)) as u8);
        *next |= (v >> (8 - fb)) as u8;
    }
}

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}
fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}
fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}
fn val_len(b: u8) -> usize {
    usize::from(b & 3) + 1
}
fn val_op(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        seq.push(0x40 | (l >> 8) as u8);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push(len as u8 - 1);
    }
}

/// A new, empty HyperLogLog: sparse, one XZERO run over every register, cardinality 0 cached.
fn new_hll() -> Vec<u8> {
    let mut v = b"HYLL".to_vec();
    v.push(SPARSE);
    v.extend([0u8; 11]);
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(XZERO_MAX_LEN);
        push_zeros(&mut v, run);
        left -= run;
    }
    v
}

fn invalidate(v: &mut [u8]) {
    v[15] |= 0x80;
}

/// Whether `v` passes Redis's `isHLLObjectOrReply` checks.
fn valid(v: &[u8]) -> bool {
    v.len() >= HDR
        && &v[..4] == b"HYLL"
        && v[4] <= SPARSE
        && (v[4] != DENSE || v.len() == DENSE_SIZE)
}

/// Registers of a sparse representation, or `None` when it is corrupt.
fn sparse_registers(v: &[u8]) -> Option<Vec<u8>> {
    let mut regs = vec![0u8; REGISTERS];
    let mut idx = 0usize;
    let mut p = HDR;
    while p < v.len() {
        let b = v[p];
        if is_zero(b) {
            idx += usize::from(b & 0x3f) + 1;
            p += 1;
        } else if is_xzero(b) {
            let len = ((usize::from(b & 0x3f) << 8) | usize::from(*v.get(p + 1)?)) + 1;
            idx += len;
            p += 2;
        } else {
            let (val, len) = (val_value(b), val_len(b));
            if idx + len > REGISTERS {
                return None;
            }
            regs[idx..idx + len].fill(val);
            idx += len;
            p += 1;
        }
    }
    (idx == REGISTERS).then_some(regs)
}

/// Every register's value, whatever the encoding.
fn registers(v: &[u8]) -> Option<Vec<u8>> {
    if v[4] == DENSE {
        Some((0..REGISTERS).map(|i| dense_get(&v[HDR..], i)).collect())
    } else {
        sparse_registers(v)
    }
}

/// Turns a sparse HyperLogLog dense in place (the header, cached value included, is kept).
fn to_dense(v: &mut Vec<u8>) -> Result<(), Reply> {
    if v[4] == DENSE {
        return Ok(());
    }
    let regs = sparse_registers(v).ok_or_else(|| Reply::err(CORRUPT))?;
    let mut dense = v[..HDR].to_vec();
    dense[4] = DENSE;
    dense.resize(DENSE_SIZE, 0);
    for (i, r) in regs.iter().enumerate() {
        if *r != 0 {
            dense_set(&mut dense[HDR..], i, *r);
        }
    }
    *v = dense;
    Ok(())
}

/// Redis's `hllSparseSet`: sets register `index` to `count` if that raises it, editing the
/// opcodes as Redis does (split, merge with neighbours, turn dense past
/// `hll-sparse-max-bytes` or for a value above 32). Returns whether the register changed.
fn sparse_set(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Reply> {
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    let corrupt = || Reply::err(CORRUPT);
    let (mut p, mut first, mut span) = (HDR, 0usize, 0usize);
    let mut prev = None;
    while p < v.len() {
        let b = v[p];
        let oplen;
        if is_zero(b) {
            span = usize::from(b & 0x3f) + 1;
            oplen = 1;
        } else if is_val(b) {
            span = val_len(b);
            oplen = 1;
        } else {
            let lo = *v.get(p + 1).ok_or_else(corrupt)?;
            span = ((usize::from(b & 0x3f) << 8) | usize::from(lo)) + 1;
            oplen = 2;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= v.len() {
        return Err(corrupt());
    }
    let b = v[p];
    let (zero, xzero, val) = (is_zero(b), is_xzero(b), is_val(b));
    let runlen = span;
    let mut simple = false;
    if val {
        if val_value(b) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            simple = true;
        }
    }
    if zero && runlen == 1 {
        simple = true;
    }
    if simple {
        v[p] = val_op(count, 1);
    } else {
        let last = first + span - 1;
        let mut seq = Vec::with_capacity(5);
        if zero || xzero {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            let cur = val_value(b);
            if index != first {
                seq.push(val_op(cur, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(cur, last - index));
            }
        }
        let oldlen = if xzero { 2 } else { 1 };
        if seq.len() > oldlen && v.len() + seq.len() - oldlen > SPARSE_MAX_BYTES {
            return promote(v, index, count);
        }
        v.splice(p..p + oldlen, seq);
    }
    // Merge adjacent VAL opcodes of the same value, up to five opcodes from the previous one.
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let b = v[p];
        if is_xzero(b) {
            p += 2;
            continue;
        } else if is_zero(b) {
            p += 1;
            continue;
        }
        if p + 1 < v.len() && is_val(v[p + 1]) {
            let (v1, v2) = (val_value(b), val_value(v[p + 1]));
            let len = val_len(b) + val_len(v[p + 1]);
            if v1 == v2 && len <= VAL_MAX_LEN {
                v[p + 1] = val_op(v1, len);
                v.remove(p);
                continue;
            }
        }
        p += 1;
    }
    invalidate(v);
    Ok(true)
}

fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Reply> {
    to_dense(v)?;
    dense_set(&mut v[HDR..], index, count);
    Ok(true)
}

/// Sets register `index` to `count` if that raises it.
fn set_register(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Reply> {
    if v[4] == DENSE {
        if dense_get(&v[HDR..], index) < count {
            dense_set(&mut v[HDR..], index, count);
            return Ok(true);
        }
        return Ok(false);
    }
    sparse_set(v, index, count)
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0f64, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0f64, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

/// Redis's estimator (Ertl's improved raw estimate) over the registers.
fn estimate(regs: &[u8]) -> u64 {
    let m = REGISTERS as f64;
    let mut histo = [0u32; 64];
    for r in regs {
        histo[usize::from(*r)] += 1;
    }
    let q = Q as usize;
    let mut z = m * tau((m - f64::from(histo[q + 1])) / m);
    for j in (1..=q).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    (0.721_347_520_444_481_7 * m * m / z).round() as u64
}

/// The HyperLogLog at `key`: `None` when missing; Redis's error for another type or a string
/// that is not one.
fn read(s: &mut Server, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(v)) if valid(v) => Ok(Some(v.clone())),
        Some(Value::Str(_)) => Err(Reply::err(NOT_HLL)),
        Some(_) => Err(wrongtype()),
    }
}

/// Stores `v` at `key`, keeping its TTL, creating it if needed.
fn store(s: &mut Server, key: &[u8], v: Vec<u8>) {
    let now = s.now_ms;
    match s.db.get_mut(key, now) {
        Some(e) => e.value = Value::Str(v),
        None => s.db.set(key, Value::Str(v), None),
    }
}

pub(super) fn pfadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (mut v, mut updated) = match read(s, &a[1])? {
            Some(v) => (v, false),
            None => (new_hll(), true),
        };
        for ele in &a[2..] {
            let (index, count) = pat_len(ele);
            updated |= set_register(&mut v, index, count)?;
        }
        if updated {
            invalidate(&mut v);
            store(s, &a[1], v);
        }
        Ok(Reply::Int(i64::from(updated)))
    })())
}

pub(super) fn pfcount(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        if a.len() > 2 {
            let mut max = vec![0u8; REGISTERS];
            for key in &a[1..] {
                let Some(v) = read(s, key)? else {
                    continue;
                };
                let regs = registers(&v).ok_or_else(|| Reply::err(CORRUPT))?;
                for (m, r) in max.iter_mut().zip(regs) {
                    *m = (*m).max(r);
                }
            }
            return Ok(Reply::Int(estimate(&max) as i64));
        }
        let Some(mut v) = read(s, &a[1])? else {
            return Ok(Reply::Int(0));
        };
        if v[15] & 0x80 == 0 {
            let card = u64::from_le_bytes(v[8..16].try_into().unwrap_or([0; 8]));
            return Ok(Reply::Int(card as i64));
        }
        let regs = registers(&v).ok_or_else(|| Reply::err(CORRUPT))?;
        let card = estimate(&regs);
        v[8..16].copy_from_slice(&card.to_le_bytes());
        store(s, &a[1], v);
        Ok(Reply::Int(card as i64))
    })())
}

pub(super) fn pfmerge(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let mut max = vec![0u8; REGISTERS];
        let mut dense = false;
        for key in &a[1..] {
            let Some(v) = read(s, key)? else {
                continue;
            };
            dense |= v[4] == DENSE;
            let regs = registers(&v).ok_or_else(|| Reply::err(CORRUPT))?;
            for (m, r) in max.iter_mut().zip(regs) {
                *m = (*m).max(r);
            }
        }
        let mut v = read(s, &a[1])?.unwrap_or_else(new_hll);
        if dense {
            to_dense(&mut v)?;
        }
        for (i, m) in max.iter().enumerate() {
            if *m != 0 {
                set_register(&mut v, i, *m)?;
            }
        }
        invalidate(&mut v);
        store(s, &a[1], v);
        Ok(Reply::ok())
    })())
}

/// PFDEBUG GETREG / DECODE / ENCODING / TODENSE key.
pub(super) fn pfdebug(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let Some(mut v) = read(s, &a[2])? else {
            return Err(Reply::err("ERR The specified key does not exist"));
        };
        if is(&a[1], "getreg") {
            if v[4] == SPARSE {
                to_dense(&mut v)?;
                store(s, &a[2], v.clone());
            }
            let regs = registers(&v).ok_or_else(|| Reply::err(CORRUPT))?;
            Ok(Reply::Array(
                regs.into_iter().map(|r| Reply::Int(i64::from(r))).collect(),
            ))
        } else if is(&a[1], "decode") {
            if v[4] != SPARSE {
                return Err(Reply::err("ERR HLL encoding is not sparse"));
            }
            let mut out = String::new();
            let mut p = HDR;
            while p < v.len() {
                let b = v[p];
                if is_zero(b) {
                    out.push_str(&format!("z:{} ", usize::from(b & 0x3f) + 1));
                    p += 1;
                } else if is_xzero(b) {
                    let lo = usize::from(v.get(p + 1).copied().unwrap_or(0));
                    out.push_str(&format!("Z:{} ", ((usize::from(b & 0x3f) << 8) | lo) + 1));
                    p += 2;
                } else {
                    out.push_str(&format!("v:{},{} ", val_value(b), val_len(b)));
                    p += 1;
                }
            }
            out.pop();
            Ok(Reply::Bulk(out.into_bytes()))
        } else if is(&a[1], "encoding") {
            Ok(Reply::Status(
                if v[4] == DENSE { "dense" } else { "sparse" }.into(),
            ))
        } else if is(&a[1], "todense") {
            let conv = v[4] == SPARSE;
            if conv {
                to_dense(&mut v)?;
                store(s, &a[2], v);
            }
            Ok(Reply::Int(i64::from(conv)))
        } else {
            Err(Reply::err(format!(
                "ERR Unknown PFDEBUG subcommand '{}'",
                String::from_utf8_lossy(&a[1])
            )))
        }
    })())
}

/// PFSELFTEST: Redis checks its own register code; the harness checks its own (dense and
/// sparse agree on random registers) and answers as Redis does.
pub(super) fn pfselftest(_s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    let mut sparse = new_hll();
    let mut dense = new_hll();
    if to_dense(&mut dense).is_err() {
        return Reply::err("ERR TESTFAILED dense conversion");
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x as usize) % REGISTERS;
        let c = ((x >> 32) % 63) as u8 + 1;
        if set_register(&mut sparse, i, c).is_err() || set_register(&mut dense, i, c).is_err() {
            return Reply::err("ERR TESTFAILED corrupt register encoding");
        }
    }
    if registers(&sparse) != registers(&dense) {
        return Reply::err("ERR TESTFAILED sparse and dense registers differ");
    }
    Reply::ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_hll_is_redis_s_eighteen_bytes() {
        let v = new_hll();
        assert_eq!(v.len(), 18);
        assert_eq!(&v[16..], &[0x7f, 0xff]);
        assert_eq!(estimate(&registers(&v).unwrap()), 0);
    }

    #[test]
    fn dense_registers_round_trip() {
        let mut regs = vec![0u8; DENSE_SIZE - HDR];
        for i in 0..REGISTERS {
            dense_set(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8);
        }
    }
}
