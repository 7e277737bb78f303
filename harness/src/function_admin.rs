//! FUNCTION LIST, DUMP, RESTORE and STATS: the function library as Redis 7.0 reports and
//! moves it. DUMP writes Redis's own payload (RDB `FUNCTION2` records, RDB version 10, CRC-64),
//! so a payload moves between the harness and a real server both ways.

use crate::commands::{glob_match, is};
use crate::reply::Reply;
use crate::script::{Engine, FunctionLibrary};

/// RDB_OPCODE_FUNCTION2: one library's code.
const OPCODE_FUNCTION2: u8 = 245;
/// RDB_OPCODE_FUNCTION: the pre-GA format Redis 7.0 refuses.
const OPCODE_FUNCTION_PRE_GA: u8 = 246;
/// Redis 7.0's RDB_VERSION.
pub(crate) const RDB_VERSION: u16 = 10;
/// The order Redis lists function flags in (`scripts_flags_def`).
const FLAG_ORDER: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

fn err(m: impl Into<String>) -> Reply {
    Reply::Error(m.into())
}

/// `FUNCTION STATS`' reply: `running` (nil or the running function's map) and the counts.
pub(crate) fn stats_reply(running: Reply, libraries: usize, functions: usize) -> Reply {
    Reply::Map(vec![
        (Reply::bulk("running_script"), running),
        (
            Reply::bulk("engines"),
            Reply::Map(vec![(
                Reply::bulk("LUA"),
                Reply::Map(vec![
                    (Reply::bulk("libraries_count"), Reply::Int(libraries as i64)),
                    (Reply::bulk("functions_count"), Reply::Int(functions as i64)),
                ]),
            )]),
        ),
    ])
}

/// `FUNCTION STATS` of an engine that runs nothing right now.
pub(crate) fn stats(engine: &Engine) -> Reply {
    let libs = engine.libraries();
    let funcs = libs.iter().map(|l| l.functions.len()).sum();
    stats_reply(Reply::Nil, libs.len(), funcs)
}

/// `FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern]`.
pub(crate) fn list(engine: &Engine, argv: &[Vec<u8>]) -> Reply {
    let (mut with_code, mut pattern): (bool, Option<&[u8]>) = (false, None);
    let mut i = 2;
    while i < argv.len() {
        let a = &argv[i];
        if is(a, "withcode") && !with_code {
            with_code = true;
        } else if is(a, "libraryname") && pattern.is_none() {
            let Some(p) = argv.get(i + 1) else {
                return err("ERR library name argument was not given");
            };
            pattern = Some(p);
            i += 1;
        } else {
            return err(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(a)
            ));
        }
        i += 1;
    }
    let libs = engine.libraries();
    Reply::Array(
        libs.iter()
            .filter(|l| pattern.is_none_or(|p| glob_match(p, l.name.as_bytes(), true)))
            .map(|l| library_entry(l, with_code))
            .collect(),
    )
}

fn library_entry(l: &FunctionLibrary, with_code: bool) -> Reply {
    let functions = l
        .details
        .iter()
        .map(|f| {
            let flags = FLAG_ORDER
                .iter()
                .filter(|name| f.flags.iter().any(|g| g == *name))
                .map(|name| Reply::Status((*name).to_string()))
                .collect();
            Reply::Map(vec![
                (Reply::bulk("name"), Reply::bulk(&f.name)),
                (
                    Reply::bulk("description"),
                    f.description.as_ref().map_or(Reply::Nil, Reply::bulk),
                ),
                (Reply::bulk("flags"), Reply::Array(flags)),
            ])
        })
        .collect();
    let mut entry = vec![
        (Reply::bulk("library_name"), Reply::bulk(&l.name)),
        (Reply::bulk("engine"), Reply::bulk("LUA")),
        (Reply::bulk("functions"), Reply::Array(functions)),
    ];
    if with_code {
        entry.push((Reply::bulk("library_code"), Reply::bulk(&l.code)));
    }
    Reply::Map(entry)
}

/// `FUNCTION DUMP`: Redis's payload of every library.
pub(crate) fn dump(engine: &Engine) -> Reply {
    Reply::Bulk(payload(&engine.libraries()))
}

