//! Which commands may travel on a shared upstream connection: those whose meaning does not
//! depend on the connection they arrive on. It is an allowlist: a command not named here
//! (connection state, transactions, blocking, pub/sub, `CLIENT`, module commands, commands of
//! a newer Redis) moves its client to a connection of its own.

use std::sync::OnceLock;

use fnv::FnvHashMap;

use crate::resp;

/// How a command's arguments decide.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Stateless whatever its arguments.
    Always,
    /// A container: stateless with one of these subcommands (or none: Redis answers an error).
    Sub(&'static [&'static str]),
    /// `XREAD`, `XREADGROUP`: stateless unless they block.
    UnlessBlock,
}

/// Top-level commands of Redis 7.0 that are stateless whatever their arguments: the data types
/// (all but the blocking ones), keys, scripts and functions (a script's `SELECT` stays inside
/// the script), and a few server queries.
pub(crate) const ALWAYS: &[&str] = &[
    // strings
    "APPEND",
    "DECR",
    "DECRBY",
    "GET",
    "GETDEL",
    "GETEX",
    "GETRANGE",
    "GETSET",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "LCS",
    "MGET",
    "MSET",
    "MSETNX",
    "PSETEX",
    "SET",
    "SETEX",
    "SETNX",
    "SETRANGE",
    "STRLEN",
    "SUBSTR",
    // lists
    "LINDEX",
    "LINSERT",
    "LLEN",
    "LMOVE",
    "LMPOP",
    "LPOP",
    "LPOS",
    "LPUSH",
    "LPUSHX",
    "LRANGE",
    "LREM",
    "LSET",
    "LTRIM",
    "RPOP",
    "RPOPLPUSH",
    "RPUSH",
    "RPUSHX",
    // sets
    "SADD",
    "SCARD",
    "SDIFF",
    "SDIFFSTORE",
    "SINTER",
    "SINTERCARD",
    "SINTERSTORE",
    "SISMEMBER",
    "SMEMBERS",
    "SMISMEMBER",
    "SMOVE",
    "SPOP",
    "SRANDMEMBER",
    "SREM",
    "SSCAN",
    "SUNION",
    "SUNIONSTORE",
    // sorted sets
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZDIFF",
    "ZDIFFSTORE",
    "ZINCRBY",
    "ZINTER",
    "ZINTERCARD",
    "ZINTERSTORE",
    "ZLEXCOUNT",
    "ZMPOP",
    "ZMSCORE",
    "ZPOPMAX",
    "ZPOPMIN",
    "ZRANDMEMBER",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZRANGESTORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYLEX",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZREVRANGEBYLEX",
    "ZREVRANGEBYSCORE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    "ZUNION",
    "ZUNIONSTORE",
    // hashes
    "HDEL",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HMSET",
    "HRANDFIELD",
    "HSCAN",
    "HSET",
    "HSETNX",
    "HSTRLEN",
    "HVALS",
    // hyperloglog, bitmaps, geo
    "PFADD",
    "PFCOUNT",
    "PFDEBUG",
    "PFMERGE",
    "PFSELFTEST",
    "BITCOUNT",
    "BITFIELD",
    "BITFIELD_RO",
    "BITOP",
    "BITPOS",
    "GETBIT",
    "SETBIT",
    "GEOADD",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEORADIUS",
    "GEORADIUSBYMEMBER",
    "GEORADIUSBYMEMBER_RO",
    "GEORADIUS_RO",
    "GEOSEARCH",
    "GEOSEARCHSTORE",
    // streams (XREAD and XREADGROUP below)
    "XACK",
    "XADD",
    "XAUTOCLAIM",
    "XCLAIM",
    "XDEL",
    "XLEN",
    "XPENDING",
    "XRANGE",
    "XREVRANGE",
    "XSETID",
    "XTRIM",
    // keys
    "COPY",
    "DEL",
    "DUMP",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "EXPIRETIME",
    "KEYS",
    "MIGRATE",
    "MOVE",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PEXPIRETIME",
    "PTTL",
    "RANDOMKEY",
    "RENAME",
    "RENAMENX",
    "RESTORE",
    "SCAN",
    "SORT",
    "SORT_RO",
    "TOUCH",
    "TTL",
    "TYPE",
    "UNLINK",
    // scripts and functions
    "EVAL",
    "EVALSHA",
    "EVALSHA_RO",
    "EVAL_RO",
    "FCALL",
    "FCALL_RO",
    // server-wide, not per connection
    "DBSIZE",
    "ECHO",
    "FLUSHALL",
    "FLUSHDB",
    "INFO",
    "LASTSAVE",
    "LOLWUT",
    "PING",
    "PUBLISH",
    "ROLE",
    "SPUBLISH",
    "SWAPDB",
    "TIME",
];

