//! The command table (Redis 7.0.15's, generated as data), Redis's own checks from it, and the
//! handlers for each data type.

mod bitmap;
pub(crate) mod bpop;
mod command_info;
mod dump;
mod geo;
mod getkeys;
mod hash;
mod hyperloglog;
mod introspect;
mod keys;
mod list;
mod more;
mod server_cmds;
mod set;
mod sort;
mod stream;
mod stream_claim;
pub(crate) mod stream_group;
mod strings;
mod zset;

pub(crate) use getkeys::command_keys;
pub(crate) use introspect::glob_match;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::number;
use crate::reply::{errors, Reply};
use crate::server::{Caller, Server};

/// A command handler.
pub(crate) type Handler = fn(&mut Server, &[Vec<u8>]) -> Reply;

/// How a command is carried out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Run {
    /// Against the keyspace alone.
    Plain(Handler),
    /// EVAL, SCRIPT, FUNCTION, FCALL...: needs the Lua engine (see `Harness`).
    Scripting,
}

/// One row of Redis 7.0.15's command table (`harness/data/commands-7.0.15.tsv`), with the
/// harness's handler.
#[derive(Debug)]
pub(crate) struct Spec {
    /// Lower-case name; `parent|sub` for a subcommand.
    pub name: &'static str,
    /// The top-level command (`config` for `config|get`).
    pub command: &'static str,
    /// Redis's arity: `n` exactly `n` arguments with the name, `-n` at least `n`.
    pub arity: i32,
    /// Writes the keyspace (refused in `no-writes` scripts and `*_RO` calls).
    pub write: bool,
    /// Refused inside scripts (`This Redis command is not allowed from script`).
    pub noscript: bool,
    /// May grow memory: refused when the server is over `maxmemory`.
    pub deny_oom: bool,
    /// Redis's documentation group (`string`, `hash`, `server`...).
    pub group: &'static str,
    /// Its ACL categories (`@write,@string,@slow`).
    pub acl_categories: &'static str,
    /// Whether the command has subcommands (`config`, `object`...).
    pub container: bool,
    /// Whether the harness carries it out (otherwise it answers that it does not).
    pub emulated: bool,
    /// The handler.
    pub run: Run,
}

/// Runs a command's handler; a panic in it (a defect of the harness, never the client's
/// doing) becomes an error reply for that one command instead of ending the process or
/// unwinding through the script or the server that called it.
pub(crate) fn run_caught(f: Handler, server: &mut Server, argv: &[Vec<u8>]) -> Reply {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(server, argv))).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default();
        let name = argv
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
            .unwrap_or_default();
        Reply::err(format!(
            "ERR harness: the command '{name}' failed inside the harness ({why})"
        ))
    })
}

/// The table, generated from a real redis-server 7.0.15 by `harness/tests/it/command_table.rs`.
const TABLE_TSV: &str = include_str!("../../data/commands-7.0.15.tsv");

