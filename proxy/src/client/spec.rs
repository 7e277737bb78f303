//! One row of Redis 7.0.15's command table ([`super::table`], generated from a real server),
//! and finding a request's row the way redis-server finds it (`lookupCommandLogic`): by name,
//! ignoring case; a container's row by its subcommand once there is one.

use std::sync::OnceLock;

use fnv::FnvHashMap;

use super::table::COMMANDS;

/// Redis's command flags, one bit each (`COMMAND INFO` names them in lower case): every flag
/// the table may name has one, whether the proxy decides on it or not.
#[allow(missing_docs, dead_code)]
pub(crate) mod flag {
    pub(crate) const WRITE: u32 = 1;
    pub(crate) const READONLY: u32 = 1 << 1;
    pub(crate) const DENYOOM: u32 = 1 << 2;
    pub(crate) const MODULE: u32 = 1 << 3;
    pub(crate) const ADMIN: u32 = 1 << 4;
    pub(crate) const PUBSUB: u32 = 1 << 5;
    pub(crate) const NOSCRIPT: u32 = 1 << 6;
    pub(crate) const BLOCKING: u32 = 1 << 7;
    pub(crate) const LOADING: u32 = 1 << 8;
    pub(crate) const STALE: u32 = 1 << 9;
    pub(crate) const SKIP_MONITOR: u32 = 1 << 10;
    pub(crate) const SKIP_SLOWLOG: u32 = 1 << 11;
    pub(crate) const ASKING: u32 = 1 << 12;
    pub(crate) const FAST: u32 = 1 << 13;
    pub(crate) const NO_AUTH: u32 = 1 << 14;
    pub(crate) const MAY_REPLICATE: u32 = 1 << 15;
    pub(crate) const NO_MANDATORY_KEYS: u32 = 1 << 16;
    pub(crate) const NO_ASYNC_LOADING: u32 = 1 << 17;
    pub(crate) const NO_MULTI: u32 = 1 << 18;
    pub(crate) const MOVABLEKEYS: u32 = 1 << 19;
    pub(crate) const ALLOW_BUSY: u32 = 1 << 20;
}

/// One command or subcommand of Redis's table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CommandSpec {
    /// Upper case; `PARENT|SUB` for a subcommand.
    pub(crate) name: &'static str,
    /// `n`: exactly `n` arguments, the name included; `-n`: at least `n`.
    pub(crate) arity: i32,
    /// [`flag`] bits.
    pub(crate) flags: u32,
    /// The first key's position (0: no key at a fixed position).
    pub(crate) first_key: i32,
    /// The last key's position (negative: counted from the end, `-1` the last argument).
    pub(crate) last_key: i32,
    /// The step between keys.
    pub(crate) key_step: i32,
    /// Redis's documentation group (`string`, `generic`, `server`, ...).
    pub(crate) group: &'static str,
}

impl CommandSpec {
    /// A row as the generated table writes it; `keys` is Redis's (first, last, step).
    pub(crate) const fn new(
        name: &'static str,
        arity: i32,
        flags: u32,
        keys: (i32, i32, i32),
        group: &'static str,
    ) -> CommandSpec {
        CommandSpec {
            name,
            arity,
            flags,
            first_key: keys.0,
            last_key: keys.1,
            key_step: keys.2,
            group,
        }
    }

    /// Whether it has flag `f`.
    pub(crate) fn has(&self, f: u32) -> bool {
        self.flags & f != 0
    }

    /// The command's own name: `CONFIG` for `CONFIG|GET`.
    pub(crate) fn command(&self) -> &'static str {
        self.name.split('|').next().unwrap_or(self.name)
    }

    /// Whether `argc` arguments (the name included) fit its arity.
    pub(crate) fn takes(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }
}

/// The longest name looked up: longer ones are in no table (Redis's longest is 20 bytes).
const LONGEST: usize = 40;

