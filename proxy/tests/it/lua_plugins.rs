//! Lua plugins on the harness's sandbox, in front of a real redis-server: the two examples of
//! examples/plugins/, every hook and action, and plugins that fail, loop forever or eat memory
//! while the traffic still passes.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use lockkit_proxy::lua::LuaPlugin;
use lockkit_proxy::{Plugin, Proxy};
use lockkit_test_support::RedisServer;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/plugins")
        .join(name)
}

fn plugin_from(dir: &Path, name: &str, code: &str) -> Arc<LuaPlugin> {
    let path = dir.join(name);
    std::fs::write(&path, code).unwrap();
    Arc::new(LuaPlugin::load(&path, "").unwrap_or_else(|e| panic!("{name}: {e:#}")))
}

async fn report_of(proxy: Proxy, plugin: &LuaPlugin) -> serde_json::Value {
    let ctx = proxy.stop().await;
    plugin.report(&ctx).expect("a Lua plugin always reports")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_example_refuses_flushall_and_delays_keys() {
    let server = RedisServer::start();
    let guard = Arc::new(LuaPlugin::load(&example("guard.lua"), "20").unwrap());
    let proxy = start_proxy(&server.url(), vec![guard.clone()]).await;
    let port = proxy.addr().port();
    let out = redis_cli(port, &["--no-raw"], "SET k v\nFLUSHALL\nKEYS *\nGET k\n");
    assert_eq!(
        out,
        "OK\n(error) ERR FLUSHALL is refused by the proxy's guard plugin\n1) \"k\"\n\"v\"\n"
    );
    // In a pipeline the proxy's own answer keeps its place among the server's.
    let mut c = raw_conn(port);
    let want = "+PONG\r\n-ERR FLUSHDB is refused by the proxy's guard plugin\r\n+PONG\r\n";
    let got = roundtrip(&mut c, b"PING\r\nFLUSHDB\r\nPING\r\n", want.len()).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let report = report_of(proxy, &guard).await;
    assert_eq!(report["schema"], "lockkit.plugin/1");
    assert_eq!(report["plugin"], "guard");
    assert_eq!(report["report"]["refused"]["FLUSHALL"], 1);
    assert_eq!(report["report"]["refused"]["FLUSHDB"], 1);
    assert_eq!(report["report"]["keys_delayed"], 1);
    assert_eq!(report["report"]["keys_delay_ms"], 20);
    assert_eq!(report["faults"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keys_example_ranks_keys_from_their_replies() {
    let server = RedisServer::start();
    let hot = Arc::new(LuaPlugin::load(&example("hot_keys.lua"), "2").unwrap());
    let proxy = start_proxy(&server.url(), vec![hot.clone()]).await;
    let port = proxy.addr().port();
    let mut input = String::new();
    for _ in 0..5 {
        input.push_str("INCR hits:a\n");
    }
    input.push_str("INCR hits:b\nINCR hits:b\nGET hits:c\nPING\n");
    redis_cli(port, &[], &input);
    let report = report_of(proxy, &hot).await;
    let r = &report["report"];
    assert_eq!(r["distinct_keys"], 3, "{report:#}");
    assert_eq!(r["top"][0]["key"], "hits:a");
    assert_eq!(r["top"][0]["commands"], 5);
    assert_eq!(r["top"][1]["key"], "hits:b");
    assert_eq!(r["top"].as_array().unwrap().len(), 2, "ARGS 2 keeps two");
    assert!(r["top"][0]["slowest_reply_us"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_see_commands_replies_and_may_answer_delay_or_close() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let p = plugin_from(
        dir.path(),
        "probe.lua",
        r#"
        local seen, replies, ticks = {}, {}, 0
        return {
          commands = { "get", "ECHO", "QUIT" },
          on_command = function(conn, cmd, args)
            seen[#seen + 1] = cmd .. " " .. table.concat(args, " ") .. " #" .. conn.id
            if args[1] == "answer" then return { reply = { 1, "two", { ok = "THREE" } } } end
            if args[1] == "later" then return { delay_ms = 1 } end
            if args[1] == "bye" then return { close = true } end
          end,
          on_reply = function(conn, cmd, args, reply, latency_us)
            local shown = reply
            if type(reply) == "table" then shown = reply.ok or reply.err end
            if reply == false then shown = "nil" end
            replies[#replies + 1] = cmd .. "=" .. tostring(shown)
          end,
          on_tick = function() ticks = ticks + 1 end,
          report = function() return { seen = seen, replies = replies } end,
        }
        "#,
    );
    let proxy = start_proxy(&server.url(), vec![p.clone()]).await;
    let port = proxy.addr().port();
    let mut c = raw_conn(port);
    let cmds = b"*2\r\n$3\r\nGET\r\n$4\r\nnone\r\n*2\r\n$4\r\nECHO\r\n$6\r\nanswer\r\n*2\r\n$4\r\nECHO\r\n$5\r\nlater\r\n";
    let want = "$-1\r\n*3\r\n:1\r\n$3\r\ntwo\r\n+THREE\r\n$5\r\nlater\r\n";
    let got = roundtrip(&mut c, cmds, want.len()).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want);
    let got = roundtrip(&mut c, b"*2\r\n$4\r\nECHO\r\n$3\r\nbye\r\n", 1).unwrap();
    assert!(got.is_empty(), "closed without an answer: {got:?}");
    let report = report_of(proxy, &p).await;
    assert_eq!(
        report["report"]["seen"],
        serde_json::json!([
            "GET none #1",
            "ECHO answer #1",
            "ECHO later #1",
            "ECHO bye #1"
        ])
    );
    // The answered command never reached the server: no reply for it.
    assert_eq!(
        report["report"]["replies"],
        serde_json::json!(["GET=nil", "ECHO=later"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_fails_loops_or_eats_memory_does_not_stop_traffic() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let failing = plugin_from(
        dir.path(),
        "failing.lua",
        r#"return { commands = { "*" }, on_command = function() error("boom") end,
                    on_reply = function() return nil + 1 end }"#,
    );
    let looping = plugin_from(
        dir.path(),
        "looping.lua",
        r#"return { commands = { "SET", "GET" },
                    on_command = function() while true do pcall(function() while true do end end) end end }"#,
    );
    let hungry = plugin_from(
        dir.path(),
        "hungry.lua",
        r#"return { commands = { "GET" }, on_reply = function()
                      local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1024) .. i end end }"#,
    );
    let bad_action = plugin_from(
        dir.path(),
        "bad_action.lua",
        r#"return { commands = { "SET" }, on_command = function() return 42 end }"#,
    );
    let plugins: Vec<Arc<dyn Plugin>> = vec![
        failing.clone(),
        looping.clone(),
        hungry.clone(),
        bad_action.clone(),
    ];
    let proxy = start_proxy(&server.url(), plugins).await;
    let port = proxy.addr().port();
    let out = redis_cli(port, &[], "SET a 1\nGET a\nINCR a\nGET a\n");
    assert_eq!(out, "OK\n1\n2\n2\n");
    let ctx = proxy.stop().await;
    // SET, GET, INCR, GET (+ redis-cli's COMMAND DOCS at start) on_command, and as many on_reply.
    assert!(failing.faults() >= 8, "{}", failing.faults());
    assert_eq!(looping.faults(), 3, "stopped at the time limit each time");
    assert_eq!(hungry.faults(), 2, "stopped at the memory cap each time");
    assert_eq!(bad_action.faults(), 1);
    let r = looping.report(&ctx).unwrap();
    assert_eq!(r["faults"], 3);
}

#[test]
fn plugins_that_cannot_load_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("syntax.lua", "return {", "loading"),
        (
            "number.lua",
            "return 7",
            "must return a table of hooks (got integer)",
        ),
        (
            "nocommands.lua",
            "return { on_command = function() end }",
            "declares no `commands`",
        ),
        ("io.lua", "io.open('/etc/passwd') return {}", "loading"),
        ("forever.lua", "while true do end", "time limit"),
    ];
    for (name, code, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, code).unwrap();
        let e = format!("{:#}", LuaPlugin::load(&path, "").unwrap_err());
        assert!(e.contains(says), "{name}: {e}");
    }
}