/// The commands the harness carries out, by table name. A container's entry (`script`)
/// covers every subcommand that has none of its own.
static HANDLERS: &[(&str, Run)] = &[
    ("get", Run::Plain(strings::get)),
    ("set", Run::Plain(strings::set)),
    ("setnx", Run::Plain(strings::setnx)),
    ("setex", Run::Plain(strings::setex)),
    ("psetex", Run::Plain(strings::psetex)),
    ("getset", Run::Plain(strings::getset)),
    ("getdel", Run::Plain(strings::getdel)),
    ("mget", Run::Plain(strings::mget)),
    ("mset", Run::Plain(strings::mset)),
    ("msetnx", Run::Plain(strings::msetnx)),
    ("append", Run::Plain(strings::append)),
    ("strlen", Run::Plain(strings::strlen)),
    ("incr", Run::Plain(strings::incr)),
    ("decr", Run::Plain(strings::decr)),
    ("incrby", Run::Plain(strings::incrby)),
    ("decrby", Run::Plain(strings::decrby)),
    ("incrbyfloat", Run::Plain(strings::incrbyfloat)),
    ("del", Run::Plain(keys::del)),
    ("unlink", Run::Plain(keys::del)),
    ("exists", Run::Plain(keys::exists)),
    ("type", Run::Plain(keys::type_cmd)),
    ("expire", Run::Plain(keys::expire)),
    ("pexpire", Run::Plain(keys::pexpire)),
    ("expireat", Run::Plain(keys::expireat)),
    ("pexpireat", Run::Plain(keys::pexpireat)),
    ("ttl", Run::Plain(keys::ttl)),
    ("pttl", Run::Plain(keys::pttl)),
    ("expiretime", Run::Plain(keys::expiretime)),
    ("pexpiretime", Run::Plain(keys::pexpiretime)),
    ("persist", Run::Plain(keys::persist)),
    ("dbsize", Run::Plain(keys::dbsize)),
    ("flushall", Run::Plain(keys::flushall)),
    ("flushdb", Run::Plain(keys::flushall)),
    ("hset", Run::Plain(hash::hset)),
    ("hmset", Run::Plain(hash::hmset)),
    ("hsetnx", Run::Plain(hash::hsetnx)),
    ("hget", Run::Plain(hash::hget)),
    ("hmget", Run::Plain(hash::hmget)),
    ("hdel", Run::Plain(hash::hdel)),
    ("hexists", Run::Plain(hash::hexists)),
    ("hincrby", Run::Plain(hash::hincrby)),
    ("hincrbyfloat", Run::Plain(hash::hincrbyfloat)),
    ("hgetall", Run::Plain(hash::hgetall)),
    ("hkeys", Run::Plain(hash::hkeys)),
    ("hvals", Run::Plain(hash::hvals)),
    ("hlen", Run::Plain(hash::hlen)),
    ("lpush", Run::Plain(list::lpush)),
    ("rpush", Run::Plain(list::rpush)),
    ("lpop", Run::Plain(list::lpop)),
    ("rpop", Run::Plain(list::rpop)),
    ("llen", Run::Plain(list::llen)),
    ("lrange", Run::Plain(list::lrange)),
    ("lindex", Run::Plain(list::lindex)),
    ("ltrim", Run::Plain(list::ltrim)),
    ("lrem", Run::Plain(list::lrem)),
    ("lset", Run::Plain(list::lset)),
    ("lpushx", Run::Plain(list::lpushx)),
    ("rpushx", Run::Plain(list::rpushx)),
    ("rpoplpush", Run::Plain(list::rpoplpush)),
    ("lmove", Run::Plain(list::lmove)),
    ("blpop", Run::Plain(bpop::blpop)),
    ("brpop", Run::Plain(bpop::brpop)),
    ("blmove", Run::Plain(bpop::blmove)),
    ("brpoplpush", Run::Plain(bpop::brpoplpush)),
    ("lmpop", Run::Plain(bpop::lmpop)),
    ("blmpop", Run::Plain(bpop::blmpop)),
    ("bzpopmin", Run::Plain(bpop::bzpopmin)),
    ("bzpopmax", Run::Plain(bpop::bzpopmax)),
    ("zmpop", Run::Plain(bpop::zmpop)),
    ("bzmpop", Run::Plain(bpop::bzmpop)),
    ("wait", Run::Plain(bpop::wait)),
    ("zadd", Run::Plain(zset::zadd)),
    ("zincrby", Run::Plain(zset::zincrby)),
    ("zrem", Run::Plain(zset::zrem)),
    ("zscore", Run::Plain(zset::zscore)),
    ("zcard", Run::Plain(zset::zcard)),
    ("zrange", Run::Plain(zset::zrange)),
    ("zrangebyscore", Run::Plain(zset::zrangebyscore)),
    ("zremrangebyscore", Run::Plain(zset::zremrangebyscore)),
    ("zremrangebyrank", Run::Plain(zset::zremrangebyrank)),
    ("zcount", Run::Plain(zset::zcount)),
    ("zrank", Run::Plain(zset::zrank)),
    ("zrevrank", Run::Plain(zset::zrevrank)),
    ("zrevrange", Run::Plain(zset::zrevrange)),
    ("zrevrangebyscore", Run::Plain(zset::zrevrangebyscore)),
    ("zpopmin", Run::Plain(zset::zpopmin)),
    ("zpopmax", Run::Plain(zset::zpopmax)),
    ("sadd", Run::Plain(set::sadd)),
    ("srem", Run::Plain(set::srem)),
    ("sismember", Run::Plain(set::sismember)),
    ("smismember", Run::Plain(set::smismember)),
    ("scard", Run::Plain(set::scard)),
    ("smembers", Run::Plain(set::smembers)),
    ("sinter", Run::Plain(set::sinter)),
    ("sunion", Run::Plain(set::sunion)),
    ("sdiff", Run::Plain(set::sdiff)),
    ("sinterstore", Run::Plain(set::sinterstore)),
    ("sunionstore", Run::Plain(set::sunionstore)),
    ("sdiffstore", Run::Plain(set::sdiffstore)),
    ("sintercard", Run::Plain(set::sintercard)),
    ("smove", Run::Plain(set::smove)),
    ("spop", Run::Plain(set::spop)),
    ("srandmember", Run::Plain(set::srandmember)),
    ("ping", Run::Plain(server_cmds::ping)),
    ("echo", Run::Plain(server_cmds::echo)),
    ("time", Run::Plain(server_cmds::time)),
    ("publish", Run::Plain(server_cmds::publish)),
    ("spublish", Run::Plain(server_cmds::spublish)),
    ("cluster", Run::Plain(server_cmds::cluster_disabled)),
    ("asking", Run::Plain(server_cmds::cluster_disabled)),
    ("readonly", Run::Plain(server_cmds::cluster_disabled)),
    ("readwrite", Run::Plain(server_cmds::cluster_disabled)),
    ("pubsub|channels", Run::Plain(server_cmds::pubsub)),
    ("pubsub|numpat", Run::Plain(server_cmds::pubsub)),
    ("pubsub|numsub", Run::Plain(server_cmds::pubsub)),
    ("pubsub|shardchannels", Run::Plain(server_cmds::pubsub)),
    ("pubsub|shardnumsub", Run::Plain(server_cmds::pubsub)),
    ("getrange", Run::Plain(strings::getrange)),
    ("substr", Run::Plain(strings::getrange)),
    ("setrange", Run::Plain(strings::setrange)),
    ("getex", Run::Plain(strings::getex)),
    ("setbit", Run::Plain(bitmap::setbit)),
    ("getbit", Run::Plain(bitmap::getbit)),
    ("bitcount", Run::Plain(bitmap::bitcount)),
    ("bitpos", Run::Plain(bitmap::bitpos)),
    ("bitfield", Run::Plain(bitmap::bitfield)),
    ("bitop", Run::Plain(bitmap::bitop)),
    ("bitfield_ro", Run::Plain(bitmap::bitfield_ro)),
    ("touch", Run::Plain(keys::touch)),
    ("rename", Run::Plain(keys::rename)),
    ("renamenx", Run::Plain(keys::renamenx)),
    ("copy", Run::Plain(keys::copy)),
    ("object|encoding", Run::Plain(keys::object_encoding)),
    ("hstrlen", Run::Plain(hash::hstrlen)),
    ("hrandfield", Run::Plain(hash::hrandfield)),
    ("debug", Run::Plain(server_cmds::debug)),
    ("pfadd", Run::Plain(hyperloglog::pfadd)),
    ("pfcount", Run::Plain(hyperloglog::pfcount)),
    ("pfmerge", Run::Plain(hyperloglog::pfmerge)),
    ("pfdebug", Run::Plain(hyperloglog::pfdebug)),
    ("pfselftest", Run::Plain(hyperloglog::pfselftest)),
    ("xadd", Run::Plain(stream::xadd)),
    ("xlen", Run::Plain(stream::xlen)),
    ("xrange", Run::Plain(stream::xrange)),
    ("xrevrange", Run::Plain(stream::xrevrange)),
    ("xdel", Run::Plain(stream::xdel)),
    ("xtrim", Run::Plain(stream::xtrim)),
    ("xinfo|stream", Run::Plain(stream_claim::xinfo)),
    ("xinfo|groups", Run::Plain(stream_claim::xinfo)),
    ("xinfo|consumers", Run::Plain(stream_claim::xinfo)),
    ("xread", Run::Plain(stream_group::xread)),
    ("xreadgroup", Run::Plain(stream_group::xreadgroup)),
    ("xgroup|create", Run::Plain(stream_group::xgroup)),
    ("xgroup|setid", Run::Plain(stream_group::xgroup)),
    ("xgroup|destroy", Run::Plain(stream_group::xgroup)),
    ("xgroup|createconsumer", Run::Plain(stream_group::xgroup)),
    ("xgroup|delconsumer", Run::Plain(stream_group::xgroup)),
    ("xack", Run::Plain(stream_group::xack)),
    ("xpending", Run::Plain(stream_group::xpending)),
    ("xclaim", Run::Plain(stream_claim::xclaim)),
    ("xautoclaim", Run::Plain(stream_claim::xautoclaim)),
    ("zrangebylex", Run::Plain(zset::zrangebylex)),
    ("zrevrangebylex", Run::Plain(zset::zrevrangebylex)),
    ("zlexcount", Run::Plain(zset::zlexcount)),
    ("zremrangebylex", Run::Plain(zset::zremrangebylex)),
    ("zunion", Run::Plain(zset::zunion)),
    ("zinter", Run::Plain(zset::zinter)),
    ("zdiff", Run::Plain(zset::zdiff)),
    ("zunionstore", Run::Plain(zset::zunionstore)),
    ("zinterstore", Run::Plain(zset::zinterstore)),
    ("zdiffstore", Run::Plain(zset::zdiffstore)),
    ("zintercard", Run::Plain(zset::zintercard)),
    ("linsert", Run::Plain(more::linsert)),
    ("lpos", Run::Plain(more::lpos)),
    ("zmscore", Run::Plain(more::zmscore)),
    ("hscan", Run::Plain(more::scan_value)),
    ("sscan", Run::Plain(more::scan_value)),
    ("zscan", Run::Plain(more::scan_value)),
    ("sort", Run::Plain(sort::sort)),
    ("sort_ro", Run::Plain(sort::sort_ro)),
    ("zrandmember", Run::Plain(zset::zrandmember)),
    ("geoadd", Run::Plain(geo::geoadd)),
    ("geopos", Run::Plain(geo::geopos)),
    ("geohash", Run::Plain(geo::geohash)),
    ("geodist", Run::Plain(geo::geodist)),
    ("command|count", Run::Plain(introspect::command)),
    ("command|list", Run::Plain(introspect::command)),
    ("command", Run::Plain(command_info::command)),
    ("command|info", Run::Plain(command_info::info)),
    ("command|docs", Run::Plain(command_info::command_docs)),
    ("info", Run::Plain(introspect::info)),
    ("lastsave", Run::Plain(introspect::lastsave)),
    ("lolwut", Run::Plain(introspect::lolwut)),
    ("memory|doctor", Run::Plain(introspect::memory)),
    ("memory|purge", Run::Plain(introspect::memory)),
    ("memory|usage", Run::Plain(introspect::memory)),
    ("object|freq", Run::Plain(introspect::object)),
    ("object|idletime", Run::Plain(introspect::object)),
    ("object|refcount", Run::Plain(introspect::object)),
    ("dump", Run::Plain(dump::dump)),
    ("restore", Run::Plain(dump::restore)),
    ("keys", Run::Plain(introspect::keys)),
    ("randomkey", Run::Plain(introspect::randomkey)),
    ("scan", Run::Plain(introspect::scan)),
    ("select", Run::Plain(introspect::select)),
    ("command|getkeys", Run::Plain(getkeys::getkeys)),
    (
        "command|getkeysandflags",
        Run::Plain(getkeys::getkeysandflags),
    ),
    ("slowlog|get", Run::Plain(introspect::slowlog)),
    ("slowlog|len", Run::Plain(introspect::slowlog)),
    ("slowlog|reset", Run::Plain(introspect::slowlog)),
    ("eval", Run::Scripting),
    ("evalsha", Run::Scripting),
    ("eval_ro", Run::Scripting),
    ("evalsha_ro", Run::Scripting),
    ("script|load", Run::Scripting),
    ("script|exists", Run::Scripting),
    ("script|flush", Run::Scripting),
    ("script|kill", Run::Scripting),
    ("function|load", Run::Scripting),
    ("function|delete", Run::Scripting),
    ("function|flush", Run::Scripting),
    ("function|kill", Run::Scripting),
    ("function|list", Run::Scripting),
    ("function|dump", Run::Scripting),
    ("function|restore", Run::Scripting),
    ("function|stats", Run::Scripting),
    ("fcall", Run::Scripting),
    ("fcall_ro", Run::Scripting),
];

