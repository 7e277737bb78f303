//! Keyspace notifications (Redis 7.0's `notify.c`, `notify-keyspace-events`): after a command
//! wrote, `__keyspace@0__:<key>` gets the event's name and `__keyevent@0__:<event>` the key,
//! through the server's publisher (`lua serve`'s subscribers; offline nobody listens, so
//! nothing is done). The events are those of Redis's commands for the common writes, decided
//! from the command, its reply and whether its keys exist before and after; `expired` comes
//! from [`expire_due`], which the server calls after the clock moves.

use crate::reply::Reply;
use crate::server::Server;

mod stream;

const KEYSPACE: u32 = 1 << 0;
const KEYEVENT: u32 = 1 << 1;
const GENERIC: u32 = 1 << 2;
const STRING: u32 = 1 << 3;
const LIST: u32 = 1 << 4;
const SET: u32 = 1 << 5;
const HASH: u32 = 1 << 6;
const ZSET: u32 = 1 << 7;
const EXPIRED: u32 = 1 << 8;
const EVICTED: u32 = 1 << 9;
const STREAM: u32 = 1 << 10;
const KEY_MISS: u32 = 1 << 11;
const MODULE: u32 = 1 << 12;
const NEW: u32 = 1 << 13;
const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// `notify-keyspace-events` as Redis reads it; `None` for a character it does not know.
pub(crate) fn parse_flags(s: &[u8]) -> Option<u32> {
    s.iter().try_fold(0, |f, c| {
        Some(
            f | match c {
                b'A' => ALL,
                b'g' => GENERIC,
                b'$' => STRING,
                b'l' => LIST,
                b's' => SET,
                b'h' => HASH,
                b'z' => ZSET,
                b'x' => EXPIRED,
                b'e' => EVICTED,
                b'K' => KEYSPACE,
                b'E' => KEYEVENT,
                b't' => STREAM,
                b'm' => KEY_MISS,
                b'd' => MODULE,
                b'n' => NEW,
                _ => return None,
            },
        )
    })
}

/// `notify-keyspace-events` as CONFIG GET shows it (Redis's `keyspaceEventsFlagsToString`).
pub(crate) fn format_flags(f: u32) -> String {
    let mut out = String::new();
    if f & ALL == ALL {
        out.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if f & bit != 0 {
                out.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if f & bit != 0 {
            out.push(c);
        }
    }
    out
}

fn notify(s: &Server, class: u32, event: &str, key: &[u8]) {
    let f = s.notify_flags;
    if f & class == 0 {
        return;
    }
    let Some(p) = &s.publisher else {
        return;
    };
    if f & KEYSPACE != 0 {
        let channel = [b"__keyspace@0__:".as_slice(), key].concat();
        (p.0)(&channel, event.as_bytes());
    }
    if f & KEYEVENT != 0 {
        let channel = [b"__keyevent@0__:".as_slice(), event.as_bytes()].concat();
        (p.0)(&channel, key);
    }
}

/// Which of a command's keys exist before it runs.
#[derive(Debug)]
pub(crate) struct Before(Vec<(Vec<u8>, bool)>, Vec<bool>);

fn keys_of<'a>(name: &str, argv: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    let all = argv.get(1..).unwrap_or_default();
    match name {
        "del" | "unlink" => all.iter().map(Vec::as_slice).collect(),
        "mset" | "msetnx" => all.iter().step_by(2).map(Vec::as_slice).collect(),
        "rename" | "renamenx" | "smove" | "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => {
            all.iter().take(2).map(Vec::as_slice).collect()
        }
        "blpop" | "brpop" | "bzpopmin" | "bzpopmax" => {
            (all.iter().take(all.len().saturating_sub(1)))
                .map(Vec::as_slice)
                .collect()
        }
        _ => all.iter().take(1).map(Vec::as_slice).collect(),
    }
}

fn exists(s: &Server, key: &[u8]) -> bool {
    s.db.iter_one(key, s.now_ms)
}