struct Index {
    /// Upper-case name → row.
    rows: FnvHashMap<&'static [u8], &'static CommandSpec>,
    /// Upper-case names of the commands that have subcommands.
    containers: FnvHashMap<&'static [u8], ()>,
}

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let rows = COMMANDS.iter().map(|c| (c.name.as_bytes(), c)).collect();
        let containers = COMMANDS
            .iter()
            .filter_map(|c| c.name.split_once('|'))
            .map(|(parent, _)| (parent.as_bytes(), ()))
            .collect();
        Index { rows, containers }
    })
}

/// `name` upper case in `out`, or `None` when it is too long to be in the table.
fn upper<'a>(name: &[u8], out: &'a mut [u8; LONGEST]) -> Option<&'a [u8]> {
    let dst = out.get_mut(..name.len())?;
    dst.copy_from_slice(name);
    dst.make_ascii_uppercase();
    Some(dst)
}

/// What Redis's table says of a request's name and first argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowLookup {
    /// The row that runs it: the command's, or its subcommand's.
    Found(&'static CommandSpec),
    /// A container whose subcommand Redis does not know.
    NoSubcommand,
    /// No command by that name.
    Unknown,
}

/// The row of a request whose name is `name` and whose first argument is `sub` (when it has
/// one), as `lookupCommandLogic` finds it.
pub(crate) fn lookup(name: &[u8], sub: Option<&[u8]>) -> RowLookup {
    let index = index();
    let mut buf = [0u8; LONGEST];
    let Some(name) = upper(name, &mut buf) else {
        return RowLookup::Unknown;
    };
    let Some(row) = index.rows.get(name) else {
        return RowLookup::Unknown;
    };
    let Some(sub) = sub.filter(|_| index.containers.contains_key(name)) else {
        return RowLookup::Found(row);
    };
    let mut full = [0u8; LONGEST];
    let (n, s) = (name.len(), sub.len());
    if n + 1 + s > LONGEST {
        return RowLookup::NoSubcommand;
    }
    full[..n].copy_from_slice(name);
    full[n] = b'|';
    full[n + 1..n + 1 + s].copy_from_slice(sub);
    full[n + 1..n + 1 + s].make_ascii_uppercase();
    match index.rows.get(&full[..n + 1 + s]) {
        Some(row) => RowLookup::Found(row),
        None => RowLookup::NoSubcommand,
    }
}

/// Whether `name` is a command of Redis 7.0's table (a container's name counts).
pub(crate) fn is_known_command(name: &[u8]) -> bool {
    !matches!(lookup(name, None), RowLookup::Unknown)
}

/// Every row of the table.
#[cfg(test)]
pub(crate) fn all() -> &'static [CommandSpec] {
    COMMANDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_found_as_redis_finds_them() {
        let found = |name: &[u8], sub: Option<&[u8]>| match lookup(name, sub) {
            RowLookup::Found(row) => Some(row.name),
            _ => None,
        };
        assert_eq!(found(b"get", Some(b"k")), Some("GET"));
        assert_eq!(found(b"CoNfIg", Some(b"gEt")), Some("CONFIG|GET"));
        // A container alone is its own row (its arity refuses it).
        assert_eq!(found(b"config", None), Some("CONFIG"));
        assert_eq!(lookup(b"config", Some(b"nosuch")), RowLookup::NoSubcommand);
        assert_eq!(lookup(b"config", Some(b"get\0")), RowLookup::NoSubcommand);
        assert_eq!(lookup(b"get\0", None), RowLookup::Unknown);
        assert_eq!(lookup(b"", None), RowLookup::Unknown);
        assert_eq!(lookup(&[b'x'; 300], None), RowLookup::Unknown);
        let row = |n: &[u8]| match lookup(n, None) {
            RowLookup::Found(r) => r,
            _ => panic!(),
        };
        assert!(row(b"get").takes(2) && !row(b"get").takes(3));
        assert!(row(b"set").takes(3) && row(b"set").takes(9) && !row(b"set").takes(2));
        assert!(row(b"blpop").has(flag::BLOCKING));
        assert_eq!(row(b"object").command(), "OBJECT");
        assert_eq!(all().len(), 366);
    }
}
