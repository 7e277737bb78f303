//! XCLAIM, XAUTOCLAIM and XINFO STREAM / GROUPS / CONSUMERS (see `stream_group`).

use super::stream::{parse_id, read};
use super::stream_group::{
    entry_reply, id_reply, lag, no_such_group, nogroup, opt_int, parse_bound, touch_consumer,
};
use super::{done, int_arg, is};
use crate::keyspace::{PendingEntry, StreamEntry, StreamId};
use crate::reply::{errors, Reply};
use crate::server::Server;

// ---------------------------------------------------------------- XCLAIM / XAUTOCLAIM

pub(super) fn xclaim(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (key, group, consumer) = (&a[1], &a[2], &a[3]);
        let min_idle = int_arg(&a[4])
            .map_err(|_| Reply::err("ERR Invalid min-idle-time argument for XCLAIM"))?
            .max(0);
        let now = s.now_ms;
        let mut ids = Vec::new();
        let mut j = 5;
        while j < a.len() {
            match parse_id(&a[j], 0, true, None) {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
            j += 1;
        }
        let (mut delivered, mut retry, mut force, mut justid, mut last) =
            (None, None, false, false, None);
        while j < a.len() {
            let more = a.len() - j - 1;
            if is(&a[j], "force") {
                force = true;
            } else if is(&a[j], "justid") {
                justid = true;
            } else if is(&a[j], "idle") && more >= 1 {
                j += 1;
                delivered = Some(now - int_arg(&a[j])?);
            } else if is(&a[j], "time") && more >= 1 {
                j += 1;
                delivered = Some(int_arg(&a[j])?);
            } else if is(&a[j], "retrycount") && more >= 1 {
                j += 1;
                retry = Some(int_arg(&a[j])?.max(0) as u64);
            } else if is(&a[j], "lastid") && more >= 1 {
                j += 1;
                last = Some(parse_id(&a[j], 0, true, None)?);
            } else {
                return Err(Reply::err(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(&a[j])
                )));
            }
            j += 1;
        }
        let delivered = delivered.map(|t| t.min(now).max(0));
        let x = read(s, key)?.ok_or_else(|| nogroup(key, group))?;
        if !x.groups.contains_key(group) {
            return Err(nogroup(key, group));
        }
        let live: Vec<Option<StreamEntry>> = ids.iter().map(|id| x.entry(*id).cloned()).collect();
        let g = x.groups.get_mut(group).ok_or_else(|| nogroup(key, group))?;
        if let Some(l) = last {
            if l > g.last_id {
                g.last_id = l;
            }
        }
        touch_consumer(g, consumer, now);
        let mut out = Vec::new();
        for (id, entry) in ids.iter().zip(live) {
            let Some(entry) = entry else {
                // Deleted from the stream: dropped from the PEL.
                g.pending.remove(id);
                continue;
            };
            if !g.pending.contains_key(id) {
                if !force {
                    continue;
                }
                g.pending.insert(
                    *id,
                    PendingEntry {
                        consumer: consumer.clone(),
                        delivered_ms: now,
                        deliveries: 0,
                    },
                );
            }
            let Some(p) = g.pending.get_mut(id) else {
                continue;
            };
            if min_idle > 0 && now - p.delivered_ms < min_idle {
                continue;
            }
            p.consumer = consumer.clone();
            p.delivered_ms = delivered.unwrap_or(now);
            if let Some(r) = retry {
                p.deliveries = r;
            } else if !justid {
                p.deliveries += 1;
            }
            out.push(if justid {
                id_reply(*id)
            } else {
                entry_reply(&entry)
            });
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn xautoclaim(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let (key, group, consumer) = (&a[1], &a[2], &a[3]);
        let min_idle = int_arg(&a[4])
            .map_err(|_| Reply::err("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?
            .max(0);
        let start = parse_bound(&a[5], false)?;
        let (mut count, mut justid) = (100i64, false);
        let mut j = 6;
        while j < a.len() {
            if is(&a[j], "count") && j + 1 < a.len() {
                count = int_arg(&a[j + 1])?;
                if !(1..=i64::MAX / 10).contains(&count) {
                    return Err(Reply::err("ERR COUNT must be > 0"));
                }
                j += 2;
            } else if is(&a[j], "justid") {
                justid = true;
                j += 1;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
        }
        let now = s.now_ms;
        let x = read(s, key)?.ok_or_else(|| nogroup(key, group))?;
        if !x.groups.contains_key(group) {
            return Err(nogroup(key, group));
        }
        let ids: Vec<StreamId> = x.groups[group.as_slice()]
            .pending
            .range(start..)
            .map(|(id, _)| *id)
            .collect();
        let live: Vec<Option<StreamEntry>> = ids.iter().map(|id| x.entry(*id).cloned()).collect();
        let g = x.groups.get_mut(group).ok_or_else(|| nogroup(key, group))?;
        touch_consumer(g, consumer, now);
        let mut attempts = count * 10;
        let mut left = count;
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        let mut next = (0, 0);
        let mut iter = ids.iter().zip(live).peekable();
        while left > 0 && attempts > 0 {
            let Some((id, entry)) = iter.next() else {
                break;
            };
            attempts -= 1;
            let Some(entry) = entry else {
                g.pending.remove(id);
                deleted.push(id_reply(*id));
                continue;
            };
            let Some(p) = g.pending.get_mut(id) else {
                continue;
            };
            if min_idle > 0 && now - p.delivered_ms < min_idle {
                continue;
            }
            p.consumer = consumer.clone();
            p.delivered_ms = now;
            if !justid {
                p.deliveries += 1;
            }
            claimed.push(if justid {
                id_reply(*id)
            } else {
                entry_reply(&entry)
            });
            left -= 1;
        }
        if let Some((id, _)) = iter.peek() {
            next = **id;
        }
        Ok(Reply::Array(vec![
            id_reply(next),
            Reply::Array(claimed),
            Reply::Array(deleted),
        ]))
    })())
}

// ---------------------------------------------------------------- XINFO

pub(super) fn xinfo(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
        let now = s.now_ms;
        let x = match read(s, &a[2])? {
            Some(x) => x,
            None => return Err(Reply::err("ERR no such key")),
        };
        let pair = |k: &str, v: Reply| [Reply::bulk(k), v];
        match sub.as_str() {
            "stream" if a.len() == 3 => {
                let first = x.live().next().map_or(Reply::Nil, entry_reply);
                let last = x.live().next_back().map_or(Reply::Nil, entry_reply);
                Ok(Reply::Array(
                    [
                        pair("length", Reply::Int(x.len as i64)),
                        pair("radix-tree-keys", Reply::Int(x.nodes.len() as i64)),
                        pair("radix-tree-nodes", Reply::Int(x.nodes.len() as i64 + 1)),
                        pair("last-generated-id", id_reply(x.last_id)),
                        pair("max-deleted-entry-id", id_reply(x.max_deleted)),
                        pair("entries-added", Reply::Int(x.entries_added as i64)),
                        pair("recorded-first-entry-id", id_reply(x.first_id())),
                        pair("groups", Reply::Int(x.groups.len() as i64)),
                        pair("first-entry", first),
                        pair("last-entry", last),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                ))
            }
            "stream" => Err(Reply::err(
                "ERR harness: XINFO STREAM FULL is not emulated (XINFO STREAM, GROUPS and CONSUMERS are)",
            )),
            "groups" if a.len() == 3 => Ok(Reply::Array(
                x.groups
                    .iter()
                    .map(|(name, g)| {
                        let consumers = g.consumers.len() as i64;
                        Reply::Array(
                            [
                                pair("name", Reply::bulk(name)),
                                pair("consumers", Reply::Int(consumers)),
                                pair("pending", Reply::Int(g.pending.len() as i64)),
                                pair("last-delivered-id", id_reply(g.last_id)),
                                pair("entries-read", opt_int(g.entries_read.map(|n| n as i64))),
                                pair("lag", opt_int(lag(x, g))),
                            ]
                            .into_iter()
                            .flatten()
                            .collect(),
                        )
                    })
                    .collect(),
            )),
            "consumers" if a.len() == 4 => {
                let g = x.groups.get(&a[3]).ok_or_else(|| {
                    no_such_group(&a[2], &a[3])
                })?;
                Ok(Reply::Array(
                    g.consumers
                        .iter()
                        .map(|(name, seen)| {
                            let pending =
                                g.pending.values().filter(|p| p.consumer == *name).count();
                            Reply::Array(
                                [
                                    pair("name", Reply::bulk(name)),
                                    pair("pending", Reply::Int(pending as i64)),
                                    pair("idle", Reply::Int((now - seen).max(0))),
                                ]
                                .into_iter()
                                .flatten()
                                .collect(),
                            )
                        })
                        .collect(),
                ))
            }
            _ => Err(Reply::err(errors::SYNTAX)),
        }
    })())
}
