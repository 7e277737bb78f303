//! Server commands: PING, ECHO, TIME, PUBLISH, SPUBLISH, DEBUG SLEEP.

use super::{is, wrong_arity};
use crate::reply::Reply;
use crate::server::Server;

pub fn ping(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match a.len() {
        1 => Reply::Status("PONG".into()),
        2 => Reply::Bulk(a[1].clone()),
        _ => wrong_arity("ping"),
    }
}

pub fn echo(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Bulk(a[1].clone())
}

pub fn time(s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    let us = s.now_us();
    Reply::Array(vec![
        Reply::Bulk(us.div_euclid(1_000_000).to_string().into_bytes()),
        Reply::Bulk(us.rem_euclid(1_000_000).to_string().into_bytes()),
    ])
}

/// No subscribers exist offline, so nobody receives it; the message is kept for
/// `Harness::published`.
pub fn publish(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if s.published.len() >= crate::server::MAX_PUBLISHED {
        s.published.remove(0);
    }
    s.published.push((a[1].clone(), a[2].clone()));
    Reply::Int(0)
}

/// CLUSTER, ASKING, READONLY, READWRITE: the offline server is a standalone one.
pub fn cluster_disabled(_s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    Reply::err("ERR This instance has cluster support disabled")
}

/// PUBSUB CHANNELS / NUMPAT / NUMSUB / SHARDCHANNELS / SHARDNUMSUB: nobody subscribes offline.
pub fn pubsub(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
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
pub fn debug(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if is(&a[1], "sleep") && a.len() == 3 {
        let text = String::from_utf8_lossy(&a[2]);
        let secs = strtod_prefix(text.trim_start());
        let us = (secs * 1_000_000.0) as i64;
        if s.in_script {
            s.slept_in_script_us = s.slept_in_script_us.saturating_add(us.max(0));
        } else {
            s.advance_us(us.max(0));
        }
        return Reply::ok();
    }
    if is(&a[1], "set-disable-deny-scripts") && a.len() == 3 {
        // C's atoi: any leading integer other than 0 turns it on.
        let text = String::from_utf8_lossy(&a[2]);
        s.allow_noscript = strtod_prefix(text.trim_start()).trunc() != 0.0;
        return Reply::ok();
    }
    if is(&a[1], "sleep") || is(&a[1], "set-disable-deny-scripts") {
        return Reply::err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(&a[1])
        ));
    }
    Reply::err(format!(
        "ERR harness: DEBUG {} is not emulated (only DEBUG SLEEP)",
        String::from_utf8_lossy(&a[1])
    ))
}

/// C's `strtod(s, NULL)`: the longest numeric prefix, 0 when there is none.
fn strtod_prefix(s: &str) -> f64 {
    let b = s.as_bytes();
    let mut end = 0;
    let mut best = 0.0;
    while end < b.len() {
        end += 1;
        if let Ok(v) = s[..end].parse::<f64>() {
            best = v;
        }
    }
    if best.is_finite() {
        best
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn strtod_prefix_reads_leading_number() {
        assert_eq!(super::strtod_prefix("1.5s"), 1.5);
        assert_eq!(super::strtod_prefix("abc"), 0.0);
        assert_eq!(super::strtod_prefix("0.25"), 0.25);
    }
}
