//! Server introspection a script can call: `X HELP` (Redis's texts, generated into
//! `harness/data/help-7.0.15.txt`), COMMAND COUNT/LIST, INFO, LASTSAVE, LOLWUT,
//! MEMORY, OBJECT FREQ/IDLETIME/REFCOUNT, DUMP, KEYS, SCAN, RANDOMKEY, SELECT, SLOWLOG.
//!
//! Where Redis answers from state the offline server does not have (the LRU clock, allocator
//! statistics, RDB serialisation), the harness answers for a missing key as Redis does and says
//! that it does not emulate the rest.

use std::sync::OnceLock;

use super::{done, int_arg, is, table};
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

/// What Redis 7.0.15 answers to `X HELP`, generated from a real server by
/// `harness/tests/it/command_table.rs`.
const HELP_TXT: &str = include_str!("../../data/help-7.0.15.txt");

fn help_sections() -> &'static [(&'static str, Vec<&'static str>)] {
    static SECTIONS: OnceLock<Vec<(&'static str, Vec<&'static str>)>> = OnceLock::new();
    SECTIONS.get_or_init(|| {
        let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
        for line in HELP_TXT.lines() {
            if let Some(name) = line.strip_prefix("## ") {
                out.push((name, Vec::new()));
            } else if !line.starts_with('#') {
                if let Some((_, lines)) = out.last_mut() {
                    lines.push(line);
                }
            }
        }
        out
    })
}

/// Whether the generated help file has `command`'s HELP text.
pub(crate) fn has_help(command: &str) -> bool {
    help_sections().iter().any(|(n, _)| *n == command)
}

/// `X HELP`: Redis's lines, as status replies.
pub(super) fn help(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
    match help_sections().iter().find(|(n, _)| *n == name) {
        Some((_, lines)) => Reply::Array(
            lines
                .iter()
                .map(|l| Reply::Status((*l).to_string()))
                .collect(),
        ),
        None => not_emulated(&format!("{name}|help")),
    }
}

fn not_emulated(what: &str) -> Reply {
    Reply::err(format!(
        "ERR harness: the Redis command '{what}' is not emulated"
    ))
}

/// Redis's glob (`stringmatchlen`): `*`, `?`, `[...]` with `^` and ranges, `\` escapes.
///
/// As Redis 7.0 bounds it: one level of nesting per `*`, at most [`GLOB_MAX_NESTING`] (a
/// deeper pattern does not match), and once the rest of the pattern after a `*` matches at
/// no position of the string, no earlier `*` tries a longer match. So a pattern of 300,000
/// stars cannot overflow the stack, and `*a*a*a...*b` answers in time linear in the key.
pub(crate) fn glob_match(p: &[u8], s: &[u8], nocase: bool) -> bool {
    glob_match_at(p, s, nocase, &mut false, 0)
}

/// Redis's `nesting > 1000` cut in `stringmatchlen_impl`.
const GLOB_MAX_NESTING: usize = 1000;

