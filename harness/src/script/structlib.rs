//! `struct.pack` / `struct.unpack` / `struct.size`: Roberto Ierusalimschy's struct library as
//! Redis bundles it (64-bit `long`, native little-endian, maximum alignment 8).

use mlua::{Lua, MultiValue, Value};

use super::budget::Budget;
use super::libargs::{
    answer, bad_arg, check_bytes, check_number, packed, packed_spread, to_number, Args, Results,
    MAX_C_STACK,
};

const MAXINTSIZE: usize = 32;
const MAXALIGN: usize = 8;

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            little: true,
            align: 1,
        }
    }
}

struct Fmt<'a> {
    f: &'a [u8],
    i: usize,
}

impl Fmt<'_> {
    fn getnum(&mut self, df: usize) -> Result<usize, String> {
        if !self.f.get(self.i).is_some_and(u8::is_ascii_digit) {
            return Ok(df);
        }
        let mut a: usize = 0;
        while let Some(c) = self.f.get(self.i).filter(|c| c.is_ascii_digit()) {
            let d = usize::from(c - b'0');
            if a > (i32::MAX as usize) / 10 || a * 10 > (i32::MAX as usize) - d {
                return Err("integral size overflow".into());
            }
            a = a * 10 + d;
            self.i += 1;
        }
        Ok(a)
    }

    fn optsize(&mut self, opt: u8) -> Result<usize, String> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.getnum(1)?,
            b'i' | b'I' => {
                let sz = self.getnum(4)?;
                if sz > MAXINTSIZE {
                    return Err(format!(
                        "integral size {sz} is larger than limit of {MAXINTSIZE}"
                    ));
                }
                sz
            }
            _ => 0,
        })
    }

    fn control(&mut self, opt: u8, h: &mut Header, fname: &str) -> Result<(), String> {
        match opt {
            b' ' => {}
            b'>' => h.little = false,
            b'<' => h.little = true,
            b'!' => {
                let a = self.getnum(MAXALIGN)?;
                if !a.is_power_of_two() {
                    return Err(format!("alignment {a} is not a power of 2"));
                }
                h.align = a;
            }
            other => {
                return Err(bad_arg(
                    1,
                    fname,
                    &format!("invalid format option '{}'", other as char),
                ))
            }
        }
        Ok(())
    }
}

fn toalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size - (len & (size - 1))) & (size - 1)
}

fn put_integer(out: &mut Vec<u8>, n: f64, little: bool, size: usize) {
    // C: n < 0 ? (long)n : (unsigned long)n, with x86's results out of range.
    let mut value: u64 = if n < 0.0 {
        if n >= -9_223_372_036_854_775_808.0 {
            n as i64 as u64
        } else {
            i64::MIN as u64
        }
    } else {
        n as u64
    };
    let mut buf = vec![0u8; size];
    if little {
        for b in buf.iter_mut() {
            *b = value as u8;
            value = value.checked_shr(8).unwrap_or(0);
        }
    } else {
        for b in buf.iter_mut().rev() {
            *b = value as u8;
            value = value.checked_shr(8).unwrap_or(0);
        }
    }
    out.extend_from_slice(&buf);
}

