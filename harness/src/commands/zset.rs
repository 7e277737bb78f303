//! Sorted-set commands: ZADD, ZINCRBY, ZREM, ZSCORE, ZCARD, ZRANGE, ZRANGEBYSCORE,
//! ZREMRANGEBYSCORE.

use super::list::clamp_range;
use super::{done, float_arg, int_arg, is, wrongtype};
use crate::keyspace::{SortedSet, Value};
use crate::reply::{errors, Reply};
use crate::server::Server;

fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a SortedSet>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(wrongtype()),
    }
}

#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

fn zadd_generic(s: &mut Server, a: &[Vec<u8>], mut f: AddFlags, mut idx: usize) -> Reply {
    done((|| {
        while idx < a.len() {
            let o = &a[idx];
            if is(o, "nx") {
                f.nx = true;
            } else if is(o, "xx") {
                f.xx = true;
            } else if is(o, "ch") {
                f.ch = true;
            } else if is(o, "incr") {
                f.incr = true;
            } else if is(o, "gt") {
                f.gt = true;
            } else if is(o, "lt") {
                f.lt = true;
            } else {
                break;
            }
            idx += 1;
        }
        let rest = &a[idx..];
        if rest.is_empty() || rest.len() % 2 == 1 {
            return Err(Reply::err(errors::SYNTAX));
        }
        if f.nx && f.xx {
            return Err(Reply::err(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
            return Err(Reply::err(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        if f.incr && rest.len() > 2 {
            return Err(Reply::err(
                "ERR INCR option supports a single increment-element pair",
            ));
        }
        let scores = rest
            .chunks(2)
            .map(|p| float_arg(&p[0]))
            .collect::<Result<Vec<f64>, Reply>>()?;
        let now = s.now_ms;
        match s.db.get_mut(&a[1], now).map(|e| &e.value) {
            Some(Value::ZSet(_)) => {}
            Some(_) => return Err(wrongtype()),
            None if f.xx => {
                return Ok(if f.incr { Reply::Nil } else { Reply::Int(0) });
            }
            None => s.db.set(&a[1], Value::ZSet(SortedSet::default()), None),
        }
        let Some(Value::ZSet(z)) = s.db.get_mut(&a[1], now).map(|e| &mut e.value) else {
            return Err(wrongtype());
        };
        let (mut added, mut updated, mut processed) = (0, 0, 0);
        let mut last = 0.0;
        for (pair, &score) in rest.chunks(2).zip(&scores) {
            let member = &pair[1];
            match z.score(member) {
                Some(cur) => {
                    if f.nx {
                        continue;
                    }
                    let new = if f.incr { score + cur } else { score };
                    if new.is_nan() {
                        s.db.drop_if_empty(&a[1]);
                        return Err(Reply::err("ERR resulting score is not a number (NaN)"));
                    }
                    if (f.lt && new >= cur) || (f.gt && new <= cur) {
                        continue;
                    }
                    last = new;
                    processed += 1;
                    if new != cur {
                        z.insert(member, new);
                        updated += 1;
                    }
                }
                None if !f.xx => {
                    z.insert(member, score);
                    last = score;
                    added += 1;
                    processed += 1;
                }
                None => {}
            }
        }
        s.db.drop_if_empty(&a[1]);
        Ok(if f.incr {
            if processed > 0 {
                Reply::Double(last)
            } else {
                Reply::Nil
            }
        } else {
            Reply::Int(if f.ch { added + updated } else { added })
        })
    })())
}

pub(super) fn zadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zadd_generic(s, a, AddFlags::default(), 2)
}

pub(super) fn zincrby(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(s, a, f, 2)
}

pub(super) fn zrem(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    let now = s.now_ms;
    let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => 0,
        Some(Value::ZSet(z)) => a[2..].iter().filter(|m| z.remove(m)).count(),
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    Reply::Int(n as i64)
}

pub(super) fn zscore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|z| {
        z.and_then(|z| z.score(&a[2]))
            .map_or(Reply::Nil, Reply::Double)
    }))
}

pub(super) fn zcard(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done(read(s, &a[1]).map(|z| Reply::Int(z.map_or(0, |z| z.len() as i64))))
}

/// A score bound as `zslParseRange` reads it: `(` for exclusive, then `strtod`.
fn parse_bound(b: &[u8]) -> Option<(f64, bool)> {
    let (excl, rest) = match b.first() {
        Some(b'(') => (true, &b[1..]),
        _ => (false, b),
    };
    let text = std::str::from_utf8(rest).ok()?;
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let v = if text.is_empty() {
        0.0
    } else {
        let lower = trimmed.to_ascii_lowercase();
        let u = lower.trim_start_matches(['+', '-']);
        if matches!(u, "inf" | "infinity") {
            if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else if u
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-'))
        {
            trimmed.parse::<f64>().ok()?
        } else {
            crate::number::parse_f64(trimmed.as_bytes())?
        }
    };
    if v.is_nan() {
        return None;
    }
    Some((v, excl))
}

struct ScoreRange {
    min: (f64, bool),
    max: (f64, bool),
}

impl ScoreRange {
    fn contains(&self, v: f64) -> bool {
        let above = if self.min.1 {
            v > self.min.0
        } else {
            v >= self.min.0
        };
        let below = if self.max.1 {
            v < self.max.0
        } else {
            v <= self.max.0
        };
        above && below
    }
}

fn parse_score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    match (parse_bound(min), parse_bound(max)) {
        (Some(min), Some(max)) => Ok(ScoreRange { min, max }),
        _ => Err(Reply::err("ERR min or max is not a float")),
    }
}

#[derive(PartialEq, Clone, Copy)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

fn zrange_generic(s: &mut Server, a: &[Vec<u8>], preset: RangeType, preset_rev: bool) -> Reply {
    done((|| {
        let (mut rev, mut rtype) = (preset_rev.then_some(true), preset);
        let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
        let mut j = 4;
        while j < a.len() {
            let left = a.len() - j - 1;
            if is(&a[j], "withscores") {
                withscores = true;
            } else if is(&a[j], "limit") && left >= 2 {
                offset = int_arg(&a[j + 1])?;
                limit = int_arg(&a[j + 2])?;
                j += 2;
            } else if rev.is_none() && preset == RangeType::Auto && is(&a[j], "rev") {
                rev = Some(true);
            } else if rtype == RangeType::Auto && is(&a[j], "bylex") {
                rtype = RangeType::Lex;
            } else if rtype == RangeType::Auto && is(&a[j], "byscore") {
                rtype = RangeType::Score;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
            j += 1;
        }
        let rev = rev.unwrap_or(false);
        if rtype == RangeType::Auto {
            rtype = RangeType::Rank;
        }
        if limit != -1 && rtype == RangeType::Rank {
            return Err(Reply::err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        if withscores && rtype == RangeType::Lex {
            return Err(Reply::err(
                "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
            ));
        }
        let (lo, hi) = if rev && rtype != RangeType::Rank {
            (&a[3], &a[2])
        } else {
            (&a[2], &a[3])
        };
        let items: Vec<(Vec<u8>, f64)> = match rtype {
            RangeType::Rank => {
                let start = int_arg(lo)?;
                let end = int_arg(hi)?;
                let Some(z) = read(s, &a[1])? else {
                    return Ok(Reply::Array(vec![]));
                };
                let all: Vec<(&Vec<u8>, f64)> = if rev {
                    z.iter().rev().collect()
                } else {
                    z.iter().collect()
                };
                match clamp_range(start, end, all.len()) {
                    None => vec![],
                    Some((l, h)) => all[l..=h].iter().map(|(m, s)| ((*m).clone(), *s)).collect(),
                }
            }
            RangeType::Score => {
                let range = parse_score_range(lo, hi)?;
                let Some(z) = read(s, &a[1])? else {
                    return Ok(Reply::Array(vec![]));
                };
                if offset > 0 && offset as usize >= z.len() {
                    return Ok(Reply::Array(vec![]));
                }
                let it: Box<dyn Iterator<Item = (&Vec<u8>, f64)>> = if rev {
                    Box::new(z.iter().rev())
                } else {
                    Box::new(z.iter())
                };
                let matching = it.filter(|(_, sc)| range.contains(*sc));
                if offset < 0 {
                    vec![]
                } else {
                    let taken = matching.skip(offset as usize);
                    let taken: Vec<_> = if limit < 0 {
                        taken.collect()
                    } else {
                        taken.take(limit as usize).collect()
                    };
                    taken.into_iter().map(|(m, s)| (m.clone(), s)).collect()
                }
            }
            _ => {
                let range = LexRange::parse(lo, hi)?;
                let Some(z) = read(s, &a[1])? else {
                    return Ok(Reply::Array(vec![]));
                };
                let walk = range.walk(z, rev);
                let mut it = walk.into_iter();
                // Redis steps over the offset without looking at the range, then stops at the
                // first member out of it; a negative offset steps past the end.
                if offset < 0 {
                    vec![]
                } else {
                    for _ in 0..offset {
                        if it.next().is_none() {
                            break;
                        }
                    }
                    let mut out = Vec::new();
                    let mut left = limit;
                    for (m, sc) in it {
                        if left == 0 {
                            break;
                        }
                        left -= 1;
                        let inside = if rev {
                            range.gte_min(&m)
                        } else {
                            range.lte_max(&m)
                        };
                        if !inside {
                            break;
                        }
                        out.push((m, sc));
                    }
                    out
                }
            }
        };
        let mut out = Vec::with_capacity(items.len() * 2);
        for (m, sc) in items {
            if withscores {
                out.push(Reply::Array(vec![Reply::Bulk(m), Reply::Double(sc)]));
            } else {
                out.push(Reply::Bulk(m));
            }
        }
        if withscores {
            // RESP2 flattens member/score pairs into one array.
            out = out
                .into_iter()
                .flat_map(|p| match p {
                    Reply::Array(v) => v,
                    other => vec![other],
                })
                .collect();
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn zrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Auto, false)
}

pub(super) fn zrangebyscore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Score, false)
}

pub(super) fn zremrangebyscore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let range = parse_score_range(&a[2], &a[3])?;
        let now = s.now_ms;
        let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => 0,
            Some(Value::ZSet(z)) => {
                let doomed: Vec<Vec<u8>> = z
                    .iter()
                    .filter(|(_, sc)| range.contains(*sc))
                    .map(|(m, _)| m.clone())
                    .collect();
                doomed.iter().filter(|m| z.remove(m)).count()
            }
            Some(_) => return Err(wrongtype()),
        };
        s.db.drop_if_empty(&a[1]);
        Ok(Reply::Int(n as i64))
    })())
}