/// What a command the harness does not carry out answers (after Redis's own checks).
fn not_emulated(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let mut name = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
    if let Some(spec) = lookup(&a[0]).filter(|s| s.container) {
        if let Some(sub) = a.get(1) {
            name = format!(
                "{}|{}",
                spec.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            );
        }
    }
    Reply::err(format!(
        "ERR harness: the Redis command '{name}' is not emulated"
    ))
}

struct Table {
    specs: Vec<Spec>,
    by_name: HashMap<&'static str, usize, fnv::FnvBuildHasher>,
}

fn parse_row(line: &'static str) -> Option<Spec> {
    let mut cols = line.split('\t');
    let name = cols.next()?;
    let arity: i32 = cols.next()?.parse().ok()?;
    let flags = cols.next()?;
    let _first_last_step = cols.next()?;
    let group = cols.next()?;
    let acl_categories = cols.next()?;
    let has = |f: &str| flags.split(',').any(|x| x == f);
    let command = name.split('|').next()?;
    let handler = HANDLERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r)
        .or_else(|| {
            (name.strip_suffix("|help") == Some(command) && introspect::has_help(command))
                .then_some(Run::Plain(introspect::help))
        })
        .or_else(|| {
            HANDLERS
                .iter()
                .find(|(n, _)| *n == command)
                .map(|(_, r)| *r)
        });
    Some(Spec {
        name,
        command,
        arity,
        write: has("write"),
        noscript: has("noscript"),
        deny_oom: has("denyoom"),
        group,
        acl_categories,
        container: false,
        emulated: handler.is_some(),
        run: handler.unwrap_or(Run::Plain(not_emulated)),
    })
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut specs: Vec<Spec> = TABLE_TSV
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(parse_row)
            .collect();
        let parents: Vec<&str> = specs
            .iter()
            .filter(|s| s.name != s.command)
            .map(|s| s.command)
            .collect();
        for s in &mut specs {
            s.container = parents.contains(&s.name);
        }
        let by_name = specs.iter().enumerate().map(|(i, s)| (s.name, i)).collect();
        Table { specs, by_name }
    })
}