/// Containers and the subcommands of theirs that are stateless (`SCRIPT DEBUG` is not).
const CONTAINERS: &[(&str, &[&str])] = &[
    // Not `KILL`: on a shared connection it would wait behind the very script it should stop.
    ("SCRIPT", &["EXISTS", "FLUSH", "HELP", "LOAD"]),
    (
        "FUNCTION",
        &[
            "DELETE", "DUMP", "FLUSH", "HELP", "LIST", "LOAD", "RESTORE", "STATS",
        ],
    ),
    (
        "COMMAND",
        &[
            "COUNT",
            "DOCS",
            "GETKEYS",
            "GETKEYSANDFLAGS",
            "HELP",
            "INFO",
            "LIST",
        ],
    ),
    (
        "OBJECT",
        &["ENCODING", "FREQ", "HELP", "IDLETIME", "REFCOUNT"],
    ),
    (
        "MEMORY",
        &["DOCTOR", "HELP", "MALLOC-STATS", "STATS", "USAGE"],
    ),
    (
        "PUBSUB",
        &[
            "CHANNELS",
            "HELP",
            "NUMPAT",
            "NUMSUB",
            "SHARDCHANNELS",
            "SHARDNUMSUB",
        ],
    ),
    ("CONFIG", &["GET", "HELP"]),
    (
        "XGROUP",
        &[
            "CREATE",
            "CREATECONSUMER",
            "DELCONSUMER",
            "DESTROY",
            "HELP",
            "SETID",
        ],
    ),
    ("XINFO", &["CONSUMERS", "GROUPS", "HELP", "STREAM"]),
];

/// Commands longer than this are in no list.
const LONGEST: usize = 32;

/// Largest command sent on a shared connection: Redis closes a connection whose bulk string
/// passes its `proto-max-bulk-len` (512 MB by default), and a shared one would take others'
/// replies with it.
const MAX_SHARED_FRAME: usize = 512 << 20;

fn rules() -> &'static FnvHashMap<&'static [u8], Rule> {
    static RULES: OnceLock<FnvHashMap<&'static [u8], Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let mut m: FnvHashMap<&'static [u8], Rule> = ALWAYS
            .iter()
            .map(|n| (n.as_bytes(), Rule::Always))
            .collect();
        for (name, subs) in CONTAINERS {
            m.insert(name.as_bytes(), Rule::Sub(subs));
        }
        m.insert(b"XREAD", Rule::UnlessBlock);
        m.insert(b"XREADGROUP", Rule::UnlessBlock);
        m
    })
}

