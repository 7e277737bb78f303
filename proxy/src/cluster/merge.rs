//! How the replies of a request's parts, one per node, become its one reply ([`Merge`]):
//! counts added up, arrays put back in the order of the keys, SCAN's cursor made to name its
//! node, `INFO` summed ([`super::info`]).

use crate::resp::{self, frame_len};

/// How the replies of a request's parts become its one reply.
#[derive(Debug)]
pub(super) enum Merge {
    /// One part, its reply as it is.
    One,
    /// Integers added up (DEL, EXISTS, DBSIZE, ...).
    Sum,
    /// Arrays put together: `(part, element)` for each element of the reply, in order (MGET).
    Pick(Vec<(usize, usize)>),
    /// Arrays one after the other (KEYS).
    Concat,
    /// The first error, else the first reply (MSET, FLUSHALL, SCRIPT LOAD, ...).
    First,
    /// INFO: the masters' counters added up, `cluster_enabled:0` ([`super::info`]).
    Info,
    /// Arrays of 0 and 1 made one: 1 where every reply has 1, or where `known` says so (SCRIPT
    /// EXISTS: a script whose body the proxy keeps runs by `EVALSHA` on any master).
    Every { known: Vec<bool> },
    /// SCAN on master `node` of `n`: its cursor made the client's.
    Scan { node: u64, n: u64 },
    /// One of the replies that are not null, drawn at random (RANDOMKEY); null when all are.
    AnyOne,
}

pub(super) fn bulk(a: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", a.len()).into_bytes();
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
    out
}

/// The elements of an array reply (`None`: not an array).
pub(super) fn elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
    if reply.first() != Some(&b'*') {
        return None;
    }
    let end = lockkit::resp::find_crlf(reply, 0)?;
    let n = resp::parse_int(&reply[1..end])?;
    let mut pos = end + 2;
    let mut out = Vec::new();
    for _ in 0..n.max(0) {
        let l = frame_len(&reply[pos..]).ok().flatten()?;
        out.push(&reply[pos..pos + l]);
        pos += l;
    }
    Some(out)
}

pub(super) fn merge(kind: Merge, replies: Vec<Vec<u8>>) -> Vec<u8> {
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        if !matches!(kind, Merge::One | Merge::Info) {
            return e.clone();
        }
    }
    match kind {
        Merge::One | Merge::First => replies.into_iter().next().unwrap_or_default(),
        Merge::AnyOne => {
            let null = |r: &Vec<u8>| matches!(r.as_slice(), b"$-1\r\n" | b"_\r\n");
            if replies.iter().all(null) {
                return replies.into_iter().next().unwrap_or_default();
            }
            let mut some: Vec<Vec<u8>> = replies.into_iter().filter(|r| !null(r)).collect();
            // Any draw will do: the nodes' own draws are random.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as usize);
            let at = nanos % some.len();
            some.swap_remove(at)
        }
        Merge::Info => super::info::merge(&replies),
        Merge::Every { known } => {
            let all: Vec<Vec<&[u8]>> = (replies.iter())
                .map(|r| elements(r).unwrap_or_default())
                .collect();
            let n = all.first().map_or(0, Vec::len);
            let one: &[u8] = b":1\r\n";
            let merged: Vec<&[u8]> = (0..n)
                .map(|i| {
                    let everywhere = all.iter().all(|a| a.get(i).copied() == Some(one));
                    if everywhere || known.get(i).copied().unwrap_or(false) {
                        one
                    } else {
                        &b":0\r\n"[..]
                    }
                })
                .collect();
            array(&merged)
        }
        Merge::Scan { node, n } => {
            let r = replies.into_iter().next().unwrap_or_default();
            let Some(items) = elements(&r) else { return r };
            let (Some(cur), Some(keys)) = (items.first(), items.get(1)) else {
                return r;
            };
            let cur = match resp::reply_kind(cur) {
                resp::ReplyKind::Bulk(b) => std::str::from_utf8(b)
                    .ok()
                    .and_then(|c| c.parse::<u64>().ok()),
                _ => None,
            };
            let Some(cur) = cur else { return r };
            let next = if cur != 0 {
                cur.saturating_mul(n).saturating_add(node)
            } else if node + 1 < n {
                node + 1
            } else {
                0
            };
            let mut out = b"*2\r\n".to_vec();
            out.extend_from_slice(&bulk(next.to_string().as_bytes()));
            out.extend_from_slice(keys);
            out
        }
        Merge::Sum => {
            let total: i64 = (replies.iter())
                .map(|r| match resp::reply_kind(r) {
                    resp::ReplyKind::Int(i) => i,
                    _ => 0,
                })
                .sum();
            format!(":{total}\r\n").into_bytes()
        }
        Merge::Concat => {
            let all: Vec<&[u8]> = replies
                .iter()
                .flat_map(|r| elements(r).unwrap_or_default())
                .collect();
            array(&all)
        }
        Merge::Pick(pick) => {
            let parts: Vec<Vec<&[u8]>> = replies
                .iter()
                .map(|r| elements(r).unwrap_or_default())
                .collect();
            let all: Option<Vec<&[u8]>> = (pick.iter())
                .map(|&(p, e)| parts.get(p).and_then(|x| x.get(e)).copied())
                .collect();
            match all {
                Some(all) => array(&all),
                None => resp::error_reply("ERR lockkit proxy: a node's reply did not fit its keys"),
            }
        }
    }
}

fn array(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        out.extend_from_slice(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_merge_in_order() {
        let replies = vec![
            b"*2\r\n$1\r\na\r\n$-1\r\n".to_vec(),
            b"*1\r\n$1\r\nc\r\n".to_vec(),
        ];
        let pick = Merge::Pick(vec![(0, 0), (1, 0), (0, 1)]);
        assert_eq!(merge(pick, replies), b"*3\r\n$1\r\na\r\n$1\r\nc\r\n$-1\r\n");
        let replies = vec![b":2\r\n".to_vec(), b":3\r\n".to_vec()];
        assert_eq!(merge(Merge::Sum, replies), b":5\r\n");
    }
}
