//! The command table: names, arities, flags, and the handlers for each data type.

mod hash;
mod keys;
mod list;
mod redis_names;
mod server_cmds;
mod set;
mod strings;
mod zset;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::number;
use crate::reply::{errors, Reply};
use crate::server::{Caller, Server};

pub use redis_names::is_redis_command;

/// A command handler.
pub type Handler = fn(&mut Server, &[Vec<u8>]) -> Reply;

/// How a command is carried out.
#[derive(Debug, Clone, Copy)]
pub enum Run {
    /// Against the keyspace alone.
    Plain(Handler),
    /// EVAL, SCRIPT, FUNCTION, FCALL...: needs the Lua engine (see `Harness`).
    Scripting,
}

/// One command: its name (lower case), Redis's arity (negative: at least), and flags.
#[derive(Debug)]
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis's arity: `n` exactly `n` arguments with the name, `-n` at least `n`.
    pub arity: i32,
    /// Writes the keyspace (refused in `no-writes` scripts and `*_RO` calls).
    pub write: bool,
    /// Refused inside scripts (`This Redis command is not allowed from script`).
    pub noscript: bool,
    /// The handler.
    pub run: Run,
}

const fn plain(name: &'static str, arity: i32, write: bool, f: Handler) -> Spec {
    Spec {
        name,
        arity,
        write,
        noscript: false,
        run: Run::Plain(f),
    }
}

const fn scripting(name: &'static str, arity: i32, write: bool) -> Spec {
    Spec {
        name,
        arity,
        write,
        noscript: true,
        run: Run::Scripting,
    }
}

const fn noscript(name: &'static str, arity: i32, f: Handler) -> Spec {
    Spec {
        name,
        arity,
        write: false,
        noscript: true,
        run: Run::Plain(f),
    }
}

static TABLE: &[Spec] = &[
    plain("get", 2, false, strings::get),
    plain("set", -3, true, strings::set),
    plain("setnx", 3, true, strings::setnx),
    plain("setex", 4, true, strings::setex),
    plain("psetex", 4, true, strings::psetex),
    plain("getset", 3, true, strings::getset),
    plain("getdel", 2, true, strings::getdel),
    plain("mget", -2, false, strings::mget),
    plain("mset", -3, true, strings::mset),
    plain("msetnx", -3, true, strings::msetnx),
    plain("append", 3, true, strings::append),
    plain("strlen", 2, false, strings::strlen),
    plain("incr", 2, true, strings::incr),
    plain("decr", 2, true, strings::decr),
    plain("incrby", 3, true, strings::incrby),
    plain("decrby", 3, true, strings::decrby),
    plain("incrbyfloat", 3, true, strings::incrbyfloat),
    plain("del", -2, true, keys::del),
    plain("unlink", -2, true, keys::del),
    plain("exists", -2, false, keys::exists),
    plain("type", 2, false, keys::type_cmd),
    plain("expire", -3, true, keys::expire),
    plain("pexpire", -3, true, keys::pexpire),
    plain("expireat", -3, true, keys::expireat),
    plain("pexpireat", -3, true, keys::pexpireat),
    plain("ttl", 2, false, keys::ttl),
    plain("pttl", 2, false, keys::pttl),
    plain("expiretime", 2, false, keys::expiretime),
    plain("pexpiretime", 2, false, keys::pexpiretime),
    plain("persist", 2, true, keys::persist),
    plain("dbsize", 1, false, keys::dbsize),
    plain("flushall", -1, true, keys::flushall),
    plain("flushdb", -1, true, keys::flushall),
    plain("hset", -4, true, hash::hset),
    plain("hmset", -4, true, hash::hmset),
    plain("hsetnx", 4, true, hash::hsetnx),
    plain("hget", 3, false, hash::hget),
    plain("hmget", -3, false, hash::hmget),
    plain("hdel", -3, true, hash::hdel),
    plain("hexists", 3, false, hash::hexists),
    plain("hincrby", 4, true, hash::hincrby),
    plain("hgetall", 2, false, hash::hgetall),
    plain("hkeys", 2, false, hash::hkeys),
    plain("hvals", 2, false, hash::hvals),
    plain("hlen", 2, false, hash::hlen),
    plain("lpush", -3, true, list::lpush),
    plain("rpush", -3, true, list::rpush),
    plain("lpop", -2, true, list::lpop),
    plain("rpop", -2, true, list::rpop),
    plain("llen", 2, false, list::llen),
    plain("lrange", 4, false, list::lrange),
    plain("zadd", -4, true, zset::zadd),
    plain("zincrby", 4, true, zset::zincrby),
    plain("zrem", -3, true, zset::zrem),
    plain("zscore", 3, false, zset::zscore),
    plain("zcard", 2, false, zset::zcard),
    plain("zrange", -4, false, zset::zrange),
    plain("zrangebyscore", -4, false, zset::zrangebyscore),
    plain("zremrangebyscore", 4, true, zset::zremrangebyscore),
    plain("zremrangebyrank", 4, true, zset::zremrangebyrank),
    plain("zcount", 4, false, zset::zcount),
    plain("zrank", 3, false, zset::zrank),
    plain("zrevrank", 3, false, zset::zrevrank),
    plain("zrevrange", -4, false, zset::zrevrange),
    plain("zrevrangebyscore", -4, false, zset::zrevrangebyscore),
    plain("zpopmin", -2, true, zset::zpopmin),
    plain("zpopmax", -2, true, zset::zpopmax),
    plain("lindex", 3, false, list::lindex),
    plain("ltrim", 4, true, list::ltrim),
    plain("lrem", 4, true, list::lrem),
    plain("lset", 4, true, list::lset),
    plain("lpushx", -3, true, list::lpushx),
    plain("rpushx", -3, true, list::rpushx),
    plain("rpoplpush", 3, true, list::rpoplpush),
    plain("lmove", 5, true, list::lmove),
    plain("hincrbyfloat", 4, true, hash::hincrbyfloat),
    plain("sadd", -3, true, set::sadd),
    plain("srem", -3, true, set::srem),
    plain("sismember", 3, false, set::sismember),
    plain("smismember", -3, false, set::smismember),
    plain("scard", 2, false, set::scard),
    plain("ping", -1, false, server_cmds::ping),
    plain("echo", 2, false, server_cmds::echo),
    plain("time", 1, false, server_cmds::time),
    plain("publish", 3, false, server_cmds::publish),
    noscript("debug", -2, server_cmds::debug),
    scripting("eval", -3, true),
    scripting("evalsha", -3, true),
    scripting("eval_ro", -3, false),
    scripting("evalsha_ro", -3, false),
    scripting("script", -2, false),
    scripting("function", -2, false),
    scripting("fcall", -3, true),
    scripting("fcall_ro", -3, false),
];