/// Before a command runs: `None` when no notification is enabled or nobody could hear it.
pub(crate) fn before(s: &Server, name: &str, argv: &[Vec<u8>]) -> Option<Before> {
    if s.notify_flags & (KEYSPACE | KEYEVENT) == 0 || s.publisher.is_none() {
        return None;
    }
    let keys = keys_of(name, argv);
    Some(Before(
        keys.into_iter()
            .map(|k| (k.to_vec(), exists(s, k)))
            .collect(),
        stream::before(s, name, argv),
    ))
}

fn positive(r: &Reply) -> bool {
    match r {
        Reply::Int(n) => *n > 0,
        Reply::Error(_) | Reply::Nil => false,
        Reply::Array(a) => !a.is_empty(),
        _ => true,
    }
}

fn has_option(argv: &[Vec<u8>], opts: &[&str]) -> bool {
    argv.iter()
        .skip(3)
        .any(|a| opts.iter().any(|o| crate::commands::is(a, o)))
}

/// After the command ran and answered `reply`: its events, in Redis's order.
pub(crate) fn after(s: &Server, name: &str, argv: &[Vec<u8>], reply: &Reply, before: Before) {
    if matches!(reply, Reply::Error(_)) {
        return;
    }
    stream::after(s, name, argv, reply, &before.1);
    let keys = before.0;
    let Some((key, existed)) = keys.first().cloned() else {
        return;
    };
    let now = exists(s, &key);
    // A key the command created: `new` first (Redis's `dbAdd`).
    if s.notify_flags & NEW != 0 {
        for (k, was) in &keys {
            if !*was && exists(s, k) {
                notify(s, NEW, "new", k);
            }
        }
    }
    // A container emptied by the command is deleted: `del` after its own event.
    let emptied = |s: &Server| {
        if existed && !exists(s, &key) {
            notify(s, GENERIC, "del", &key);
        }
    };
    let expire_opts = ["ex", "px", "exat", "pxat"];
    match name {
        "set" => {
            let wrote = matches!(reply, Reply::Status(_))
                || (has_option(argv, &["get"]) && now && !has_option(argv, &["nx", "xx"]));
            if wrote {
                notify(s, STRING, "set", &key);
                if has_option(argv, &expire_opts) {
                    notify(s, GENERIC, "expire", &key);
                }
            }
        }
        "setex" | "psetex" => {
            notify(s, STRING, "set", &key);
            notify(s, GENERIC, "expire", &key);
        }
        "setnx" | "msetnx" if !positive(reply) => {}
        "setnx" | "getset" => notify(s, STRING, "set", &key),
        "mset" | "msetnx" => keys.iter().for_each(|(k, _)| notify(s, STRING, "set", k)),
        "incr" | "decr" | "incrby" | "decrby" => notify(s, STRING, "incrby", &key),
        "incrbyfloat" | "append" => notify(s, STRING, name, &key),
        "setrange" if now => notify(s, STRING, "setrange", &key),
        "getdel" if positive(reply) => notify(s, GENERIC, "del", &key),
        "del" | "unlink" => {
            for (k, was) in &keys {
                if *was && !exists(s, k) {
                    notify(s, GENERIC, "del", k);
                }
            }
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" if positive(reply) => {
            notify(s, GENERIC, if now { "expire" } else { "del" }, &key);
        }
        "restore" if now => notify(s, GENERIC, "restore", &key),
        "persist" if positive(reply) => notify(s, GENERIC, "persist", &key),
        "rename" | "renamenx" if positive(reply) => {
            notify(s, GENERIC, "rename_from", &key);
            if let Some((to, _)) = keys.get(1) {
                notify(s, GENERIC, "rename_to", to);
            }
        }
        "lpush" | "rpush" => notify(s, LIST, name, &key),
        "lpushx" | "rpushx" if positive(reply) => notify(s, LIST, &name[..5], &key),
        "lpop" | "rpop" | "blpop" | "brpop" if positive(reply) => {
            let (event, key) = match (name, reply) {
                ("blpop" | "brpop", Reply::Array(a)) => match a.first() {
                    Some(Reply::Bulk(k)) => (&name[1..], k.clone()),
                    _ => return,
                },
                _ => (name, key.clone()),
            };
            let was = keys.iter().any(|(k, e)| *k == key && *e);
            notify(s, LIST, event, &key);
            if was && !exists(s, &key) {
                notify(s, GENERIC, "del", &key);
            }
        }
        "rpoplpush" | "lmove" | "brpoplpush" | "blmove" if positive(reply) => {
            let (from_left, to_left) = match name {
                "lmove" | "blmove" => (
                    crate::commands::is(&argv[3], "left"),
                    crate::commands::is(&argv[4], "left"),
                ),
                _ => (false, true),
            };
            if let Some((dst, _)) = keys.get(1) {
                notify(s, LIST, if to_left { "lpush" } else { "rpush" }, dst);
            }
            notify(s, LIST, if from_left { "lpop" } else { "rpop" }, &key);
            emptied(s);
        }
        "lset" | "ltrim" => {
            notify(s, LIST, name, &key);
            emptied(s);
        }
        "lrem" | "linsert" if positive(reply) => {
            notify(s, LIST, name, &key);
            emptied(s);
        }
        "hset" | "hmset" => notify(s, HASH, "hset", &key),
        "hsetnx" if positive(reply) => notify(s, HASH, "hset", &key),
        "hincrby" | "hincrbyfloat" => notify(s, HASH, name, &key),
        "hdel" if positive(reply) => {
            notify(s, HASH, "hdel", &key);
            emptied(s);
        }
        "sadd" if positive(reply) => notify(s, SET, "sadd", &key),
        "srem" | "spop" if positive(reply) => {
            notify(s, SET, name, &key);
            emptied(s);
        }
        "smove" if positive(reply) => {
            notify(s, SET, "srem", &key);
            if let Some((dst, _)) = keys.get(1) {
                notify(s, SET, "sadd", dst);
            }
            emptied(s);
        }
        "zadd" if has_option(argv, &["incr"]) && !matches!(reply, Reply::Nil) => {
            notify(s, ZSET, "zincr", &key);
        }
        "zadd" if positive(reply) => notify(s, ZSET, "zadd", &key),
        "zincrby" => notify(s, ZSET, "zincr", &key),
        "zrem" | "zpopmin" | "zpopmax" | "zremrangebyscore" | "zremrangebyrank"
        | "zremrangebylex"
            if positive(reply) =>
        {
            notify(s, ZSET, name, &key);
            emptied(s);
        }
        "bzpopmin" | "bzpopmax" if positive(reply) => {
            let first = match reply {
                Reply::Array(a) => a.first(),
                _ => None,
            };
            if let Some(Reply::Bulk(k)) = first {
                let was = keys.iter().any(|(x, e)| x == k && *e);
                notify(s, ZSET, &name[1..], k);
                if was && !exists(s, k) {
                    notify(s, GENERIC, "del", k);
                }
            }
        }
        _ => {}
    }
}

/// An `evicted` event for `key` (`maxmemory-policy` evicted it).
pub(crate) fn evicted(s: &Server, key: &[u8]) {
    notify(s, EVICTED, "evicted", key);
}

/// Whether flags `f` send `expired` events to any channel.
pub(crate) fn expired_events_on(f: u32) -> bool {
    f & EXPIRED != 0 && f & (KEYSPACE | KEYEVENT) != 0
}

/// Deletes the keys past their expiry on the clock, each with an `expired` event (what
/// Redis's expiry does as time passes); nothing when `expired` events are off.
pub(crate) fn expire_due(s: &mut Server) {
    if !expired_events_on(s.notify_flags) {
        return;
    }
    let now = s.now_ms;
    for key in s.db.stale_keys(now) {
        s.db.remove(&key, now);
        notify(s, EXPIRED, "expired", &key);
    }
}
