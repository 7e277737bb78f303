//! The harness against a real redis-server 7.0: the same commands both ways, identical replies
//! (byte for byte as redis-cli prints them) and identical keyspace (TTLs within a tolerance).
//!
//! Hand-written cases for every rule of issue 3's "known traps", every script in `lua/`, and a
//! seeded random generator of command and script sequences. `LOCKKIT_DIFF_SEED=<n>` replays a
//! run; `LOCKKIT_DIFF_CASES=<n>` changes how many random cases run.

use std::collections::BTreeSet;
use std::time::SystemTime;

use lockkit_harness::tooling::cmdline::split_args;
use lockkit_harness::tooling::format::format_reply;
use lockkit_harness::tooling::remote::Remote;
use lockkit_harness::{Harness, Reply};
use lockkit_test_support::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TTL_TOLERANCE_MS: i64 = 250;

fn lua_file(name: &str) -> String {
    let path = format!("{}/../lua/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// A real server and a harness fed the same commands.
struct Pair {
    _server: RedisServer,
    remote: Remote,
    h: Harness,
    steps: usize,
}

fn bytes(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

impl Pair {
    fn new() -> Pair {
        let server = RedisServer::start();
        let remote = Remote::connect(&server.url()).expect("connect to the test server");
        Pair {
            _server: server,
            remote,
            h: Harness::new().expect("harness"),
            steps: 0,
        }
    }

    fn both(&mut self, argv: &[Vec<u8>]) -> (Reply, Reply) {
        self.h.set_time(SystemTime::now());
        let real = self.remote.call(argv).expect("server reachable");
        let mine = self.h.call_argv(argv);
        self.steps += 1;
        (real, mine)
    }

    /// Runs `argv` both ways; the printed replies must be identical.
    fn step(&mut self, argv: &[Vec<u8>], ctx: &dyn Fn() -> String) {
        let (real, mine) = self.both(argv);
        let (r, m) = (format_reply(&real), format_reply(&mine));
        assert!(
            r == m,
            "{}\ncommand: {}\nredis:   {r}harness: {m}",
            ctx(),
            show(argv)
        );
    }

    fn line(&mut self, line: &str) {
        let argv = split_args(line).unwrap_or_else(|e| panic!("bad test line {line}: {e:?}"));
        self.step(&argv, &|| format!("hand-written case `{line}`"));
    }

    /// The keyspaces must hold the same keys, types, values and (nearly) the same TTLs.
    fn same_keyspace(&mut self, ctx: &dyn Fn() -> String) {
        let real_keys = match self.remote.call(&bytes(&["KEYS", "*"])).expect("KEYS") {
            Reply::Array(items) => items
                .into_iter()
                .map(|k| match k {
                    Reply::Bulk(b) => b,
                    other => panic!("KEYS gave {other:?}"),
                })
                .collect::<BTreeSet<_>>(),
            other => panic!("KEYS gave {other:?}"),
        };
        self.h.set_time(SystemTime::now());
        let mine: BTreeSet<Vec<u8>> = self.h.snapshot().into_keys().collect();
        assert!(
            real_keys == mine,
            "{}\nkeys differ: redis {:?} harness {:?}",
            ctx(),
            real_keys
                .iter()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>(),
            mine.iter()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>()
        );
        for key in real_keys {
            let k = String::from_utf8_lossy(&key).into_owned();
            let (t, _) = self.both(&bytes(&["TYPE", &k]));
            let read: Vec<&str> = match &t {
                Reply::Status(s) if s == "string" => vec!["GET", &k],
                Reply::Status(s) if s == "hash" => vec!["HGETALL", &k],
                Reply::Status(s) if s == "list" => vec!["LRANGE", &k, "0", "-1"],
                Reply::Status(s) if s == "zset" => vec!["ZRANGE", &k, "0", "-1", "WITHSCORES"],
                Reply::Status(s) if s == "set" => vec!["SCARD", &k],
                _ => vec!["TYPE", &k],
            };
            self.step(&bytes(&read), &|| format!("{} (reading key {k})", ctx()));
            let (real, mine) = self.both(&bytes(&["PTTL", &k]));
            let ok = match (&real, &mine) {
                (Reply::Int(a), Reply::Int(b)) if *a < 0 || *b < 0 => a == b,
                (Reply::Int(a), Reply::Int(b)) => (a - b).abs() <= TTL_TOLERANCE_MS,
                _ => false,
            };
            assert!(ok, "{}\nPTTL {k}: redis {real:?} harness {mine:?}", ctx());
        }
    }
}

fn show(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| lockkit_harness::tooling::cmdline::quote_arg(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every rule in issue 3's list of known traps, plus the conversion and error rules.
const TRAPS: &[&str] = &[
    // err wins over ok; a non-string err/ok is ignored
    r##"EVAL "return {err='e', ok='o'}" 0"##,
    r##"EVAL "return {err=1, ok='o'}" 0"##,
    r##"EVAL "return {ok=2}" 0"##,
    r##"EVAL "return {err={}, 7}" 0"##,
    // undefined global read; any global write; rawset; library tables
    r##"EVAL "return undefined_thing" 0"##,
    r##"EVAL "x = 1" 0"##,
    r##"EVAL "KEYS = {}" 0"##,
    r##"EVAL "rawset(_G, 'y', 1)" 0"##,
    r##"EVAL "string.foo = 1" 0"##,
    r##"EVAL "redis.call = nil" 0"##,
    r##"EVAL "local t = {} t.x = 1 return t.x" 0"##,
    // error_reply prefixes ERR only without a code
    r##"EVAL "return redis.error_reply('MYCODE something bad')" 0"##,
    r##"EVAL "return redis.error_reply('nocode')" 0"##,
    r##"EVAL "return redis.error_reply('-WITHDASH x')" 0"##,
    r##"EVAL "return redis.error_reply(42)" 0"##,
    r##"EVAL "return redis.status_reply('FINE')" 0"##,
    r##"EVAL "return redis.status_reply()" 0"##,
    // redis.call errors carry the suffix, redis.pcall errors do not
    "SET str v",
    r##"EVAL "return redis.call('LPUSH', KEYS[1], 'x')" 1 str"##,
    r##"EVAL "return redis.pcall('LPUSH', KEYS[1], 'x')" 1 str"##,
    r##"EVAL "return redis.call('NOSUCHCMD')" 0"##,
    r##"EVAL "return redis.pcall('NOSUCHCMD')" 0"##,
    r##"EVAL "return redis.call('GET')" 0"##,
    r##"EVAL "return redis.call()" 0"##,
    r##"EVAL "return redis.call('GET', {})" 0"##,
    r##"EVAL "return redis.call('EVAL', 'return 1', 0)" 0"##,
    r##"EVAL "local a = 1\nlocal function f()\n  return redis.call('NOSUCHCMD')\nend\nreturn f()" 0"##,
    // Lua's own pcall(redis.call, ...) yields the message as a string
    r##"EVAL "return {pcall(redis.call, 'NOSUCHCMD')}" 0"##,
    r##"EVAL "local ok, e = pcall(redis.call, 'LPUSH', 'str', 'x') return type(e)" 0"##,
    r##"EVAL "local ok, e = pcall(redis.call, 'LPUSH', 'str', 'x') error(e)" 0"##,
    r##"EVAL "local ok, e = pcall(error, {err='t'}) return e" 0"##,
    // error() forms
    r##"EVAL "error('boom')" 0"##,
    r##"EVAL "error('CODE boom', 0)" 0"##,
    r##"EVAL "error({err='tbl'})" 0"##,
    r##"EVAL "error({err=42})" 0"##,
    r##"EVAL "error(42)" 0"##,
    r##"EVAL "error()" 0"##,
    r##"EVAL "local x = nil + 1" 0"##,
    // SET inside a script returns {ok='OK'}; nil bulk is false
    r##"EVAL "return redis.call('SET', KEYS[1], 'v')" 1 k1"##,
    r##"EVAL "return type(redis.call('SET', KEYS[1], 'v'))" 1 k1"##,
    r##"EVAL "return redis.call('SET', KEYS[1], 'v').ok" 1 k1"##,
    r##"EVAL "return type(redis.call('GET', 'missing'))" 0"##,
    r##"EVAL "return redis.call('GET', 'missing') == false" 0"##,
    // conversions: truncation, booleans, arrays up to the first nil, nesting
    r##"EVAL "return {1.9, -1.9, 0.5, -0.5, true, false, 'x'}" 0"##,
    r##"EVAL "return {1, 2, nil, 4}" 0"##,
    r##"EVAL "return {{1, {2, {}}}, {}}" 0"##,
    r##"EVAL "return 1e300" 0"##,
    r##"EVAL "return -2^63" 0"##,
    r##"EVAL "return 0/0" 0"##,
    r##"EVAL "return nil" 0"##,
    r##"EVAL "return" 0"##,
    r##"EVAL "return {ok='a\r\nb'}" 0"##,
    r##"EVAL "return redis.call('PING')" 0"##,
    r##"EVAL "redis.setresp(3) return {true, false, redis.call('GET', 'missing')}" 0"##,
    r##"EVAL "redis.setresp(4)" 0"##,
    // EVALSHA and SCRIPT EXISTS ignore case; SCRIPT LOAD compiles
    r##"SCRIPT LOAD "return 'loaded'""##,
    "EVALSHA 6a3e2b9a7f5b0c2ac9c1d0b2ef8e3a8f0d27c3ba 0",
    r##"SCRIPT LOAD "return 1 +""##,
    r##"EVAL "return 1 +" 0"##,
    "SCRIPT EXISTS 0000000000000000000000000000000000000000",
    // bytecode is refused
    r##"EVAL "return {select(2, loadstring(string.dump(function() end)))}" 0"##,
    r##"EVAL "return {select(2, loadstring('x ='))}" 0"##,
    r##"EVAL "return loadstring('return 7')()" 0"##,
    // non-integral numbers go to Redis as %.17g
    r##"EVAL "redis.call('SET', KEYS[1], 0.1) return redis.call('GET', KEYS[1])" 1 k2"##,
    r##"EVAL "redis.call('SET', KEYS[1], 1e20) return redis.call('GET', KEYS[1])" 1 k2"##,
    r##"EVAL "redis.call('SET', KEYS[1], 1e17) return redis.call('GET', KEYS[1])" 1 k2"##,
    r##"EVAL "redis.call('SET', KEYS[1], 1/3) return redis.call('GET', KEYS[1])" 1 k2"##,
    r##"EVAL "return redis.call('INCRBY', KEYS[1], 2.5)" 1 k3"##,
    // cjson
    r##"EVAL "return cjson.encode({})" 0"##,
    r##"EVAL "return cjson.encode({1, 2, 'a/b', {x=true}})" 0"##,
    r##"EVAL "return cjson.encode({[1]=1, [3]=3})" 0"##,
    r##"EVAL "return cjson.encode({[1]=1, [30]=3})" 0"##,
    r##"EVAL "return cjson.encode('\t\"q\"\\')" 0"##,
    r##"EVAL "return cjson.encode(1/3)" 0"##,
    r##"EVAL "return cjson.encode(0/0)" 0"##,
    r##"EVAL "return cjson.encode(function() end)" 0"##,
    r##"EVAL "local t = cjson.decode('{\"a\":[1,2,{\"b\":null}],\"c\":\"\\u00e9\"}') return {t.a[1], t.a[3].b == cjson.null, t.c}" 0"##,
    r##"EVAL "return cjson.decode('{')" 0"##,
    r##"EVAL "return cjson.decode('[1,]')" 0"##,
    // bit
    r##"EVAL "return {bit.band(0xff, 0x0f, 0x3), bit.bor(1, 2), bit.bxor(5, 1), bit.bnot(0)}" 0"##,
    r##"EVAL "return {bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-256, 4), bit.rol(1, 33), bit.ror(1, 1)}" 0"##,
    r##"EVAL "return {bit.tohex(255), bit.tohex(-1, -4), bit.tobit(2^32 + 7), bit.bswap(1)}" 0"##,
    r##"EVAL "return bit.band('x')" 0"##,
    r##"EVAL "return bit.band()" 0"##,
    // more environment rules
    r##"EVAL "setmetatable(_G, nil)" 0"##,
    r##"EVAL "return {getmetatable('').__index == string, ('abc'):upper(), ('x'):rep(3)}" 0"##,
    r##"EVAL "return {#KEYS, table.getn(ARGV), KEYS[1]}" 2 a b c"##,
    r##"EVAL "KEYS[1] = 'changed' return KEYS[1]" 1 a"##,
    r##"EVAL "local t = setmetatable({}, {__index = function() return 1 end}) return t.x" 0"##,
    r##"EVAL "local co = coroutine.create(function() redis.call('SET', 'co', '1') coroutine.yield(2) return 3 end) local a, b = coroutine.resume(co) local c, d = coroutine.resume(co) return {tostring(a), b, tostring(c), d}" 0"##,
    r##"EVAL "return redis.call('GET', 'k', 'extra')" 0"##,
    r##"EVAL "return {tonumber('0x10'), tonumber(' 12 '), tonumber('1e2'), string.format('%.17g', 0.1)}" 0"##,
    r##"EVAL "return {double = 1.5}" 0"##,
    r##"EVAL "return {map = {a = 1}}" 0"##,
    r##"EVAL "return {set = {x = true}}" 0"##,
    r##"EVAL "return {big_number = '123456789012345678901234567890'}" 0"##,
    "HSET rh f1 v1 f2 v2",
    "ZADD rz 1.5 m",
    r##"EVAL "redis.setresp(3) return redis.call('HGETALL', 'rh')" 0"##,
    r##"EVAL "redis.setresp(3) local m = redis.call('HGETALL', 'rh').map return {m.f1, m.f2}" 0"##,
    r##"EVAL "redis.setresp(3) return redis.call('ZSCORE', 'rz', 'm')" 0"##,
    r##"EVAL "redis.setresp(3) return redis.call('ZSCORE', 'rz', 'm').double * 2" 0"##,
    r##"EVAL "redis.setresp(3) return type(redis.call('GET', 'nope'))" 0"##,
    r##"EVAL "return redis.acl_check_cmd('GET', 'k')" 0"##,
    r##"EVAL "return redis.acl_check_cmd('NOSUCH')" 0"##,
    r##"EVAL "return redis.replicate_commands()" 0"##,
    r##"EVAL "return pcall(redis.call)" 0"##,
    r##"EVAL "return redis.pcall()" 0"##,
    r##"EVAL "return {pcall(error)}" 0"##,
    r##"EVAL "return xpcall(function() error('x') end, function(e) return 'handled: ' .. e end)" 0"##,
    r##"EVAL "return select('#', redis.call('PING'))" 0"##,
    // cmsgpack
    r##"EVAL "return cmsgpack.pack({1, 2, 3}, 'abc', {a=1}, true, false, nil, 1.5, 0.1, -1, -200, 70000, 2^40, -2^40, {}, string.rep('x', 40))" 0"##,
    r##"EVAL "return {cmsgpack.unpack(cmsgpack.pack({1, {2, 'x'}}, 'y', -5, 1.5, {k='v'}))}" 0"##,
    r##"EVAL "local t = cmsgpack.unpack(cmsgpack.pack({k='v', n=3})) return {t.k, t.n}" 0"##,
    r##"EVAL "return cmsgpack.pack()" 0"##,
    r##"EVAL "return cmsgpack.unpack('\xc1')" 0"##,
    r##"EVAL "return cmsgpack.unpack('\x92\x01')" 0"##,
    r##"EVAL "local t = {} for i = 1, 20 do t = {t} end return cmsgpack.pack(t)" 0"##,
    // struct
    r##"EVAL "return struct.pack('>I2bBhHlLi', 258, -1, 255, -2, 65535, -3, 2^40, 7)" 0"##,
    r##"EVAL "return struct.pack('<i3 !4 b i d f', 1, 2, 3, 1.5, 0.25)" 0"##,
    r##"EVAL "return struct.pack('c3 c0 s', 'abcdef', 'xy', 'zz')" 0"##,
    r##"EVAL "return {struct.unpack('>I2bBhH', struct.pack('>I2bBhH', 258, -1, 255, -2, 65535))}" 0"##,
    r##"EVAL "return {struct.unpack('<d f s c2', struct.pack('<d f s c2', 1.5, 0.25, 'str', 'ab'))}" 0"##,
    r##"EVAL "return {struct.unpack('b c0', struct.pack('b c0', 3, 'xyz'))}" 0"##,
    r##"EVAL "return {struct.unpack('i', 'abcdabcd', 5)}" 0"##,
    r##"EVAL "return {struct.size('>!4 b i h d'), struct.size('c10 x')}" 0"##,
    r##"EVAL "return struct.pack('z', 1)" 0"##,
    r##"EVAL "return struct.pack('i40', 1)" 0"##,
    r##"EVAL "return struct.pack('c5', 'ab')" 0"##,
    r##"EVAL "return struct.unpack('i', 'ab')" 0"##,
    r##"EVAL "return struct.unpack('s', 'ab')" 0"##,
    r##"EVAL "return struct.size('s')" 0"##,
    r##"EVAL "return struct.size('c0')" 0"##,
    r##"EVAL "return struct.pack('!3 i', 1)" 0"##,
    r##"EVAL "return struct.pack('i')" 0"##,
    // shebang flags
    r##"EVAL "#!lua flags=no-writes\nreturn redis.call('SET', 'a', 'b')" 0"##,
    r##"EVAL "#!lua flags=no-writes\nreturn redis.call('GET', 'a')" 0"##,
    r##"EVAL "#!lua flags=bogus\nreturn 1" 0"##,
    r##"EVAL "#!lux\nreturn 1" 0"##,
    r##"EVAL "#!lua foo=bar\nreturn 1" 0"##,
    r##"EVAL "#!lua\nreturn undefined_thing" 0"##,
    r##"EVAL_RO "#!lua\nreturn 1" 0"##,
    r##"EVAL_RO "return redis.call('SET', 'a', 'b')" 0"##,
    r##"EVAL_RO "#!lua flags=no-writes\nreturn redis.call('GET', 'a')" 0"##,
    // numkeys, arity, sha1hex, log, misc
    r##"EVAL "return 1" -1"##,
    r##"EVAL "return 1" 2 a"##,
    r##"EVAL "return 1" x"##,
    "EVAL",
    r##"EVAL "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}" 2 a b c d"##,
    r##"EVAL "return redis.sha1hex('abc')" 0"##,
    r##"EVAL "return redis.sha1hex()" 0"##,
    r##"EVAL "return redis.log(redis.LOG_WARNING, 'x')" 0"##,
    r##"EVAL "return redis.log(99, 'x')" 0"##,
    r##"EVAL "return redis.log()" 0"##,
    r##"EVAL "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}" 0"##,
    r##"EVAL "return math.random(1000)" 0"##,
    r##"EVAL "return math.random(1000)" 0"##,
    r##"EVAL "return tostring(1/3)" 0"##,
    r##"EVAL "return string.format('%d %s %5.2f', 3, 'x', 1.234)" 0"##,
    r##"EVAL "return _G == _G._G" 0"##,
    r##"EVAL "return type(os)" 0"##,
    "SCRIPT FLUSH",
    "SCRIPT NOPE",
    "SCRIPT LOAD",
    "EVALSHA 6a3e2b9a7f5b0c2ac9c1d0b2ef8e3a8f0d27c3ba 0",
    // functions
    r##"FUNCTION LOAD "#!lua name=lib\nredis.register_function('f1', function(keys, args) return {keys[1], args[1]} end)""##,
    "FCALL f1 1 k a",
    "FCALL F1 1 k a",
    "FCALL nope 0",
    "FCALL f1 x",
    "FCALL f1 2 a",
    "FCALL_RO f1 0",
    r##"FUNCTION LOAD "#!lua name=lib\nredis.register_function('f1', function() return 1 end)""##,
    r##"FUNCTION LOAD REPLACE "#!lua name=lib\nredis.register_function('f1', function() return 2 end)""##,
    "FCALL f1 0",
    r##"FUNCTION LOAD "#!lua name=lib2\nredis.register_function('f1', function() return 1 end)""##,
    r##"FUNCTION LOAD "#!lua name=lib3\nredis.call('SET', 'x', 'y')""##,
    r##"FUNCTION LOAD "#!lua name=lib4\nredis.register_function('bad-name', function() end)""##,
    r##"FUNCTION LOAD "#!lua name=lib5\nlocal x = 1""##,
    r##"FUNCTION LOAD "return 1""##,
    r##"FUNCTION LOAD "#!lua\nreturn 1""##,
    r##"FUNCTION LOAD "#!lua name=ro\nredis.register_function{function_name='ro', callback=function() return redis.call('SET', 'q', 'w') end, flags={'no-writes'}}""##,
    "FCALL ro 0",
    "FCALL_RO ro 0",
    r##"FUNCTION LOAD "#!lua name=err\nredis.register_function('e', function() return undefined_thing end)""##,
    "FCALL e 0",
    "FUNCTION LOAD \"#!lua name=spin\nwhile true do end\"",
    "FUNCTION DELETE lib",
    "FUNCTION DELETE lib",
    "FCALL f1 0",
    // plain commands and their errors
    "SET k v EX 0",
    "SET k v EX -1",
    "SET k v PX 10 EX 10",
    "SET k v NX XX",
    "SET k v KEEPTTL EX 10",
    "SET k v EX abc",
    "SET k v GET",
    "SET k v2 NX GET",
    "SET str2 v PXAT 1",
    "INCR str",
    "SET n 9223372036854775807",
    "INCR n",
    "DECRBY n -9223372036854775808",
    "INCRBY n abc",
    "SET n 010",
    "INCR n",
    "INCRBYFLOAT f 0.1",
    "INCRBYFLOAT f 1.5",
    "INCRBYFLOAT f abc",
    "INCRBYFLOAT f inf",
    "MSET a",
    "MSET a 1 b 2",
    "MSETNX a 1 c 3",
    "MGET a b c str",
    "GETSET a 5",
    "GETDEL a",
    "APPEND b xyz",
    "STRLEN b",
    "EXPIRE b 100 NX XX",
    "EXPIRE b 100 GT LT",
    "EXPIRE b 100 FOO",
    "EXPIRE b 100 GT",
    "EXPIRE b 100 NX",
    "EXPIRE b 50 LT",
    "EXPIRE b 100 GT",
    "EXPIRE b 9223372036854775807",
    "PEXPIRE b -1",
    "EXISTS b b a",
    "PERSIST b",
    "TYPE b",
    "HSET h a 1 b 2",
    "HSET h a",
    "HINCRBY h a 5",
    "HSET h s x",
    "HINCRBY h s 1",
    "HGETALL h",
    "HMGET h a zz",
    "HDEL h a b s zz",
    "EXISTS h",
    "RPUSH l a b c d e f g h i j k",
    "LRANGE l -3 100",
    "LPOP l 2",
    "LPOP l -1",
    "RPOP l 0",
    "LPOP nolist 2",
    "ZADD z 1 a 2 b 3 c",
    "ZADD z NX XX 1 a",
    "ZADD z GT LT 1 a",
    "ZADD z INCR 1 a 2 b",
    "ZADD z 1",
    "ZADD z abc a",
    "ZADD z GT CH 0 a 5 b",
    "ZADD z INCR 2.5 a",
    "ZRANGE z 0 -1 WITHSCORES",
    "ZRANGE z (1 +inf BYSCORE LIMIT 0 1",
    "ZRANGE z +inf -inf BYSCORE REV WITHSCORES",
    "ZRANGE z 0 -1 LIMIT 0 1",
    "ZRANGEBYSCORE z -inf (5 WITHSCORES",
    "ZRANGEBYSCORE z a b",
    "ZSCORE z b",
    "ZREMRANGEBYSCORE z 3 5",
    "ZCARD z",
    "ZREM z a b c",
    "EXISTS z",
    "GET h",
    // more sorted-set, list, hash and set commands
    "ZADD z2 1 a 2 b 3 c 4 d 5 e",
    "ZCOUNT z2 (1 4",
    "ZCOUNT z2 x 4",
    "ZRANK z2 c",
    "ZREVRANK z2 c",
    "ZRANK z2 nope",
    "ZREVRANGE z2 0 1 WITHSCORES",
    "ZREVRANGE z2 0 1 LIMIT 0 1",
    "ZREVRANGE z2 0 1 BYSCORE",
    "ZREVRANGEBYSCORE z2 4 (2 WITHSCORES LIMIT 0 5",
    "ZREVRANGEBYSCORE z2 (2 4",
    "ZPOPMIN z2",
    "ZPOPMAX z2 2",
    "ZPOPMIN z2 -1",
    "ZPOPMIN z2 0",
    "ZPOPMIN z2 1 2",
    "ZREMRANGEBYRANK z2 0 0",
    "ZRANGE z2 0 -1 WITHSCORES",
    "ZPOPMIN nozset",
    "RPUSH l2 a b a c a d",
    "LINDEX l2 -1",
    "LINDEX l2 99",
    "LINDEX l2 x",
    "LREM l2 -2 a",
    "LRANGE l2 0 -1",
    "LREM l2 0 nope",
    "LTRIM l2 1 -1",
    "LRANGE l2 0 -1",
    "LTRIM l2 5 1",
    "EXISTS l2",
    "RPUSH q1 a b c",
    "RPOPLPUSH q1 q2",
    "LMOVE q1 q2 LEFT RIGHT",
    "LMOVE q1 q2 UP DOWN",
    "LRANGE q2 0 -1",
    "RPOPLPUSH q1 str",
    "RPOPLPUSH nolist str",
    "RPOPLPUSH q1 q1",
    "LMOVE q1 q2 LEFT LEFT",
    "EXISTS q1",
    "LSET q2 0 z",
    "LSET q2 9 z",
    "LSET nolist 0 z",
    "LPUSHX nolist a",
    "RPUSHX q2 y",
    "LRANGE q2 0 -1",
    "HINCRBYFLOAT hf f 0.1",
    "HINCRBYFLOAT hf f 1e3",
    "HINCRBYFLOAT hf f inf",
    "HINCRBYFLOAT hf f x",
    "HSET hf g abc",
    "HINCRBYFLOAT hf g 1",
    "SADD s1 a b c a",
    "SREM s1 a x",
    "SISMEMBER s1 b",
    "SMISMEMBER s1 a b c",
    "SCARD s1",
    "SADD str x",
    "SREM s1 b c",
    "EXISTS s1",
    "PUBLISH ch msg",
    "PING",
    "PING hello",
    "NOSUCHCOMMAND a b",
    "GET",
    "DEBUG SLEEP 0.01",
    // expiry on the clock: a key expires after DEBUG SLEEP, inside and outside scripts
    "SET exp v PX 50",
    "HSET hexp f v",
    "PEXPIRE hexp 50",
    "DEBUG SLEEP 0.1",
    "GET exp",
    "EXISTS exp hexp",
    r##"EVAL "return redis.call('SET', KEYS[1], 'v', 'PX', 60000, 'GET')" 1 exp"##,
    "TTL exp",
    "SET exp v KEEPTTL",
    "TTL exp",
    "SET exp v",
    "TTL exp",
];

#[test]
fn known_traps_and_edge_cases_match_real_redis() {
    let mut p = Pair::new();
    for line in TRAPS {
        p.line(line);
    }
    p.same_keyspace(&|| "after the hand-written cases".into());
}

#[test]
fn every_script_in_lua_matches_real_redis() {
    let mut p = Pair::new();
    let scripts = ["release.lua", "extend.lua", "acquire_fenced.lua"];
    for name in scripts {
        let body = lua_file(name);
        p.step(&bytes(&["SCRIPT", "LOAD", &body]), &|| {
            format!("loading {name}")
        });
    }
    let lib = lua_file("lockkit.functions.lua");
    p.step(&bytes(&["FUNCTION", "LOAD", &lib]), &|| {
        "loading lockkit.functions.lua".into()
    });
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..300 {
        let lock = ["lock:a", "lock:b"][rng.random_range(0..2)];
        let tok = ["t1", "t2"][rng.random_range(0..2)];
        let ttl = ["1500", "60000", "0", "-5", "abc"][rng.random_range(0..5)];
        let argv: Vec<String> = match rng.random_range(0..7) {
            0 => vec![
                "EVAL".into(),
                lua_file("release.lua"),
                "1".into(),
                lock.into(),
                tok.into(),
            ],
            1 => vec![
                "EVAL".into(),
                lua_file("extend.lua"),
                "1".into(),
                lock.into(),
                tok.into(),
                ttl.into(),
            ],
            2 => vec![
                "EVAL".into(),
                lua_file("acquire_fenced.lua"),
                "2".into(),
                lock.into(),
                format!("{lock}:fence"),
                tok.into(),
                ttl.into(),
            ],
            3 => vec![
                "FCALL".into(),
                "lockkit_release".into(),
                "1".into(),
                lock.into(),
                tok.into(),
            ],
            4 => vec![
                "FCALL".into(),
                "lockkit_extend".into(),
                "1".into(),
                lock.into(),
                tok.into(),
                ttl.into(),
            ],
            5 => vec![
                "FCALL".into(),
                "lockkit_acquire_fenced".into(),
                "2".into(),
                lock.into(),
                format!("{lock}:fence"),
                tok.into(),
                ttl.into(),
            ],
            _ => vec![
                "SET".into(),
                lock.into(),
                tok.into(),
                "PX".into(),
                "60000".into(),
            ],
        };
        let argv: Vec<Vec<u8>> = argv.into_iter().map(String::into_bytes).collect();
        p.step(&argv, &|| format!("lua/ script case {i}"));
        p.same_keyspace(&|| format!("after lua/ script case {i}"));
    }
}

/// Random commands and scripts over a handful of keys.
struct Gen {
    rng: StdRng,
}

const KEYS: &[&str] = &["k1", "k2", "h1", "l1", "z1", "n1"];
const VALUES: &[&str] = &[
    "0",
    "1",
    "-7",
    "10",
    "3.5",
    "abc",
    "",
    "a b",
    "9223372036854775807",
    "1e3",
];

impl Gen {
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.rng.random_range(0..xs.len())]
    }

    fn key(&mut self) -> String {
        self.pick(KEYS).to_string()
    }

    fn val(&mut self) -> String {
        self.pick(VALUES).to_string()
    }

    fn command(&mut self) -> Vec<String> {
        let k = self.key();
        let v = self.val();
        let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match self.rng.random_range(0..43) {
            0 => s(&["GET", &k]),
            1 => {
                let mut c = s(&["SET", &k, &v]);
                for _ in 0..self.rng.random_range(0..3) {
                    let o = self.pick(&["NX", "XX", "GET", "KEEPTTL", "EX", "PX", "EX", "PX"]);
                    c.push(o.into());
                    if o == "EX" || o == "PX" {
                        c.push(self.pick(&["3000", "100000", "0", "x", "-1"]).into());
                    }
                }
                c
            }
            2 => s(&["INCR", &k]),
            3 => s(&["INCRBY", &k, &v]),
            4 => s(&["DEL", &k, &self.key()]),
            5 => s(&["EXISTS", &k, &self.key()]),
            6 => s(&["TYPE", &k]),
            7 => {
                let mut c = s(&["EXPIRE", &k, self.pick(&["100", "5000", "-1", "0", "x"])]);
                if self.rng.random_bool(0.5) {
                    c.push(self.pick(&["NX", "XX", "GT", "LT", "BAD"]).into());
                }
                c
            }
            8 => s(&["PERSIST", &k]),
            9 => s(&["HSET", &k, self.pick(&["f", "g"]), &v]),
            10 => s(&["HGET", &k, self.pick(&["f", "g"])]),
            11 => s(&["HINCRBY", &k, self.pick(&["f", "g"]), &v]),
            12 => s(&["HDEL", &k, "f"]),
            13 => s(&["HGETALL", &k]),
            14 => s(&["RPUSH", &k, &v, &self.val()]),
            15 => s(&["LPOP", &k]),
            16 => s(&[
                "LRANGE",
                &k,
                self.pick(&["0", "-2", "1"]),
                self.pick(&["-1", "0", "5"]),
            ]),
            17 => s(&[
                "ZADD",
                &k,
                self.pick(&["1", "2.5", "-inf", "x"]),
                self.pick(&["m1", "m2"]),
            ]),
            18 => s(&["ZRANGE", &k, "0", "-1", "WITHSCORES"]),
            19 => s(&["ZSCORE", &k, self.pick(&["m1", "m2"])]),
            20 => s(&["ZREM", &k, "m1"]),
            21 => s(&["APPEND", &k, &v]),
            22 => s(&["STRLEN", &k]),
            23 => s(&["MGET", &k, &self.key()]),
            24 => s(&["SETNX", &k, &v]),
            25 => s(&["GETDEL", &k]),
            26 => s(&["DECRBY", &k, &v]),
            27 => s(&["INCRBYFLOAT", &k, self.pick(&["0.5", "1", "-2.25", "x"])]),
            28 => s(&[
                "ZCOUNT",
                &k,
                self.pick(&["-inf", "(1", "2"]),
                self.pick(&["+inf", "3", "(2.5"]),
            ]),
            29 => s(&["ZPOPMIN", &k]),
            30 => s(&["ZREVRANGE", &k, "0", self.pick(&["-1", "1"]), "WITHSCORES"]),
            31 => s(&["ZRANK", &k, self.pick(&["m1", "m2"])]),
            32 => s(&["LINDEX", &k, self.pick(&["0", "-1", "3"])]),
            33 => s(&[
                "LTRIM",
                &k,
                self.pick(&["0", "1", "-2"]),
                self.pick(&["-1", "0", "2"]),
            ]),
            34 => s(&["LREM", &k, self.pick(&["0", "1", "-1"]), &v]),
            35 => s(&[
                "HINCRBYFLOAT",
                &k,
                self.pick(&["f", "g"]),
                self.pick(&["0.5", "-1.25", "x"]),
            ]),
            36 => s(&["SADD", &k, &v, &self.val()]),
            37 => s(&["SREM", &k, &v]),
            38 => s(&["SISMEMBER", &k, &v]),
            39 => s(&["RPOPLPUSH", &k, &self.key()]),
            40 => s(&["LSET", &k, self.pick(&["0", "-1", "5"]), &v]),
            _ => self.script(),
        }
    }

    fn lua_value(&mut self, depth: usize) -> String {
        let k = format!("'{}'", self.key());
        match self.rng.random_range(0..if depth > 1 { 8 } else { 11 }) {
            0 => "1.5".into(),
            1 => "-2.7".into(),
            2 => "true".into(),
            3 => "false".into(),
            4 => "nil".into(),
            5 => "'str'".into(),
            6 => format!("redis.call('GET', {k})"),
            7 => format!("redis.pcall('INCR', {k})"),
            8 => format!(
                "{{{}, {}}}",
                self.lua_value(depth + 1),
                self.lua_value(depth + 1)
            ),
            9 => format!("{{ok='{}'}}", self.pick(&["OK", "fine"])),
            _ => format!("{{err='{}'}}", self.pick(&["ERR bad", "CODE x", "plain"])),
        }
    }

    fn script(&mut self) -> Vec<String> {
        let k = self.key();
        let body = match self.rng.random_range(0..11) {
            8 => format!("return cmsgpack.pack({})", self.lua_value(0)),
            9 => format!(
                "return {{cmsgpack.unpack(cmsgpack.pack({}, {}))}}",
                self.lua_value(0),
                self.lua_value(0)
            ),
            10 => format!(
                "return {{struct.unpack('{0}', struct.pack('{0}', ARGV[1]))}}",
                self.pick(&[">i", "<h", "B", "d", "s", "c0"])
            ),
            0 => format!("return {}", self.lua_value(0)),
            1 => "return redis.call('SET', KEYS[1], ARGV[1])".to_string(),
            2 => "return redis.call('INCRBY', KEYS[1], ARGV[1])".to_string(),
            3 => "local v = redis.call('GET', KEYS[1]) if v then return {v, #v} end return v"
                .to_string(),
            4 => "return {pcall(redis.call, 'HSET', KEYS[1], 'f', ARGV[1])}".to_string(),
            5 => "return redis.call('EXPIRE', KEYS[1], ARGV[1])".to_string(),
            6 => format!("local t = {} return cjson.encode(t)", self.lua_value(0)),
            _ => format!(
                "if redis.call('EXISTS', KEYS[1]) == 1 then return {} end error('{}')",
                self.lua_value(0),
                self.pick(&["nope", "CODE x"])
            ),
        };
        vec!["EVAL".into(), body, "1".into(), k, self.val()]
    }
}

#[test]
fn random_commands_and_scripts_match_real_redis() {
    let seed: u64 = match std::env::var("LOCKKIT_DIFF_SEED") {
        Ok(s) => s.parse().expect("LOCKKIT_DIFF_SEED is a number"),
        Err(_) => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    };
    let cases: usize = std::env::var("LOCKKIT_DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut p = Pair::new();
    let mut g = Gen {
        rng: StdRng::seed_from_u64(seed),
    };
    for case in 0..cases {
        let n = g.rng.random_range(1..5);
        for _ in 0..n {
            let argv: Vec<Vec<u8>> = g.command().into_iter().map(String::into_bytes).collect();
            p.step(&argv, &|| {
                format!("random case {case} (replay: LOCKKIT_DIFF_SEED={seed} cargo test -p lockkit-harness --test differential)")
            });
        }
        if case % 4 == 0 {
            p.same_keyspace(&|| format!("random case {case}, LOCKKIT_DIFF_SEED={seed}"));
        }
    }
    eprintln!(
        "differential: {cases} random cases, {} commands, seed {seed}",
        p.steps
    );
}
