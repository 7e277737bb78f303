//! `COMMAND`, `COMMAND INFO` and `COMMAND DOCS`, answered from the command table
//! (`harness/data/commands-7.0.15.tsv`) in Redis 7.0.15's reply formats.
//!
//! Cluster clients build their routing from these replies (redis-py's `RedisCluster` reads
//! `COMMAND` when it starts: arity, flags, first/last/step, key specs and the
//! `request_policy`/`response_policy` tips), so each entry is the real server's field for
//! field: name, arity, flags, first key, last key, step, ACL categories, tips, key specs
//! (with their notes) and subcommands, sets and maps typed as Redis types them in RESP3.
//!
//! Every command of Redis 7.0.15 is listed, emulated or not: the harness knows each one
//! (arity, subcommands, keys, where a cluster routes it) and answers one it does not carry
//! out with `ERR harness: ... is not emulated` after Redis's own checks. A client that read
//! a shorter list would refuse such a command itself ("command doesn't exist") or route it
//! by guesswork, and the reason would not reach the user. `COMMAND DOCS` answers each
//! command's `group` (and its subcommands') only: summaries, arguments and histories are not
//! in the table.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::TABLE_TSV;
use crate::reply::Reply;
use crate::server::Server;

/// One row of the table, as COMMAND INFO answers it.
#[derive(Debug)]
struct TableRow {
    name: &'static str,
    arity: i64,
    flags: Vec<&'static str>,
    /// First key, last key, step.
    range: [i64; 3],
    group: &'static str,
    acl_categories: Vec<&'static str>,
    /// `flags/begin_search/find_keys` per spec, `;` between them, or `-`.
    key_specs: &'static str,
    tips: Vec<&'static str>,
    /// Per key spec, its notes (empty: none).
    notes: Vec<&'static str>,
}

/// A `,`-separated column; `-` is none.
fn list(col: &'static str) -> Vec<&'static str> {
    if col == "-" || col.is_empty() {
        Vec::new()
    } else {
        col.split(',').collect()
    }
}

fn parse(line: &'static str) -> Option<TableRow> {
    let cols: Vec<&'static str> = line.split('\t').collect();
    let mut range = [0i64; 3];
    for (slot, v) in range.iter_mut().zip(cols.get(3)?.split(',')) {
        *slot = v.parse().ok()?;
    }
    let notes = match cols.get(8).copied().unwrap_or("-") {
        "-" => Vec::new(),
        n => n.split(';').collect(),
    };
    Some(TableRow {
        name: cols.first()?,
        arity: cols.get(1)?.parse().ok()?,
        flags: list(cols.get(2)?),
        range,
        group: cols.get(4)?,
        acl_categories: list(cols.get(5)?),
        key_specs: cols.get(6)?,
        tips: list(cols.get(7).copied().unwrap_or("-")),
        notes,
    })
}

/// The table's rows in its order (commands sorted by name, each followed by its subcommands),
/// and their index by name.
struct TableRows {
    rows: Vec<TableRow>,
    by_name: HashMap<&'static str, usize>,
}

fn rows() -> &'static TableRows {
    static ROWS: OnceLock<TableRows> = OnceLock::new();
    ROWS.get_or_init(|| {
        let rows: Vec<TableRow> = TABLE_TSV
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(parse)
            .collect();
        let by_name = rows.iter().enumerate().map(|(i, r)| (r.name, i)).collect();
        TableRows { rows, by_name }
    })
}

fn find(name: &[u8]) -> Option<&'static TableRow> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    let t = rows();
    t.by_name.get(lower.as_str()).map(|&i| &t.rows[i])
}

fn top_level() -> impl Iterator<Item = &'static TableRow> {
    rows().rows.iter().filter(|r| !r.name.contains('|'))
}

fn subcommands(parent: &'static TableRow) -> impl Iterator<Item = &'static TableRow> {
    rows().rows.iter().filter(move |r| {
        r.name
            .strip_prefix(parent.name)
            .is_some_and(|rest| rest.starts_with('|'))
    })
}

fn statuses(words: &[&str]) -> Reply {
    Reply::Set(words.iter().map(|w| Reply::Status((*w).into())).collect())
}

fn field(name: &str, value: Reply) -> (Reply, Reply) {
    (Reply::bulk(name), value)
}

/// `type(k=v,...)` as `{type, spec: {k: v...}}`; numbers are integers, words bulk strings.
fn search(text: &str) -> Reply {
    let (kind, inner) = text.split_once('(').unwrap_or((text, ")"));
    let params = inner
        .strip_suffix(')')
        .unwrap_or(inner)
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let value = match v.parse::<i64>() {
                Ok(n) if k != "keyword" => Reply::Int(n),
                _ => Reply::bulk(v),
            };
            field(k, value)
        })
        .collect();
    Reply::Map(vec![
        field("type", Reply::bulk(kind)),
        field("spec", Reply::Map(params)),
    ])
}

