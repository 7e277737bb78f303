//! Lua 5.1's pattern matching (`lstrlib.c`), ported to Rust so that it counts its steps: a
//! backtracking pattern runs as long as the script's time limit allows, where the C matcher
//! runs to the end in one call the instruction hook never sees.
//!
//! The semantics are 5.1's, quirks included: a pattern ends at its first NUL byte (the C code
//! reads it as a C string), `gmatch` does not anchor on `^`, `find` past the end of the subject
//! still tries an empty match there, and `%` at the very end of a `gsub` replacement adds a NUL.
//! The one deliberate difference: patterns nested deeper than [`MAX_DEPTH`] answer `pattern
//! too complex` (as Lua 5.2 does) instead of recursing until the C stack overflows.

use mlua::{Lua, MultiValue, Value};

use super::libargs::{self, Args};

/// `LUA_MAXCAPTURES`.
const MAX_CAPTURES: usize = 32;
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;
const L_ESC: u8 = b'%';
const SPECIALS: &[u8] = b"^$*+?.([%-";
/// Recursion depth of the matcher (one level per quantified item or capture still open).
pub(super) const MAX_DEPTH: usize = 200;
/// Steps between two looks at the clock.
const STEPS_PER_CHECK: u32 = 4096;

/// Why a match stopped early.
#[derive(Debug)]
pub(super) enum Stop {
    /// A Lua error (`luaL_error`), without its position.
    Error(String),
    /// An error to raise as it is: the time limit, or one raised by a replacement function.
    Lua(mlua::Error),
    /// A Lua error value raised by a replacement function or a table's `__index`, to raise
    /// again as it is (a table stays a table, as when the C `gsub` lets it through).
    Raise(Value),
    /// The result would not fit under the memory cap.
    Memory,
}

impl From<String> for Stop {
    fn from(s: String) -> Stop {
        Stop::Error(s)
    }
}

impl From<&str> for Stop {
    fn from(s: &str) -> Stop {
        Stop::Error(s.to_string())
    }
}

/// Counts matcher steps and asks `check` every [`STEPS_PER_CHECK`] of them whether to go on.
pub(super) struct Steps<'c> {
    left: u32,
    check: &'c mut dyn FnMut() -> mlua::Result<()>,
}

impl<'c> Steps<'c> {
    /// A counter that calls `check` now and then; its error stops the match.
    pub(super) fn new(check: &'c mut dyn FnMut() -> mlua::Result<()>) -> Steps<'c> {
        Steps {
            left: STEPS_PER_CHECK,
            check,
        }
    }

    fn spend(&mut self, n: u32) -> Result<(), Stop> {
        match self.left.checked_sub(n) {
            Some(l) => {
                self.left = l;
                Ok(())
            }
            None => {
                self.left = STEPS_PER_CHECK;
                (self.check)().map_err(Stop::Lua)
            }
        }
    }
}

/// Steps for comparing `len` bytes.
fn cost(len: usize) -> u32 {
    u32::try_from(len / 64)
        .unwrap_or(u32::MAX)
        .saturating_add(1)
}

/// One capture: where it starts, and its length or `CAP_UNFINISHED` / `CAP_POSITION`.
#[derive(Debug, Clone, Copy, Default)]
struct Capture {
    init: usize,
    len: isize,
}

/// What a finished match captured, as the C code pushes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Captured {
    /// A substring of the subject.
    Text(std::ops::Range<usize>),
    /// A position capture `()`: a 1-based index.
    Position(usize),
}

struct Matcher<'a, 's, 'c> {
    src: &'a [u8],
    pat: &'a [u8],
    level: usize,
    capture: [Capture; MAX_CAPTURES],
    depth: usize,
    steps: &'s mut Steps<'c>,
}

/// `isspace` in the C locale (Rust's `is_ascii_whitespace` leaves out `\v`).
fn is_space(c: u8) -> bool {
    c == b' ' || (b'\t'..=b'\r').contains(&c)
}

fn match_class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => is_space(c),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() {
        res
    } else {
        !res
    }
}

impl<'a, 's, 'c> Matcher<'a, 's, 'c> {
    fn new(src: &'a [u8], pat: &'a [u8], steps: &'s mut Steps<'c>) -> Self {
        Matcher {
            src,
            pat,
            level: 0,
            capture: [Capture::default(); MAX_CAPTURES],
            depth: 0,
            steps,
        }
    }

