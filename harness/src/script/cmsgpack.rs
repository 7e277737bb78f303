//! `cmsgpack.pack` / `cmsgpack.unpack`: lua-cmsgpack 0.4.0 as Redis bundles it.

use mlua::{Lua, MultiValue, Table, Value};

use super::budget::Budget;
use super::libargs::{answer, packed, packed_spread, Args, Results, MAX_C_STACK};

const MAX_NESTING: usize = 16;

fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_number(out: &mut Vec<u8>, n: f64) {
    // IS_INT64_EQUIVALENT: finite and equal to its int64 cast.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_63..TWO_63).contains(&n) && (n as i64) as f64 == n {
        encode_int(out, n as i64);
    } else if f64::from(n as f32) == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_bytes(out: &mut Vec<u8>, b: &[u8], budget: &mut Budget) -> Result<(), String> {
    budget.room(out, b.len().saturating_add(5))?;
    let n = b.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(b);
    Ok(())
}

/// lua-cmsgpack's `table_is_an_array`: only positive integer keys, with no hole.
fn is_array(t: &Table) -> bool {
    let (mut count, mut max) = (0f64, 0f64);
    for (k, _) in t.pairs::<Value, Value>().flatten() {
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return false,
        };
        if n <= 0.0 || n.fract() != 0.0 {
            return false;
        }
        max = max.max(n);
        count += 1.0;
    }
    max == count
}

/// One value; a table met again (a DAG) is packed again, as lua-cmsgpack does, each visit
/// counted against the time limit.
fn encode(out: &mut Vec<u8>, v: &Value, level: usize, budget: &mut Budget) -> Result<(), String> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => encode_number(out, *i as f64),
        Value::Number(n) => encode_number(out, *n),
        Value::String(s) => encode_bytes(out, &s.as_bytes(), budget)?,
        Value::Table(t) if level < MAX_NESTING => {
            budget.step()?;
            budget.room(out, 0)?;
            if is_array(t) {
                let len = t.raw_len();
                header(out, len, 0x90, 0xdc, 0xdd);
                for i in 1..=len {
                    let item: Value = t.raw_get(i).unwrap_or(Value::Nil);
                    encode(out, &item, level + 1, budget)?;
                }
            } else {
                // Counted, then walked again as lua-cmsgpack does: collecting the pairs
                // would hold every key and value at once (mlua's ~8,000 reference slots).
                let count = t.pairs::<Value, Value>().count();
                header(out, count, 0x80, 0xde, 0xdf);
                for (k, v) in t.pairs::<Value, Value>().flatten() {
                    encode(out, &k, level + 1, budget)?;
                    encode(out, &v, level + 1, budget)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

fn header(out: &mut Vec<u8>, n: usize, fix: u8, b16: u8, b32: u8) {
    if n < 16 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn pack(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    if args.is_empty() {
        return Err("bad argument #0 to 'pack' (MessagePack pack needs input.)".into());
    }
    // mp_pack makes room for a copy of its arguments on the C stack.
    if 2 * args.len() > MAX_C_STACK {
        return Err("bad argument #0 to 'pack' (Too many arguments for MessagePack pack.)".into());
    }
    let mut out = Vec::new();
    let mut budget = Budget::new(lua);
    for a in args.iter() {
        encode(&mut out, &a, 0, &mut budget)?;
    }
    let s = lua.create_string(&out).map_err(|e| e.to_string())?;
    Ok(MultiValue::from_iter([Value::String(s)]))
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    /// A look at the time limit every 1,024 values: a 60 MB map is millions of them.
    budget: Budget<'a>,
}

/// Nesting beyond this is refused (the harness would otherwise recurse without bound).
const MAX_DECODE_DEPTH: usize = 200;

const MISSING: &str = "Missing bytes in input.";

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let s = self.b.get(self.i..self.i + n).ok_or(MISSING)?;
        self.i += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |a, &c| (a << 8) | u64::from(c)))
    }

    fn value(&mut self, lua: &Lua) -> Result<Value, String> {
        self.budget.step()?;
        self.depth += 1;
        if self.depth > MAX_DECODE_DEPTH {
            return Err("harness: MessagePack data nested more than 200 levels".into());
        }
        let v = self.value_inner(lua);
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self, lua: &Lua) -> Result<Value, String> {
        let lerr = |e: mlua::Error| e.to_string();
        let c = self.take(1)?[0];
        let num = |v: f64| Ok(Value::Number(v));
        match c {
            0x00..=0x7f => num(f64::from(c)),
            0xe0..=0xff => num(f64::from(c as i8)),
            0xcc => num(self.uint(1)? as f64),
            0xcd => num(self.uint(2)? as f64),
            0xce => num(self.uint(4)? as f64),
            0xcf => num(self.uint(8)? as f64),
            0xd0 => num(f64::from(self.uint(1)? as u8 as i8)),
            0xd1 => num(f64::from(self.uint(2)? as u16 as i16)),
            0xd2 => num(f64::from(self.uint(4)? as u32 as i32)),
            0xd3 => num(self.uint(8)? as i64 as f64),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xca => num(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => num(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf | 0xd9 | 0xda | 0xdb | 0xc4 | 0xc5 | 0xc6 => {
                let n = match c {
                    0xa0..=0xbf => usize::from(c & 0x1f),
                    0xd9 | 0xc4 => self.uint(1)? as usize,
                    0xda | 0xc5 => self.uint(2)? as usize,
                    _ => self.uint(4)? as usize,
                };
                let s = self.take(n)?;
                Ok(Value::String(lua.create_string(s).map_err(lerr)?))
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = match c {
                    0x90..=0x9f => usize::from(c & 0x0f),
                    0xdc => self.uint(2)? as usize,
                    _ => self.uint(4)? as usize,
                };
                let t = lua.create_table().map_err(lerr)?;
                for i in 1..=n {
                    let v = self.value(lua)?;
                    t.raw_set(i, v).map_err(lerr)?;
                }
                Ok(Value::Table(t))
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = match c {
                    0x80..=0x8f => usize::from(c & 0x0f),
                    0xde => self.uint(2)? as usize,
                    _ => self.uint(4)? as usize,
                };
                let t = lua.create_table().map_err(lerr)?;
                for _ in 0..n {
                    let k = self.value(lua)?;
                    let v = self.value(lua)?;
                    if k != Value::Nil {
                        t.raw_set(k, v).map_err(lerr)?;
                    }
                }
                Ok(Value::Table(t))
            }
            _ => Err("Bad data format in input.".into()),
        }
    }
}

/// lua-cmsgpack's `mp_unpack_full`: up to `limit` objects of `b` from `offset` (`limit` and
/// `offset` both 0: every object, and no offset answered); else the offset after them (-1
/// at the end of the input), then the objects. `stacked`: the values on the C function's
/// stack besides the results.
fn unpack_full(
    lua: &Lua,
    b: &[u8],
    limit: i32,
    offset: i32,
    stacked: usize,
) -> Result<MultiValue, String> {
    let all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        // lua-cmsgpack prints the input's length where it means the limit.
        return Err(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            b.len() as i32
        ));
    }
    let start = offset as usize;
    if start > b.len() {
        return Err(format!(
            "Start offset {offset} greater than input length {}.",
            b.len() as i32
        ));
    }
    let limit = if all { usize::MAX } else { limit as usize };
    let mut r = Reader {
        b,
        i: start,
        depth: 0,
        budget: Budget::new(lua),
    };
    let lerr = |e: mlua::Error| e.to_string();
    let mut out = Results::new(lua).map_err(lerr)?;
    if !all {
        // The offset goes first; its slot is filled once the objects are read.
        out.push(Value::Nil).map_err(lerr)?;
    }
    let mut objects = 0;
    while r.i < b.len() && objects < limit {
        // Each object needs a free C stack slot beside the arguments (luaL_checkstack).
        if stacked + objects + 1 > MAX_C_STACK {
            return Err(
                "stack overflow (too many return values at once; use unpack_one or \
                        unpack_limit instead.)"
                    .into(),
            );
        }
        out.push(r.value(lua)?).map_err(lerr)?;
        objects += 1;
    }
    if !all {
        let next = if r.i == b.len() { -1 } else { r.i as i64 };
        out.set(1, Value::Integer(next as _)).map_err(lerr)?;
    }
    out.into_multi().map_err(lerr)
}

