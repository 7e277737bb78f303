//! Each request is classified once, into a [`ClientCommand`], from Redis 7.0's command table
//! ([`super::spec`]) and the request's own arguments as [`lockkit_resp`] read them; every later
//! decision (the login gate, the proxy's own answers, scrubbing secrets, shared or own upstream
//! connection, the operation timeout, plugins, counts) reads that one value and never the bytes
//! again.
//!
//! Arguments are compared as Redis compares them: a subcommand through the table (the whole
//! argument), an option with C's `strcasecmp` (up to its first NUL byte: Redis takes
//! `BLOCK\0x` for `BLOCK`). Where the two could differ the classification errs on the side of
//! a connection of the client's own.

use lockkit_resp::errors::{unknown_command, unknown_subcommand, wrong_number_of_arguments};
use lockkit_resp::number::string2ll;
use lockkit_resp::Request;

use super::spec::{self, flag, CommandSpec, RowLookup};

/// Why redis-server refuses a command before it looks at the login (`processCommand` checks
/// that the command exists, then its arity, then the login).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No command by that name (an empty name included).
    UnknownCommand,
    /// A container (`CONFIG`, `CLIENT`, ...) with a subcommand Redis does not know.
    UnknownSubcommand,
    /// The wrong number of arguments for the command's arity.
    WrongArity,
}

/// `CLIENT REPLY`'s modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyMode {
    /// Replies again (its own `+OK` included).
    On,
    /// No reply to anything until `ON`.
    Off,
    /// No reply to the next command.
    Skip,
}

/// The commands the proxy answers, rewrites or follows itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// Forwarded as it is.
    None,
    /// `AUTH`.
    Auth,
    /// `HELLO`.
    Hello,
    /// `QUIT`: answered by the proxy, which then closes the connection.
    Quit,
    /// `RESET`.
    Reset,
    /// `CLIENT REPLY ON|OFF|SKIP` (`None`: another mode, a syntax error).
    ClientReply(Option<ReplyMode>),
    /// `CLIENT SETNAME`, `CLIENT GETNAME`, and the subcommands newer than Redis 7.0 that client
    /// libraries send as they connect (`CLIENT SETINFO`, `CLIENT MAINT_NOTIFICATIONS`):
    /// carried out by the proxy while the client shares.
    ClientSetup,
    /// `SELECT`.
    Select,
    /// `MULTI`.
    Multi,
    /// `EXEC`.
    Exec,
    /// `DISCARD`.
    Discard,
    /// `CONFIG GET`: its reply may hold secrets.
    ConfigGet,
    /// `POST` or `Host:` as a command: an HTTP request sent to Redis, which closes the
    /// connection without a reply (a cross-protocol attack).
    Http,
}

/// One request, classified: what Redis's table and the request's arguments say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientCommand {
    /// The table's row that runs it (its subcommand's for a container); `None` for a command
    /// Redis 7.0 does not know.
    pub(crate) spec: Option<&'static CommandSpec>,
    /// What Redis would refuse it for before it looks at the login.
    pub(crate) refusal: Option<Refusal>,
    /// What the proxy does with it itself.
    pub(crate) special: Special,
    /// Only after login (Redis's commands without `no_auth`).
    pub(crate) needs_login: bool,
    /// Means the same on any connection: may go on a shared upstream connection.
    pub(crate) shareable: bool,
    /// May keep its connection quiet for longer than the operation timeout (BLPOP, WAIT,
    /// XREAD with BLOCK, ...).
    pub(crate) blocking: bool,
    /// After it, the connection's replies no longer pair one-to-one with its commands:
    /// pub/sub, MONITOR, replication (SYNC, PSYNC, REPLCONF, which Redis does not always
    /// answer), the Lua debugger.
    pub(crate) unpairs: bool,
    /// One of Redis's `admin` commands.
    pub(crate) admin: bool,
    /// Its reply may hold a secret (`CONFIG GET`).
    pub(crate) secrets: bool,
    /// Where its first key is among the arguments (0 is the name).
    pub(crate) first_key: Option<usize>,
    /// Known to run long on the server ([`SLOW`]): on a shared connection it has the longer
    /// allowance ([`crate::ProxyOptions::slow_timeout`]).
    pub(crate) slow: bool,
}

