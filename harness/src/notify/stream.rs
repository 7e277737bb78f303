//! The stream events of Redis 7.0's `t_stream.c` (`notify-keyspace-events` class `t`):
//! `xadd`, `xtrim`, `xdel`, `xgroup-create`, `xgroup-setid`, `xgroup-destroy`,
//! `xgroup-createconsumer` (by XGROUP CREATECONSUMER, and by XREADGROUP, XCLAIM and XAUTOCLAIM
//! for a consumer they meet first) and `xgroup-delconsumer` (for a consumer that existed).

use crate::commands::is;
use crate::keyspace::Value;
use crate::reply::Reply;
use crate::server::Server;

/// A stream's consumer a command names: key, group, consumer.
type Named<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// The consumers command `name` may create or delete, by key, group and name.
fn named<'a>(name: &str, argv: &'a [Vec<u8>]) -> Vec<Named<'a>> {
    let arg = |i: usize| argv.get(i).map(Vec::as_slice);
    match name {
        "xclaim" | "xautoclaim" | "xgroup|delconsumer" => {
            let at = usize::from(name == "xgroup|delconsumer");
            match (arg(1 + at), arg(2 + at), arg(3 + at)) {
                (Some(k), Some(g), Some(c)) => vec![(k, g, c)],
                _ => Vec::new(),
            }
        }
        "xreadgroup" => {
            let (Some(g), Some(c)) = (arg(2), arg(3)) else {
                return Vec::new();
            };
            let Some(at) = argv.iter().skip(4).position(|a| is(a, "streams")) else {
                return Vec::new();
            };
            let keys = &argv[at + 5..];
            keys[..keys.len() / 2]
                .iter()
                .map(|k| (k.as_slice(), g, c))
                .collect()
        }
        _ => Vec::new(),
    }
}

fn has_consumer(s: &Server, (key, group, consumer): Named<'_>) -> bool {
    match s.db.peek(key, s.now_ms).map(|e| &e.value) {
        Some(Value::Stream(st)) => st
            .groups
            .get(group)
            .is_some_and(|g| g.consumers.contains_key(consumer)),
        _ => false,
    }
}

/// Before the command: whether each consumer it names exists.
pub(super) fn before(s: &Server, name: &str, argv: &[Vec<u8>]) -> Vec<bool> {
    named(name, argv)
        .into_iter()
        .map(|n| has_consumer(s, n))
        .collect()
}

/// After the command answered `reply` (not an error): its stream events, in Redis's order.
/// `had`: what [`before`] found.
pub(super) fn after(s: &Server, name: &str, argv: &[Vec<u8>], reply: &Reply, had: &[bool]) {
    let key = argv.get(1).map(Vec::as_slice).unwrap_or_default();
    let positive = super::positive(reply);
    let event = |e: &str, key: &[u8]| super::notify(s, super::STREAM, e, key);
    match name {
        "xadd" if positive => event("xadd", key),
        "xtrim" | "xdel" if positive => event(name, key),
        // XSETID is not emulated (its error answers before any event).
        "xgroup|create" | "xgroup|setid" | "xgroup|destroy" | "xgroup|createconsumer"
            if positive =>
        {
            let group_key = argv.get(2).map(Vec::as_slice).unwrap_or_default();
            event(&name.replace('|', "-"), group_key);
        }
        "xgroup|delconsumer" if had.first() == Some(&true) => {
            let group_key = argv.get(2).map(Vec::as_slice).unwrap_or_default();
            event("xgroup-delconsumer", group_key);
        }
        "xreadgroup" | "xclaim" | "xautoclaim" => {
            for (n, existed) in named(name, argv).into_iter().zip(had) {
                if !existed && has_consumer(s, n) {
                    event("xgroup-createconsumer", n.0);
                }
            }
        }
        _ => {}
    }
}
