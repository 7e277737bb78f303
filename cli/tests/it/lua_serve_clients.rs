//! CLIENT LIST on `lockkit lua serve` against a real redis-server 7.0: the same fields in the
//! same order, the same flags, counts and last commands for connections that are named,
//! subscribed, inside MULTI or blocked, the same TYPE and ID filters and the same errors; and
//! CLIENT KILL, by each of its filters (USER included) and in its old form, closing what
//! redis-server closes.

use crate::common;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

fn text(r: Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("a text reply, got {other:?}"),
    }
}

/// The fields of a CLIENT LIST line whose values do not depend on ports, times or memory.
fn fields(line: &str, ids: &[String]) -> Vec<String> {
    line.split(' ')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k {
                // Ids as their place among the connections of the flow.
                "id" => format!(
                    "id=#{}",
                    ids.iter().position(|i| i == v).map_or(-1, |p| p as i64)
                ),
                "name" | "flags" | "db" | "sub" | "psub" | "ssub" | "multi" | "cmd" | "user"
                | "redir" | "resp" => kv.to_string(),
                _ => k.to_string(),
            }
        })
        .collect()
}

/// What a flow of five connections observes of each other with CLIENT LIST on `port`.
fn observe(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let mut me = Client::to(port);
    let mut named = Client::to(port);
    let mut sub = Client::to(port);
    let mut multi = Client::to(port);
    let mut blocked = Client::to(port);
    let mut ids = Vec::new();
    for c in [&mut me, &mut named, &mut sub, &mut multi, &mut blocked] {
        let Reply::Int(id) = c.call(&[b"CLIENT", b"ID"]) else {
            panic!("CLIENT ID answers an integer")
        };
        ids.push(id.to_string());
    }
    out.push(format!(
        "{:?}",
        named.call(&[b"CLIENT", b"SETNAME", b"worker-a"])
    ));
    named.call(&[b"SET", b"k", b"v"]);
    sub.call(&[b"SUBSCRIBE", b"c1"]);
    sub.send(&[b"PSUBSCRIBE", b"p*"]);
    sub.reply();
    multi.call(&[b"MULTI"]);
    multi.call(&[b"INCR", b"n"]);
    multi.call(&[b"INCR", b"n"]);
    blocked.send(&[b"BLPOP", b"nothing", b"0"]);
    // The blocked connection shows as blocked once the server has taken its BLPOP.
    let mut all = String::new();
    for _ in 0..200 {
        all = text(me.call(&[b"CLIENT", b"LIST"]));
        if all.contains("cmd=blpop") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for line in all.lines() {
        out.push(fields(line, &ids).join(" "));
    }
    out.push(format!("ends with a newline: {}", all.ends_with('\n')));
    let pubsub = text(me.call(&[b"CLIENT", b"LIST", b"TYPE", b"pubsub"]));
    out.extend(pubsub.lines().map(|l| fields(l, &ids).join(" ")));
    let normal = text(me.call(&[b"CLIENT", b"LIST", b"TYPE", b"NORMAL"]));
    out.push(format!("normal: {}", normal.lines().count()));
    let master = me.call(&[b"CLIENT", b"LIST", b"TYPE", b"master"]);
    out.push(format!("master: {master:?}"));
    let (a, b) = (ids[1].as_bytes(), ids[3].as_bytes());
    let by_id = text(me.call(&[b"CLIENT", b"LIST", b"ID", b, b"-5", a, b"999999"]));
    out.extend(by_id.lines().map(|l| fields(l, &ids).join(" ")));
    let info = text(named.call(&[b"CLIENT", b"INFO"]));
    out.push(fields(info.trim_end(), &ids).join(" "));
    for bad in [
        &[&b"CLIENT"[..], b"LIST", b"TYPE", b"nobody"][..],
        &[b"CLIENT", b"LIST", b"ID"],
        &[b"CLIENT", b"LIST", b"ID", b"1", b"x"],
        &[b"CLIENT", b"LIST", b"TYPE"],
        &[b"CLIENT", b"LIST", b"foo", b"bar"],
    ] {
        out.push(format!("{:?}", me.call(bad)));
    }
    // Inside MULTI, CLIENT LIST is queued and answered by EXEC.
    multi.call(&[b"CLIENT", b"LIST", b"ID", ids[3].as_bytes()]);
    let Reply::Array(replies) = multi.call(&[b"EXEC"]) else {
        panic!("EXEC answers an array")
    };
    for r in replies {
        match r {
            Reply::Bulk(b) => {
                out.push(fields(String::from_utf8_lossy(&b).trim_end(), &ids).join(" "))
            }
            other => out.push(format!("{other:?}")),
        }
    }
    // A closed connection leaves the list.
    drop(sub);
    for _ in 0..200 {
        all = text(me.call(&[b"CLIENT", b"LIST"]));
        if all.lines().count() == 4 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    out.push(format!("after a close: {}", all.lines().count()));
    out
}

#[test]
fn client_list_shows_what_redis_server_shows() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let want = observe(redis.port());
    let got = observe(serve.port);
    eprintln!("redis-server:\n{}", want.join("\n"));
    assert_eq!(
        got, want,
        "lua serve's CLIENT LIST differs from redis-server's"
    );
}

/// Whether the server closed `c` (it reads the end of the stream, with no reply before; a
/// connection left open answers nothing and fails the read by its timeout instead).
fn closed(c: &mut Client) -> bool {
    use std::io::ErrorKind::{ConnectionReset, UnexpectedEof};
    matches!(c.try_reply(), Err(e) if matches!(e.kind(), UnexpectedEof | ConnectionReset))
}

/// The `addr=` of `c` (CLIENT INFO).
fn addr_of(c: &mut Client) -> Vec<u8> {
    let info = text(c.call(&[b"CLIENT", b"INFO"]));
    let addr = info.split(' ').find_map(|kv| kv.strip_prefix("addr="));
    addr.expect("CLIENT INFO has addr=").as_bytes().to_vec()
}

/// What CLIENT KILL answers on `port` and which connections it closes.
fn observe_kills(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let mut me = Client::to(port);
    let mut by_id = Client::to(port);
    let mut subscribed = Client::to(port);
    let mut blocked = Client::to(port);
    let mut by_addr = Client::to(port);
    let mut old_form = Client::to(port);
    let mut alice = Client::to(port);
    let id = |c: &mut Client| match c.call(&[b"CLIENT", b"ID"]) {
        Reply::Int(id) => id.to_string().into_bytes(),
        other => panic!("CLIENT ID answers an integer, got {other:?}"),
    };
    let (my_id, victim) = (id(&mut me), id(&mut by_id));
    let (addr, old_addr) = (addr_of(&mut by_addr), addr_of(&mut old_form));
    for bad in [
        &[&b"CLIENT"[..], b"KILL"][..],
        &[b"CLIENT", b"KILL", b"ID"],
        &[b"CLIENT", b"KILL", b"ID", b"0"],
        &[b"CLIENT", b"KILL", b"ID", b"x"],
        &[b"CLIENT", b"KILL", b"1.2.3.4:5"],
        &[b"CLIENT", b"KILL", b"TYPE", b"nobody"],
        &[b"CLIENT", b"KILL", b"SKIPME", b"maybe"],
        &[b"CLIENT", b"KILL", b"FOO", b"bar"],
        &[b"CLIENT", b"KILL", b"TYPE", b"master", b"x"],
        &[b"CLIENT", b"KILL", b"TYPE", b"master"],
        &[b"CLIENT", b"KILL", b"ID", b"999999", b"SKIPME", b"yes"],
        &[b"CLIENT", b"KILL", b"USER", b"nobody"],
    ] {
        out.push(format!("{:?}", me.call(bad)));
    }
    subscribed.call(&[b"SUBSCRIBE", b"c1"]);
    blocked.send(&[b"BLPOP", b"nothing", b"0"]);
    out.push(format!(
        "{:?}",
        me.call(&[b"CLIENT", b"KILL", b"ID", &victim])
    ));
    out.push(format!("by id closed: {}", closed(&mut by_id)));
    out.push(format!(
        "{:?}",
        me.call(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
    ));
    out.push(format!("subscriber closed: {}", closed(&mut subscribed)));
    out.push(format!(
        "{:?}",
        me.call(&[b"CLIENT", b"KILL", b"ADDR", &addr])
    ));
    out.push(format!("by addr closed: {}", closed(&mut by_addr)));
    out.push(format!("{:?}", me.call(&[b"CLIENT", b"KILL", &old_addr])));
    out.push(format!("old form closed: {}", closed(&mut old_form)));
    // A connection logged in as another user shows it, and is killed by its name.
    let setuser = [
        &b"ACL"[..],
        b"SETUSER",
        b"alice",
        b"on",
        b">pw",
        b"+@all",
        b"~*",
    ];
    out.push(format!("{:?}", me.call(&setuser)));
    out.push(format!("{:?}", alice.call(&[b"AUTH", b"alice", b"pw"])));
    let info = text(alice.call(&[b"CLIENT", b"INFO"]));
    out.push(format!(
        "{:?}",
        info.split(' ').find(|kv| kv.starts_with("user="))
    ));
    out.push(format!(
        "{:?}",
        me.call(&[b"CLIENT", b"KILL", b"USER", b"alice"])
    ));
    out.push(format!("alice closed: {}", closed(&mut alice)));
    // The blocked client is a normal one: killed with the others of its type, itself skipped.
    out.push(format!(
        "{:?}",
        me.call(&[b"CLIENT", b"KILL", b"TYPE", b"normal"])
    ));
    out.push(format!("blocked closed: {}", closed(&mut blocked)));
    let me_too = [&b"CLIENT"[..], b"KILL", b"ID", &my_id, b"SKIPME", b"no"];
    out.push(format!("{:?}", me.call(&me_too)));
    out.push(format!("me closed after the reply: {}", closed(&mut me)));
    out
}

#[test]
fn client_kill_closes_what_redis_server_closes() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let want = observe_kills(redis.port());
    let got = observe_kills(serve.port);
    eprintln!("redis-server:\n{}", want.join("\n"));
    assert_eq!(
        got, want,
        "lua serve's CLIENT KILL differs from redis-server's"
    );
}