/// One row of Redis 7.0.15's command table, as the harness knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandInfo {
    /// Lower-case name; `parent|sub` for a subcommand.
    pub name: &'static str,
    /// Redis's documentation group (`string`, `hash`, `server`...).
    pub group: &'static str,
    /// Redis's arity: `n` exactly `n` arguments with the name, `-n` at least `n`.
    pub arity: i32,
    /// Flagged `write`: refused in read-only scripts.
    pub write: bool,
    /// Flagged `noscript`: refused inside scripts.
    pub noscript: bool,
    /// Flagged `denyoom`: refused over `maxmemory`.
    pub deny_oom: bool,
    /// Whether the harness carries it out; every other one passes Redis's checks (arity,
    /// subcommand, noscript, read-only) and then answers `ERR harness: ... is not emulated`.
    pub emulated: bool,
}

/// Every command and subcommand of Redis 7.0.15 (`COMMAND LIST` with subcommands), sorted by
/// name, and whether the harness emulates it.
///
/// ```
/// let get = lockkit_harness::command_table().find(|c| c.name == "get").unwrap();
/// assert!(get.emulated && !get.write && get.arity == 2);
/// ```
pub fn command_table() -> impl Iterator<Item = CommandInfo> {
    table().specs.iter().map(|s| CommandInfo {
        name: s.name,
        group: s.group,
        arity: s.arity,
        write: s.write,
        noscript: s.noscript,
        deny_oom: s.deny_oom,
        emulated: s.emulated,
    })
}

