//! DUMP and RESTORE in Redis 7.0's own format: the value's RDB record, RDB version 10 and
//! the CRC-64 of both, so that a payload moves between the harness and a real server both
//! ways. Strings (integer encodings, raw, LZF when reading) and lists (`QUICKLIST_2` of
//! listpacks; `LIST` of strings when reading) are written and read; DUMP of a hash, set,
//! sorted set or stream answers that it is not emulated.

use crate::commands::is;
use crate::function_admin::{crc64, read_len, read_string, write_len, RDB_VERSION};
use crate::keyspace::Value;
use crate::reply::Reply;
use crate::server::Server;

/// RDB_TYPE_STRING, RDB_TYPE_LIST and RDB_TYPE_LIST_QUICKLIST_2.
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
/// A quicklist node's container: one element (`PLAIN`) or a listpack (`PACKED`).
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;
/// `list-max-listpack-size -2`: a node's listpack stays within 8 KB.
const NODE_BYTES: usize = 8192;

const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";
const BAD_FORMAT: &str = "ERR Bad data format";

/// `DUMP key`: nil for a missing key.
pub(super) fn dump(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let Some(e) = s.db.get_mut(&a[1], s.now_ms) else {
        return Reply::Nil;
    };
    let mut out = Vec::new();
    match &e.value {
        Value::Str(v) => {
            out.push(TYPE_STRING);
            write_string(&mut out, v);
        }
        Value::List(items) => {
            out.push(TYPE_LIST_QUICKLIST_2);
            write_quicklist(&mut out, items.iter().map(Vec::as_slice));
        }
        other => {
            return Reply::err(format!(
                "ERR harness: DUMP of a {} is not emulated (strings and lists are)",
                other.type_name()
            ))
        }
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    Reply::Bulk(out)
}

/// `v` as a canonical 64-bit integer (no sign `+`, no leading zero, not `-0`), as Redis's
/// `string2ll` accepts it.
fn as_int(v: &[u8]) -> Option<i64> {
    let n = crate::number::parse_i64(v)?;
    (n.to_string().as_bytes() == v).then_some(n)
}

/// An RDB string: an integer encoding when `v` is a canonical integer within 32 bits
/// (`rdbTryIntegerEncoding`), else its length and bytes (Redis would LZF-compress one of
/// more than 20 bytes when that saves space; both read back the same).
fn write_string(out: &mut Vec<u8>, v: &[u8]) {
    match as_int(v) {
        Some(n) if i8::try_from(n).is_ok() => out.extend_from_slice(&[0xc0, n as u8]),
        Some(n) if i16::try_from(n).is_ok() => {
            out.push(0xc1);
            out.extend_from_slice(&(n as i16).to_le_bytes());
        }
        Some(n) if i32::try_from(n).is_ok() => {
            out.push(0xc2);
            out.extend_from_slice(&(n as i32).to_le_bytes());
        }
        _ => {
            write_len(out, v.len() as u64);
            out.extend_from_slice(v);
        }
    }
}

/// A list as Redis 7.0 saves it: its quicklist's nodes, each a listpack of at most
/// [`NODE_BYTES`] (an element too big for one starts a node of its own).
fn write_quicklist<'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a [u8]>) {
    let mut nodes: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut size = 0;
    for item in items {
        let entry = lp_entry(item);
        match nodes.last_mut() {
            Some(node) if size + entry.len() <= NODE_BYTES => {
                size += entry.len();
                node.push(entry);
            }
            _ => {
                size = LP_HEADER + 1 + entry.len();
                nodes.push(vec![entry]);
            }
        }
    }
    write_len(out, nodes.len() as u64);
    for node in nodes {
        write_len(out, CONTAINER_PACKED);
        let lp = listpack(&node);
        write_len(out, lp.len() as u64);
        out.extend_from_slice(&lp);
    }
}

/// A listpack's header: total bytes (u32) and element count (u16).
const LP_HEADER: usize = 6;

fn listpack(entries: &[Vec<u8>]) -> Vec<u8> {
    let total = LP_HEADER + entries.iter().map(Vec::len).sum::<usize>() + 1;
    let mut lp = Vec::with_capacity(total);
    lp.extend_from_slice(&(total as u32).to_le_bytes());
    lp.extend_from_slice(
        &u16::try_from(entries.len())
            .unwrap_or(u16::MAX)
            .to_le_bytes(),
    );
    entries.iter().for_each(|e| lp.extend_from_slice(e));
    lp.push(0xff);
    lp
}

