//! The sandbox's `string.find`, `string.match`, `string.gmatch` and `string.gsub` are a Rust
//! port of Lua 5.1's matcher that the time limit can stop. This is its fidelity proof: random
//! patterns and subjects run through the sandbox and through the original C functions of a
//! stock Lua 5.1 (mlua's vendored one, the code Redis embeds), and every answer must be the
//! same: results, captures, position captures, substitution counts and error messages.

use std::time::Duration;

use lockkit_harness::{Harness, HarnessOptions, Reply};
use mlua::{Lua, LuaOptions, StdLib};
use proptest::prelude::*;

/// Runs every pattern function on `ARGV[1]` (subject), `ARGV[2]` (pattern), `ARGV[3]`
/// (init) and answers one line per call: how many values, and each as `type:value`.
const PROBE: &str = r#"
local s, p, init = ARGV[1], ARGV[2], tonumber(ARGV[3])
local function ser(...)
  local t = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    t[i] = type(v) .. ':' .. tostring(v)
  end
  return select('#', ...) .. '|' .. table.concat(t, '|')
end
local out = {}
out[#out + 1] = ser(pcall(string.find, s, p, init))
out[#out + 1] = ser(pcall(string.find, s, p, init, true))
out[#out + 1] = ser(pcall(string.match, s, p, init))
out[#out + 1] = ser(pcall(string.match, s, p))
out[#out + 1] = ser(pcall(string.gsub, s, p, '<%0|%1%%>'))
out[#out + 1] = ser(pcall(string.gsub, s, p, '[%2]', init))
out[#out + 1] = ser(pcall(string.gsub, s, p, function(...) return ser(...) end))
out[#out + 1] = ser(pcall(string.gsub, s, p, function(a) if a == 'b' then return false end return 7 end, 4))
out[#out + 1] = ser(pcall(string.gsub, s, p, { a = 'A', ab = false, [1] = 'one', b = 2 }))
local ok, it = pcall(string.gmatch, s, p)
if ok then
  for _ = 1, 40 do
    local r = { pcall(it) }
    out[#out + 1] = 'g' .. ser(unpack(r))
    if r[1] == false or r[2] == nil then break end
  end
else
  out[#out + 1] = 'gmatch ' .. tostring(it)
end
out[#out + 1] = ser(pcall(function() return s:find(p, init) end))
out[#out + 1] = ser(pcall(function() return s:gsub(p, {}) end))
return table.concat(out, '\n')
"#;

fn sandbox() -> Harness {
    Harness::with_options(HarnessOptions::new().time_limit(Duration::from_secs(20))).unwrap()
}

fn in_sandbox(h: &mut Harness, s: &[u8], p: &[u8], init: i64) -> String {
    let sha = h.script_load(PROBE.as_bytes()).unwrap();
    let argv = [
        b"EVALSHA".to_vec(),
        sha.into_bytes(),
        b"0".to_vec(),
        s.to_vec(),
        p.to_vec(),
        init.to_string().into_bytes(),
    ];
    match h.call_argv(&argv) {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("the probe failed in the sandbox: {other:?}"),
    }
}

fn in_stock_lua(lua: &Lua, s: &[u8], p: &[u8], init: i64) -> String {
    let argv = lua.create_table().unwrap();
    argv.raw_set(1, lua.create_string(s).unwrap()).unwrap();
    argv.raw_set(2, lua.create_string(p).unwrap()).unwrap();
    argv.raw_set(3, init.to_string()).unwrap();
    lua.globals().set("ARGV", argv).unwrap();
    let out: mlua::String = lua.load(PROBE).set_name("@user_script").eval().unwrap();
    String::from_utf8_lossy(&out.as_bytes()).into_owned()
}

fn stock_lua() -> Lua {
    Lua::new_with(StdLib::STRING | StdLib::TABLE, LuaOptions::default()).unwrap()
}

/// Pattern pieces: classes, sets, quantifiers, anchors, captures, back-references, `%b`, `%f`,
/// and malformed bits, so that errors are compared too.
fn pattern() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        "a", "b", "ab", ".", "%a", "%d", "%s", "%w", "%p", "%x", "%u", "%l", "%c", "%z", "%A",
        "%S", "%.", "%%", "[ab]", "[^a]", "[a-c]", "[%d%s]", "[]]", "[^]a]", "[a-]", "*", "+", "-",
        "?", "^", "$", "(", ")", "()", "%1", "%2", "%0", "%bab", "%b()", "%f[%w]", "%f[^a]", "%f",
        "%b", "[", "%", "\0", "x", " ", "\n", "\u{e9}",
    ]);
    prop::collection::vec(piece, 0..7).prop_map(|v| v.concat().into_bytes())
}

fn subject() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(b"aabbc1 ()x%.\0\n]-".to_vec()), 0..14)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn pattern_functions_answer_as_lua_5_1s_c_functions(
        s in subject(),
        p in pattern(),
        init in prop::sample::select(vec![1i64, 1, 1, 2, 3, 0, -1, -3, 9, 40, -40]),
    ) {
        let mut h = sandbox();
        let lua = stock_lua();
        let got = in_sandbox(&mut h, &s, &p, init);
        let want = in_stock_lua(&lua, &s, &p, init);
        prop_assert_eq!(got, want, "subject {:?}, pattern {:?}, init {}", s, p, init);
    }
}

#[test]
fn hand_picked_patterns_answer_as_lua_5_1s_c_functions() {
    let cases: &[(&[u8], &[u8], i64)] = &[
        (b"hello world from Lua", b"(%w+) (%w+)", 1),
        (b"key = value", b"(%w+)%s*=%s*(%w+)", 1),
        (b"THE (quick) fox", b"%f[%a]%a+", 1),
        (b"f(a(b)c)d", b"%b()", 1),
        (b"abc", b"()a()", 1),
        (b"abcabc", b"(abc)%1", 1),
        (b"aaa", b"a-b", 1),
        (b"aaa", b"^a-$", 1),
        (b"", b"", 1),
        (b"abc", b"", 4),
        (b"abc", b"", 10),
        (b"a.b", b".", -1),
        (b"x", b"(()", 1),
        (b"x", b"%", 1),
        (b"x", b"[a", 1),
        (b"x", b"(x", 1),
        (b"x", b"x)", 1),
        (b"a\0b", b"%z", 1),
        (b"a\0b", b"a\0c", 1),
        (b"a+b", b"+", 1),
        (b"one two", b"^(%a+)", 1),
        (b"a,b,,c", b"([^,]*)", 1),
        (b"a", b"()%1", 1),
        (b"aa", b"(a)%1()", 1),
    ];
    let mut h = sandbox();
    let lua = stock_lua();
    for &(s, p, init) in cases {
        assert_eq!(
            in_sandbox(&mut h, s, p, init),
            in_stock_lua(&lua, s, p, init),
            "subject {s:?}, pattern {p:?}, init {init}"
        );
    }
}

#[test]
fn a_backtracking_pattern_is_stopped_by_the_time_limit_and_the_harness_goes_on() {
    let mut h = Harness::with_options(HarnessOptions::new().time_limit(Duration::from_millis(300)))
        .unwrap();
    let hostile = "string.rep('a', 30000), string.rep('a*', 30) .. 'b'";
    for script in [
        format!("return string.find({hostile})"),
        format!("return pcall(string.gsub, {hostile}, '')"),
        format!("for _ in string.gmatch({hostile}) do end"),
    ] {
        let reply = h.eval(&script, &[], &[]);
        assert!(
            matches!(&reply, Reply::Error(e) if e.contains("time limit")),
            "{script}: {reply:?}"
        );
        assert!(h.stopped(), "{script}");
        assert_eq!(
            h.eval("return {string.find('hello', 'l+')}", &[], &[]),
            Reply::Array(vec![Reply::Int(3), Reply::Int(4)])
        );
    }
}

#[test]
fn deep_patterns_run_on_a_small_stack_up_to_the_depth_limit() {
    // Test threads have 2 MiB stacks, as the proxy's tokio workers do: the matcher recurses once
    // per matched `?`, so 190 of them must fit (in a debug build), and past its limit of 200
    // levels it answers an error.
    let mut h = sandbox();
    assert_eq!(
        h.eval(
            "return string.find(string.rep('a', 190), string.rep('a?', 190))",
            &[],
            &[]
        ),
        Reply::Int(1)
    );
    let reply = h.eval(
        "return string.find(string.rep('a', 250), string.rep('a?', 250))",
        &[],
        &[],
    );
    assert!(
        matches!(&reply, Reply::Error(e) if e.contains("pattern too complex")),
        "{reply:?}"
    );
}