pub(super) fn zrevrange(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Rank, true)
}

pub(super) fn zrevrangebyscore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Score, true)
}

pub(super) fn zcount(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let range = parse_score_range(&a[2], &a[3])?;
        Ok(Reply::Int(read(s, &a[1])?.map_or(0, |z| {
            z.iter().filter(|(_, sc)| range.contains(*sc)).count() as i64
        })))
    })())
}

fn rank(s: &mut Server, a: &[Vec<u8>], rev: bool) -> Reply {
    done(read(s, &a[1]).map(|z| {
        let Some(z) = z else { return Reply::Nil };
        match z.iter().position(|(m, _)| m.as_slice() == a[2].as_slice()) {
            Some(i) if rev => Reply::Int((z.len() - 1 - i) as i64),
            Some(i) => Reply::Int(i as i64),
            None => Reply::Nil,
        }
    }))
}

pub(super) fn zrank(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    rank(s, a, false)
}

pub(super) fn zrevrank(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    rank(s, a, true)
}

fn zpop(s: &mut Server, a: &[Vec<u8>], max: bool) -> Reply {
    if a.len() > 3 {
        return Reply::err(errors::SYNTAX);
    }
    let count = match a.get(2) {
        None => 1,
        Some(c) => match crate::number::parse_i64(c) {
            Some(n) if n >= 0 => n as usize,
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
    };
    if count == 0 {
        return Reply::Array(vec![]);
    }
    let now = s.now_ms;
    let out = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
        None => return Reply::Array(vec![]),
        Some(Value::ZSet(z)) => {
            let picked: Vec<(Vec<u8>, f64)> = if max {
                z.iter()
                    .rev()
                    .take(count)
                    .map(|(m, sc)| (m.clone(), sc))
                    .collect()
            } else {
                z.iter()
                    .take(count)
                    .map(|(m, sc)| (m.clone(), sc))
                    .collect()
            };
            let mut out = Vec::with_capacity(picked.len() * 2);
            for (m, sc) in picked {
                z.remove(&m);
                out.push(Reply::Bulk(m));
                out.push(Reply::Double(sc));
            }
            out
        }
        Some(_) => return wrongtype(),
    };
    s.db.drop_if_empty(&a[1]);
    Reply::Array(out)
}