/// Commands that may run long on the server by design: scripts, functions, whole-keyspace
/// walks and flushes.
const SLOW: [&str; 10] = [
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "FCALL",
    "FCALL_RO",
    "KEYS",
    "FLUSHALL",
    "FLUSHDB",
    "SCRIPT|LOAD",
];

/// C's `strcasecmp(arg, word) == 0`: `arg` read up to its first NUL, as Redis reads options.
pub(crate) fn c_eq(arg: &[u8], word: &[u8]) -> bool {
    let arg = match arg.iter().position(|&b| b == 0) {
        Some(nul) => &arg[..nul],
        None => arg,
    };
    arg.eq_ignore_ascii_case(word)
}

/// Groups whose commands mean the same on any connection: the data types and the keyspace.
const DATA_GROUPS: [&str; 10] = [
    "string",
    "list",
    "set",
    "sorted-set",
    "hash",
    "hyperloglog",
    "geo",
    "bitmap",
    "stream",
    "generic",
];

/// Commands of the data groups that do not: `WAIT` waits for replicas, holding up every
/// reply after it on its connection.
const DATA_NOT_SHARED: [&str; 1] = ["WAIT"];

/// Commands of other groups that mean the same on any connection: scripts and functions (a
/// script's `SELECT` stays inside the script), server-wide queries. Not `SCRIPT KILL` or
/// `FUNCTION KILL` (on a shared connection they would wait behind the very script they should
/// stop), not `SCRIPT DEBUG`. A container alone (`SCRIPT`) gets Redis's arity error.
const OTHERS_SHARED: &[&str] = &[
    "PING",
    "ECHO",
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "FCALL",
    "FCALL_RO",
    "SCRIPT",
    "SCRIPT|EXISTS",
    "SCRIPT|FLUSH",
    "SCRIPT|HELP",
    "SCRIPT|LOAD",
    "FUNCTION",
    "FUNCTION|DELETE",
    "FUNCTION|DUMP",
    "FUNCTION|FLUSH",
    "FUNCTION|HELP",
    "FUNCTION|LIST",
    "FUNCTION|LOAD",
    "FUNCTION|RESTORE",
    "FUNCTION|STATS",
    "COMMAND",
    "COMMAND|COUNT",
    "COMMAND|DOCS",
    "COMMAND|GETKEYS",
    "COMMAND|GETKEYSANDFLAGS",
    "COMMAND|HELP",
    "COMMAND|INFO",
    "COMMAND|LIST",
    "MEMORY",
    "MEMORY|DOCTOR",
    "MEMORY|HELP",
    "MEMORY|MALLOC-STATS",
    "MEMORY|STATS",
    "MEMORY|USAGE",
    "CONFIG",
    "CONFIG|GET",
    "CONFIG|HELP",
    "PUBSUB",
    "PUBSUB|CHANNELS",
    "PUBSUB|HELP",
    "PUBSUB|NUMPAT",
    "PUBSUB|NUMSUB",
    "PUBSUB|SHARDCHANNELS",
    "PUBSUB|SHARDNUMSUB",
    "PUBLISH",
    "SPUBLISH",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "INFO",
    "LASTSAVE",
    "LOLWUT",
    "ROLE",
    "SWAPDB",
    "TIME",
];

/// After these the connection's replies no longer pair with its commands (`UNSUBSCRIBE a b`
/// gets one reply per channel, subscribed or not; `SYNC` and `PSYNC` turn the connection into
/// the replication stream; `REPLCONF ACK` and `GETACK` get no reply at all).
const UNPAIRING: [&str; 10] = [
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SUNSUBSCRIBE",
    "MONITOR",
    "SYNC",
    "PSYNC",
    "REPLCONF",
];

