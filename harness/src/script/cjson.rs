//! `cjson.encode` / `cjson.decode` with lua-cjson 2.1.0's defaults as Redis bundles it:
//! numbers as `%.14g`, `/` escaped, `{}` for an empty table, sparse arrays refused, depth 1000.

use mlua::{LightUserData, Lua, MultiValue, Table, Value};

use super::budget::Budget;
use super::libargs::{answer, bad_arg, packed, Args};
use crate::number::format_g;

/// lua-cjson's default depth limit (`encode_max_depth`, `decode_max_depth`).
const MAX_DEPTH: usize = 1000;

/// lua-cjson's settings (`cjson.encode_max_depth(n)`...): kept in the Lua state's app data,
/// so they last from script to script until SCRIPT FLUSH, as Redis keeps them in its VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CjsonConfig {
    encode_max_depth: usize,
    decode_max_depth: usize,
    /// 0 refuse (`off`), 1 encode as `nan`/`inf` (`on`), 2 encode as `null`.
    encode_invalid_numbers: usize,
    encode_number_precision: usize,
    /// 1: lua-cjson keeps its encoding buffer between calls (no effect on the output).
    encode_keep_buffer: usize,
}

impl Default for CjsonConfig {
    fn default() -> Self {
        CjsonConfig {
            encode_max_depth: MAX_DEPTH,
            decode_max_depth: MAX_DEPTH,
            encode_invalid_numbers: 0,
            encode_number_precision: 14,
            encode_keep_buffer: 1,
        }
    }
}

fn config(lua: &Lua) -> CjsonConfig {
    lua.app_data_ref::<CjsonConfig>()
        .map(|c| *c)
        .unwrap_or_default()
}

/// Puts the settings back to lua-cjson's defaults (a new Lua state, as SCRIPT FLUSH makes).
pub(super) fn reset_config(lua: &Lua) {
    lua.set_app_data(CjsonConfig::default());
}
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

fn number(out: &mut Vec<u8>, n: f64, cfg: &CjsonConfig) -> Result<(), String> {
    if !n.is_finite() {
        match cfg.encode_invalid_numbers {
            0 => return Err("Cannot serialise number: must not be NaN or Inf".into()),
            2 => out.extend_from_slice(b"null"),
            // `nan` whatever its sign, as lua-cjson writes it; infinities as `%g` does.
            _ if n.is_nan() => out.extend_from_slice(b"nan"),
            _ => out.extend_from_slice(if n > 0.0 { b"inf" } else { b"-inf" }),
        }
        return Ok(());
    }
    out.extend_from_slice(format_g(n, cfg.encode_number_precision).as_bytes());
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
    cfg: &CjsonConfig,
) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(out, *i as f64, cfg)?,
        Value::Number(n) => number(out, *n, cfg)?,
        Value::String(s) => {
            escape_within(out, &s.as_bytes(), budget)?;
        }
        Value::Table(t) => encode_table(out, t, depth + 1, budget, cfg)?,
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
    cfg: &CjsonConfig,
) -> Result<(), String> {
    budget.step()?;
    if depth > cfg.encode_max_depth {
        return Err(format!("Cannot serialise, excessive nesting ({depth})"));
    }
    if depth > HARNESS_MAX_DEPTH {
        return Err(format!(
            "harness: cannot serialise tables nested deeper than {HARNESS_MAX_DEPTH} levels (Redis allows {})",
            cfg.encode_max_depth
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
                encode_value(out, &v, depth, budget, cfg)?;
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
                        number(out, *i as f64, cfg)?;
                        out.extend_from_slice(b"\":");
                    }
                    Value::Number(n) => {
                        out.push(b'"');
                        number(out, *n, cfg)?;
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
                encode_value(out, &v, depth, budget, cfg)?;
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
    let cfg = config(lua);
    encode_value(
        &mut out,
        &args.get(0).unwrap_or(Value::Nil),
        0,
        &mut budget,
        &cfg,
    )?;
    let s = lua.create_string(&out).map_err(|e| e.to_string())?;
    Ok(MultiValue::from_iter([Value::String(s)]))
}

/// A JSON text being decoded.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    lua: &'a Lua,
    depth: usize,
    max_depth: usize,
    /// A look at the time limit every 1,024 values: an 84 MB object is millions of them.
    budget: Budget<'a>,
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
        self.budget.step()?;
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
        if self.depth > HARNESS_MAX_DEPTH && self.depth <= self.max_depth {
            return Err(format!(
                "harness: JSON nested deeper than {HARNESS_MAX_DEPTH} levels (Redis allows {})",
                self.max_depth
            ));
        }
        if self.depth > self.max_depth {
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
        max_depth: config(lua).decode_max_depth,
        budget: Budget::new(lua),
    };
    let v = p.value()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.expected("the end"));
    }
    Ok(MultiValue::from_iter([v]))
}

