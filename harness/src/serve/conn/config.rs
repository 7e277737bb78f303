//! CONFIG GET / SET / RESETSTAT for the settings `lua serve` has, and `LOCKKIT.CLOCK`.

use std::time::Duration;

use super::{err, lossy, ServeConn};
use crate::commands::{glob_match, is};
use crate::reply::Reply;

impl ServeConn {
    /// CONFIG GET / SET / RESETSTAT for the settings the server has; `None`: the harness
    /// answers (HELP, and `not emulated` for the rest).
    pub(super) async fn config(&mut self, argv: &[Vec<u8>]) -> Option<Reply> {
        let sub = lossy(argv.get(1)?).to_ascii_lowercase();
        let maxmemory = match self.ctx.shared.maxmemory().await {
            Ok(m) => m,
            Err(busy) => return Some(busy),
        };
        match sub.as_str() {
            "get" if argv.len() >= 3 => Some(self.config_get(&argv[2..], maxmemory)),
            "set" if argv.len() >= 4 && argv.len().is_multiple_of(2) => {
                Some(self.config_set(&argv[2..], maxmemory).await)
            }
            "resetstat" if argv.len() == 2 => {
                self.ctx.shared.reset_stats();
                Some(Reply::ok())
            }
            _ => None,
        }
    }

    pub(super) fn settings(&self, maxmemory: usize) -> Vec<(&'static str, String)> {
        let ms = self.ctx.shared.busy_threshold().as_millis().to_string();
        let mut all = self.ctx.shared.tuning().pairs();
        all.extend([
            ("busy-reply-threshold", ms.clone()),
            ("lua-time-limit", ms),
            ("databases", "1".into()),
            ("maxmemory", maxmemory.to_string()),
            (
                "maxmemory-policy",
                self.ctx.shared.maxmemory_policy().into(),
            ),
            ("port", self.ctx.port.to_string()),
            ("save", String::new()),
            ("appendonly", "no".into()),
            ("notify-keyspace-events", self.ctx.shared.notify_events()),
        ]);
        all
    }

    pub(super) fn config_get(&self, patterns: &[Vec<u8>], maxmemory: usize) -> Reply {
        let pairs: Vec<(Reply, Reply)> = self
            .settings(maxmemory)
            .into_iter()
            .filter(|(k, _)| patterns.iter().any(|p| glob_match(p, k.as_bytes(), true)))
            .map(|(k, v)| (Reply::bulk(k), Reply::bulk(v)))
            .collect();
        Reply::Map(pairs)
    }

    pub(super) async fn config_set(&mut self, pairs: &[Vec<u8>], maxmemory: usize) -> Reply {
        let mut threshold = None;
        let mut memory = None;
        let mut replicas = None;
        let mut policy = None;
        let mut tuned = Vec::new();
        for kv in pairs.chunks(2) {
            let key = lossy(&kv[0]).to_ascii_lowercase();
            match super::super::tuning::check(&key, &kv[1]) {
                Some(Ok(set)) => {
                    tuned.push(set);
                    continue;
                }
                Some(Err(e)) => return err(e),
                None => {}
            }
            match key.as_str() {
                "min-replicas-to-write" => {
                    match crate::number::parse_i64(&kv[1]).filter(|v| (0..=i64::from(i32::MAX)).contains(v)) {
                        Some(v) => replicas = Some(v),
                        None => {
                            return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument couldn't be parsed into an integer"))
                        }
                    }
                }
                "maxmemory" => match super::super::memory_bytes(&kv[1]) {
                    Some(v) => memory = Some(v),
                    None => {
                        return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument must be a memory value"))
                    }
                },
                "busy-reply-threshold" | "lua-time-limit" => {
                    match crate::number::parse_i64(&kv[1]).filter(|v| *v >= 0) {
                        Some(v) => threshold = Some(Duration::from_millis(v as u64)),
                        None => {
                            return err(format!("ERR CONFIG SET failed (possibly related to argument '{key}') - argument couldn't be parsed into an integer"))
                        }
                    }
                }
                "maxmemory-policy" => policy = Some(kv[1].clone()),
                "notify-keyspace-events" => {
                    if !self.ctx.shared.set_notify(&kv[1]) {
                        return err("ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
                    }
                }
                _ => {
                    // Setting what the server already is changes nothing.
                    let same = self
                        .settings(maxmemory)
                        .iter()
                        .any(|(k, v)| *k == key && v.as_bytes() == kv[1].as_slice());
                    if !same {
                        return err(format!(
                            "ERR harness: CONFIG SET '{key}' is not emulated (only busy-reply-threshold, lua-time-limit, maxmemory, maxmemory-policy, min-replicas-to-write, notify-keyspace-events and the encoding thresholds)"
                        ));
                    }
                }
            }
        }
        for set in tuned {
            self.ctx.shared.tuning().set(set);
        }
        if let Some(t) = threshold {
            self.ctx.shared.set_busy_threshold(t);
        }
        if let Some(n) = replicas {
            if let Err(busy) = self.ctx.shared.set_min_replicas(n).await {
                return busy;
            }
        }
        if let Some(p) = policy {
            if let Err(e) = self.ctx.shared.set_maxmemory_policy(p).await {
                return e;
            }
        }
        if let Some(m) = memory {
            if let Err(busy) = self.ctx.shared.set_maxmemory(m).await {
                return busy;
            }
        }
        Reply::ok()
    }

    /// `LOCKKIT.CLOCK GET | ADVANCE ms | SET unix-ms`: the virtual clock without sleeping.
    pub(super) async fn clock(&mut self, argv: &[Vec<u8>]) -> Reply {
        let usage = || {
            err("ERR usage: LOCKKIT.CLOCK GET | LOCKKIT.CLOCK ADVANCE <milliseconds> | LOCKKIT.CLOCK SET <unix-milliseconds>")
        };
        let ms = |b: &[u8]| {
            crate::number::parse_i64(b)
                .filter(|v| *v >= 0)
                .map(|v| v as u64)
        };
        let (advance, set) = match argv {
            [_, sub] if is(sub, "get") => (None, None),
            [_, sub, v] if is(sub, "advance") => match ms(v) {
                Some(v) => (Some(v), None),
                None => return usage(),
            },
            [_, sub, v] if is(sub, "set") => match ms(v) {
                Some(v) => (None, Some(v)),
                None => return usage(),
            },
            _ => return usage(),
        };
        match self.ctx.shared.clock(advance, set).await {
            Ok(now) => Reply::Int(now),
            Err(busy) => busy,
        }
    }
}