fn glob_match_at(p: &[u8], s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: usize) -> bool {
    if nesting > GLOB_MAX_NESTING {
        return false;
    }
    let low = |c: u8| if nocase { c.to_ascii_lowercase() } else { c };
    let (mut pi, mut si) = (0usize, 0usize);
    while pi < p.len() && si < s.len() {
        match p[pi] {
            b'*' => {
                while pi + 1 < p.len() && p[pi + 1] == b'*' {
                    pi += 1;
                }
                if pi + 1 == p.len() {
                    return true;
                }
                for start in si..s.len() {
                    if glob_match_at(&p[pi + 1..], &s[start..], nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                }
                *skip_longer = true;
                return false;
            }
            b'?' => si += 1,
            b'[' => {
                pi += 1;
                let not = p.get(pi) == Some(&b'^');
                if not {
                    pi += 1;
                }
                let mut hit = false;
                loop {
                    if pi >= p.len() {
                        pi -= 1;
                        break;
                    }
                    let c = p[pi];
                    if c == b'\\' && pi + 1 < p.len() {
                        pi += 1;
                        hit |= low(p[pi]) == low(s[si]);
                    } else if c == b']' {
                        break;
                    } else if pi + 2 < p.len() && p[pi + 1] == b'-' {
                        let (mut lo, mut hi) = (low(c), low(p[pi + 2]));
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        pi += 2;
                        let x = low(s[si]);
                        hit |= lo <= x && x <= hi;
                    } else {
                        hit |= low(c) == low(s[si]);
                    }
                    pi += 1;
                }
                if not {
                    hit = !hit;
                }
                if !hit {
                    return false;
                }
                si += 1;
            }
            c => {
                let c = if c == b'\\' && pi + 1 < p.len() {
                    pi += 1;
                    p[pi]
                } else {
                    c
                };
                if low(c) != low(s[si]) {
                    return false;
                }
                si += 1;
            }
        }
        pi += 1;
        if si == s.len() {
            while pi < p.len() && p[pi] == b'*' {
                pi += 1;
            }
            break;
        }
    }
    pi == p.len() && si == s.len()
}

/// COMMAND COUNT and LIST (COMMAND, INFO and DOCS: `command_info.rs`; GETKEYS and
/// GETKEYSANDFLAGS: `getkeys.rs`).
pub(super) fn command(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let t = table();
    let sub = a
        .get(1)
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    match sub.as_deref() {
        Some("count") => Reply::Int(t.specs.iter().filter(|s| s.name == s.command).count() as i64),
        Some("list") => command_list(a),
        Some(other) => not_emulated(&format!("command|{other}")),
        None => not_emulated("command"),
    }
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern], in the table's
/// order (Redis answers in its dictionary's order, which differs from server to server).
fn command_list(a: &[Vec<u8>]) -> Reply {
    let syntax = || Reply::err(errors::SYNTAX);
    let filter: Option<(String, &[u8])> = match a.len() {
        2 => None,
        5 if is(&a[2], "filterby") => {
            Some((String::from_utf8_lossy(&a[3]).to_ascii_lowercase(), &a[4]))
        }
        _ => return syntax(),
    };
    let rows = table().specs.iter().filter(|s| match &filter {
        None => true,
        Some((kind, arg)) => match kind.as_str() {
            "module" => false,
            "aclcat" => {
                let want = format!("@{}", String::from_utf8_lossy(arg).to_ascii_lowercase());
                s.acl_categories.split(',').any(|c| c == want)
            }
            _ => glob_match(arg, s.name.as_bytes(), true),
        },
    });
    if let Some((kind, _)) = &filter {
        if !["module", "aclcat", "pattern"].contains(&kind.as_str()) {
            return syntax();
        }
    }
    Reply::Array(rows.map(|s| Reply::bulk(s.name)).collect())
}

/// The sections INFO knows in Redis 7.0.
const INFO_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "module_list",
    "modules",
    "commandstats",
    "errorstats",
    "cluster",
    "keyspace",
    "latencystats",
    "all",
    "default",
    "everything",
];

/// INFO with only sections Redis does not know answers an empty string, as Redis does; the
/// sections themselves (server statistics) are not emulated.
pub(super) fn info(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let known = a[1..].iter().any(|s| {
        let lower = String::from_utf8_lossy(s).to_ascii_lowercase();
        INFO_SECTIONS.contains(&lower.as_str())
    });
    if a.len() > 1 && !known {
        Reply::bulk("")
    } else {
        not_emulated("info")
    }
}

/// LASTSAVE: the offline server never saves, so this is when it started, as for a Redis
/// started without a dump file.
pub(super) fn lastsave(s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    Reply::Int(s.start_ms.div_euclid(1000))
}

/// LOLWUT [VERSION v]: the version line of Redis 7.0's default LOLWUT; versions 5 and 6
/// (drawings) are not emulated.
pub(super) fn lolwut(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let mut version = 7;
    if a.len() >= 3 && is(&a[1], "version") {
        match int_arg(&a[2]) {
            Ok(v) => version = v,
            Err(e) => return e,
        }
    }
    if version == 5 || version == 6 {
        return Reply::err(format!(
            "ERR harness: LOLWUT VERSION {version} is not emulated"
        ));
    }
    Reply::bulk("Redis ver. 7.0.15\n")
}

/// Used memory under which MEMORY DOCTOR declines to look (Redis's 5 MB).
const DOCTOR_MIN_BYTES: usize = 5 << 20;

/// MEMORY DOCTOR (for a small instance), PURGE, USAGE of a missing key.
pub(super) fn memory(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "doctor" if s.db.used_memory() < DOCTOR_MIN_BYTES => Reply::bulk(
            "Hi Sam, this instance is empty or is using very little memory, my issues detector \
             can't be used in these conditions. Please, leave for your mission on Earth and fill \
             it with some data. The new Sam and I will be back to our programming as soon as I \
             finished rebooting.\n",
        ),
        "purge" => Reply::ok(),
        "usage" => done((|| {
            let mut j = 3;
            while j < a.len() {
                if is(&a[j], "samples") && j + 1 < a.len() {
                    if int_arg(&a[j + 1])? < 0 {
                        return Err(Reply::err(errors::SYNTAX));
                    }
                    j += 2;
                } else {
                    return Err(Reply::err(errors::SYNTAX));
                }
            }
            if s.db.exists(&a[2], s.now_ms) {
                return Err(not_emulated("memory|usage"));
            }
            Ok(Reply::Nil)
        })()),
        other => not_emulated(&format!("memory|{other}")),
    }
}