pub(super) fn zpopmin(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zpop(s, a, false)
}

pub(super) fn zpopmax(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zpop(s, a, true)
}

pub(super) fn zremrangebyrank(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let start = int_arg(&a[2])?;
        let end = int_arg(&a[3])?;
        let now = s.now_ms;
        let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => 0,
            Some(Value::ZSet(z)) => match clamp_range(start, end, z.len()) {
                None => 0,
                Some((lo, hi)) => {
                    let doomed: Vec<Vec<u8>> = z
                        .iter()
                        .skip(lo)
                        .take(hi - lo + 1)
                        .map(|(m, _)| m.clone())
                        .collect();
                    doomed.iter().filter(|m| z.remove(m)).count()
                }
            },
            Some(_) => return Err(wrongtype()),
        };
        s.db.drop_if_empty(&a[1]);
        Ok(Reply::Int(n as i64))
    })())
}

/// ZRANDMEMBER key [count [WITHSCORES]]: members in the set's order (score, then bytes) instead
/// of at random, as HRANDFIELD answers fields in the hash's order; a count covering the set
/// answers it whole from the highest score down, as Redis does.
pub(super) fn zrandmember(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        if a.len() == 2 {
            return Ok(read(s, &a[1])?
                .and_then(|z| z.iter().next().map(|(m, _)| Reply::Bulk(m.clone())))
                .unwrap_or(Reply::Nil));
        }
        let count = match crate::number::parse_i64(&a[2]) {
            Some(c) if c != i64::MIN => c,
            Some(_) => {
                return Err(Reply::err(
                    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                ))
            }
            None => return Err(Reply::err(errors::NOT_INTEGER)),
        };
        let with_scores = match a.len() {
            3 => false,
            4 if is(&a[3], "withscores") => {
                if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                    return Err(Reply::err("ERR value is out of range"));
                }
                true
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        let Some(z) = read(s, &a[1])? else {
            return Ok(Reply::Array(vec![]));
        };
        let mut members: Vec<(&Vec<u8>, f64)> = z.iter().collect();
        if count >= 0 && count as usize >= members.len() {
            members.reverse();
        }
        let n = if count >= 0 {
            (count as usize).min(members.len())
        } else {
            let n = count.unsigned_abs();
            if n > 10_000_000 {
                return Err(Reply::err(
                    "ERR harness: ZRANDMEMBER with a count below -10000000 is not emulated",
                ));
            }
            n as usize
        };
        let mut out = Vec::new();
        for (m, sc) in members.iter().cycle().take(n) {
            out.push(Reply::Bulk(m.to_vec()));
            if with_scores {
                out.push(Reply::Double(*sc));
            }
        }
        Ok(Reply::Array(out))
    })())
}