/// One listpack entry: its encoding and data (`lpEncodeGetType`), then its back length.
fn lp_entry(v: &[u8]) -> Vec<u8> {
    let mut e = Vec::with_capacity(v.len() + 10);
    match as_int(v) {
        Some(n @ 0..=127) => e.push(n as u8),
        Some(n @ -4096..=4095) => {
            let u = (n as u16) & 0x1fff;
            e.extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
        }
        Some(n) if i16::try_from(n).is_ok() => {
            e.push(0xf1);
            e.extend_from_slice(&(n as i16).to_le_bytes());
        }
        Some(n @ -8_388_608..=8_388_607) => {
            e.push(0xf2);
            e.extend_from_slice(&(n as i32).to_le_bytes()[..3]);
        }
        Some(n) if i32::try_from(n).is_ok() => {
            e.push(0xf3);
            e.extend_from_slice(&(n as i32).to_le_bytes());
        }
        Some(n) => {
            e.push(0xf4);
            e.extend_from_slice(&n.to_le_bytes());
        }
        None if v.len() < 64 => e.push(0x80 | v.len() as u8),
        None if v.len() < 4096 => {
            e.extend_from_slice(&[0xe0 | (v.len() >> 8) as u8, v.len() as u8])
        }
        None => {
            e.push(0xf0);
            e.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
    }
    if as_int(v).is_none() {
        e.extend_from_slice(v);
    }
    let l = e.len() as u64;
    let groups = back_len_size(l);
    let back: Vec<u8> = (0..groups)
        .rev()
        .map(|g| {
            let seven = (l >> (7 * g)) as u8;
            if groups == 1 || g == groups - 1 {
                seven
            } else {
                (seven & 127) | 128
            }
        })
        .collect();
    e.extend_from_slice(&back);
    e
}

/// Bytes of a listpack entry's back length for an entry of `l` bytes (`lpEncodeBacklen`).
fn back_len_size(l: u64) -> u32 {
    match l {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// The elements of a listpack; `Err` for a malformed one.
fn read_listpack(lp: &[u8]) -> Result<Vec<Vec<u8>>, ()> {
    let total = u32::from_le_bytes(lp.get(..4).ok_or(())?.try_into().map_err(|_| ())?);
    if total as usize != lp.len() || lp.len() <= LP_HEADER || lp.last() != Some(&0xff) {
        return Err(());
    }
    let mut out = Vec::new();
    let mut pos = LP_HEADER;
    let int = |bytes: &[u8]| -> i64 {
        let mut b = [0u8; 8];
        b[..bytes.len()].copy_from_slice(bytes);
        let shift = 64 - 8 * bytes.len() as u32;
        (i64::from_le_bytes(b) << shift) >> shift
    };
    while lp[pos] != 0xff {
        let b = lp[pos];
        let take = |from: usize, n: usize| lp.get(from..from + n).ok_or(());
        let (value, enclen) = match b {
            0x00..=0x7f => (i64::from(b).to_string().into_bytes(), 1),
            0x80..=0xbf => {
                let n = usize::from(b & 0x3f);
                (take(pos + 1, n)?.to_vec(), 1 + n)
            }
            0xc0..=0xdf => {
                let u = (u16::from(b & 0x1f) << 8) | u16::from(*lp.get(pos + 1).ok_or(())?);
                let n = if u >= 1 << 12 {
                    i64::from(u) - (1 << 13)
                } else {
                    i64::from(u)
                };
                (n.to_string().into_bytes(), 2)
            }
            0xe0..=0xef => {
                let n = (usize::from(b & 0x0f) << 8) | usize::from(*lp.get(pos + 1).ok_or(())?);
                (take(pos + 2, n)?.to_vec(), 2 + n)
            }
            0xf0 => {
                let n = u32::from_le_bytes(take(pos + 1, 4)?.try_into().map_err(|_| ())?) as usize;
                (take(pos + 5, n)?.to_vec(), 5 + n)
            }
            0xf1..=0xf4 => {
                let n = [2, 3, 4, 8][usize::from(b - 0xf1)];
                (int(take(pos + 1, n)?).to_string().into_bytes(), 1 + n)
            }
            _ => return Err(()),
        };
        let back = back_len_size(enclen as u64);
        pos += enclen + back as usize;
        if pos >= lp.len() {
            return Err(());
        }
        out.push(value);
    }
    Ok(out)
}

/// An RDB string, integer encodings included.
fn read_value_string(p: &[u8], pos: &mut usize, max: usize) -> Result<Vec<u8>, ()> {
    let first = *p.get(*pos).ok_or(())?;
    let n = match first {
        0xc0 => 1,
        0xc1 => 2,
        0xc2 => 4,
        _ => return read_string(p, pos, max),
    };
    let bytes = p.get(*pos + 1..*pos + 1 + n).ok_or(())?;
    *pos += 1 + n;
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(bytes);
    let shift = 64 - 8 * n as u32;
    Ok(((i64::from_le_bytes(b) << shift) >> shift)
        .to_string()
        .into_bytes())
}

/// The value a payload's body holds; `Err` for a malformed or unsupported one.
fn read_value(body: &[u8], max: usize) -> Result<Value, ()> {
    let mut pos = 1;
    let value = match *body.first().ok_or(())? {
        TYPE_STRING => Value::Str(read_value_string(body, &mut pos, max)?),
        TYPE_LIST => {
            let (n, _) = read_len(body, &mut pos)?;
            let mut items = std::collections::VecDeque::new();
            for _ in 0..n {
                items.push_back(read_value_string(body, &mut pos, max)?);
            }
            Value::List(items)
        }
        TYPE_LIST_QUICKLIST_2 => {
            let (nodes, _) = read_len(body, &mut pos)?;
            let mut items = std::collections::VecDeque::new();
            for _ in 0..nodes {
                let (container, _) = read_len(body, &mut pos)?;
                let blob = read_string(body, &mut pos, max)?;
                match container {
                    CONTAINER_PLAIN => items.push_back(blob),
                    CONTAINER_PACKED => items.extend(read_listpack(&blob)?),
                    _ => return Err(()),
                }
            }
            if items.is_empty() {
                return Err(());
            }
            Value::List(items)
        }
        _ => return Err(()),
    };
    if pos == body.len() {
        Ok(value)
    } else {
        Err(())
    }
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`.
pub(super) fn restore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let (key, payload) = (&a[1], &a[3]);
    let (mut replace, mut abs) = (false, false);
    let mut i = 4;
    while i < a.len() {
        let has_value = i + 1 < a.len();
        if is(&a[i], "replace") {
            replace = true;
        } else if is(&a[i], "absttl") {
            abs = true;
        } else if is(&a[i], "idletime") && has_value {
            match crate::number::parse_i64(&a[i + 1]) {
                Some(n) if n >= 0 => i += 1,
                _ => return Reply::err("ERR Invalid IDLETIME value, must be >= 0"),
            }
        } else if is(&a[i], "freq") && has_value {
            match crate::number::parse_i64(&a[i + 1]) {
                Some(n) if (0..=255).contains(&n) => i += 1,
                _ => return Reply::err("ERR Invalid FREQ value, must be >= 0 and <= 255"),
            }
        } else {
            return Reply::err(crate::reply::errors::SYNTAX);
        }
        i += 1;
    }
    let ttl = match crate::number::parse_i64(&a[2]) {
        Some(t) if t >= 0 => t,
        Some(_) => return Reply::err("ERR Invalid TTL value, must be >= 0"),
        None => return Reply::err(crate::reply::errors::NOT_INTEGER),
    };
    if !replace && s.db.exists(key, s.now_ms) {
        return Reply::err("BUSYKEY Target key name already exists.");
    }
    let Some(body_len) = payload.len().checked_sub(10) else {
        return Reply::err(BAD_PAYLOAD);
    };
    let version = u16::from_le_bytes([payload[body_len], payload[body_len + 1]]);
    let crc = u64::from_le_bytes(payload[body_len + 2..].try_into().unwrap_or_default());
    if version > RDB_VERSION || crc64(0, &payload[..body_len + 2]) != crc {
        return Reply::err(BAD_PAYLOAD);
    }
    let max = s.db.room().unwrap_or(usize::MAX);
    let Ok(value) = read_value(&payload[..body_len], max) else {
        return Reply::err(BAD_FORMAT);
    };
    let expire_at = match (ttl, abs) {
        (0, _) => None,
        (t, true) => Some(t),
        (t, false) => Some(s.now_ms.saturating_add(t)),
    };
    s.db.remove(key, s.now_ms);
    if expire_at.is_some_and(|t| t < s.now_ms) {
        return Reply::ok();
    }
    s.db.set(key, value, expire_at);
    Reply::ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listpack_entries_read_back_for_every_encoding() {
        let values: Vec<Vec<u8>> = [
            "0",
            "127",
            "128",
            "-1",
            "-4096",
            "4095",
            "4096",
            "-32768",
            "32767",
            "40000",
            "-8388608",
            "8388607",
            "2147483647",
            "-2147483649",
            "9223372036854775807",
            "9223372036854775808",
            "-0",
            "007",
            "+1",
            "",
            "abc",
        ]
        .iter()
        .map(|v| v.as_bytes().to_vec())
        .chain([
            b"x".repeat(63),
            b"x".repeat(64),
            b"y".repeat(4095),
            b"z".repeat(4096),
        ])
        .chain([b"w".repeat(20_000)])
        .collect();
        let entries: Vec<Vec<u8>> = values.iter().map(|v| lp_entry(v)).collect();
        assert_eq!(read_listpack(&listpack(&entries)).unwrap(), values);
        // Redis 7.0's bytes for ["a", "1", "bc"] and for 127, -5, 300.
        let small: Vec<Vec<u8>> = ["a", "1", "bc"]
            .iter()
            .map(|v| lp_entry(v.as_bytes()))
            .collect();
        assert_eq!(
            listpack(&small),
            b"\x10\x00\x00\x00\x03\x00\x81a\x02\x01\x01\x82bc\x03\xff"
        );
        assert_eq!(lp_entry(b"-5"), [0xdf, 0xfb, 2]);
        assert_eq!(lp_entry(b"300"), [0xc1, 0x2c, 2]);
    }

    #[test]
    fn back_lengths_are_redis_varints() {
        let e = lp_entry(&b"x".repeat(200));
        assert_eq!(&e[e.len() - 2..], [1, 128 | (202 - 128)]);
    }
}
