//! Server-wide commands that no one master answers as the one server a client sees, asked of
//! every master and their replies made one ([`Combine`]):
//!
//! - `RANDOMKEY`: every master is asked; the answer is one of the keys they gave, picked at
//!   random (each master that has keys equally likely, whatever its size), nil only when every
//!   master is empty.
//! - `SCRIPT EXISTS`: 1 for a script that every master has, or that one master has and whose
//!   body the proxy keeps (an `EVALSHA` of it loads it on a master that lacks it, so it runs
//!   on keys of any master, [`super::Router::script`]); 0 otherwise.
//! - `ACL` changes (`SETUSER`, `DELUSER`, `LOAD`, `SAVE`, `LOG RESET`) go to every master: the
//!   reply when all give the same, else an error naming each master and its reply. The other
//!   `ACL` subcommands (`GETUSER`, `USERS`, `LIST`, `CAT`, `WHOAMI`, `DRYRUN`, `LOG`, ...) are
//!   read on one master, as any keyless command.

use lockkit_resp::Request;

use crate::resp::{self, frame_len};

/// `ACL` subcommands sent to every master.
const ACL_EVERY_MASTER: [&str; 4] = ["ACL|SETUSER", "ACL|DELUSER", "ACL|LOAD", "ACL|SAVE"];

/// How the masters' replies to one of these commands become its reply.
#[derive(Debug)]
pub(crate) enum Combine {
    /// `RANDOMKEY`: a random one of the keys given.
    Random,
    /// `SCRIPT EXISTS`: whether the proxy keeps the body of each script asked about.
    Exists(Vec<bool>),
    /// The same reply from every master, else an error naming them (`what`: the command).
    Agree(String),
}

/// How the masters' replies to `req` (of row `name`) are made one, when it is one of this
/// module's commands, sent to every master (`None`: routed as any other); `known`: whether the
/// proxy keeps the body of a script, by its SHA1 in lower case.
pub(crate) fn combine(
    name: &str,
    req: &Request,
    bytes: &[u8],
    known: impl Fn(&str) -> bool,
) -> Option<Combine> {
    Some(match name {
        "RANDOMKEY" => Combine::Random,
        "SCRIPT|EXISTS" => Combine::Exists(
            (2..req.argc())
                .map(|i| {
                    let sha = String::from_utf8_lossy(req.arg(bytes, i).unwrap_or_default());
                    known(&sha.to_lowercase())
                })
                .collect(),
        ),
        "ACL|LOG" => {
            let arg = req.arg(bytes, 2);
            if !arg.is_some_and(|a| a.eq_ignore_ascii_case(b"RESET")) {
                return None;
            }
            Combine::Agree("ACL LOG RESET".to_string())
        }
        n if ACL_EVERY_MASTER.contains(&n) => Combine::Agree(n.replace('|', " ")),
        _ => return None,
    })
}

impl Combine {
    /// The one reply of `replies`, each `(master, its reply)`.
    pub(crate) fn merge(self, replies: &[(String, Vec<u8>)]) -> Vec<u8> {
        let first_error = || replies.iter().find(|(_, r)| r.first() == Some(&b'-'));
        match self {
            Combine::Random => {
                let keys: Vec<&Vec<u8>> = (replies.iter())
                    .map(|(_, r)| r)
                    .filter(|r| r.first() == Some(&b'$') && !r.starts_with(b"$-1\r\n"))
                    .collect();
                if !keys.is_empty() {
                    return keys[rand::random_range(0..keys.len())].clone();
                }
                first_error()
                    .or(replies.first())
                    .map(|(_, r)| r.clone())
                    .unwrap_or_default()
            }
            Combine::Exists(known) => {
                if let Some((_, e)) = first_error() {
                    return e.clone();
                }
                let all: Vec<Vec<&[u8]>> = (replies.iter())
                    .map(|(_, r)| elements(r).unwrap_or_default())
                    .collect();
                let one: &[u8] = b":1\r\n";
                let merged: Vec<&[u8]> = (0..known.len())
                    .map(|i| {
                        let has = all
                            .iter()
                            .filter(|a| a.get(i).copied() == Some(one))
                            .count();
                        if has > 0 && (has == all.len() || known[i]) {
                            one
                        } else {
                            &b":0\r\n"[..]
                        }
                    })
                    .collect();
                array(&merged)
            }
            Combine::Agree(what) => {
                let Some((_, first)) = replies.first() else {
                    return resp::error_reply("ERR lockkit proxy: no master answered");
                };
                if replies.iter().all(|(_, r)| r == first) {
                    return first.clone();
                }
                let shown: Vec<String> = (replies.iter())
                    .map(|(addr, r)| format!("{addr} answered {}", one_line(r)))
                    .collect();
                resp::error_reply(&format!(
                    "ERR lockkit proxy: the masters answered {what} differently: {}",
                    shown.join(", ")
                ))
            }
        }
    }
}

/// The elements of an array reply (`None`: not an array).
pub(crate) fn elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
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

/// An array of `items`, each a whole reply.
pub(crate) fn array(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        out.extend_from_slice(i);
    }
    out
}

/// A reply as one short line of text.
fn one_line(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    let text = text.trim_end().replace("\r\n", " ");
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(replies: &[&[u8]]) -> Vec<(String, Vec<u8>)> {
        (replies.iter().enumerate())
            .map(|(i, r)| (format!("127.0.0.1:{}", 7000 + i), r.to_vec()))
            .collect()
    }

    #[test]
    fn randomkey_is_nil_only_when_every_master_is() {
        let nil: &[u8] = b"$-1\r\n";
        assert_eq!(Combine::Random.merge(&from(&[nil, nil])), nil);
        assert_eq!(
            Combine::Random.merge(&from(&[nil, b"$1\r\nk\r\n", nil])),
            b"$1\r\nk\r\n"
        );
    }

    #[test]
    fn script_exists_counts_the_scripts_the_proxy_can_load() {
        let a: &[u8] = b"*3\r\n:1\r\n:1\r\n:0\r\n";
        let b: &[u8] = b"*3\r\n:1\r\n:0\r\n:0\r\n";
        let known = Combine::Exists(vec![false, true, true]);
        assert_eq!(known.merge(&from(&[a, b])), b"*3\r\n:1\r\n:1\r\n:0\r\n");
        let unknown = Combine::Exists(vec![false, false, false]);
        assert_eq!(unknown.merge(&from(&[a, b])), b"*3\r\n:1\r\n:0\r\n:0\r\n");
    }

    #[test]
    fn acl_changes_answer_alike_or_name_the_masters() {
        let agree = Combine::Agree("ACL DELUSER".into());
        assert_eq!(agree.merge(&from(&[b":1\r\n", b":1\r\n"])), b":1\r\n");
        let agree = Combine::Agree("ACL DELUSER".into());
        let e = agree.merge(&from(&[b":0\r\n", b":1\r\n"]));
        let e = String::from_utf8(e).unwrap();
        assert!(e.starts_with("-ERR lockkit proxy: the masters answered ACL DELUSER differently: 127.0.0.1:7000 answered :0, 127.0.0.1:7001 answered :1\r\n"), "{e}");
    }
}
