//! `observe:top=N`: the hottest keys (most commands) and the biggest values (largest replies)
//! per window, in bounded memory whatever the number of keys.
//!
//! Hot keys use the Space-Saving algorithm (Metwally et al.): `4 N` counters; a key not counted
//! yet takes over the smallest counter, inheriting its count as an overestimate (`error`), so a
//! key that really is among the top `N` is never missed. Big values keep the `N` largest
//! replies seen (one entry per key). Each window's lists are kept (the last
//! [`WINDOWS_KEPT`]), and the report holds them.

use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use serde::Serialize;

use crate::plugin::PluginCommand;

/// Windows kept for the report.
pub(super) const WINDOWS_KEPT: usize = 60;
/// Bytes of a key kept (longer keys are cut, marked with `...`).
const KEY_BYTES: usize = 200;

/// One hot key of a window.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HotKey {
    /// The key (lossy UTF-8, cut at 200 bytes).
    pub key: String,
    /// Commands on it in the window (an upper bound: the count may include up to `error` of
    /// other keys').
    pub commands: u64,
    /// How much `commands` may overcount.
    pub error: u64,
}

/// One big value of a window.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct BigValue {
    /// The key.
    pub key: String,
    /// The largest reply to a command on it, in bytes (RESP, as sent).
    pub bytes: u64,
    /// The command that got that reply.
    pub command: String,
}

/// One window's lists.
#[derive(Debug, Clone, Serialize)]
pub struct TopWindow {
    /// Seconds from the proxy's start to the window's start.
    pub start_s: f64,
    /// The window's length in seconds.
    pub window_s: f64,
    /// Commands seen on keys in the window.
    pub commands: u64,
    /// The hottest keys, hottest first.
    pub hot_keys: Vec<HotKey>,
    /// The biggest values, biggest first.
    pub big_values: Vec<BigValue>,
}

/// The lists being filled, and the windows done.
#[derive(Debug)]
pub(super) struct Top {
    n: usize,
    window: Duration,
    started: Instant,
    window_start: Instant,
    commands: u64,
    /// Key → (count, error).
    counters: FnvHashMap<Vec<u8>, (u64, u64)>,
    big: Vec<(Vec<u8>, u64, String)>,
    done: Vec<TopWindow>,
}

fn shown(key: &[u8]) -> String {
    if key.len() <= KEY_BYTES {
        String::from_utf8_lossy(key).into_owned()
    } else {
        format!("{}...", String::from_utf8_lossy(&key[..KEY_BYTES]))
    }
}

impl Top {
    /// Top `n` per `window`.
    pub(super) fn new(n: usize, window: Duration, started: Instant) -> Top {
        Top {
            n: n.max(1),
            window: window.max(Duration::from_millis(100)),
            started,
            window_start: started,
            commands: 0,
            counters: FnvHashMap::default(),
            big: Vec::new(),
            done: Vec::new(),
        }
    }

    fn capacity(&self) -> usize {
        self.n * 4
    }

    /// A command on `key`.
    pub(super) fn command(&mut self, key: &[u8], now: Instant) {
        self.roll(now);
        self.commands += 1;
        if let Some(c) = self.counters.get_mut(key) {
            c.0 += 1;
            return;
        }
        if self.counters.len() < self.capacity() {
            self.counters.insert(key.to_vec(), (1, 0));
            return;
        }
        // Space-Saving: the new key takes over the smallest counter.
        let Some((min_key, &(min, _))) = self.counters.iter().min_by_key(|(_, c)| c.0) else {
            return;
        };
        let min_key = min_key.clone();
        self.counters.remove(&min_key);
        self.counters.insert(key.to_vec(), (min + 1, min));
    }

    /// A reply of `bytes` to `command` on `key`.
    pub(super) fn reply(&mut self, key: &[u8], command: &str, bytes: u64, now: Instant) {
        self.roll(now);
        if let Some(e) = self.big.iter_mut().find(|e| e.0 == key) {
            if bytes > e.1 {
                e.1 = bytes;
                e.2 = command.to_string();
            }
            return;
        }
        if self.big.len() < self.n {
            self.big.push((key.to_vec(), bytes, command.to_string()));
            return;
        }
        if let Some(smallest) = self.big.iter_mut().min_by_key(|e| e.1) {
            if bytes > smallest.1 {
                *smallest = (key.to_vec(), bytes, command.to_string());
            }
        }
    }