fn key_specs(row: &TableRow) -> Reply {
    if row.key_specs == "-" {
        return Reply::Set(Vec::new());
    }
    let specs = row
        .key_specs
        .split(';')
        .enumerate()
        .map(|(i, spec)| {
            let mut parts = spec.splitn(3, '/');
            let flags = parts.next().unwrap_or("-");
            let begin = parts.next().unwrap_or("unknown()");
            let find = parts.next().unwrap_or("unknown()");
            let mut fields = Vec::with_capacity(4);
            if let Some(n) = row.notes.get(i).filter(|n| !n.is_empty()) {
                fields.push(field("notes", Reply::bulk(n)));
            }
            let flags = if flags == "-" {
                Vec::new()
            } else {
                flags.split(',').collect()
            };
            fields.push(field("flags", statuses(&flags)));
            fields.push(field("begin_search", search(begin)));
            fields.push(field("find_keys", search(find)));
            Reply::Map(fields)
        })
        .collect();
    Reply::Set(specs)
}

/// A command's COMMAND INFO entry: its ten fields, subcommands nested.
fn entry(row: &'static TableRow) -> Reply {
    let subs: Vec<Reply> = subcommands(row).map(entry).collect();
    Reply::Array(vec![
        Reply::bulk(row.name),
        Reply::Int(row.arity),
        statuses(&row.flags),
        Reply::Int(row.range[0]),
        Reply::Int(row.range[1]),
        Reply::Int(row.range[2]),
        statuses(&row.acl_categories),
        Reply::Set(row.tips.iter().map(Reply::bulk).collect()),
        key_specs(row),
        // No subcommands: an empty set, as Redis answers.
        if subs.is_empty() {
            Reply::Set(subs)
        } else {
            Reply::Array(subs)
        },
    ])
}

/// A command's COMMAND DOCS entry: its group, and its subcommands'.
fn docs(row: &'static TableRow) -> Reply {
    let mut fields = vec![field("group", Reply::bulk(row.group))];
    let subs: Vec<(Reply, Reply)> = subcommands(row)
        .map(|s| (Reply::bulk(s.name), docs(s)))
        .collect();
    if !subs.is_empty() {
        fields.push(field("subcommands", Reply::Map(subs)));
    }
    Reply::Map(fields)
}

/// `COMMAND`: every command's entry.
pub(super) fn command(_s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    Reply::Array(top_level().map(entry).collect())
}

/// `COMMAND INFO [name ...]`: each name's entry (`parent|sub` names a subcommand), nil for an
/// unknown one; every command's without names.
pub(super) fn info(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    if a.len() == 2 {
        return Reply::Array(top_level().map(entry).collect());
    }
    Reply::Array(
        a[2..]
            .iter()
            .map(|n| find(n).map_or(Reply::Nil, entry))
            .collect(),
    )
}

/// `COMMAND DOCS [name ...]`: a map of each known name to its docs (unknown ones left out);
/// every command's without names.
pub(super) fn command_docs(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let pairs = if a.len() == 2 {
        top_level()
            .map(|r| (Reply::bulk(r.name), docs(r)))
            .collect()
    } else {
        a[2..]
            .iter()
            .filter_map(|n| find(n))
            .map(|r| (Reply::bulk(r.name), docs(r)))
            .collect()
    };
    Reply::Map(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_parses_and_subcommands_nest_under_their_parent() {
        let t = rows();
        let lines = TABLE_TSV
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(t.rows.len(), lines);
        let config = find(b"CONFIG").expect("config");
        assert!(subcommands(config).any(|s| s.name == "config|get"));
        assert!(subcommands(find(b"get").expect("get")).next().is_none());
        let Reply::Array(fields) = entry(find(b"get").expect("get")) else {
            panic!("an array")
        };
        assert_eq!(fields.len(), 10);
        assert_eq!(fields[1], Reply::Int(2));
        assert_eq!(
            search("keyword(keyword=STREAMS,startfrom=1)"),
            Reply::Map(vec![
                field("type", Reply::bulk("keyword")),
                field(
                    "spec",
                    Reply::Map(vec![
                        field("keyword", Reply::bulk("STREAMS")),
                        field("startfrom", Reply::Int(1)),
                    ])
                ),
            ])
        );
    }
}