type Table = HashMap<&'static str, &'static Spec, fnv::FnvBuildHasher>;

fn table() -> &'static Table {
    static MAP: OnceLock<Table> = OnceLock::new();
    MAP.get_or_init(|| TABLE.iter().map(|s| (s.name, s)).collect())
}

/// The command named `name` (any case), if the harness emulates it.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = std::str::from_utf8(&buf[..name.len()]).ok()?;
    table().get(lower).copied()
}

/// Whether `argc` (counting the name) satisfies `arity`.
pub fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// Finds the command for `args` and checks its arity, with the error text Redis gives `caller`.
pub fn resolve(args: &[Vec<u8>], caller: Caller) -> Result<&'static Spec, Reply> {
    let Some(name) = args.first() else {
        return Err(Reply::err("ERR harness: empty command"));
    };
    let Some(spec) = lookup(name) else {
        return Err(unknown_command(args, caller));
    };
    if !arity_ok(spec.arity, args.len()) {
        return Err(match caller {
            Caller::Client => wrong_arity(spec.name),
            Caller::Script => {
                Reply::err("ERR Wrong number of args calling Redis command from script")
            }
        });
    }
    Ok(spec)
}

fn unknown_command(args: &[Vec<u8>], caller: Caller) -> Reply {
    let lower = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    if is_redis_command(&lower) {
        return Reply::err(format!(
            "ERR harness: the Redis command '{lower}' is not emulated"
        ));
    }
    match caller {
        Caller::Script => Reply::err("ERR Unknown Redis command called from script"),
        Caller::Client => {
            let mut msg = format!(
                "ERR unknown command '{}', with args beginning with: ",
                trunc128(&args[0])
            );
            for a in &args[1..] {
                if msg.len() >= 128 {
                    break;
                }
                msg.push_str(&format!("'{}' ", trunc128(a)));
            }
            Reply::Error(msg)
        }
    }
}

fn trunc128(b: &[u8]) -> String {
    let b = &b[..b.len().min(128)];
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect()
}

/// `ERR wrong number of arguments for 'name' command`.
pub fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// An integer argument, or Redis's error.
pub(crate) fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    number::parse_i64(b).ok_or_else(|| Reply::err(errors::NOT_INTEGER))
}

/// A float argument, or Redis's error.
pub(crate) fn float_arg(b: &[u8]) -> Result<f64, Reply> {
    number::parse_f64(b).ok_or_else(|| Reply::err(errors::NOT_FLOAT))
}

/// Case-insensitive comparison of an argument with an option name.
pub(crate) fn is(arg: &[u8], opt: &str) -> bool {
    arg.eq_ignore_ascii_case(opt.as_bytes())
}

/// Turns a `Result<Reply, Reply>` from `?`-style handlers into the reply.
pub(crate) fn done(r: Result<Reply, Reply>) -> Reply {
    r.unwrap_or_else(|e| e)
}

/// The wrong-type error.
pub(crate) fn wrongtype() -> Reply {
    Reply::err(errors::WRONGTYPE)
}