/// OBJECT FREQ / IDLETIME / REFCOUNT: nil for a missing key; FREQ's error for an existing one
/// (the offline server has no LFU policy); REFCOUNT as Redis's shared integers make it
/// (`int`-encoded 0..9999: `INT_MAX`, anything else 1). IDLETIME of an existing key is not
/// emulated (no LRU clock).
pub(super) fn object(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    if !s.db.exists(&a[2], s.now_ms) {
        return Reply::Nil;
    }
    match sub.as_str() {
        "freq" => Reply::err(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please \
             note that when switching between policies at runtime LRU and LFU data will take \
             some time to adjust.",
        ),
        "refcount" => {
            let shared = match s.db.peek(&a[2], s.now_ms).map(|e| &e.value) {
                Some(crate::keyspace::Value::Str(v)) if v.len() <= 20 => {
                    crate::number::parse_i64(v)
                        .is_some_and(|n| (0..OBJ_SHARED_INTEGERS).contains(&n))
                }
                _ => false,
            };
            Reply::Int(if shared { i64::from(i32::MAX) } else { 1 })
        }
        other => not_emulated(&format!("object|{other}")),
    }
}

/// Redis's shared integer objects: 0 up to this, exclusive (`OBJ_SHARED_INTEGERS`).
const OBJ_SHARED_INTEGERS: i64 = 10_000;

/// The live keys, sorted bytewise (Redis's order is its hash table's).
fn sorted_keys(s: &Server) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = s.db.iter(s.now_ms).map(|(k, _)| k.clone()).collect();
    keys.sort();
    keys
}

/// KEYS pattern: the matching keys, sorted bytewise.
pub(super) fn keys(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    Reply::Array(
        sorted_keys(s)
            .into_iter()
            .filter(|k| a[1] == b"*" || glob_match(&a[1], k, false))
            .map(Reply::Bulk)
            .collect(),
    )
}

/// RANDOMKEY: nil when empty, else the first key bytewise (documented; Redis picks at random).
pub(super) fn randomkey(s: &mut Server, _a: &[Vec<u8>]) -> Reply {
    sorted_keys(s)
        .into_iter()
        .next()
        .map_or(Reply::Nil, Reply::Bulk)
}

