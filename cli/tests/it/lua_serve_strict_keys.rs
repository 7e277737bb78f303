//! `lockkit lua serve --strict-keys`: a script (EVAL, EVALSHA, FCALL) that touches a key it
//! did not declare in KEYS fails with an error naming the key, as Redis Cluster and Dragonfly
//! fail such scripts in production; off by default.

use crate::common;

use common::serve::{Reply, Serve};

const LIB: &str = "#!lua name=l\nredis.register_function('f', function(keys) redis.call('set', keys[1], 'v') return redis.call('get', 'other') end)";

fn error_of(r: &Reply) -> String {
    match r {
        Reply::Error(e) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_script_touching_an_undeclared_key_fails_naming_it() {
    let serve = Serve::start(&["--strict-keys"]);
    let mut c = serve.connect();
    let e = error_of(&c.call(&[
        b"EVAL",
        b"return redis.call('set', 'lock:b', 1)",
        b"1",
        b"lock:a",
    ]));
    assert!(e.contains("'lock:b'") && e.contains("KEYS"), "{e}");
    assert_eq!(
        c.call(&[b"EXISTS", b"lock:b"]),
        Reply::Int(0),
        "nothing written"
    );
    // Declared keys run; commands without keys too.
    assert_eq!(
        c.call(&[
            b"EVAL",
            b"redis.call('set', KEYS[1], 1) redis.call('ping') return redis.call('incr', KEYS[1])",
            b"1",
            b"lock:a"
        ]),
        Reply::Int(2)
    );
    // Several keys of one command: the undeclared one is named.
    let e = error_of(&c.call(&[
        b"EVAL",
        b"return redis.call('mget', KEYS[1], 'x:2')",
        b"1",
        b"x:1",
    ]));
    assert!(e.contains("'x:2'"), "{e}");
    // redis.pcall gets it as an error table.
    assert_eq!(
        c.call(&[
            b"EVAL",
            b"local r = redis.pcall('get', 'nope') return type(r) == 'table' and r.err ~= nil",
            b"0"
        ]),
        Reply::Int(1)
    );
    // EVALSHA and FCALL alike.
    let Reply::Bulk(sha) = c.call(&[b"SCRIPT", b"LOAD", b"return redis.call('get', 'k2')"]) else {
        panic!("SCRIPT LOAD")
    };
    let e = error_of(&c.call(&[b"EVALSHA", &sha, b"1", b"k1"]));
    assert!(e.contains("'k2'"), "{e}");
    c.call(&[b"FUNCTION", b"LOAD", LIB.as_bytes()]);
    let e = error_of(&c.call(&[b"FCALL", b"f", b"1", b"mine"]));
    assert!(e.contains("'other'"), "{e}");
    // Plain commands are not scripts: unaffected.
    assert_eq!(c.call(&[b"GET", b"other"]), Reply::Nil);
}

#[test]
fn undeclared_keys_are_allowed_by_default() {
    let serve = Serve::start(&[]);
    let mut c = serve.connect();
    assert_eq!(
        c.call(&[b"EVAL", b"return redis.call('set', 'lock:b', 1)", b"0"]),
        common::serve::ok()
    );
}