/// One end of a lex range: `-`, `+`, `[member` or `(member`.
#[derive(Clone)]
enum LexBound {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

impl LexBound {
    fn parse(b: &[u8]) -> Option<LexBound> {
        match b.first()? {
            b'+' if b.len() == 1 => Some(LexBound::Max),
            b'-' if b.len() == 1 => Some(LexBound::Min),
            b'[' => Some(LexBound::Incl(b[1..].to_vec())),
            b'(' => Some(LexBound::Excl(b[1..].to_vec())),
            _ => None,
        }
    }

    /// Redis's `sdscmplex` between `v` and this bound's value.
    fn cmp(&self, v: &[u8]) -> std::cmp::Ordering {
        use std::cmp::Ordering::{Greater, Less};
        match self {
            LexBound::Min => Greater,
            LexBound::Max => Less,
            LexBound::Incl(m) | LexBound::Excl(m) => v.cmp(m),
        }
    }

    fn excl(&self) -> bool {
        matches!(self, LexBound::Excl(_))
    }
}

/// A ZRANGEBYLEX range, walked as Redis walks a listpack sorted set (in score order, starting
/// at the first member not below the minimum).
struct LexRange {
    min: LexBound,
    max: LexBound,
}

impl LexRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<LexRange, Reply> {
        match (LexBound::parse(min), LexBound::parse(max)) {
            (Some(min), Some(max)) => Ok(LexRange { min, max }),
            _ => Err(Reply::err("ERR min or max not valid string range item")),
        }
    }

