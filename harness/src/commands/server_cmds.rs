//! Server commands: PING, ECHO, TIME, PUBLISH, SPUBLISH, DEBUG SLEEP.

use super::{is, wrong_arity};
use crate::reply::Reply;
use crate::server::Server;

pub(super) fn ping(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => Reply::Status("PONG".into()),
        2 => Reply::Bulk(a[1].clone()),
        _ => wrong_arity("ping"),
    }
}

pub(super) fn echo(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Bulk(a[1].clone())
}

pub(super) fn time(s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    let us = s.now_us();
    Reply::Array(vec![
        Reply::Bulk(us.div_euclid(1_000_000).to_string().into_bytes()),
        Reply::Bulk(us.rem_euclid(1_000_000).to_string().into_bytes()),
    ])
}

/// No subscribers exist offline, so nobody receives it; the message is kept for
/// `Harness::published`. With a publisher (`lua serve`), it is delivered, not kept: a server
/// must not hold every message it relayed.
pub(super) fn publish(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if let Some(p) = &s.publisher {
        return Reply::Int((p.0)(&a[1], &a[2]));
    }
    keep_published(s, a)
}

/// SPUBLISH: as PUBLISH, to the shard channel's subscribers (a namespace of their own).
pub(super) fn spublish(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if let Some(p) = &s.shard_publisher {
        return Reply::Int((p.0)(&a[1], &a[2]));
    }
    keep_published(s, a)
}

fn keep_published(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if s.published.len() >= crate::server::MAX_PUBLISHED {
        s.published.remove(0);
    }
    s.published.push((a[1].clone(), a[2].clone()));
    Reply::Int(0)
}

/// CLUSTER, ASKING, READONLY, READWRITE: the offline server is a standalone one.
pub(super) fn cluster_disabled(_s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    Reply::err("ERR This instance has cluster support disabled")
}

/// PUBSUB CHANNELS / NUMPAT / NUMSUB / SHARDCHANNELS / SHARDNUMSUB: nobody subscribes offline.
pub(super) fn pubsub(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "numpat" => Reply::Int(0),
        "numsub" | "shardnumsub" => Reply::Array(
            a[2..]
                .iter()
                .flat_map(|c| [Reply::Bulk(c.clone()), Reply::Int(0)])
                .collect(),
        ),
        "channels" | "shardchannels" if a.len() <= 3 => Reply::Array(vec![]),
        _ => Reply::err(format!(
            "ERR harness: the Redis command 'pubsub|{sub}' is not emulated"
        )),
    }
}

/// `DEBUG SLEEP seconds` advances the virtual clock (Redis really sleeps; inside a script,
/// whose time is frozen, when the script ends). `DEBUG SET-DISABLE-DENY-SCRIPTS n` lets
/// scripts call `noscript` commands. Other DEBUG subcommands are not emulated.
pub(super) fn debug(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if is(&a[1], "sleep") && a.len() == 3 {
        // Redis: `dtime = strtod(arg, NULL); utime = dtime * 1000000` and a sleep of that many
        // microseconds; a product C cannot fit in a `long long` reads as LLONG_MIN on x86-64,
        // and a negative time sleeps not at all.
        let (secs, _) = lockkit_resp::number::strtod(&a[2]);
        let us = secs * 1_000_000.0;
        let us = if us.is_finite() && us.abs() < 9.2e18 {
            us as i64
        } else {
            0
        };
        if s.in_script {
            s.slept_in_script_us = s.slept_in_script_us.saturating_add(us.max(0));
        } else {
            s.advance_us(us.max(0));
        }
        return Reply::ok();
    }
    if is(&a[1], "set-disable-deny-scripts") && a.len() == 3 {
        // Redis: `atoi(arg)`, so any value whose int is not 0 turns it on.
        s.allow_noscript = lockkit_resp::number::atoi(&a[2]) != 0;
        return Reply::ok();
    }
    if is(&a[1], "protocol") && a.len() == 3 {
        return debug_protocol(&a[2]);
    }
    if is(&a[1], "object") && a.len() == 3 {
        return debug_object(s, &a[2]);
    }
    if is(&a[1], "sleep") || is(&a[1], "set-disable-deny-scripts") || is(&a[1], "protocol") {
        return Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&a[1])
        ));
    }
    Reply::err(format!(
        "ERR harness: DEBUG {} is not emulated (only DEBUG SLEEP, SET-DISABLE-DENY-SCRIPTS, PROTOCOL and OBJECT)",
        String::from_utf8_lossy(&a[1])
    ))
}