    /// Closes the window if its time is up.
    pub(super) fn roll(&mut self, now: Instant) {
        if now.saturating_duration_since(self.window_start) < self.window {
            return;
        }
        let w = self.current();
        if w.commands > 0 || !w.big_values.is_empty() {
            if self.done.len() == WINDOWS_KEPT {
                self.done.remove(0);
            }
            self.done.push(w);
        }
        self.counters.clear();
        self.big.clear();
        self.commands = 0;
        // Windows stay aligned to the start, empty ones skipped.
        let behind = now.saturating_duration_since(self.window_start).as_nanos()
            / self.window.as_nanos().max(1);
        self.window_start += self.window * behind as u32;
    }

    /// The window being filled, as it stands.
    pub(super) fn current(&self) -> TopWindow {
        let mut hot: Vec<HotKey> = self
            .counters
            .iter()
            .map(|(k, &(commands, error))| HotKey {
                key: shown(k),
                commands,
                error,
            })
            .collect();
        hot.sort_by(|a, b| b.commands.cmp(&a.commands).then_with(|| a.key.cmp(&b.key)));
        hot.truncate(self.n);
        let mut big: Vec<BigValue> = self
            .big
            .iter()
            .map(|(k, bytes, command)| BigValue {
                key: shown(k),
                bytes: *bytes,
                command: command.clone(),
            })
            .collect();
        big.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
        TopWindow {
            start_s: self
                .window_start
                .saturating_duration_since(self.started)
                .as_secs_f64(),
            window_s: self.window.as_secs_f64(),
            commands: self.commands,
            hot_keys: hot,
            big_values: big,
        }
    }

    /// The windows done, then the one being filled (if it saw anything).
    pub(super) fn windows(&self) -> Vec<TopWindow> {
        let mut all = self.done.clone();
        let w = self.current();
        if w.commands > 0 || !w.big_values.is_empty() {
            all.push(w);
        }
        all
    }
}

/// The key `command` is about, for `top`: its first key as Redis's command table places it (a
/// data-type or key command's, a script's first key), never one of `AUTH`, `CONFIG`, ...
pub(super) fn key_of<'a>(cmd: &PluginCommand<'a>) -> Option<&'a [u8]> {
    cmd.key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hottest_keys_survive_many_cold_ones_in_bounded_memory() {
        let t0 = Instant::now();
        let mut top = Top::new(3, Duration::from_secs(10), t0);
        for i in 0..10_000u32 {
            // Three hot keys among 10,000 cold ones; each hot one is more than 1/12 of all
            // (Space-Saving's guarantee with 12 counters).
            for hot in ["a", "b", "c"] {
                if i % 4 == 0 {
                    top.command(hot.as_bytes(), t0);
                }
            }
            top.command(format!("cold:{i}").as_bytes(), t0);
        }
        assert!(top.counters.len() <= 12);
        let w = top.current();
        let keys: Vec<&str> = w.hot_keys.iter().map(|h| h.key.as_str()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b", "c"], "{w:?}");
        assert!(w.hot_keys.iter().all(|h| h.commands >= 2500), "{w:?}");
        assert_eq!(w.commands, 17_500);
    }

    #[test]
    fn big_values_keep_the_largest_per_key_and_windows_roll() {
        let t0 = Instant::now();
        let mut top = Top::new(2, Duration::from_secs(1), t0);
        top.reply(b"small", "GET", 10, t0);
        top.reply(b"big", "GET", 5000, t0);
        top.reply(b"big", "HGETALL", 9000, t0);
        top.reply(b"mid", "GET", 700, t0);
        let w = top.current();
        assert_eq!(
            w.big_values,
            vec![
                BigValue {
                    key: "big".into(),
                    bytes: 9000,
                    command: "HGETALL".into()
                },
                BigValue {
                    key: "mid".into(),
                    bytes: 700,
                    command: "GET".into()
                },
            ]
        );
        top.command(b"k", t0 + Duration::from_millis(2500));
        let all = top.windows();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].start_s, 0.0);
        assert_eq!(all[1].start_s, 2.0);
        assert_eq!(all[1].hot_keys[0].key, "k");
        assert!(all[1].big_values.is_empty());
    }
}