    fn gte_min(&self, v: &[u8]) -> bool {
        let c = self.min.cmp(v);
        if self.min.excl() {
            c.is_gt()
        } else {
            c.is_ge()
        }
    }

    fn lte_max(&self, v: &[u8]) -> bool {
        let c = self.max.cmp(v);
        if self.max.excl() {
            c.is_lt()
        } else {
            c.is_le()
        }
    }

    /// Redis's `zzlIsInLexRange`.
    fn may_match(&self, z: &SortedSet) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let cmp = match (&self.min, &self.max) {
            (LexBound::Min, LexBound::Min) | (LexBound::Max, LexBound::Max) => Equal,
            (LexBound::Min, _) | (_, LexBound::Max) => Less,
            (LexBound::Max, _) | (_, LexBound::Min) => Greater,
            (LexBound::Incl(a) | LexBound::Excl(a), LexBound::Incl(b) | LexBound::Excl(b)) => {
                a.cmp(b)
            }
        };
        if cmp == Greater || (cmp == Equal && (self.min.excl() || self.max.excl())) {
            return false;
        }
        let (Some((first, _)), Some((last, _))) = (z.iter().next(), z.iter().next_back()) else {
            return false;
        };
        self.gte_min(last) && self.lte_max(first)
    }

    /// The members from where Redis starts (the first not below the minimum, or backwards the
    /// last not above the maximum) to the end, in walking order; empty when Redis finds no
    /// start. Callers stop at the first member out of range.
    fn walk(&self, z: &SortedSet, rev: bool) -> Vec<(Vec<u8>, f64)> {
        if !self.may_match(z) {
            return vec![];
        }
        let all: Vec<(Vec<u8>, f64)> = if rev {
            z.iter().rev().map(|(m, s)| (m.clone(), s)).collect()
        } else {
            z.iter().map(|(m, s)| (m.clone(), s)).collect()
        };
        let start = if rev {
            all.iter().position(|(m, _)| self.lte_max(m))
        } else {
            all.iter().position(|(m, _)| self.gte_min(m))
        };
        match start {
            Some(i) if (rev && self.gte_min(&all[i].0)) || (!rev && self.lte_max(&all[i].0)) => {
                all[i..].to_vec()
            }
            _ => vec![],
        }
    }
}

pub(super) fn zrangebylex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Lex, false)
}