/// lua-cjson's `json_arg_init`: at most `max` arguments.
fn at_most(args: &Args, max: usize, f: &str) -> Result<(), String> {
    if args.len() > max {
        return Err(bad_arg(max + 1, f, "found too many arguments"));
    }
    Ok(())
}

/// lua-cjson's `json_integer_option`: nil (or nothing) leaves the setting; answers it.
fn integer_option(
    lua: &Lua,
    args: &Args,
    f: &str,
    range: (i64, i64),
    setting: impl Fn(&mut CjsonConfig) -> &mut usize,
) -> Result<MultiValue, String> {
    at_most(args, 1, f)?;
    let mut cfg = config(lua);
    if !matches!(args.get(0), None | Some(Value::Nil)) {
        let v = super::libargs::c_int(super::libargs::check_number(args, 1, f)?);
        let v = i64::from(v);
        if v < range.0 || v > range.1 {
            let msg = format!("expected integer between {} and {}", range.0, range.1);
            return Err(bad_arg(1, f, &msg));
        }
        *setting(&mut cfg) = v as usize;
        lua.set_app_data(cfg);
    }
    Ok(MultiValue::from_iter([Value::Integer(
        *setting(&mut cfg) as _
    )]))
}

/// lua-cjson's `json_enum_option`: a boolean (when the option has one) or one of `names`;
/// answers the setting as a boolean where it is one, else by name.
fn enum_option(
    lua: &Lua,
    args: &Args,
    f: &str,
    names: &[&str],
    setting: impl Fn(&mut CjsonConfig) -> &mut usize,
) -> Result<MultiValue, String> {
    at_most(args, 1, f)?;
    let mut cfg = config(lua);
    if let Some(v) = args.get(0) {
        *setting(&mut cfg) = match v {
            Value::Boolean(b) => usize::from(b),
            _ => {
                let name = super::libargs::check_bytes(args, 1, f)?;
                let Some(i) = names.iter().position(|n| n.as_bytes() == name) else {
                    let name = String::from_utf8_lossy(&name);
                    return Err(bad_arg(1, f, &format!("invalid option '{name}'")));
                };
                i
            }
        };
        lua.set_app_data(cfg);
    }
    let now = *setting(&mut cfg);
    let v = match now {
        0 | 1 => Value::Boolean(now == 1),
        _ => Value::String(lua.create_string(names[now]).map_err(|e| e.to_string())?),
    };
    Ok(MultiValue::from_iter([v]))
}

fn settings(lua: &Lua, name: &str, args: &Args) -> Result<MultiValue, String> {
    const INT_MAX: i64 = i32::MAX as i64;
    match name {
        "encode_max_depth" => {
            integer_option(lua, args, name, (1, INT_MAX), |c| &mut c.encode_max_depth)
        }
        "decode_max_depth" => {
            integer_option(lua, args, name, (1, INT_MAX), |c| &mut c.decode_max_depth)
        }
        "encode_number_precision" => {
            integer_option(lua, args, name, (1, 14), |c| &mut c.encode_number_precision)
        }
        "encode_invalid_numbers" => enum_option(lua, args, name, &["off", "on", "null"], |c| {
            &mut c.encode_invalid_numbers
        }),
        // A buffer kept or not: the same output either way.
        _ => enum_option(lua, args, name, &["off", "on"], |c| {
            &mut c.encode_keep_buffer
        }),
    }
}

/// The setting functions the harness emulates (the others answer `not emulated`).
pub(super) const SETTINGS: [&str; 5] = [
    "encode_max_depth",
    "decode_max_depth",
    "encode_number_precision",
    "encode_invalid_numbers",
    "encode_keep_buffer",
];

/// `cjson.encode`, `cjson.decode` and the [`SETTINGS`] functions for the prelude, answering
/// `(ok, ...)`.
pub(super) fn create(lua: &Lua) -> mlua::Result<(mlua::Function, mlua::Function, Table)> {
    let enc = packed(lua, |lua, args: Args| answer(lua, encode(lua, &args)))?;
    let dec = packed(lua, |lua, args: Args| answer(lua, decode(lua, &args)))?;
    let table = lua.create_table()?;
    for name in SETTINGS {
        let f = packed(lua, move |lua, args: Args| {
            answer(lua, settings(lua, name, &args))
        })?;
        table.set(name, f)?;
    }
    Ok((enc, dec, table))
}