fn get(lower: &str) -> Option<&'static Spec> {
    let t = table();
    t.by_name.get(lower).map(|&i| &t.specs[i])
}

/// The top-level command named `name` (any case).
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    get(std::str::from_utf8(&buf[..name.len()]).ok()?)
}

/// The command `argv` names: its subcommand's row for a container given one, as Redis's
/// `lookupCommand` finds it. `Err(true)`: a container with an unknown subcommand.
fn lookup_argv(argv: &[Vec<u8>]) -> Result<&'static Spec, bool> {
    let top = lookup(&argv[0]).ok_or(false)?;
    match argv.get(1) {
        Some(sub) if top.container => {
            let full = format!(
                "{}|{}",
                top.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            );
            get(&full).ok_or(true)
        }
        _ => Ok(top),
    }
}

/// The table name (`parent|sub`) of the command `argv` names, whatever its arity; `None` for
/// an unknown command or subcommand.
pub(crate) fn known_name(argv: &[Vec<u8>]) -> Option<&'static str> {
    if argv.is_empty() {
        return None;
    }
    lookup_argv(argv).ok().map(|s| s.name)
}

/// Whether `name` (lower case) is a Redis 7.0 command.
pub fn is_redis_command(name: &str) -> bool {
    get(name).is_some_and(|s| s.name == s.command)
}