/// Scripts and functions: their key count is the argument after the script.
const SCRIPT_CALLS: [&str; 6] = [
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "FCALL",
    "FCALL_RO",
];

/// Whether `row` means the same on any connection (before its arguments are looked at).
fn shareable_row(row: &CommandSpec) -> bool {
    if row.has(flag::BLOCKING | flag::PUBSUB | flag::NO_MULTI | flag::NO_AUTH) {
        // XREAD and XREADGROUP without BLOCK are decided by their arguments; PUBLISH and
        // SPUBLISH are named below.
        return matches!(row.name, "XREAD" | "XREADGROUP" | "PUBLISH" | "SPUBLISH");
    }
    if DATA_GROUPS.contains(&row.group) {
        return !DATA_NOT_SHARED.contains(&row.name);
    }
    OTHERS_SHARED.contains(&row.name)
}

impl ClientCommand {
    /// Classifies the request `req` read from `buf`.
    pub(crate) fn classify(req: &Request, buf: &[u8]) -> ClientCommand {
        let argc = req.argc();
        let arg = |i: usize| req.arg(buf, i).unwrap_or_default();
        let name = arg(0);
        let sub = (argc > 1).then(|| arg(1));
        let mut cmd = ClientCommand {
            spec: None,
            refusal: Some(Refusal::UnknownCommand),
            special: Special::None,
            needs_login: true,
            shareable: false,
            blocking: false,
            unpairs: false,
            admin: false,
            secrets: false,
            first_key: None,
            slow: false,
        };
        if c_eq(name, b"post") || c_eq(name, b"host:") {
            cmd.special = Special::Http;
            cmd.refusal = None;
            return cmd;
        }
        let row = match spec::lookup(name, sub) {
            RowLookup::Found(row) => row,
            RowLookup::NoSubcommand => {
                cmd.refusal = Some(Refusal::UnknownSubcommand);
                let setup = [&b"SETINFO"[..], b"MAINT_NOTIFICATIONS"];
                let sub = sub.unwrap_or_default();
                if name.eq_ignore_ascii_case(b"client")
                    && setup.iter().any(|s| sub.eq_ignore_ascii_case(s))
                {
                    cmd.special = Special::ClientSetup;
                }
                return cmd;
            }
            RowLookup::Unknown => return cmd,
        };
        cmd.spec = Some(row);
        cmd.refusal = (!row.takes(argc)).then_some(Refusal::WrongArity);
        cmd.needs_login = !row.has(flag::NO_AUTH);
        cmd.admin = row.has(flag::ADMIN);
        cmd.shareable = shareable_row(row);
        cmd.blocking = row.has(flag::BLOCKING) || row.name == "WAIT";
        if matches!(row.name, "XREAD" | "XREADGROUP") {
            // Redis reads `BLOCK` among the options; any argument that reads as it is taken
            // for it (a key named `block` only costs its client the sharing).
            cmd.blocking = (1..argc).any(|i| c_eq(arg(i), b"BLOCK"));
            cmd.shareable = !cmd.blocking;
        }
        cmd.slow = SLOW.contains(&row.name);
        cmd.unpairs = UNPAIRING.contains(&row.name)
            || (row.name == "SCRIPT|DEBUG" && !(argc == 3 && c_eq(arg(2), b"no")));
        cmd.special = special_of(row, argc, arg(2));
        cmd.secrets = cmd.special == Special::ConfigGet;
        cmd.first_key = if row.has(flag::PUBSUB) {
            // A shard channel is a key to the cluster, not to a reader of key traffic.
            None
        } else if SCRIPT_CALLS.contains(&row.name) {
            string2ll(arg(2)).filter(|&n| n >= 1 && argc > 3).map(|_| 3)
        } else {
            usize::try_from(row.first_key)
                .ok()
                .filter(|&k| k > 0 && k < argc)
        };
        cmd
    }