/// `DEBUG OBJECT key`: Redis's one-line summary for a key still in the keyspace, expired or
/// not (Redis looks in its dictionary without expiring). The address, LRU clock and
/// serialized length are the harness's stand-ins (no RDB encoding): `encoding` is the real
/// part; `serializedlength` is the harness's byte count of the value.
fn debug_object(s: &mut Server, key: &[u8]) -> Reply {
    // With the clock at its minimum nothing reads as expired, and nothing is deleted.
    let now = std::mem::replace(&mut s.now_ms, i64::MIN);
    let argv = [b"object".to_vec(), b"encoding".to_vec(), key.to_vec()];
    let encoding = super::keys::object_encoding(s, &argv);
    let size = s.db.peek(key, i64::MIN).map(|e| e.value.memory_usage());
    s.now_ms = now;
    match (encoding, size) {
        (Reply::Bulk(enc), Some(size)) => Reply::Status(format!(
            "Value at:0x7f0000000000 refcount:1 encoding:{} serializedlength:{size} lru:0 lru_seconds_idle:0",
            String::from_utf8_lossy(&enc)
        )),
        _ => Reply::err("ERR no such key"),
    }
}

/// `DEBUG PROTOCOL type`: one reply of each RESP3 type, as Redis builds it; a RESP2 client
/// (or a script under `redis.setresp(2)`) gets it converted. `attrib` answers the reply that
/// follows Redis's attribute, without the attribute; `push` is not emulated.
fn debug_protocol(kind: &[u8]) -> Reply {
    let ints = || (0..3).map(Reply::Int).collect::<Vec<_>>();
    let name = String::from_utf8_lossy(kind).to_ascii_lowercase();
    match name.as_str() {
        "string" => Reply::bulk("Hello World"),
        "integer" => Reply::Int(12345),
        // Redis's own constant (not pi).
        #[allow(clippy::approx_constant)]
        "double" => Reply::Double(3.141),
        "bignum" => Reply::BigNumber("1234567999999999999999999999999999999".into()),
        "null" => Reply::Nil,
        "array" => Reply::Array(ints()),
        "set" => Reply::Set(ints()),
        "map" => Reply::Map((0..3).map(|j| (Reply::Int(j), Reply::Bool(j == 1))).collect()),
        "attrib" => Reply::bulk("Some real reply following the attribute"),
        "verbatim" => Reply::Verbatim("txt".into(), b"This is a verbatim\nstring".to_vec()),
        "true" => Reply::Bool(true),
        "false" => Reply::Bool(false),
        "push" => Reply::err("ERR harness: DEBUG PROTOCOL push is not emulated"),
        _ => Reply::err("ERR Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debug_sleep(arg: &[u8]) -> i64 {
        let mut s = Server::new(0);
        let reply = debug(
            &mut s,
            &[b"DEBUG".to_vec(), b"SLEEP".to_vec(), arg.to_vec()],
        );
        assert_eq!(reply, Reply::ok());
        s.now_us()
    }

    #[test]
    fn debug_sleep_reads_the_leading_number_of_any_bytes() {
        assert_eq!(debug_sleep(b"1.5s"), 1_500_000);
        assert_eq!(debug_sleep(b"abc"), 0);
        assert_eq!(debug_sleep(b"0.25\xff"), 250_000);
        assert_eq!(debug_sleep(b"\xff1"), 0);
        assert_eq!(debug_sleep(b"-3"), 0);
        assert_eq!(debug_sleep(b"1e300"), 0);
        assert_eq!(debug_sleep(b"inf"), 0);
    }
}