/// Whether `argc` (counting the name) satisfies `arity`.
pub(crate) fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// Finds the command for `args` and checks its arity, with the error text Redis gives `caller`.
pub(crate) fn resolve(args: &[Vec<u8>], caller: Caller) -> Result<&'static Spec, Reply> {
    if args.is_empty() {
        return Err(Reply::err("ERR harness: empty command"));
    }
    let spec = match (lookup_argv(args), caller) {
        (Ok(spec), _) => spec,
        (Err(_), Caller::Script) => {
            return Err(Reply::err("ERR Unknown Redis command called from script"))
        }
        (Err(false), Caller::Client) => return Err(unknown_command(args)),
        (Err(true), Caller::Client) => {
            return Err(Reply::err(format!(
                "ERR unknown subcommand '{}'. Try {} HELP.",
                trunc128(&args[1]),
                String::from_utf8_lossy(&args[0]).to_ascii_uppercase()
            )))
        }
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

fn unknown_command(args: &[Vec<u8>]) -> Reply {
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

fn trunc128(b: &[u8]) -> String {
    let b = &b[..b.len().min(128)];
    String::from_utf8_lossy(b)
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect()
}

/// `ERR wrong number of arguments for 'name' command`.
pub(crate) fn wrong_arity(name: &str) -> Reply {
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
