//! The cluster's topology as one node tells it: which master owns each slot, read from
//! `CLUSTER SHARDS` (Redis 7), or from `CLUSTER SLOTS` where that is unknown. Asked on a
//! short-lived connection of its own, logged in as the upstream URL says.

use std::time::Duration;

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::upstream::Upstream;

/// The slots of a cluster.
pub(crate) const SLOTS: usize = 16384;

/// How long one topology query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(3);

/// A node's address, `host:port`.
pub(crate) type Addr = String;

/// The master of every slot (`None`: no node serves it).
#[derive(Debug, Clone)]
pub(crate) struct SlotMap {
    pub(crate) owner: Vec<Option<u16>>,
    /// The masters, each once; `owner` indexes into it.
    pub(crate) masters: Vec<Addr>,
}

impl SlotMap {
    /// A map of ranges `(start, end, master)`.
    pub(crate) fn from_ranges(ranges: &[(u16, u16, Addr)]) -> SlotMap {
        let mut map = SlotMap {
            owner: vec![None; SLOTS],
            masters: Vec::new(),
        };
        for (start, end, addr) in ranges {
            let i = map.index_of(addr);
            for s in *start..=(*end).min(SLOTS as u16 - 1) {
                map.owner[usize::from(s)] = Some(i);
            }
        }
        map
    }

    /// The index of master `addr`, added if new.
    pub(crate) fn index_of(&mut self, addr: &str) -> u16 {
        match self.masters.iter().position(|m| m == addr) {
            Some(i) => i as u16,
            None => {
                self.masters.push(addr.to_string());
                (self.masters.len() - 1) as u16
            }
        }
    }

    /// The master of `slot`.
    pub(crate) fn master(&self, slot: u16) -> Option<&str> {
        let i = (*self.owner.get(usize::from(slot))?)?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }

    /// Whether every slot has a master.
    pub(crate) fn covers_all(&self) -> bool {
        self.owner.iter().all(Option::is_some)
    }
}

/// Sends `args` as one command on a fresh connection to `node` and reads its reply.
pub(crate) async fn query(node: &Upstream, args: &[&str]) -> Result<Value, String> {
    let work = async {
        let mut conn = node.connect().await?;
        let mut wire = Vec::new();
        lockkit_resp::write_multibulk(&mut wire, args.iter().map(|a| a.as_bytes()));
        conn.write_all(&wire).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::with_capacity(4096);
        loop {
            match crate::resp::frame_len(&buf) {
                Ok(Some(n)) => {
                    return redis::parse_redis_value(&buf[..n]).map_err(|e| e.to_string());
                }
                Ok(None) => {}
                Err(e) => return Err(format!("{e:?}")),
            }
            if conn.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("connection closed".to_string());
            }
        }
    };
    match tokio::time::timeout(QUERY_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", QUERY_TIMEOUT.as_secs())),
    }
}

/// Whether `node` runs in cluster mode (`INFO cluster` says `cluster_enabled:1`).
pub(crate) async fn is_cluster(node: &Upstream) -> Result<bool, String> {
    match query(node, &["INFO", "cluster"]).await? {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(&b).contains("cluster_enabled:1")),
        Value::VerbatimString { text, .. } => Ok(text.contains("cluster_enabled:1")),
        Value::ServerError(e) => Err(format!("INFO: {e:?}")),
        _ => Ok(false),
    }
}

/// The topology as `node` tells it.
pub(crate) async fn fetch(node: &Upstream, host_of_node: &str) -> Result<SlotMap, String> {
    let ranges = match query(node, &["CLUSTER", "SHARDS"]).await? {
        Value::ServerError(_) => slots_ranges(&query(node, &["CLUSTER", "SLOTS"]).await?)?,
        v => shards_ranges(&v)?,
    };
    // A node that does not know its own address says an empty host: the one we reached it at.
    let ranges: Vec<_> = ranges
        .into_iter()
        .map(|(s, e, a)| {
            let a = match a.strip_prefix(':') {
                Some(port) => format!("{host_of_node}:{port}"),
                None => a,
            };
            (s, e, a)
        })
        .collect();
    Ok(SlotMap::from_ranges(&ranges))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

/// A flat list of pairs or a map, as pairs.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((text(&c[0])?, c.get(1)?)))
            .collect(),
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        _ => Vec::new(),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

fn slot(v: &Value) -> Option<u16> {
    int(v).and_then(|i| u16::try_from(i).ok())
}

/// `CLUSTER SHARDS`: each shard's slot ranges and its master that is online.
fn shards_ranges(v: &Value) -> Result<Vec<(u16, u16, Addr)>, String> {
    let mut out = Vec::new();
    for shard in items(v) {
        let fields = pairs(shard);
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let master = get("nodes")
            .map(items)
            .unwrap_or_default()
            .iter()
            .find_map(|n| {
                let f = pairs(n);
                let g = |k: &str| f.iter().find(|(n, _)| n == k).and_then(|(_, v)| text(v));
                let online = g("health").is_none_or(|h| h == "online");
                (g("role")? == "master" && online).then(|| {
                    let host = g("ip").or_else(|| g("endpoint")).unwrap_or_default();
                    let port = g("port").or_else(|| g("tls-port")).unwrap_or_default();
                    format!("{host}:{port}")
                })
            });
        let (Some(master), Some(slots)) = (master, get("slots")) else {
            continue;
        };
        for pair in items(slots).chunks(2) {
            if let [a, b] = pair {
                if let (Some(a), Some(b)) = (slot(a), slot(b)) {
                    out.push((a, b, master.clone()));
                }
            }
        }
    }
    if out.is_empty() {
        return Err("CLUSTER SHARDS names no master with slots".into());
    }
    Ok(out)
}

/// `CLUSTER SLOTS`: each range and its master (the first node).
fn slots_ranges(v: &Value) -> Result<Vec<(u16, u16, Addr)>, String> {
    let mut out = Vec::new();
    for range in items(v) {
        let r = items(range);
        let (Some(a), Some(b), Some(node)) = (r.first(), r.get(1), r.get(2)) else {
            continue;
        };
        let n = items(node);
        let host = n.first().and_then(text).unwrap_or_default();
        let port = n.get(1).and_then(int).unwrap_or_default();
        if let (Some(a), Some(b)) = (slot(a), slot(b)) {
            out.push((a, b, format!("{host}:{port}")));
        }
    }
    if out.is_empty() {
        return Err("CLUSTER SLOTS names no range".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_finds_each_slots_master() {
        let m = SlotMap::from_ranges(&[
            (0, 5460, "a:1".into()),
            (5461, 10922, "b:2".into()),
            (10923, 16383, "a:3".into()),
        ]);
        assert_eq!(m.master(0), Some("a:1"));
        assert_eq!(m.master(5461), Some("b:2"));
        assert_eq!(m.master(16383), Some("a:3"));
        assert!(m.covers_all());
        assert_eq!(m.masters.len(), 3);
    }
}
