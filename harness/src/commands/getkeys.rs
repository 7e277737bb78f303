//! COMMAND GETKEYS and GETKEYSANDFLAGS: the keys of a command line, found from the command
//! table's key specs as Redis 7.0's `getKeysUsingKeySpecs` finds them, each with its spec's
//! flags (SET's and BITFIELD's, flagged `variable_flags`, as Redis's own code words them).
//! Commands whose specs Redis completes with code of its own (`unknown()` or `incomplete`
//! specs: SORT, MIGRATE...) are not emulated.

use super::{arity_ok, is, lookup_argv, TABLE_TSV};
use crate::reply::Reply;
use crate::server::Server;

/// The key-spec column of `name`'s row, and whether it is flagged `no_mandatory_keys`.
fn row(name: &str) -> Option<(&'static str, bool)> {
    TABLE_TSV.lines().find_map(|line| {
        let cols: Vec<&str> = line.split('\t').collect();
        (cols.first() == Some(&name)).then(|| {
            let flags = cols.get(2).copied().unwrap_or_default();
            (
                cols.get(6).copied().unwrap_or("-"),
                flags.split(',').any(|f| f == "no_mandatory_keys"),
            )
        })
    })
}

/// `name(a=1,b=x)` → the value of `key`.
fn param<'a>(part: &'a str, key: &str) -> Option<&'a str> {
    let inner = part.split_once('(')?.1.strip_suffix(')')?;
    inner.split(',').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

fn num(part: &str, key: &str) -> Option<i64> {
    param(part, key)?.parse().ok()
}

/// The positions of the keys in `argv` (the command line without COMMAND GETKEYS), each with
/// its spec's flags, or `None` when a spec cannot be followed (Redis then finds no keys).
fn positions(specs: &'static str, argv: &[Vec<u8>]) -> Option<Vec<(usize, &'static str)>> {
    let argc = argv.len() as i64;
    let mut keys = Vec::new();
    for spec in specs.split(';') {
        let mut parts = spec.split('/');
        let (flags, begin, find) = (parts.next()?, parts.next()?, parts.next()?);
        let first = if begin.starts_with("index") {
            num(begin, "index")?
        } else {
            let word = param(begin, "keyword")?;
            let from = num(begin, "startfrom")?;
            let (start, end) = if from > 0 {
                (from, argc - 1)
            } else {
                (argc + from, 0)
            };
            let mut found = 0;
            let mut i = start;
            while i != end {
                if i >= argc || i < 1 {
                    break;
                }
                if argv[i as usize].eq_ignore_ascii_case(word.as_bytes()) {
                    found = i + 1;
                    break;
                }
                i += if start <= end { 1 } else { -1 };
            }
            if found == 0 {
                continue;
            }
            found
        };
        let (first, last, step) = if find.starts_with("range") {
            let lastkey = num(find, "lastkey")?;
            let limit = num(find, "limit")?;
            let last = if lastkey >= 0 {
                first + lastkey
            } else if limit == 0 {
                argc + lastkey
            } else {
                first + ((argc - first) / limit + lastkey)
            };
            (first, last, num(find, "keystep")?)
        } else {
            let idx = first + num(find, "keynumidx")?;
            let n = crate::number::parse_i64(argv.get(idx as usize)?).filter(|n| *n >= 0)?;
            let first = first + num(find, "firstkey")?;
            // More keys than arguments: an invalid spec (Redis then finds none).
            if first + n > argc {
                return None;
            }
            (first, first + n - 1, num(find, "keystep")?)
        };
        let mut i = first;
        while i <= last && step > 0 {
            if i < argc {
                keys.push((i as usize, flags));
            }
            i += step;
        }
    }
    Some(keys)
}

/// The keys of command line `argv`, as COMMAND GETKEYS finds them; none for a command whose
/// keys only Redis's own code finds (SORT's BY/GET patterns, MIGRATE...).
pub(crate) fn command_keys(argv: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let Some((specs, _)) = lookup_argv(argv).ok().and_then(|spec| row(spec.name)) else {
        return Vec::new();
    };
    if specs == "-" || specs.contains("unknown()") || specs.contains("incomplete") {
        return Vec::new();
    }
    positions(specs, argv)
        .unwrap_or_default()
        .into_iter()
        .map(|(i, _)| argv[i].clone())
        .collect()
}

/// The flags of a `variable_flags` command's key, as Redis's `setGetKeys` and
/// `bitfieldGetKeys` give them.
fn variable_flags(name: &str, argv: &[Vec<u8>]) -> Option<&'static str> {
    match name {
        "set" if argv.iter().skip(3).any(|a| is(a, "get")) => Some("RW,access,update"),
        "set" => Some("OW,update"),
        "bitfield" => {
            let mut i = 2;
            let mut readonly = true;
            while i < argv.len() {
                let left = argv.len() - i - 1;
                if is(&argv[i], "get") && left >= 2 {
                    i += 3;
                } else if is(&argv[i], "overflow") && left >= 1 {
                    i += 2;
                } else {
                    // SET, INCRBY, or a syntax error Redis takes as a write.
                    readonly = false;
                    break;
                }
            }
            Some(if readonly {
                "RO,access"
            } else {
                "RW,access,update"
            })
        }
        _ => None,
    }
}

/// `COMMAND GETKEYS command arg...`.
pub(super) fn getkeys(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    keys_reply(a, false)
}

/// `COMMAND GETKEYSANDFLAGS command arg...`: each key with its flags (`RW`, `access`...).
pub(super) fn getkeysandflags(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    keys_reply(a, true)
}

fn keys_reply(a: &[Vec<u8>], with_flags: bool) -> Reply {
    let argv = &a[2..];
    let Ok(spec) = lookup_argv(argv) else {
        return Reply::err("ERR Invalid command specified");
    };
    let Some((specs, no_mandatory)) = row(spec.name) else {
        return Reply::err("ERR Invalid command specified");
    };
    // Channels (SPUBLISH's, SSUBSCRIBE's) are `not_key` specs: a cluster routes by them, but
    // they are no keys.
    let not_key = |flags: &str| flags.split(',').any(|f| f == "not_key");
    if specs == "-"
        || specs
            .split(';')
            .all(|s| not_key(s.split('/').next().unwrap_or("")))
    {
        return Reply::err("ERR The command has no key arguments");
    }
    if specs.contains("unknown()") || specs.contains("incomplete") {
        return Reply::err(format!(
            "ERR harness: COMMAND GETKEYS of '{}' is not emulated",
            spec.name
        ));
    }
    if !arity_ok(spec.arity, argv.len()) {
        return Reply::err("ERR Invalid number of arguments specified for command");
    }
    let keys = positions(specs, argv).map(|k| {
        k.into_iter()
            .filter(|(_, flags)| !not_key(flags))
            .collect::<Vec<_>>()
    });
    match keys {
        Some(keys) if !keys.is_empty() => Reply::Array(
            keys.into_iter()
                .map(|(i, flags)| {
                    let key = Reply::Bulk(argv[i].clone());
                    if !with_flags {
                        return key;
                    }
                    let flags = variable_flags(spec.name, argv).unwrap_or(flags);
                    let flags = flags
                        .split(',')
                        .filter(|f| *f != "-")
                        .map(|f| Reply::Status(f.into()))
                        .collect();
                    Reply::Array(vec![key, Reply::Set(flags)])
                })
                .collect(),
        ),
        _ if no_mandatory => Reply::Array(Vec::new()),
        _ => Reply::err("ERR Invalid arguments specified for command"),
    }
}