    /// The pattern byte at `i`; 0 past its end (the C string's terminator).
    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    /// The subject byte at `i`; 0 at its end (Lua strings carry a terminating NUL).
    fn s(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn check_capture(&self, l: u8) -> Result<usize, Stop> {
        let l = l as isize - b'1' as isize;
        if l < 0 || l as usize >= self.level || self.capture[l as usize].len == CAP_UNFINISHED {
            return Err("invalid capture index".into());
        }
        Ok(l as usize)
    }

    fn capture_to_close(&self) -> Result<usize, Stop> {
        (0..self.level)
            .rev()
            .find(|&l| self.capture[l].len == CAP_UNFINISHED)
            .ok_or_else(|| "invalid pattern capture".into())
    }

    fn class_end(&self, mut p: usize) -> Result<usize, Stop> {
        let c = self.p(p);
        p += 1;
        match c {
            L_ESC => {
                if self.p(p) == 0 {
                    return Err("malformed pattern (ends with '%')".into());
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if self.p(p) == 0 {
                        return Err("malformed pattern (missing ']')".into());
                    }
                    let c = self.p(p);
                    p += 1;
                    if c == L_ESC && self.p(p) != 0 {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        break;
                    }
                }
                Ok(p + 1)
            }
            _ => Ok(p),
        }
    }

    /// `matchbracketclass`: `p` at the `[`, `ec` at the closing `]`.
    fn match_bracket_class(&self, c: u8, mut p: usize, ec: usize) -> bool {
        let mut sig = true;
        if self.p(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                break;
            }
            if self.p(p) == L_ESC {
                p += 1;
                if match_class(c, self.p(p)) {
                    return sig;
                }
            } else if self.p(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.p(p - 2) <= c && c <= self.p(p) {
                    return sig;
                }
            } else if self.p(p) == c {
                return sig;
            }
        }
        !sig
    }

    fn single_match(&self, c: u8, p: usize, ep: usize) -> bool {
        match self.p(p) {
            b'.' => true,
            L_ESC => match_class(c, self.p(p + 1)),
            b'[' => self.match_bracket_class(c, p, ep - 1),
            pc => pc == c,
        }
    }

