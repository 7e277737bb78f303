//! ACL users in `lockkit lua serve` (created, switched on and off, given passwords; their rules
//! checked and kept, not enforced) compared with redis-server 7.0, and DEBUG OBJECT on a key
//! past its expiry that is still in the keyspace.

use crate::common;

use common::serve::{Client, Reply, Serve};
use lockkit_test_support::RedisServer;

/// Every step runs as the default user: the ones after an AUTH as another user go back to it
/// (whose rules Redis would enforce and the harness does not).
const STEPS: &[&[&str]] = &[
    &[
        "ACL",
        "SETUSER",
        "bob",
        "on",
        ">123",
        "+@scripting",
        "+set",
        "~x*",
    ],
    &["ACL", "SETUSER", "bob", "bogus"],
    &["ACL", "SETUSER", "bob", "+nosuchcmd"],
    &["ACL", "SETUSER", "bob", "+@nosuchcat"],
    &["ACL", "USERS"],
    &["AUTH", "bob", "123"],
    &["AUTH", "default", "any"],
    &["AUTH", "bob", "wrong"],
    &["ACL", "SETUSER", "carl", "off", ">p"],
    &["AUTH", "carl", "p"],
    &["ACL", "SETUSER", "carl", "on"],
    &["AUTH", "carl", "p"],
    &["AUTH", "default", "any"],
    &[
        "ACL",
        "SETUSER",
        "dan",
        "on",
        "nopass",
        "allcommands",
        "allkeys",
    ],
    &["AUTH", "dan", "whatever"],
    &["AUTH", "default", "any"],
    &["ACL", "SETUSER", "carl", "<p"],
    &["AUTH", "carl", "p"],
    &["ACL", "DELUSER", "bob", "nobody"],
    &["ACL", "DELUSER", "default"],
    &["AUTH", "bob", "123"],
    &["ACL", "USERS"],
    &["ACL", "DELUSER", "carl", "dan"],
];

fn run(port: u16) -> Vec<Reply> {
    let mut c = Client::to(port);
    STEPS
        .iter()
        .map(|argv| {
            let argv: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
            c.call(&argv)
        })
        .collect()
}

#[test]
fn acl_users_answer_as_redis_does() {
    let redis = RedisServer::start();
    let serve = Serve::start(&[]);
    let want = run(redis.port());
    let got = run(serve.port);
    let differ: Vec<String> = STEPS
        .iter()
        .zip(want.iter().zip(&got))
        .filter(|(_, (w, g))| w != g)
        .map(|(s, (w, g))| format!("{s:?}\n  redis-server: {w:?}\n  lua serve:    {g:?}"))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Redis's unit/scripting checks with DEBUG OBJECT that an expired key is still there until a
/// command (or a script) reads it.
#[test]
fn debug_object_sees_an_expired_key_until_it_is_read() {
    let serve = Serve::start(&[]);
    let mut c = serve.connect();
    c.call(&[b"SET", b"key", b"value", b"PX", b"1"]);
    c.call(&[b"LOCKKIT.CLOCK", b"ADVANCE", b"2"]);
    let Reply::Status(line) = c.call(&[b"DEBUG", b"OBJECT", b"key"]) else {
        panic!("DEBUG OBJECT of an expired key still in the keyspace");
    };
    assert!(line.contains(" encoding:embstr "), "{line}");
    assert_eq!(c.call(&[b"EXISTS", b"key"]), Reply::Int(0));
    assert_eq!(
        c.call(&[b"DEBUG", b"OBJECT", b"key"]),
        Reply::Error("ERR no such key".into())
    );
}
