//! Geo commands on sorted sets: GEOADD, GEOPOS, GEOHASH, GEODIST, with Redis's 52-bit geohash
//! scores (step 26, latitudes within ±85.05112878), its decoding to the cell's centre, its
//! number formats (`%.17Lf` trimmed for positions, `%.4f` for distances) and its errors.
//! GEORADIUS and GEOSEARCH are not emulated.

use super::{done, float_arg, is, wrongtype, zset};
use crate::keyspace::{SortedSet, Value};
use crate::reply::{errors, Reply};
use crate::server::Server;

const STEP: u32 = 26;
const LAT_MIN: f64 = -85.051_128_78;
const LAT_MAX: f64 = 85.051_128_78;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS_M: f64 = 6_372_797.560_856;
const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// Redis's `geohashEncode` at step 26 in the given latitude range.
fn encode(lon: f64, lat: f64, lat_min: f64, lat_max: f64) -> u64 {
    let scale = (1u64 << STEP) as f64;
    let lat_off = (lat - lat_min) / (lat_max - lat_min) * scale;
    let lon_off = (lon - LONG_MIN) / (LONG_MAX - LONG_MIN) * scale;
    spread(lat_off as u32) | (spread(lon_off as u32) << 1)
}

/// Redis's `decodeGeohash`: the centre of the cell a score names, clamped to the limits.
/// `None` for a negative score or one past 2^64 (what Redis's C cast makes of those is not
/// emulated). A point on the northern or eastern limit encodes past 52 bits, as in Redis.
fn decode(score: f64) -> Option<(f64, f64)> {
    if !(0.0..18_446_744_073_709_551_616.0).contains(&score) {
        return None;
    }
    let bits = score as u64;
    let (ilat, ilon) = (squash(bits), squash(bits >> 1));
    let scale = (1u64 << STEP) as f64;
    let (lat_scale, lon_scale) = (LAT_MAX - LAT_MIN, LONG_MAX - LONG_MIN);
    let lat_lo = LAT_MIN + (f64::from(ilat) * 1.0 / scale) * lat_scale;
    let lat_hi = LAT_MIN + ((f64::from(ilat) + 1.0) * 1.0 / scale) * lat_scale;
    let lon_lo = LONG_MIN + (f64::from(ilon) * 1.0 / scale) * lon_scale;
    let lon_hi = LONG_MIN + ((f64::from(ilon) + 1.0) * 1.0 / scale) * lon_scale;
    let lon = ((lon_lo + lon_hi) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((lat_lo + lat_hi) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((lon, lat))
}

/// `%.17Lf` with trailing zeros (and a trailing dot) removed, as Redis's `LD_STR_HUMAN`.
fn human(v: f64) -> Vec<u8> {
    let mut t = format!("{v:.17}");
    if t.contains('.') {
        while t.ends_with('0') {
            t.pop();
        }
        if t.ends_with('.') {
            t.pop();
        }
    }
    if t == "-0" {
        t = "0".into();
    }
    t.into_bytes()
}

fn read<'a>(s: &'a mut Server, key: &[u8]) -> Result<Option<&'a SortedSet>, Reply> {
    match s.db.get_mut(key, s.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(wrongtype()),
    }
}

fn not_a_geohash() -> Reply {
    Reply::err("ERR harness: a negative sorted-set score as a geohash is not emulated")
}

/// GEOADD key [NX|XX] [CH] longitude latitude member ...: ZADD with the geohash scores.
pub(super) fn geoadd(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let mut idx = 2;
        let (mut nx, mut xx) = (false, false);
        while idx < a.len() {
            if is(&a[idx], "nx") {
                nx = true;
            } else if is(&a[idx], "xx") {
                xx = true;
            } else if !is(&a[idx], "ch") {
                break;
            }
            idx += 1;
        }
        if !(a.len() - idx).is_multiple_of(3) || (nx && xx) {
            return Err(Reply::err(errors::SYNTAX));
        }
        let mut argv: Vec<Vec<u8>> = vec![b"zadd".to_vec()];
        argv.extend(a[1..idx].iter().cloned());
        for t in a[idx..].chunks(3) {
            let lon = float_arg(&t[0])?;
            let lat = float_arg(&t[1])?;
            if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
                return Err(Reply::err(format!(
                    "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
                )));
            }
            argv.push(encode(lon, lat, LAT_MIN, LAT_MAX).to_string().into_bytes());
            argv.push(t[2].clone());
        }
        Ok(zset::zadd(s, &argv))
    })())
}

pub(super) fn geopos(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let z = read(s, &a[1])?;
        let mut out = Vec::with_capacity(a.len() - 2);
        for m in &a[2..] {
            match z.and_then(|z| z.score(m)) {
                None => out.push(Reply::Nil),
                Some(score) => {
                    let (lon, lat) = decode(score).ok_or_else(not_a_geohash)?;
                    out.push(Reply::Array(vec![
                        Reply::Bulk(human(lon)),
                        Reply::Bulk(human(lat)),
                    ]));
                }
            }
        }
        Ok(Reply::Array(out))
    })())
}

pub(super) fn geohash(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let z = read(s, &a[1])?;
        let mut out = Vec::with_capacity(a.len() - 2);
        for m in &a[2..] {
            match z.and_then(|z| z.score(m)) {
                None => out.push(Reply::Nil),
                Some(score) => {
                    let (lon, lat) = decode(score).ok_or_else(not_a_geohash)?;
                    // Re-encoded with the standard latitude range (±90), as Redis does.
                    let bits = encode(lon, lat, -90.0, 90.0);
                    let text: Vec<u8> = (0..11)
                        .map(|i| {
                            let idx = if i == 10 {
                                0
                            } else {
                                (bits >> (52 - (i + 1) * 5)) & 0x1f
                            };
                            ALPHABET[idx as usize]
                        })
                        .collect();
                    out.push(Reply::Bulk(text));
                }
            }
        }
        Ok(Reply::Array(out))
    })())
}

fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let rad = std::f64::consts::PI / 180.0;
    let (lon1r, lon2r) = (lon1 * rad, lon2 * rad);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return EARTH_RADIUS_M * (lat2 * rad - lat1 * rad).abs();
    }
    let (lat1r, lat2r) = (lat1 * rad, lat2 * rad);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let x = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * x.sqrt().asin()
}

pub(super) fn geodist(s: &mut Server, a: &[Vec<u8>]) -> Reply {
    done((|| {
        let to_meter = match a.len() {
            4 => 1.0,
            5 => {
                let u = String::from_utf8_lossy(&a[4]).to_ascii_lowercase();
                match u.as_str() {
                    "m" => 1.0,
                    "km" => 1000.0,
                    "ft" => 0.3048,
                    "mi" => 1609.34,
                    _ => {
                        return Err(Reply::err(
                            "ERR unsupported unit provided. please use M, KM, FT, MI",
                        ))
                    }
                }
            }
            _ => return Err(Reply::err(errors::SYNTAX)),
        };
        let Some(z) = read(s, &a[1])? else {
            return Ok(Reply::Nil);
        };
        let (Some(s1), Some(s2)) = (z.score(&a[2]), z.score(&a[3])) else {
            return Ok(Reply::Nil);
        };
        let (p1, p2) = (
            decode(s1).ok_or_else(not_a_geohash)?,
            decode(s2).ok_or_else(not_a_geohash)?,
        );
        let d = distance(p1.0, p1.1, p2.0, p2.1) / to_meter;
        Ok(Reply::Bulk(format!("{d:.4}").into_bytes()))
    })())
}
