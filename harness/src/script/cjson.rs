//! `cjson.encode` / `cjson.decode` with lua-cjson 2.1.0's defaults as Redis bundles it:
//! numbers as `%.14g`, `/` escaped, `{}` for an empty table, sparse arrays refused, depth 1000.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::budget::Budget;
use super::libargs::{answer, bad_arg, packed, Args};
use crate::number::format_g;

/// lua-cjson's default depth limit (`encode_max_depth`, `decode_max_depth`).
const MAX_DEPTH: usize = 1000;
/// The harness recurses on the caller's stack: it stops earlier than Redis, with its own error.
const HARNESS_MAX_DEPTH: usize = 200;

/// How many bytes [`escape`] writes for byte `c`.
fn escaped_width(c: u8) -> usize {
    match c {
        b'"' | b'\\' | b'/' | b'\n' | b'\r' | b'\t' | 8 | 12 => 2,
        0..=0x1f | 0x7f => 6,
        _ => 1,
    }
}

/// How many bytes [`escape`] writes for `s`, quotes included.
fn escaped_len(s: &[u8]) -> usize {
    2 + s.iter().map(|&c| escaped_width(c)).sum::<usize>()
}

/// `s` as a JSON string, when it fits in the budget.
fn escape_within(out: &mut Vec<u8>, s: &[u8], budget: &mut Budget) -> Result<(), String> {
    budget.room(out, escaped_len(s))?;
    escape(out, s);
    Ok(())
}

fn escape(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    let mut plain = 0;
    for (i, &c) in s.iter().enumerate() {
        if escaped_width(c) == 1 {
            continue;
        }
        out.extend_from_slice(&s[plain..i]);
        plain = i + 1;
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            8 => out.extend_from_slice(b"\\b"),
            12 => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            _ => out.push(c),
        }
    }
    out.extend_from_slice(&s[plain..]);
    out.push(b'"');
}

fn number(out: &mut Vec<u8>, n: f64) -> Result<(), String> {
    if !n.is_finite() {
        return Err("Cannot serialise number: must not be NaN or Inf".into());
    }
    out.extend_from_slice(format_g(n, 14).as_bytes());
    Ok(())
}

fn type_error(v: &Value) -> String {
    let name = super::libargs::type_name(Some(v));
    format!("Cannot serialise {name}: type not supported")
}

fn encode_value(
    out: &mut Vec<u8>,
    v: &Value,
    depth: usize,
    budget: &mut Budget,
) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(out, *i as f64)?,
        Value::Number(n) => number(out, *n)?,
        Value::String(s) => {
            escape_within(out, &s.as_bytes(), budget)?;
        }
        Value::Table(t) => encode_table(out, t, depth + 1, budget)?,
        other => return Err(type_error(other)),
    }
    Ok(())
}

/// lua-cjson's `lua_array_length`: the array length, or `None` for an object.
fn array_length(t: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0f64, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| e.to_string())?;
        let k = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if k.floor() == k && k >= 1.0 {
            max = max.max(k);
            items += 1;
        } else {
            return Ok(None);
        }
    }
    if max > (items * 2) as f64 && max > 10.0 {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok(if max > 0.0 { Some(max as usize) } else { None })
}

/// One table; a table met again (a DAG: `t = {t, t}` forty times) is encoded again, as
/// lua-cjson does, each visit counted against the time limit.
fn encode_table(
    out: &mut Vec<u8>,
    t: &Table,
    depth: usize,
    budget: &mut Budget,
) -> Result<(), String> {
    budget.step()?;
    if depth > MAX_DEPTH {
        return Err(format!("Cannot serialise, excessive nesting ({depth})"));
    }
    if depth > HARNESS_MAX_DEPTH {
        return Err(format!(
            "harness: cannot serialise tables nested deeper than {HARNESS_MAX_DEPTH} levels (Redis allows {MAX_DEPTH})"
        ));
    }
    match array_length(t)? {
        Some(len) => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                let v: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                encode_value(out, &v, depth, budget)?;
            }
            out.push(b']');
        }
        None => {
            out.push(b'{');
            let mut first = true;
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| e.to_string())?;
                if !first {
                    out.push(b',');
                }
                first = false;
                match &k {
                    Value::Integer(i) => {
                        out.push(b'"');
                        number(out, *i as f64)?;
                        out.extend_from_slice(b"\":");
                    }
                    Value::Number(n) => {
                        out.push(b'"');
                        number(out, *n)?;
                        out.extend_from_slice(b"\":");
                    }
                    Value::String(s) => {
                        escape_within(out, &s.as_bytes(), budget)?;
                        out.push(b':');
                    }
                    other => {
                        let name = super::libargs::type_name(Some(other));
                        return Err(format!(
                            "Cannot serialise {name}: table key must be a number or string"
                        ));
                    }
                }
                encode_value(out, &v, depth, budget)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn encode(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    if args.len() != 1 {
        return Err(bad_arg(1, "encode", "expected 1 argument"));
    }
    let mut out = Vec::new();
    let mut budget = Budget::new(lua);
    encode_value(&mut out, &args.get(0).unwrap_or(Value::Nil), 0, &mut budget)?;
    let s = lua.create_string(&out).map_err(|e| e.to_string())?;
    Ok(MultiValue::from_iter([Value::String(s)]))
}

