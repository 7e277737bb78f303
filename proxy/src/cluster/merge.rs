//! How the replies of a request's parts, one per node, become its one reply ([`Merge`]):
//! counts added up, arrays put back in the order of the keys, SCAN's cursor made to name its
//! node, `INFO` summed ([`super::info`]).

use super::server::{array, elements};
use crate::resp;

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
    /// Made one by [`super::server`] (RANDOMKEY, SCRIPT EXISTS, ACL changes).
    By(super::server::Combine),
    /// SCAN on master `node` of `n`: its cursor made the client's.
    Scan { node: u64, n: u64 },
}

pub(super) fn bulk(a: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", a.len()).into_bytes();
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
    out
}

/// The one reply of a request's parts' `replies`, each `(node, its reply)`.
pub(super) fn merge(kind: Merge, replies: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    if let Merge::By(combine) = kind {
        return combine.merge(&replies);
    }
    let replies: Vec<Vec<u8>> = replies.into_iter().map(|(_, r)| r).collect();
    if let Some(e) = replies.iter().find(|r| r.first() == Some(&b'-')) {
        if !matches!(kind, Merge::One | Merge::Info) {
            return e.clone();
        }
    }
    match kind {
        Merge::One | Merge::First => replies.into_iter().next().unwrap_or_default(),
        Merge::Info => super::info::merge(&replies),
        // Made one above.
        Merge::By(_) => resp::error_reply("ERR lockkit proxy: no reply"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_merge_in_order() {
        let node = |r: &[u8]| ("127.0.0.1:7000".to_string(), r.to_vec());
        let replies = vec![
            node(b"*2\r\n$1\r\na\r\n$-1\r\n"),
            node(b"*1\r\n$1\r\nc\r\n"),
        ];
        let pick = Merge::Pick(vec![(0, 0), (1, 0), (0, 1)]);
        assert_eq!(merge(pick, replies), b"*3\r\n$1\r\na\r\n$1\r\nc\r\n$-1\r\n");
        let replies = vec![node(b":2\r\n"), node(b":3\r\n")];
        assert_eq!(merge(Merge::Sum, replies), b":5\r\n");
    }
}