fn payload(libs: &[FunctionLibrary]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in libs {
        out.push(OPCODE_FUNCTION2);
        write_len(&mut out, l.code.len() as u64);
        out.extend_from_slice(&l.code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub(crate) fn write_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Redis's CRC-64 (Jones polynomial, reflected, as `crc64.c`).
pub(crate) fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Reads an RDB length at `pos`; `Err` for a malformed one. `Ok((len, encoded))`: `encoded`
/// is a special encoding (only LZF strings occur in function payloads).
pub(crate) fn read_len(p: &[u8], pos: &mut usize) -> Result<(u64, bool), ()> {
    let first = *p.get(*pos).ok_or(())?;
    *pos += 1;
    match first >> 6 {
        0 => Ok((u64::from(first & 0x3f), false)),
        1 => {
            let second = *p.get(*pos).ok_or(())?;
            *pos += 1;
            Ok(((u64::from(first & 0x3f) << 8) | u64::from(second), false))
        }
        3 => Ok((u64::from(first & 0x3f), true)),
        _ => {
            let n = match first {
                0x80 => 4,
                0x81 => 8,
                _ => return Err(()),
            };
            let bytes = p.get(*pos..*pos + n).ok_or(())?;
            *pos += n;
            Ok((
                bytes.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)),
                false,
            ))
        }
    }
}

/// The most bytes LZF writes per byte it reads: a back reference of 264 bytes takes 3.
const LZF_MAX_RATIO: usize = 88;

/// Reads a string; an LZF one may declare at most `max_len` bytes once decompressed (and at
/// most what its compressed bytes can give), so a declared length is never reserved blindly.
pub(crate) fn read_string(p: &[u8], pos: &mut usize, max_len: usize) -> Result<Vec<u8>, ()> {
    let (len, encoded) = read_len(p, pos)?;
    if !encoded {
        let len = usize::try_from(len).map_err(|_| ())?;
        let s = p.get(*pos..pos.checked_add(len).ok_or(())?).ok_or(())?;
        *pos += len;
        return Ok(s.to_vec());
    }
    // RDB_ENC_LZF = 3; integer encodings never hold code.
    if len != 3 {
        return Err(());
    }
    let (clen, _) = read_len(p, pos)?;
    let (ulen, _) = read_len(p, pos)?;
    let clen = usize::try_from(clen).map_err(|_| ())?;
    let ulen = usize::try_from(ulen).map_err(|_| ())?;
    let data = p.get(*pos..pos.checked_add(clen).ok_or(())?).ok_or(())?;
    *pos += clen;
    if ulen > max_len || ulen > clen.saturating_mul(LZF_MAX_RATIO) {
        return Err(());
    }
    lzf_decompress(data, ulen)
}

/// liblzf's decompressor, bounded by the declared length (which the caller bounded).
fn lzf_decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, ()> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input.get(ip..ip + run).ok_or(())?;
            if out.len() + run > out_len {
                return Err(());
            }
            out.extend_from_slice(lit);
            ip += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or(())?);
                ip += 1;
            }
            let low = usize::from(*input.get(ip).ok_or(())?);
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let start = out.len().checked_sub(back).ok_or(())?;
            if out.len() + len + 2 > out_len {
                return Err(());
            }
            for k in 0..len + 2 {
                out.push(out[start + k]);
            }
        }
    }
    if out.len() == out_len {
        Ok(out)
    } else {
        Err(())
    }
}

/// The libraries' codes in a payload, or Redis's error. `max_len` bounds one library's code
/// (the Lua heap's cap: longer code could never load).
fn parse_payload(p: &[u8], max_len: usize) -> Result<Vec<Vec<u8>>, Reply> {
    let bad = || err("ERR payload version or checksum are wrong");
    if p.len() < 10 {
        return Err(bad());
    }
    let body = p.len() - 10;
    let version = u16::from_le_bytes([p[body], p[body + 1]]);
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&p[body + 2..]);
    if version > RDB_VERSION || crc64(0, &p[..body + 2]) != u64::from_le_bytes(crc) {
        return Err(bad());
    }
    let mut codes = Vec::new();
    let mut pos = 0;
    while pos < body {
        match p[pos] {
            OPCODE_FUNCTION2 => {
                pos += 1;
                let code = read_string(&p[..body], &mut pos, max_len)
                    .map_err(|()| err("ERR Failed loading library payload"))?;
                codes.push(code);
            }
            OPCODE_FUNCTION_PRE_GA => return Err(err("ERR Pre-GA function format not supported")),
            _ => return Err(err("ERR given type is not a function")),
        }
    }
    Ok(codes)
}