/// `luaL_optinteger(L, n, 0)` as lua-cmsgpack reads it into a C `int`.
fn opt_int(args: &Args, n: usize, f: &str) -> Result<i32, String> {
    match args.get(n - 1) {
        None | Some(Value::Nil) => Ok(0),
        Some(_) => Ok(super::libargs::c_int(super::libargs::check_number(
            args, n, f,
        )?)),
    }
}

fn unpack(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    let b = super::libargs::check_bytes(args, 1, "unpack")?;
    unpack_full(lua, &b, 0, 0, args.len())
}

/// `cmsgpack.unpack_one(s [, offset])`: the offset after one object, then the object.
fn unpack_one(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    let offset = opt_int(args, 2, "unpack_one")?;
    let b = super::libargs::check_bytes(args, 1, "unpack_one")?;
    unpack_full(lua, &b, 1, offset, 1)
}

/// `cmsgpack.unpack_limit(s, limit [, offset])`.
fn unpack_limit(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    let f = "unpack_limit";
    let limit = super::libargs::c_int(super::libargs::check_number(args, 2, f)?);
    let offset = opt_int(args, 3, f)?;
    let b = super::libargs::check_bytes(args, 1, f)?;
    unpack_full(lua, &b, limit, offset, 1)
}

/// `pack`, `unpack`, `unpack_one` and `unpack_limit` for the prelude.
pub(super) fn create(lua: &Lua) -> mlua::Result<[mlua::Function; 4]> {
    Ok([
        packed(lua, |lua, a: Args| answer(lua, pack(lua, &a)))?,
        packed_spread(lua, |lua, a: Args| answer(lua, unpack(lua, &a)))?,
        packed_spread(lua, |lua, a: Args| answer(lua, unpack_one(lua, &a)))?,
        packed_spread(lua, |lua, a: Args| answer(lua, unpack_limit(lua, &a)))?,
    ])
}
