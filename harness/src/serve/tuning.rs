//! The encoding thresholds Redis 7.0 lets CONFIG SET change (`list-max-listpack-size`,
//! `hash-max-listpack-entries`, ...): stored and read back as Redis does, validated over
//! Redis's ranges, aliases included. They change nothing else: the harness keeps its values in
//! its own structures, and OBJECT ENCODING answers from Redis's defaults whatever is set.

/// One threshold: its name, Redis's older alias, its default and its inclusive range;
/// `memory`: the value may carry a unit (`1kb`), as Redis's memory settings do.
struct Setting {
    name: &'static str,
    alias: Option<&'static str>,
    default: i64,
    min: i64,
    max: i64,
    memory: bool,
}

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;

const fn setting(name: &'static str, alias: Option<&'static str>, default: i64) -> Setting {
    Setting {
        name,
        alias,
        default,
        min: 0,
        max: i64::MAX,
        memory: false,
    }
}

const SETTINGS: [Setting; 10] = [
    Setting {
        min: INT_MIN,
        max: INT_MAX,
        ..setting("list-max-listpack-size", Some("list-max-ziplist-size"), -2)
    },
    Setting {
        max: INT_MAX,
        ..setting("list-compress-depth", None, 0)
    },
    setting(
        "hash-max-listpack-entries",
        Some("hash-max-ziplist-entries"),
        512,
    ),
    setting(
        "hash-max-listpack-value",
        Some("hash-max-ziplist-value"),
        64,
    ),
    setting("set-max-intset-entries", None, 512),
    setting(
        "zset-max-listpack-entries",
        Some("zset-max-ziplist-entries"),
        128,
    ),
    setting(
        "zset-max-listpack-value",
        Some("zset-max-ziplist-value"),
        64,
    ),
    Setting {
        memory: true,
        ..setting("stream-node-max-bytes", None, 4096)
    },
    setting("stream-node-max-entries", None, 100),
    Setting {
        memory: true,
        ..setting("hll-sparse-max-bytes", None, 3000)
    },
];

/// The thresholds' current values.
#[derive(Debug, Clone)]
pub(super) struct Tuning([i64; SETTINGS.len()]);

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning(SETTINGS.map(|s| s.default))
    }
}

impl Tuning {
    /// Every name (aliases too) with its value, as CONFIG GET lists them.
    pub(super) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (s, v) in SETTINGS.iter().zip(self.0) {
            out.push((s.name, v.to_string()));
            if let Some(a) = s.alias {
                out.push((a, v.to_string()));
            }
        }
        out
    }

    /// Sets a validated value (from `check`).
    pub(super) fn set(&mut self, (index, value): (usize, i64)) {
        self.0[index] = value;
    }
}

/// `CONFIG SET key value` for a threshold: `None` when `key` is none; else the index and the
/// value to store, or Redis's error.
pub(super) fn check(key: &str, value: &[u8]) -> Option<Result<(usize, i64), String>> {
    let index = SETTINGS
        .iter()
        .position(|s| s.name == key || s.alias == Some(key))?;
    let s = &SETTINGS[index];
    let failed =
        |why: &str| format!("ERR CONFIG SET failed (possibly related to argument '{key}') - {why}");
    let parsed = if s.memory {
        match super::memory_bytes(value).and_then(|v| i64::try_from(v).ok()) {
            Some(v) => v,
            None => return Some(Err(failed("argument must be a memory value"))),
        }
    } else {
        match crate::number::parse_i64(value) {
            Some(v) => v,
            None => return Some(Err(failed("argument couldn't be parsed into an integer"))),
        }
    };
    if !(s.min..=s.max).contains(&parsed) {
        let why = format!("argument must be between {} and {} inclusive", s.min, s.max);
        return Some(Err(failed(&why)));
    }
    Some(Ok((index, parsed)))
}

/// `DEBUG QUICKLIST-PACKED-THRESHOLD size`: accepted (the harness keeps no quicklist nodes) when
/// `size` is a memory value Redis takes.
pub(super) fn packed_threshold(size: &[u8]) -> Result<(), &'static str> {
    match super::memory_bytes(size) {
        Some(v) if v < (4 << 30) => Ok(()),
        _ => Err("ERR argument must be a memory value bigger than 1 and smaller than 4gb"),
    }
}