/// A SCAN cursor as C's `strtoul` reads it (spaces, a sign, digits; a negative one wraps), or
/// `ERR invalid cursor`.
pub(crate) fn scan_cursor(arg: &[u8]) -> Result<u64, Reply> {
    let bad = || Reply::err("ERR invalid cursor");
    if arg.is_empty() {
        return Ok(0);
    }
    let mut i = 0;
    while i < arg.len() && matches!(arg[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let neg = match arg.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = &arg[i..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] over the keys sorted bytewise; the
/// cursor is how many keys came before (Redis's cursor walks its hash table instead).
pub(super) fn scan(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let cursor = scan_cursor(&a[1])?;
        let (mut pattern, mut count, mut kind) = (None, 10i64, None);
        let mut i = 2;
        while i < a.len() {
            let more = a.len() - i - 1;
            if is(&a[i], "count") && more >= 1 {
                count = int_arg(&a[i + 1])?;
                if count < 1 {
                    return Err(Reply::err(errors::SYNTAX));
                }
            } else if is(&a[i], "match") && more >= 1 {
                pattern = Some(&a[i + 1]);
            } else if is(&a[i], "type") && more >= 1 {
                kind = Some(String::from_utf8_lossy(&a[i + 1]).to_ascii_lowercase());
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            i += 2;
        }
        let keys = sorted_keys(s);
        let start = usize::try_from(cursor)
            .unwrap_or(usize::MAX)
            .min(keys.len());
        let end = start.saturating_add(count as usize).min(keys.len());
        let next = if end >= keys.len() { 0 } else { end };
        let mut out = Vec::new();
        for k in &keys[start..end] {
            if pattern.is_some_and(|p| p != b"*" && !glob_match(p, k, false)) {
                continue;
            }
            if let Some(t) = &kind {
                let ty = s.db.peek(k, s.now_ms).map(|e| e.value.type_name());
                if ty != Some(t.as_str()) {
                    continue;
                }
            }
            out.push(Reply::Bulk(k.clone()));
        }
        Ok(Reply::Array(vec![
            Reply::bulk(next.to_string()),
            Reply::Array(out),
        ]))
    })())
}

/// SELECT: database 0 is the offline server's only one.
pub(super) fn select(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    match number::parse_i64(&a[1]) {
        None => Reply::err(errors::NOT_INTEGER),
        Some(v) if i32::try_from(v).is_err() => {
            Reply::err("ERR value is out of range, value must between -2147483648 and 2147483647")
        }
        Some(0) => Reply::ok(),
        Some(v) if !(0..16).contains(&v) => Reply::err("ERR DB index is out of range"),
        Some(v) => Reply::err(format!(
            "ERR harness: SELECT {v} is not emulated (only database 0)"
        )),
    }
}

/// SLOWLOG GET / LEN / RESET: the offline server logs no slow command.
pub(super) fn slowlog(_s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&a[1]).to_ascii_lowercase();
    match sub.as_str() {
        "get" => {
            if a.len() == 3 && number::parse_i64(&a[2]).is_none_or(|c| c < -1) {
                return Reply::err("ERR count should be greater than or equal to -1");
            }
            Reply::Array(vec![])
        }
        "len" => Reply::Int(0),
        "reset" => Reply::ok(),
        other => not_emulated(&format!("slowlog|{other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::{glob_match, scan_cursor};

    #[test]
    fn glob_matches_as_redis_does() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes(), false);
        // Redis's matcher needs a character for `*` to stand before the end; KEYS and SCAN
        // treat the pattern `*` alone as "all keys" before matching.
        assert!(!m("*", ""));
        assert!(m("h?llo", "hello"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hbllo"));
        assert!(m("h\\*", "h*"));
        assert!(!m("h\\*", "hx"));
        assert!(!m("a[", "a"));
        assert!(!m("abc", "ab"));
        assert!(m("ab**", "ab"));
        assert!(glob_match(b"GET", b"get", true));
    }

    /// Glob of letters, `?` and `*` by dynamic programming: what any correct matcher answers.
    fn glob_by_table(p: &[u8], s: &[u8]) -> bool {
        // m[j]: the pattern so far matches s[..j].
        let mut m = vec![false; s.len() + 1];
        m[0] = true;
        for &c in p {
            let mut next = vec![false; s.len() + 1];
            for j in 0..=s.len() {
                next[j] = match c {
                    b'*' => m[j] || (j > 0 && next[j - 1]),
                    b'?' => j > 0 && m[j - 1],
                    _ => j > 0 && m[j - 1] && s[j - 1] == c,
                };
            }
            m = next;
        }
        m[s.len()]
    }

    proptest::proptest! {
        // The cut on longer matches after a `*` (Redis's skipLongerMatches) changes no answer.
        #[test]
        fn glob_cuts_no_match_short(p in "[ab?*]{0,12}", s in "[ab]{1,14}") {
            proptest::prop_assert_eq!(
                glob_match(p.as_bytes(), s.as_bytes(), false),
                glob_by_table(p.as_bytes(), s.as_bytes())
            );
        }
    }

    #[test]
    fn deep_globs_answer_as_redis_does() {
        // One nesting level per `*`, cut at 1000 as in Redis 7.0 (checked against 7.0.15 by
        // cli/tests/it/sandbox_holds.rs): 300,000 stars neither overflow the stack nor match.
        let key = vec![b'a'; 1100];
        assert!(glob_match(&b"*a".repeat(1000), &key, false));
        assert!(!glob_match(&b"*a".repeat(1001), &key, false));
        assert!(!glob_match(&b"*a".repeat(300_000), &key, false));
        assert!(!glob_match(
            &(b"*a"
                .repeat(14)
                .into_iter()
                .chain(*b"b")
                .collect::<Vec<_>>()),
            &key[..60],
            false
        ));
    }

    #[test]
    fn scan_cursor_reads_like_strtoul() {
        assert_eq!(scan_cursor(b"").ok(), Some(0));
        assert_eq!(scan_cursor(b"-1").ok(), Some(u64::MAX));
        assert_eq!(scan_cursor(b" 7").ok(), Some(7));
        assert!(scan_cursor(b"x").is_err());
        assert!(scan_cursor(b"18446744073709551616").is_err());
        assert!(scan_cursor(b"1 ").is_err());
    }
}
