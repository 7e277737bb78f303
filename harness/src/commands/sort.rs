//! SORT and SORT_RO: numeric or ALPHA order, ASC / DESC, LIMIT, BY (`*` patterns, `->field` of
//! a hash, a constant pattern to skip sorting), GET (`#` and patterns), STORE. ALPHA compares
//! bytes, as Redis does under the C locale (it uses `strcoll`); elements that compare equal
//! keep the order they were read in (glibc's `qsort` is a stable merge sort).

use super::{done, is, set, wrongtype};
use crate::keyspace::Value;

/// What one element of SORT's result costs beyond its bytes (as the keyspace counts a list
/// element).
const ELEMENT_COST: usize = crate::keyspace::ELEMENT_OVERHEAD;
use crate::number;
use crate::reply::{errors, Reply};
use crate::server::Server;

/// C's `strtod` over the whole string, as SORT checks a weight: `None` when something is
/// left over, when it is NaN, or out of range.
fn weight(b: &[u8]) -> Option<f64> {
    if b.is_empty() {
        return Some(0.0);
    }
    let t = std::str::from_utf8(b).ok()?;
    let trimmed = t.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    if trimmed.is_empty() || trimmed.ends_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let v: f64 = trimmed.parse().ok()?;
    let lower = trimmed.to_ascii_lowercase();
    if v.is_nan() || (v.is_infinite() && !lower.contains("inf")) {
        return None;
    }
    let mantissa = lower.split('e').next().unwrap_or("");
    if v == 0.0 && mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)) {
        return None;
    }
    Some(v)
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; the first `*` is replaced by it;
/// `key->field` reads a hash field. `None` when the key or field is missing or of another type.
fn by_pattern(s: &mut Server, pattern: &[u8], elem: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = pattern.iter().position(|&c| c == b'*')?;
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&i| i + 2 < after.len());
    let (post, field) = match arrow {
        Some(i) => (&after[..i], Some(&after[i + 2..])),
        None => (after, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(elem);
    key.extend_from_slice(post);
    match (s.db.get_mut(&key, s.now_ms).map(|e| &e.value), field) {
        (Some(Value::Str(v)), None) => Some(v.clone()),
        (Some(Value::Hash(h)), Some(f)) => h.get(f).cloned(),
        _ => None,
    }
}

pub(super) fn sort(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    sort_generic(s, a, false)
}

pub(super) fn sort_ro(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    sort_generic(s, a, true)
}

#[derive(PartialEq)]
enum Kind {
    List,
    Set,
    ZSet,
}

fn sort_generic(s: &mut Server, a: &[Vec<u8>], readonly: bool) -> Reply {
    done((|| {
        let now = s.now_ms;
        let (kind, mut elems): (Kind, Vec<Vec<u8>>) =
            match s.db.get_mut(&a[1], now).map(|e| &e.value) {
                None => (Kind::List, vec![]),
                Some(Value::List(l)) => (Kind::List, l.iter().cloned().collect()),
                Some(Value::Set(m)) => (Kind::Set, set::ordered(m)),
                Some(Value::ZSet(z)) => (Kind::ZSet, z.iter().map(|(m, _)| m.clone()).collect()),
                Some(_) => return Err(wrongtype()),
            };
        let (mut desc, mut alpha, mut dontsort) = (false, false, false);
        let (mut limit_start, mut limit_count) = (0i64, -1i64);
        let mut store: Option<&Vec<u8>> = None;
        let mut by: Option<&Vec<u8>> = None;
        let mut gets: Vec<&Vec<u8>> = Vec::new();
        let mut j = 2;
        while j < a.len() {
            let left = a.len() - j - 1;
            let o = &a[j];
            if is(o, "asc") {
                desc = false;
            } else if is(o, "desc") {
                desc = true;
            } else if is(o, "alpha") {
                alpha = true;
            } else if is(o, "limit") && left >= 2 {
                let int =
                    |b: &[u8]| number::parse_i64(b).ok_or_else(|| Reply::err(errors::NOT_INTEGER));
                limit_start = int(&a[j + 1])?;
                limit_count = int(&a[j + 2])?;
                j += 2;
            } else if !readonly && is(o, "store") && left >= 1 {
                store = Some(&a[j + 1]);
                j += 1;
            } else if is(o, "by") && left >= 1 {
                by = Some(&a[j + 1]);
                dontsort = !a[j + 1].contains(&b'*');
                j += 1;
            } else if is(o, "get") && left >= 1 {
                gets.push(&a[j + 1]);
                j += 1;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            j += 1;
        }
        // A set is always sorted inside a script or for STORE, as Redis does, so that the
        // result is the same everywhere.
        if dontsort && kind == Kind::Set && (store.is_some() || s.in_script) {
            dontsort = false;
            alpha = true;
            by = None;
        }
        let len = elems.len() as i64;
        let mut start = limit_start.max(0);
        let mut end = if limit_count < 0 {
            len - 1
        } else {
            start.saturating_add(limit_count) - 1
        };
        if start >= len {
            start = len - 1;
            end = len - 2;
        }
        if end >= len {
            end = len - 1;
        }
        if dontsort {
            if desc {
                elems.reverse();
            }
            if kind == Kind::ZSet || end >= start {
                let from = start.max(0) as usize;
                elems = elems.into_iter().skip(from).collect();
                end -= start;
                start = 0;
            }
        } else {
            let mut keyed: Vec<(Vec<u8>, Option<Vec<u8>>, f64)> = Vec::with_capacity(elems.len());
            for e in elems {
                let byval = match by {
                    Some(p) => by_pattern(s, p, &e),
                    None => Some(e.clone()),
                };
                let mut score = 0.0;
                let mut cmp = None;
                if let Some(v) = byval {
                    if alpha {
                        if by.is_some() {
                            cmp = Some(v);
                        }
                    } else {
                        match weight(&v) {
                            Some(w) => score = w,
                            None => {
                                return Err(Reply::err(
                                    "ERR One or more scores can't be converted into double",
                                ))
                            }
                        }
                    }
                }
                keyed.push((e, cmp, score));
            }
            let by_given = by.is_some();
            keyed.sort_by(|x, y| {
                let c = if !alpha {
                    x.2.partial_cmp(&y.2)
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then_with(|| x.0.cmp(&y.0))
                } else if by_given {
                    match (&x.1, &y.1) {
                        (Some(p), Some(q)) => c_str(p).cmp(c_str(q)),
                        (None, None) => std::cmp::Ordering::Equal,
                        (None, _) => std::cmp::Ordering::Less,
                        (_, None) => std::cmp::Ordering::Greater,
                    }
                } else {
                    x.0.cmp(&y.0)
                };
                if desc {
                    c.reverse()
                } else {
                    c
                }
            });
            elems = keyed.into_iter().map(|k| k.0).collect();
        }
        let range: Vec<Vec<u8>> = if end >= start && start >= 0 {
            elems[start as usize..=(end as usize).min(elems.len().saturating_sub(1))].to_vec()
        } else {
            vec![]
        };
        // GET patterns multiply what SORT builds (each element times each pattern, each a
        // copy of a value): the result must fit in the keyspace's room as it grows.
        let room = s.db.room();
        let mut built = 0usize;
        let mut out: Vec<Option<Vec<u8>>> = Vec::new();
        for e in &range {
            if gets.is_empty() {
                out.push(Some(e.clone()));
            }
            for g in &gets {
                let v = by_pattern(s, g, e);
                built = built.saturating_add(v.as_ref().map_or(0, Vec::len) + ELEMENT_COST);
                if let Some(room) = room.filter(|&r| built > r) {
                    return Err(Reply::Error(crate::keyspace::too_big("sort", built, room)));
                }
                out.push(v);
            }
        }
        match store {
            None => Ok(Reply::Array(
                out.into_iter()
                    .map(|v| v.map_or(Reply::Nil, Reply::Bulk))
                    .collect(),
            )),
            Some(dest) => {
                let n = out.len();
                if n > 0 {
                    let list = out.into_iter().map(Option::unwrap_or_default).collect();
                    s.db.set(dest, Value::List(list), None);
                } else {
                    s.db.remove(dest, now);
                }
                Ok(Reply::Int(n as i64))
            }
        }
    })())
}

/// A C string's bytes: up to the first NUL (`strcoll` stops there).
fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}
