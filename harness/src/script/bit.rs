//! `bit`: LuaBitOp 1.0 as Redis bundles it (32-bit operations on Lua numbers).

use mlua::{IntoLuaMulti, Lua, MultiValue, Table};

use super::libargs::{answer, bad_arg, packed, to_number, type_name, Args};

/// LuaBitOp's `barg`: the number rounded with the 2^52+2^51 trick, its low 32 bits.
fn barg(args: &Args, n: usize, f: &str) -> Result<u32, String> {
    let v = args.get(n - 1);
    let v = v.as_ref();
    let num = to_number(v).unwrap_or(0.0);
    let b = (num + 6_755_399_441_055_744.0).to_bits() as u32;
    if b == 0 && to_number(v).is_none() {
        return Err(bad_arg(
            n,
            f,
            &format!("number expected, got {}", type_name(v)),
        ));
    }
    Ok(b)
}

fn ret(lua: &Lua, b: u32) -> Result<MultiValue, String> {
    f64::from(b as i32)
        .into_lua_multi(lua)
        .map_err(|e| e.to_string())
}

type BitFn = fn(&Lua, &Args) -> Result<MultiValue, String>;

fn fold(lua: &Lua, a: &Args, f: &str, op: fn(u32, u32) -> u32) -> Result<MultiValue, String> {
    let mut b = barg(a, 1, f)?;
    for i in (2..=a.len()).rev() {
        b = op(b, barg(a, i, f)?);
    }
    ret(lua, b)
}

fn shift(lua: &Lua, a: &Args, f: &str, op: fn(u32, u32) -> u32) -> Result<MultiValue, String> {
    let b = barg(a, 1, f)?;
    let n = barg(a, 2, f)? & 31;
    ret(lua, op(b, n))
}

const FUNCS: &[(&str, BitFn)] = &[
    ("tobit", |l, a| ret(l, barg(a, 1, "tobit")?)),
    ("bnot", |l, a| ret(l, !barg(a, 1, "bnot")?)),
    ("bswap", |l, a| ret(l, barg(a, 1, "bswap")?.swap_bytes())),
    ("band", |l, a| fold(l, a, "band", |x, y| x & y)),
    ("bor", |l, a| fold(l, a, "bor", |x, y| x | y)),
    ("bxor", |l, a| fold(l, a, "bxor", |x, y| x ^ y)),
    ("lshift", |l, a| shift(l, a, "lshift", |x, n| x << n)),
    ("rshift", |l, a| shift(l, a, "rshift", |x, n| x >> n)),
    ("arshift", |l, a| {
        shift(l, a, "arshift", |x, n| ((x as i32) >> n) as u32)
    }),
    ("rol", |l, a| shift(l, a, "rol", u32::rotate_left)),
    ("ror", |l, a| shift(l, a, "ror", u32::rotate_right)),
    ("tohex", tohex),
];

fn tohex(lua: &Lua, a: &Args) -> Result<MultiValue, String> {
    let mut b = barg(a, 1, "tohex")?;
    let mut n: i32 = if a.len() < 2 {
        8
    } else {
        barg(a, 2, "tohex")? as i32
    };
    let mut digits = b"0123456789abcdef";
    if n < 0 {
        // Redis's LuaBitOp turns INT_MIN into INT_MIN + 1 before negating.
        n = n.saturating_neg();
        digits = b"0123456789ABCDEF";
    }
    let n = n.clamp(0, 8) as usize;
    let mut buf = vec![b'0'; n];
    for slot in buf.iter_mut().rev() {
        *slot = digits[(b & 15) as usize];
        b >>= 4;
    }
    lua.create_string(&buf)
        .and_then(|s| s.into_lua_multi(lua))
        .map_err(|e| e.to_string())
}

/// The `bit` functions for the prelude, answering `(ok, ...)`.
pub(super) fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for &(name, f) in FUNCS {
        t.raw_set(
            name,
            packed(lua, move |lua, args: Args| answer(lua, f(lua, &args)))?,
        )?;
    }
    Ok(t)
}