pub(super) fn zrevrangebylex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    zrange_generic(s, a, RangeType::Lex, true)
}

pub(super) fn zlexcount(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let range = LexRange::parse(&a[2], &a[3])?;
        Ok(Reply::Int(read(s, &a[1])?.map_or(0, |z| {
            range
                .walk(z, false)
                .iter()
                .take_while(|(m, _)| range.lte_max(m))
                .count() as i64
        })))
    })())
}

pub(super) fn zremrangebylex(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let range = LexRange::parse(&a[2], &a[3])?;
        let now = s.now_ms;
        let n = match s.db.get_mut(&a[1], now).map(|e| &mut e.value) {
            None => 0,
            Some(Value::ZSet(z)) => {
                let doomed: Vec<Vec<u8>> = range
                    .walk(z, false)
                    .into_iter()
                    .take_while(|(m, _)| range.lte_max(m))
                    .map(|(m, _)| m)
                    .collect();
                doomed.iter().filter(|m| z.remove(m)).count()
            }
            Some(_) => return Err(wrongtype()),
        };
        s.db.drop_if_empty(&a[1]);
        Ok(Reply::Int(n as i64))
    })())
}

#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// ZUNION / ZINTER / ZDIFF (+STORE) and ZINTERCARD, as Redis's `zunionInterDiffGenericCommand`:
/// sets count as score 1, inputs are visited from the smallest (stable for equal sizes) so that
/// sums add up in Redis's order, NaN sums become 0, and the result is in score order.
fn set_op(s: &mut Server, a: &[Vec<u8>], op: SetOp, store: bool, card_only: bool) -> Reply {
    done((|| {
        let name = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
        let numkeys_at = if store { 2 } else { 1 };
        let n = int_arg(&a[numkeys_at])?;
        if n < 1 {
            return Err(Reply::err(format!(
                "ERR at least 1 input key is needed for '{name}' command"
            )));
        }
        if n as usize > a.len() - (numkeys_at + 1) {
            return Err(Reply::err(errors::SYNTAX));
        }
        let n = n as usize;
        let now = s.now_ms;
        let keys = &a[numkeys_at + 1..numkeys_at + 1 + n];
        s.db.check_copies(&name, keys).map_err(Reply::Error)?;
        let mut srcs: Vec<Vec<(Vec<u8>, f64)>> = Vec::with_capacity(n);
        for key in keys {
            srcs.push(match s.db.get_mut(key, now).map(|e| &e.value) {
                None => vec![],
                Some(Value::ZSet(z)) => z.iter().map(|(m, sc)| (m.clone(), sc)).collect(),
                Some(Value::Set(m)) => m.iter().map(|e| (e.clone(), 1.0)).collect(),
                Some(_) => return Err(wrongtype()),
            });
        }
        let mut weights = vec![1.0f64; n];
        let (mut agg, mut withscores, mut limit) = (0u8, false, 0i64);
        let mut j = numkeys_at + 1 + n;
        while j < a.len() {
            let remaining = a.len() - j;
            if op != SetOp::Diff && !card_only && remaining > n && is(&a[j], "weights") {
                for (i, w) in weights.iter_mut().enumerate() {
                    *w = crate::number::parse_f64(&a[j + 1 + i])
                        .ok_or_else(|| Reply::err("ERR weight value is not a float"))?;
                }
                j += 1 + n;
            } else if op != SetOp::Diff && !card_only && remaining >= 2 && is(&a[j], "aggregate") {
                agg = if is(&a[j + 1], "sum") {
                    0
                } else if is(&a[j + 1], "min") {
                    1
                } else if is(&a[j + 1], "max") {
                    2
                } else {
                    return Err(Reply::err(errors::SYNTAX));
                };
                j += 2;
            } else if remaining >= 1 && !store && !card_only && is(&a[j], "withscores") {
                withscores = true;
                j += 1;
            } else if card_only && remaining >= 2 && is(&a[j], "limit") {
                limit = match crate::number::parse_i64(&a[j + 1]) {
                    Some(l) if l >= 0 => l,
                    _ => return Err(Reply::err("ERR LIMIT can't be negative")),
                };
                j += 2;
            } else {
                return Err(Reply::err(errors::SYNTAX));
            }
        }
        // Redis's `zunionInterAggregate`: only a sum is turned from NaN into 0; MIN and MAX
        // keep the C comparisons (NaN never wins, -0 and 0 tie).
        let combine = |acc: f64, v: f64| -> f64 {
            match agg {
                0 => {
                    let r = acc + v;
                    if r.is_nan() {
                        0.0
                    } else {
                        r
                    }
                }
                1 => {
                    if v < acc {
                        v
                    } else {
                        acc
                    }
                }
                _ => {
                    if v > acc {
                        v
                    } else {
                        acc
                    }
                }
            }
        };
        let first_value = |v: f64, w: f64| {
            let r = v * w;
            if r.is_nan() {
                0.0
            } else {
                r
            }
        };
        let mut order: Vec<usize> = (0..n).collect();
        if op != SetOp::Diff {
            order.sort_by_key(|&i| srcs[i].len());
        }
        // The result with its scores as computed (-0 kept, as Redis's reply shows it).
        let mut result: Vec<(Vec<u8>, f64)> = Vec::new();
        let mut index: std::collections::HashMap<Vec<u8>, usize> = Default::default();
        match op {
            SetOp::Union => {
                for &i in &order {
                    for (m, sc) in &srcs[i] {
                        let v = first_value(*sc, weights[i]);
                        match index.get(m) {
                            Some(&at) => result[at].1 = combine(result[at].1, v),
                            None => {
                                index.insert(m.clone(), result.len());
                                result.push((m.clone(), v));
                            }
                        }
                    }
                }
            }
            SetOp::Inter => {
                let first = order[0];
                'members: for (m, sc) in &srcs[first] {
                    let mut acc = first_value(*sc, weights[first]);
                    for &i in &order[1..] {
                        match srcs[i].iter().find(|(x, _)| x == m) {
                            Some((_, v)) => acc = combine(acc, *v * weights[i]),
                            None => continue 'members,
                        }
                    }
                    result.push((m.clone(), acc));
                    if card_only && limit > 0 && result.len() as i64 >= limit {
                        break;
                    }
                }
            }
            SetOp::Diff => {
                for (m, sc) in &srcs[0] {
                    if !srcs[1..].iter().any(|o| o.iter().any(|(x, _)| x == m)) {
                        result.push((m.clone(), *sc));
                    }
                }
            }
        }
        result.sort_by(|x, y| {
            if x.1 < y.1 {
                std::cmp::Ordering::Less
            } else if x.1 > y.1 {
                std::cmp::Ordering::Greater
            } else {
                x.0.cmp(&y.0)
            }
        });
        if card_only {
            return Ok(Reply::Int(result.len() as i64));
        }
        if store {
            let count = result.len();
            if count > 0 {
                let mut z = SortedSet::default();
                for (m, sc) in &result {
                    z.insert(m, *sc);
                }
                s.db.set(&a[1], Value::ZSet(z), None);
            } else {
                s.db.remove(&a[1], now);
            }
            return Ok(Reply::Int(count as i64));
        }
        let mut out = Vec::new();
        for (m, sc) in result {
            out.push(Reply::Bulk(m));
            if withscores {
                out.push(Reply::Double(sc));
            }
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn zunion(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Union, false, false)
}
pub(super) fn zinter(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Inter, false, false)
}
pub(super) fn zdiff(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Diff, false, false)
}
pub(super) fn zunionstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Union, true, false)
}
pub(super) fn zinterstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Inter, true, false)
}
pub(super) fn zdiffstore(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Diff, true, false)
}
pub(super) fn zintercard(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    set_op(s, a, SetOp::Inter, false, true)
}