    /// The command's name as counted and shown to plugins (upper case, `CONFIG` for
    /// `CONFIG GET`); `None` for a command Redis does not know (its name is its first
    /// argument).
    pub(crate) fn name(&self) -> Option<&'static str> {
        self.spec.map(CommandSpec::command)
    }

    /// Redis's reply to the request when it refuses it before looking at the login.
    pub(crate) fn refusal_reply(&self, req: &Request, buf: &[u8]) -> Option<Vec<u8>> {
        let arg = |i: usize| req.arg(buf, i).unwrap_or_default();
        Some(match self.refusal? {
            Refusal::UnknownCommand => {
                let args: Vec<&[u8]> = req.args(buf).collect();
                unknown_command(&args)
            }
            Refusal::UnknownSubcommand => unknown_subcommand(arg(0), arg(1)),
            Refusal::WrongArity => {
                let full = self
                    .spec
                    .map_or_else(String::new, |s| s.name.to_ascii_lowercase());
                wrong_number_of_arguments(&full)
            }
        })
    }
}

fn special_of(row: &CommandSpec, argc: usize, arg2: &[u8]) -> Special {
    match row.name {
        "AUTH" => Special::Auth,
        "HELLO" => Special::Hello,
        "QUIT" => Special::Quit,
        "RESET" => Special::Reset,
        "SELECT" => Special::Select,
        "MULTI" => Special::Multi,
        "EXEC" => Special::Exec,
        "DISCARD" => Special::Discard,
        "CONFIG|GET" => Special::ConfigGet,
        "CLIENT|SETNAME" | "CLIENT|GETNAME" => Special::ClientSetup,
        "CLIENT|REPLY" if argc == 3 => Special::ClientReply(if c_eq(arg2, b"on") {
            Some(ReplyMode::On)
        } else if c_eq(arg2, b"off") {
            Some(ReplyMode::Off)
        } else if c_eq(arg2, b"skip") {
            Some(ReplyMode::Skip)
        } else {
            None
        }),
        _ => Special::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_resp::RequestParser;

    fn classify(wire: &[u8]) -> ClientCommand {
        let r = RequestParser::default().parse(wire, true).unwrap().unwrap();
        ClientCommand::classify(&r, wire)
    }

    fn of(args: &[&str]) -> ClientCommand {
        let mut wire = Vec::new();
        lockkit_resp::write_multibulk(&mut wire, args.iter().map(|a| a.as_bytes()));
        classify(&wire)
    }

    #[test]
    fn every_shared_command_exists_and_none_blocks_subscribes_or_logs_in() {
        for name in OTHERS_SHARED.iter().chain(&DATA_NOT_SHARED) {
            assert!(
                spec::all().iter().any(|r| r.name == *name),
                "{name} is not a Redis 7.0 command"
            );
        }
        for row in spec::all().iter().filter(|r| shareable_row(r)) {
            let ok = !row.has(flag::BLOCKING | flag::NO_AUTH | flag::NO_MULTI | flag::ASKING)
                || matches!(row.name, "XREAD" | "XREADGROUP");
            assert!(ok, "{} is shared with flags {:#x}", row.name, row.flags);
            assert!(
                !UNPAIRING.contains(&row.name) && !matches!(row.group, "transactions" | "cluster"),
                "{} is shared",
                row.name
            );
            let connection = row.group == "connection";
            assert!(
                !connection || matches!(row.name, "PING" | "ECHO"),
                "{}",
                row.name
            );
        }
    }

    #[test]
    fn state_blocking_and_unknown_commands_are_not_shared() {
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
            &["CLIENT", "ID"],
            &["WAIT", "1", "0"],
            &["READONLY"],
            &["SCRIPT", "DEBUG", "YES"],
            &["SCRIPT", "KILL"],
            &["function", "kill"],
            &["CONFIG", "SET", "x", "y"],
            &["QUIT"],
            &["RESET"],
            &["REPLCONF", "GETACK", "*"],
            &["MODULE.COMMAND", "x"],
            &["CONFIG", "NOSUCH"],
        ] {
            assert!(!of(args).shareable, "{args:?}");
        }
        assert!(classify(b"*6\r\n$5\r\nXREAD\r\n$7\r\nBLOCK\0x\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n$\r\n").blocking);
    }

    #[test]
    fn data_script_and_query_commands_are_shared() {
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
            &["OBJECT", "ENCODING", "k"],
            &["CONFIG", "GET", "*"],
        ] {
            assert!(of(args).shareable, "{args:?}");
        }
        // Inline and non-canonical requests are classified from the same reading.
        assert!(classify(b"get k\r\n").shareable);
        assert!(classify(b"*2\r\n$3\rXGET\r\n$1\r\nk\r\n").shareable);
    }

    #[test]
    fn refusals_come_with_redis_texts() {
        let reply = |wire: &[u8]| {
            let r = RequestParser::default().parse(wire, true).unwrap().unwrap();
            ClientCommand::classify(&r, wire).refusal_reply(&r, wire)
        };
        assert_eq!(
            reply(b"*1\r\n$0\r\n\r\n").unwrap(),
            b"-ERR unknown command '', with args beginning with: \r\n"
        );
        assert_eq!(
            reply(b"config nosuch\r\n").unwrap(),
            b"-ERR unknown subcommand 'nosuch'. Try CONFIG HELP.\r\n"
        );
        assert_eq!(
            reply(b"config get\r\n").unwrap(),
            b"-ERR wrong number of arguments for 'config|get' command\r\n"
        );
        assert_eq!(reply(b"get k\r\n"), None);
    }

    #[test]
    fn specials_flags_and_keys_are_read_once() {
        assert_eq!(of(&["auth", "pw"]).special, Special::Auth);
        assert!(!of(&["auth", "pw"]).needs_login && of(&["get", "k"]).needs_login);
        assert_eq!(
            of(&["CLIENT", "REPLY", "skip"]).special,
            Special::ClientReply(Some(ReplyMode::Skip))
        );
        assert_eq!(
            of(&["CLIENT", "REPLY", "x"]).special,
            Special::ClientReply(None)
        );
        assert_eq!(
            of(&["CLIENT", "SETINFO", "LIB-NAME", "x"]).special,
            Special::ClientSetup
        );
        assert_eq!(of(&["POST", "/"]).special, Special::Http);
        assert_eq!(of(&["Host:", "x"]).special, Special::Http);
        assert!(of(&["config", "get", "x"]).secrets);
        assert!(of(&["SCRIPT", "DEBUG", "sync"]).unpairs);
        assert!(!of(&["SCRIPT", "DEBUG", "no"]).unpairs);
        assert!(of(&["REPLCONF", "ACK", "1"]).unpairs);
        assert!(of(&["BLPOP", "q", "0"]).blocking && of(&["WAIT", "1", "0"]).blocking);
        assert!(of(&["CONFIG", "SET", "a", "b"]).admin && !of(&["GET", "k"]).admin);
        assert_eq!(of(&["GET", "k"]).first_key, Some(1));
        assert_eq!(of(&["OBJECT", "ENCODING", "k"]).first_key, Some(2));
        assert_eq!(of(&["EVAL", "s", "1", "k", "a"]).first_key, Some(3));
        assert_eq!(of(&["EVAL", "s", "0", "a"]).first_key, None);
        assert_eq!(of(&["PING"]).first_key, None);
        assert_eq!(of(&["GET", "k"]).name(), Some("GET"));
        assert_eq!(of(&["config", "get", "x"]).name(), Some("CONFIG"));
        assert_eq!(of(&["nosuch"]).name(), None);
    }
}
