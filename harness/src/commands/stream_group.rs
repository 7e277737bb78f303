//! Stream reads and consumer groups: XREAD and XREADGROUP (without waiting: a `BLOCK` read
//! with nothing to deliver answers a null at once, as Redis does in MULTI; `lua serve` blocks
//! the client on that null, see its `serve/blocking.rs`; scripts get Redis's error for
//! `BLOCK`), XGROUP, XACK and XPENDING; XCLAIM, XAUTOCLAIM and XINFO are in `stream_claim`.
//! Times (delivery, idle, seen) are the virtual clock's.

use super::stream::{decr, id_text, incr, parse_id, read};
use super::{done, int_arg, is};
use crate::keyspace::{PendingEntry, Stream, StreamEntry, StreamGroup, StreamId, Value};
use crate::reply::{errors, Reply};
use crate::server::Server;

pub(super) fn entry_reply(e: &StreamEntry) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(id_text(e.id)),
        Reply::Array(e.fields.iter().cloned().map(Reply::Bulk).collect()),
    ])
}

pub(super) fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(id_text(id))
}

pub(super) fn nogroup(key: &[u8], group: &[u8]) -> Reply {
    Reply::err(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// Redis's `streamRangeHasTombstones` from `start` on.
fn has_tombstones(x: &Stream, start: StreamId) -> bool {
    x.len > 0 && x.max_deleted != (0, 0) && start <= x.max_deleted
}

/// Redis's `streamEstimateDistanceFromFirstEverEntry`: how many entries come up to `id`.
fn distance(x: &Stream, id: StreamId) -> Option<u64> {
    if x.entries_added == 0 {
        return Some(0);
    }
    if x.len == 0 && id <= x.max_deleted {
        return Some(x.entries_added);
    }
    if id == x.last_id {
        return Some(x.entries_added);
    } else if id > x.last_id {
        return None;
    }
    let first = x.first_id();
    if x.max_deleted == (0, 0) || x.max_deleted < first {
        let before = x.entries_added - x.len as u64;
        if id < first {
            return Some(before);
        } else if id == first {
            return Some(before + 1);
        }
    }
    None
}

/// The group's `lag` (XINFO GROUPS): `None` when it cannot be known.
pub(super) fn lag(x: &Stream, g: &StreamGroup) -> Option<i64> {
    if x.entries_added == 0 {
        return Some(0);
    }
    if let Some(read) = g.entries_read {
        if !has_tombstones(x, g.last_id) {
            return Some(x.entries_added as i64 - read as i64);
        }
    }
    distance(x, g.last_id).map(|read| x.entries_added as i64 - read as i64)
}

pub(super) fn opt_int(v: Option<i64>) -> Reply {
    v.map_or(Reply::Nil, Reply::Int)
}

// ---------------------------------------------------------------- XREAD / XREADGROUP

struct ReadArgs {
    count: usize,
    /// `BLOCK` milliseconds (0: forever).
    block: Option<u64>,
    /// Where the keys after `STREAMS` start.
    streams_at: usize,
    noack: bool,
    group: Option<(Vec<u8>, Vec<u8>)>,
    keys: Vec<Vec<u8>>,
    ids: Vec<Vec<u8>>,
}

fn parse_read(a: &[Vec<u8>], xreadgroup: bool) -> Result<ReadArgs, Reply> {
    let mut r = ReadArgs {
        count: 0,
        block: None,
        streams_at: 0,
        noack: false,
        group: None,
        keys: Vec::new(),
        ids: Vec::new(),
    };
    let mut i = 1;
    while i < a.len() {
        let more = a.len() - i - 1;
        if is(&a[i], "block") && more >= 1 {
            let ms = int_arg(&a[i + 1])
                .map_err(|_| Reply::err("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Reply::err("ERR timeout is negative"));
            }
            r.block = Some(ms as u64);
            i += 2;
        } else if is(&a[i], "count") && more >= 1 {
            r.count = int_arg(&a[i + 1])?.max(0) as usize;
            i += 2;
        } else if is(&a[i], "streams") && more >= 1 {
            let rest = &a[i + 1..];
            if !rest.len().is_multiple_of(2) {
                return Err(Reply::err(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            let n = rest.len() / 2;
            r.streams_at = i + 1;
            r.keys = rest[..n].to_vec();
            r.ids = rest[n..].to_vec();
            break;
        } else if is(&a[i], "group") && more >= 2 {
            if !xreadgroup {
                return Err(Reply::err(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((a[i + 1].clone(), a[i + 2].clone()));
            i += 3;
        } else if is(&a[i], "noack") {
            if !xreadgroup {
                return Err(Reply::err(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
            i += 1;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
    }
    if r.keys.is_empty() {
        return Err(Reply::err(errors::SYNTAX));
    }
    if xreadgroup && r.group.is_none() {
        return Err(Reply::err("ERR Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

/// What one stream's ID argument asks for.
enum From {
    /// Entries after this ID.
    After(StreamId),
    /// XREADGROUP `>`: entries never delivered to the group.
    New,
    /// XREADGROUP with an ID: the consumer's own pending entries after it.
    Pending(StreamId),
}

fn read_cmd(s: &mut Server, a: &[Vec<u8>], xreadgroup: bool) -> Reply {
    done((|| {
        let r = parse_read(a, xreadgroup)?;
        if r.block.is_some() && s.in_script {
            // Redis names the command as the script spelled it.
            return Err(Reply::err(format!(
                "ERR {} command is not allowed with BLOCK option from scripts",
                String::from_utf8_lossy(&a[0])
            )));
        }
        // Every ID and group is checked before anything is read, as Redis does.
        let mut froms = Vec::with_capacity(r.keys.len());
        for (key, id) in r.keys.iter().zip(&r.ids) {
            let stream = read(s, key)?;
            if let Some((group, _)) = &r.group {
                let found = stream.is_some_and(|x| x.groups.contains_key(group));
                if !found {
                    return Err(Reply::err(format!(
                        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(group)
                    )));
                }
            }
            let from = match (id.as_slice(), xreadgroup) {
                (b"$", false) => From::After(read(s, key)?.map_or((0, 0), |x| x.last_id)),
                (b"$", true) => return Err(Reply::err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")),
                (b">", true) => From::New,
                (b">", false) => return Err(Reply::err("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")),
                (_, true) => From::Pending(parse_id(id, 0, true, None)?),
                (_, false) => From::After(parse_id(id, 0, true, None)?),
            };
            froms.push(from);
        }
        let now = s.now_ms;
        let mut out = Vec::new();
        for (key, from) in r.keys.iter().zip(froms) {
            // A consumer's history is answered even when empty.
            let history = matches!(from, From::Pending(_));
            let Some(x) = read(s, key)? else { continue };
            let count = if r.count == 0 { usize::MAX } else { r.count };
            let items = match (&r.group, from) {
                (_, From::After(after)) => x
                    .live()
                    .filter(|e| e.id > after)
                    .take(count)
                    .map(entry_reply)
                    .collect::<Vec<_>>(),
                (Some((group, consumer)), From::New) => {
                    deliver_new(x, group, consumer, count, r.noack, now)
                }
                (Some((group, consumer)), From::Pending(after)) => {
                    deliver_pending(x, group, consumer, after, count, now)
                }
                (None, _) => Vec::new(),
            };
            out.push((key.clone(), items, history));
        }
        let out: Vec<(Reply, Reply)> = out
            .into_iter()
            .filter(|(_, items, history)| *history || !items.is_empty())
            .map(|(k, items, _)| (Reply::Bulk(k), Reply::Array(items)))
            .collect();
        if out.is_empty() {
            return Ok(Reply::Nil);
        }
        // A RESP3 client gets a map of stream to entries, as Redis 7.0 answers it.
        if s.client_resp3 {
            return Ok(Reply::Map(out));
        }
        Ok(Reply::Array(
            out.into_iter()
                .map(|(k, items)| Reply::Array(vec![k, items]))
                .collect(),
        ))
    })())
}

pub(super) fn touch_consumer(g: &mut StreamGroup, consumer: &[u8], now: i64) {
    g.consumers.insert(consumer.to_vec(), now);
}

fn deliver_new(
    x: &mut Stream,
    group: &[u8],
    consumer: &[u8],
    count: usize,
    noack: bool,
    now: i64,
) -> Vec<Reply> {
    let Some(g) = x.groups.get(group) else {
        return Vec::new();
    };
    let after = g.last_id;
    let picked: Vec<StreamEntry> = x
        .live()
        .filter(|e| e.id > after)
        .take(count)
        .cloned()
        .collect();
    let tomb: Vec<bool> = picked.iter().map(|e| has_tombstones(x, e.id)).collect();
    let dist: Vec<Option<u64>> = picked.iter().map(|e| distance(x, e.id)).collect();
    let added = x.entries_added;
    let Some(g) = x.groups.get_mut(group) else {
        return Vec::new();
    };
    touch_consumer(g, consumer, now);
    for (i, e) in picked.iter().enumerate() {
        if e.id > g.last_id {
            g.entries_read = match g.entries_read {
                Some(n) if !tomb[i] => Some(n + 1),
                _ if added > 0 => dist[i],
                other => other,
            };
            g.last_id = e.id;
        }
        if !noack {
            g.pending.insert(
                e.id,
                PendingEntry {
                    consumer: consumer.to_vec(),
                    delivered_ms: now,
                    deliveries: 1,
                },
            );
        }
    }
    picked.iter().map(entry_reply).collect()
}

fn deliver_pending(
    x: &mut Stream,
    group: &[u8],
    consumer: &[u8],
    after: StreamId,
    count: usize,
    now: i64,
) -> Vec<Reply> {
    let ids: Vec<StreamId> = x.groups.get(group).map_or_else(Vec::new, |g| {
        g.pending
            .iter()
            .filter(|(id, p)| **id > after && p.consumer == consumer)
            .map(|(id, _)| *id)
            .take(count)
            .collect()
    });
    let entries: Vec<Option<StreamEntry>> = ids.iter().map(|id| x.entry(*id).cloned()).collect();
    let Some(g) = x.groups.get_mut(group) else {
        return Vec::new();
    };
    touch_consumer(g, consumer, now);
    ids.iter()
        .zip(entries)
        .map(|(id, e)| match e {
            Some(e) => {
                if let Some(p) = g.pending.get_mut(id) {
                    p.delivered_ms = now;
                    p.deliveries += 1;
                }
                entry_reply(&e)
            }
            None => Reply::Array(vec![id_reply(*id), Reply::Nil]),
        })
        .collect()
}

fn is_xreadgroup(a: &[Vec<u8>]) -> Option<bool> {
    match a.first() {
        Some(n) if is(n, "xread") => Some(false),
        Some(n) if is(n, "xreadgroup") => Some(true),
        _ => None,
    }
}

/// XREAD's or XREADGROUP's `BLOCK` milliseconds (0: forever); `None` for another command,
/// one without `BLOCK`, or one Redis refuses.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) fn block_ms(a: &[Vec<u8>]) -> Option<u64> {
    parse_read(a, is_xreadgroup(a)?).ok()?.block
}

/// The XREAD a blocked client runs again when woken: each `$` ID pinned to its stream's
/// last ID at the call (`0-0` for a missing key), which is what `$` means to a blocked XREAD.
pub(crate) fn pin_last_ids(s: &mut Server, a: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut argv = a.to_vec();
    let Some(r) = is_xreadgroup(a).and_then(|g| parse_read(a, g).ok()) else {
        return argv;
    };
    let n = r.keys.len();
    for (j, key) in r.keys.iter().enumerate() {
        let at = r.streams_at + n + j;
        if argv[at] == b"$" {
            let last = read(s, key).ok().flatten().map_or((0, 0), |x| x.last_id);
            argv[at] = id_text(last);
        }
    }
    argv
}

/// The last ID of each stream an XREADGROUP reads (`None`: no stream there), for
/// [`blocked_read_failed`]; empty for another command.
pub(crate) fn last_ids(s: &mut Server, a: &[Vec<u8>]) -> Vec<Option<StreamId>> {
    if is_xreadgroup(a) != Some(true) {
        return Vec::new();
    }
    let Ok(r) = parse_read(a, true) else {
        return Vec::new();
    };
    r.keys
        .iter()
        .map(|k| read(s, k).ok().flatten().map(|x| x.last_id))
        .collect()
}

/// What a client blocked on XREADGROUP `a` is answered when running it again failed, as
/// Redis 7.0 answers it: `UNBLOCKED` once a stream it reads is deleted or overwritten, and
/// `NOGROUP` once an entry is added to a stream (`since`: the last IDs when it blocked) whose
/// group was destroyed. `None`: it waits on.
pub(crate) fn blocked_read_failed(
    s: &mut Server,
    a: &[Vec<u8>],
    since: &[Option<StreamId>],
) -> Option<Reply> {
    if is_xreadgroup(a) != Some(true) {
        return None;
    }
    let r = parse_read(a, true).ok()?;
    let (group, _) = r.group.as_ref()?;
    for (key, before) in r.keys.iter().zip(since) {
        let Ok(Some(x)) = read(s, key) else {
            return Some(Reply::err("UNBLOCKED the stream key no longer exists"));
        };
        if !x.groups.contains_key(group) && *before != Some(x.last_id) {
            return Some(Reply::err(
                "NOGROUP the consumer group this client was blocked on no longer exists",
            ));
        }
    }
    None
}

pub(crate) fn xread(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    read_cmd(s, a, false)
}

pub(crate) fn xreadgroup(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    read_cmd(s, a, true)
}

// ---------------------------------------------------------------- XGROUP

/// The group-creating and -moving ID: `$` for the stream's last.
fn group_id(x: Option<&Stream>, arg: &[u8]) -> Result<StreamId, Reply> {
    if arg == b"$" {
        return Ok(x.map_or((0, 0), |x| x.last_id));
    }
    parse_id(arg, 0, true, None)
}

/// `ERR unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP.`
fn subcommand_syntax(sub: &[u8]) -> Reply {
    Reply::err(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)])
    ))
}

fn entries_read_opt(a: &[Vec<u8>], from: usize) -> Result<(Option<u64>, bool), Reply> {
    let (mut entries, mut mkstream) = (None, false);
    let mut i = from;
    while i < a.len() {
        if is(&a[i], "mkstream") && is(&a[1], "create") {
            mkstream = true;
            i += 1;
        } else if is(&a[i], "entriesread") && i + 1 < a.len() {
            let n = int_arg(&a[i + 1])?;
            if n < -1 {
                return Err(Reply::err(
                    "ERR value for ENTRIESREAD must be positive or -1",
                ));
            }
            entries = u64::try_from(n).ok();
            i += 2;
        } else {
            return Err(subcommand_syntax(&a[1]));
        }
    }
    Ok((entries, mkstream))
}

const NEEDS_KEY: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";

pub(super) fn no_such_group(key: &[u8], group: &[u8]) -> Reply {
    Reply::err(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

pub(crate) fn xgroup(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
        let (key, group) = (&a[2], &a[3]);
        let (entries, mkstream) = match sub.as_str() {
            "create" => entries_read_opt(a, 5)?,
            "setid" => entries_read_opt(a, 5)?,
            _ => (None, false),
        };
        if read(s, key)?.is_none() {
            if sub == "create" && mkstream {
                s.db.set(key, Value::Stream(Stream::default()), None);
            } else {
                return Err(Reply::err(NEEDS_KEY));
            }
        }
        let now = s.now_ms;
        let x = read(s, key)?.ok_or_else(|| Reply::err(NEEDS_KEY))?;
        match sub.as_str() {
            "create" => {
                let id = group_id(Some(x), &a[4])?;
                if x.groups.contains_key(group) {
                    return Err(Reply::err("BUSYGROUP Consumer Group name already exists"));
                }
                x.groups.insert(
                    group.clone(),
                    StreamGroup {
                        last_id: id,
                        entries_read: entries,
                        ..StreamGroup::default()
                    },
                );
                Ok(Reply::ok())
            }
            "setid" => {
                let id = group_id(Some(x), &a[4])?;
                let g = x
                    .groups
                    .get_mut(group)
                    .ok_or_else(|| no_such_group(key, group))?;
                g.last_id = id;
                g.entries_read = entries;
                Ok(Reply::ok())
            }
            "destroy" => Ok(Reply::Int(i64::from(x.groups.remove(group).is_some()))),
            "createconsumer" => {
                let g = x
                    .groups
                    .get_mut(group)
                    .ok_or_else(|| no_such_group(key, group))?;
                if g.consumers.contains_key(&a[4]) {
                    return Ok(Reply::Int(0));
                }
                g.consumers.insert(a[4].clone(), now);
                Ok(Reply::Int(1))
            }
            "delconsumer" => {
                let g = x
                    .groups
                    .get_mut(group)
                    .ok_or_else(|| no_such_group(key, group))?;
                if g.consumers.remove(&a[4]).is_none() {
                    return Ok(Reply::Int(0));
                }
                let before = g.pending.len();
                g.pending.retain(|_, p| p.consumer != a[4]);
                Ok(Reply::Int((before - g.pending.len()) as i64))
            }
            _ => Err(Reply::err(errors::SYNTAX)),
        }
    })())
}

// ---------------------------------------------------------------- XACK / XPENDING

fn ids_of(args: &[Vec<u8>]) -> Result<Vec<StreamId>, Reply> {
    args.iter().map(|id| parse_id(id, 0, true, None)).collect()
}

pub(crate) fn xack(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let ids = ids_of(&a[3..])?;
        let Some(x) = read(s, &a[1])? else {
            return Ok(Reply::Int(0));
        };
        let Some(g) = x.groups.get_mut(&a[2]) else {
            return Ok(Reply::Int(0));
        };
        Ok(Reply::Int(
            ids.iter()
                .filter(|id| g.pending.remove(id).is_some())
                .count() as i64,
        ))
    })())
}

pub(crate) fn xpending(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (key, group) = (&a[1], &a[2]);
        let mut i = 3;
        let mut min_idle = None;
        if a.len() > 3 && is(&a[3], "idle") {
            if a.len() < 6 {
                return Err(Reply::err(errors::SYNTAX));
            }
            min_idle = Some(int_arg(&a[4])?);
            i = 5;
        }
        let extended = a.len() > i;
        if extended && !(a.len() == i + 3 || a.len() == i + 4) {
            return Err(Reply::err(errors::SYNTAX));
        }
        let range = if extended {
            let start = parse_bound(&a[i], false)?;
            let end = parse_bound(&a[i + 1], true)?;
            let count = int_arg(&a[i + 2])?.max(0) as usize;
            Some((start, end, count, a.get(i + 3)))
        } else {
            None
        };
        let now = s.now_ms;
        let x = read(s, key)?.ok_or_else(|| nogroup(key, group))?;
        let g = x.groups.get(group).ok_or_else(|| nogroup(key, group))?;
        let Some((start, end, count, consumer)) = range else {
            if g.pending.is_empty() {
                return Ok(Reply::Array(vec![
                    Reply::Int(0),
                    Reply::Nil,
                    Reply::Nil,
                    Reply::Nil,
                ]));
            }
            let mut per: std::collections::BTreeMap<&[u8], i64> = Default::default();
            for p in g.pending.values() {
                *per.entry(p.consumer.as_slice()).or_default() += 1;
            }
            let first = g.pending.keys().next().copied().unwrap_or_default();
            let last = g.pending.keys().next_back().copied().unwrap_or_default();
            return Ok(Reply::Array(vec![
                Reply::Int(g.pending.len() as i64),
                id_reply(first),
                id_reply(last),
                Reply::Array(
                    per.into_iter()
                        .map(|(c, n)| {
                            Reply::Array(vec![
                                Reply::bulk(c),
                                Reply::Bulk(n.to_string().into_bytes()),
                            ])
                        })
                        .collect(),
                ),
            ]));
        };
        Ok(Reply::Array(
            g.pending
                .range(start..=end.max(start))
                .filter(|(id, _)| **id <= end)
                .filter(|(_, p)| consumer.is_none_or(|c| p.consumer == *c))
                .filter(|(_, p)| min_idle.is_none_or(|m| now - p.delivered_ms >= m))
                .take(count)
                .map(|(id, p)| {
                    Reply::Array(vec![
                        id_reply(*id),
                        Reply::bulk(&p.consumer),
                        Reply::Int((now - p.delivered_ms).max(0)),
                        Reply::Int(p.deliveries as i64),
                    ])
                })
                .collect(),
        ))
    })())
}

/// An XPENDING range bound: `-`, `+`, an ID, or `(ID` to exclude it.
pub(super) fn parse_bound(arg: &[u8], end: bool) -> Result<StreamId, Reply> {
    let missing = if end { u64::MAX } else { 0 };
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_id(&arg[1..], missing, true, None)?;
        let moved = if end { decr(id) } else { incr(id) };
        return moved.ok_or_else(|| {
            Reply::err(if end {
                "ERR invalid end ID for the interval"
            } else {
                "ERR invalid start ID for the interval"
            })
        });
    }
    parse_id(arg, missing, false, None)
}