/// Whether command `name` (upper case) in `frame` (a RESP array, not inline) may be sent on a
/// shared upstream connection.
///
/// Inline commands never are: Redis closes the connection on some malformed ones (unbalanced
/// quotes), and a shared connection carries other clients' replies.
pub(crate) fn is_stateless(name: &[u8], frame: &[u8], inline: bool) -> bool {
    if inline || name.len() > LONGEST || frame.len() > MAX_SHARED_FRAME {
        return false;
    }
    match rules().get(name) {
        None => false,
        Some(Rule::Always) => true,
        Some(Rule::Sub(subs)) => match resp::command_args(frame, false).get(1) {
            None => true,
            Some(sub) => subs.iter().any(|s| s.as_bytes().eq_ignore_ascii_case(sub)),
        },
        Some(Rule::UnlessBlock) => !resp::command_args(frame, false)
            .iter()
            .skip(1)
            .any(|a| a.eq_ignore_ascii_case(b"BLOCK")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis 7.0.15's command table, as the harness keeps it: name, arity, flags, keys, group.
    const TABLE: &str = include_str!("../../harness/data/commands-7.0.15.tsv");

    /// (name upper case, flags, group) of every row.
    fn rows() -> Vec<(String, Vec<&'static str>, &'static str)> {
        TABLE
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let cols: Vec<&str> = l.split('\t').collect();
                (
                    cols[0].to_ascii_uppercase(),
                    cols[2].split(',').collect(),
                    cols[4],
                )
            })
            .collect()
    }

    fn cmd(args: &[&str]) -> Vec<u8> {
        let items: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = Vec::new();
        resp::encode_command(&mut out, &items);
        out
    }

    fn stateless(args: &[&str]) -> bool {
        is_stateless(args[0].to_ascii_uppercase().as_bytes(), &cmd(args), false)
    }

    #[test]
    fn every_listed_command_exists_and_none_blocks_subscribes_or_logs_in() {
        let rows = rows();
        let mut listed: Vec<String> = ALWAYS.iter().map(|n| n.to_string()).collect();
        for (name, subs) in CONTAINERS {
            listed.extend(subs.iter().map(|s| format!("{name}|{s}")));
        }
        for name in listed {
            let row = rows
                .iter()
                .find(|r| r.0 == name)
                .unwrap_or_else(|| panic!("{name} is not a Redis 7.0 command"));
            for bad in ["blocking", "no_auth", "no_multi", "asking"] {
                assert!(!row.1.contains(&bad), "{name} is {bad}");
            }
            assert!(
                !matches!(row.2, "connection" | "transactions" | "cluster")
                    || name == "PING"
                    || name == "ECHO",
                "{name} is in group {}",
                row.2
            );
        }
    }

    #[test]
    fn every_data_command_that_does_not_block_is_listed() {
        // A stateless command left out only costs speed (its client gets a connection of its
        // own); this keeps the list from missing whole families by accident.
        for (name, flags, group) in rows() {
            let data = matches!(
                group,
                "string"
                    | "list"
                    | "set"
                    | "sorted-set"
                    | "hash"
                    | "hyperloglog"
                    | "geo"
                    | "bitmap"
                    | "stream"
            );
            if !data || flags.contains(&"blocking") {
                continue;
            }
            let listed = match name.split_once('|') {
                Some((parent, sub)) => CONTAINERS
                    .iter()
                    .any(|(c, subs)| *c == parent && subs.contains(&sub)),
                None => {
                    ALWAYS.contains(&name.as_str())
                        || CONTAINERS.iter().any(|(c, _)| *c == name)
                        || ["XREAD", "XREADGROUP"].contains(&name.as_str())
                }
            };
            assert!(listed, "{name} ({group}) is missing");
        }
    }

    #[test]
    fn state_blocking_and_unknown_commands_are_not_stateless() {
        for args in [
            &["MULTI"][..],
            &["EXEC"],
            &["WATCH", "k"],
            &["BLPOP", "q", "0"],
            &["BZPOPMIN", "z", "0"],
            &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
            &[
                "xreadgroup",
                "GROUP",
                "g",
                "c",
                "block",
                "10",
                "STREAMS",
                "s",
                ">",
            ],
            &["SUBSCRIBE", "ch"],
            &["MONITOR"],
            &["AUTH", "pw"],
            &["SELECT", "1"],
            &["HELLO", "3"],
            &["CLIENT", "SETNAME", "x"],
            &["CLIENT", "ID"],
            &["WAIT", "1", "0"],
            &["READONLY"],
            &["SCRIPT", "DEBUG", "YES"],
            &["SCRIPT", "KILL"],
            &["function", "kill"],
            &["CONFIG", "SET", "x", "y"],
            &["QUIT"],
            &["RESET"],
            &["MODULE.COMMAND", "x"],
            &["WAITAOF", "0", "0", "0"],
        ] {
            assert!(!stateless(args), "{args:?}");
        }
        assert!(!is_stateless(b"PING", b"PING\r\n", true), "inline");
    }

    #[test]
    fn data_script_and_query_commands_are_stateless() {
        for args in [
            &["GET", "k"][..],
            &["SET", "k", "v", "NX", "PX", "100"],
            &["EVALSHA", "abc", "0"],
            &["script", "load", "return 1"],
            &["SCRIPT"],
            &["XREAD", "COUNT", "1", "STREAMS", "s", "0"],
            &["PING"],
            &["PUBLISH", "ch", "m"],
            &["FUNCTION", "LIST"],
        ] {
            assert!(stateless(args), "{args:?}");
        }
    }
}