/// A JSON text being decoded.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    lua: &'a Lua,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// The token name lua-cjson reports at the current position.
    fn token_name(&self) -> &'static str {
        match self.s.get(self.i) {
            None => "T_END",
            Some(b'{') => "T_OBJ_BEGIN",
            Some(b'}') => "T_OBJ_END",
            Some(b'[') => "T_ARR_BEGIN",
            Some(b']') => "T_ARR_END",
            Some(b',') => "T_COMMA",
            Some(b':') => "T_COLON",
            Some(b'"') => "T_STRING",
            Some(b'-' | b'0'..=b'9') => "T_NUMBER",
            Some(b't' | b'f') => "T_BOOLEAN",
            Some(b'n') => "T_NULL",
            Some(_) => "invalid token",
        }
    }

    fn expected(&self, what: &str) -> String {
        format!(
            "Expected {what} but found {} at character {}",
            self.token_name(),
            self.i + 1
        )
    }

    fn value(&mut self) -> Result<Value, String> {
        self.ws();
        let lua_err = |e: mlua::Error| e.to_string();
        match self.s.get(self.i) {
            Some(b'{') => {
                self.nest()?;
                self.i += 1;
                let t = self.lua.create_table().map_err(lua_err)?;
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(Value::Table(t));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(self.expected("object key string"));
                    }
                    let k = self.string()?;
                    let k = self.lua.create_string(&k).map_err(lua_err)?;
                    self.ws();
                    if self.s.get(self.i) != Some(&b':') {
                        return Err(self.expected("colon"));
                    }
                    self.i += 1;
                    let v = self.value()?;
                    t.raw_set(k, v).map_err(lua_err)?;
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        _ => return Err(self.expected("comma or object end")),
                    }
                }
                self.depth -= 1;
                Ok(Value::Table(t))
            }
            Some(b'[') => {
                self.nest()?;
                self.i += 1;
                let t = self.lua.create_table().map_err(lua_err)?;
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(Value::Table(t));
                }
                let mut n = 1;
                loop {
                    let v = self.value()?;
                    t.raw_set(n, v).map_err(lua_err)?;
                    n += 1;
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            break;
                        }
                        _ => return Err(self.expected("comma or array end")),
                    }
                }
                self.depth -= 1;
                Ok(Value::Table(t))
            }
            Some(b'"') => {
                let s = self.string()?;
                Ok(Value::String(self.lua.create_string(&s).map_err(lua_err)?))
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Value::LightUserData(LightUserData(std::ptr::null_mut())))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.expected("value")),
        }
    }

    fn nest(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > HARNESS_MAX_DEPTH && self.depth <= MAX_DEPTH {
            return Err(format!(
                "harness: JSON nested deeper than {HARNESS_MAX_DEPTH} levels (Redis allows {MAX_DEPTH})"
            ));
        }
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth,
                self.i + 1
            ));
        }
        Ok(())
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        while self.i < self.s.len()
            && matches!(
                self.s[self.i],
                b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
            )
        {
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        text.parse::<f64>().map(Value::Number).map_err(|_| {
            format!(
                "Expected value but found invalid number at character {}",
                start + 1
            )
        })
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        let start = self.i;
        self.i += 1;
        let mut out = Vec::new();
        let bad =
            |what: &str| format!("Expected value but found {what} at character {}", start + 1);
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err(bad("unexpected end of string"));
            };
            self.i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(bad("unexpected end of string"));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let cp = self
                                .hex4()
                                .ok_or_else(|| bad("invalid unicode escape code"))?;
                            let cp = if (0xD800..0xDC00).contains(&cp) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(bad("invalid unicode escape code"));
                                }
                                self.i += 2;
                                let lo = self
                                    .hex4()
                                    .ok_or_else(|| bad("invalid unicode escape code"))?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(bad("invalid unicode escape code"));
                                }
                                0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                cp
                            };
                            let ch = char::from_u32(cp)
                                .ok_or_else(|| bad("invalid unicode escape code"))?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(bad("invalid escape code")),
                    }
                }
                _ => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.s.get(self.i..self.i + 4)?;
        let v = u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
        self.i += 4;
        Some(v)
    }
}

fn decode(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    if args.len() != 1 {
        return Err(bad_arg(1, "decode", "expected 1 argument"));
    }
    let text = super::libargs::check_bytes(args, 1, "decode")?;
    let mut p = Parser {
        s: &text,
        i: 0,
        lua,
        depth: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.expected("the end"));
    }
    Ok(MultiValue::from_iter([v]))
}

/// `cjson.encode` and `cjson.decode` for the prelude, answering `(ok, ...)`.
pub fn create(lua: &Lua) -> mlua::Result<(mlua::Function, mlua::Function)> {
    let enc = packed(lua, |lua, args: Args| answer(lua, encode(lua, &args)))?;
    let dec = packed(lua, |lua, args: Args| answer(lua, decode(lua, &args)))?;
    Ok((enc, dec))
}
