//! Issue 40's attacks on the proxy's plugin host, run as users run them: `lockkit proxy
//! --plugin FILE.lua` in front of a real redis-server, a client through it. docs/HARNESS.md
//! "What the sandbox guarantees" names these tests.

use crate::common;

use std::path::Path;

use common::serve::{Client, Reply};
use common::{json_in, ProxyRun};
use lockkit_test_support::RedisServer;

fn plugin(dir: &Path, name: &str, code: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, code).expect("write the plugin");
    path.to_string_lossy().into_owned()
}

/// Case 11: a plugin's private keyspace had no memory bound (its Lua heap is capped, what
/// `redis.call` writes is not): a plugin storing a value per PING grew the proxy by that value
/// each time (48 MB per PING, 2 GB after 40). Now the keyspace is bounded as the heap is
/// (64 MB): a write past it answers Redis's OOM error to the plugin, and the proxy stays small.
#[test]
fn a_plugins_private_keyspace_is_bounded_in_bytes() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let file = plugin(
        dir.path(),
        "hoard.lua",
        "local n, stored, refused, other = 0, 0, 0, nil\n\
         return {\n\
           commands = { 'PING' },\n\
           on_command = function()\n\
             n = n + 1\n\
             local r = redis.pcall('SET', 'k' .. n, string.rep('x', 8 * 1024 * 1024))\n\
             if type(r) == 'table' and r.err then\n\
               if string.find(r.err, '^OOM') then refused = refused + 1 else other = r.err end\n\
             else stored = stored + 1 end\n\
           end,\n\
           report = function() return { stored = stored, refused = refused, other = other } end,\n\
         }\n",
    );
    let proxy = ProxyRun::start(&server.url(), &["--quiet", "--plugin", &file], &out);
    let mut c = Client::to(proxy.port);
    for _ in 0..40 {
        assert_eq!(c.call(&[b"PING"]), Reply::Status("PONG".into()));
    }
    let peak = proxy.status_kib("VmHWM");
    eprintln!("proxy with a hoarding plugin, 40 PINGs: VmHWM {peak} KiB");
    let run = proxy.stop();
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json_in(&out)).unwrap()).unwrap();
    let r = &report["report"];
    assert_eq!(
        r["other"],
        serde_json::Value::Null,
        "{report}\n{}",
        run.all()
    );
    let stored = r["stored"].as_u64().unwrap();
    // 8 MB values under a 64 MB bound: about 8 stored (never past twice the bound), then OOM.
    assert!(stored <= 16, "{stored} values of 8 MB stored: {report}");
    assert!(r["refused"].as_u64().unwrap() >= 20, "{report}");
    assert!(peak < 600 * 1024, "VmHWM {peak} KiB");
}

/// Case 12, the plugin's side: queued `on_reply` hooks each held a copy of their reply,
/// bounded by count (4,096), not bytes: 100 pipelined GETs of a 16 MB value through a plugin
/// whose `on_reply` takes its whole 50 ms queued every reply (none dropped). Now the queued
/// copies of one plugin stay under 64 MB: the hooks past it are dropped and said so.
#[test]
fn queued_reply_hooks_are_bounded_in_bytes() {
    let server = RedisServer::start();
    let mut direct = Client::to(server.port());
    assert_eq!(
        direct.call(&[b"SET", b"big", &vec![b'v'; 16 << 20]]),
        Reply::Status("OK".into())
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let file = plugin(
        dir.path(),
        "slow.lua",
        "local seen = 0\n\
         return {\n\
           commands = { 'GET' },\n\
           on_reply = function()\n\
             seen = seen + 1\n\
             while true do end\n\
           end,\n\
           report = function() return { seen = seen } end,\n\
         }\n",
    );
    let proxy = ProxyRun::start(&server.url(), &["--quiet", "--plugin", &file], &out);
    let mut c = Client::to(proxy.port);
    for _ in 0..100 {
        c.send(&[b"GET", b"big"]);
    }
    for _ in 0..100 {
        match c.reply() {
            Reply::Bulk(b) => assert_eq!(b.len(), 16 << 20),
            other => panic!("{other:?}"),
        }
    }
    let peak = proxy.status_kib("VmHWM");
    eprintln!("proxy, 100 pipelined GETs of 16 MB through a slow on_reply: VmHWM {peak} KiB");
    let run = proxy.stop();
    assert!(
        run.stderr.contains("hooks dropped"),
        "every reply was queued for the plugin: {}",
        run.all()
    );
    // 100 copies of 16 MB would be 1.6 GB; the queue holds 64 MB of them.
    assert!(peak < 700 * 1024, "VmHWM {peak} KiB");
}

/// Case 10, through a running proxy: a plugin's `on_command` that decodes one 16 MB
/// MessagePack map (8 million entries) made each command it declared wait 4-7 s, though a
/// hook's limit is 50 ms: the decoders never looked at the clock. They do now (see
/// `the_decoders_stop_at_the_time_limit`), so the hook is stopped near its limit and the
/// command is answered. The bound asserted is generous (2 s a command on a shared machine).
#[test]
fn a_plugin_hook_decoding_a_big_value_does_not_hold_its_commands() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let file = plugin(
        dir.path(),
        "decode.lua",
        "local n = 8000000\n\
         local m = '\\223' .. struct.pack('>I4', n) .. string.rep('\\1\\1', n)\n\
         local calls = 0\n\
         return {\n\
           commands = { 'PING' },\n\
           on_command = function() calls = calls + 1 cmsgpack.unpack(m) end,\n\
           report = function() return { calls = calls } end,\n\
         }\n",
    );
    let proxy = ProxyRun::start(&server.url(), &["--quiet", "--plugin", &file], &out);
    let mut c = Client::to(proxy.port);
    let mut slowest = std::time::Duration::ZERO;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        assert_eq!(c.call(&[b"PING"]), Reply::Status("PONG".into()));
        slowest = slowest.max(started.elapsed());
    }
    eprintln!("PING through a plugin decoding 16 MB per call: slowest {slowest:?}");
    let run = proxy.stop();
    assert!(
        slowest < std::time::Duration::from_secs(2),
        "a PING waited {slowest:?} for its plugin's 50 ms hook\n{}",
        run.all()
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json_in(&out)).unwrap()).unwrap();
    assert_eq!(report["report"]["calls"], 3, "{report}");
}
