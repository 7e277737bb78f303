//! Stream basics: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM (MAXLEN / MINID, exact and `~`).
//! Reads and consumer groups are in `stream_group`.

use super::{done, is, wrong_arity, wrongtype};
use crate::keyspace::{Stream, StreamEntry, StreamId, StreamNode, Value, STREAM_NODE_MAX_ENTRIES};
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

const BAD_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const TOO_SMALL: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";
const MAX_ID: StreamId = (u64::MAX, u64::MAX);

/// C's `string2ull`: a plain integer not below 0, or what `strtoull` reads whole.
fn string2ull(b: &[u8]) -> Option<u64> {
    if let Some(v) = number::parse_i64(b) {
        return u64::try_from(v).ok();
    }
    let t = b.trim_ascii_start();
    let t = t.strip_prefix(b"+").unwrap_or(t);
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Redis's `streamGenericParseIDOrReply`. `seq_given`: `Some` where `<ms>-*` is allowed (XADD);
/// it tells whether the sequence was given.
pub(super) fn parse_id(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    seq_given: Option<&mut bool>,
) -> Result<StreamId, Reply> {
    let bad = || Reply::err(BAD_ID);
    if arg.len() > 127 {
        return Err(bad());
    }
    if strict && (arg == b"-" || arg == b"+") {
        return Err(bad());
    }
    let allow_star = seq_given.is_some();
    let mut given = true;
    let id = match arg {
        b"-" => (0, 0),
        b"+" => MAX_ID,
        _ => {
            let (ms, seq) = match arg.iter().position(|&c| c == b'-') {
                Some(d) => (&arg[..d], Some(&arg[d + 1..])),
                None => (arg, None),
            };
            let ms = string2ull(ms).ok_or_else(bad)?;
            let seq = match seq {
                Some(b"*") if allow_star => {
                    given = false;
                    0
                }
                Some(s) => string2ull(s).ok_or_else(bad)?,
                None => missing_seq,
            };
            (ms, seq)
        }
    };
    if let Some(g) = seq_given {
        *g = given;
    }
    Ok(id)
}

/// An interval bound of XRANGE: `(` excludes it.
fn parse_interval(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), Reply> {
    if arg.len() > 1 && arg[0] == b'(' {
        Ok((parse_id(&arg[1..], missing_seq, true, None)?, true))
    } else {
        Ok((parse_id(arg, missing_seq, false, None)?, false))
    }
}

pub(super) fn incr(id: StreamId) -> Option<StreamId> {
    match id {
        MAX_ID => None,
        (ms, u64::MAX) => Some((ms + 1, 0)),
        (ms, seq) => Some((ms, seq + 1)),
    }
}

pub(super) fn decr(id: StreamId) -> Option<StreamId> {
    match id {
        (0, 0) => None,
        (ms, 0) => Some((ms - 1, u64::MAX)),
        (ms, seq) => Some((ms, seq - 1)),
    }
}

pub(super) fn id_text(id: StreamId) -> Vec<u8> {
    format!("{}-{}", id.0, id.1).into_bytes()
}

pub(super) fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a mut Stream>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::Stream(x)) => Ok(Some(x)),
        Some(_) => Err(wrongtype()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    None,
    MaxLen(u64),
    MinId(StreamId),
}