fn pack(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    // b_pack pushes a nil mark after its arguments: a missing one reads as nil.
    let marked = args.with_nil_mark();
    let args = &marked;
    let fmt = check_bytes(args, 1, "pack")?;
    let mut f = Fmt { f: &fmt, i: 0 };
    let mut h = Header::default();
    let mut arg = 2;
    let mut out = Vec::new();
    let mut budget = Budget::new(lua);
    while f.i < fmt.len() {
        let opt = fmt[f.i];
        f.i += 1;
        let mut size = f.optsize(opt)?;
        let pad = toalign(out.len(), &h, opt, size);
        out.extend(std::iter::repeat_n(0u8, pad));
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = check_number(args, arg, "pack")?;
                arg += 1;
                put_integer(&mut out, n, h.little, size);
            }
            b'x' => out.push(0),
            b'f' => {
                let v = check_number(args, arg, "pack")? as f32;
                arg += 1;
                let b = if h.little {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            b'd' => {
                let v = check_number(args, arg, "pack")?;
                arg += 1;
                let b = if h.little {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                out.extend_from_slice(&b);
            }
            b'c' | b's' => {
                let s = check_bytes(args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    return Err(bad_arg(arg, "pack", "string too short"));
                }
                budget.room(&mut out, size.saturating_add(1))?;
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            other => f.control(other, &mut h, "pack")?,
        }
    }
    let s = lua.create_string(&out).map_err(|e| e.to_string())?;
    Ok(MultiValue::from_iter([Value::String(s)]))
}

fn get_integer(b: &[u8], little: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let bytes: Box<dyn Iterator<Item = &u8>> = if little {
        Box::new(b.iter().rev())
    } else {
        Box::new(b.iter())
    };
    for &c in bytes {
        l = (l << 8) | u64::from(c);
    }
    if !signed {
        return l as i64 as f64;
    }
    let mask = (!0u64)
        .checked_shl((b.len() * 8).saturating_sub(1) as u32)
        .unwrap_or(0);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn unpack(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    let fmt = check_bytes(args, 1, "unpack")?;
    let data = check_bytes(args, 2, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        v => to_number(v.as_ref())
            .ok_or_else(|| bad_arg(3, "unpack", "number expected, got string"))?,
    };
    if start < 1.0 {
        return Err(bad_arg(3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = start as usize - 1;
    let ld = data.len();
    let mut f = Fmt { f: &fmt, i: 0 };
    let mut h = Header::default();
    let lerr = |e: mlua::Error| e.to_string();
    let mut out = Results::new(lua).map_err(lerr)?;
    while f.i < fmt.len() {
        let opt = fmt[f.i];
        f.i += 1;
        let mut size = f.optsize(opt)?;
        pos += toalign(pos, &h, opt, size);
        if size > ld || pos > ld - size {
            return Err(bad_arg(2, "unpack", "data string too short"));
        }
        // Room for an item and the final position: luaL_checkstack(L, 2, ...).
        if args.len() + out.len() + 2 > MAX_C_STACK {
            return Err("stack overflow (too many results)".into());
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let v = get_integer(&data[pos..pos + size], h.little, opt.is_ascii_lowercase());
                out.push(Value::Number(v)).map_err(lerr)?;
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().map_err(|_| "short")?;
                let v = if h.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                out.push(Value::Number(f64::from(v))).map_err(lerr)?;
            }
            b'd' => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().map_err(|_| "short")?;
                let v = if h.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                out.push(Value::Number(v)).map_err(lerr)?;
            }
            b'c' => {
                if size == 0 {
                    let prev = match out.last() {
                        Some(Value::Number(n)) => n,
                        Some(Value::Integer(i)) => i as f64,
                        _ => return Err("format 'c0' needs a previous size".into()),
                    };
                    out.pop().map_err(lerr)?;
                    size = prev as usize;
                    if size > ld || pos > ld - size {
                        return Err(bad_arg(2, "unpack", "data string too short"));
                    }
                }
                out.push(Value::String(
                    lua.create_string(&data[pos..pos + size]).map_err(lerr)?,
                ))
                .map_err(lerr)?;
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&c| c == 0) else {
                    return Err("unfinished string in data".into());
                };
                size = end + 1;
                out.push(Value::String(
                    lua.create_string(&data[pos..pos + end]).map_err(lerr)?,
                ))
                .map_err(lerr)?;
            }
            other => f.control(other, &mut h, "unpack")?,
        }
        pos += size;
    }
    out.push(Value::Number((pos + 1) as f64)).map_err(lerr)?;
    out.into_multi().map_err(lerr)
}

fn size(lua: &Lua, args: &Args) -> Result<MultiValue, String> {
    let fmt = check_bytes(args, 1, "size")?;
    let mut f = Fmt { f: &fmt, i: 0 };
    let mut h = Header::default();
    let mut pos = 0usize;
    while f.i < fmt.len() {
        let opt = fmt[f.i];
        f.i += 1;
        let size = f.optsize(opt)?;
        pos += toalign(pos, &h, opt, size);
        if opt == b's' {
            return Err(bad_arg(1, "size", "option 's' has no fixed size"));
        }
        if opt == b'c' && size == 0 {
            return Err(bad_arg(1, "size", "option 'c0' has no fixed size"));
        }
        if !matches!(
            opt,
            b'b' | b'B'
                | b'h'
                | b'H'
                | b'l'
                | b'L'
                | b'T'
                | b'i'
                | b'I'
                | b'x'
                | b'f'
                | b'd'
                | b'c'
        ) {
            f.control(opt, &mut h, "size")?;
        }
        pos += size;
    }
    let _ = lua;
    Ok(MultiValue::from_iter([Value::Number(pos as f64)]))
}

/// `pack`, `unpack` and `size` for the prelude.
pub(super) fn create(lua: &Lua) -> mlua::Result<[mlua::Function; 3]> {
    Ok([
        packed(lua, |lua, a: Args| answer(lua, pack(lua, &a)))?,
        packed_spread(lua, |lua, a: Args| answer(lua, unpack(lua, &a)))?,
        packed(lua, |lua, a: Args| answer(lua, size(lua, &a)))?,
    ])
}