    fn match_balance(&mut self, s: usize, p: usize) -> Result<Option<usize>, Stop> {
        if self.p(p) == 0 || self.p(p + 1) == 0 {
            return Err("unbalanced pattern".into());
        }
        if self.s(s) != self.p(p) {
            return Ok(None);
        }
        let (b, e) = (self.p(p), self.p(p + 1));
        let mut cont = 1;
        let mut s = s + 1;
        while s < self.src.len() {
            self.steps.spend(1)?;
            let c = self.src[s];
            if c == e {
                cont -= 1;
                if cont == 0 {
                    return Ok(Some(s + 1));
                }
            } else if c == b {
                cont += 1;
            }
            s += 1;
        }
        Ok(None)
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Result<Option<usize>, Stop> {
        let mut i = 0;
        while s + i < self.src.len() && self.single_match(self.src[s + i], p, ep) {
            self.steps.spend(1)?;
            i += 1;
        }
        loop {
            if let Some(r) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(r));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Result<Option<usize>, Stop> {
        loop {
            if let Some(r) = self.do_match(s, ep + 1)? {
                return Ok(Some(r));
            }
            if s < self.src.len() && self.single_match(self.src[s], p, ep) {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Result<Option<usize>, Stop> {
        let level = self.level;
        if level >= MAX_CAPTURES {
            return Err("too many captures".into());
        }
        self.capture[level] = Capture { init: s, len: what };
        self.level = level + 1;
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.level -= 1;
        }
        Ok(r)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Result<Option<usize>, Stop> {
        let l = self.capture_to_close()?;
        self.capture[l].len = (s - self.capture[l].init) as isize;
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.capture[l].len = CAP_UNFINISHED;
        }
        Ok(r)
    }

    fn match_capture(&mut self, s: usize, l: u8) -> Result<Option<usize>, Stop> {
        let l = self.check_capture(l)?;
        let cap = self.capture[l];
        // A position capture: the C code compares `(size_t)-2` bytes, which never fit.
        let Ok(len) = usize::try_from(cap.len) else {
            return Ok(None);
        };
        self.steps.spend(cost(len))?;
        if self.src.len() - s >= len && self.src[cap.init..cap.init + len] == self.src[s..s + len] {
            Ok(Some(s + len))
        } else {
            Ok(None)
        }
    }

    fn do_match(&mut self, s: usize, p: usize) -> Result<Option<usize>, Stop> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("pattern too complex".into());
        }
        let r = self.match_here(s, p);
        self.depth -= 1;
        r
    }

    fn match_here(&mut self, mut s: usize, mut p: usize) -> Result<Option<usize>, Stop> {
        loop {
            self.steps.spend(1)?;
            match self.p(p) {
                b'(' => {
                    return if self.p(p + 1) == b')' {
                        self.start_capture(s, p + 2, CAP_POSITION)
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                0 => return Ok(Some(s)),
                b'$' if self.p(p + 1) == 0 => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                L_ESC if self.p(p + 1) == b'b' => match self.match_balance(s, p + 2)? {
                    Some(e) => {
                        s = e;
                        p += 4;
                        continue;
                    }
                    None => return Ok(None),
                },
                L_ESC if self.p(p + 1) == b'f' => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return Err("missing '[' after '%f' in pattern".into());
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    if self.match_bracket_class(previous, p, ep - 1)
                        || !self.match_bracket_class(self.s(s), p, ep - 1)
                    {
                        return Ok(None);
                    }
                    p = ep;
                    continue;
                }
                L_ESC if self.p(p + 1).is_ascii_digit() => {
                    match self.match_capture(s, self.p(p + 1))? {
                        Some(e) => {
                            s = e;
                            p += 2;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                _ => {}
            }
            // A single-character class, perhaps with a quantifier.
            let ep = self.class_end(p)?;
            let m = s < self.src.len() && self.single_match(self.src[s], p, ep);
            match self.p(ep) {
                b'?' => {
                    if m {
                        if let Some(r) = self.do_match(s + 1, ep + 1)? {
                            return Ok(Some(r));
                        }
                    }
                    p = ep + 1;
                }
                b'*' => return self.max_expand(s, p, ep),
                b'+' => {
                    return if m {
                        self.max_expand(s + 1, p, ep)
                    } else {
                        Ok(None)
                    }
                }
                b'-' => return self.min_expand(s, p, ep),
                _ => {
                    if !m {
                        return Ok(None);
                    }
                    s += 1;
                    p = ep;
                }
            }
        }
    }

    fn capture(&self, i: usize, s: usize, e: usize) -> Result<Captured, Stop> {
        if i >= self.level {
            if i == 0 {
                return Ok(Captured::Text(s..e));
            }
            return Err("invalid capture index".into());
        }
        let c = self.capture[i];
        match c.len {
            CAP_UNFINISHED => Err("unfinished capture".into()),
            CAP_POSITION => Ok(Captured::Position(c.init + 1)),
            len => Ok(Captured::Text(c.init..c.init + len as usize)),
        }
    }

    /// `push_captures`: every capture, or the whole match when there are none and `whole`
    /// is given.
    fn captures(&self, whole: Option<(usize, usize)>) -> Result<Vec<Captured>, Stop> {
        let n = if self.level == 0 && whole.is_some() {
            1
        } else {
            self.level
        };
        let (s, e) = whole.unwrap_or((0, 0));
        (0..n).map(|i| self.capture(i, s, e)).collect()
    }
}

/// A pattern as the C code sees it: up to its first NUL.
fn c_pattern(p: &[u8]) -> &[u8] {
    match p.iter().position(|&c| c == 0) {
        Some(n) => &p[..n],
        None => p,
    }
}

/// What `find` or `match` found: the match's bounds and its captures.
#[derive(Debug, PartialEq)]
pub(super) struct Found {
    /// Start and end (exclusive) of the whole match.
    pub span: (usize, usize),
    /// The captures as `find` (`whole` false) or `match` (`whole` true) pushes them.
    pub captures: Vec<Captured>,
}

/// `str_find_aux`: `find` (true) or `match` (false) of `pat` in `src` from `init` (1-based,
/// negative from the end, as Lua takes it); `plain` is find's fourth argument.
pub(super) fn find(
    src: &[u8],
    pat: &[u8],
    init: i64,
    plain: bool,
    find: bool,
    steps: &mut Steps<'_>,
) -> Result<Option<Found>, Stop> {
    let len = src.len();
    let mut init = posrelat(init, len).saturating_sub(1);
    if init > len {
        init = len;
    }
    let cpat = c_pattern(pat);
    if find && (plain || !cpat.iter().any(|c| SPECIALS.contains(c))) {
        return Ok(mem_find(&src[init..], pat, steps)?.map(|at| Found {
            span: (init + at, init + at + pat.len()),
            captures: Vec::new(),
        }));
    }
    let (anchor, p) = match cpat.strip_prefix(b"^") {
        Some(rest) => (true, rest),
        None => (false, cpat),
    };
    let mut m = Matcher::new(src, p, steps);
    let mut s1 = init;
    loop {
        m.level = 0;
        if let Some(e) = m.do_match(s1, 0)? {
            let captures = if find {
                m.captures(None)?
            } else {
                m.captures(Some((s1, e)))?
            };
            return Ok(Some(Found {
                span: (s1, e),
                captures,
            }));
        }
        if s1 >= len || anchor {
            return Ok(None);
        }
        s1 += 1;
    }
}

/// `posrelat` then the 0-based start: a negative position counts from the end.
fn posrelat(pos: i64, len: usize) -> usize {
    let len = len as i64;
    let pos = if pos < 0 { pos + len + 1 } else { pos };
    if pos >= 0 {
        usize::try_from(pos).unwrap_or(usize::MAX)
    } else {
        0
    }
}

/// `lmemfind`: where `needle` first occurs in `hay`.
fn mem_find(hay: &[u8], needle: &[u8], steps: &mut Steps<'_>) -> Result<Option<usize>, Stop> {
    if needle.is_empty() {
        return Ok(Some(0));
    }
    if needle.len() > hay.len() {
        return Ok(None);
    }
    let cost = cost(needle.len());
    for at in 0..=hay.len() - needle.len() {
        if hay[at] == needle[0] {
            steps.spend(cost)?;
            if &hay[at..at + needle.len()] == needle {
                return Ok(Some(at));
            }
        }
    }
    Ok(None)
}

/// `gmatch_aux`: the next match of `pat` in `src` from `pos` (0-based); the position to go on
/// from and the captures (the whole match when there are none).
pub(super) fn gmatch_next(
    src: &[u8],
    pat: &[u8],
    pos: usize,
    steps: &mut Steps<'_>,
) -> Result<Option<(usize, Vec<Captured>)>, Stop> {
    let mut m = Matcher::new(src, c_pattern(pat), steps);
    let mut s = pos;
    while s <= src.len() {
        m.level = 0;
        if let Some(e) = m.do_match(s, 0)? {
            let next = if e == s { e + 1 } else { e };
            return Ok(Some((next, m.captures(Some((s, e)))?)));
        }
        s += 1;
    }
    Ok(None)
}

/// A `gsub` lookup: the captures to the replacement text, `None` to keep the match.
pub(super) type Lookup<'r> = dyn FnMut(&[Captured]) -> Result<Option<Vec<u8>>, Stop> + 'r;

/// What `gsub` puts in place of one match.
pub(super) enum Replacement<'r> {
    /// A string (or number) with `%0`-`%9` and `%%`.
    Text(&'r [u8]),
    /// A function (`all`: it gets every capture) or a table (only the first): `f` answers the
    /// replacement, `None` to keep the match.
    Call {
        /// Pass every capture, not only the first.
        all: bool,
        /// The lookup.
        f: &'r mut Lookup<'r>,
    },
}

/// `str_gsub`: the result and the number of matches replaced, at most `max_n`; `limit` bounds
/// the result's length (past it, [`Stop::Memory`]).
pub(super) fn gsub(
    src: &[u8],
    pat: &[u8],
    mut repl: Replacement<'_>,
    max_n: i64,
    limit: usize,
    steps: &mut Steps<'_>,
) -> Result<(Vec<u8>, i64), Stop> {
    let cpat = c_pattern(pat);
    let (anchor, p) = match cpat.strip_prefix(b"^") {
        Some(rest) => (true, rest),
        None => (false, cpat),
    };
    let mut m = Matcher::new(src, p, steps);
    let mut out = Vec::new();
    let mut s = 0;
    let mut n = 0i64;
    while n < max_n {
        m.level = 0;
        let e = m.do_match(s, 0)?;
        if let Some(e) = e {
            n += 1;
            match &mut repl {
                Replacement::Text(t) => add_s(&m, &mut out, t, s, e, limit)?,
                Replacement::Call { all, f } => {
                    let caps = if *all {
                        m.captures(Some((s, e)))?
                    } else {
                        vec![m.capture(0, s, e)?]
                    };
                    match f(&caps)? {
                        Some(v) => out.extend_from_slice(&v),
                        None => out.extend_from_slice(&src[s..e]),
                    }
                }
            }
            if out.len() > limit {
                return Err(Stop::Memory);
            }
        }
        match e {
            Some(e) if e > s => s = e,
            _ if s < src.len() => {
                out.push(src[s]);
                s += 1;
            }
            _ => break,
        }
        if anchor {
            break;
        }
    }
    if out.len() + (src.len() - s) > limit {
        return Err(Stop::Memory);
    }
    out.extend_from_slice(&src[s..]);
    Ok((out, n))
}

/// `add_s`: a replacement string with its `%` escapes.
fn add_s(
    m: &Matcher<'_, '_, '_>,
    out: &mut Vec<u8>,
    news: &[u8],
    s: usize,
    e: usize,
    limit: usize,
) -> Result<(), Stop> {
    let mut i = 0;
    while i < news.len() {
        if out.len() > limit {
            return Err(Stop::Memory);
        }
        if news[i] != L_ESC {
            out.push(news[i]);
        } else {
            i += 1;
            // Past the end reads the string's terminating NUL.
            let c = news.get(i).copied().unwrap_or(0);
            if !c.is_ascii_digit() {
                out.push(c);
            } else if c == b'0' {
                out.extend_from_slice(&m.src[s..e]);
            } else {
                match m.capture(usize::from(c - b'1'), s, e)? {
                    Captured::Text(r) => out.extend_from_slice(&m.src[r]),
                    Captured::Position(pos) => out.extend_from_slice(pos.to_string().as_bytes()),
                }
            }
        }
        i += 1;
    }
    Ok(())
}

/// `luaL_argerror` as the C library raises it: the function named as its caller called it,
/// `self` not counted in a method call.
fn arg_error(lua: &Lua, narg: usize, extramsg: &str) -> String {
    let (name, method) = lua
        .inspect_stack(1, |d| {
            let n = d.names();
            (
                n.name.map(|s| s.into_owned()),
                n.name_what == Some("method"),
            )
        })
        .unwrap_or((None, false));
    let name = name.unwrap_or_else(|| "?".to_string());
    if method {
        if narg == 1 {
            return format!("calling '{name}' on bad self ({extramsg})");
        }
        return format!("bad argument #{} to '{name}' ({extramsg})", narg - 1);
    }
    format!("bad argument #{narg} to '{name}' ({extramsg})")
}

/// `luaL_checklstring`: a string, or a number as Lua formats it. The Lua string itself, so
/// that a long subject is read in place, not copied on every call.
fn check_string(lua: &Lua, args: &Args, n: usize) -> Result<mlua::String, String> {
    let v = args.get(n - 1);
    let number = |x: f64| {
        lua.create_string(crate::number::format_g(x, 14))
            .map_err(|e| e.to_string())
    };
    match &v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Integer(i)) => number(*i as f64),
        Some(Value::Number(x)) => number(*x),
        other => Err(arg_error(
            lua,
            n,
            &format!(
                "string expected, got {}",
                libargs::type_name(other.as_ref())
            ),
        )),
    }
}

/// `luaL_optinteger`: `(lua_Integer)` of the number, as x86-64 converts it.
fn opt_integer(lua: &Lua, args: &Args, n: usize, default: i64) -> Result<i64, String> {
    let v = args.get(n - 1);
    if matches!(v, None | Some(Value::Nil)) {
        return Ok(default);
    }
    let v = v.as_ref();
    match libargs::to_number(v) {
        Some(x) => Ok(lua_integer(x)),
        None => Err(arg_error(
            lua,
            n,
            &format!("number expected, got {}", libargs::type_name(v)),
        )),
    }
}

/// `(lua_Integer)x` on x86-64: out of range and NaN give `INT64_MIN`.
fn lua_integer(x: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if x.is_nan() || !(-TWO_63..TWO_63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// A matcher error as the script sees it.
fn raise(lua: &Lua, stop: Stop) -> mlua::Result<MultiValue> {
    match stop {
        Stop::Error(m) => libargs::lua_err(lua, m),
        Stop::Lua(e) => Err(e),
        Stop::Raise(v) => libargs::reraise(v),
        Stop::Memory => Err(mlua::Error::MemoryError("not enough memory".into())),
    }
}

fn captured_value(lua: &Lua, src: &[u8], c: &Captured) -> mlua::Result<Value> {
    Ok(match c {
        Captured::Text(r) => Value::String(lua.create_string(&src[r.clone()])?),
        Captured::Position(p) => Value::Number(*p as f64),
    })
}

fn captured_values(lua: &Lua, src: &[u8], caps: &[Captured]) -> mlua::Result<MultiValue> {
    caps.iter().map(|c| captured_value(lua, src, c)).collect()
}

/// `string.find` (`find`) and `string.match`.
fn find_or_match(lua: &Lua, args: &Args, is_find: bool) -> mlua::Result<MultiValue> {
    let checked = check_string(lua, args, 1).and_then(|s| {
        let p = check_string(lua, args, 2)?;
        let init = opt_integer(lua, args, 3, 1)?;
        Ok((s, p, init))
    });
    let (s, p, init) = match checked {
        Ok(v) => v,
        Err(e) => return libargs::lua_err(lua, e),
    };
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let plain = is_find
        && matches!(args.get(3), Some(v) if !matches!(v, Value::Nil | Value::Boolean(false)));
    let mut check = || super::check_time(lua);
    let mut steps = Steps::new(&mut check);
    match find(&s, &p, init, plain, is_find, &mut steps) {
        Ok(None) => Ok(MultiValue::from_iter([Value::Nil])),
        Ok(Some(f)) => {
            let mut out = captured_values(lua, &s, &f.captures)?;
            if is_find {
                out.push_front(Value::Number(f.span.1 as f64));
                out.push_front(Value::Number((f.span.0 + 1) as f64));
            }
            Ok(out)
        }
        Err(stop) => raise(lua, stop),
    }
}

/// The text a replacement function's or table's answer stands for.
fn replacement_text(v: Value) -> Result<Option<Vec<u8>>, Stop> {
    match v {
        Value::Nil | Value::Boolean(false) => Ok(None),
        Value::String(s) => Ok(Some(s.as_bytes().to_vec())),
        Value::Integer(i) => Ok(Some(crate::number::format_g(i as f64, 14).into_bytes())),
        Value::Number(x) => Ok(Some(crate::number::format_g(x, 14).into_bytes())),
        other => Err(Stop::Error(format!(
            "invalid replacement value (a {})",
            libargs::type_name(Some(&other))
        ))),
    }
}

/// How `gsub` calls back into Lua: Lua's own `pcall`, so that an error comes back as the value
/// that was raised, and `t[k]` with metamethods.
struct Callers {
    pcall: mlua::Function,
    index: mlua::Function,
}

impl Callers {
    /// `pcall(f, args...)`: the first result, or the error value to raise again.
    fn call(&self, f: &mlua::Function, args: MultiValue) -> Result<Value, Stop> {
        let mut all = args;
        all.push_front(Value::Function(f.clone()));
        let mut r = self.pcall.call::<MultiValue>(all).map_err(Stop::Lua)?;
        let ok = matches!(r.pop_front(), Some(Value::Boolean(true)));
        let first = r.pop_front().unwrap_or(Value::Nil);
        if ok {
            Ok(first)
        } else {
            Err(Stop::Raise(first))
        }
    }
}

/// `string.gsub`.
fn gsub_fn(lua: &Lua, args: &Args, callers: &Callers) -> mlua::Result<MultiValue> {
    let checked = check_string(lua, args, 1).and_then(|s| {
        let p = check_string(lua, args, 2)?;
        let max_n = opt_integer(lua, args, 4, s.as_bytes().len() as i64 + 1)?;
        // luaL_optint: the low 32 bits of the lua_Integer.
        Ok((s, p, max_n as i32))
    });
    let (s, p, max_n) = match checked {
        Ok(v) => v,
        Err(e) => return libargs::lua_err(lua, e),
    };
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let repl = args.get(2).unwrap_or(Value::Nil);
    let text = match &repl {
        Value::String(t) => Some(t.as_bytes().to_vec()),
        Value::Integer(i) => Some(crate::number::format_g(*i as f64, 14).into_bytes()),
        Value::Number(x) => Some(crate::number::format_g(*x, 14).into_bytes()),
        Value::Function(_) | Value::Table(_) => None,
        _ => {
            let e = arg_error(lua, 3, "string/function/table expected");
            return libargs::lua_err(lua, e);
        }
    };
    let limit = lua
        .app_data_ref::<super::Limits>()
        .map_or(usize::MAX, |l| l.memory_limit)
        .saturating_sub(lua.used_memory());
    let mut check = || super::check_time(lua);
    let mut steps = Steps::new(&mut check);
    let mut call = |caps: &[Captured]| -> Result<Option<Vec<u8>>, Stop> {
        let v = match &repl {
            Value::Function(f) => {
                callers.call(f, captured_values(lua, &s, caps).map_err(Stop::Lua)?)?
            }
            Value::Table(t) => {
                let key = captured_value(lua, &s, &caps[0]).map_err(Stop::Lua)?;
                let args = MultiValue::from_iter([Value::Table(t.clone()), key]);
                callers.call(&callers.index, args)?
            }
            _ => Value::Nil,
        };
        replacement_text(v)
    };
    let replacement = match &text {
        Some(t) => Replacement::Text(t),
        None => Replacement::Call {
            all: matches!(repl, Value::Function(_)),
            f: &mut call,
        },
    };
    match gsub(&s, &p, replacement, i64::from(max_n), limit, &mut steps) {
        Ok((out, n)) => Ok(MultiValue::from_iter([
            Value::String(lua.create_string(&out)?),
            Value::Number(n as f64),
        ])),
        Err(stop) => raise(lua, stop),
    }
}

/// One step of `string.gmatch`'s iterator (the prelude keeps its state): `(subject,
/// pattern, position)` to the next position and the captures, or nothing at the end.
fn gmatch_step(lua: &Lua, args: &Args) -> mlua::Result<MultiValue> {
    let (Some(Value::String(s)), Some(Value::String(p))) = (args.get(0), args.get(1)) else {
        return Err(mlua::Error::runtime("harness: gmatch state lost"));
    };
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let pos = match args.get(2) {
        Some(Value::Integer(i)) => usize::try_from(i).unwrap_or(0),
        Some(Value::Number(x)) => x as usize,
        _ => 0,
    };
    let mut check = || super::check_time(lua);
    let mut steps = Steps::new(&mut check);
    match gmatch_next(&s, &p, pos, &mut steps) {
        Ok(None) => Ok(MultiValue::new()),
        Ok(Some((next, caps))) => {
            let mut out = captured_values(lua, &s, &caps)?;
            out.push_front(Value::Number(next as f64));
            Ok(out)
        }
        Err(stop) => raise(lua, stop),
    }
}

/// Registers `str_find`, `str_match`, `str_gsub` and `gmatch_step` on the prelude's
/// internals table `i`.
pub(super) fn register(lua: &Lua, i: &mlua::Table) -> mlua::Result<()> {
    i.set(
        "str_find",
        libargs::packed(lua, |lua, a: Args| find_or_match(lua, &a, true))?,
    )?;
    i.set(
        "str_match",
        libargs::packed(lua, |lua, a: Args| find_or_match(lua, &a, false))?,
    )?;
    // Registered before the prelude runs: `pcall` is still Lua's own.
    let callers = Callers {
        pcall: lua.globals().get("pcall")?,
        index: lua
            .load("local t, k = ... return t[k]")
            .set_name("=harness")
            .into_function()?,
    };
    i.set(
        "str_gsub",
        libargs::packed(lua, move |lua, a: Args| gsub_fn(lua, &a, &callers))?,
    )?;
    i.set(
        "gmatch_step",
        libargs::packed(lua, |lua, a: Args| gmatch_step(lua, &a))?,
    )?;
    Ok(())
}