struct TrimArgs {
    strategy: Strategy,
    approx: bool,
    limit: i64,
    nomkstream: bool,
    id: Option<(StreamId, bool)>,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`: the options from `a[i..]`; for XADD, stops at
/// the ID (returned with the index of the first field).
fn parse_trim(a: &[Vec<u8>], mut i: usize, xadd: bool) -> Result<(TrimArgs, usize), Reply> {
    let mut t = TrimArgs {
        strategy: Strategy::None,
        approx: false,
        limit: -1,
        nomkstream: false,
        id: None,
    };
    let mut limit_given = false;
    let both = "ERR syntax error, MAXLEN and MINID options at the same time are not compatible";
    while i < a.len() {
        let more = a.len() - 1 - i;
        let opt = &a[i];
        if xadd && opt.as_slice() == b"*" {
            break;
        } else if (is(opt, "maxlen") || is(opt, "minid")) && more >= 1 {
            if t.strategy != Strategy::None {
                return Err(Reply::err(both));
            }
            t.approx = false;
            let next = &a[i + 1];
            if more >= 2 && next.as_slice() == b"~" {
                t.approx = true;
                i += 1;
            } else if more >= 2 && next.as_slice() == b"=" {
                i += 1;
            }
            if is(opt, "maxlen") {
                let n =
                    number::parse_i64(&a[i + 1]).ok_or_else(|| Reply::err(errors::NOT_INTEGER))?;
                if n < 0 {
                    return Err(Reply::err("ERR The MAXLEN argument must be >= 0."));
                }
                t.strategy = Strategy::MaxLen(n as u64);
            } else {
                t.strategy = Strategy::MinId(parse_id(&a[i + 1], 0, true, None)?);
            }
            i += 1;
        } else if is(opt, "limit") && more >= 1 {
            let n = number::parse_i64(&a[i + 1]).ok_or_else(|| Reply::err(errors::NOT_INTEGER))?;
            if n < 0 {
                return Err(Reply::err("ERR The LIMIT argument must be >= 0."));
            }
            t.limit = n;
            limit_given = true;
            i += 1;
        } else if xadd && is(opt, "nomkstream") {
            t.nomkstream = true;
        } else if xadd {
            let mut given = true;
            let id = parse_id(opt, 0, true, Some(&mut given))?;
            t.id = Some((id, given));
            break;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
        i += 1;
    }
    if t.limit > 0 && t.strategy == Strategy::None {
        return Err(Reply::err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && t.strategy == Strategy::None {
        return Err(Reply::err(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !t.approx {
            return Err(Reply::err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if t.approx {
        t.limit = (100 * STREAM_NODE_MAX_ENTRIES as i64).min(10_000);
    } else {
        t.limit = 0;
    }
    Ok((t, i))
}

/// Redis's `streamTrim`: whole nodes first; within a node only when trimming exactly.
fn trim(x: &mut Stream, t: &TrimArgs) -> i64 {
    let mut deleted = 0i64;
    while let Some(node) = x.nodes.first_mut() {
        if let Strategy::MaxLen(max) = t.strategy {
            if x.len as u64 <= max {
                break;
            }
        }
        let entries = node.live as i64;
        if t.limit > 0 && deleted + entries > t.limit {
            break;
        }
        let remove = match t.strategy {
            Strategy::MaxLen(max) => (x.len as u64).saturating_sub(node.live as u64) >= max,
            Strategy::MinId(min) => node.entries.last().is_some_and(|e| e.id < min),
            Strategy::None => return 0,
        };
        if remove {
            x.len -= node.live;
            deleted += entries;
            x.nodes.remove(0);
            continue;
        }
        if t.approx {
            break;
        }
        for e in node.entries.iter_mut().filter(|e| !e.deleted) {
            let stop = match t.strategy {
                Strategy::MaxLen(max) => x.len as u64 <= max,
                Strategy::MinId(min) => e.id >= min,
                Strategy::None => true,
            };
            if stop {
                break;
            }
            e.deleted = true;
            node.live -= 1;
            x.len -= 1;
            deleted += 1;
        }
        break;
    }
    deleted
}

pub(super) fn xadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (t, i) = parse_trim(a, 2, true)?;
        let field_pos = i + 1;
        if a.len() < field_pos + 2 || (a.len() - field_pos) % 2 == 1 {
            return Err(wrong_arity("xadd"));
        }
        if let Some(((0, 0), true)) = t.id {
            return Err(Reply::err(
                "ERR The ID specified in XADD must be greater than 0-0",
            ));
        }
        let now = s.now_ms;
        if read(s, &a[1])?.is_none() {
            if t.nomkstream {
                return Ok(Reply::Nil);
            }
            s.db.set(&a[1], Value::Stream(Stream::default()), None);
        }
        let x = read(s, &a[1])?.ok_or_else(|| Reply::err("ERR harness: stream vanished"))?;
        let last = x.last_id;
        if last == MAX_ID {
            return Err(Reply::err(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let id = match t.id {
            None => {
                let ms = u64::try_from(now).unwrap_or(0);
                if ms > last.0 {
                    (ms, 0)
                } else {
                    incr(last).unwrap_or(MAX_ID)
                }
            }
            Some(((ms, _), false)) => {
                if ms == last.0 {
                    if last.1 == u64::MAX {
                        return Err(Reply::err(TOO_SMALL));
                    }
                    (ms, last.1 + 1)
                } else if ms > last.0 {
                    (ms, 0)
                } else {
                    return Err(Reply::err(TOO_SMALL));
                }
            }
            Some((id, true)) => {
                if id <= last {
                    return Err(Reply::err(TOO_SMALL));
                }
                id
            }
        };
        let entry = StreamEntry {
            id,
            fields: a[field_pos..].to_vec(),
            deleted: false,
        };
        match x.nodes.last_mut() {
            Some(n) if n.entries.len() < STREAM_NODE_MAX_ENTRIES => {
                n.entries.push(entry);
                n.live += 1;
            }
            _ => x.nodes.push(StreamNode {
                entries: vec![entry],
                live: 1,
            }),
        }
        x.len += 1;
        x.entries_added += 1;
        x.last_id = id;
        if t.strategy != Strategy::None {
            trim(x, &t);
        }
        Ok(Reply::Bulk(id_text(id)))
    })())
}

pub(super) fn xlen(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|x| Reply::Int(x.map_or(0, |x| x.len as i64))))
}

fn range(s: &mut Server, a: &[Vec<u8>], rev: bool) -> Reply {
    done((|| {
        let (start_arg, end_arg) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
        let (mut start, ex) = parse_interval(start_arg, 0)?;
        if ex {
            start =
                incr(start).ok_or_else(|| Reply::err("ERR invalid start ID for the interval"))?;
        }
        let (mut end, ex) = parse_interval(end_arg, u64::MAX)?;
        if ex {
            end = decr(end).ok_or_else(|| Reply::err("ERR invalid end ID for the interval"))?;
        }
        let mut count: i64 = -1;
        let mut j = 4;
        while j < a.len() {
            if is(&a[j], "count") && j + 1 < a.len() {
                count = number::parse_i64(&a[j + 1])
                    .ok_or_else(|| Reply::err(errors::NOT_INTEGER))?
                    .max(0);
                j += 2;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
        }
        let Some(x) = read(s, &a[1])? else {
            return Ok(Reply::Array(vec![]));
        };
        if count == 0 {
            return Ok(Reply::Nil);
        }
        let pick = |e: &&StreamEntry| e.id >= start && e.id <= end;
        let entries: Vec<&StreamEntry> = if rev {
            x.live().rev().filter(pick).collect()
        } else {
            x.live().filter(pick).collect()
        };
        let n = if count < 0 {
            entries.len()
        } else {
            count as usize
        };
        Ok(Reply::Array(
            entries
                .into_iter()
                .take(n)
                .map(|e| {
                    Reply::Array(vec![
                        Reply::Bulk(id_text(e.id)),
                        Reply::Array(e.fields.iter().cloned().map(Reply::Bulk).collect()),
                    ])
                })
                .collect(),
        ))
    })())
}

pub(super) fn xrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    range(s, a, false)
}

pub(super) fn xrevrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    range(s, a, true)
}

pub(super) fn xdel(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let Some(_) = read(s, &a[1])? else {
            return Ok(Reply::Int(0));
        };
        let ids = a[2..]
            .iter()
            .map(|id| parse_id(id, 0, true, None))
            .collect::<Result<Vec<_>, _>>()?;
        let x = read(s, &a[1])?.ok_or_else(|| Reply::err("ERR harness: stream vanished"))?;
        let mut deleted = 0;
        for id in ids {
            let found = x.nodes.iter_mut().enumerate().find_map(|(ni, n)| {
                n.entries
                    .iter_mut()
                    .find(|e| e.id == id && !e.deleted)
                    .map(|e| {
                        e.deleted = true;
                        ni
                    })
            });
            if let Some(ni) = found {
                x.nodes[ni].live -= 1;
                if x.nodes[ni].live == 0 {
                    x.nodes.remove(ni);
                }
                x.len -= 1;
                deleted += 1;
                x.max_deleted = x.max_deleted.max(id);
            }
        }
        Ok(Reply::Int(deleted))
    })())
}

pub(super) fn xtrim(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (t, _) = parse_trim(a, 2, false)?;
        if read(s, &a[1])?.is_none() {
            return Ok(Reply::Int(0));
        }
        let x = read(s, &a[1])?.ok_or_else(|| Reply::err("ERR harness: stream vanished"))?;
        Ok(Reply::Int(trim(x, &t)))
    })())
}