/// `FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]`: all of it or nothing.
pub(crate) fn restore(engine: &mut Engine, argv: &[Vec<u8>]) -> Reply {
    if argv.len() > 4 {
        return err(
            "ERR unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP.",
        );
    }
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy =
        match argv.get(3) {
            None => Policy::Append,
            Some(a) if is(a, "flush") => Policy::Flush,
            Some(a) if is(a, "append") => Policy::Append,
            Some(a) if is(a, "replace") => Policy::Replace,
            Some(_) => return err(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
    let codes = match parse_payload(&argv[2], engine.memory_limit()) {
        Ok(c) => c,
        Err(e) => return e,
    };
    // A failure puts the libraries back exactly as they were (compiled, not loaded again: a
    // library's top level runs once, and one that could not load now is not lost).
    let saved = match engine.save_functions() {
        Ok(s) => s,
        Err(e) => return err(format!("ERR harness: {e}")),
    };
    if policy == Policy::Flush {
        engine.function_flush();
    }
    for code in &codes {
        let reply = engine.function_load(code, policy == Policy::Replace);
        if let Reply::Error(e) = reply {
            engine.put_back_functions(saved);
            return Reply::Error(append_error(&e));
        }
    }
    Reply::ok()
}

/// FUNCTION LOAD says `Library 'x' already exists`; RESTORE's APPEND says it without quotes.
fn append_error(e: &str) -> String {
    match e
        .strip_prefix("ERR Library '")
        .and_then(|r| r.strip_suffix("' already exists"))
    {
        Some(name) => format!("ERR Library {name} already exists"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_jones_crc() {
        // The check value in Redis's crc64.c.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn payload_round_trips_and_rejects_damage() {
        let lib = FunctionLibrary {
            name: "l".into(),
            code: b"#!lua name=l\nredis.register_function('f', function() return 1 end)".to_vec(),
            functions: vec!["f".into()],
            details: Vec::new(),
        };
        let p = payload(std::slice::from_ref(&lib));
        assert_eq!(parse_payload(&p, 1 << 20).unwrap(), vec![lib.code.clone()]);
        let mut bad = p.clone();
        bad[3] ^= 1;
        assert!(parse_payload(&bad, 1 << 20).is_err());
        assert!(parse_payload(b"bad_payload", 1 << 20).is_err());
    }

    #[test]
    fn lzf_strings_in_payloads_decompress() {
        // "aaaaaaaaaa": one literal, then a back reference of 9 bytes at distance 1.
        let out = lzf_decompress(&[0x00, b'a', 0xe0, 0x00, 0x00], 10).unwrap();
        assert_eq!(out, b"aaaaaaaaaa");
        assert!(lzf_decompress(&[0x05, b'a'], 6).is_err());
    }

    /// An LZF string whose declared length is past what its bytes can give, or past the
    /// bound, is refused before anything is reserved.
    #[test]
    fn lzf_declared_lengths_are_bounded() {
        let lzf = |clen: usize, ulen: u64| {
            let mut s = vec![0xc3];
            write_len(&mut s, clen as u64);
            write_len(&mut s, ulen);
            s.extend(std::iter::repeat_n(0u8, clen));
            s
        };
        for (clen, ulen, max) in [
            (4, 1 << 40, usize::MAX),
            (4, 4 * 89, usize::MAX),
            (4, 64, 63),
        ] {
            let s = lzf(clen, ulen);
            assert!(read_string(&s, &mut 0, max).is_err(), "{clen} {ulen} {max}");
        }
        // "aaaaaaaaaa" within both bounds.
        let mut s = vec![0xc3, 5, 10, 0x00, b'a', 0xe0, 0x00, 0x00];
        assert_eq!(read_string(&s, &mut 0, 10).unwrap(), b"aaaaaaaaaa");
        s[2] = 11;
        assert!(read_string(&s, &mut 0, 100).is_err());
    }
}
